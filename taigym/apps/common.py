"""What the Hydra apps share: envs and agents from configs, statistics, atomic writes, and the
conventions every app follows (:func:`hydra_app`).

Config conventions (``taigym/conf``):

* ``env`` group: ``name``, ``id`` (Gymnasium id), ``family`` (for ``taigym.envs.tasks``),
  ``kwargs`` (passed to ``gym.make``), ``task`` (null, or the fields of a task that every reset
  runs unless ``options={"task": ...}`` says otherwise: a fixed small problem), ``expert``
  (``name`` and ``options`` of the env's own expert: what ``agent=expert`` runs and what ``bc``
  and ``dagger`` learn from) and ``learner`` (``features``, ``ignore_obs``: the MLP policies'
  input defaults on this env).
* ``agent`` group: ``name`` plus the agent's options (for trainable agents also the ``cfg`` of
  their trainer in :mod:`taigym.training`). Reserved keys, not passed on: ``name``, ``expert``
  (a name, or a mapping with ``name`` and options: the expert given to the trainer) and
  ``expert_options``. ``name: expert`` is the env's expert (``env.expert``).
* ``planner`` group: the fields of ``taigym.planners.sqp.SQPConfig``; null values are left to
  the agent (it derives ``nodes``, ``dt`` and ``max_step`` from the env). They are added to the
  options of every ``sqp`` agent the apps build, as the agent itself or as an expert.

App conventions: a run directory per command under ``runs/<app>/`` (Hydra's), ``seed`` in the
config, ``logger`` group, progress bars (``progress``), messages through :mod:`logging` (so that
Hydra's ``<app>.log`` in the run directory holds them), one line of JSON printed last; an error
in the user's input ends the command with one line naming it (exit status 1), and a failed run
leaves no empty run directory behind.
"""

from __future__ import annotations

import functools
import hashlib
import importlib
import io
import json
import logging
import os
import shutil
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
from omegaconf import DictConfig, ListConfig, OmegaConf

os.environ.setdefault("TI_SKIP_VERSION_CHECK", "ON")
os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")   # Ray: never report usage over the network

log = logging.getLogger(__name__)

RESERVED_AGENT_KEYS = ("name", "expert", "expert_options")
EXPERT = "expert"                  # agent=expert: the env's own expert (env.expert)
#: the trainer of each trainable agent (taigym.training): "module:function"
TRAINERS = {"bc": "taigym.training.bc:train", "dagger": "taigym.training.dagger:train",
            "rh": "taigym.training.rh:train", "ppo": "taigym.training.sb3:train_ppo",
            "sac": "taigym.training.sb3:train_sac"}
#: where each trainer's options are declared (the keys that do not change how the agent acts)
TRAIN_OPTIONS = {"bc": "taigym.training.bc:DEFAULTS", "dagger": "taigym.training.dagger:DEFAULTS",
                 "rh": "taigym.training.rh:TRAIN_DEFAULTS"}
#: files Hydra writes in a run directory before the app runs (a run dir with nothing else is empty)
HYDRA_FILES = (".hydra",)


class UserError(ValueError):
    """A mistake in the command or config, reported in one line (no traceback)."""


# ---------------------------------------------------------------------- configs
def to_plain(cfg) -> Any:
    """An OmegaConf node (or anything) as plain Python containers, interpolations resolved."""
    if isinstance(cfg, (DictConfig, ListConfig)):
        return OmegaConf.to_container(cfg, resolve=True)
    return cfg


def _tuples(value):
    if isinstance(value, list):
        return tuple(_tuples(v) for v in value)
    if isinstance(value, dict):
        return {k: _tuples(v) for k, v in value.items()}
    return value


def count(name: str, value, lo: int = 1) -> int:
    """``value`` as an integer >= ``lo``, else ``ValueError`` naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < lo:
        raise ValueError(f"{name} must be an integer >= {lo}, got {value!r}")
    return int(value)


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


def task_from_cfg(env_cfg: Mapping) -> dict | None:
    """The fields of ``env.task`` (the env reads them as its task's ``to_dict``), or None."""
    fields = to_plain(env_cfg).get("task")
    return dict(fields) if fields else None


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


def env_config(name: str) -> dict:
    """The env config ``taigym/conf/env/<name>.yaml`` (as ``env=<name>`` gives it)."""
    path = Path(__file__).resolve().parent.parent / "conf" / "env" / f"{name}.yaml"
    if not path.exists():
        available = sorted(p.stem for p in path.parent.glob("*.yaml"))
        raise ValueError(f"env config {name!r} does not exist; available: {', '.join(available)}")
    return to_plain(OmegaConf.load(path))


def env_factory(env_cfg: Mapping, **overrides) -> Callable:
    """A picklable zero-argument env constructor (for SB3's vector envs, Ray workers)."""
    return functools.partial(make_env, to_plain(env_cfg), **overrides)


def eval_tasks(env_cfg: Mapping, split: str, episodes: int, start: int = 0) -> list:
    """Tasks ``start .. start + episodes - 1`` of the fixed split (or ``env.task`` repeated)."""
    episodes, start = count("episodes", episodes), count("start", start, 0)
    task = task_from_cfg(env_cfg)
    if task is not None:
        return [task] * episodes
    from taigym.envs import tasks

    pool = tasks(to_plain(env_cfg).get("family", "pour"), split)
    if start + episodes > len(pool):
        raise ValueError(f"episodes must be at most {len(pool) - start}: the {split!r} split has {len(pool)} tasks"
                         + (f" and start={start}" if start else "") + f", got {episodes}")
    return list(pool[start:start + episodes])


# ---------------------------------------------------------------------- agents
def trainer(name: str) -> Callable:
    """The trainer of agent ``name`` (``train(make_env, cfg, run_dir, logger, expert)``)."""
    if name not in TRAINERS:
        from taigym import agents

        if name not in agents.available():
            raise ValueError(f"unknown agent {name!r}; available: {', '.join(agents.available())}")
        raise ValueError(f"agent {name!r} is not trainable; trainable agents: {', '.join(sorted(TRAINERS))}")
    module, fn = TRAINERS[name].split(":")
    return getattr(importlib.import_module(module), fn)


def _target(spec: str):
    module, attr = spec.split(":")
    return getattr(importlib.import_module(module), attr)


def planner_options(planner_cfg: Mapping | None) -> dict:
    return {k: _tuples(v) for k, v in (to_plain(planner_cfg) or {}).items() if v is not None and k != "name"}


def env_expert(env_cfg: Mapping | None) -> tuple[str, dict]:
    """(name, options) of the env's own expert (``env.expert``)."""
    exp = (to_plain(env_cfg) or {}).get("expert")
    if not exp:
        raise ValueError(f"env {(env_cfg or {}).get('name')!r} names no expert (env.expert.name): agent=expert "
                         "needs one")
    if isinstance(exp, str):
        return exp, {}
    return str(exp["name"]), dict(exp.get("options") or {})


def agent_name(agent_cfg: Mapping, env_cfg: Mapping | None = None) -> str:
    """The agent the config runs (``expert``: the env's expert)."""
    name = (to_plain(agent_cfg) or {}).get("name")
    return env_expert(env_cfg)[0] if name == EXPERT else str(name)


def agent_options(agent_cfg: Mapping, planner_cfg: Mapping | None = None, env_cfg: Mapping | None = None,
                  *, acting: bool = False) -> dict:
    """The agent's options: its config without the reserved keys (after the env's expert
    options for ``agent=expert``; plus the planner's for sqp). ``acting``: without its
    trainer's options (those only change how it is trained)."""
    cfg = to_plain(agent_cfg) or {}
    name = agent_name(cfg, env_cfg)
    opts = {k: v for k, v in cfg.items() if k not in RESERVED_AGENT_KEYS}
    if cfg.get("name") == EXPERT:
        opts = {**env_expert(env_cfg)[1], **opts}
    if name == "sqp":
        opts = {**planner_options(planner_cfg), **opts}
    if acting and name in TRAIN_OPTIONS:
        opts = {k: v for k, v in opts.items() if k not in _target(TRAIN_OPTIONS[name])}
    return opts


def expert_spec(agent_cfg: Mapping, planner_cfg: Mapping | None = None,
                env_cfg: Mapping | None = None) -> tuple[str, dict] | None:
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
    if name == EXPERT:
        name, opts = env_expert(env_cfg)[0], {**env_expert(env_cfg)[1], **opts}
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


def check_agent(name: str, family: str, checkpoint: str | Path | None) -> type:
    """The agent's class for an env of ``family``, after checking it can run there:
    ``ValueError`` if a learned agent has no checkpoint (it would act with untrained weights),
    ``FileNotFoundError`` if the checkpoint does not exist."""
    from taigym import agents

    cls = agents.agent_class(name, family=family)
    families = getattr(cls, "families", None)
    if families is not None and family not in families:
        raise ValueError(f"the {name} agent acts in {', '.join(families)} envs, not {family}")
    if checkpoint:
        if not hasattr(cls, "load"):
            raise ValueError(f"agent {name!r} cannot load checkpoints (checkpoint={checkpoint})")
        resolve_checkpoint(checkpoint)
    elif getattr(cls, "needs_checkpoint", False):
        raise ValueError(f"agent={name} acts with trained weights: give checkpoint=<file or train run directory> "
                         f"(python -m taigym.apps.train agent={name} env=... trains one)")
    return cls


def build_agent(name: str, env, options: Mapping | None = None, checkpoint: str | Path | None = None):
    """``taigym.agents.make(name, env, **options)``, or ``<AgentClass>.load(checkpoint, env)``
    (a learned agent needs its checkpoint: :func:`check_agent`)."""
    from taigym.envs import family_of

    cls = check_agent(name, family_of(env), checkpoint)
    if checkpoint:
        return cls.load(resolve_checkpoint(checkpoint), env)
    return cls(env, **dict(options or {}))


# ---------------------------------------------------------------------- statistics
def aggregate(rows: Sequence[Mapping], metrics: Mapping[str, str] | None = None) -> dict:
    """The episodes summarised (:func:`taigym.agents.metrics.summarise`): each of the env's
    ``metrics`` with its 95 % interval, return, length, latency (ms) and planning time (s)."""
    from taigym.agents.metrics import summarise

    return summarise(rows, metrics)


def clean_row(row: Mapping) -> dict:
    """An episode row with JSON-ready values (a value that is not finite becomes None)."""
    out = {}
    for k, v in row.items():
        if isinstance(v, (np.bool_, bool)):
            out[k] = bool(v)
        elif isinstance(v, (np.integer,)):
            out[k] = int(v)
        elif isinstance(v, (np.floating, float)):
            out[k] = float(v) if np.isfinite(v) else None     # JSON has no inf or NaN
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


def write_result_meta(path: str | Path, title: str, command: str, notes: str) -> Path:
    """A results file's metadata, as the docs' benchmark page reads it (``docs/results/NAME.json``:
    title, command, date, machine, notes)."""
    import platform
    import time

    return write_json(path, {"title": title, "command": command, "date": time.strftime("%Y-%m-%d"),
                             "machine": f"{platform.machine()}, {os.cpu_count()} cores (shared)", "notes": notes})


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

    fields = list(fields or dict.fromkeys(k for r in rows for k in r))
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


def progress_bar(total: int, desc: str, enabled: bool, unit: str = "ep"):
    """A tqdm bar on stderr (None when disabled)."""
    if not enabled:
        return None
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, unit=unit, file=sys.stderr, dynamic_ncols=True, leave=False)


# ---------------------------------------------------------------------- the apps
#: bytes of a run directory's name from its overrides; file systems refuse names over 255
MAX_NAME_BYTES = 200


def path_part(text: str) -> str:
    """``text`` as one path component: '/' (as in a Minari dataset id, ``taigym/transport/sfrrt-v0``)
    becomes '%2F', so that an override's value names a run directory and never nests it; a name
    longer than :data:`MAX_NAME_BYTES` keeps its start and ends with a hash of the whole, so that
    the same overrides still name the same directory (and resume there)."""
    name = str(text).replace("/", "%2F").encode()
    if len(name) <= MAX_NAME_BYTES:
        return name.decode()
    digest = hashlib.sha256(name).hexdigest()[:16]
    return name[:MAX_NAME_BYTES - len(digest) - 1].decode(errors="ignore") + "~" + digest


# the apps' configs name their run directories with it (``${path_part:${hydra.job.override_dirname}}``)
OmegaConf.register_new_resolver("path_part", path_part, replace=True)


def hydra_app(config_name: str):
    """``hydra.main`` with taigym's conventions around ``run(cfg, run_dir) -> int | None``:
    an error in the user's input (``ValueError``, ``FileNotFoundError``, ``FileExistsError``)
    is logged in one line and exits with status 1 (``HYDRA_FULL_ERROR=1`` shows the traceback),
    and a run that fails before writing anything leaves no run directory behind."""
    import hydra

    def wrap(run: Callable):
        @hydra.main(config_path="../conf", config_name=config_name, version_base="1.3")
        @functools.wraps(run)
        def main(cfg):
            from hydra.core.hydra_config import HydraConfig

            run_dir = Path(HydraConfig.get().runtime.output_dir)
            try:
                return run(cfg, run_dir)
            except (ValueError, FileNotFoundError, FileExistsError) as e:
                if os.environ.get("HYDRA_FULL_ERROR") == "1":
                    remove_if_empty(run_dir)
                    raise
                log.error("%s: %s", type(e).__name__, e)
                remove_if_empty(run_dir)
                sys.exit(1)
            except BaseException:
                remove_if_empty(run_dir)
                raise

        return main

    return wrap


def remove_if_empty(run_dir: Path) -> None:
    """Remove ``run_dir`` if it holds nothing but Hydra's own files (its config, the log), and
    its parents up to ``runs/`` if that left them empty."""
    run_dir = Path(run_dir).resolve()
    if not run_dir.is_dir() or any(p.name not in HYDRA_FILES and p.suffix != ".log" for p in run_dir.iterdir()):
        return
    for handler in list(logging.root.handlers):       # Hydra's job log is open in run_dir
        if isinstance(handler, logging.FileHandler) and Path(handler.baseFilename).parent == run_dir:
            logging.root.removeHandler(handler)
            handler.close()
    shutil.rmtree(run_dir, ignore_errors=True)
    parent = run_dir.parent
    for _ in range(3):                                # runs/<app>/<agent-env>/<date>: at most three up
        if parent.name == "runs" or not parent.is_dir() or any(parent.iterdir()):
            break
        parent.rmdir()
        parent = parent.parent
