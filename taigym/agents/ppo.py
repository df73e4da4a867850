"""``ppo``: Stable-Baselines3's PPO, on any taigym env.

Train it with ``python -m taigym.apps.train agent=ppo env=pour_simplified`` (hyperparameters in
``taigym/conf/agent/ppo.yaml``, tuned per env in ``taigym/conf/recipe/ppo_<env>.yaml``, in the
manner of RL Zoo) or from Python with
:func:`taigym.training.sb3.train_ppo`; ``PPOAgent.load(run_dir / "agent.zip", env)`` loads it.

``act`` is the deterministic policy (the Gaussian's mean), clipped to the action box.

Options (``cfg``) and defaults: the taigym options ``total_timesteps`` (100000), ``n_envs`` (4),
``seed`` (0), ``policy`` ("MlpPolicy"), ``policy_kwargs`` (None; e.g. ``{net_arch: [64, 64],
activation_fn: tanh}``, the activation by name), ``checkpoint_every`` (10000 env steps),
``device`` ("cpu"), ``torch_threads`` (1), ``verbose`` (0), ``progress_bar`` (False),
``log_interval`` (1 rollout), ``wandb_gradient_freq`` (0), ``vec_env`` ("auto"),
``normalize_obs`` / ``normalize_reward`` (False), ``policy_env_kwargs`` / ``train_env_kwargs``
(None), ``eval_every`` (0), ``eval_episodes`` (100) (:mod:`taigym.training.sb3`), RL from
demonstrations' ``init_from`` (None), ``init_dataset_root`` (None), ``init_epochs`` (30),
``init_lr`` (1e-3), ``init_ignore_obs`` (None), ``init_critic_steps`` (0)
(:mod:`taigym.training.sb3_demos`), and PPO's own: ``learning_rate``
(3e-4), ``n_steps`` (512 per env), ``batch_size`` (128), ``n_epochs`` (10), ``gamma`` (0.99),
``gae_lambda`` (0.95), ``clip_range`` (0.2), ``ent_coef`` (0.0), ``vf_coef`` (0.5),
``max_grad_norm`` (0.5), ``use_sde`` (False), ``sde_sample_freq`` (-1), ``target_kl`` (None),
``normalize_advantage`` (True). Unknown keys raise ``ValueError``.

Checkpoints and resuming: :mod:`taigym.training.sb3`.
"""

from __future__ import annotations

from .sb3 import COMMON_DEFAULTS, SB3Agent

DEFAULTS = {
    **COMMON_DEFAULTS,
    "learning_rate": 3e-4,
    "n_steps": 512,
    "batch_size": 128,
    "n_epochs": 10,
    "gamma": 0.99,
    "gae_lambda": 0.95,
    "clip_range": 0.2,
    "ent_coef": 0.0,
    "vf_coef": 0.5,
    "max_grad_norm": 0.5,
    "use_sde": False,
    "sde_sample_freq": -1,
    "target_kl": None,
    "normalize_advantage": True,
}


class PPOAgent(SB3Agent):
    name = "ppo"
    ALGO = "PPO"
    DEFAULTS = DEFAULTS


__all__ = ["DEFAULTS", "PPOAgent"]
