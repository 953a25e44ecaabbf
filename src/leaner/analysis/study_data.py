"""What a study's figures and tables are made from: its summary and what the plan says of it
(the functions of shown.py's records each take one StudyData)."""

from __future__ import annotations

from dataclasses import dataclass, field

import pandas as pd

from ..tasks import task_info


@dataclass
class StudyData:
    study: str
    summary: pd.DataFrame  # summary.csv
    baseline: dict = field(default_factory=dict)  # the study's baseline settings (lean_vs_baseline)
    checks: tuple[str, ...] = ()  # P2's acceptance checks to run (tables: the plan's)
    claims: list[dict] = field(default_factory=list)  # the study's declared claims
    kappa: pd.DataFrame = field(default_factory=pd.DataFrame)  # kappa_through_training.csv
    histories: list[str] = field(default_factory=list)  # every variant's history.csv

    @property
    def task(self) -> str:
        return self.summary["task"].iloc[0]

    @property
    def history(self) -> pd.DataFrame:
        """Every variant's history.csv, read into one frame (the training curves')."""
        from .curves import read_histories

        return read_histories(self.histories)

    @property
    def metric(self) -> tuple[str, str]:
        """The study's headline metric and its better direction (the task's)."""
        return task_info(self.task).metric
