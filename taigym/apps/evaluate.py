"""Evaluate one agent on one env: ``metrics.json`` with the env's metrics and 95 % intervals.

    python -m taigym.apps.evaluate env=transport agent=expert episodes=20   # the env's own expert
    python -m taigym.apps.evaluate env=pour agent=sqp episodes=100
    python -m taigym.apps.evaluate env=pour_simplified agent=scripted episodes=20 video_episodes=2 logger=wandb
    python -m taigym.apps.evaluate env=pour_simplified agent=ppo checkpoint=runs/train/ppo/pour_simplified/seed0

Runs the agent once on each of the first ``episodes`` tasks of the fixed ``split`` (episode i
reset with seed ``seed + i``) and writes ``metrics.json`` in the Hydra run directory (through a
temporary file): the config, the env's episode metrics and their kinds
(``metadata["episode_metrics"]``), one row per episode (task index, the env's metrics, return,
steps, per-decision latency, planning time, sim_unstable) and the aggregate (rates with Wilson
intervals, means with Student-t intervals, latency in ms, planning time in s). Learned agents
(``bc``, ``dagger``, ``ppo``, ``sac``) need ``checkpoint=`` (a file or a train run directory).
Ends with one line of JSON (the aggregate's headline figures). Config: ``taigym/conf/evaluate.yaml``.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Mapping
from pathlib import Path

from omegaconf import DictConfig

from taigym.agents import episode_metrics, run_episode
from taigym.agents.metrics import ci_key, summary_keys
from taigym.training.loggers import make_logger, write_video

from .common import (agent_name, agent_options, aggregate, build_agent, check_agent, clean_row, count, eval_tasks,
                     hydra_app, make_env, progress_bar, set_torch_threads, to_plain, write_json)

log = logging.getLogger(__name__)
HEADLINE = ("mean_return", "latency_ms", "plan_seconds")


def run_agent(env_cfg: Mapping, agent_cfg: Mapping, planner_cfg: Mapping | None, *, episodes: int,
              split: str = "eval", seed: int = 0, checkpoint: str | None = None, agent=None,
              video_episodes: int = 0, progress: bool = False) -> tuple[list[dict], list, dict]:
    """Episode rows, frames of the first ``video_episodes`` and the env's episode metrics
    (``{key: kind}``) of an agent on an env config.

    ``agent``, if given, is used instead of building one from ``agent_cfg``; its ``env`` is
    replaced by the evaluation env."""
    env_cfg, agent_cfg = to_plain(env_cfg), to_plain(agent_cfg)
    tasks = eval_tasks(env_cfg, split, episodes)          # bad counts fail before any env is built
    kwargs = {"render_mode": "rgb_array"} if video_episodes > 0 else {}
    env = make_env(env_cfg, **kwargs)
    try:
        name = agent_name(agent_cfg, env_cfg)
        if agent is None:
            agent = build_agent(name, env, agent_options(agent_cfg, planner_cfg, env_cfg, acting=True), checkpoint)
        policy_kwargs = dict(getattr(agent, "env_kwargs", None) or {})   # what the policy was trained for
        if any(env.unwrapped.spec.kwargs.get(k) != v for k, v in policy_kwargs.items()):
            log.info("%s acts with env arguments %s (from its checkpoint)", name, policy_kwargs)
            env.close()
            env = make_env(env_cfg, **kwargs, **policy_kwargs)
        agent.env = env
        metrics = episode_metrics(env)
        frames: list = []
        rows = []
        bar = progress_bar(len(tasks), f"{name} on {env_cfg['name']}", progress)
        for i, task in enumerate(tasks):
            row = run_episode(env, agent, seed=seed + i, task=task, frames=frames if i < video_episodes else None)
            rows.append(clean_row({"task": i, **row}))
            if bar is not None:
                bar.update(1)
                bar.set_postfix(success=f"{sum(r['success'] for r in rows)}/{len(rows)}")
        if bar is not None:
            bar.close()
    finally:
        env.close()
    return rows, frames, metrics


def evaluate_cfg(cfg: DictConfig | Mapping, run_dir: str | Path, agent=None, logger=None,
                 step: int = 0, filename: str = "metrics.json") -> dict:
    """Evaluate as the app does (``cfg`` holds env, agent, planner, episodes, split, seed,
    checkpoint, video_episodes, progress); writes ``run_dir/metrics.json``; returns its dict."""
    set_torch_threads(1)
    run_dir = Path(run_dir)
    plain = to_plain(cfg)
    episodes = count("episodes", plain["episodes"])
    video = count("video_episodes", int(plain.get("video_episodes", 0) or 0), 0)
    if agent is None:           # a learned agent without its checkpoint fails before any work
        check_agent(agent_name(plain["agent"], plain["env"]), plain["env"]["family"], plain.get("checkpoint"))
    run_dir.mkdir(parents=True, exist_ok=True)
    own_logger = logger is None
    if own_logger:
        logger = make_logger(plain.get("logger"), run_dir, config=plain)
    try:
        t0 = time.perf_counter()
        rows, frames, metrics = run_agent(plain["env"], plain["agent"], plain.get("planner"), episodes=episodes,
                                          split=plain.get("split", "eval"), seed=int(plain.get("seed", 0)),
                                          checkpoint=plain.get("checkpoint"), agent=agent, video_episodes=video,
                                          progress=bool(plain.get("progress", False)))
        agg = aggregate(rows, metrics)
        agg["wall_seconds"] = time.perf_counter() - t0
        out = {"agent": agent_name(plain["agent"], plain["env"]), "agent_config": plain["agent"]["name"],
               "env": plain["env"]["name"], "split": plain.get("split", "eval"),
               "checkpoint": plain.get("checkpoint"), "metrics": metrics, "config": plain, "aggregate": agg,
               "episodes": rows}
        write_json(run_dir / filename, out)
        if frames:
            write_video(frames, run_dir / "video.mp4")
            logger.log_video(frames, step=step, name="eval/video")
        logger.log({f"eval/{k}": v for k, v in agg.items() if isinstance(v, (int, float))}, step=step)
    finally:
        if own_logger:
            logger.finish()
    return out


def headline(out: Mapping) -> dict:
    """The aggregate's headline figures: every metric with its interval, return, latency, plan time."""
    agg = out["aggregate"]
    head = {"agent": out["agent"], "env": out["env"], "episodes": agg["episodes"]}
    for name in [*summary_keys(out.get("metrics") or {"success": "rate"}).values(), *HEADLINE]:
        if name in agg:
            head[name] = round(float(agg[name]), 4)
            if ci_key(name) in agg and name not in HEADLINE[1:]:
                head[ci_key(name)] = [round(float(x), 4) for x in agg[ci_key(name)]]
    return head


def describe(out: Mapping) -> str:
    """One line: the agent, the env and each metric with its 95 % interval."""
    agg, parts = out["aggregate"], []
    for key, name in summary_keys(out.get("metrics") or {"success": "rate"}).items():
        lo, hi = agg[ci_key(name)]
        parts.append(f"{key} {agg[name]:.3g} [{lo:.3g}, {hi:.3g}]")
    parts.append(f"latency {agg.get('latency_ms', float('nan')):.3g} ms, planning {agg.get('plan_seconds', 0):.3g} s")
    return f"{out['agent']} on {out['env']} ({agg['episodes']} episodes): " + ", ".join(parts)


@hydra_app("evaluate")
def main(cfg: DictConfig, run_dir: Path) -> dict:
    out = evaluate_cfg(cfg, run_dir)
    log.info("%s -> %s", describe(out), run_dir / "metrics.json")
    print(json.dumps(headline(out)))
    return out["aggregate"]


if __name__ == "__main__":
    main()
