"""Shared machinery of the Stable-Baselines3 agents (``ppo``, ``sac``).

* :class:`SB3Agent` wraps a trained SB3 model in the taigym agent protocol (``act`` is the
  deterministic policy; ``save(path)`` / ``load(path, env)``).
* :func:`train_sb3` implements the trainable-agent contract for any SB3 algorithm: checkpoints
  every ``checkpoint_every`` env steps under ``run_dir/checkpoints`` (model, its step count and,
  for off-policy algorithms, the replay buffer), each file written to a temporary name and
  renamed, and resumes from that checkpoint when called again on the same ``run_dir``.
  Metrics (SB3's ``rollout/``, ``train/``, ``time/`` keys plus the episodes' ``in_target``,
  ``spilled``, ``success``) go to the taigym logger; with a :class:`~taigym.apps.logging.
  WandbLogger` the run also gets W&B's SB3 callback (``wandb.integration.sb3.WandbCallback``).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from .base import Agent

CHECKPOINT_DIR = "checkpoints"
MODEL_FILE = "model.zip"
BUFFER_FILE = "replay_buffer.pkl"
STATE_FILE = "state.json"
FINAL_CHECKPOINT = "agent.zip"     # what the train app saves the returned agent as

#: options shared by every SB3 agent (the algorithm's own hyperparameters come on top)
COMMON_DEFAULTS: dict[str, Any] = {
    "total_timesteps": 100_000,      # env steps in all (summed over the n_envs copies)
    "n_envs": 4,                     # env copies stepped in lockstep (DummyVecEnv)
    "seed": 0,
    "policy": "MlpPolicy",
    "policy_kwargs": None,           # e.g. {net_arch: [64, 64], activation_fn: tanh}
    "checkpoint_every": 10_000,      # env steps between checkpoints
    "device": "cpu",
    "torch_threads": 1,              # torch intra-op threads (0: leave torch's default)
    "verbose": 0,
    "progress_bar": False,
    "log_interval": 1,               # SB3's: rollouts (on-policy) or episodes (off-policy)
    "wandb_gradient_freq": 0,        # W&B's SB3 callback: log gradients every N steps (0: off)
}
#: options that may change between a run and its resumption (the others must not)
#: keys of the agent's options that are not keyword arguments of the SB3 algorithm
NON_ALGO_KEYS = set(COMMON_DEFAULTS) | {"save_replay_buffer"}
RESUMABLE_CHANGES = {"save_replay_buffer", "total_timesteps", "checkpoint_every", "verbose", "progress_bar",
                     "log_interval", "torch_threads", "wandb_gradient_freq", "device"}
ACTIVATIONS = {"tanh": "Tanh", "relu": "ReLU", "elu": "ELU", "leaky_relu": "LeakyReLU",
               "gelu": "GELU", "silu": "SiLU"}
EPISODE_METRICS = ("in_target", "spilled", "in_source", "success")


def check_cfg(cfg: Mapping | None, defaults: Mapping[str, Any], algo: str) -> dict:
    """Defaults overlaid with ``cfg``; unknown keys raise ``ValueError`` naming them."""
    cfg = dict(cfg or {})
    unknown = set(cfg) - set(defaults)
    if unknown:
        raise ValueError(f"unknown {algo} option(s): {', '.join(sorted(unknown))}; accepted: "
                         f"{', '.join(sorted(defaults))}")
    out = {**defaults, **cfg}
    for key in ("total_timesteps", "n_envs", "checkpoint_every"):
        if not (isinstance(out[key], (int, np.integer)) and out[key] >= (0 if key == "total_timesteps" else 1)):
            raise ValueError(f"{algo} option {key} must be a positive integer, got {out[key]!r}")
    return out


def policy_kwargs(value: Mapping | None) -> dict | None:
    """YAML-friendly policy kwargs: ``activation_fn`` may be a name (tanh, relu, ...)."""
    if not value:
        return None
    from torch import nn

    out = {k: (list(v) if isinstance(v, tuple) else v) for k, v in dict(value).items()}
    act = out.get("activation_fn")
    if isinstance(act, str):
        if act.lower() not in ACTIVATIONS:
            raise ValueError(f"activation_fn must be one of {', '.join(ACTIVATIONS)}, got {act!r}")
        out["activation_fn"] = getattr(nn, ACTIVATIONS[act.lower()])
    if isinstance(out.get("net_arch"), Mapping):
        out["net_arch"] = {k: list(v) for k, v in out["net_arch"].items()}
    elif out.get("net_arch") is not None:
        out["net_arch"] = list(out["net_arch"])
    return out


def _write_json(path: Path, data: Any) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(data, indent=1, default=str))
    os.replace(tmp, path)


def save_model_atomic(model, path: Path) -> Path:
    """``model.save`` through a temporary file and a rename."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.stem}.tmp.zip")
    model.save(tmp)
    os.replace(tmp, path)
    return path


class SB3Agent(Agent):
    """A Stable-Baselines3 policy as a taigym agent (deterministic actions).

    ``make(name, env, checkpoint=path)`` loads a saved model; ``make(name, env, **hyperparameters)``
    builds an untrained one (a random-initialised policy, e.g. as a baseline).
    """

    name = "sb3"
    ALGO: str = ""                # "PPO", "SAC"
    DEFAULTS: dict[str, Any] = {}

    def __init__(self, env, checkpoint: str | Path | None = None, model=None, **cfg):
        hp = check_cfg(cfg, self.DEFAULTS, self.name)
        super().__init__(env, **cfg)
        if model is None:
            if checkpoint is not None:
                model = self.algo_class().load(str(checkpoint), device="cpu")
            else:
                model = build_model(self.algo_class(), hp, _single_vec(lambda: env), algo_keys(hp))
        self.model = model
        self.checkpoint = str(checkpoint) if checkpoint is not None else None
        self._torch_threads = int(hp["torch_threads"])

    @classmethod
    def algo_class(cls):
        import stable_baselines3

        return getattr(stable_baselines3, cls.ALGO)

    @property
    def num_timesteps(self) -> int:
        return int(getattr(self.model, "num_timesteps", 0))

    def act(self, obs, info: dict) -> np.ndarray:
        action, _ = self.model.predict(obs, deterministic=True)
        return np.asarray(action, np.float32)

    def save(self, path: str | Path) -> Path:
        return save_model_atomic(self.model, Path(path))

    @classmethod
    def load(cls, path: str | Path, env) -> SB3Agent:
        path = Path(path)
        if path.is_dir():
            for cand in (path / FINAL_CHECKPOINT, path / CHECKPOINT_DIR / MODEL_FILE):
                if cand.exists():
                    path = cand
                    break
            else:
                raise FileNotFoundError(f"no {cls.name} model in {path} (looked for {FINAL_CHECKPOINT}, "
                                        f"{CHECKPOINT_DIR}/{MODEL_FILE})")
        model = cls.algo_class().load(str(path), device="cpu")
        return cls(env, checkpoint=path, model=model)


def algo_keys(hp: Mapping) -> dict:
    """The algorithm's constructor keyword arguments: ``hp`` without the taigym options."""
    return {k: v for k, v in hp.items() if k not in NON_ALGO_KEYS}


def _single_vec(make_env: Callable):
    from stable_baselines3.common.monitor import Monitor
    from stable_baselines3.common.vec_env import DummyVecEnv

    return DummyVecEnv([lambda: Monitor(make_env())])


def build_model(algo_cls, hp: Mapping, venv, kwargs: Mapping):
    kw = dict(kwargs)
    return algo_cls(hp["policy"], venv, seed=int(hp["seed"]), device=hp["device"],
                    verbose=int(hp["verbose"]), policy_kwargs=policy_kwargs(hp["policy_kwargs"]), **kw)


def _make_callbacks(hp: Mapping, ckpt_dir: Path, logger, cfg_saved: Mapping, off_policy: bool):
    from stable_baselines3.common.callbacks import BaseCallback

    class Checkpoint(BaseCallback):
        """Saves model (+ replay buffer) every ``checkpoint_every`` steps and at the end; records
        the episodes' liquid metrics for SB3's logger."""

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
                        for k in EPISODE_METRICS:
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
    try:
        from taigym.apps.logging import WandbLogger
    except ImportError:  # the apps are optional for the agents
        WandbLogger = None  # type: ignore[assignment,misc]
    if WandbLogger is not None and isinstance(logger, WandbLogger):
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
        from taigym.apps.logging import NullLogger

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
        print(f"{agent_cls.name}: resuming from {model_path} at step {model.num_timesteps}", flush=True)
        logger.log({"resumed_from_step": float(model.num_timesteps)}, step=int(model.num_timesteps))
    else:
        model = build_model(algo_cls, hp, venv, algo_keys(hp))
    model.set_logger(_sb3_logger(logger, int(hp["verbose"])))
    remaining = int(hp["total_timesteps"]) - int(model.num_timesteps)
    if remaining > 0:
        model.learn(total_timesteps=remaining, reset_num_timesteps=False, log_interval=int(hp["log_interval"]),
                    callback=_make_callbacks(hp, ckpt_dir, logger, saved, off_policy),
                    progress_bar=bool(hp["progress_bar"]))
    venv.close()
    env = make_env()
    return agent_cls(env, checkpoint=model_path if model_path.exists() else None, model=model)


__all__ = ["COMMON_DEFAULTS", "FINAL_CHECKPOINT", "SB3Agent", "check_cfg", "policy_kwargs", "train_sb3"]
