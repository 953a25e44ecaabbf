"""Batches made ahead of the step that will use them: on a thread of its own and, on CUDA, a stream of
its own, so that the host never waits for the training stream and the training stream waits only, on
the device, for the batch it is about to read.

`read_ahead(make, items, device, depth)` yields make(item) for each item of `items`, in order. With
depth 0 it calls make as each item is asked for (the CPU's path: there the step and the making share
the same cores). With depth d > 0 a thread keeps up to d made items waiting: it pulls the next item
(a loader's batch), calls make on it with a side stream current (its kernels and allocations on that
stream), records an event there, and queues the result. The consumer makes its own current stream
wait for that event on the device and marks the result's tensors as used by that stream
(`record_stream`, so the caching allocator does not hand their memory out again before the step's
kernels have read them). What make waits for itself (the JPEG decoder's barriers on the current
stream: data/tensor_augment.py) is the side stream's own work, on the thread, never the step's.

A made item must not depend on when it is made: everything random in it comes from its own seed
(data/tensor_augment.py), so reading ahead changes no bit, and a resumed run makes what an
uninterrupted one did. An exception in make or in `items` reaches the consumer at that item.
Closing the generator stops the thread and waits for it (it holds the loader it pulls from).
"""

from __future__ import annotations

import contextlib
import queue
import threading
from collections.abc import Callable, Iterable, Iterator

import torch

_END = object()


class _Failed:
    def __init__(self, exc: BaseException):
        self.exc = exc


def read_ahead(make: Callable, items: Iterable, device: torch.device, depth: int) -> Iterator:
    """make(item) for each of `items`, made up to `depth` items ahead on a thread (and CUDA stream)
    of its own; depth 0: made when asked for."""
    if depth <= 0:
        for item in items:
            yield make(item)
        return
    made: queue.Queue = queue.Queue(maxsize=depth)
    stop = threading.Event()
    side = torch.cuda.Stream(device) if device.type == "cuda" else None

    def put(entry) -> bool:
        while not stop.is_set():
            try:
                made.put(entry, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def work() -> None:
        if side is not None:
            torch.cuda.set_device(device)  # this thread's device: a new thread's is GPU 0 (another rank's)
        try:
            with torch.cuda.stream(side) if side is not None else contextlib.nullcontext():
                for item in items:
                    out = make(item)
                    done = None
                    if side is not None:
                        done = torch.cuda.Event()
                        done.record(side)
                    if not put((out, done)):
                        return
        except BaseException as exc:  # noqa: BLE001  (handed to the consumer, raised there)
            put((_Failed(exc), None))
            return
        put((_END, None))

    thread = threading.Thread(target=work, name="leaner-read-ahead", daemon=True)
    thread.start()
    try:
        while True:
            out, done = made.get()
            if out is _END:
                return
            if isinstance(out, _Failed):
                raise out.exc
            if done is not None:
                caller = torch.cuda.current_stream(device)
                caller.wait_event(done)
                for t in out:
                    if isinstance(t, torch.Tensor) and t.is_cuda:
                        t.record_stream(caller)
            yield out
    finally:
        stop.set()
        thread.join()  # it finishes the item it makes (it holds the loader it pulls from), then sees stop
