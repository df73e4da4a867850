"""What ``bc`` and ``dagger`` share: the expert, the tasks learned from and validated on, expert
demonstrations, closed-loop validation, and the checks of their options.

Tasks (per env family, from :func:`taigym.envs.tasks`):

* learned from (demonstrations, DAgger's rollouts): the train split but its last ``reserve``
  tasks, then on Pour-v0 further tasks of the same distribution
  (:func:`~taigym.envs.pour_tasks.extra_train_task`: more demonstrations help the cloned policy
  most); other families wrap around;
* validation: the train split's last ``reserve`` tasks (monitoring, DAgger's rounds);
* selection: the first tasks of the ``val`` split where the family has one (Pour-v0: 400),
  disjoint from both and from the eval split.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from taigym.agents import make
from taigym.agents.features import KINDS as FEATURE_KINDS
from taigym.agents.features import resolve
from taigym.agents.metrics import episode_metrics, summarise
from taigym.agents.policy import flat_obs_dim
from taigym.envs import family_of, tasks


def env_for(make_env, expert=None):
    """The env to roll out in: the expert's own when one is given (an expert reads the task of
    the env it was built with), else a new ``make_env()``."""
    env = getattr(expert, "env", None) if expert is not None else None
    return env if env is not None else make_env()


def build_expert(env, cfg: dict, expert=None):
    """``expert``, or ``taigym.agents.make(cfg["expert"], env, **cfg["expert_options"])``."""
    if expert is not None:
        return expert
    if not cfg.get("expert"):
        raise ValueError("expert: name the agent that demonstrates (the env's expert: sqp on pour and pour3d, "
                         "sfrrt on transport and transport3d, stance on multicontact)")
    return make(cfg["expert"], env, **dict(cfg.get("expert_options") or {}))


def check_policy_options(env, cfg: dict) -> dict:
    """The feature spec for ``cfg["features"]`` in ``env``, after checking the options that
    depend on the env (``ignore_obs`` against its observation size, the features against its
    family): a ``ValueError`` naming the option and its range before any expert time is spent."""
    obs_dim = flat_obs_dim(env.observation_space)
    ignore = cfg.get("ignore_obs") or []
    bad = [i for i in ignore if isinstance(i, bool) or not isinstance(i, (int, np.integer)) or not 0 <= i < obs_dim]
    if bad:
        raise ValueError(f"ignore_obs must hold observation indices in [0, {obs_dim - 1}] "
                         f"({family_of(env)} observes {obs_dim} entries), got {bad}")
    if cfg.get("features") not in FEATURE_KINDS:
        raise ValueError(f"features must be one of {FEATURE_KINDS}, got {cfg.get('features')!r}")
    return resolve(cfg["features"], env)


def learner_setup(make_env, cfg: dict, run_dir, expert=None) -> tuple[Path, object, tuple[int, int], dict]:
    """What bc and dagger start with: the run directory (made), the env to roll out in
    (:func:`env_for`), the policy's (observation, action) sizes and its feature spec, the options
    checked against the env (:func:`check_policy_options`) before any expert time is spent."""
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    env = env_for(make_env, expert)
    features = check_policy_options(env, cfg)
    return run_dir, env, (flat_obs_dim(env.observation_space), int(np.prod(env.action_space.shape))), features


def train_tasks(env):
    return tasks(family_of(env), split="train")


def learning_task(env, i: int, reserve: int) -> tuple[int, object]:
    """(index, task) of the ``i``-th task to learn from (module docstring)."""
    train = train_tasks(env)
    usable = max(len(train) - int(reserve), 1)
    if i < usable:
        return i, train[i]
    if family_of(env) == "pour":
        from taigym.envs.pour_tasks import extra_train_task

        return len(train) + i - usable, extra_train_task(i - usable)
    return i % usable, train[i % usable]


def validation_tasks(env, n: int):
    """The last ``n`` train-split tasks (module docstring)."""
    t = train_tasks(env)
    return list(t[len(t) - int(n):]) if n > 0 else []


def selection_tasks(env, n: int):
    """The first ``n`` tasks of the family's ``val`` split, for model selection."""
    if not (isinstance(n, int) and n >= 0):
        raise ValueError(f"select_episodes must be an integer >= 0, got {n!r}")
    if n == 0:
        return []
    family = family_of(env)
    try:
        val = tasks(family, split="val")
    except ValueError as e:
        raise ValueError(f"select_episodes needs a val split, which {family!r} has not") from e
    if n > len(val):
        raise ValueError(f"select_episodes must be at most {len(val)} (the val split), got {n}")
    return list(val[:n])


def selection_score(metrics: dict) -> tuple[float, float]:
    """Rank of a candidate policy on the selection (or validation) tasks: success, then the
    liquid in the target (where the env has one)."""
    in_target = metrics.get("in_target", 0.0)
    return (metrics.get("success", 0.0), 0.0 if in_target is None or math.isnan(in_target) else in_target)


def rollout_metrics(env, agent, task_list, seed: int = 10_000) -> dict:
    """Success rate, the means of the env's other metrics and the per-decision latency over
    ``task_list`` (keys: ``success``, the metric names, ``act_seconds``)."""
    from taigym.agents import evaluate

    rows = evaluate(env, agent, task_list, seed=seed)
    metrics = episode_metrics(env)
    s = summarise(rows, metrics)
    out = {"success": s["success_rate"]}
    for k, kind in metrics.items():
        if k != "success":
            out[k] = s[f"{k}_rate" if kind == "rate" else f"mean_{k}"]
    out["act_seconds"] = float(np.mean([r["act_seconds"] for r in rows]))
    return out


def start_rows(episodes, groups: np.ndarray) -> np.ndarray:
    """Each transition's episode's first observation (the policy's ``start_pose`` input)."""
    return np.stack([np.asarray(e.obs[0], np.float32) for e in episodes])[np.asarray(groups)]


def expert_demos(make_env, env, expert, cfg: dict, out_dir: Path, *, start: int = 0, seed0: int = 0):
    """Expert episodes on learning tasks ``start..``: ``cfg["episodes"]`` of them, or, with
    ``max_labels``, as many as it takes to keep that many labels. Returns (kept, all)."""
    from taigym.data.collect import collect, make_job

    reserve = int(cfg.get("eval_episodes") or 0)
    budget = cfg.get("max_labels")
    target = int(cfg["episodes"]) if budget is None else math.inf
    chunk = max(int(cfg["workers"]), 1) * 4
    all_eps: list = []
    i = 0
    # a label budget on a family that cannot draw more tasks stops at the end of its train split
    limit = math.inf if family_of(env) == "pour" else len(train_tasks(env)) - reserve
    while i < target:
        n = chunk if budget is not None else int(target - i)
        if budget is not None and i >= limit:
            break
        jobs = [make_job(*learning_task(env, start + k, reserve), seed=seed0 + start + k, relabel="none")
                for k in range(i, i + n)]
        all_eps += collect(make_env, expert, jobs, out_dir=out_dir, workers=cfg["workers"], env=env,
                           progress=cfg["progress"], desc="expert demos")
        i += n
        kept = [e for e in all_eps if e.success or not cfg["success_only"]]
        if budget is not None and sum(len(e) for e in kept) >= int(budget):
            break
    kept = [e for e in all_eps if e.success or not cfg["success_only"]]
    return kept, all_eps


def load_demos(make_env, env, cfg: dict, run_dir: Path, expert=None):
    """Demonstrations for ``cfg`` (a Minari dataset, else the expert's episodes): (kept, stats)."""
    from taigym.data import open_minari, read_minari

    if cfg["dataset"]:
        all_eps = read_minari(open_minari(cfg["dataset"], root=cfg["dataset_root"]))
        kept = [e for e in all_eps if e.success or not cfg["success_only"]]
        source = str(cfg["dataset"])
    else:
        expert = build_expert(env, cfg, expert)
        kept, all_eps = expert_demos(make_env, env, expert, cfg, run_dir / "demos")
        source = f"expert:{getattr(expert, 'name', '?')}"
    stats = {"demo_episodes": len(all_eps), "demo_kept": len(kept), "demo_filtered": len(all_eps) - len(kept),
             "labels_queried": int(sum(e.expert_labels for e in all_eps)),
             "expert_seconds": float(sum(e.expert_seconds for e in all_eps)), "source": source}
    return kept, stats


__all__ = ["build_expert", "check_policy_options", "env_for", "expert_demos", "learner_setup", "learning_task",
           "load_demos",
           "rollout_metrics", "selection_score", "selection_tasks", "start_rows", "train_tasks",
           "validation_tasks"]
