"""Training of the Stable-Baselines3 agents (``ppo``, ``sac``): the trainable-agent contract for
any SB3 algorithm.

The training envs (:func:`make_training_venv`): with ``vec_env=auto`` (or ``batched``) an env
that has a native vector version (a registered ``vector_entry_point``: Pour-v0, both
fidelities) is stepped as one batch through :class:`~taigym.training.vec_env.BatchedVecEnv`;
others through SB3's ``make_vec_env`` (``dummy`` or ``subproc``). ``make_env`` is called with
the agent's ``policy_env_kwargs`` (the env arguments the policy is trained for: saved in the
model file, applied wherever it is evaluated) and ``train_env_kwargs`` (the training envs' only:
reward mode, curriculum) as keyword arguments, when there are any. ``normalize_obs`` /
``normalize_reward`` put SB3's ``VecNormalize`` on top; the observation statistics are saved in
the model file (:func:`taigym.agents.sb3.attach_obs_norm`), so that the agent acts alone.

:func:`train_sb3` checkpoints every ``checkpoint_every`` env steps under ``run_dir/checkpoints``
(model, ``VecNormalize``'s statistics, its step count and, for off-policy algorithms, the
replay buffer), each file written to a temporary name and renamed, and resumes from that
checkpoint when called again on the same ``run_dir`` (the hyperparameters, but the budget and
logging options, must be the same). Every ``eval_every`` env steps the deterministic policy
runs once on each of the first ``eval_episodes`` tasks of the eval split
(:func:`taigym.training.task_eval.evaluate_tasks`): ``eval/<metric>`` and a row of
``run_dir/curve.csv``, the learning curve. Metrics (SB3's ``rollout/``, ``train/``, ``time/``
keys plus the env's episode metrics) go to the taigym logger; with a
:class:`~taigym.training.loggers.WandbLogger` the run also gets W&B's SB3 callback
(``wandb.integration.sb3.WandbCallback``). With ``init_from`` (a Minari dataset) a new model's
actor starts as behaviour cloning of the demonstrations (:mod:`taigym.training.sb3_demos`).
:func:`train_ppo` and :func:`train_sac` are the
trainers of ``ppo`` and ``sac``::

    from taigym.training.sb3 import train_ppo
    agent = train_ppo(lambda **kw: gym.make("taigym/Pour-v0", fidelity="simplified", **kw),
                      {"total_timesteps": 50_000, "policy_env_kwargs": {"pivot": "lip"}}, run_dir, logger)
"""

from __future__ import annotations

import csv
import functools
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
from taigym.agents.sb3 import CHECKPOINT_DIR, ENV_KWARGS_ATTR, MODEL_FILE, SB3Agent, algo_keys, attach_obs_norm, \
    build_model, check_cfg, save_model_atomic
from taigym.envs import family_of, tasks

from .loggers import NullLogger, WandbLogger
from .sb3_demos import check_demo_options, clone_into, critic_warmup, demo_pairs
from .task_eval import batched_spec, evaluate_tasks
from .vec_env import make_batched_vec_env

log = logging.getLogger(__name__)
BUFFER_FILE = "replay_buffer.pkl"
STATE_FILE = "state.json"
NORM_FILE = "vecnormalize.pkl"     # VecNormalize's statistics (observations and returns)
CURVE_FILE = "curve.csv"           # the learning curve: a row per evaluation on the eval split
CURVE_FIELDS = ("steps", "seconds", "train_success", "train_return")
#: options that may change between a run and its resumption (the others must not)
RESUMABLE_CHANGES = {"save_replay_buffer", "total_timesteps", "checkpoint_every", "verbose", "progress_bar",
                     "log_interval", "torch_threads", "wandb_gradient_freq", "device", "eval_every",
                     "eval_episodes"}


def _write_json(path: Path, data: Any) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(data, indent=1, default=str))
    os.replace(tmp, path)


def _make_callbacks(hp: Mapping, ckpt_dir: Path, logger, cfg_saved: Mapping, off_policy: bool,
                    metrics: Mapping[str, str], vec_normalize=None) -> list:
    from stable_baselines3.common.callbacks import BaseCallback

    class Checkpoint(BaseCallback):
        """Saves model (+ replay buffer) every ``checkpoint_every`` steps and at the end; records
        the env's episode metrics (``rollout/<key>``) for SB3's logger."""

        def __init__(self):
            super().__init__(0)
            self.last_saved = self.started_at = None

        def _on_training_start(self) -> None:
            self.last_saved = self.started_at = self.model.num_timesteps

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
            if vec_normalize is not None:
                attach_obs_norm(self.model, vec_normalize)
            # the algorithm updates after the rollout whose last step may have checkpointed: save
            # again whenever this call stepped at all, so that the checkpoint is the trained agent
            if self.model.num_timesteps != self.started_at:
                self.save()

        def save(self) -> None:
            ckpt_dir.mkdir(parents=True, exist_ok=True)
            t0 = time.perf_counter()
            if vec_normalize is not None:           # the statistics, then the model that carries them
                attach_obs_norm(self.model, vec_normalize)
                tmp = ckpt_dir / f".{NORM_FILE}.tmp"
                vec_normalize.save(str(tmp))
                os.replace(tmp, ckpt_dir / NORM_FILE)
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


def _curve_callback(agent_cls: type[SB3Agent], make_eval: Callable, hp: Mapping, path: Path, logger,
                    vec_normalize=None):
    """Every ``eval_every`` env steps: the deterministic policy once on each of the first
    ``eval_episodes`` tasks of the eval split (:func:`~taigym.training.task_eval.evaluate_tasks`),
    logged as ``eval/<metric>`` and appended to ``path`` (``curve.csv``) with the training
    episodes' success and return since the last row. Rows past the resumed step are dropped."""
    from stable_baselines3.common.callbacks import BaseCallback

    env = make_eval()
    eval_tasks = tasks(family_of(env), "eval")[:int(hp["eval_episodes"])]
    fields = list(CURVE_FIELDS) + [f"eval_{k}" for k in episode_metrics(env)]
    env.close()

    class Curve(BaseCallback):
        def __init__(self):
            super().__init__(0)
            self.every = int(hp["eval_every"])
            self.episodes: list[tuple[float, float]] = []

        def _on_training_start(self) -> None:
            n = self.model.num_timesteps
            self.next_eval = (n // self.every + 1) * self.every
            self.t0 = time.perf_counter()
            self.seconds0 = 0.0
            if path.exists():                    # a resumed run: keep the rows up to its checkpoint
                with path.open(newline="") as f:
                    rows = [r for r in csv.DictReader(f) if int(r["steps"]) <= n]
                self.seconds0 = float(rows[-1]["seconds"]) if rows else 0.0
                self._write(rows, "w")

        def _on_step(self) -> bool:
            for info in self.locals.get("infos") or ():
                if "episode" in info:
                    self.episodes.append((float(info.get("success", np.nan)), float(info["episode"]["r"])))
            if self.model.num_timesteps >= self.next_eval:
                self.next_eval += self.every
                self.evaluate()
            return True

        def evaluate(self) -> None:
            n = int(self.model.num_timesteps)
            if vec_normalize is not None:
                attach_obs_norm(self.model, vec_normalize)
            ev = evaluate_tasks(agent_cls(None, model=self.model), make_eval, eval_tasks)
            eps = np.asarray(self.episodes).reshape(-1, 2)
            self.episodes = []
            row = {"steps": n, "seconds": round(self.seconds0 + time.perf_counter() - self.t0, 1),
                   "train_success": float(np.nanmean(eps[:, 0])) if len(eps) else "",
                   "train_return": float(np.mean(eps[:, 1])) if len(eps) else "",
                   **{f"eval_{k}": v for k, v in ev.items() if k != "episodes"}}
            logger.log({f"eval/{k}": v for k, v in ev.items()}, step=n)
            self._write([row], "a")

        def _write(self, rows: list[dict], mode: str) -> None:
            new = mode == "w" or not path.exists()
            tmp = path.with_name(f".{path.name}.tmp")
            old = "" if new else path.read_text()
            with tmp.open("w", newline="") as f:
                f.write(old)
                w = csv.DictWriter(f, fields, extrasaction="ignore")
                if new:
                    w.writeheader()
                w.writerows(rows)
            os.replace(tmp, path)

    return Curve()


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


def make_training_venv(make_env: Callable, hp: Mapping):
    """The training ``VecEnv`` (``VecMonitor`` over the env's batched engine through
    :class:`~taigym.training.vec_env.BatchedVecEnv`, or SB3's ``make_vec_env``) and the env
    constructor evaluations use (the policy's env arguments, not the training-only ones)."""
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.vec_env import SubprocVecEnv, VecMonitor

    policy_kw, train_kw = dict(hp["policy_env_kwargs"] or {}), dict(hp["train_env_kwargs"] or {})
    make_eval = functools.partial(make_env, **policy_kw) if policy_kw else make_env
    make_train = functools.partial(make_env, **policy_kw, **train_kw) if policy_kw or train_kw else make_env
    n, seed = int(hp["n_envs"]), int(hp["seed"])
    spec = batched_spec(make_train) if hp["vec_env"] in ("auto", "batched") else None
    if spec is not None:
        venv = VecMonitor(make_batched_vec_env(spec[0], n, seed=seed, step_infos=False, **spec[1]))
    elif hp["vec_env"] == "batched":
        raise ValueError("vec_env=batched: this env has no batched engine (no vector_entry_point); use auto or dummy")
    else:
        venv = make_vec_env(make_train, n_envs=n, seed=seed,
                            vec_env_cls=SubprocVecEnv if hp["vec_env"] == "subproc" else None)
    return venv, make_eval


def train_sb3(agent_cls: type[SB3Agent], make_env: Callable, cfg: Mapping | None, run_dir: str | Path,
              logger=None, expert=None) -> SB3Agent:
    """Train (or resume training) an SB3 agent; see the module docstring."""
    from stable_baselines3.common.vec_env import VecNormalize

    if logger is None:
        logger = NullLogger()
    hp = check_cfg(cfg, agent_cls.DEFAULTS, agent_cls.name)
    check_demo_options(hp, agent_cls.ALGO)
    if hp["torch_threads"]:
        import torch

        torch.set_num_threads(int(hp["torch_threads"]))
    run_dir = Path(run_dir)
    ckpt_dir = run_dir / CHECKPOINT_DIR
    run_dir.mkdir(parents=True, exist_ok=True)
    algo_cls = agent_cls.algo_class()
    off_policy = agent_cls.ALGO in ("SAC", "TD3", "DDPG")
    venv, make_eval = make_training_venv(make_env, hp)
    metrics = episode_metrics(venv.get_attr("metadata")[0])
    saved = {k: v for k, v in hp.items()}
    normalize = bool(hp["normalize_obs"] or hp["normalize_reward"])

    model_path, state_path, norm_path = ckpt_dir / MODEL_FILE, ckpt_dir / STATE_FILE, ckpt_dir / NORM_FILE
    if model_path.exists():
        state = json.loads(state_path.read_text()) if state_path.exists() else {}
        old = state.get("cfg", {})
        changed = sorted(k for k in set(old) | set(saved)
                         if k not in RESUMABLE_CHANGES and json.dumps(old.get(k), default=str) != json.dumps(saved.get(k), default=str))
        if old and changed:
            raise ValueError(f"{run_dir} holds a {agent_cls.name} checkpoint trained with other "
                             f"hyperparameters ({', '.join(changed)}); use a new run directory")
        if normalize:
            venv = VecNormalize.load(str(norm_path), venv)
        model = algo_cls.load(str(model_path), env=venv, device=hp["device"])
        buf = ckpt_dir / BUFFER_FILE
        if off_policy and buf.exists():
            model.load_replay_buffer(str(buf))
        log.info("%s: resuming from %s at step %d", agent_cls.name, model_path, model.num_timesteps)
        logger.log({"resumed_from_step": float(model.num_timesteps)}, step=int(model.num_timesteps))
    else:
        if normalize:
            venv = VecNormalize(venv, norm_obs=bool(hp["normalize_obs"]), norm_reward=bool(hp["normalize_reward"]),
                                gamma=float(hp.get("gamma", 0.99)))
        model = build_model(algo_cls, hp, venv, algo_keys(hp))
        if hp["init_from"]:                          # RL from demonstrations: the actor starts as BC
            obs, actions = demo_pairs(hp["init_from"], hp["init_dataset_root"])
            logger.log(clone_into(model, obs, actions, hp, venv if normalize else None), step=0)
    setattr(model, ENV_KWARGS_ATTR, dict(hp["policy_env_kwargs"] or {}))
    model.set_logger(_sb3_logger(logger, int(hp["verbose"])))
    remaining = int(hp["total_timesteps"]) - int(model.num_timesteps)
    if remaining > 0:
        callbacks = _make_callbacks(hp, ckpt_dir, logger, saved, off_policy, metrics,
                                    venv if normalize else None)
        if hp["init_critic_steps"] and model.num_timesteps < int(hp["init_critic_steps"]):
            callbacks.append(critic_warmup(int(hp["init_critic_steps"])))
        if hp["eval_every"]:
            callbacks.append(_curve_callback(agent_cls, make_eval, hp, run_dir / CURVE_FILE, logger,
                                             venv if normalize else None))
        model.learn(total_timesteps=remaining, reset_num_timesteps=False, log_interval=int(hp["log_interval"]),
                    callback=callbacks, progress_bar=bool(hp["progress_bar"]))
    venv.close()
    return agent_cls(make_eval(), checkpoint=model_path if model_path.exists() else None, model=model)


def train_ppo(make_env: Callable, cfg: Mapping | None, run_dir: str | Path, logger=None, expert=None) -> PPOAgent:
    """Train PPO (or resume it from ``run_dir``'s checkpoint); ``expert`` is not used."""
    return train_sb3(PPOAgent, make_env, cfg, run_dir, logger, expert)


def train_sac(make_env: Callable, cfg: Mapping | None, run_dir: str | Path, logger=None, expert=None) -> SACAgent:
    """Train SAC (or resume it from ``run_dir``'s checkpoint); ``expert`` is not used."""
    return train_sb3(SACAgent, make_env, cfg, run_dir, logger, expert)


__all__ = ["make_training_venv", "train_ppo", "train_sac", "train_sb3"]
