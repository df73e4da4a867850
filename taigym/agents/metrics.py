"""Episode metrics: what each env declares, and their means with 95 % intervals.

Every env declares the metrics an episode is judged by in ``metadata["episode_metrics"]``
(visible through wrappers), a mapping ``{info key: kind}`` read from the episode's last
``info``:

* ``"rate"``: a boolean (``success``, ``fell``, ``reached``); summarised as ``<key>_rate``
  with a Wilson score interval ``<key>_ci95`` (``success``: ``success_rate``,
  ``success_ci95``);
* ``"fraction"``: a number in [0, 1] (``in_target``, ``spilled``); ``mean_<key>`` with a
  Student-t interval ``mean_<key>_ci95`` clipped to [0, 1];
* ``"mean"``: any other number (``goal_distance`` in m, ``path_time`` in s); ``mean_<key>``
  with a Student-t interval. Values that are not finite (the infinite path time of an episode
  that never reached its goal) or None are left out of the mean; ``mean_<key>_n`` then counts
  the values that went in.

:func:`summarise` also summarises what every episode has: its return, length, per-decision
latency ``latency_ms`` (``act_seconds`` x 1000, planning excluded) and planning time
``plan_seconds`` (:func:`taigym.agents.base.planning`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

KINDS = ("rate", "fraction", "mean")
DEFAULT_METRICS = {"success": "rate"}
Z95 = 1.959964                  # the standard normal's 97.5 % quantile
#: what every episode row has besides the env's metrics (row key -> (summary name, kind, scale))
COMMON = {"return_": ("mean_return", "mean", 1.0), "steps": ("mean_steps", "mean", 1.0),
          "act_seconds": ("latency_ms", "seconds", 1e3), "plan_seconds": ("plan_seconds", "seconds", 1.0)}
NOT_METRICS = {*COMMON, "task", "time", "sim_unstable", "seed"}


def episode_metrics(env) -> dict[str, str]:
    """The declared episode metrics ``{info key: kind}`` of ``env`` (or of its ``metadata``
    mapping), ``success`` first; an env that declares none is judged by ``success`` alone."""
    metadata = env if isinstance(env, Mapping) else getattr(env, "metadata", None)
    declared = dict((metadata or {}).get("episode_metrics") or DEFAULT_METRICS)
    bad = {k: v for k, v in declared.items() if v not in KINDS}
    if bad:
        raise ValueError(f"episode_metrics kinds must be one of {KINDS}, got {bad}")
    return {"success": "rate", **declared}


def wilson(k: int, n: int, z: float = Z95) -> tuple[float, float]:
    """Wilson score interval of a binomial proportion k/n (95 % by default)."""
    if n <= 0:
        return (0.0, 1.0)
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return (max(0.0, centre - half), min(1.0, centre + half))


def mean_ci(values: Sequence[float], level: float = 0.95) -> tuple[float, float, float]:
    """Mean and Student-t confidence interval of the mean (the interval collapses for n = 1)."""
    x = np.asarray(list(values), float)
    n = len(x)
    if n == 0:
        return (math.nan, math.nan, math.nan)
    m = float(x.mean())
    if n == 1:
        return (m, m, m)
    from scipy import stats

    half = float(stats.t.ppf(0.5 + level / 2, n - 1) * x.std(ddof=1) / math.sqrt(n))
    return (m, m - half, m + half)


def summary_keys(metrics: Mapping[str, str]) -> dict[str, str]:
    """``{metric: its summary's name}`` (``success`` -> ``success_rate``, ``in_target`` ->
    ``mean_in_target``)."""
    return {k: (f"{k}_rate" if kind == "rate" else f"mean_{k}") for k, kind in metrics.items()}


def ci_key(name: str) -> str:
    """The interval's key of a summary ``name`` (``success_rate`` -> ``success_ci95``)."""
    return "success_ci95" if name == "success_rate" else f"{name}_ci95"


def summarise(rows: Iterable[Mapping], metrics: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The episodes ``rows`` (:func:`taigym.agents.base.run_episode`'s) summarised: for each
    metric of ``metrics`` (default: the kinds inferred from the first row, booleans as rates)
    its mean or rate and 95 % interval (module docstring), then return, length, latency and
    planning time; ``sim_unstable`` counts the episodes that blew up. No rows: ``{"episodes": 0}``."""
    rows = list(rows)
    out: dict[str, Any] = {"episodes": len(rows)}
    if not rows:
        return out
    if metrics is None:
        metrics = {"success": "rate", **{k: ("rate" if isinstance(v, (bool, np.bool_)) else "mean")
                                         for k, v in rows[0].items()
                                         if k not in NOT_METRICS and isinstance(v, (bool, int, float, np.number))}}
    names = summary_keys(metrics)
    for key, kind in metrics.items():
        vals = [r[key] for r in rows if key in r]
        name = names[key]
        if kind == "rate":
            vals = [v for v in vals if v is not None]
            k = sum(bool(v) for v in vals)
            out[name] = k / len(vals) if vals else math.nan
            out[ci_key(name)] = list(wilson(k, len(vals)))
            continue
        _put_mean(out, name, vals, (0.0, 1.0) if kind == "fraction" else None)
    for key, (name, kind, scale) in COMMON.items():
        vals = [float(r[key]) * scale for r in rows if key in r]
        if vals:
            _put_mean(out, name, vals, (0.0, math.inf) if kind == "seconds" else None)
    out["sim_unstable"] = int(sum(bool(r.get("sim_unstable", False)) for r in rows))
    return out


def _put_mean(out: dict, name: str, vals: list, bounds: tuple[float, float] | None) -> None:
    finite = [float(v) for v in vals if v is not None and math.isfinite(float(v))]
    m, lo, hi = mean_ci(finite)
    if bounds is not None and finite:
        lo, hi = max(lo, bounds[0]), min(hi, bounds[1])
    out[name], out[ci_key(name)] = m, [lo, hi]
    if len(finite) != len(vals):
        out[f"{name}_n"] = len(finite)


__all__ = ["COMMON", "DEFAULT_METRICS", "KINDS", "ci_key", "episode_metrics", "mean_ci", "summarise",
           "summary_keys", "wilson"]
