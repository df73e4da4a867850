"""taigym/Transport3D-v0: the Panda carries a filled frustum; the liquid in its frame."""

import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import gymnasium as gym
import taigym
import taigym.agents as agents
from taigym.envs.transport3d import OBS_SIZE, PandaCarrier
from taigym.envs.transport3d_tasks import LAYOUTS, Transport3DTask


@pytest.fixture(scope="module")
def env():
    e = gym.make("taigym/Transport3D-v0")
    yield e
    e.close()


@pytest.fixture(scope="module")
def eval_tasks():
    return taigym.envs.tasks("transport3d", "eval")


@pytest.mark.integration
def test_check_env_and_fixed_disjoint_splits(env, eval_tasks):
    check_env(env.unwrapped, skip_render_check=True)
    assert env.observation_space.shape == (OBS_SIZE,)
    train = taigym.envs.tasks("transport3d", "train")
    assert len(eval_tasks) == 100 and len(train) == 1000
    assert {t.start for t in eval_tasks}.isdisjoint({t.start for t in train})
    assert all(sum(t.layout == lay for t in eval_tasks) >= 15 for lay in LAYOUTS)
    t = eval_tasks[3]
    assert Transport3DTask.from_dict(t.to_dict()) == t


def test_jacobian_is_the_container_velocity():
    """The liquid's frame moves as the arm does: the Jacobian's velocity matches a finite
    difference of the container's pose (position and orientation)."""
    arm = PandaCarrier()
    rng = np.random.default_rng(0)
    q, qd = np.array([0.3, -0.2, 0.1, -2.1, 0.2, 3.3, 0.8]), rng.uniform(-1, 1, 7)
    h = 1e-3                            # central differences; pybullet's poses are float32
    (p0, R0), (p1, R1) = arm.container_pose(q - h * qd), arm.container_pose(q + h * qd)
    _, R = arm.container_pose(q)
    v = arm.container_velocity(q, qd)
    np.testing.assert_allclose((p1 - p0) / (2 * h), v[:3], atol=1e-3)
    W = (R1 - R0) / (2 * h) @ R.T                                 # skew(omega)
    np.testing.assert_allclose([W[2, 1], W[0, 2], W[1, 0]], v[3:], atol=1e-3)
    arm.close()


@pytest.mark.integration
def test_held_still_the_liquid_stays(env, eval_tasks):
    env.reset(seed=0, options={"task": eval_tasks[0]})
    for _ in range(20):
        _, _, term, trunc, info = env.step(np.zeros(7))
    assert info["spilled"] == 0.0 and info["tilt"] < 1e-3 and not (term or trunc)


def _tilt_to(env, task, target, rate):
    """Turn the hand about its (horizontal) approach axis, tilting the container, at ``rate``
    (fraction of the joint speed) until it leans ``target`` rad, then hold 1 s."""
    env.reset(seed=1, options={"task": task})
    info = {"tilt": 0.0}
    for _ in range(200):
        if info["tilt"] >= target:
            break
        _, _, _, _, info = env.step(np.array([0, 0, 0, 0, 0, 0, rate]))
    for _ in range(20):
        _, _, _, _, info = env.step(np.zeros(7))
    return info


@pytest.mark.integration
def test_tilting_below_the_max_tilt_keeps_the_liquid_and_past_it_spills(env, eval_tasks):
    task = eval_tasks[0]
    env.reset(seed=0, options={"task": task})
    theta = env.unwrapped.theta_max
    assert 0.2 < theta < 1.4
    assert _tilt_to(env, task, theta - 0.15, 0.15)["spilled"] == 0.0
    assert _tilt_to(env, task, theta + 0.4, 0.5)["spilled"] > 0.05


@pytest.mark.integration
def test_carry_reaches_the_goal_without_spilling(env, eval_tasks):
    """The resolved-rate reference carries the container over a box and without one."""
    agent = agents.make("carry", env)
    for task in (next(t for t in eval_tasks if t.layout == "open"), next(t for t in eval_tasks if t.layout == "box")):
        obs, info = env.reset(seed=2, options={"task": task})
        agent.reset(seed=2)
        done = False
        while not done:
            obs, _, term, trunc, info = env.step(agent.act(obs, info))
            done = term or trunc
        assert info["success"] and info["spilled"] <= 1e-3 and not info["collided"]


@pytest.mark.integration
def test_collision_with_the_table_ends_the_episode(env, eval_tasks):
    env.reset(seed=0, options={"task": eval_tasks[0]})
    for _ in range(100):
        _, reward, term, _, info = env.step(np.array([0, 1.0, 0, 0, 0, 0, 0]))  # shoulder down
        if term:
            break
    assert info["collided"] and term and reward < -0.5


@pytest.mark.integration
def test_bad_input_is_named(env, eval_tasks):
    with pytest.raises(ValueError, match="fill"):
        Transport3DTask(start=eval_tasks[0].start, goal=eval_tasks[0].goal, fill=1.2)
    with pytest.raises(ValueError, match="start"):
        Transport3DTask(start=(0.0,) * 7, goal=(0.5, 0.0, 0.3))
    with pytest.raises(ValueError, match="dx"):
        gym.make("taigym/Transport3D-v0", dx=0.05)
    far = Transport3DTask(start=eval_tasks[0].start, goal=(1.4, 0.0, 0.3))     # out of reach
    with pytest.raises(ValueError, match="reach"):
        env.reset(seed=0, options={"task": far})
    env.reset(seed=0, options={"task": eval_tasks[0]})
    for bad in (np.zeros(3), np.full(7, np.nan)):
        with pytest.raises(ValueError, match=r"action must be 7 finite numbers of shape \(7,\) in \[-1, 1\]"):
            env.step(bad)


@pytest.mark.integration
@pytest.mark.parametrize("layout", ["box", "shelf", "gap"])
def test_sfrrt_delivers_past_boxes_into_shelves_and_between_posts(env, eval_tasks, layout):
    """The expert plans a path the arm can follow (no fallback), and, run in the particle
    simulator, delivers without spilling or touching anything."""
    agent = agents.make("sfrrt", env, time_budget=5.0)   # RRT*'s budget is wall time: a loaded CI
    task = next(t for t in eval_tasks if t.layout == layout)
    obs, info = env.reset(seed=3, options={"task": task})
    agent.reset(seed=3)
    assert agent.plan.accepted and not agent.fallback
    done = False
    while not done:
        obs, _, term, trunc, info = env.step(agent.act(obs, info))
        done = term or trunc
    assert info["success"] and info["spilled"] <= 1e-3 and not info["collided"]


def test_the_controller_moves_the_arm_through_the_configurations_the_planner_checks():
    """Within the upright posture family a container position has one arm configuration: after
    a carry by the family controller (the trapezoid rule, as the env), the arm is where inverse
    kinematics from a far-off seed puts it, and the container is still upright."""
    from taigym.agents.carry import family_action
    from taigym.envs.transport3d import CONTROL_DT, MAX_JOINT_SPEED
    from taigym.envs.transport3d_tasks import upright_configuration

    arm = PandaCarrier()
    q, qd = upright_configuration(0.4, -0.3, -2.2), np.zeros(7)
    for k in range(30):
        v = 0.4 * np.array([np.cos(0.2 * k), np.sin(0.2 * k), 0.3])    # a curving, climbing path
        qd1 = family_action(arm, q, v, MAX_JOINT_SPEED) * MAX_JOINT_SPEED
        q, qd = q + 0.5 * (qd + qd1) * CONTROL_DT, qd1
    p, R = arm.container_pose(q)
    again = arm.upright_configuration_at(p, upright_configuration(-0.5, 0.1, -1.5))
    np.testing.assert_allclose(again, q, atol=2e-3)
    assert R[2, 1] > 1 - 1e-6                                          # its axis vertical
    arm.close()


def test_the_tasks_module_does_not_import_the_env():
    """transport3d_tasks (tasks, the arm's feasibility checks) sits below transport3d (the env):
    no import back, not even inside a function (DESIGN.md §1: no import cycles)."""
    import ast
    import inspect

    import taigym.envs.transport3d_tasks as tasks_module

    tree = ast.parse(inspect.getsource(tasks_module))
    imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    imported |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    assert not imported & {"transport3d", "taigym.envs.transport3d"}
