"""Shared machinery of the Stable-Baselines3 agents (``ppo``, ``sac``).

:class:`SB3Agent` wraps an SB3 model in the taigym agent protocol (``act`` is the deterministic
policy; ``save(path)`` / ``load(path, env)``); :func:`build_model` builds an untrained one from
the agent's options (:func:`check_cfg`). Training is :mod:`taigym.training.sb3`.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from .base import Agent

CHECKPOINT_DIR = "checkpoints"     # a train run directory's checkpoints (taigym.training.sb3)
MODEL_FILE = "model.zip"
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
#: keys of the agent's options that are not keyword arguments of the SB3 algorithm
NON_ALGO_KEYS = set(COMMON_DEFAULTS) | {"save_replay_buffer"}
ACTIVATIONS = {"tanh": "Tanh", "relu": "ReLU", "elu": "ELU", "leaky_relu": "LeakyReLU",
               "gelu": "GELU", "silu": "SiLU"}


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
    needs_checkpoint = True
    checkpoint_name = FINAL_CHECKPOINT

    def __init__(self, env, checkpoint: str | Path | None = None, model=None, **cfg):
        hp = check_cfg(cfg, self.DEFAULTS, self.name)
        super().__init__(env, **cfg)
        if model is None:
            if checkpoint is not None:
                model = self.algo_class().load(str(checkpoint), device="cpu")
            else:
                model = build_model(self.algo_class(), hp, single_vec(lambda: env), algo_keys(hp))
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


def single_vec(make_env: Callable):
    from stable_baselines3.common.monitor import Monitor
    from stable_baselines3.common.vec_env import DummyVecEnv

    return DummyVecEnv([lambda: Monitor(make_env())])


def build_model(algo_cls, hp: Mapping, venv, kwargs: Mapping):
    kw = dict(kwargs)
    return algo_cls(hp["policy"], venv, seed=int(hp["seed"]), device=hp["device"],
                    verbose=int(hp["verbose"]), policy_kwargs=policy_kwargs(hp["policy_kwargs"]), **kw)


__all__ = ["CHECKPOINT_DIR", "COMMON_DEFAULTS", "FINAL_CHECKPOINT", "MODEL_FILE", "NON_ALGO_KEYS", "SB3Agent",
           "algo_keys", "build_model", "check_cfg", "policy_kwargs", "save_model_atomic", "single_vec"]
