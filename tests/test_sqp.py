"""Pan & Manocha 2016's SQP pouring planner (taigym.planners.sqp) and the ``sqp`` expert agent."""

from __future__ import annotations

import dataclasses

import gymnasium as gym
import numpy as np
import pytest

import taigym.agents
from taigym.envs import tasks
from taigym.envs.pour_tasks import pan_manocha_2016_scenes
from taigym.planners.sqp import PourPlan, PourProblem, SQPConfig, plan_pour
from taigym.sim import Box

CFG = SQPConfig()


def check_limits(plan, cfg=CFG):
    steps = np.abs(np.diff(plan.poses, axis=0))
    assert np.all(steps <= np.asarray(cfg.max_step) + 1e-6), steps.max(axis=0)
    assert np.all(np.abs(plan.poses[:, 2]) <= cfg.tilt_limit + 1e-9)


def solid_points(prob, pose):
    walls = np.asarray(prob.source.walls)
    pts = np.concatenate([a + np.linspace(0, 1, 20)[:, None] * (b - a) for a, b in zip(walls[:-1], walls[1:])])
    c, s = np.cos(pose[2]), np.sin(pose[2])
    return pts @ np.array([[c, s], [-s, c]]) + pose[:2]


@pytest.mark.parametrize("k", [0, 1, 4])
def test_plans_eval_tasks_within_limits(k):
    task = tasks("pour", split="eval")[k]
    prob = PourProblem.from_task(task)
    plan = plan_pour(prob)
    assert plan.status in ("converged", "time_limit", "max_iterations")
    assert plan.wall_time < CFG.time_limit + 2.0
    check_limits(plan)
    np.testing.assert_array_equal(plan.poses[0], task.source_pose)
    assert plan.predicted["in_target"] > 0.9 and plan.predicted["collision"] < 1e-3


def test_block_scene_plan_keeps_s_out_of_the_block_and_t():
    task = pan_manocha_2016_scenes()["block"]
    prob = PourProblem.from_task(task)
    plan = plan_pour(prob)
    check_limits(plan)
    cx, cy, w, h = task.obstacles[0]
    box = Box(w, h)
    r = prob.source.radius
    for pose, t in zip(plan.poses, plan.times):
        pts = solid_points(prob, pose)
        assert box.sdf(pts - (cx, cy)).min() > r - 1e-3
        assert prob.target.sdf(pts - task.target_pose_at(t)[:2]).min() > r - 1e-3
    assert plan.predicted["in_target"] > 0.9


def test_moving_target_is_tracked():
    task = dataclasses.replace(tasks("pour", split="eval")[1], target_velocity=(0.2, 0.0))
    plan = plan_pour(PourProblem.from_task(task))
    assert plan.predicted["in_target"] > 0.9


def test_degenerate_problems_end_without_hanging():
    task = tasks("pour", split="eval")[0]
    # an empty source: nothing to pour, the plan still comes back
    plan = plan_pour(PourProblem.from_task(task, in_source=0.0), SQPConfig(time_limit=2.0))
    assert plan.predicted["in_target"] == 0.0
    # an unreachable target (far out of the velocity limits): stops at its time or iteration limit
    # (scripts/bench_sim.py and the planner's own wall_time measure how long that takes)
    far = dataclasses.replace(task, source_pose=(0.15, 0.40, 0.0), target_position=(0.68, 0.05),
                              target_velocity=(0.0, 0.0))
    plan = plan_pour(PourProblem.from_task(far), SQPConfig(max_step=(0.002, 0.002, 0.1), time_limit=1.5))
    assert plan.status in ("time_limit", "max_iterations", "converged", "infeasible")
    assert plan.predicted["in_target"] < 0.5
    check_limits(plan, SQPConfig(max_step=(0.002, 0.002, 0.1)))
    with pytest.raises(ValueError, match="nodes"):
        SQPConfig(nodes=1)
    with pytest.raises(ValueError, match="in_source"):
        PourProblem.from_task(task, in_source=1.5)


@pytest.mark.integration
def test_agent_pours_into_t_in_the_particle_env():
    env = gym.make("taigym/Pour-v0")
    agent = taigym.agents.make("sqp", env)
    row = taigym.agents.run_episode(env, agent, seed=0, task=pan_manocha_2016_scenes()["far"])
    assert row["in_target"] > 0.9 and row["spilled"] < 0.05, row
    with pytest.raises(ValueError, match="accepted"):
        taigym.agents.make("sqp", env, lean=3)
    env.close()


def test_agent_replans_from_a_later_state():
    env = gym.make("taigym/Pour-v0", fidelity="simplified")
    agent = taigym.agents.make("sqp", env, replan_every=30)
    row = taigym.agents.run_episode(env, agent, seed=0, task=tasks("pour", split="eval")[2])
    assert row["success"], row
    assert len(agent.plan.poses) < 80                    # the last plan started mid-episode


@pytest.mark.parametrize("follow", [False, True])
def test_planner_rollout_is_the_simplified_model(follow):
    """What the planner plans is what the simplified env simulates: its batched rollout gives,
    step for step, the outflow volume and the jet's landing point of stepping SimplifiedLiquid
    as the env does (the slosh of S's acceleration, the jet drag sparing S's own velocity and
    falling with the jet's section), from liquid at rest or moving with S."""
    from taigym.models.outflow_tables import outflow_tables
    from taigym.models.simplified import SimplifiedLiquid, jet_drag, landing
    from taigym.planners.sqp import _Rollout, initial_trajectory

    task = tasks("pour", split="eval")[3]
    if follow:
        task = dataclasses.replace(task, liquid_velocity="follow", source_velocity=(0.15, 0.0))
    prob = PourProblem.from_task(task)
    # a small A_ref, so that most of this pour's jets count as thick and their drag is scaled
    prob = dataclasses.replace(prob, fit=dataclasses.replace(prob.fit, drag_section=0.004))
    poses = initial_trajectory(prob, CFG)
    roll = _Rollout(prob, CFG, outflow_tables(prob.source))
    res, frac, _ = roll(poses[None])
    liquid = SimplifiedLiquid(prob.source, prob.volume, prob.fit, velocity=prob.surface[2:])
    tilts, flowing, thick = [], 0, 0
    for i in range(1, len(poses)):
        vel = (poses[i] - poses[i - 1]) / CFG.dt
        out = liquid.step(poses[i], vel, poses[i - 1, 2], CFG.dt)
        tilts.append(liquid.surface[0])
        assert frac[0, i - 1] * prob.initial_volume == pytest.approx(out.volume, rel=1e-6, abs=1e-12)
        hit = landing(out.start, out.velocity, roll.rims[i], jet_drag(prob.fit, out.section), out.carried[0])
        if out.volume > 0 and hit is not None:
            tx = prob.target_path(np.array([roll.times[i] + hit[1]]))[0, 0] + roll.oc[0]
            assert res[0, i - 1, 0] == pytest.approx(hit[0] - tx, abs=1e-9)
            flowing += 1
            thick += out.section > 0.004
    assert frac.sum() > 0.5 and flowing > 10 and thick > 5
    assert max(np.abs(tilts)) > 0.05                       # S's accelerations did slosh the surface


@pytest.mark.integration
def test_replan_on_its_own_path_keeps_the_plan():
    """DAgger's labels: a replan from a state on the expert's own trajectory (warm-started, as
    MPC) gives about the action the plan it replaces would have taken (S keeps its motion)."""
    env = gym.make("taigym/Pour-v0", fidelity="simplified")
    expert, relabeller = taigym.agents.make("sqp", env), taigym.agents.make("sqp", env)
    obs, info = env.reset(seed=0, options={"task": tasks("pour", split="train")[0]})
    expert.reset(seed=0)
    relabeller.reset(seed=0)
    diffs = []
    for step in range(40):                                # two seconds: S moves to T and pours
        a = expert.act(obs, info)
        if relabeller.plan is None:
            relabeller.plan, relabeller._task = expert.plan, env.unwrapped.task
        relabeller.replan(info)
        diffs.append(np.abs(relabeller.act(obs, info) - a))
        obs, _, _, _, info = env.step(a)
    # of the [-1, 1] action, the typical step (median): with the slosh in the planner's model its
    # SQP stops at less reproducible local optima, and a few steps that land at another one move
    # the mean with the CPU's floating point (means measured 0.07, 0.04, 0.11 on three machines
    # and 0.154 on a fourth, where the median is 0.117; without the slosh 0.002-0.02)
    assert np.median(diffs, axis=0).max() < 0.15, np.median(diffs, axis=0)


@pytest.mark.parametrize("warm_start", [True, False])
def test_replan_past_t_keeps_pouring_over_the_same_lip(warm_start):
    """Once S has carried its lip over T, S's centre is past T's opening: a replan from there (on
    the plan, 1 s in, before any outflow) still leans towards T over the same lip (T's side of S
    would now say the other; the plan's lean flipped by 4.8 rad on 15 of 50 tasks, success 0.86),
    and warm-started it keeps the plan's tail."""
    from taigym.envs.pour_tasks import extra_train_task

    env = gym.make("taigym/Pour-v0", fidelity="simplified")
    task = extra_train_task(3)
    agent = taigym.agents.make("sqp", env, warm_start=warm_start)
    obs, info = env.reset(seed=953, options={"task": task})
    agent.reset(seed=953)
    for _ in range(20):
        obs, _, _, _, info = env.step(agent.act(obs, info))
    plan = agent.plan
    assert info["in_source"] == 1.0
    now = PourProblem.from_task(task, pose=info["source_pose"], time=info["time"])
    assert now.pour_side(60, 0.05) == -plan.side                # the geometric test flips here
    replan = agent.replan(info)
    assert replan.side == plan.side
    assert np.sign(replan.poses[-1, 2]) == np.sign(plan.poses[-1, 2])
    assert abs(replan.poses[-1, 2] - plan.poses[-1, 2]) < 0.3
    if warm_start:
        np.testing.assert_allclose(replan.poses, plan.poses[20:], atol=1e-6)
    with pytest.raises(ValueError, match="side"):
        PourProblem.from_task(task, side=2)


def test_tracking_gain_returns_part_of_the_way_to_the_plan():
    """track_gain: from a state off the plan the step is the plan's step plus track_gain x the
    offset back to the plan (a gentler feedback for DAgger's labels); on the plan every gain
    takes the plan's step."""
    env = gym.make("taigym/Pour-v0", fidelity="simplified")
    task = tasks("pour", split="train")[0]
    env.reset(seed=0, options={"task": task})
    start = np.array(task.source_pose)
    poses = start + np.outer(np.arange(4), [0.01, 0.0, -0.05])           # a straight plan: 1 cm, -0.05 rad a step
    plan = PourPlan(poses, 0.05 * np.arange(4), {}, 0, 0.0, "test", 0.0)
    scale = np.array([0.025, 0.025, 0.1])
    for gain in (1.0, 0.25):
        agent = taigym.agents.make("sqp", env, track_gain=gain)
        agent.plan, agent._task = plan, env.unwrapped.task
        on_plan = agent.act(None, {"source_pose": poses[0]})
        np.testing.assert_allclose(on_plan * scale, poses[1] - poses[0], atol=1e-7)
        behind = poses[1] - [0.01, 0.0, 0.0]                                 # 1 cm behind the plan
        off_plan = agent.act(None, {"source_pose": behind})
        np.testing.assert_allclose(off_plan * scale, poses[2] - poses[1] + gain * (poses[1] - behind), atol=1e-7)
    with pytest.raises(ValueError, match="track_gain"):
        taigym.agents.make("sqp", env, track_gain=2.0)
