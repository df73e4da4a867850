"""Pour3D-v0's reward modes: the default ("increase") is the reward as before, bit for bit; the
terms add up to the reward; the dense mode's shaping is potential-based (its discounted sum
telescopes to -Phi(s_0)); bad arguments raise at make."""

import gymnasium as gym
import numpy as np
import pytest

import taigym
from taigym.envs.pour3d import REWARD_TERMS

GAMMA = 0.9
# a wrist roll (joint 7 tilts S in the pour plane) and a little of joint 1 (swings S toward T)
ACTIONS = [np.array([0.1, 0.0, 0.0, 0.0, 0.0, 0.0, 0.3], np.float32)] * 12


@pytest.fixture(scope="module")
def runs(reward_rollout):
    # coarse grid, 10-step horizon: the solver is compiled once (the closed env's is reused)
    task = taigym.envs.tasks("pour3d", "eval")[0]
    kwargs = dict(shaping_gamma=GAMMA, horizon=0.5, dx=0.012)
    return {mode: reward_rollout(gym.make("taigym/Pour3D-v0", reward_mode=mode, **kwargs), task, ACTIONS,
                                 REWARD_TERMS[mode])
            for mode in ("increase", "dense", "sparse")}


def test_default_is_the_reward_as_before(runs):
    """main's formula, from the info of the same transitions (the actions are not clipped)."""
    _, steps = runs["increase"]
    assert not any(i["action_clipped"] for _, i in steps[1:])
    for k, ((_, prev), (r, i)) in enumerate(zip(steps, steps[1:])):
        da = ACTIONS[k].astype(float) - (ACTIONS[k - 1].astype(float) if k else 0.0)
        before = (i["in_target"] - prev["in_target"] - 2.0 * (i["spilled"] - prev["spilled"])
                  - 1e-3 * float(da @ da))
        assert r == before
    assert gym.spec("taigym/Pour3D-v0").kwargs.get("reward_mode", "increase") == "increase"


def test_dense_is_the_default_plus_potential_based_shaping(runs):
    phi0, dense = runs["dense"]
    _, default = runs["increase"]
    assert len(dense) == len(default) and phi0["approach"] > 0      # a lip within 0.4 m of T
    shaped = [i["reward_approach"] + i["reward_lean"] for _, i in dense[1:]]
    for (r0, _), (rd, _), f in zip(default[1:], dense[1:], shaped):
        assert rd - f == pytest.approx(r0, abs=1e-12)
    assert sum(GAMMA ** k * f for k, f in enumerate(shaped)) == pytest.approx(-sum(phi0.values()), abs=1e-9)
    assert [r for r, _ in runs["sparse"][1][1:]] == [0.0] * (len(dense) - 1)   # nothing poured


@pytest.mark.parametrize("kwargs, name", [({"reward_mode": "rp"}, "reward_mode"),
                                          ({"shaping_gamma": -0.1}, "shaping_gamma")])
def test_bad_reward_arguments_raise_at_make(kwargs, name):
    with pytest.raises(ValueError, match=name):
        gym.make("taigym/Pour3D-v0", **kwargs)
