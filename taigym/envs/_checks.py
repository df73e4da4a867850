"""Argument checks shared by the envs' task dataclasses."""

from __future__ import annotations

import math
from typing import Any


def bounded_float(name: str, value: Any, lo: float, hi: float) -> float:
    """``float(value)``, or ``ValueError`` naming ``name`` and its range [lo, hi] if it is not a
    finite number in it."""
    try:
        v = float(value)
    except (TypeError, ValueError):
        v = math.nan
    if not (math.isfinite(v) and lo <= v <= hi):
        raise ValueError(f"{name} must be in [{lo:g}, {hi:g}], got {value!r}")
    return v
