"""Transport3D-v0's reward modes: the default ("progress") is the reward as before, term for term;
the terms add up to the reward; the dense mode's shaping is potential-based (its discounted sum
telescopes to -Phi(s_0)); bad arguments raise before anything is built."""

import gymnasium as gym
import numpy as np
import pytest

import taigym
from taigym.envs.transport3d import REWARD_TERMS_3D

GAMMA = 0.9
# a joint-velocity command that moves and tilts the container (joints 2 and 7 of the Panda)
ACTIONS = [np.array([0.3, 0.4, 0.0, 0.0, 0.0, 0.0, 0.8], np.float32)] * 12


@pytest.fixture(scope="module")
def runs(reward_rollout):
    # coarse grid, 10-step horizon: the solver is compiled once (the closed env's is reused)
    task = taigym.envs.tasks("transport3d", "eval")[0]
    kwargs = dict(shaping_gamma=GAMMA, horizon=0.5, dx=0.01)
    return {mode: reward_rollout(gym.make("taigym/Transport3D-v0", reward_mode=mode, **kwargs), task, ACTIONS,
                                 REWARD_TERMS_3D[mode])
            for mode in ("progress", "dense", "sparse")}


def test_default_is_the_reward_as_before(runs):
    """main's formula, from the info of the same transitions."""
    _, steps = runs["progress"]
    d0 = steps[0][1]["distance"]
    for (_, prev), (r, info) in zip(steps, steps[1:]):
        before = ((prev["distance"] - info["distance"]) / d0 - 100.0 * (info["spilled"] - prev["spilled"])
                  - 0.01 - 1.0 * info["collided"] + float(info["success"]))
        assert r == before
    assert gym.spec("taigym/Transport3D-v0").kwargs.get("reward_mode", "progress") == "progress"


def test_dense_is_progress_plus_potential_based_shaping(runs):
    phi0, dense = runs["dense"]
    _, progress = runs["progress"]
    assert phi0["distance"] == pytest.approx(-1.0) and phi0["upright"] == pytest.approx(0.0, abs=1e-6)
    assert len(dense) == len(progress)
    shaped = [i["reward_distance"] + i["reward_upright"] for _, i in dense[1:]]
    # the same liquid, so the same progress-mode terms; the shaping telescopes to -Phi(s_0)
    for (rp, _), (rd, _), f in zip(progress[1:], dense[1:], shaped):
        assert rd - f == pytest.approx(rp, abs=1e-12)
    assert sum(GAMMA ** k * f for k, f in enumerate(shaped)) == pytest.approx(-sum(phi0.values()), abs=1e-9)
    assert any(i["reward_upright"] < 0 for _, i in dense[1:-1])    # the commanded roll tilts: it costs
    assert [r for r, _ in runs["sparse"][1][1:]] == [0.0] * (len(dense) - 1)


@pytest.mark.parametrize("kwargs, name", [({"reward_mode": "shaped"}, "reward_mode"),
                                          ({"shaping_gamma": 1.5}, "shaping_gamma")])
def test_bad_reward_arguments_raise_at_make(kwargs, name):
    with pytest.raises(ValueError, match=name):
        gym.make("taigym/Transport3D-v0", **kwargs)
