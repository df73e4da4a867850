import os

import pytest

# Tests never touch the network, and compile the solver without Taichi's slow IR optimisations
# (same results, ~3 s per grid shape instead of ~25 s).
os.environ.setdefault("WANDB_MODE", "disabled")
os.environ.setdefault("TI_SKIP_VERSION_CHECK", "ON")
os.environ.setdefault("TAIGYM_FAST_COMPILE", "1")


@pytest.fixture(scope="session")
def reward_rollout():
    """The rollout the reward-mode tests share (:func:`_reward_rollout`)."""
    return _reward_rollout


def _reward_rollout(env, task, actions, terms):
    """Reset ``env`` on ``task`` and step ``actions`` until the episode ends, checking on every
    step that ``info`` holds the reward mode's ``terms`` (0 at reset) and that they sum to the
    reward; returns the potentials at reset (``env.unwrapped.phi``, {} without shaping) and the
    list of (reward, info), the reset's first (reward 0); closes ``env``."""
    try:
        _, info = env.reset(seed=0, options={"task": task})
        assert all(info["reward_" + k] == 0.0 for k in terms)
        phi0 = dict(getattr(env.unwrapped, "phi", {}))
        steps = [(0.0, info)]
        for a in actions:
            _, r, term, trunc, info = env.step(a)
            assert tuple(k[7:] for k in info if k.startswith("reward_")) == tuple(terms)
            assert r == pytest.approx(sum(info["reward_" + k] for k in terms), abs=1e-12)
            steps.append((r, info))
            if term or trunc:
                return phi0, steps
        raise AssertionError("the episode did not end")
    finally:
        env.close()

