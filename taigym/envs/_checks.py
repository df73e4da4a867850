"""Argument checks shared by the envs and their task dataclasses."""

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


def reset_options(options: dict | None, accepted: tuple[str, ...] = ("task",)) -> dict:
    """``options`` of ``env.reset`` as a dict, or ``ValueError`` naming the unknown ones and the
    accepted ones."""
    options = dict(options or {})
    unknown = set(options) - set(accepted)
    if unknown:
        raise ValueError(f"unknown reset option(s): {', '.join(sorted(unknown))}; "
                         f"accepted: {', '.join(accepted)}")
    return options
