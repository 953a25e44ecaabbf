"""The pipeline's compute stages: `leaner prepare-data`, `train`, `conditioning` and `theory`
(the commands a warm process runs)."""

from __future__ import annotations

import sys
import time
from pathlib import Path

from ..compute.numerics import DEFAULT_MODE, MODES
from .args import GPU_SHARE_HELP, NUMERICS_HELP, json_arg, nonneg_int


def cmd_prepare_data(a):
    from ..data import prepare

    prepare(a.dataset, a.spec, a.out)


def cmd_train(a):
    """Exit status 0 when trained, STOPPED_EXIT when stopped by a signal with the resume state
    saved (training/stopping.py), INTERRUPTED_EXIT when a second Ctrl-C aborted that, 1 on an error."""
    from ..compute import distributed
    from ..runspec import RunSpec
    from ..training import finished
    from ..training.attempts import drop_single_attempt_log, keep_attempt_log
    from ..training.stall import Stalled
    from ..training.stopping import INTERRUPTED_EXIT, STOPPED_EXIT, Stopped
    from ..training.tracking import mark_failed, read_progress

    spec = RunSpec.of(a.spec)  # the one place a job's spec is typed: every stage below reads this
    if distributed.launched_by_torchrun():
        distributed.restore_stop_signals()
    else:
        keep_attempt_log(a.log, a.attempt)
        restored = finished.restore(Path(a.out), spec.json)
        if restored:
            print(f"leaner train: already trained: {len(restored)} outputs of the finished run put back from "
                  f"{Path(a.out) / finished.RESUME_DIR / finished.FINISHED_DIR} (its group ran again); nothing "
                  "trained",
                  file=sys.stderr, flush=True)
            return 0
    if a.nproc > 1 and not distributed.launched_by_torchrun():
        began = time.time()
        code = distributed.launch(a.argv, a.nproc, a.device, a.gpu_share)
        beat = read_progress(a.out) or {}  # torchrun reports any rank's exit as its own failure
        stopped = code and beat.get("state") == "stopped" and beat.get("updated_unix", 0) >= began
        if not code:
            drop_single_attempt_log(a.log, _attempts_of(a.out))
        return STOPPED_EXIT if stopped else code
    from ..io import read_json
    from ..training.train import train

    declared = read_json(a.declared)["claims_digest"] if a.declared else None
    try:
        metrics = train(spec, a.data, a.out, device=a.device, threads=a.threads, progress=not a.no_progress,
                        gpu_share=a.gpu_share, attempt=a.attempt, claims_digest=declared)
        if not distributed.launched_by_torchrun():
            drop_single_attempt_log(a.log, metrics.get("attempts", []))
    except Stopped as exc:
        print(f"leaner train: {exc}", file=sys.stderr, flush=True)
        return STOPPED_EXIT
    except Stalled as exc:  # its line was said when it was found (training/stall.py)
        print(f"leaner train: stopped, stalled ({str(exc).split(': ', 1)[-1].split(';')[0]}); exit status "
              f"{STOPPED_EXIT} (stopped, resumable)", file=sys.stderr, flush=True)
        return STOPPED_EXIT
    except KeyboardInterrupt as exc:  # Ctrl-C again while stopping (training/stopping.py)
        mark_failed(a.out, exc)
        beat = read_progress(a.out) or {}
        print(f"leaner train: aborted by a second SIGINT (Ctrl-C); a re-run resumes from the last resume state "
              f"saved (step {beat.get('checkpoint_step') or 0})", file=sys.stderr, flush=True)
        return INTERRUPTED_EXIT
    except BaseException as exc:  # before training began too: `leaner status` shows why
        mark_failed(a.out, exc)
        raise


def _attempts_of(out: str) -> list[dict]:
    from ..io import read_json

    try:
        return read_json(f"{out}/metrics.json").get("attempts", [])
    except (FileNotFoundError, ValueError):
        return []


def cmd_conditioning(a):
    from ..measure.conditioning import write_conditioning

    write_conditioning(a.metrics, a.init, a.final, a.data, a.out, device=a.device, threads=a.threads,
                       gpu_share=a.gpu_share, memory_mb=a.mem_mb)


def cmd_theory(a):
    from ..measure.theory import write_theory

    write_theory(a.settings, a.out)


def prepare_data_parser(sub) -> None:
    s = sub.add_parser("prepare-data", help="prepare one dataset and write its manifest")
    s.add_argument("--dataset", required=True)
    s.add_argument("--spec", required=True, type=json_arg, help="the dataset's config (JSON)")
    s.add_argument("--out", required=True, help="manifest.json to write")
    s.set_defaults(func=cmd_prepare_data)


def train_parser(sub) -> None:
    s = sub.add_parser("train", help="train one variant")
    s.add_argument("--spec", required=True, type=json_arg, help="the variant spec (JSON)")
    s.add_argument("--data", required=True, help="the prepared dataset's manifest.json")
    s.add_argument("--out", required=True, help="the variant's output directory")
    s.add_argument("--declared", default=None, help="its study's declared.json: the claims digest the run "
                                                    "records (metrics.json claims_digest)")
    s.add_argument("--device", default=None, help="force cpu, cuda or cuda:N (also $LEANER_DEVICE)")
    s.add_argument("--gpu-share", type=nonneg_int, default=None, help=GPU_SHARE_HELP)
    s.add_argument("--threads", type=int, default=None, help="CPU threads in all (split over --nproc processes)")
    s.add_argument("--nproc", type=int, default=1,
                   help="processes (GPUs) for this one variant: >1 runs DistributedDataParallel under torchrun")
    s.add_argument("--numerics", choices=MODES, default=DEFAULT_MODE, help=NUMERICS_HELP)
    s.add_argument("--no-progress", action="store_true")
    s.add_argument("--attempt", type=int, default=None,
                   help="Snakemake's attempt of this job (its retries): recorded, and a later attempt without "
                        "progress is refused (training/attempts.py)")
    s.add_argument("--log", default=None, help="the job's log (this process's output): each attempt's is kept "
                                               "as <log>.attempt-N.log")
    s.set_defaults(func=cmd_train)


def conditioning_parser(sub) -> None:
    s = sub.add_parser("conditioning", help="condition numbers of one trained variant")
    s.add_argument("--metrics", required=True)
    s.add_argument("--init", required=True)
    s.add_argument("--final", required=True)
    s.add_argument("--data", required=True)
    s.add_argument("--out", required=True)
    s.add_argument("--device", default=None, help="force cpu, cuda or cuda:N (also $LEANER_DEVICE)")
    s.add_argument("--gpu-share", type=nonneg_int, default=None, help=GPU_SHARE_HELP)
    s.add_argument("--threads", type=int, default=None)
    s.add_argument("--mem-mb", type=int, default=None, help="the job's memory: on the CPU the probe is measured in "
                                                            "chunks that fit it (default: 64 inputs at once)")
    s.add_argument("--numerics", choices=MODES, default=DEFAULT_MODE, help=NUMERICS_HELP)
    s.set_defaults(func=cmd_conditioning)


def theory_parser(sub) -> None:
    s = sub.add_parser("theory", help="Monte Carlo check of Theorem 3.2")
    s.add_argument("--settings", required=True, type=json_arg)
    s.add_argument("--out", required=True)
    s.add_argument("--threads", type=int, default=None, help="CPU threads")
    s.add_argument("--numerics", choices=MODES, default=DEFAULT_MODE, help=NUMERICS_HELP)
    s.set_defaults(func=cmd_theory)
