"""Argument checks shared by the envs and their task dataclasses."""

from __future__ import annotations

import math
from typing import Any

import numpy as np


def bounded_float(name: str, value: Any, lo: float, hi: float, *, lo_open: bool = False) -> float:
    """``float(value)``, or ``ValueError`` naming ``name`` and its range [lo, hi] ((lo, hi] if
    ``lo_open``) if it is not a finite number in it (a string or a bool is not a number here)."""
    number = isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool)
    v = float(value) if number else math.nan
    if not (math.isfinite(v) and (lo < v if lo_open else lo <= v) and v <= hi):
        raise ValueError(f"{name} must be in {'(' if lo_open else '['}{lo:g}, {hi:g}], got {value!r}")
    return v


def choice(name: str, value: Any, accepted: tuple) -> Any:
    """``value``, or ``ValueError`` naming ``name`` and the ``accepted`` values if it is not one."""
    if value not in accepted:
        raise ValueError(f"{name} must be one of {accepted}, got {value!r}")
    return value


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


def check_action(action: Any, space, name: str = "action") -> np.ndarray:
    """``action`` as a float64 array of ``space``'s shape (a Gymnasium ``Box``), or ``ValueError``
    naming ``name``, the expected shape and the accepted range if it has another number of
    entries, is not numeric or holds a nan or an infinity. Extra axes of length 1 are accepted
    ((1, 3) for (3,)). Values outside the range are returned as given: each env clips them as
    its docstring says."""
    shape = tuple(space.shape)
    lo, hi = np.min(space.low), np.max(space.high)
    expect = (f"{name} must be {int(np.prod(shape))} finite numbers of shape {shape} in "
              f"[{lo:g}, {hi:g}] (values outside the range are clipped)")
    try:
        a = np.asarray(action, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError(f"{expect}; got {action!r}") from None
    if a.shape != shape and tuple(d for d in a.shape if d != 1) != tuple(d for d in shape if d != 1):
        raise ValueError(f"{expect}; got shape {a.shape}")
    a = a.reshape(shape)
    if not np.all(np.isfinite(a)):
        raise ValueError(f"{expect}; got {np.array2string(a, threshold=16)}")
    return a
