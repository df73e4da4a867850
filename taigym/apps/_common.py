"""What the Hydra apps share: envs and agents from configs, statistics, atomic writes.

Config conventions (``taigym/conf``):

* ``env`` group: ``name``, ``id`` (Gymnasium id), ``family`` (for ``taigym.envs.tasks``),
  ``kwargs`` (passed to ``gym.make``) and ``task`` (null, or the fields of a task that every
  reset runs unless ``options={"task": ...}`` says otherwise: a fixed small problem).
* ``agent`` group: ``name`` plus the agent's options (for trainable agents: the ``cfg`` of
  ``taigym.agents.<name>.train``). Reserved keys, not passed on: ``name``, ``expert`` (a name,
  or a mapping with ``name`` and options: the expert given to ``train``) and ``expert_options``.
* ``planner`` group: the fields of ``taigym.planners.sqp.SQPConfig``; null values are left to
  the agent (it derives ``nodes``, ``dt`` and ``max_step`` from the env). They are added to the
  options of every ``sqp`` agent the apps build, as the agent itself or as an expert.
"""

from __future__ import annotations

import functools
import importlib
import io
import json
import math
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

os.environ.setdefault("TI_SKIP_VERSION_CHECK", "ON")
os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")   # Ray: never report usage over the network

RESERVED_AGENT_KEYS = ("name", "expert", "expert_options")
EPISODE_KEYS = ("task", "success", "in_target", "spilled", "in_source", "return_", "steps",
                "act_seconds", "sim_unstable")
FRACTION_KEYS = ("in_target", "spilled", "in_source")
MEAN_KEYS = ("in_target", "spilled", "in_source", "return_", "steps", "act_seconds")


# ---------------------------------------------------------------------- configs
def to_plain(cfg) -> Any:
    """An OmegaConf node (or anything) as plain Python containers, interpolations resolved."""
    try:
        from omegaconf import DictConfig, ListConfig, OmegaConf

        if isinstance(cfg, (DictConfig, ListConfig)):
            return OmegaConf.to_container(cfg, resolve=True)
    except ImportError:  # pragma: no cover
        pass
    return cfg


def _tuples(value):
    if isinstance(value, list):
        return tuple(_tuples(v) for v in value)
    if isinstance(value, dict):
        return {k: _tuples(v) for k, v in value.items()}
    return value


# ---------------------------------------------------------------------- envs
class FixedTask(gym.Wrapper):
    """Resets run ``task`` unless ``options={"task": ...}`` gives another."""

    def __init__(self, env, task):
        super().__init__(env)
        self.fixed_task = task

    def reset(self, *, seed=None, options=None):
        options = dict(options or {})
        options.setdefault("task", self.fixed_task)
        return self.env.reset(seed=seed, options=options)


def task_from_cfg(env_cfg: Mapping):
    fields = env_cfg.get("task")
    if not fields:
        return None
    family = env_cfg.get("family", "pour")
    if family != "pour":
        raise ValueError(f"env.task is only supported for the pour family, got {family!r}")
    from taigym.envs.pour_tasks import PourTask

    return PourTask(**_tuples(dict(fields)))


def make_env(env_cfg: Mapping, **overrides):
    """``gym.make(env.id, **env.kwargs, **overrides)``, wrapped to run ``env.task`` if set."""
    import taigym  # noqa: F401 - registers the ids

    env_cfg = to_plain(env_cfg)
    kwargs = {**_tuples(dict(env_cfg.get("kwargs") or {})), **overrides}
    task = task_from_cfg(env_cfg)
    if task is not None:
        kwargs.pop("task_split", None)            # the fixed task replaces the sampled ones
    env = gym.make(env_cfg["id"], **kwargs)
    return FixedTask(env, task) if task is not None else env


def env_factory(env_cfg: Mapping, **overrides) -> Callable:
    """A picklable zero-argument env constructor (for SB3's vector envs, Ray workers)."""
    return functools.partial(make_env, to_plain(env_cfg), **overrides)


def eval_tasks(env_cfg: Mapping, split: str, episodes: int) -> list:
    """The first ``episodes`` tasks of the fixed split (or ``env.task`` repeated)."""
    task = task_from_cfg(to_plain(env_cfg))
    if task is not None:
        return [task] * int(episodes)
    from taigym.envs import tasks

    pool = tasks(to_plain(env_cfg).get("family", "pour"), split)
    if episodes > len(pool):
        raise ValueError(f"episodes={episodes} but the {split!r} split has {len(pool)} tasks")
    return list(pool[:int(episodes)])


# ---------------------------------------------------------------------- agents
def agent_module(name: str):
    """The module that implements agent ``name`` (registry entry, else ``taigym.agents.<name>``)."""
    from taigym import agents

    target = agents._REGISTRY.get(name)
    mod = target.split(":")[0] if target else f"taigym.agents.{name}"
    try:
        return importlib.import_module(mod)
    except ModuleNotFoundError as e:
        if e.name == mod:
            raise ValueError(f"unknown agent {name!r}; available: {', '.join(agents.available())}") from e
        raise


def agent_class(name: str):
    from taigym import agents

    target = agents._REGISTRY.get(name)
    if target is None:
        raise ValueError(f"unknown agent {name!r}; available: {', '.join(agents.available())}")
    module, cls = target.split(":")
    return getattr(importlib.import_module(module), cls)


def planner_options(planner_cfg: Mapping | None) -> dict:
    return {k: _tuples(v) for k, v in (to_plain(planner_cfg) or {}).items() if v is not None and k != "name"}


def agent_options(agent_cfg: Mapping, planner_cfg: Mapping | None = None) -> dict:
    """The agent's options: its config without the reserved keys (plus the planner's for sqp)."""
    cfg = to_plain(agent_cfg) or {}
    opts = {k: v for k, v in cfg.items() if k not in RESERVED_AGENT_KEYS}
    if cfg.get("name") == "sqp":
        opts = {**planner_options(planner_cfg), **opts}
    return opts


def expert_spec(agent_cfg: Mapping, planner_cfg: Mapping | None = None) -> tuple[str, dict] | None:
    """(name, options) of the expert named by ``agent.expert`` (None if there is none)."""
    cfg = to_plain(agent_cfg) or {}
    exp = cfg.get("expert")
    if not exp:
        return None
    if isinstance(exp, Mapping):
        exp = dict(exp)
        name, opts = exp.pop("name"), exp
    else:
        name, opts = str(exp), {}
    opts.update(cfg.get("expert_options") or {})
    if name == "sqp":
        opts = {**planner_options(planner_cfg), **opts}
    return name, opts


def resolve_checkpoint(path: str | Path) -> Path:
    """A checkpoint file, or in a train run directory its final agent (``agent.*``) or last
    checkpoint (``checkpoints/model.zip``)."""
    path = Path(path)
    if path.is_file():
        return path
    if path.is_dir():
        finals = sorted(p for p in path.glob("agent.*") if p.is_file())
        if finals:
            return finals[0]
        for cand in (path / "checkpoints" / "model.zip",):
            if cand.exists():
                return cand
        raise FileNotFoundError(f"no agent checkpoint in {path} (looked for agent.* and checkpoints/model.zip)")
    raise FileNotFoundError(f"checkpoint {path} does not exist")


def build_agent(name: str, env, options: Mapping | None = None, checkpoint: str | Path | None = None):
    """``taigym.agents.make(name, env, **options)``, or ``<AgentClass>.load(checkpoint, env)``."""
    from taigym import agents

    if checkpoint:
        cls = agent_class(name)
        if not hasattr(cls, "load"):
            raise ValueError(f"agent {name!r} cannot load checkpoints")
        return cls.load(resolve_checkpoint(checkpoint), env)
    return agents.make(name, env, **dict(options or {}))


# ---------------------------------------------------------------------- statistics
def wilson(k: int, n: int, z: float = 1.959964) -> tuple[float, float]:
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


def aggregate(rows: Iterable[Mapping]) -> dict:
    """Success rate with its 95 % Wilson interval; means with 95 % t intervals (``<key>_ci95``);
    ``latency_ms`` is the mean per-decision time of the agent (``act_seconds``) in ms."""
    rows = list(rows)
    n = len(rows)
    out: dict[str, Any] = {"episodes": n}
    if n == 0:
        return out
    k = sum(bool(r["success"]) for r in rows)
    out["success_rate"] = k / n
    out["success_ci95"] = list(wilson(k, n))
    for key in MEAN_KEYS:
        vals = [float(r[key]) for r in rows if key in r]
        if not vals:
            continue
        scale = 1e3 if key == "act_seconds" else 1.0
        m, lo, hi = mean_ci(vals)
        if key in FRACTION_KEYS:                 # fractions of the liquid: the interval stays in [0, 1]
            lo, hi = max(lo, 0.0), min(hi, 1.0)
        elif key == "act_seconds":
            lo = max(lo, 0.0)
        name = "latency_ms" if key == "act_seconds" else f"mean_{key.rstrip('_')}"
        out[name] = m * scale
        out[f"{name}_ci95"] = [lo * scale, hi * scale]
    out["sim_unstable"] = int(sum(bool(r.get("sim_unstable", False)) for r in rows))
    return out


def clean_row(row: Mapping) -> dict:
    """An episode row with JSON-ready values."""
    out = {}
    for k, v in row.items():
        if isinstance(v, (np.bool_, bool)):
            out[k] = bool(v)
        elif isinstance(v, (np.integer,)):
            out[k] = int(v)
        elif isinstance(v, (np.floating, float)):
            out[k] = float(v)
        else:
            out[k] = v
    return out


# ---------------------------------------------------------------------- files
def write_atomic(path: str | Path, data: bytes | str) -> Path:
    """Write through a temporary file in the same directory and rename (never a torn file)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_bytes(data.encode() if isinstance(data, str) else data)
    os.replace(tmp, path)
    return path


def write_json(path: str | Path, data: Any) -> Path:
    return write_atomic(path, json.dumps(data, indent=1, default=_json_default) + "\n")


def _json_default(o):
    if isinstance(o, np.generic):
        return o.item()
    if isinstance(o, np.ndarray):
        return o.tolist()
    if isinstance(o, Path):
        return str(o)
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


def write_csv(path: str | Path, rows: Sequence[Mapping], fields: Sequence[str] | None = None) -> Path:
    import csv

    fields = list(fields or (list(rows[0]) if rows else []))
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=fields, extrasaction="ignore")
    w.writeheader()
    w.writerows(rows)
    return write_atomic(path, buf.getvalue())


def save_figure(fig, path: str | Path, dpi: int = 120) -> Path:
    buf = io.BytesIO()
    fig.savefig(buf, format=Path(path).suffix.lstrip(".") or "png", dpi=dpi)
    return write_atomic(path, buf.getvalue())


def set_torch_threads(n: int = 1) -> None:
    """Keep torch to ``n`` threads (the machine is shared; small MLPs gain nothing from more)."""
    try:
        import torch

        if n and torch.get_num_threads() != n:
            torch.set_num_threads(int(n))
    except ImportError:  # pragma: no cover
        pass
