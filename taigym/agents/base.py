"""The agent protocol and helpers to run agents in envs.

Every agent (expert, learned, scripted, random) is built by ``taigym.agents.make(name, env,
**cfg)`` and offers ``reset(*, seed=None)`` and ``act(obs, info) -> action``; learned agents add
``save(path)`` / ``load(path, env)``. Agents see the env only through the Gymnasium API and
``env.unwrapped.task`` (DESIGN.md §1).

Planning time: an expert marks the method that plans with :func:`planning` (wherever it is
called: in ``reset``, in the first ``act``, in a replan); the agent's ``plan_seconds`` then holds
the wall time spent in it since the last ``reset`` and ``plans`` the number of calls.
:func:`run_episode` reports ``plan_seconds`` apart from the per-decision latency
``act_seconds``, which leaves the planning out, the same way for every expert.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from .metrics import episode_metrics, summarise


def planning(method):
    """Decorator for an agent's planning method: its wall time is added to ``plan_seconds``
    and its calls to ``plans`` (a call inside another planning call counts once)."""

    @functools.wraps(method)
    def timed(self, *args, **kwargs):
        if self._planning:
            return method(self, *args, **kwargs)
        self._planning = True
        t0 = time.perf_counter()
        try:
            return method(self, *args, **kwargs)
        finally:
            self._planning = False
            self.plan_seconds += time.perf_counter() - t0
            self.plans += 1

    return timed


class Agent:
    """Base class: keeps the env and the configuration; subclasses implement ``act``.

    ``families``: the env families (:data:`taigym.envs.FAMILIES`) the agent acts in (None: any);
    another env raises ``ValueError`` on construction. ``needs_checkpoint``: a learned agent
    that acts sensibly only with trained weights (the apps refuse to run it without a
    checkpoint); ``checkpoint_name``: the file its ``save`` writes in a train run directory."""

    name = "agent"
    families: tuple[str, ...] | None = None
    needs_checkpoint = False
    checkpoint_name = "agent.pt"

    def __init__(self, env, **cfg: Any):
        if self.families is not None:
            from taigym.envs import family_of

            family = family_of(env)
            if family not in self.families:
                raise ValueError(f"the {self.name} agent acts in {', '.join(self.families)} envs, not {family}")
        self.env = env
        self.cfg = dict(cfg)
        self.rng = np.random.default_rng()
        self.plan_seconds, self.plans, self._planning = 0.0, 0, False

    def reset(self, *, seed: int | None = None) -> None:
        """Start a new episode (call after ``env.reset``)."""
        self.rng = np.random.default_rng(seed)
        self.plan_seconds, self.plans = 0.0, 0

    def act(self, obs, info: dict) -> np.ndarray:
        raise NotImplementedError

    def __repr__(self) -> str:
        cfg = ", ".join(f"{k}={v!r}" for k, v in self.cfg.items())
        return f"{type(self).__name__}({cfg})"


def check_ranges(cfg: dict, ranges: dict[str, tuple]) -> None:
    """ValueError naming the first option of ``ranges`` (name -> (low, high, unit)) whose value
    in ``cfg`` is outside [low, high]; an integer ``low`` asks for an integer."""
    for k, (lo, hi, unit) in ranges.items():
        v = cfg[k]
        integer = isinstance(lo, int)
        ok = isinstance(v, int) if integer else isinstance(v, (int, float))
        if not (ok and not isinstance(v, bool) and lo <= v <= hi):
            kind = "an integer" if integer else "a number"
            raise ValueError(f"{k} must be {kind} in [{lo}, {hi}]{' ' + unit if unit else ''}, got {v!r}")


def run_episode(env, agent: Agent, *, seed: int | None = None, task=None,
                frames: list | None = None) -> dict:
    """Run one episode. Returns the env's episode metrics (:func:`~taigym.agents.metrics.
    episode_metrics`, from the last ``info``), ``sim_unstable``, the return ``return_``, the
    length ``steps``, the simulated ``time`` (s), the agent's planning time ``plan_seconds`` (s)
    and its mean per-decision time without planning ``act_seconds`` (s).

    ``task`` runs a given task (``options={"task": task}``); ``frames``, if given, collects
    ``env.render()`` images.
    """
    metrics = episode_metrics(env)
    obs, info = env.reset(seed=seed, options={"task": task} if task is not None else None)
    agent.reset(seed=seed)
    if frames is not None:
        frames.append(env.render())
    ret, steps, act_time, plan_in_act = 0.0, 0, 0.0, 0.0
    terminated = truncated = False
    while not (terminated or truncated):
        planned = agent.plan_seconds
        t0 = time.perf_counter()
        action = agent.act(obs, info)
        act_time += time.perf_counter() - t0
        plan_in_act += agent.plan_seconds - planned
        obs, reward, terminated, truncated, info = env.step(action)
        ret += float(reward)
        steps += 1
        if frames is not None:
            frames.append(env.render())
    out = {k: (bool(info[k]) if kind == "rate" else float(info[k])) for k, kind in metrics.items()}
    out.update(sim_unstable=bool(info.get("sim_unstable", False)), return_=ret, steps=steps,
               time=float(info.get("time", np.nan)), plan_seconds=float(agent.plan_seconds),
               act_seconds=max(act_time - plan_in_act, 0.0) / max(steps, 1))
    return out


def evaluate(env, agent: Agent, tasks: Sequence, *, seed: int = 0, progress: bool = False,
             video_frames: list | None = None, video_episodes: int = 0) -> list[dict]:
    """Run ``agent`` once on every task (episode i reset with ``seed + i``); frames of the first
    ``video_episodes`` go to ``video_frames``."""
    rows = []
    for i, task in enumerate(tasks):
        frames = video_frames if (video_frames is not None and i < video_episodes) else None
        row = run_episode(env, agent, seed=seed + i, task=task, frames=frames)
        row["task"] = i
        rows.append(row)
        if progress:
            shown = " ".join(f"{k}={v:.3g}" for k, v in row.items() if k in episode_metrics(env))
            print(f"  [{i + 1}/{len(tasks)}] {shown} steps={row['steps']}", flush=True)
    return rows


__all__ = ["Agent", "check_ranges", "evaluate", "planning", "run_episode", "summarise"]
