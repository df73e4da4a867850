"""taigym/MultiContact-v1 (and v0): API contract, splits, validation, determinism, physics sanity."""


import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import taigym
from taigym.envs.multicontact import MultiContactEnv
from taigym.envs.multicontact_tasks import RIGID_FAMILIES, MultiContactTask
from taigym.sim import humanoid as hum


def _hold_action(env) -> np.ndarray:
    rob = env.unwrapped.robot
    a = np.zeros(23, dtype=np.float32)
    a[:21] = 2 * (hum.stand_posture() - rob.lower) / (rob.upper - rob.lower) - 1
    return a


def test_check_env_and_render():
    env = gym.make("taigym/MultiContact-v1", render_mode="rgb_array", render_size=(60, 80))
    check_env(env.unwrapped, skip_render_check=True)
    env.reset(seed=1)
    img = env.render()
    assert img.shape == (60, 80, 3) and img.dtype == np.uint8 and img.std() > 1.0
    env.close()


def test_splits_fixed_disjoint_balanced():
    tr, ev = taigym.envs.tasks("multicontact", "train"), taigym.envs.tasks("multicontact", "eval")
    assert len(tr) == 1000 and len(ev) == 100 and not set(tr) & set(ev)
    assert taigym.envs.tasks("multicontact", "eval") == ev
    assert {f: sum(t.family == f for t in ev) for f in RIGID_FAMILIES} == {f: 25 for f in RIGID_FAMILIES}
    for t in ev[:8]:
        assert MultiContactTask.from_dict(t.to_dict()) == t


@pytest.mark.parametrize("kw", [dict(family="cliff"), dict(task_split="test"), dict(control="velocity"),
                                dict(horizon=-1.0), dict(render_mode="human"), dict(kp=2.0)])
def test_invalid_arguments_raise(kw):
    name = next(iter(kw))
    with pytest.raises(ValueError, match=name):
        MultiContactEnv(**kw)


def test_v1_defaults_torque_at_60_hz_and_v0_keeps_pd_at_20_hz():
    """v1's defaults are the expert's mode; v0 still means what its results were measured in."""
    v1, v0 = gym.make("taigym/MultiContact-v1").unwrapped, gym.make("taigym/MultiContact-v0").unwrapped
    assert (v1.control, v1.substeps) == ("torque", 4) and (v0.control, v0.substeps) == ("pd", 12)
    v1.close()
    v0.close()


def test_invalid_task_fields_raise():
    with pytest.raises(ValueError, match="family"):
        MultiContactTask(family="moon")
    with pytest.raises(ValueError, match="size"):
        MultiContactTask(family="step", size=2.0)
    with pytest.raises(ValueError, match="unknown"):
        MultiContactTask.from_dict({"family": "step", "colour": 1})


def test_deterministic_for_a_seed_and_stands_still():
    outs = []
    for _ in range(2):
        env = gym.make("taigym/MultiContact-v1", task_split="eval", control="pd", control_dt=0.05)
        obs, info = env.reset(seed=3)
        a = _hold_action(env)
        for _ in range(20):
            obs, r, term, trunc, info = env.step(a)
        outs.append(obs)
        assert not info["fell"] and info["contacts"]["right_foot"] and info["contacts"]["left_foot"]
        env.close()
    np.testing.assert_array_equal(outs[0], outs[1])


def test_limp_robot_falls_and_terminates():
    env = gym.make("taigym/MultiContact-v1")
    env.reset(seed=0, options={"task": MultiContactTask(family="step")})
    for k in range(100):
        _, _, term, trunc, info = env.step(np.zeros(23, dtype=np.float32))
        if term or trunc:
            break
    assert term and info["fell"] and not info["success"]
    env.close()


def test_success_when_standing_at_the_goal():
    """A robot placed standing on the goal (feet down, soles' midpoint there) is a success."""
    task = MultiContactTask(family="gap", size=0.4)
    env = gym.make("taigym/MultiContact-v1", control="pd")
    env.reset(seed=0, options={"task": task})
    u = env.unwrapped
    hum.place_standing(u.robot, x=float(task.goal()[0]))
    a = _hold_action(env)
    _, _, term, _, info = env.step(a)
    assert term and info["success"] and not info["fell"]
    env.close()


def test_contact_friction_is_the_surfaces():
    """pybullet multiplies both bodies' friction: the robot's links have 1, so a sole on the
    slope gets the slope's mu (0.55) as the planner assumes, not half of it."""
    import pybullet as p

    env = gym.make("taigym/MultiContact-v1")
    env.reset(seed=0, options={"task": MultiContactTask(family="slope", size=0.55)})
    e = env.unwrapped
    links = range(-1, p.getNumJoints(e.robot.body, physicsClientId=e.client))
    assert all(p.getDynamicsInfo(e.robot.body, j, physicsClientId=e.client)[1] == 1.0 for j in links)
    env.close()
