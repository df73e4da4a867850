"""Train an agent with its trainer in :mod:`taigym.training` (``train(make_env, cfg, run_dir, logger, expert)``).

    python -m taigym.apps.train agent=ppo env=pour_simplified
    python -m taigym.apps.train agent=sac env=pour_simplified logger=wandb agent.total_timesteps=50000
    python -m taigym.apps.train agent=dagger env=pour_simplified     # learns from the env's expert (sqp)
    python -m taigym.apps.train agent=bc env=transport agent.episodes=100   # from sfrrt's demonstrations
    python -m taigym.apps.train -m agent=ppo agent.learning_rate=1e-4,3e-4,1e-3   # Hydra multirun

Trainable agents: ``bc``, ``dagger`` (from the env's expert, ``env.expert``, or ``agent.expert``),
``rh`` (Pour-v0), ``ppo``, ``sac``. The trainable-agent contract: the trainer writes checkpoints
under ``run_dir`` (temporary file, then rename) every ``cfg["checkpoint_every"]`` units and
resumes from them when called again on the same ``run_dir``. The run directory
(``runs/train/<agent>/<env>/seed<k>/<overrides>``) depends only on the command, so rerunning an
interrupted command resumes it; ``resume=<dir>`` resumes the run in another directory. ``cfg``
is the agent config without ``name``, ``expert`` and ``expert_options``; ``expert`` is an agent
built by ``taigym.agents.make(agent.expert, env)`` on an env of its own (``expert.env``; the
``planner`` group adds its options to an ``sqp`` expert).

After training, the app saves the returned agent as ``<run_dir>/<its checkpoint_name>``
(``agent.pt``; ``agent.zip`` for SB3), logs it as an artifact and, with ``eval_episodes > 0``,
evaluates it on the eval split (``metrics.json``, ``eval/*`` metrics, a video of the first
``video_episodes``); if the env config names a ``transfer_eval`` env config (pour_simplified:
``pour``, the particle physics), the agent is evaluated on its eval tasks too
(``metrics_<name>.json``). Learned agents act in an env built with the env arguments they
were trained for (an SB3 agent's ``env_kwargs``). ``result.json`` holds the summary (train
seconds, headline metrics, the load average). Ends with one line of JSON. Config:
``taigym/conf/train.yaml``; agent hyperparameters in ``taigym/conf/agent/<name>.yaml``, tuned for an env in
``taigym/conf/recipe/<agent>_<env>.yaml`` when that file exists (``ppo_pour_simplified.yaml``).
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from taigym.training.loggers import NullLogger, make_logger

from .common import (agent_options, build_agent, count, env_config, env_factory, expert_spec, hydra_app,
                     set_torch_threads, to_plain, trainer, write_atomic)

log = logging.getLogger(__name__)
RESULT_FILE = "result.json"     # the run's summary (what the app prints last)


def run_training(cfg: DictConfig | Mapping, run_dir: str | Path, logger=None) -> dict:
    """Train as the app does; returns ``{"run_dir", "checkpoint", "train_seconds", "eval"}``."""
    plain = to_plain(cfg)
    agent_cfg, env_cfg, planner_cfg = plain["agent"], plain["env"], plain.get("planner")
    name = agent_cfg["name"]
    train = trainer(name)
    episodes = count("eval_episodes", int(plain.get("eval_episodes", 0) or 0), 0)
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    set_torch_threads(int(agent_cfg.get("torch_threads", 1) or 1))
    config_file = run_dir / "train_config.json"       # what `resume=<dir>` reruns
    if not config_file.exists():                        # (a refused rerun must not overwrite it)
        write_atomic(config_file, json.dumps(plain, indent=1, default=str))

    split = plain.get("train_split")
    make = env_factory(env_cfg, **({"task_split": split} if split else {}))
    expert = None
    spec = expert_spec(agent_cfg, planner_cfg, env_cfg)
    if spec is not None:
        expert = build_agent(spec[0], make(), spec[1])
    hp = agent_options(agent_cfg)

    own_logger = logger is None
    if own_logger:
        logger = make_logger(plain.get("logger"), run_dir, config=plain)
    try:
        t0 = time.perf_counter()
        agent = train(make, hp, run_dir, logger, expert=expert)
        train_seconds = time.perf_counter() - t0
        write_atomic(config_file, json.dumps(plain, indent=1, default=str))
        final = run_dir / agent.checkpoint_name
        saved = agent.save(final)
        final = Path(saved) if isinstance(saved, (str, Path)) else final
        step = int(getattr(agent, "num_timesteps", 0) or 0)
        logger.log({"train/seconds": train_seconds}, step=step)
        logger.log_artifact(final, name=f"{name}-{env_cfg['name']}", kind="model")
        result: dict[str, Any] = {"agent": name, "env": env_cfg["name"], "run_dir": str(run_dir),
                                  "checkpoint": str(final), "train_seconds": round(train_seconds, 3)}
        if episodes > 0:
            result["eval"] = _evaluate(plain, env_cfg, agent, final, run_dir, logger, step, episodes)
            transfer = env_cfg.get("transfer_eval")
            if transfer and plain.get("transfer_eval", False):     # train.yaml: true; sweeps: no
                result["transfer_eval"] = _evaluate(plain, env_config(transfer), agent, final, run_dir, logger,
                                                    step, episodes, filename=f"metrics_{transfer}.json")
        result["load"] = [round(x, 2) for x in os.getloadavg()]
        write_atomic(run_dir / RESULT_FILE, json.dumps(result, indent=1))
    finally:
        if own_logger:
            logger.finish()
    return result


def _evaluate(plain: Mapping, env_cfg: Mapping, agent, checkpoint: Path, run_dir: Path, logger, step: int,
              episodes: int, filename: str = "metrics.json") -> dict:
    """The trained agent on the first ``episodes`` tasks of the eval split of ``env_cfg`` (its
    env built with the env arguments the agent was trained for): ``run_dir/filename``."""
    from .evaluate import evaluate_cfg, headline

    primary = filename == "metrics.json"         # the training env's: eval/* metrics and the video
    logged = primary and plain.get("logger", {}).get("name") != "none"
    video = int(plain.get("video_episodes", 0) or 0) if logged else 0
    ev_cfg = {"env": env_cfg, "agent": plain["agent"], "planner": plain.get("planner"), "episodes": episodes,
              "split": plain.get("eval_split", "eval"), "seed": int(plain.get("seed", 0)),
              "checkpoint": str(checkpoint), "video_episodes": min(video, episodes), "progress": False}
    out = evaluate_cfg(ev_cfg, run_dir, agent=agent, logger=logger if primary else NullLogger(), step=step,
                       filename=filename)
    head = headline(out)
    if not primary:
        logger.log({f"eval_{env_cfg['name']}/{k}": v for k, v in head.items() if isinstance(v, (int, float))},
                   step=step)
    return head


def _load_saved_config(run_dir: Path) -> dict | None:
    path = run_dir / "train_config.json"
    return json.loads(path.read_text()) if path.exists() else None


@hydra_app("train")
def main(cfg: DictConfig, run_dir: Path) -> float | None:
    from hydra.core.hydra_config import HydraConfig

    if cfg.get("resume"):
        run_dir = Path(cfg.resume)
        saved = _load_saved_config(run_dir)
        if saved is None:
            raise FileNotFoundError(f"resume={run_dir}: no train_config.json there (not a train run directory)")
        # the saved run's config, with this command's dotted overrides (agent.total_timesteps=...)
        from omegaconf import OmegaConf

        dotted = [o for o in HydraConfig.get().overrides.task
                  if "." in o.split("=", 1)[0] and not o.startswith(("+", "~", "hydra."))]
        cfg = OmegaConf.merge(OmegaConf.create(saved), OmegaConf.from_dotlist(dotted))
    result = run_training(cfg, run_dir)
    ev = result.get("eval", {})
    log.info("%s: trained in %.0f s -> %s%s", result["agent"], result["train_seconds"], result["checkpoint"],
             f"; eval success {ev['success_rate']:.0%}" if ev else "")
    print(json.dumps(result))
    return ev.get("mean_return") if ev else None


if __name__ == "__main__":
    main()
