"""Argument checks shared by the envs and their task dataclasses."""

from __future__ import annotations

import math
from typing import Any

import numpy as np


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


def finite_tuple(name: str, value: Any, size: int) -> tuple[float, ...]:
    """``value`` as ``size`` floats, or ``ValueError`` naming ``name`` unless they are finite."""
    try:
        a = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        a = np.full(0, np.nan)
    if a.shape != (size,) or not np.all(np.isfinite(a)):
        raise ValueError(f"{name} must be {size} finite numbers, got {value!r}")
    return tuple(float(x) for x in a)


def param_items(name: str, value: Any) -> tuple[tuple[str, float], ...]:
    """A mapping (or pairs) of parameter names to numbers as sorted (name, float) pairs, or
    ``ValueError`` naming ``name``."""
    items = dict(value).items() if not isinstance(value, tuple) else value
    try:
        out = tuple(sorted((str(k), float(v)) for k, v in items))
    except (TypeError, ValueError):
        raise ValueError(f"{name} must map parameter names to numbers, got {value!r}") from None
    if not all(math.isfinite(v) for _, v in out):
        raise ValueError(f"{name} must hold finite numbers, got {value!r}")
    return out
