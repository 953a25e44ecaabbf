"""The warm process: one Python that has imported torch, timm, torchvision and the stages, and
forks a child for each job that a `leaner` client hands it (leaner/running/handoff.py).

A local Snakemake run starts one (leaner/run_hooks.py, at `onstart`) and stops it when the run ends; it
also ends by itself once the Snakemake that started it is gone and its last child has ended. It
never computes: it pins the run's numerics before torch loads, as a fresh job would, and then
only imports, so that every child starts from the state a fresh process reaches after the same
imports (no CUDA context, no thread pool, the random generators untouched). A child adopts its
client's standard streams, working folder, environment and argv, runs `cli.main`, and dies with
its client (a watchdog thread reads the socket: a signal number forwards that signal, the
socket's end is the client's death and kills the child).

    python -m leaner.warm --socket PATH --numerics pinned
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import pkgutil
import random
import select
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from pathlib import Path

from .running.handoff import ENV, WATCH_S, environment_differences, identity, send_message

# what the warm commands import (measured: a child of these imports nothing more for a ViT, P2 or
# sequence job); no module here may start a Python thread or touch CUDA at import (a forked child
# has only the thread that forked). Native threads the imports start, which their libraries start
# again in a forked child: OpenBLAS's pool (numpy's BLAS; its fork handler) and jemalloc's
# background thread (pyarrow's allocator, which pandas loads). tests/test_warm.py checks both, and
# a warm process whose imports started a Python thread refuses every job, saying so.
PRELOAD = ("torch", "timm", "torchvision", "numpy", "pandas", "psutil", "torch.utils.tensorboard", "leaner.cli",
           "leaner.training.train", "leaner.training.tracking", "leaner.measure.conditioning",
           "leaner.measure.jacobian", "leaner.measure.theory")
PRELOAD_PACKAGES = ("leaner.models", "leaner.tasks", "leaner.data")  # every module in them
READY_S = 10.0  # how long `start` waits for the socket to appear
STOP_WAIT_S = 10.0


def preload() -> None:
    for name in PRELOAD:
        importlib.import_module(name)
    for name in PRELOAD_PACKAGES:
        package = importlib.import_module(name)
        for info in pkgutil.iter_modules(package.__path__, name + "."):
            importlib.import_module(info.name)


def _receive(conn: socket.socket) -> tuple[dict, list[int]]:
    """A client's request (one JSON line) and the standard streams that came with it."""
    data, fds, _flags, _addr = socket.recv_fds(conn, 1 << 20, 3)
    while data and not data.endswith(b"\n"):
        more = conn.recv(1 << 20)
        if not more:
            break
        data += more
    return json.loads(data), list(fds)


def _refusal(request: dict, me: dict, env: dict, fds: list[int], threads: list[str]) -> str | None:
    """Why the warm process cannot run this job as a fresh process would (None: it can)."""
    if len(fds) != 3:
        return f"{len(fds)} standard streams came, 3 are needed"
    if threads:
        return f"its imports started threads a forked child would lack ({', '.join(threads)})"
    wrong = [f"{key} {request.get(key)!r} (warm: {value!r})" for key, value in me.items() if request.get(key) != value]
    differ = environment_differences(request.get("env", {}), env)
    if differ:
        shown = ", ".join(differ[:6]) + (f" and {len(differ) - 6} more" if len(differ) > 6 else "")
        wrong.append(f"the environment differs from the warm process's in {shown} (a library may read it when it "
                     f"loads)")
    return "; ".join(wrong) or None


def _stop_with(client: int) -> None:
    """In a child: stop when its job is stopped (SIGSTOP, which the job cannot catch and pass on);
    the job's SIGCONT continues the child."""
    import psutil

    try:
        job = psutil.Process(client)
        while True:
            time.sleep(WATCH_S)
            if job.status() == psutil.STATUS_STOPPED:
                os.kill(os.getpid(), signal.SIGSTOP)
    except psutil.Error:
        return  # the job is gone: the watchdog ends the child


def _watchdog(conn: socket.socket) -> None:
    """In a child: deliver the signals its client forwards; the client's end is the child's."""
    while True:
        try:
            data = conn.recv(64)
        except OSError:
            data = b""
        if not data:
            os.kill(os.getpid(), signal.SIGKILL)
        for signum in data:
            os.kill(os.getpid(), signum)


def apply_thread_counts(environ) -> None:
    """The job's thread counts, which a fresh process's libraries read when they load: torch's
    (OpenMP and MKL: OMP_NUM_THREADS, else MKL_NUM_THREADS) and numpy's BLAS (OPENBLAS_NUM_THREADS).
    Unset, the warm process's defaults are a fresh process's. `--threads` sets torch's again later."""
    import torch
    from threadpoolctl import threadpool_limits

    def count(name: str) -> int | None:
        value = environ.get(name, "")
        return int(value) if value.isdigit() and int(value) > 0 else None

    torch_threads, blas_threads = count("OMP_NUM_THREADS") or count("MKL_NUM_THREADS"), count("OPENBLAS_NUM_THREADS")
    if torch_threads:
        torch.set_num_threads(torch_threads)
    if blas_threads:
        threadpool_limits(limits=blas_threads, user_api="blas")


def _run_child(conn: socket.socket, request: dict, fds: list[int]) -> int:
    """In a forked child: become the client's job and run it; its exit code."""
    for target, fd in zip((0, 1, 2), fds):
        os.dup2(fd, target)
        os.close(fd)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    tempfile.tempdir = None  # read $TMPDIR again: Snakemake sets it per job
    sys.argv = ["leaner", *request["argv"]]
    apply_thread_counts(os.environ)
    random.seed()  # a fresh process's Python generator is seeded from the OS, not from its parent
    if "numpy" in sys.modules:
        sys.modules["numpy"].random.seed()
    threading.Thread(target=_watchdog, args=(conn,), daemon=True).start()
    if request.get("client"):
        threading.Thread(target=_stop_with, args=(request["client"],), daemon=True).start()
    from .cli import main

    try:
        code = main(request["argv"])
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        if isinstance(exc.code, str):
            print(exc.code, file=sys.stderr)
    except BaseException:  # what a fresh interpreter would print before exiting 1
        traceback.print_exc()
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    return code


def _ending(status: int, usage, wall_s: float) -> dict:
    code = os.waitstatus_to_exitcode(status)
    end = {"signal": -code} if code < 0 else {"exit": code}
    end.update(cpu_s=round(usage.ru_utime + usage.ru_stime, 3), peak_mb=round(usage.ru_maxrss / 1024, 1),
               wall_s=round(wall_s, 3))
    return end


class Server:
    def __init__(self, path: str, numerics: str):
        self.path, self.numerics = path, numerics
        self.children: dict[int, socket.socket] = {}
        self.forked: dict[int, float] = {}  # a child's start (time.monotonic)
        self.stopping = False
        self.parent = os.getppid()
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.wake_r, self.wake_w = socket.socketpair()

    def open(self) -> None:
        """Listen before the imports: clients queue on the socket while they run."""
        if os.path.exists(self.path):
            os.unlink(self.path)
        self.listener.bind(self.path)
        self.listener.listen(64)
        for s in (self.wake_r, self.wake_w):
            s.setblocking(False)
        signal.set_wakeup_fd(self.wake_w.fileno())
        signal.signal(signal.SIGCHLD, lambda *_: None)
        signal.signal(signal.SIGTERM, self._stop)
        signal.signal(signal.SIGINT, self._stop)

    def _stop(self, *_):
        self.stopping = True

    def serve(self) -> None:
        from .compute.numerics import pin

        me, env = identity(self.numerics), dict(os.environ)  # as the jobs bring them, before the pin sets its own
        pin(self.numerics)
        started = time.perf_counter()
        preload()
        self.me, self.env = me, env
        self.threads = [t.name for t in threading.enumerate() if t is not threading.main_thread()]
        if self.threads:
            print(f"leaner warm: the imports started threads ({', '.join(self.threads)}): every job runs cold",
                  file=sys.stderr, flush=True)
        print(f"leaner warm: serving {self.path} (pid {os.getpid()}, numerics {self.numerics}, "
              f"imports {time.perf_counter() - started:.1f} s)", file=sys.stderr, flush=True)
        while True:
            if self.stopping or os.getppid() != self.parent:
                self._close_listener()
                if not self.children:
                    break
            readable, _, _ = select.select([s for s in (self.listener, self.wake_r) if s.fileno() >= 0], [], [], 1.0)
            if self.wake_r in readable:
                try:
                    self.wake_r.recv(4096)
                except BlockingIOError:
                    pass
            if self.listener in readable and self.listener.fileno() >= 0:
                conn, _ = self.listener.accept()
                self._start_child(conn)
            self._reap()
        print("leaner warm: stopped", file=sys.stderr, flush=True)

    def _close_listener(self) -> None:
        if self.listener.fileno() >= 0:
            self.listener.close()
            try:
                os.unlink(self.path)
            except FileNotFoundError:
                pass

    def _start_child(self, conn: socket.socket) -> None:
        try:
            request, fds = _receive(conn)
        except (OSError, ValueError) as exc:
            print(f"leaner warm: a request could not be read ({exc})", file=sys.stderr, flush=True)
            conn.close()
            return
        why = _refusal(request, self.me, self.env, fds, self.threads)
        if why:
            for fd in fds:
                os.close(fd)
            send_message(conn, {"refused": why})
            conn.close()
            return
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                self.listener.close()
                signal.set_wakeup_fd(-1)
                self.wake_r.close()
                self.wake_w.close()
                for signum in (signal.SIGCHLD, signal.SIGTERM, signal.SIGINT):
                    signal.signal(signum, signal.SIG_DFL)
                for other in self.children.values():
                    other.close()
                code = _run_child(conn, request, fds)
            finally:
                os._exit(code)
        for fd in fds:
            os.close(fd)
        self.children[pid] = conn
        self.forked[pid] = time.monotonic()
        try:
            send_message(conn, {"pid": pid})
        except OSError:
            pass  # the client is gone: the child's watchdog ends it

    def _reap(self) -> None:
        while self.children:
            try:
                pid, status, usage = os.wait4(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            conn = self.children.pop(pid, None)
            started = self.forked.pop(pid, None)
            if conn is None:
                continue
            try:
                send_message(conn, _ending(status, usage, time.monotonic() - started))
            except OSError:
                pass
            conn.close()


def socket_path() -> str:
    """A socket of this user, short enough for AF_UNIX (108 bytes)."""
    folder = Path(tempfile.gettempdir()) / f"leaner-warm-{os.getuid()}"
    folder.mkdir(mode=0o700, exist_ok=True)
    return str(folder / f"{os.getpid()}-{int(time.time() * 1000) % 10**9}.sock")


def start(numerics: str, log: str | Path) -> subprocess.Popen | None:
    """Start a warm process for the jobs this process will start (it sets $LEANER_WARM), unless
    $LEANER_WARM is `off`; None when it is off or did not come up."""
    if os.environ.get(ENV) == "off":
        return None
    path = socket_path()
    Path(log).parent.mkdir(parents=True, exist_ok=True)
    with open(log, "a") as out:
        proc = subprocess.Popen([sys.executable, "-m", "leaner.warm", "--socket", path, "--numerics", numerics],
                                stdin=subprocess.DEVNULL, stdout=out, stderr=out, start_new_session=True)
    deadline = time.monotonic() + READY_S
    while not os.path.exists(path):
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            print(f"leaner: the warm process did not start (see {log}); every job runs cold", file=sys.stderr)
            return None
        time.sleep(0.02)
    os.environ[ENV] = path
    return proc


def stop(proc: subprocess.Popen | None) -> None:
    """Ask the warm process to stop: it stops taking jobs and ends when its last child has (waited
    for up to STOP_WAIT_S)."""
    os.environ.pop(ENV, None)
    if proc is not None and proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=STOP_WAIT_S)
        except subprocess.TimeoutExpired:
            pass


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m leaner.warm", description=__doc__.splitlines()[0])
    p.add_argument("--socket", required=True)
    p.add_argument("--numerics", required=True)
    args = p.parse_args(argv)
    server = Server(args.socket, args.numerics)
    server.open()
    server.serve()
    return 0


if __name__ == "__main__":
    sys.exit(main())
