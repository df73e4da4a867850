"""The agent protocol and helpers to run agents in envs.

Every agent (expert, learned, scripted, random) is built by ``taigym.agents.make(name, env,
**cfg)`` and offers ``reset(*, seed=None)`` and ``act(obs, info) -> action``; learned agents add
``save(path)`` / ``load(path)``. Agents see the env only through the Gymnasium API and
``env.unwrapped.task`` (DESIGN.md §1).
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

METRICS = ("in_target", "spilled", "in_source", "success")


class Agent:
    """Base class: keeps the env and the configuration; subclasses implement ``act``."""

    name = "agent"

    def __init__(self, env, **cfg: Any):
        self.env = env
        self.cfg = dict(cfg)
        self.rng = np.random.default_rng()

    def reset(self, *, seed: int | None = None) -> None:
        """Start a new episode (call after ``env.reset``)."""
        self.rng = np.random.default_rng(seed)

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
    """Run one episode; returns its final metrics, return, length and mean decision time (s).

    ``task`` runs a given task (``options={"task": task}``); ``frames``, if given, collects
    ``env.render()`` images.
    """
    obs, info = env.reset(seed=seed, options={"task": task} if task is not None else None)
    agent.reset(seed=seed)
    if frames is not None:
        frames.append(env.render())
    ret, steps, act_time = 0.0, 0, 0.0
    terminated = truncated = False
    while not (terminated or truncated):
        t0 = time.perf_counter()
        action = agent.act(obs, info)
        act_time += time.perf_counter() - t0
        obs, reward, terminated, truncated, info = env.step(action)
        ret += float(reward)
        steps += 1
        if frames is not None:
            frames.append(env.render())
    out = {k: info[k] for k in METRICS}
    out.update(success=bool(info["success"]), sim_unstable=bool(info["sim_unstable"]),
               return_=ret, steps=steps, time=float(info["time"]),
               act_seconds=act_time / max(steps, 1))
    return out


def evaluate(env, agent: Agent, tasks: Sequence, *, seed: int = 0, progress: bool = False,
             video_frames: list | None = None, video_episodes: int = 0) -> list[dict]:
    """Run ``agent`` once on every task; frames of the first ``video_episodes`` go to
    ``video_frames``."""
    rows = []
    for i, task in enumerate(tasks):
        frames = video_frames if (video_frames is not None and i < video_episodes) else None
        row = run_episode(env, agent, seed=seed + i, task=task, frames=frames)
        row["task"] = i
        rows.append(row)
        if progress:
            print(f"  [{i + 1}/{len(tasks)}] success={row['success']} in_target={row['in_target']:.3f} "
                  f"spilled={row['spilled']:.3f} steps={row['steps']}", flush=True)
    return rows


def summarise(rows: Iterable[dict]) -> dict:
    """Means (and a 95 % Wilson interval for the success rate) over episodes."""
    rows = list(rows)
    n = len(rows)
    if n == 0:
        return {"episodes": 0}
    k = sum(bool(r["success"]) for r in rows)
    p, z = k / n, 1.96
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    out = {"episodes": n, "success_rate": p, "success_ci95": [max(0.0, centre - half), min(1.0, centre + half)]}
    for key in ("in_target", "spilled", "in_source", "return_", "steps"):
        out[f"mean_{key.rstrip('_')}"] = float(np.mean([r[key] for r in rows]))
    return out


def metrics_table(summaries: dict[str, dict]) -> str:
    """A Markdown table of ``{agent name: summarise(...)}``."""
    head = "| agent | episodes | success | 95 % CI | in target | spilled | left in S | return |"
    lines = [head, "|" + "---|" * 8]
    for name, s in summaries.items():
        lo, hi = s["success_ci95"]
        lines.append(f"| {name} | {s['episodes']} | {s['success_rate']:.2f} | [{lo:.2f}, {hi:.2f}] | "
                     f"{s['mean_in_target']:.3f} | {s['mean_spilled']:.3f} | {s['mean_in_source']:.3f} | "
                     f"{s['mean_return']:.3f} |")
    return "\n".join(lines)
