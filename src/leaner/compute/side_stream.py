"""Work the training stream waits for by an event, not by the host: a batch decoded and augmented on
a CUDA stream of its own while the kernels of the step before it still run on the training stream.

`SideStream(device).run(fn, *args)` calls fn on the side stream (its allocations come from that
stream's pool), records an event there, makes the caller's stream wait for it on the device, and
marks the tensors it returns as used by the caller's stream (`record_stream`), so that the caching
allocator does not hand their memory out again before the kernels that read them have run. The host
waits for nothing on the training stream: what fn itself waits for (the JPEG decoder's barriers on
the current stream, tensor_augment.DeviceTransforms) is the side stream's own work.

Nothing is read ahead: fn runs when the training loop asks for the batch, after it queued the step
before, so the host draws every random number in the same order as without a side stream and the
batches are the same bits; the overlap comes from the host running ahead of the GPU. On a device
other than CUDA, fn is called as it is."""

from __future__ import annotations

import torch


class SideStream:
    def __init__(self, device: torch.device):
        self.stream = torch.cuda.Stream(device) if device.type == "cuda" else None

    def run(self, fn, *args) -> tuple:
        """fn(*args) on the side stream, its tensors ordered before the caller's stream's next work."""
        if self.stream is None:
            return fn(*args)
        caller = torch.cuda.current_stream(self.stream.device)
        with torch.cuda.stream(self.stream):
            out = fn(*args)
            done = torch.cuda.Event()
            done.record(self.stream)
        caller.wait_event(done)
        for t in out:
            if isinstance(t, torch.Tensor) and t.is_cuda:
                t.record_stream(caller)
        return out
