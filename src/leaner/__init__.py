"""leaner: a reproducible ablation pipeline for "more heads, less depth" and its stress test."""

__version__ = "0.1.0"
