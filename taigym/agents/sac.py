"""``sac``: Stable-Baselines3's SAC, on any taigym env.

Train it with ``python -m taigym.apps.train agent=sac env=pour_simplified`` (hyperparameters in
``taigym/conf/agent/sac.yaml``, in the manner of RL Zoo) or with
:func:`taigym.training.sb3.train_sac`. ``act`` is the deterministic policy (the squashed Gaussian's mean).

Options (``cfg``) and defaults: the taigym options ``total_timesteps`` (100000), ``n_envs`` (4),
``seed`` (0), ``policy`` ("MlpPolicy"), ``policy_kwargs`` (None; e.g. ``{net_arch: [256,
256]}``), ``checkpoint_every`` (10000 env steps), ``device`` ("cpu"), ``torch_threads`` (1),
``verbose`` (0), ``progress_bar`` (False), ``log_interval`` (4 episodes), ``wandb_gradient_freq``
(0), ``save_replay_buffer`` (True: the checkpoint holds the replay buffer, so that a resumed run
goes on as if uninterrupted; a 100k-transition buffer of the 104-number features is ~90 MB),
``vec_env`` ("auto"), ``normalize_obs`` / ``normalize_reward`` (False), ``policy_env_kwargs`` /
``train_env_kwargs`` (None), ``eval_every`` (0), ``eval_episodes`` (100) (:mod:`taigym.training.sb3`),
RL from demonstrations' ``init_from`` (None), ``init_dataset_root`` (None), ``init_epochs``
(30), ``init_lr`` (1e-3), ``init_ignore_obs`` (None) (:mod:`taigym.training.sb3_demos`), and
SAC's own: ``learning_rate`` (3e-4), ``buffer_size`` (100000), ``learning_starts`` (1000),
``batch_size`` (256), ``tau`` (0.005), ``gamma`` (0.99), ``train_freq`` (1), ``gradient_steps``
(1), ``ent_coef`` ("auto"), ``target_entropy`` ("auto"), ``use_sde`` (False). Unknown keys raise
``ValueError``.

Checkpoints (``model.zip``, ``replay_buffer.pkl``, ``state.json``) and resuming:
:mod:`taigym.training.sb3`.
"""

from __future__ import annotations

from .sb3 import COMMON_DEFAULTS, SB3Agent

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


__all__ = ["DEFAULTS", "SACAgent"]
