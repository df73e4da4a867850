"""taigym/Pour3D-v0: the Panda pours from a held bottle, cup or frustum; the liquid in World3D."""

import dataclasses

import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import gymnasium as gym
import taigym
import taigym.agents as agents
from taigym.envs.pour3d import OBS_SIZE, start_configuration
from taigym.envs.pour3d_tasks import COUNTER, Pour3DTask, pan_manocha_2016_scenes


@pytest.fixture(scope="module")
def env():
    e = gym.make("taigym/Pour3D-v0", render_mode="rgb_array")
    yield e
    e.close()


@pytest.mark.integration
def test_check_env_and_fixed_disjoint_splits(env):
    check_env(env.unwrapped)
    assert env.observation_space.shape == (OBS_SIZE,)
    train, ev = taigym.envs.tasks("pour3d", "train"), taigym.envs.tasks("pour3d", "eval")
    assert len(train) == 1000 and len(ev) == 100
    assert {t.source_position for t in ev}.isdisjoint({t.source_position for t in train})
    taigym.envs.pour3d_tasks.pour3d_tasks.cache_clear()          # drawn again: the same tasks
    assert taigym.envs.tasks("pour3d", "eval") == ev
    assert {t.source_container for t in ev} == {"oval", "cup", "frustum"}
    t = ev[7]
    assert Pour3DTask.from_dict(t.to_dict()) == t
    assert dataclasses.replace(t, viscosity=0.1).viscosity == 0.1


def test_container_fill_and_viscosity_fix_those_fields_of_sampled_tasks():
    """As Pour-v0's arguments of the same names: each fixes its field of every sampled task and
    leaves the others as drawn; bad values and a split with them are refused, named."""
    from taigym.envs.pour3d_tasks import sample_task

    fixed = dict(source_container="cup", fill=0.45, viscosity=0.02)
    for seed in range(20):
        free, t = sample_task(np.random.default_rng(seed)), sample_task(np.random.default_rng(seed), **fixed)
        assert (t.source_container, t.fill, t.viscosity) == ("cup", 0.45, 0.02)
        assert t.target_position == free.target_position and t.source_height == free.source_height
        assert t.target_shape().interior_volume >= 1.5 * t.source_shape().liquid_volume(0.45) - 1e-9 \
            or t.target_height == pytest.approx(0.12)          # T deepened to hold S's liquid
    gym.make("taigym/Pour3D-v0", container="oval", fill=1.0, viscosity=0.0).close()
    for kw, name in ((dict(container="rect"), "container"), (dict(fill=0.0), "fill"),
                     (dict(fill=float("nan")), "fill"), (dict(viscosity=0.6), "viscosity"),
                     (dict(task_split="eval", fill=0.5), "task_split")):
        with pytest.raises(ValueError, match=name):
            gym.make("taigym/Pour3D-v0", **kw)


@pytest.mark.integration
def test_a_reset_samples_a_task_with_the_fixed_fields():
    env = gym.make("taigym/Pour3D-v0", container="frustum", fill=0.4, viscosity=0.05)
    try:
        for seed in (0, 1):
            env.reset(seed=seed)
            t = env.unwrapped.task
            assert (t.source_container, t.fill, t.viscosity) == ("frustum", 0.4, 0.05)
    finally:
        env.close()


def test_every_eval_task_starts_reachable():
    """The arm holds S upright at its start in every eval task, clear of the counter."""
    from taigym.envs.panda import PandaArm
    from taigym.envs.transport3d_tasks import HOME

    arm = PandaArm(HOME)
    for task in taigym.envs.tasks("pour3d", "eval"):
        arm.set_obstacles([COUNTER, *task.obstacles])
        q, err = start_configuration(arm, task)
        assert err < 1e-3 and not arm.collides(q)
    arm.close()


@pytest.mark.integration
def test_held_still_the_liquid_stays_in_the_source_and_renders(env):
    obs, info = env.reset(seed=0, options={"task": pan_manocha_2016_scenes()["block"]})
    assert info["in_source"] == 1.0 and info["n_particles"] > 1000
    for _ in range(20):
        obs, _, term, trunc, info = env.step(np.zeros(7))
    assert info["in_source"] == 1.0 and info["spilled"] == 0.0 and not (term or trunc)
    assert info["lean"] < 1e-3 and not info["collision"]
    img = env.render()
    assert img.shape == (320, 512, 3)
    blue = (img[..., 2] > 150) & (img[..., 0] < 80)              # the liquid, drawn in blue
    assert blue.sum() > 100


@pytest.mark.integration
def test_rolling_the_wrist_pours_and_the_counter_stops_the_source(env):
    """Rolling joint 7 tilts S about the hand's approach axis, across the pour plane: the bottle
    empties. Moved straight down (the Jacobian's pseudo-inverse), S stops on the counter: the
    move that would push its wall into the counter is refused."""
    from taigym.envs.pour3d import MAX_JOINT_SPEED
    from taigym.envs.pour3d_tasks import COUNTER_HEIGHT

    env.reset(seed=1, options={"task": pan_manocha_2016_scenes()["far"]})
    for _ in range(30):
        _, _, _, _, info = env.step(np.array([0, 0, 0, 0, 0, 0, -0.6]))
    assert info["lean"] > 1.5 and info["in_source"] < 0.8
    assert abs(info["source_axis"][0]) < 0.2          # tilted in the plane (the robot's y-z)
    u = env.unwrapped
    obs, info = env.reset(seed=1, options={"task": pan_manocha_2016_scenes()["far"]})
    for _ in range(40):
        J = u.arm.jacobian(u.q)
        qd = np.linalg.pinv(J) @ np.array([0.0, 0.0, -0.3, 0.0, 0.0, 0.0])
        obs, _, _, _, info = env.step(qd / MAX_JOINT_SPEED)
        if info["collision"]:
            break
    assert info["collision"] and info["action_clipped"]
    bottom = info["source_position"][2] - u.wall                 # S's outer bottom, m
    assert COUNTER_HEIGHT - 1e-3 < bottom < COUNTER_HEIGHT + 0.02


@pytest.mark.integration
def test_bad_input_is_named(env):
    with pytest.raises(ValueError, match="fill"):
        Pour3DTask(fill=1.2)
    with pytest.raises(ValueError, match="source_container"):
        Pour3DTask(source_container="rect")
    with pytest.raises(ValueError, match="target_width"):
        Pour3DTask(target_width=0.13)                                   # wider than the domain holds
    with pytest.raises(ValueError, match="viscosity"):
        Pour3DTask(viscosity=-1.0)
    with pytest.raises(ValueError, match="source_position"):
        Pour3DTask(source_position=(1.5, 0.0, 0.7))
    with pytest.raises(ValueError, match="obstacles"):
        Pour3DTask(obstacles=((0.55, 0.0, 0.1, 0.1, 0.02, 0.1),))       # below the counter
    with pytest.raises(ValueError, match="dx"):
        gym.make("taigym/Pour3D-v0", dx=0.05)
    with pytest.raises(ValueError, match="horizon"):
        gym.make("taigym/Pour3D-v0", horizon=-1)
    with pytest.raises(ValueError, match="fidelity"):
        gym.make("taigym/Pour3D-v0", fidelity="simplified")
    with pytest.raises(ValueError, match="reset option"):
        env.reset(seed=0, options={"tsak": None})
    env.reset(seed=0, options={"task": pan_manocha_2016_scenes()["far"]})
    for bad in (np.zeros(3), np.full(7, np.nan)):
        with pytest.raises(ValueError, match=r"action must be 7 finite numbers of shape \(7,\) in \[-1, 1\]"):
            env.step(bad)


@pytest.mark.integration
def test_sqp_plans_a_collision_free_joint_trajectory_within_limits(env):
    """The expert's joint trajectory holds S where the 2D plan puts it (IK error < 1 mm), keeps
    the joint speeds within the Panda's, and neither the arm nor S meets the block, T or the
    counter; the model predicts most of the liquid in T."""
    task = pan_manocha_2016_scenes()["block"]
    obs, _ = env.reset(seed=0, options={"task": task})
    agent = agents.make("sqp", env)
    assert type(agent).__name__ == "SQP3DAgent"
    joints = agent.plan(task, obs[:7].astype(np.float64))
    assert agent.report["ik_error"] < 1e-3 and agent.report["joint_speed"] <= 1.0
    assert agent.plan2d.predicted["in_target"] > 0.8
    u = env.unwrapped
    for q in joints:
        assert not u.arm.collides(q)
        assert u.scene.penetration(u.scene.sim_pose(*u.arm.container_pose(q))) == 0.0


@pytest.mark.slow
@pytest.mark.parametrize("scene", ["far", "block"])
def test_sqp_pours_into_the_target(env, scene):
    """Validated in the 3D simulator: at least 95 % of the bottle's water ends in T."""
    agent = agents.make("sqp", env)
    row = agents.run_episode(env, agent, seed=0, task=pan_manocha_2016_scenes()[scene])
    assert row["in_target"] >= 0.95 and row["spilled"] <= 0.02
