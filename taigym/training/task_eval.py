"""An agent once on each of a list of tasks, on the env's batched engine when it has one.

:func:`batched_spec` tells whether an env constructor builds an env that Gymnasium can
vectorise natively (a registered ``vector_entry_point``: taigym's Pour-v0 steps all members in
one batch); :func:`evaluate_tasks` runs an agent's deterministic policy once on each task there
(``batch`` tasks at a time), else on one env, episode after episode. The trainers use it for
their learning curves; the evaluate app's ``metrics.json`` (intervals, per-episode rows) is
:mod:`taigym.apps.evaluate`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import gymnasium as gym
import numpy as np

from taigym.agents import episode_metrics, run_episode


def batched_spec(make_env: Callable) -> tuple[str, dict] | None:
    """``(env id, kwargs)`` for ``gym.make_vec(id, n, vectorization_mode="vector_entry_point",
    **kwargs)`` if the env ``make_env()`` builds has a native vector version and no wrapper
    but Gymnasium's own (a wrapper of another package changes what the vector env would do),
    else None."""
    env = make_env()
    try:
        layer = env
        while isinstance(layer, gym.Wrapper):
            if not type(layer).__module__.startswith("gymnasium."):
                return None
            layer = layer.env
        spec = env.spec
        if spec is None or gym.spec(spec.id).vector_entry_point is None:
            return None
        return spec.id, dict(spec.kwargs)
    finally:
        env.close()


def evaluate_tasks(agent, make_env: Callable, tasks: Sequence, batch: int = 100) -> dict:
    """The env's episode metrics (means over ``tasks``, each run once, deterministically;
    episode i reset with seed i) of ``agent`` (``act(obs, info)``, vectorised over a batch of
    observations on the batched engine)."""
    if len(tasks) == 0:
        raise ValueError("tasks must not be empty")
    spec = batched_spec(make_env)
    rows: list[dict] = []
    if spec is None:
        env = make_env()
        try:
            agent.env = env
            metrics = episode_metrics(env)
            for i, task in enumerate(tasks):
                row = run_episode(env, agent, seed=i, task=task)
                rows.append({k: float(row[k]) for k in metrics})
        finally:
            env.close()
    else:
        env_id, kwargs = spec
        for lo in range(0, len(tasks), batch):
            chunk = list(tasks[lo:lo + batch])
            venv = gym.make_vec(env_id, num_envs=len(chunk), vectorization_mode="vector_entry_point", **kwargs)
            try:
                metrics = episode_metrics(venv.metadata)
                obs, info = venv.reset(seed=list(range(lo, lo + len(chunk))), options={"task": chunk})
                first: list[dict | None] = [None] * len(chunk)
                while any(f is None for f in first):
                    obs, _, terminated, truncated, info = venv.step(agent.act(obs, info))
                    for i in np.flatnonzero(np.logical_or(terminated, truncated)):
                        if first[i] is None:
                            first[i] = {k: float(info[k][i]) for k in metrics}
            finally:
                venv.close()
            rows += first
    return {k: float(np.mean([r[k] for r in rows])) for k in rows[0]} | {"episodes": len(rows)}


__all__ = ["batched_spec", "evaluate_tasks"]
