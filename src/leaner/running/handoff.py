"""The client half of the warm start: a `leaner` job hands its command to a warm process.

Each training, conditioning or theory job of a local run used to start a fresh Python and import
torch, timm and torchvision before its first step: 2-5 s of CPU a job, a third of the default
study's CPU time. A warm process (leaner/warm.py), started once per Snakemake run, has imported
them already and forks one child per job. The job itself stays what Snakemake started (its own
rule, outputs, log, retries and kill): this client, which imports no torch, passes its argv,
working folder, environment and standard streams to the warm process over a Unix socket, forwards
the signals it gets to the child, and exits with the child's exit status. The child runs
`cli.main` exactly as a fresh process would (tests/test_warm.py checks the bits). Job control
reaches the child too: a stop (Ctrl-Z's SIGTSTP, SIGTTIN, SIGTTOU) stops the child and then the
job; SIGSTOP, which the job cannot catch, the child sees (it watches its job) and stops with it;
SIGCONT continues both. One difference from a fresh process remains, and is said here: a fresh
Python draws its string-hash seed at random where PYTHONHASHSEED is unset, a child inherits the
warm process's draw (nothing of leaner's results depends on the order of a set or dict of
strings: the tests compare the bits).

A job runs cold (in this process) whenever the warm process cannot serve it the same way:
$LEANER_WARM unset or `off`; a Slurm job (a forked child would run outside the job's allocation);
a torchrun rank; a command other than train, conditioning and theory; a warm process of another
interpreter, package, code version or numerics mode. A refusal is one line in the job's log.
"""

from __future__ import annotations

import hashlib
import json
import os
import select
import signal
import socket
import sys
from collections.abc import Mapping
from pathlib import Path

ENV = "LEANER_WARM"  # the warm process's socket; unset or "off": every job runs cold
WARM_COMMANDS = ("train", "conditioning", "theory")  # the stages that load torch and compute
FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2, signal.SIGQUIT)
JOB_CONTROL = (signal.SIGTSTP, signal.SIGTTIN, signal.SIGTTOU)  # stop the child, then the job
WATCH_S = 0.25  # how often a child looks whether its job was stopped, and a job whether its child runs
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


# A library may read its settings from the environment when it loads (huggingface_hub HF_HOME and
# HF_ENDPOINT, MKL, OpenMP, ATen and oneDNN theirs, glibc its malloc's, Python its own and the
# locale), and a child forked after the imports keeps what the warm process read: so a job runs
# warm only where these, the variables the preloaded libraries document (by name or prefix), are
# the warm process's. Every other variable (PATH, PS1 and VIRTUAL_ENV from a venv's `activate`,
# conda's CONDA_*, a terminal's or a scheduler's own) is read, if at all, when the job runs: the
# child takes the job's environment whole, so those may differ.
READ_AT_LOAD_PREFIXES = (
    "PYTHON", "LC_",  # the interpreter (PYTHONHASHSEED, PYTHONPATH, PYTHONWARNINGS, ...) and the locale
    "TORCH", "PYTORCH", "CUDA", "CUBLAS", "CUDNN", "NCCL", "NVIDIA_", "TRITON", "KINETO",  # torch, CUDA, compilers
    "OMP_", "KMP_", "GOMP_", "MKL", "DNNL_", "ONEDNN_", "ATEN_",  # torch's CPU runtimes (OpenMP, MKL, oneDNN)
    "OPENBLAS", "GOTO", "NPY_", "NUMPY_",  # numpy and its BLAS
    "ARROW_", "JE_", "PANDAS",  # pandas, pyarrow and its allocator
    "HF_", "HUGGINGFACE", "TRANSFORMERS_", "TIMM_",  # the hub clients (timm's weights come through huggingface_hub)
    "TQDM_", "MPL", "PROTOCOL_BUFFERS_", "TF_", "SYMPY_",  # tqdm, matplotlib, TensorBoard's protobuf, sympy
    "MALLOC_", "LD_", "XDG_",  # glibc's malloc and loader; where caches default to
    "LEANER_",  # the project's own
)
READ_AT_LOAD_NAMES = ("LANG", "LANGUAGE", "TZ", "HOME", "GLIBC_TUNABLES", "SSL_CERT_FILE", "SSL_CERT_DIR",
                      "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE")
# ... but for these, which differ from job to job and which the child reads again:
THREAD_COUNTS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")  # applied (warm.apply_thread_counts)
PER_JOB = (
    *THREAD_COUNTS,
    # Snakemake's other per-job thread count that a prefix above takes in (OpenBLAS reads
    # GOTO_NUM_THREADS only where OPENBLAS_NUM_THREADS is unset)
    "GOTO_NUM_THREADS",
    ENV,  # the warm process's socket, which only its clients know
)


def read_at_load(name: str) -> bool:
    """Whether a preloaded library may have read variable `name` when it loaded (and the job's
    value must then be the warm process's)."""
    return name not in PER_JOB and (name in READ_AT_LOAD_NAMES or name.startswith(READ_AT_LOAD_PREFIXES))


def environment_differences(job: Mapping[str, str], warm: Mapping[str, str]) -> list[str]:
    """The variables a preloaded library may have read (read_at_load) whose value (or presence)
    differs between a job's environment and the warm process's."""
    names = {name for name in set(job) | set(warm) if read_at_load(name)}
    return sorted(name for name in names if job.get(name) != warm.get(name))


def identity(numerics: str) -> dict:
    """What must be the same in a job and the warm process that runs it, besides its environment
    (environment_differences)."""
    return {"python": sys.executable, "package": str(PACKAGE), "code": code_stamp(), "numerics": numerics}


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


class Replies:
    """The messages (JSON lines) a socket brings, read without a buffer that `select` cannot see."""

    def __init__(self, sock: socket.socket):
        self.sock, self.buffer = sock, b""

    def next(self, idle=None) -> dict | None:
        """The next message, or None at the socket's end; `idle()` runs every WATCH_S meanwhile."""
        while b"\n" not in self.buffer:
            if idle is not None and not select.select([self.sock], [], [], WATCH_S)[0]:
                idle()
                continue
            chunk = self.sock.recv(1 << 16)
            if not chunk:
                return None
            self.buffer += chunk
        line, self.buffer = self.buffer.split(b"\n", 1)
        return json.loads(line)


def hand_off(argv: list[str], environ=os.environ) -> int | None:
    """Run `leaner <argv>` in the warm process and return its exit status, or None where this job
    must run cold (why goes to stderr when the warm process was asked and refused)."""
    if cold_reason(argv, environ):
        return None
    path = environ[ENV]
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(path)
        request = {"argv": argv, "cwd": os.getcwd(), "env": dict(environ), "client": os.getpid(),
                   **identity(numerics_of(argv))}
        send_message(sock, request, [0, 1, 2])
        replies = Replies(sock)
        answer = replies.next()
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


WARM_LINE = "leaner warm: ran in the warm process"  # the job's last log line; analysis/job_costs.py reads it


def _follow(sock: socket.socket, replies: Replies, pid: int) -> int:
    """Forward this process's signals to the warm child until the warm process reports how the
    child ended; end the same way (its exit code, or death by its signal). A stop stops the child,
    then this job; a continue continues both (and a child found stopped while its job runs is
    continued: the child stops itself when it sees its job stopped, which may race a SIGCONT). The
    child's CPU time and peak memory end the job's log and go beside Snakemake's benchmark of this
    job (benchmark_of), which sees only this client."""
    import psutil

    def forward(signum, _frame):
        try:
            sock.sendall(bytes([signum]))
        except OSError:
            pass

    def stop(_signum, frame):
        # the child stops: SIGSTOP, since the kernel discards a SIGTSTP to the warm process's
        # group (orphaned: its parent is in another session); then this job, as a shell's job stops
        forward(signal.SIGSTOP, frame)
        os.kill(os.getpid(), signal.SIGSTOP)

    def keep_running(*_):
        try:
            if psutil.Process(pid).status() == psutil.STATUS_STOPPED:
                os.kill(pid, signal.SIGCONT)
        except (psutil.Error, OSError):
            pass

    handlers = {**dict.fromkeys(FORWARDED, forward), **dict.fromkeys(JOB_CONTROL, stop), signal.SIGCONT: keep_running}
    for signum, handler in handlers.items():
        signal.signal(signum, handler)
    try:
        end = replies.next(idle=keep_running)
    except OSError:
        end = None
    finally:
        for signum in handlers:
            signal.signal(signum, signal.SIG_DFL)
        sock.close()
    if end is None:
        print("leaner: the warm process ended before the job did", file=sys.stderr)
        return 1
    print(f"{WARM_LINE} (pid {pid}): cpu_s {end['cpu_s']:.2f}, peak_mb {end['peak_mb']:.1f}", file=sys.stderr)
    write_child_benchmark(end)
    if end.get("signal"):
        sys.stdout.flush()
        sys.stderr.flush()
        os.kill(os.getpid(), end["signal"])  # the child's death by a signal is this job's
        return 128 + end["signal"]
    return int(end["exit"])


BENCHMARK_COLUMNS = ("s", "h:m:s", "max_rss", "max_vms", "max_uss", "max_pss", "io_in", "io_out", "mean_load",
                     "cpu_time")  # Snakemake's benchmark file's
CHILD_BENCHMARK = ".warm.tsv"  # beside Snakemake's: logs/benchmarks/<rule>/<job>.warm.tsv


def benchmark_of(log: str | Path) -> Path | None:
    """Where Snakemake writes the benchmark of the job whose log is `log`: logs/<rule>/<job>.log ->
    logs/benchmarks/<rule>/<job>.tsv (the rules' convention); None for a log elsewhere."""
    parts = Path(log).parts
    if "logs" not in parts or Path(log).suffix != ".log":
        return None
    i = len(parts) - 1 - parts[::-1].index("logs")
    return Path(*parts[:i + 1], "benchmarks", *parts[i + 1:]).with_suffix(".tsv")


def log_of(benchmark: str | Path) -> Path:
    """The log of the job whose benchmark is `benchmark` (benchmark_of, the other way)."""
    parts = Path(benchmark).parts
    i = len(parts) - 1 - parts[::-1].index("benchmarks") if "benchmarks" in parts else 0
    return Path(*parts[:i], *parts[i + 1:]).with_suffix(".log")


def child_benchmark(benchmark: Path) -> Path:
    return benchmark.with_name(benchmark.name.removesuffix(".tsv") + CHILD_BENCHMARK)


def write_child_benchmark(end: Mapping) -> Path | None:
    """The warm child's own resource use (wall time, CPU time, peak memory), in Snakemake's
    benchmark format, beside the benchmark Snakemake writes for this job, found from the job's log
    (its standard error; Linux: /proc). None where the log is not a rule's."""
    try:
        log = os.readlink("/proc/self/fd/2")
    except OSError:
        return None
    benchmark = benchmark_of(log)
    if benchmark is None:
        return None
    wall = float(end.get("wall_s", 0.0))
    h, rest = divmod(int(wall), 3600)
    values = {"s": f"{wall:.4f}", "h:m:s": f"{h}:{rest // 60:02d}:{rest % 60:02d}", "max_rss": f"{end['peak_mb']:.2f}",
              "mean_load": f"{100 * end['cpu_s'] / wall:.2f}" if wall > 0 else "NA", "cpu_time": f"{end['cpu_s']:.2f}"}
    from ..io import write_text

    path = child_benchmark(benchmark)
    write_text(path, "\t".join(BENCHMARK_COLUMNS) + "\n" + "\t".join(values.get(c, "NA") for c in BENCHMARK_COLUMNS)
               + "\n")
    return path
