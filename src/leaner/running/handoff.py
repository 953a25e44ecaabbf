"""The client half of the warm start: a `leaner` job hands its command to a warm process.

Each training, conditioning or theory job of a local run used to start a fresh Python and import
torch, timm and torchvision before its first step: 2-5 s of CPU a job, a third of the default
study's CPU time. A warm process (leaner/warm.py), started once per Snakemake run, has imported
them already and forks one child per job. The job itself stays what Snakemake started (its own
rule, outputs, log, retries and kill): this client, which imports no torch, passes its argv,
working folder, environment and standard streams to the warm process over a Unix socket, forwards
the signals it gets to the child, and exits with the child's exit status. The child runs
`cli.main` exactly as a fresh process would (tests/test_warm.py checks the bits).

A job runs cold (in this process) whenever the warm process cannot serve it the same way:
$LEANER_WARM unset or `off`; a Slurm job (a forked child would run outside the job's allocation);
a torchrun rank; a command other than train, conditioning and theory; a warm process of another
interpreter, package, code version or numerics mode. A refusal is one line in the job's log.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import socket
import sys
from pathlib import Path

ENV = "LEANER_WARM"  # the warm process's socket; unset or "off": every job runs cold
WARM_COMMANDS = ("train", "conditioning", "theory")  # the stages that load torch and compute
FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2)
PACKAGE = Path(__file__).resolve().parents[1]  # the leaner package


def code_stamp(package: Path = PACKAGE) -> str:
    """A digest of the package's source files (path, size, modification time): a warm process
    serves only jobs of the code it loaded."""
    digest = hashlib.sha1()
    for path in sorted(package.rglob("*.py")):
        st = path.stat()
        digest.update(f"{path.relative_to(package)}:{st.st_size}:{st.st_mtime_ns}\n".encode())
    return digest.hexdigest()[:16]


def numerics_of(argv: list[str]) -> str:
    """The numerics mode a command asks for (`--numerics`), or the CLI's default."""
    from ..compute.numerics import DEFAULT_MODE

    for i, arg in enumerate(argv):
        if arg == "--numerics" and i + 1 < len(argv):
            return argv[i + 1]
        if arg.startswith("--numerics="):
            return arg.partition("=")[2]
    return DEFAULT_MODE


# variables that libraries read when they load or first compute (MKL's and OpenMP's dispatch,
# ATen's capability, oneDNN's ISA, glibc's malloc, the interpreter's own): a job runs warm only
# where its own are the warm process's (CUDA's are read in the child, when it starts CUDA). Thread
# counts (*_NUM_THREADS, which Snakemake sets per job) are not compared: the child applies its
# job's (warm.apply_thread_counts), as a fresh process reads them when its libraries load.
LOAD_TIME_ENV = ("MKL_", "OMP_", "KMP_", "GOMP_", "ATEN_", "DNNL_", "ONEDNN_", "OPENBLAS_", "MALLOC_", "LD_",
                 "PYTHON", "TORCH_")
THREAD_COUNTS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")


def load_time_env(environ) -> str:
    digest = hashlib.sha1()
    for key in sorted(k for k in environ if k.startswith(LOAD_TIME_ENV) and k not in THREAD_COUNTS):
        digest.update(f"{key}={environ[key]}\n".encode())
    return digest.hexdigest()[:16]


def identity(numerics: str, environ=os.environ) -> dict:
    """What must be the same in a job and the warm process that runs it."""
    return {"python": sys.executable, "package": str(PACKAGE), "code": code_stamp(), "numerics": numerics,
            "load_env": load_time_env(environ)}


def cold_reason(argv: list[str], environ) -> str | None:
    """Why this command runs cold without asking (None: ask the warm process)."""
    if environ.get(ENV, "off") in ("", "off"):
        return "no warm process"
    if environ.get("SLURM_JOB_ID"):
        return "a Slurm job runs inside its own allocation"
    if "LOCAL_RANK" in environ:
        return "a torchrun rank"
    if not argv or argv[0] not in WARM_COMMANDS:
        return f"only {', '.join(WARM_COMMANDS)} run warm"
    return None


def send_message(sock: socket.socket, message: dict, fds: list[int] | None = None) -> None:
    data = json.dumps(message).encode() + b"\n"
    if fds:
        socket.send_fds(sock, [data], fds)
    else:
        sock.sendall(data)


def read_message(stream) -> dict | None:
    """The next message (one JSON line) from a socket's file, or None at its end."""
    line = stream.readline()
    return json.loads(line) if line else None


def hand_off(argv: list[str], environ=os.environ) -> int | None:
    """Run `leaner <argv>` in the warm process and return its exit status, or None where this job
    must run cold (why goes to stderr when the warm process was asked and refused)."""
    if cold_reason(argv, environ):
        return None
    path = environ[ENV]
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(path)
        request = {"argv": argv, "cwd": os.getcwd(), "env": dict(environ), **identity(numerics_of(argv), environ)}
        send_message(sock, request, [0, 1, 2])
        replies = sock.makefile("rb")
        answer = read_message(replies)
    except OSError as exc:
        sock.close()
        print(f"leaner: the warm process at {path} does not answer ({exc}); running cold", file=sys.stderr)
        return None
    if not answer or "pid" not in answer:
        sock.close()
        why = answer.get("refused") if answer else "it closed the connection"
        print(f"leaner: the warm process refused this job ({why}); running cold", file=sys.stderr)
        return None
    return _follow(sock, replies, answer["pid"])


WARM_LINE = "leaner warm: ran in the warm process"  # the job's last log line; analysis/tables.py reads it


def _follow(sock: socket.socket, replies, pid: int) -> int:
    """Forward this process's signals to the warm child until the warm process reports how the
    child ended; end the same way (its exit code, or death by its signal). The child's CPU time and
    peak memory end the job's log: Snakemake's benchmark of this job sees only this client."""

    def forward(signum, _frame):
        try:
            sock.sendall(bytes([signum]))
        except OSError:
            pass

    for signum in FORWARDED:
        signal.signal(signum, forward)
    try:
        end = read_message(replies)
    except OSError:
        end = None
    finally:
        for signum in FORWARDED:
            signal.signal(signum, signal.SIG_DFL)
        sock.close()
    if end is None:
        print("leaner: the warm process ended before the job did", file=sys.stderr)
        return 1
    print(f"{WARM_LINE} (pid {pid}): cpu_s {end['cpu_s']:.2f}, peak_mb {end['peak_mb']:.1f}", file=sys.stderr)
    if end.get("signal"):
        sys.stdout.flush()
        sys.stderr.flush()
        os.kill(os.getpid(), end["signal"])  # the child's death by a signal is this job's
        return 128 + end["signal"]
    return int(end["exit"])
