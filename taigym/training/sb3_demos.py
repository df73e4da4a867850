"""RL from demonstrations for the Stable-Baselines3 agents: the actor starts as behaviour cloning.

``agent.init_from=<Minari dataset>`` (an id under ``init_dataset_root`` /
``$MINARI_DATASETS_PATH``, or a directory; ``python -m taigym.apps.datasets`` records them) makes
:func:`taigym.training.sb3.train_sb3` fit a new model's deterministic action (PPO's Gaussian mean,
SAC's squashed mean) to the demonstrations' actions before RL starts::

    python -m taigym.apps.train agent=ppo env=transport agent.init_from=taigym/transport/sfrrt-v0 \\
        agent.init_dataset_root=runs/minari

* With ``normalize_obs`` the observation normaliser starts from the demonstrations' mean and
  variance, so that the cloned actor sees the inputs it was fitted on.
* ``init_ignore_obs``: observation entries the cloned actor must not depend on (Pour-v0's S
  velocity and older heightfield frames, from which a clone copies its last action:
  docs/agents/bc.md). They are zeroed in the fit and their first-layer weights start at 0;
  RL may grow them.
* ``init_epochs`` of Adam (``init_lr``, minibatches of 256) on the mean squared error, from a
  generator seeded by the agent's seed.
* ``init_critic_steps``: for that many env steps (PPO) the actor is frozen while the critic
  learns the cloned policy's values, so that its first advantages are not noise that undoes the
  clone.

Successful episodes only (as ``bc`` keeps them). Without ``init_from`` nothing changes.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

import numpy as np

log = logging.getLogger(__name__)


def check_demo_options(hp: Mapping, algo: str) -> None:
    """ValueError for a bad option of RL from demonstrations of SB3's ``algo`` (before any
    expensive work)."""
    for key in ("init_epochs", "init_critic_steps"):
        v = hp[key]
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 0:
            raise ValueError(f"option {key} must be an integer >= 0, got {v!r}")
    lr = hp["init_lr"]
    if isinstance(lr, bool) or not isinstance(lr, (int, float)) or not 0.0 < lr <= 1.0:
        raise ValueError(f"option init_lr must be in (0, 1], got {lr!r}")
    if hp["init_critic_steps"] and algo != "PPO":
        raise ValueError(f"init_critic_steps applies to PPO only, not {algo}")
    ign = hp["init_ignore_obs"]
    if ign is not None and not all(isinstance(i, (int, np.integer)) and i >= 0 for i in ign):
        raise ValueError(f"option init_ignore_obs must be a list of observation indices >= 0, got {ign!r}")


def demo_pairs(dataset, root=None) -> tuple[np.ndarray, np.ndarray]:
    """(observations, actions) of a Minari dataset's successful episodes, float32."""
    from taigym.data import open_minari, read_minari, transitions

    episodes = [e for e in read_minari(open_minari(dataset, root=root)) if e.success]
    obs, act, _ = transitions(episodes)
    return obs, act


def _first_layer(policy):
    """The actor's first linear layer (PPO's policy net, SAC's latent_pi)."""
    import torch

    net = policy.mlp_extractor.policy_net if hasattr(policy, "mlp_extractor") else policy.actor.latent_pi
    return next(m for m in net.modules() if isinstance(m, torch.nn.Linear))


def clone_into(model, obs: np.ndarray, actions: np.ndarray, hp: Mapping, vec_normalize=None) -> dict:
    """Fit ``model``'s deterministic action to ``actions`` at ``obs`` (module docstring); returns
    the fit's mean squared error before and after."""
    import torch

    if obs.ndim != 2 or obs.shape[1:] != model.observation_space.shape:
        raise ValueError(f"init_from: the demonstrations' observations have shape {obs.shape[1:]}, the env's "
                         f"{model.observation_space.shape} (recorded on another env or obs_mode?)")
    if actions.shape[1:] != model.action_space.shape:
        raise ValueError(f"init_from: the demonstrations' actions have shape {actions.shape[1:]}, the env's "
                         f"{model.action_space.shape}")
    ignore = np.array(sorted(set(hp["init_ignore_obs"] or ())), np.int64)
    if len(ignore) and ignore[-1] >= obs.shape[1]:
        raise ValueError(f"init_ignore_obs has index {ignore[-1]} but the observation has {obs.shape[1]} entries")
    if vec_normalize is not None and vec_normalize.norm_obs:
        rms = vec_normalize.obs_rms
        rms.mean, rms.var, rms.count = obs.mean(0).astype(np.float64), obs.var(0).astype(np.float64), float(len(obs))
        x = vec_normalize.normalize_obs(obs).astype(np.float32)
    else:
        x = obs.astype(np.float32)
    x[:, ignore] = 0.0
    policy = model.policy
    policy.set_training_mode(True)
    gen = torch.Generator().manual_seed(int(hp["seed"]))
    xt, yt = torch.as_tensor(x), torch.as_tensor(np.clip(actions, -1.0, 1.0).astype(np.float32))
    params = [p for p in policy.parameters() if p.requires_grad]
    opt = torch.optim.Adam(params, lr=float(hp["init_lr"]))

    def mse() -> float:
        with torch.no_grad():
            return float(((policy._predict(xt, deterministic=True) - yt) ** 2).mean())

    before = mse()
    for _ in range(int(hp["init_epochs"])):
        for rows in torch.randperm(len(xt), generator=gen).split(256):
            loss = ((policy._predict(xt[rows], deterministic=True) - yt[rows]) ** 2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
    with torch.no_grad():
        _first_layer(policy).weight[:, torch.as_tensor(ignore)] = 0.0
    policy.set_training_mode(False)
    after = mse()
    log.info("init_from: behaviour cloning on %d pairs, MSE %.4f -> %.4f", len(xt), before, after)
    return {"init/pairs": float(len(xt)), "init/mse_before": before, "init/mse": after}


def actor_parameters(policy) -> list:
    """The parameters that shape PPO's action distribution (not the critic's)."""
    import torch

    mods = [policy.mlp_extractor.policy_net, policy.action_net]
    params = [p for m in mods for p in m.parameters()]
    if isinstance(getattr(policy, "log_std", None), torch.nn.Parameter):
        params.append(policy.log_std)
    return params


def critic_warmup(steps: int):
    """An SB3 callback that freezes PPO's actor in the updates on the first ``steps`` env steps."""
    from stable_baselines3.common.callbacks import BaseCallback

    class CriticWarmup(BaseCallback):
        def _on_training_start(self) -> None:
            self._set(self.model.num_timesteps > steps)

        def _set(self, trainable: bool) -> None:
            for p in actor_parameters(self.model.policy):
                p.requires_grad_(trainable)
            self.frozen = not trainable

        def _on_rollout_end(self) -> None:
            if self.frozen and self.model.num_timesteps > steps:
                self._set(True)

        def _on_step(self) -> bool:
            return True

        def _on_training_end(self) -> None:
            self._set(True)

    return CriticWarmup()


__all__ = ["actor_parameters", "check_demo_options", "clone_into", "critic_warmup", "demo_pairs"]
