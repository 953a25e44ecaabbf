"""A real single-node Slurm (Debian's slurmctld, slurmd, munge) for the tests, started from a
private folder: its own slurm.conf (SLURM_CONF), ports, state and spool folders, munge socket and
fake GPUs in gres.conf (`gpus`, two by default: links in the folder to /dev/null, so Slurm sets
CUDA_VISIBLE_DEVICES as for real ones). It never touches /etc/slurm and stops only the daemons it
started, by pid. Needs root; installs the Debian packages when they are missing.

It tracks a job's processes as most clusters do, with proctrack/cgroup (cgroup v1's freezer, where
this machine has it mounted): a signal other than SIGKILL then reaches a step's own process only,
not the processes it started (with proctrack/linuxproc, the fallback, every process of the step
gets it). The cgroups it made are removed when it stops.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

PACKAGES = ["slurmctld", "slurmd", "slurm-client", "munge"]
FREEZER = "/sys/fs/cgroup/freezer"  # cgroup v1's freezer: proctrack/cgroup needs it


def ensure_installed() -> None:
    if all(shutil.which(b) for b in ("slurmctld", "slurmd", "sbatch", "munged")):
        return
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    subprocess.run(["apt-get", "update", "-qq"], check=True, env=env, capture_output=True)
    subprocess.run(["apt-get", "install", "-y", "-qq", "--no-install-recommends", *PACKAGES], check=True, env=env,
                   capture_output=True)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class SlurmCluster:
    """`with SlurmCluster(folder) as cluster:` ... `cluster.env` has SLURM_CONF for clients."""

    def __init__(self, root: Path, cpus: int = 2, gpus: int = 2, memory_mb: int = 8000):
        self.root, self.cpus, self.gpus, self.memory_mb = Path(root), cpus, gpus, memory_mb
        self.host = socket.gethostname().split(".")[0]
        self.procs: list[subprocess.Popen] = []
        self.conf = self.root / "slurm.conf"

    # ------------------------------------------------------------------ configuration
    def _write_config(self) -> None:
        r = self.root
        for sub in ("state", "spool", "log"):
            (r / sub).mkdir(parents=True, exist_ok=True)
        # munged runs as user munge and insists on a socket folder every user can traverse, so it
        # lives outside the (private) test folder
        self.munge_dir = Path(tempfile.mkdtemp(prefix="leaner-munge-"))
        os.chmod(self.munge_dir, 0o755)
        shutil.chown(self.munge_dir, "munge", "munge")
        self.munge_socket = self.munge_dir / "munge.socket"
        ctld_port, d_port = _free_port(), _free_port()
        self.proctrack = "cgroup" if os.access(FREEZER, os.W_OK) else "linuxproc"
        if self.proctrack == "cgroup":
            (r / "cgroup.conf").write_text("CgroupPlugin=cgroup/v1\nCgroupMountpoint=/sys/fs/cgroup\n"
                                           "ConstrainCores=no\nConstrainRAMSpace=no\nConstrainDevices=no\n")
        # the GPUs' device files: links in the test folder to /dev/null, one per GPU (Slurm wants a
        # character device behind each, counts them and numbers them for CUDA_VISIBLE_DEVICES;
        # ConstrainDevices=no, so no cgroup ever touches the device)
        (r / "dev").mkdir(exist_ok=True)
        for i in range(self.gpus):
            link = r / "dev" / f"fakegpu{i}"
            if not link.is_symlink():
                link.symlink_to("/dev/null")
        devices = f"{r / 'dev'}/fakegpu[0-{self.gpus - 1}]" if self.gpus > 1 else f"{r / 'dev'}/fakegpu0"
        (r / "gres.conf").write_text(f"NodeName={self.host} Name=gpu Type=fake File={devices}\n")
        self.conf.write_text("\n".join([
            "ClusterName=leanertest", f"SlurmctldHost={self.host}", "SlurmUser=root", "SlurmdUser=root",
            f"SlurmctldPort={ctld_port}", f"SlurmdPort={d_port}",
            "AuthType=auth/munge", "CredType=cred/munge", f"AuthInfo=socket={self.munge_socket}",
            f"ProctrackType=proctrack/{self.proctrack}", "TaskPlugin=task/none",
            "JobAcctGatherType=jobacct_gather/none",
            "AccountingStorageType=accounting_storage/none", "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_Core_Memory", "MinJobAge=3600", "ReturnToService=2", "GresTypes=gpu",
            "SchedulerType=sched/backfill", "MpiDefault=none", "SwitchType=switch/none",
            f"StateSaveLocation={r / 'state'}", f"SlurmdSpoolDir={r / 'spool'}",
            f"SlurmctldPidFile={r / 'slurmctld.pid'}", f"SlurmdPidFile={r / 'slurmd.pid'}",
            f"SlurmctldLogFile={r / 'log' / 'slurmctld.log'}", f"SlurmdLogFile={r / 'log' / 'slurmd.log'}",
            f"NodeName={self.host} CPUs={self.cpus} RealMemory={self.memory_mb} Gres=gpu:fake:{self.gpus} "
            "State=UNKNOWN",
            "PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP", ""]))

    @property
    def env(self) -> dict:
        return {**os.environ, "SLURM_CONF": str(self.conf),
                "PATH": f"{self.root / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}"}

    def _write_client_wrappers(self) -> None:
        """Inside a job, Snakemake's jobstep executor calls `srun` with every SLURM_* variable
        removed, SLURM_CONF included; a real cluster's srun then reads /etc/slurm/slurm.conf. This
        private cluster must not touch /etc/slurm, so `srun` on its PATH restores SLURM_CONF."""
        bin_dir = self.root / "bin"
        bin_dir.mkdir(exist_ok=True)
        for tool in ("srun",):
            wrapper = bin_dir / tool
            wrapper.write_text(f'#!/bin/sh\nexport SLURM_CONF="{self.conf}"\nexec {shutil.which(tool)} "$@"\n')
            wrapper.chmod(0o755)

    # ------------------------------------------------------------------ life cycle
    def _start(self, cmd: list[str], name: str) -> None:
        log = open(self.root / "log" / f"{name}.out", "w")
        self.procs.append(subprocess.Popen(cmd, env=self.env, stdout=log, stderr=subprocess.STDOUT))

    def start(self) -> SlurmCluster:
        ensure_installed()
        self._write_config()
        self._write_client_wrappers()
        r = self.munge_dir
        self._start(["runuser", "-u", "munge", "--", "/usr/sbin/munged", "--foreground",
                     f"--socket={self.munge_socket}", f"--pid-file={r / 'munged.pid'}",
                     f"--log-file={r / 'munged.log'}", f"--seed-file={r / 'munged.seed'}"], "munged")
        self._wait(lambda: self.munge_socket.exists(), "munged")
        self._start(["slurmctld", "-D", "-i", "-f", str(self.conf)], "slurmctld")
        self._wait(lambda: self._ok(["scontrol", "ping"], "UP"), "slurmctld")
        self._start(["slurmd", "-D", "-f", str(self.conf)], "slurmd")
        self._wait(lambda: self._ok(["sinfo", "-h", "-o", "%T"], "idle"), "slurmd", on_retry=self._resume)
        return self

    def _resume(self) -> None:
        subprocess.run(["scontrol", "update", f"nodename={self.host}", "state=resume"], env=self.env,
                       capture_output=True)

    def _ok(self, cmd: list[str], needle: str) -> bool:
        proc = subprocess.run(cmd, env=self.env, capture_output=True, text=True)
        return proc.returncode == 0 and needle in proc.stdout

    def _wait(self, check, what: str, timeout: float = 60.0, on_retry=None) -> None:
        deadline = time.time() + timeout
        while time.time() < deadline:
            if check():
                return
            for p in self.procs:
                if p.poll() is not None:
                    raise RuntimeError(f"{what}: a Slurm daemon exited ({p.args[0]}); see {self.root / 'log'}")
            if on_retry:
                on_retry()
            time.sleep(0.5)
        raise RuntimeError(f"{what} did not come up in {timeout:.0f} s; see {self.root / 'log'}")

    def stop(self) -> None:
        for p in reversed(self.procs):  # only the daemons started here, by pid
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in reversed(self.procs):
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        self.procs.clear()
        if getattr(self, "munge_dir", None):
            shutil.rmtree(self.munge_dir, ignore_errors=True)
        if getattr(self, "proctrack", None) == "cgroup":  # the freezer cgroups slurmd made, innermost first
            made = Path(FREEZER) / f"slurm_{self.host}"
            for folder in sorted((d for d in made.rglob("*") if d.is_dir()), key=lambda d: -len(d.parts)) + [made]:
                try:
                    folder.rmdir()
                except OSError:
                    pass

    def __enter__(self) -> SlurmCluster:
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *exc) -> None:
        self.stop()
