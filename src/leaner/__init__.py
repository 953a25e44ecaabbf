"""leaner: a reproducible ablation pipeline for "more heads, less depth" and its stress test."""

from .compute.numerics import cap_numpy

__version__ = "0.1.0"
cap_numpy()  # before anything of leaner's loads numpy (compute/numerics.py)
