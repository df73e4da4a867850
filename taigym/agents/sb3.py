"""Shared machinery of the Stable-Baselines3 agents (``ppo``, ``sac``).

:class:`SB3Agent` wraps an SB3 model in the taigym agent protocol (``act`` is the deterministic
policy; ``save(path)`` / ``load(path, env)``); :func:`build_model` builds an untrained one from
the agent's options (:func:`check_cfg`). Training is :mod:`taigym.training.sb3`.

A model trained on normalised observations (SB3's ``VecNormalize``) carries the normaliser's
statistics in its file (the model attribute ``taigym_obs_norm``: mean, variance, clip,
epsilon), and ``act`` applies them: one file is the whole policy. A model also carries the env
arguments it was trained for that change what an action or an observation means
(``taigym_env_kwargs``, e.g. ``{"pivot": "lip"}`` on Pour-v0; :attr:`SB3Agent.env_kwargs`); an
app evaluating it builds its env with them.
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
OBS_NORM_ATTR = "taigym_obs_norm"  # model attribute (saved in its zip): the observation normaliser
ENV_KWARGS_ATTR = "taigym_env_kwargs"   # model attribute: the env arguments the policy acts under

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
    "vec_env": "auto",               # auto: the env's batched engine if it has one, else dummy;
                                     # batched, dummy (DummyVecEnv), subproc (SubprocVecEnv)
    "normalize_obs": False,          # VecNormalize's running mean / variance of observations
    "normalize_reward": False,       # VecNormalize's scaling of rewards by the return's std
    "policy_env_kwargs": None,       # env arguments the policy is trained for and carries ({pivot: lip})
    "train_env_kwargs": None,        # env arguments for the training envs only (reward, curriculum)
    "eval_every": 0,                 # env steps between evaluations on the eval split (0: none)
    "eval_episodes": 100,            # tasks of the eval split each of those runs
    # RL from demonstrations (taigym.training.sb3_demos): the actor starts as behaviour cloning
    "init_from": None,               # Minari dataset id or directory (None: from scratch)
    "init_dataset_root": None,       # directory holding Minari datasets (None: $MINARI_DATASETS_PATH)
    "init_epochs": 30,               # epochs of the cloning fit (Adam, minibatches of 256)
    "init_lr": 1e-3,                 # its learning rate
    "init_ignore_obs": None,         # observation entries the clone does not see (indices)
    "init_critic_steps": 0,          # env steps with the actor frozen while the critic learns (PPO)
}
#: keys of the agent's options that are not keyword arguments of the SB3 algorithm
NON_ALGO_KEYS = set(COMMON_DEFAULTS) | {"save_replay_buffer"}
VEC_ENVS = ("auto", "batched", "dummy", "subproc")


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
    if out["vec_env"] not in VEC_ENVS:
        raise ValueError(f"{algo} option vec_env must be one of {', '.join(VEC_ENVS)}, got {out['vec_env']!r}")
    for key in ("eval_every", "eval_episodes"):
        if isinstance(out[key], bool) or not isinstance(out[key], (int, np.integer)) or out[key] < 0:
            raise ValueError(f"{algo} option {key} must be an integer >= 0, got {out[key]!r}")
    for key in ("policy_env_kwargs", "train_env_kwargs"):
        if out[key] is not None and not isinstance(out[key], Mapping):
            raise ValueError(f"{algo} option {key} must be a mapping of env arguments or null, got {out[key]!r}")
    return out


def policy_kwargs(value: Mapping | None) -> dict | None:
    """YAML-friendly policy kwargs: ``activation_fn`` may be a name (tanh, relu, ...)."""
    if not value:
        return None
    from .activations import ACTIVATIONS

    out = {k: (list(v) if isinstance(v, tuple) else v) for k, v in dict(value).items()}
    act = out.get("activation_fn")
    if isinstance(act, str):
        if act.lower() not in ACTIVATIONS:
            raise ValueError(f"activation_fn must be one of {', '.join(ACTIVATIONS)}, got {act!r}")
        out["activation_fn"] = ACTIVATIONS[act.lower()]
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

    @property
    def env_kwargs(self) -> dict:
        """The env arguments the policy was trained for (an evaluation builds its env with them)."""
        return dict(getattr(self.model, ENV_KWARGS_ATTR, None) or {})

    def act(self, obs, info: dict) -> np.ndarray:
        action, _ = self.model.predict(normalize_obs(self.model, obs), deterministic=True)
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


def normalize_obs(model, obs):
    """``obs`` normalised as the model was trained (``taigym_obs_norm``; unchanged without it)."""
    norm = getattr(model, OBS_NORM_ATTR, None)
    if not norm:
        return obs
    z = (np.asarray(obs, np.float64) - np.asarray(norm["mean"])) / np.sqrt(np.asarray(norm["var"]) + norm["epsilon"])
    return np.clip(z, -norm["clip"], norm["clip"]).astype(np.float32)


def attach_obs_norm(model, vec_normalize) -> None:
    """Record ``vec_normalize``'s observation statistics on ``model`` (saved with it)."""
    rms = vec_normalize.obs_rms
    setattr(model, OBS_NORM_ATTR, {"mean": rms.mean.tolist(), "var": rms.var.tolist(),
                                   "clip": float(vec_normalize.clip_obs), "epsilon": float(vec_normalize.epsilon)})


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


__all__ = ["CHECKPOINT_DIR", "COMMON_DEFAULTS", "ENV_KWARGS_ATTR", "FINAL_CHECKPOINT", "MODEL_FILE", "NON_ALGO_KEYS",
           "OBS_NORM_ATTR", "SB3Agent", "VEC_ENVS", "algo_keys", "attach_obs_norm", "build_model", "check_cfg",
           "normalize_obs", "policy_kwargs", "save_model_atomic", "single_vec"]
