"""Evaluate one agent on one env: ``metrics.json`` with 95 % confidence intervals.

    python -m taigym.apps.evaluate agent=sqp env=pour episodes=100
    python -m taigym.apps.evaluate agent=scripted env=pour_simplified episodes=20 video_episodes=2 logger=wandb
    python -m taigym.apps.evaluate agent=ppo env=pour_simplified checkpoint=runs/train/ppo/pour_simplified/seed0

Runs the agent once on each of the first ``episodes`` tasks of the fixed ``split`` (episode i
reset with seed ``seed + i``) and writes ``metrics.json`` in the Hydra run directory (through a
temporary file): the config, one row per episode (task index, success, in_target, spilled,
in_source, return, steps, per-decision latency, sim_unstable) and the aggregate (success rate
with its Wilson interval, means with Student-t intervals, latency in ms). Ends with one line of
JSON (the aggregate's headline figures). Config: ``taigym/conf/evaluate.yaml``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from pathlib import Path

import hydra
from omegaconf import DictConfig

from ._common import (
    EPISODE_KEYS,
    agent_options,
    aggregate,
    build_agent,
    clean_row,
    eval_tasks,
    make_env,
    set_torch_threads,
    to_plain,
    write_json,
)
from .logging import make_logger, write_video

HEADLINE = ("success_rate", "mean_in_target", "mean_spilled", "mean_return", "latency_ms")


def run_agent(env_cfg: Mapping, agent_cfg: Mapping, planner_cfg: Mapping | None, *, episodes: int,
              split: str = "eval", seed: int = 0, checkpoint: str | None = None, agent=None,
              video_episodes: int = 0, progress: bool = False) -> tuple[list[dict], list]:
    """Episode rows (and frames of the first ``video_episodes``) of an agent on an env config.

    ``agent``, if given, is used instead of building one from ``agent_cfg``; its ``env`` is
    replaced by the evaluation env."""
    from taigym import agents

    env_cfg, agent_cfg = to_plain(env_cfg), to_plain(agent_cfg)
    kwargs = {"render_mode": "rgb_array"} if video_episodes > 0 else {}
    env = make_env(env_cfg, **kwargs)
    try:
        if agent is None:
            agent = build_agent(agent_cfg["name"], env, agent_options(agent_cfg, planner_cfg), checkpoint)
        else:
            agent.env = env
        tasks = eval_tasks(env_cfg, split, episodes)
        frames: list = []
        rows = []
        bar = None
        if progress:
            try:
                from tqdm import tqdm

                bar = tqdm(total=len(tasks), desc=f"{agent_cfg.get('name', 'agent')} on {env_cfg['name']}",
                           unit="ep", leave=False)
            except ImportError:  # pragma: no cover
                bar = None
        for i in range(len(tasks)):
            row = agents.run_episode(env, agent, seed=seed + i, task=tasks[i],
                                     frames=frames if i < video_episodes else None)
            row["task"] = i
            rows.append(clean_row({k: row[k] for k in EPISODE_KEYS if k in row}))
            if bar is not None:
                bar.update(1)
                bar.set_postfix(success=f"{sum(r['success'] for r in rows)}/{len(rows)}")
        if bar is not None:
            bar.close()
    finally:
        env.close()
    return rows, frames


def evaluate_cfg(cfg: DictConfig | Mapping, run_dir: str | Path, agent=None, logger=None,
                 step: int = 0, filename: str = "metrics.json") -> dict:
    """Evaluate as the app does (``cfg`` holds env, agent, planner, episodes, split, seed,
    checkpoint, video_episodes, progress); writes ``run_dir/metrics.json``; returns its dict."""
    set_torch_threads(1)
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    plain = to_plain(cfg)
    own_logger = logger is None
    if own_logger:
        logger = make_logger(plain.get("logger"), run_dir, config=plain)
    t0 = time.perf_counter()
    video = int(plain.get("video_episodes", 0) or 0)
    rows, frames = run_agent(plain["env"], plain["agent"], plain.get("planner"),
                             episodes=int(plain["episodes"]), split=plain.get("split", "eval"),
                             seed=int(plain.get("seed", 0)), checkpoint=plain.get("checkpoint"),
                             agent=agent, video_episodes=video, progress=bool(plain.get("progress", False)))
    agg = aggregate(rows)
    agg["wall_seconds"] = time.perf_counter() - t0
    out = {"agent": plain["agent"]["name"], "env": plain["env"]["name"], "split": plain.get("split", "eval"),
           "checkpoint": plain.get("checkpoint"), "config": plain, "aggregate": agg, "episodes": rows}
    write_json(run_dir / filename, out)
    if frames:
        write_video(frames, run_dir / "video.mp4")
        logger.log_video(frames, step=step, name="eval/video")
    logger.log({f"eval/{k}": v for k, v in agg.items() if isinstance(v, (int, float))}, step=step)
    if own_logger:
        logger.finish()
    return out


def headline(out: Mapping) -> dict:
    agg = out["aggregate"]
    return {"agent": out["agent"], "env": out["env"], "episodes": agg["episodes"],
            **{k: round(float(agg[k]), 4) for k in HEADLINE if k in agg},
            "success_ci95": [round(float(x), 4) for x in agg.get("success_ci95", [])]}


@hydra.main(config_path="../conf", config_name="evaluate", version_base="1.3")
def main(cfg: DictConfig) -> dict:
    from hydra.core.hydra_config import HydraConfig

    run_dir = Path(HydraConfig.get().runtime.output_dir)
    out = evaluate_cfg(cfg, run_dir)
    agg = out["aggregate"]
    lo, hi = agg["success_ci95"]
    print(f"{out['agent']} on {out['env']}: success {agg['success_rate']:.0%} [{lo:.0%}, {hi:.0%}] over "
          f"{agg['episodes']} episodes, in T {agg['mean_in_target']:.3f}, spilled {agg['mean_spilled']:.3f}, "
          f"latency {agg['latency_ms']:.3f} ms -> {run_dir / 'metrics.json'}")
    print(json.dumps(headline(out)))
    return agg


if __name__ == "__main__":
    main()
