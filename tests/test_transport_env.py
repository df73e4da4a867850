"""taigym/Transport-v0: API, tasks, validation, and the physics a user relies on."""


import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import taigym
from taigym.envs.transport_tasks import TransportTask, check_feasible


@pytest.fixture(scope="module")
def env():
    e = gym.make("taigym/Transport-v0")
    yield e
    e.close()


def _task(**kw):
    base = dict(start=(0.2, 0.1, 0.0), goal=(1.0, 0.1, 0.0), obstacles=((0.6, 0.1, 0.1, 0.2),),
                bottom_radius=0.03, top_radius=0.04, height=0.1, fill=0.5)
    base.update(kw)
    return TransportTask(**base)


def test_check_env_passes(env):
    check_env(env.unwrapped)


def test_splits_are_fixed_and_round_trip():
    ev = taigym.envs.tasks("transport", "eval")
    assert len(ev) == 100 and ev == taigym.envs.tasks("transport", "eval")
    assert {t.layout for t in ev} == {"shelf", "boxes", "gap"}
    for t in ev[:10]:
        assert TransportTask.from_dict(t.to_dict()) == t
        check_feasible(t)


def test_bad_inputs_raise_clear_errors():
    with pytest.raises(ValueError, match="fill must be in"):
        _task(fill=1.2)
    with pytest.raises(ValueError, match="goal pose .* inside an obstacle"):
        check_feasible(_task(goal=(0.6, 0.1, 0.0)))
    wall = ((0.6, 0.4, 0.05, 0.8),)  # floor to ceiling
    with pytest.raises(ValueError, match="unreachable"):
        check_feasible(_task(obstacles=wall))
    with pytest.raises(ValueError, match="fill must be in"):
        gym.make("taigym/Transport-v0", fill=1.5)
    e = gym.make("taigym/Transport-v0")
    with pytest.raises(ValueError, match="unreachable"):
        e.reset(options={"task": _task(obstacles=wall)})


def test_standing_still_keeps_the_liquid_and_a_crash_collides(env):
    task = _task()
    obs, info = env.reset(seed=0, options={"task": task})
    assert env.observation_space.contains(obs) and info["spilled"] == 0.0
    for _ in range(10):
        obs, r, term, trunc, info = env.step(np.zeros(3))
    assert info["spilled"] == 0.0 and not term
    for _ in range(40):  # straight into the box at x = 0.6
        obs, r, term, trunc, info = env.step(np.array([0.5, 0.0, 0.0]))
        if term:
            break
    assert term and info["collided"] and not info["success"]


def test_a_gentle_carry_succeeds_and_a_violent_one_spills(env):
    task = _task(obstacles=(), goal=(0.5, 0.1, 0.0), fill=0.7)
    for peak, expect_success in ((0.1, True), (1.0, False)):
        env.reset(seed=0, options={"task": task})
        # accelerate to `peak` of 0.8 m/s in one step, cruise, stop in one step
        dist = 0.3
        n = int(round(dist / (peak * 0.8 * 0.05)))
        for k in range(n + 10):
            a = np.array([peak if k < n else 0.0, 0.0, 0.0])
            obs, r, term, trunc, info = env.step(a)
            if term or trunc:
                break
        assert info["success"] is expect_success, (peak, info)
        if not expect_success:
            assert info["spilled"] > 0.001


def test_near_goal_moves_only_drawn_tasks_to_a_short_route_from_the_goal():
    """near_goal=1: every drawn task (the task the seed samples) starts upright,
    collision-free, 2-30 cm of route from its goal, the rest of the task as drawn; a task given
    to reset is run as given."""
    from gymnasium.utils import seeding

    from taigym.envs.transport_tasks import NEAR_GOAL_ROUTE, route_distance, sample_task

    near = gym.make("taigym/Transport-v0", near_goal=1.0)
    for seed in range(3):
        near.reset(seed=seed)
        t, p = near.unwrapped.task, sample_task(seeding.np_random(seed)[0])
        assert t.goal == p.goal and t.obstacles == p.obstacles and t.fill == p.fill
        assert t.start != p.start and t.start[2] == 0.0 and not t.collides([t.start])[0]
        # (the grid's route and its bilinear interpolation agree at grid points, to rounding)
        assert NEAR_GOAL_ROUTE[0] - 1e-9 <= route_distance(t, *t.start[:2]) <= NEAR_GOAL_ROUTE[1] + 1e-9
    given = _task()
    near.reset(seed=0, options={"task": given})
    assert near.unwrapped.task == given
    near.close()
    with pytest.raises(ValueError, match="near_goal"):
        gym.make("taigym/Transport-v0", near_goal=1.5)
