"""``sac``: Stable-Baselines3's SAC on ``taigym/Pour-v0`` (simplified fidelity by default).

Train it with ``python -m taigym.apps.train agent=sac env=pour_simplified`` (hyperparameters in
``taigym/conf/agent/sac.yaml``, in the manner of RL Zoo) or ``taigym.agents.sac.train(make_env,
cfg, run_dir, logger)``. ``act`` is the deterministic policy (the squashed Gaussian's mean).

Options (``cfg``) and defaults: the taigym options ``total_timesteps`` (100000), ``n_envs`` (4),
``seed`` (0), ``policy`` ("MlpPolicy"), ``policy_kwargs`` (None; e.g. ``{net_arch: [256,
256]}``), ``checkpoint_every`` (10000 env steps), ``device`` ("cpu"), ``torch_threads`` (1),
``verbose`` (0), ``progress_bar`` (False), ``log_interval`` (4 episodes), ``wandb_gradient_freq``
(0), ``save_replay_buffer`` (True: the checkpoint holds the replay buffer, so that a resumed run
goes on as if uninterrupted; a 100k-transition buffer of the 104-number features is ~90 MB), and
SAC's own: ``learning_rate`` (3e-4), ``buffer_size`` (100000), ``learning_starts`` (1000),
``batch_size`` (256), ``tau`` (0.005), ``gamma`` (0.99), ``train_freq`` (1), ``gradient_steps``
(1), ``ent_coef`` ("auto"), ``target_entropy`` ("auto"), ``use_sde`` (False). Unknown keys raise
``ValueError``.

Checkpoints go to ``run_dir/checkpoints/`` (``model.zip``, ``replay_buffer.pkl``, ``state.json``)
every ``checkpoint_every`` steps, each file through a temporary name and a rename; calling
``train`` again on the same ``run_dir`` resumes from there.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import gymnasium as gym

from .sb3 import COMMON_DEFAULTS, FINAL_CHECKPOINT, SB3Agent, train_sb3

DEFAULTS = {
    **COMMON_DEFAULTS,
    "log_interval": 4,
    "save_replay_buffer": True,
    "learning_rate": 3e-4,
    "buffer_size": 100_000,
    "learning_starts": 1000,
    "batch_size": 256,
    "tau": 0.005,
    "gamma": 0.99,
    "train_freq": 1,
    "gradient_steps": 1,
    "ent_coef": "auto",
    "target_entropy": "auto",
    "use_sde": False,
}


class SACAgent(SB3Agent):
    name = "sac"
    ALGO = "SAC"
    DEFAULTS = DEFAULTS


def train(make_env: Callable[[], gym.Env], cfg: dict, run_dir: Path, logger=None, expert=None) -> SACAgent:
    """Train SAC (or resume it from ``run_dir``'s checkpoint); ``expert`` is not used."""
    return train_sb3(SACAgent, make_env, cfg, run_dir, logger, expert)


__all__ = ["DEFAULTS", "FINAL_CHECKPOINT", "SACAgent", "train"]
