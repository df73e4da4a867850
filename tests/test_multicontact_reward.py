"""MultiContact-v1's reward modes: the default ("progress") is the reward as before, bit for bit;
the terms add up to the reward; the dense mode's shaping is potential-based (its discounted sum
over an episode is -Phi(s_0) = 0); a fall toward the goal, which the default mode pays for, earns
nothing in the dense mode; bad arguments raise at make."""

import gymnasium as gym
import numpy as np
import pybullet as p
import pytest

import taigym  # noqa: F401  (registers the envs)
from taigym.envs.multicontact import REWARD_TERMS

GAMMA = 0.95


def _episode(mode, push=0.0, steps=200, seed=0):
    """A step-family episode with small random torques (seeded), the torso pushed forward
    (toward the goal, +x) at ``push`` m/s after the reset; ends at the fall or after ``steps``."""
    env = gym.make("taigym/MultiContact-v1", family="step", reward_mode=mode, shaping_gamma=GAMMA)
    try:
        _, info = env.reset(seed=seed)
        u = env.unwrapped
        assert all(info["reward_" + k] == 0.0 for k in REWARD_TERMS[mode])
        phi0 = sum(getattr(u, "phi", {}).values())       # the dense mode's potential at the start
        if push:
            p.resetBaseVelocity(u.robot.body, [push, 0.0, 0.0], [0.0, 0.0, 0.0], physicsClientId=u.client)
        rng = np.random.default_rng(seed)
        out = [(0.0, info)]
        for _ in range(steps):
            a = (0.05 * rng.standard_normal(23)).astype(np.float32)
            _, r, term, trunc, info = env.step(a)
            assert tuple(k[7:] for k in info if k.startswith("reward_")) == REWARD_TERMS[mode]
            assert r == pytest.approx(sum(info["reward_" + k] for k in REWARD_TERMS[mode]), abs=1e-12)
            out.append((r, info))
            if term or trunc:
                break
        return phi0, out, term or trunc
    finally:
        env.close()


def test_default_is_the_reward_as_before():
    """main's formula, from the info of the same transitions."""
    _, steps, _ = _episode("progress", steps=60)
    assert gym.spec("taigym/MultiContact-v1").kwargs.get("reward_mode", "progress") == "progress"
    for (_, prev), (r, i) in zip(steps, steps[1:]):
        before = (10.0 * (prev["goal_distance"] - i["goal_distance"]) + -0.01 * i["effort"]
                  + -0.1 * i["contact_violation"] + (0.0 if i["fell"] else 0.05) + 5.0 * i["success"])
        assert r == before


def test_dense_shaping_is_potential_based_and_a_fall_toward_the_goal_does_not_pay():
    _, progress, _ = _episode("progress", push=2.0)
    phi0, dense, ended = _episode("dense", push=2.0)
    assert ended and dense[-1][1]["fell"] and progress[-1][1]["fell"] and len(dense) == len(progress)
    assert phi0 == 0.0                                   # D = D_0 at the start
    k = len(dense) - 1
    disc = [GAMMA ** t for t in range(k)]
    shaping = sum(g * i["reward_advance"] for g, (_, i) in zip(disc, dense[1:]))
    assert shaping == pytest.approx(-phi0, abs=1e-9)     # Phi = 0 at the fall: telescopes to -Phi(s_0)
    # the same transitions: dense is the default without its progress term, plus the shaping
    for (rp, ip), (rd, i) in zip(progress[1:], dense[1:]):
        assert rd - i["reward_advance"] == pytest.approx(rp - ip["reward_progress"], abs=1e-12)
    # standing still for those k steps would earn the alive bonus on each (less its effort);
    # the dive, in the default mode, earns that bonus and its progress on top, more than standing;
    # in the dense mode it earns no more than standing
    stand = sum(g * 0.05 for g in disc)
    ret = {m: sum(g * r for g, (r, _) in zip(disc, run[1:])) for m, run in (("progress", progress), ("dense", dense))}
    assert sum(i["reward_progress"] for _, i in progress[1:]) > 0.5     # the push carried it toward the goal
    assert ret["progress"] > stand + 0.5
    assert ret["dense"] <= stand


def test_sparse_pays_success_only():
    _, steps, _ = _episode("sparse", steps=30)
    assert len(steps) > 10 and [r for r, _ in steps[1:]] == [float(i["success"]) for _, i in steps[1:]]


@pytest.mark.parametrize("kwargs, name", [({"reward_mode": "shaped"}, "reward_mode"),
                                          ({"shaping_gamma": 1.5}, "shaping_gamma"),
                                          ({"shaping_gamma": "0.9"}, "shaping_gamma")])
def test_bad_reward_arguments_raise_at_make(kwargs, name):
    with pytest.raises(ValueError, match=name):
        gym.make("taigym/MultiContact-v1", **kwargs)

