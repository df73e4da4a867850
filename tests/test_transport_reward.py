"""Transport-v0's reward modes: the terms add up to the reward, the dense mode's shaping is
potential-based (it telescopes to -Phi(s_0)), the route potential follows the obstacles, and bad
arguments raise before anything is built."""

import gymnasium as gym
import numpy as np
import pytest

import taigym  # noqa: F401  (registers the envs)
from taigym.envs.transport import REWARD_MODES, REWARD_TERMS, ROUTE_WEIGHT
from taigym.envs.transport_tasks import TransportTask, route_distance

WALL = ((0.6, 0.15, 0.1, 0.3),)       # a box between start and goal, 30 cm tall


def _task(obstacles=WALL):
    return TransportTask(start=(0.2, 0.1, 0.0), goal=(1.0, 0.1, 0.0), obstacles=obstacles,
                         bottom_radius=0.03, top_radius=0.04, height=0.1, fill=0.5)


def test_route_distance_goes_around_the_obstacles():
    free, blocked = _task(()), _task()
    # no obstacle: the straight line (a grid row: exact); the box: up over its top (20 cm above
    # the start) and down again, no shorter than two straight slopes
    assert route_distance(free, 0.2, 0.1) == pytest.approx(0.8, abs=1e-9)
    assert route_distance(blocked, 0.2, 0.1) > 2 * np.hypot(0.4, 0.3 - 0.1)
    assert route_distance(blocked, 1.0, 0.1) == pytest.approx(0.0, abs=1e-9)
    # inside the box (no upright container fits): finite, more than from the box's near side
    assert route_distance(blocked, 0.6, 0.1) > route_distance(blocked, 0.62, 0.4) > 0


def _rollout(mode, gamma, actions, horizon=0.5):
    env = gym.make("taigym/Transport-v0", reward_mode=mode, shaping_gamma=gamma, horizon=horizon)
    try:
        _, info = env.reset(seed=0, options={"task": _task()})
        assert all(info["reward_" + k] == 0.0 for k in REWARD_TERMS[mode])
        phi0 = sum(env.unwrapped.phi.values())
        steps = []
        for a in actions:
            _, r, term, trunc, info = env.step(np.asarray(a, np.float32))
            assert tuple(k[7:] for k in info if k.startswith("reward_")) == REWARD_TERMS[mode]
            assert r == pytest.approx(sum(info["reward_" + k] for k in REWARD_TERMS[mode]), abs=1e-12)
            steps.append((r, info))
            if term or trunc:
                return phi0, steps, term, trunc
        raise AssertionError("the episode did not end")
    finally:
        env.close()


@pytest.mark.parametrize("actions, ends", [
    ([(0.6, 0.3, 0.4)] * 10, "truncated"),           # towards the goal, tilting: the horizon ends it
    ([(1.0, 0.0, 0.0)] * 20, "collided"),            # straight into the box
])
def test_modes_sum_their_terms_and_dense_shaping_telescopes(actions, ends):
    gamma = 0.9
    runs = {mode: _rollout(mode, gamma, actions) for mode in REWARD_MODES}
    phi0, dense, term, trunc = runs["dense"]
    assert (trunc and not term) if ends == "truncated" else (term and dense[-1][1]["collided"])
    assert phi0 == pytest.approx(-ROUTE_WEIGHT)          # upright at the start: the route term only
    shaped = sum(gamma ** k * (i["reward_route"] + i["reward_upright"]) for k, (_, i) in enumerate(dense))
    assert shaped == pytest.approx(-phi0, abs=1e-9)      # Phi = 0 at the end: gamma-discounted sum is -Phi(s_0)
    # dense is the default mode's reward plus the shaping, step for step (the same liquid)
    _, progress, _, _ = runs["progress"]
    assert len(progress) == len(dense)
    for (rp, _), (rd, i) in zip(progress, dense):
        assert rd - i["reward_route"] - i["reward_upright"] == pytest.approx(rp, abs=1e-9)
    if ends == "collided":
        assert progress[-1][1]["reward_collision"] == -1.0
    else:
        assert all(i["reward_upright"] < 0 for _, i in dense[:-1])   # tilting costs potential
    assert [r for r, _ in runs["sparse"][1]] == [0.0] * len(dense)   # no success, nothing


@pytest.mark.parametrize("kwargs, name", [({"reward_mode": "shaped"}, "reward_mode"),
                                          ({"reward_mode": None}, "reward_mode"),
                                          ({"shaping_gamma": 1.5}, "shaping_gamma"),
                                          ({"collision_penalty": -1.0}, "collision_penalty")])
def test_bad_reward_arguments_raise(kwargs, name):
    with pytest.raises(ValueError, match=name) as err:
        gym.make("taigym/Transport-v0", **kwargs)
    if name == "reward_mode":
        assert all(m in str(err.value) for m in REWARD_MODES)
