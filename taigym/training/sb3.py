"""Training of the Stable-Baselines3 agents (``ppo``, ``sac``): the trainable-agent contract for
any SB3 algorithm.

:func:`train_sb3` checkpoints every ``checkpoint_every`` env steps under ``run_dir/checkpoints``
(model, its step count and, for off-policy algorithms, the replay buffer), each file written to
a temporary name and renamed, and resumes from that checkpoint when called again on the same
``run_dir`` (the hyperparameters, but the budget and logging options, must be the same).
Metrics (SB3's ``rollout/``, ``train/``, ``time/`` keys plus the env's episode metrics) go to
the taigym logger; with a :class:`~taigym.training.loggers.WandbLogger` the run also gets W&B's
SB3 callback (``wandb.integration.sb3.WandbCallback``). :func:`train_ppo` and :func:`train_sac`
are the trainers of ``ppo`` and ``sac``::

    from taigym.training.sb3 import train_ppo
    agent = train_ppo(lambda: gym.make("taigym/Pour-v0", fidelity="simplified"),
                      {"total_timesteps": 50_000}, run_dir, logger)
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from taigym.agents.metrics import episode_metrics
from taigym.agents.ppo import PPOAgent
from taigym.agents.sac import SACAgent
from taigym.agents.sb3 import CHECKPOINT_DIR, MODEL_FILE, SB3Agent, algo_keys, build_model, check_cfg, \
    save_model_atomic

from .loggers import NullLogger, WandbLogger

log = logging.getLogger(__name__)
BUFFER_FILE = "replay_buffer.pkl"
STATE_FILE = "state.json"
#: options that may change between a run and its resumption (the others must not)
RESUMABLE_CHANGES = {"save_replay_buffer", "total_timesteps", "checkpoint_every", "verbose", "progress_bar",
                     "log_interval", "torch_threads", "wandb_gradient_freq", "device"}


def _write_json(path: Path, data: Any) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(data, indent=1, default=str))
    os.replace(tmp, path)


def _make_callbacks(hp: Mapping, ckpt_dir: Path, logger, cfg_saved: Mapping, off_policy: bool,
                    metrics: Mapping[str, str]):
    from stable_baselines3.common.callbacks import BaseCallback

    class Checkpoint(BaseCallback):
        """Saves model (+ replay buffer) every ``checkpoint_every`` steps and at the end; records
        the env's episode metrics (``rollout/<key>``) for SB3's logger."""

        def __init__(self):
            super().__init__(0)
            self.last_saved = None

        def _on_training_start(self) -> None:
            self.last_saved = self.model.num_timesteps

        def _on_step(self) -> bool:
            dones = self.locals.get("dones")
            infos = self.locals.get("infos") or ()
            if dones is not None:
                for done, info in zip(dones, infos):
                    if done:
                        for k in metrics:
                            if k in info:
                                self.logger.record_mean(f"rollout/{k}", float(info[k]))
            if self.model.num_timesteps - self.last_saved >= int(hp["checkpoint_every"]):
                self.save()
            return True

        def _on_training_end(self) -> None:
            if self.model.num_timesteps != self.last_saved:
                self.save()

        def save(self) -> None:
            ckpt_dir.mkdir(parents=True, exist_ok=True)
            t0 = time.perf_counter()
            if off_policy and hp.get("save_replay_buffer", True) and getattr(self.model, "replay_buffer", None) is not None:
                tmp = ckpt_dir / f".{BUFFER_FILE}.tmp"
                self.model.save_replay_buffer(tmp)
                os.replace(tmp, ckpt_dir / BUFFER_FILE)
            save_model_atomic(self.model, ckpt_dir / MODEL_FILE)
            _write_json(ckpt_dir / STATE_FILE, {"num_timesteps": int(self.model.num_timesteps),
                                                "algo": type(self.model).__name__, "cfg": dict(cfg_saved),
                                                "saved_at": time.time()})
            self.last_saved = self.model.num_timesteps
            logger.log({"checkpoint/seconds": time.perf_counter() - t0}, step=int(self.model.num_timesteps))

    callbacks = [Checkpoint()]
    if isinstance(logger, WandbLogger):
        from wandb.integration.sb3 import WandbCallback

        callbacks.append(WandbCallback(gradient_save_freq=int(hp["wandb_gradient_freq"]), verbose=0))
    return callbacks


def _sb3_logger(logger, verbose: int):
    import sys

    from stable_baselines3.common.logger import HumanOutputFormat, KVWriter
    from stable_baselines3.common.logger import Logger as SB3Logger

    class TaigymWriter(KVWriter):
        def write(self, key_values, key_excluded, step: int = 0) -> None:
            vals = {k: float(v) for k, v in key_values.items()
                    if isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, bool)}
            if vals:
                logger.log(vals, step=int(step))

        def close(self) -> None:
            pass

    formats = [TaigymWriter()]
    if verbose:
        formats.append(HumanOutputFormat(sys.stdout))
    return SB3Logger(folder=None, output_formats=formats)


def train_sb3(agent_cls: type[SB3Agent], make_env: Callable, cfg: Mapping | None, run_dir: str | Path,
              logger=None, expert=None) -> SB3Agent:
    """Train (or resume training) an SB3 agent; see the module docstring."""
    from stable_baselines3.common.env_util import make_vec_env

    if logger is None:
        logger = NullLogger()
    hp = check_cfg(cfg, agent_cls.DEFAULTS, agent_cls.name)
    if hp["torch_threads"]:
        import torch

        torch.set_num_threads(int(hp["torch_threads"]))
    run_dir = Path(run_dir)
    ckpt_dir = run_dir / CHECKPOINT_DIR
    run_dir.mkdir(parents=True, exist_ok=True)
    algo_cls = agent_cls.algo_class()
    off_policy = agent_cls.ALGO in ("SAC", "TD3", "DDPG")
    venv = make_vec_env(make_env, n_envs=int(hp["n_envs"]), seed=int(hp["seed"]))
    metrics = episode_metrics(venv.get_attr("metadata")[0])
    saved = {k: v for k, v in hp.items()}

    model_path, state_path = ckpt_dir / MODEL_FILE, ckpt_dir / STATE_FILE
    if model_path.exists():
        state = json.loads(state_path.read_text()) if state_path.exists() else {}
        old = state.get("cfg", {})
        changed = sorted(k for k in set(old) | set(saved)
                         if k not in RESUMABLE_CHANGES and json.dumps(old.get(k), default=str) != json.dumps(saved.get(k), default=str))
        if old and changed:
            raise ValueError(f"{run_dir} holds a {agent_cls.name} checkpoint trained with other "
                             f"hyperparameters ({', '.join(changed)}); use a new run directory")
        model = algo_cls.load(str(model_path), env=venv, device=hp["device"])
        buf = ckpt_dir / BUFFER_FILE
        if off_policy and buf.exists():
            model.load_replay_buffer(str(buf))
        log.info("%s: resuming from %s at step %d", agent_cls.name, model_path, model.num_timesteps)
        logger.log({"resumed_from_step": float(model.num_timesteps)}, step=int(model.num_timesteps))
    else:
        model = build_model(algo_cls, hp, venv, algo_keys(hp))
    model.set_logger(_sb3_logger(logger, int(hp["verbose"])))
    remaining = int(hp["total_timesteps"]) - int(model.num_timesteps)
    if remaining > 0:
        model.learn(total_timesteps=remaining, reset_num_timesteps=False, log_interval=int(hp["log_interval"]),
                    callback=_make_callbacks(hp, ckpt_dir, logger, saved, off_policy, metrics),
                    progress_bar=bool(hp["progress_bar"]))
    venv.close()
    env = make_env()
    return agent_cls(env, checkpoint=model_path if model_path.exists() else None, model=model)


def train_ppo(make_env: Callable, cfg: Mapping | None, run_dir: str | Path, logger=None, expert=None) -> PPOAgent:
    """Train PPO (or resume it from ``run_dir``'s checkpoint); ``expert`` is not used."""
    return train_sb3(PPOAgent, make_env, cfg, run_dir, logger, expert)


def train_sac(make_env: Callable, cfg: Mapping | None, run_dir: str | Path, logger=None, expert=None) -> SACAgent:
    """Train SAC (or resume it from ``run_dir``'s checkpoint); ``expert`` is not used."""
    return train_sb3(SACAgent, make_env, cfg, run_dir, logger, expert)


__all__ = ["train_ppo", "train_sac", "train_sb3"]
