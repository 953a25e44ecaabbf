"""Per-variant outputs -> summary.csv: one tidy row per variant (architecture, seed, protocols,
status, final and best metrics, cost, kappa columns, the numerics training and conditioning ran
under), and every variant's kappa at each kept
checkpoint. Also the per-task facts every analysis reads: a configuration's axes and the study's
headline metric."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from ..compute.numerics import UNRECORDED, describe_mix, is_mixed
from ..grid import join_protocols, split_protocols
from ..io import read_json, write_csv, write_json
from ..models.config import AXIS_DEFAULTS, model_config
from ..tasks import GRID_AXES, task_info
from ..training.tracking import write_hparams
from .stats import gmean

ARCH = list(GRID_AXES["arch"])  # depth x heads x width x head_dim x MLP: P1's configurations


# Whether a run stopped on a plateau or was cut short: how far its best training loss fell over
# its last quarter of steps (summary.csv's train_loss_last_quarter_fall; by_config keeps the largest
# over a configuration's runs). Near 0 the curve is flat at the end, and more steps at the same
# recipe would not move it: P2's "cannot represent" told from "did not optimise".
LAST_QUARTER = 0.75  # a run's plateau is read over its steps past this fraction


def last_quarter_fall(history: pd.DataFrame, column: str = "train_loss") -> float:
    """How far the best `column` (a loss) fell over the last quarter of a run's steps, as a share of
    the best before it: (best up to 3/4 - best overall) / best up to 3/4. Near 0: the curve is flat
    at the end (a plateau: more steps would not move it); NaN without a point on each side."""
    if column not in history or "step" not in history:
        return math.nan
    h = history[["step", column]].dropna()
    if not len(h):
        return math.nan
    before = h.loc[h["step"] <= LAST_QUARTER * h["step"].max(), column]
    if not len(before) or len(before) == len(h) or not before.min() > 0:
        return math.nan
    return float((before.min() - h[column].min()) / before.min())


def read_summary(path) -> pd.DataFrame:
    """A summary.csv, its axes completed (`complete_axes`)."""
    return complete_axes(pd.read_csv(path))


def complete_axes(frame: pd.DataFrame) -> pd.DataFrame:
    """A summary with an architecture axis it was written without (one added since: the logit
    scale) at the model's default, so that a summary of an earlier run groups as it did."""
    missing = {k: v for k, v in AXIS_DEFAULTS.items() if k not in frame}
    if len(frame) and is_arch(frame["task"].iloc[0]) and missing:
        frame = frame.copy()
        for name, default in missing.items():
            at = frame.columns.get_loc("mlp_hidden") + 1 if "mlp_hidden" in frame else len(frame.columns)
            frame.insert(at, name, default)
    return frame


def axes(task: str) -> list[str]:
    """The architecture axes of the task's variants: one configuration is one value of each."""
    return list(task_info(task).axes)


def is_arch(task: str) -> bool:
    """Whether the task's grid is P1's depth x heads x protocol x width x MLP (else P2's)."""
    return task_info(task).grid == "arch"


# Summary column prefix of each measured matrix (conditioning.MATRICES): kappa_{prefix}{checkpoint}_...
KAPPA_PREFIX = {"heads_concat": "", "attn_proj_out": "out_", "jacobian": "jac_"}


def _kappa_columns(cond: pd.DataFrame) -> dict:
    """Summary kappa columns from one variant's conditioning.csv, per checkpoint (init, final) and
    matrix: layer-1 median, the geometric mean over layers of the per-layer medians (+inf when a
    layer's median is singular) and the fraction of singular samples over all layers."""
    out = {}
    for (ckpt, matrix), g in cond.groupby(["checkpoint", "matrix"]):
        if ckpt not in ("init", "final") or matrix not in KAPPA_PREFIX:
            continue
        prefix = f"kappa_{KAPPA_PREFIX[matrix]}{ckpt}"
        first = g.loc[g["layer"] == 1, "kappa_median"]
        out[f"{prefix}_l1"] = float(first.iloc[0]) if len(first) else math.nan
        out[f"{prefix}_gmean"] = gmean(g["kappa_median"])
        if "singular_fraction" in g:
            out[f"{prefix}_singular"] = float(g["singular_fraction"].mean())
        if matrix == "jacobian" and "method" in g:
            out[f"{prefix}_method"] = "+".join(sorted(set(g["method"])))  # exact | lanczos (a lower bound)
        if matrix == "heads_concat" and "head_isotropy" in g and len(first):
            one = g[g["layer"] == 1].iloc[0]  # layer 1's head structure (measure/heads.py)
            out[f"heads_isotropy_{ckpt}_l1"], out[f"heads_alignment_{ckpt}_l1"] = one["head_isotropy"], one[
                "head_alignment"]
            out.update({f"{k}_l1": one[k] for k in GAUSSIAN_COLUMNS}, probe_tokens=int(one["tokens"]))
    return out


# Theorem 3.2's heads for each configuration's shape, beside its measured ones (measure/heads.py)
GAUSSIAN_COLUMNS = ("theorem_kappa", "gauss_kappa", "gauss_isotropy", "gauss_alignment")


def kappa_checkpoints(summary: pd.DataFrame, conditioning_paths: list[str]) -> pd.DataFrame:
    """One row per (variant, checkpoint, matrix): the step, its fraction of the run, layer-1
    median kappa and the geometric mean over layers of the per-layer medians, with the variant's
    architecture, seed and protocols from the summary."""
    if not len(summary):
        return pd.DataFrame()
    task = summary["task"].iloc[0]
    keep = ["variant", *axes(task), "seed", "protocols", "status", "steps",
            *(["total_heads"] if "total_heads" in summary else [])]
    info = summary[keep].set_index("variant")
    rows = []
    for path in conditioning_paths:
        cond = pd.read_csv(path)
        for (variant, ckpt, step, matrix), g in cond.groupby(["variant", "checkpoint", "step", "matrix"], sort=False):
            if variant not in info.index:
                continue
            v = info.loc[variant]
            l1 = g.loc[g["layer"] == 1, "kappa_median"]
            rows.append({"variant": variant, **v.to_dict(), "checkpoint": ckpt, "step": int(step),
                         "fraction": step / v["steps"] if v["steps"] else math.nan, "matrix": matrix,
                         "kappa_l1": float(l1.iloc[0]) if len(l1) else math.nan,
                         "kappa_gmean": gmean(g["kappa_median"]),
                         "singular_fraction": float(g["singular_fraction"].mean()) if "singular_fraction" in g
                         else math.nan})
    frame = pd.DataFrame(rows)
    if "total_heads" not in frame and len(frame):
        frame["total_heads"] = frame["heads"]
    return frame.sort_values(["variant", "matrix", "step"]).reset_index(drop=True) if len(frame) else frame


def glue_scores(metrics_paths: list[str]) -> dict:
    """One pretrained variant's fine-tuning runs -> each task's score (its GLUE metric at the end
    of fine-tuning, on the evaluation split) and their unweighted mean, the GLUE average."""
    tasks = {}
    for path in metrics_paths:
        m = read_json(path)
        task = m["spec"]["glue_task"]
        tasks[task] = {"score": m["final"].get("eval_score"), "status": m["status"],
                       **{k[len("eval_"):]: v for k, v in m["final"].items() if k.startswith("eval_")}}
    scores = [t["score"] for t in tasks.values() if t["score"] is not None]
    return {"tasks": tasks, "glue_avg": float(np.mean(scores)) if scores else math.nan, "n_tasks": len(scores)}


def write_glue_scores(metrics_paths: list[str], out_json: str) -> dict:
    scores = glue_scores(metrics_paths)
    write_json(out_json, scores)
    return scores


def summarize_study(study: str, metrics_paths: list[str], conditioning_paths: list[str],
                    protocols: dict[str, list[str]], glue_paths: list[str] = (),
                    history_paths: list[str] = ()) -> pd.DataFrame:
    """One tidy row per variant; with its history.csv, the training loss's last-quarter fall."""
    cond_by_dir = {str(Path(p).parent): p for p in conditioning_paths}
    history_by_dir = {str(Path(p).parent): p for p in history_paths}
    glue_by_dir = {str(Path(p).parent): p for p in glue_paths}
    rows = []
    for mpath in metrics_paths:
        m = read_json(mpath)
        model, task = model_config(m["spec"]["model"]), m["spec"]["task"]
        row = {"study": study, "task": task, "dataset": m["spec"].get("dataset"), "variant": m["variant"],
               **{k: getattr(model, k) for k in axes(task)},
               "seed": m["seed"], "protocols": join_protocols(protocols.get(m["variant"], [])), "status": m["status"],
               **{f"params_{k}": v for k, v in m["params"].items()},
               **{k: v for k, v in m["final"].items()},
               f"best_{m['primary_metric']}": m["best"][m["primary_metric"]],
               "steps": m["steps"], "wall_time_s": m["wall_time_s"],
               "throughput_samples_per_s": m["throughput_samples_per_s"], "peak_memory_mb": m["peak_memory_mb"],
               "device": m["device"], "numerics": (m.get("numerics") or {}).get("label", UNRECORDED),
               "claims_digest": m.get("claims_digest"),  # the study's claims as declared when it trained
               "eval_outcomes": m.get("eval_outcomes")}  # which eval examples it got right (tasks/base.py)
        gpath = glue_by_dir.get(str(Path(mpath).parent))
        if gpath:
            glue = read_json(gpath)
            row.update({f"glue_{t}": v["score"] for t, v in glue["tasks"].items()})
            row["glue_avg"] = glue["glue_avg"]
        if getattr(model, "backbone", None):
            row["backbone"] = model.backbone  # a timm backbone's own name (models/backbones.py)
        if is_arch(task):
            row["mlp_ratio"] = model.mlp_hidden / model.width
            metric, mode = task_info(task).metric
            value = row.get(metric)
            # error: lower is better for every task (1 - accuracy, or the loss itself)
            row["error"] = math.nan if value is None else (1.0 - value if mode == "max" else value)
            chance = m.get("chance") or {}
            if chance.get("metric") == metric:
                row["chance"] = chance["value"]
                row["learned"] = learned(value, chance)
        else:
            row["total_heads"] = model.attention_heads
            row["error"] = row["best_train_loss"]
            row["chance"] = ZERO_PREDICTOR_MSE
            row["learned"] = nearest_learned(row["best_train_loss"])
            row["stream"] = m["data"]["stream"]  # fresh, or P2's replayed set (then eval_mse is the fresh-point MSE)
            row["replicates"] = m["data"].get("replicates", "paper")  # what a seed varies (data/nearest_point.py)
        for key, values in (m.get("diagnostics") or {}).items():
            if values:
                row[f"{key}_mean"], row[f"{key}_min"] = float(np.mean(values)), float(np.min(values))
        hpath = history_by_dir.get(str(Path(mpath).parent))
        if hpath:
            row["train_loss_last_quarter_fall"] = last_quarter_fall(pd.read_csv(hpath))
        cpath = cond_by_dir.get(str(Path(mpath).parent))
        if cpath:
            cond = pd.read_csv(cpath)
            row.update(_kappa_columns(cond))
            row["kappa_numerics"] = " | ".join(cond["numerics"].dropna().unique()) if "numerics" in cond \
                else UNRECORDED
        rows.append(row)
    frame = pd.DataFrame(rows)
    if not len(frame):
        return frame
    if is_arch(frame["task"].iloc[0]):
        frame["protocols"] = _protocols_per_configuration(frame)
    return frame.sort_values(axes(frame["task"].iloc[0]) + ["seed"]).reset_index(drop=True)


def _protocols_per_configuration(frame: pd.DataFrame) -> pd.Series:
    """Every run's protocols as its configuration's: the union over its seeds, in the order the grid
    names them. A protocol is a property of the architecture, so a configuration two grid entries
    share (one with more seeds) is drawn in each protocol's figure over all its seeds, as the
    tables average it (a figure's point equals its table's mean)."""
    union = {}
    for key, g in frame.groupby(ARCH, sort=False):
        union[key] = join_protocols(dict.fromkeys(p for value in g["protocols"] for p in split_protocols(value)))
    return pd.Series([union[tuple(r)] for r in frame[ARCH].itertuples(index=False)], index=frame.index)


LOSS_MARGIN = 0.01  # nats: a loss must fall this far below its chance level to count as learned


def learned(value: float | None, chance: dict) -> bool:
    """Whether a final metric beats what ignoring the input scores (tasks' `chance`): an accuracy
    above the majority rate by more than 1.645 binomial standard errors of that rate on the
    evaluation set (one-sided 5%), a loss below the unigram's by more than LOSS_MARGIN. A variant
    that does not is flagged "did not learn" and kept out of verdicts."""
    if value is None or not math.isfinite(value):
        return False
    p, n = chance["value"], max(chance["n"], 1)
    if chance["metric"].endswith("_acc"):
        return value > p + 1.645 * math.sqrt(p * (1 - p) / n)
    return value < p - LOSS_MARGIN


# P2's nearest-point task: the zero predictor's MSE on unit vectors is 1. A run learned when its best
# epoch's training MSE fell below NEAREST_LEARNED of that (declared with the P2 claim, before its
# runs: config.yaml nearest_rank); one at the zero predictor (the collapse the warm-up's jump from
# lr 0 to the peak can cause, the final norm's scale near 0) did not, and is counted, not averaged.
ZERO_PREDICTOR_MSE = 1.0
NEAREST_LEARNED = 0.95


def nearest_learned(best_mse: float | None) -> bool:
    """Whether a P2 run learned: its best training MSE below NEAREST_LEARNED x the zero predictor's."""
    return best_mse is not None and math.isfinite(best_mse) and best_mse < NEAREST_LEARNED * ZERO_PREDICTOR_MSE


def learned_rows(rows: pd.DataFrame, fallback: bool = True) -> pd.DataFrame:
    """The rows that learned (`learned` not False). `fallback`: all of them where none did, so that
    a configuration that never learned still shows what it scored (its verdicts say it did not)."""
    if "learned" not in rows or rows["learned"].isna().all():
        return rows
    kept = rows[~(rows["learned"].astype("boolean") == False)]  # noqa: E712
    return kept if len(kept) or not fallback else rows


def not_learned(rows: pd.DataFrame) -> float:
    """How many of these summary rows did not beat their task's chance level (`learned` False);
    NaN where none has a chance level."""
    if "learned" not in rows or rows["learned"].isna().all():
        return math.nan
    return float((rows["learned"].astype("boolean") == False).sum())  # noqa: E712


def write_summary(study: str, metrics_paths: list[str], conditioning_paths: list[str],
                  protocols: dict[str, list[str]], out_csv: str, glue_paths: list[str] = (),
                  kappa_csv: str | None = None, history_paths: list[str] = ()) -> pd.DataFrame:
    """summary.csv, (kappa_csv) every variant's kappa at each kept checkpoint, and each variant's
    TensorBoard HParams entry in its folder (tracking.write_hparams)."""
    frame = summarize_study(study, metrics_paths, conditioning_paths, protocols, glue_paths, history_paths)
    for column in ("numerics", "kappa_numerics"):
        if column in frame and is_mixed(frame[column]):
            print(f"study {study}: {column}: {describe_mix(frame[column])}", file=sys.stderr)
    kappa = kappa_checkpoints(frame, conditioning_paths)
    if kappa_csv:
        write_csv(kappa_csv, kappa)
    write_csv(out_csv, frame)
    folders = {read_json(p)["variant"]: Path(p).parent for p in metrics_paths}
    for _, row in frame.iterrows():
        hparams, metrics = tensorboard_hparams(row)
        curve = kappa[kappa["variant"] == row["variant"]] if len(kappa) else kappa
        write_hparams(folders[row["variant"]], hparams, metrics,
                      [(r["matrix"], int(r["step"]), float(r["kappa_gmean"])) for _, r in curve.iterrows()])
    return frame


def tensorboard_hparams(row: pd.Series) -> tuple[dict, dict]:
    """(hyperparameters, metrics) of one summary row for TensorBoard's HParams dashboard: the
    architecture's axes, protocols, parameters and seed; the task's metric, the error, kappa at
    initialisation and after training (geometric mean over layers)."""
    task = row["task"]
    shape = {k: row[k].item() if hasattr(row[k], "item") else row[k] for k in axes(task)}  # numpy -> Python
    hparams = {"study": row["study"], "protocols": str(row["protocols"] or ""), "params": int(row["params_total"]),
               "seed": int(row["seed"]), **shape}
    metric = task_info(task).metric[0]
    metrics = {f"hparams/{metric}": row.get(metric), "hparams/error": row.get("error"),
               "hparams/kappa_init": row.get("kappa_init_gmean"), "hparams/kappa_final": row.get("kappa_final_gmean")}
    return hparams, {tag: float(v) for tag, v in metrics.items() if v is not None and not pd.isna(v)}


def explode_protocols(summary: pd.DataFrame) -> pd.DataFrame:
    """One row per (variant, protocol): the curves of heads under fixed_width and fixed_head_dim;
    a crossed point is on the curve of its head dim (`crossed_hd4`: heads at a fixed width and
    rank), so that every grouping by protocol keeps the rank fixed."""
    frame = summary.assign(protocol=summary["protocols"].map(split_protocols)).explode("protocol")
    frame = frame[frame["protocol"].notna()]
    crossed = frame["protocol"] == "crossed"
    frame.loc[crossed, "protocol"] = [f"crossed_hd{int(d)}" for d in frame.loc[crossed, "head_dim"]]
    return frame


def config_values(summary: pd.DataFrame, cfg: pd.Series, metric: str) -> np.ndarray:
    mask = np.ones(len(summary), bool)
    for k in ARCH:
        mask &= summary[k].to_numpy() == cfg[k]
    v = summary.loc[mask, metric].to_numpy(float)
    return v[np.isfinite(v)]


REPLICATES = {
    "paper": "a replicate is a data seed as in P2's code: every run starts from init seed 613 and data seeds s "
             "and s+1 share 6 of 7 loader streams, so seeds are not independent and no interval is taken across "
             "them",
    "independent": "a replicate is an independent seed: its own initialisation and data streams no other seed "
                   "shares",
    "P1": "a replicate is a seed: its own initialisation, data order and augmentation",
}


def replicates_of(summary: pd.DataFrame) -> str:
    """What a seed varies in `summary`'s runs: paper or independent (P2's `replicates`), P1 for
    the other tasks; joined with ' + ' where runs differ."""
    if "replicates" not in summary or summary["replicates"].isna().all():
        return "P1" if is_arch(summary["task"].iloc[0]) else "paper"
    return " + ".join(sorted(summary["replicates"].dropna().unique()))


def replicate_note(summary: pd.DataFrame) -> str:
    """A caption's sentence: what a replicate is in these runs."""
    kinds = replicates_of(summary).split(" + ")
    return "; ".join(REPLICATES[k] for k in kinds).capitalize() + "."


def independent_replicates(summary: pd.DataFrame) -> bool:
    """Whether seeds are replicates an interval may be taken over (not P2's shared init and streams)."""
    return "paper" not in replicates_of(summary).split(" + ")
