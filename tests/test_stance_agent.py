"""The ``stance`` expert: registered, its QP controller balances the real dynamics; a full climb (slow)."""

import gymnasium as gym
import numpy as np
import pytest

import taigym
from taigym.agents.stance import StanceAgent
from taigym.envs.multicontact_tasks import MultiContactTask
from taigym.planners import stance as st
from taigym.sim import humanoid as hum


def _standing_on_a_step_task():
    """A step task in torque control at 60 Hz, reset, and a stance agent whose model is set to
    the robot's state, ready for phases written by the test."""
    task = MultiContactTask(family="step")
    env = gym.make("taigym/MultiContact-v1")
    obs, info = env.reset(seed=0, options={"task": task})
    agent = StanceAgent(env)
    agent.model, agent._task = st.StanceModel(task), task
    agent.model.robot.set_state(obs[42:45], obs[45:49], obs[:21])
    return env, obs, info, agent


def test_registered():
    assert "stance" in taigym.agents.available()


def test_the_default_env_is_one_the_expert_drives_and_other_modes_raise_at_make():
    """``gym.make("taigym/MultiContact-v1")`` with its defaults is torque control at 60 Hz, the
    mode the expert's QP drives; an env configuration it cannot drive (v0's PD default, or a
    control step too coarse for the QP: eval ladders 0 and 1 fail at 0.05 s) raises a
    ValueError naming the argument when the agent is made, not a silent failure later."""
    env = gym.make("taigym/MultiContact-v1")
    assert env.unwrapped.control == "torque" and env.unwrapped.control_dt == pytest.approx(1 / 60)
    taigym.agents.make("stance", env)
    env.close()
    for kw, name in ((dict(), "control"), (dict(control="torque"), "control_dt")):
        env = gym.make("taigym/MultiContact-v0", **kw)
        with pytest.raises(ValueError, match=name):
            taigym.agents.make("stance", env)
        env.close()


@pytest.mark.integration
def test_the_expert_reaches_the_goal_with_the_env_defaults():
    """As a user calls it: the default env, the default agent, an eval step task."""
    env = gym.make("taigym/MultiContact-v1")
    task = [t for t in taigym.envs.tasks("multicontact", "eval") if t.family == "step"][1]
    out = taigym.agents.run_episode(env, taigym.agents.make("stance", env), seed=0, task=task)
    assert out["success"] and not out["fell"]
    env.close()


def test_qp_controller_shifts_the_com_in_torque_control():
    """With torques from the QP only (no PD servo), the robot stands and moves its CoM 4 cm."""
    env, obs, info, agent = _standing_on_a_step_task()
    com0 = agent.model.robot.com_and_jacobian()[0]
    target = com0 + np.array([0.04, 0.0, 0.0])
    feet = sorted(st.Contact(f, "floor", 0.0) for f in hum.FEET)
    agent.phases = [dict(kind="hold", support=feet, com=target, q=obs[:21].astype(float),
                         quat=obs[45:49].astype(float))]
    agent.k, agent.t_phase, agent.grip = 0, 0.0, {h: False for h in hum.HANDS}
    for _ in range(150):
        obs, _, term, _, info = env.step(agent.act(obs, info))
        assert not term
    agent.model.robot.set_state(obs[42:45], obs[45:49], obs[:21])
    com = agent.model.robot.com_and_jacobian()[0]
    assert np.linalg.norm(com[:2] - target[:2]) < 0.015
    assert info["contacts"]["left_foot"] and info["contacts"]["right_foot"] and not info["fell"]
    agent.model.close()
    env.close()


def test_a_shift_aims_inside_the_next_supports_equilibrium_region():
    """A planned CoM outside or on the edge of the next support's balanced region (here 5 cm
    beside a sole's centre line, 0.5 cm past its side) is moved to the nearest CoM that support holds with a margin (a sole admits about
    4.5 cm: 3 cm), so a CoM tracked a few centimetres short is still held; a CoM deep inside a
    two-foot support is kept as planned."""
    env, obs, info, agent = _standing_on_a_step_task()
    mass = agent.model.robot.total_mass
    try:
        sole = [st.Contact("left_foot", "floor", 0.0)]
        foot = agent.model.target(sole[0])[0]
        edge = np.r_[foot[:2] + np.array([0.0, 0.05]), 0.8]          # 5 cm beside the sole's centre
        assert st.stability_margin(agent.model, sole, mass, edge[:2]) is None     # not balanced there
        aim = agent._held_com(sole, edge)
        assert aim[2] == edge[2]
        r = st.stability_margin(agent.model, sole, mass, aim[:2])[0]
        assert r == pytest.approx(0.03, abs=1e-4)
        feet = sorted(st.Contact(f, "floor", 0.0) for f in hum.FEET)
        deep = np.array([0.0, 0.0, 0.8])
        assert np.allclose(agent._held_com(feet, deep), deep, atol=1e-6)
    finally:
        agent.model.close()
        env.close()


@pytest.mark.slow
@pytest.mark.parametrize("family, index", [
    ("step", 0), ("gap", 2), ("gap", 6), ("slope", 19), ("ladder", 1), ("slope", 2), ("slope", 0)])
def test_expert_climbs(family, index):
    """The expert reaches the goal of an eval scene without falling: a step with its rail, gaps
    crossed with a hand on the wall (with the arm's joints left out of the posture task as the
    hand swung, it never reached the wall and gap 2 fell; with the leg's as a foot stepped
    across, gap 6 fell), a 28.5 deg slope (inside a sole's cone but not the 85 % of it the
    controller uses: planned at the full cone, it stood on one sole there and fell), a ladder, a
    31 deg slope (steeper than a sole's friction cone, 28.8 deg: hands carry the rest; its plan
    stood the pelvis 5-7 mm from the rail, which it touched: a fall) and a 30 deg slope (its rear
    sole was planned with the toe on the slope: it rested tilted on the slope's edge, and the
    right hand never reached the slope)."""
    env = gym.make("taigym/MultiContact-v1")
    task = [t for t in taigym.envs.tasks("multicontact", "eval") if t.family == family][index]
    obs, info = env.reset(seed=index, options={"task": task})
    agent = taigym.agents.make("stance", env)
    agent.reset(seed=index)
    assert agent.plan.solved
    done = False
    while not done:
        obs, _, term, trunc, info = env.step(agent.act(obs, info))
        done = term or trunc
    assert info["success"] and not info["fell"]


def test_a_swing_that_cannot_land_is_abandoned_not_loaded(monkeypatch):
    """A hand sent out of reach times out, is tried once more, then the robot stays on its feet
    (the hand is never loaded as a support) and does not fall."""
    import taigym.agents.stance as sa

    monkeypatch.setattr(sa, "PHASE_TIMEOUT", 0.3)
    monkeypatch.setattr(sa, "MAX_REPLANS", 0)       # no replan: the robot holds the swing's stance
    env, obs, info, agent = _standing_on_a_step_task()
    com = agent.model.robot.com_and_jacobian()[0]
    feet = sorted(st.Contact(f, "floor", 0.0) for f in hum.FEET)
    q, quat = obs[:21].astype(float), obs[45:49].astype(float)
    hand = st.Contact("right_hand", "floor", 0.0)     # a support that must never be used
    agent.phases = [dict(kind="swing", support=feet, limb="right_hand", contact=hand, target=np.array([1.0, -0.2, 1.0]),
                         normal=np.array([-1.0, 0.0, 0.0]), com=com, q=q, quat=quat, grip=False, rot=None,
                         rung=False),
                    dict(kind="load", support=feet + [hand], load=["right_hand"], com=com, q=q, quat=quat),
                    dict(kind="hold", support=feet + [hand], com=com, q=q, quat=quat)]
    agent.k, agent.t_phase, agent.grip, agent.events = 0, 0.0, {h: False for h in hum.HANDS}, []
    agent.replans = 0
    kinds = set()
    for _ in range(600):
        obs, _, term, _, info = env.step(agent.act(obs, info))
        kinds.add(agent.phases[agent.k]["kind"])
        assert not term
    assert [e for _, e in agent.events] == ["swing timed out", "swing timed out", "swing aborted"]
    assert "load" not in kinds and agent.phases[agent.k]["support"] == feet
    assert info["contacts"]["left_foot"] and info["contacts"]["right_foot"] and not info["fell"]
    agent.model.close()
    env.close()


def test_a_contact_that_cannot_unload_is_not_released(monkeypatch):
    """A shift onto the left sole alone with the CoM left between both soles: the right sole
    keeps carrying half the weight, so it is not released (released, the robot falls); the shift
    fails and the robot keeps standing on both soles."""
    import taigym.agents.stance as sa

    monkeypatch.setattr(sa, "MAX_REPLANS", 0)
    env, obs, info, agent = _standing_on_a_step_task()
    com = agent.model.robot.com_and_jacobian()[0]
    feet = sorted(st.Contact(f, "floor", 0.0) for f in hum.FEET)
    left = [c for c in feet if c.limb == "left_foot"]
    q, quat = obs[:21].astype(float), obs[45:49].astype(float)
    agent.phases = [dict(kind="shift", support=feet, com=com, q=q, quat=quat, unload=["right_foot"], next=left,
                         sinks={}, forces={}),
                    dict(kind="release", support=left, limbs=["right_foot"], com=com, q=q, quat=quat),
                    dict(kind="hold", support=left, com=com, q=q, quat=quat)]
    agent.k, agent.t_phase, agent.grip, agent.events, agent.replans = 0, 0.0, {h: False for h in hum.HANDS}, [], 0
    kinds = set()
    for _ in range(240):
        obs, _, term, _, info = env.step(agent.act(obs, info))
        kinds.add(agent.phases[agent.k]["kind"])
        assert not term
    assert [e for _, e in agent.events] == ["unload failed"] and "release" not in kinds
    assert agent.phases[agent.k]["support"] == feet
    assert info["contacts"]["left_foot"] and info["contacts"]["right_foot"] and not info["fell"]
    agent.model.close()
    env.close()


def test_a_failed_qp_step_repeats_the_last_torques(monkeypatch):
    """In torque control a step whose QP finds no solution (OSQP's iteration limit, seen on eval
    slopes) sends the last solved torques: the robot keeps standing where it was. (Sending the
    posture target's normalised joint positions as torques put 3.9 kN on a stance sole.)"""
    env, obs, info, agent = _standing_on_a_step_task()
    com0 = agent.model.robot.com_and_jacobian()[0]
    feet = sorted(st.Contact(f, "floor", 0.0) for f in hum.FEET)
    agent.phases = [dict(kind="hold", support=feet, com=com0, q=obs[:21].astype(float),
                         quat=obs[45:49].astype(float))]
    agent.k, agent.t_phase, agent.grip = 0, 0.0, {h: False for h in hum.HANDS}
    solve, calls = agent._qp, [0]

    def every_other_fails(*args):
        calls[0] += 1
        return solve(*args) if calls[0] % 2 or calls[0] < 10 else None

    monkeypatch.setattr(agent, "_qp", every_other_fails)
    for _ in range(120):
        action = agent.act(obs, info)
        assert np.allclose(action[:21], np.clip(agent._tau / hum.TORQUE_LIMITS, -1, 1))
        obs, _, term, _, info = env.step(action)
        assert not term
    agent.model.robot.set_state(obs[42:45], obs[45:49], obs[:21])
    assert np.linalg.norm(agent.model.robot.com_and_jacobian()[0][:2] - com0[:2]) < 0.02
    assert info["contacts"]["left_foot"] and info["contacts"]["right_foot"] and not info["fell"]
    agent.model.close()
    env.close()


def test_a_foot_under_a_rung_draws_back_before_it_rises():
    """A foot whose swing starts under the lowest rung first draws back level until its toe
    clears the rung (rising from there pushed it into the rung); a foot on a rung does not."""
    task = MultiContactTask(family="ladder", start=0.43, size=1.24, spacing=0.29)
    env = gym.make("taigym/MultiContact-v1")
    agent = StanceAgent(env)
    agent._bars = task.scene()[1]
    centre, _, _, radius, _ = min(agent._bars, key=lambda b: b[0][2])
    under = np.array([centre[0] + 0.02, -0.1, centre[2] - 0.08])
    out = agent._out_from_under_rung(under)
    assert out is not None and out[0] + hum.SOLE_HALF[0] < centre[0] - radius
    assert np.allclose(out[1:], under[1:])
    assert agent._out_from_under_rung(np.array([centre[0], -0.1, centre[2] + radius + 0.03])) is None
    env.close()


def test_without_a_plan_the_expert_stands():
    """A search that ends without a plan (here: no time budget) leaves the robot standing in
    torque control, held by the QP on both soles."""
    env = gym.make("taigym/MultiContact-v1")
    task = MultiContactTask(family="slope", size=0.6)
    obs, info = env.reset(seed=0, options={"task": task})
    agent = taigym.agents.make("stance", env, time_limit=0.0)
    agent.reset(seed=0)
    assert not agent.plan.solved
    for _ in range(120):
        obs, _, term, _, info = env.step(agent.act(obs, info))
        assert not term
    assert info["contacts"]["left_foot"] and info["contacts"]["right_foot"] and not info["fell"]
    agent.model.close()
    env.close()


def _clearance_holds(monkeypatch, task, links, pose, lo, hi, gap=0.005):
    """Pose the robot (``pose(rob, x)``) at the x in [lo, hi] that puts the nearest of ``links``
    ``gap`` (m) from the scene, ask the QP for the CoM 5 cm ahead (+x): that link must accelerate
    away from the scene (n^T J qdd >= KP (d_min - d), d_min 1 cm, or TRUNK_CLEARANCE for a trunk
    link), and towards it without the clearance rows. Returns the closest point (pybullet's
    tuple) and the scene's body ids."""
    import pybullet as p
    from taigym.agents import stance as sa
    env = gym.make("taigym/MultiContact-v1")
    env.reset(seed=0, options={"task": task})
    agent = StanceAgent(env)
    agent.model, agent._task = st.StanceModel(task), task
    rob, model = agent.model.robot, agent.model
    ids = {rob.link_index[n] for n in links}

    def nearest(x):        # the links' closest point to the scene, posed at x
        pose(rob, x)
        return min((cp for b in model.scene_ids for cp in p.getClosestPoints(rob.body, b, 1.0, physicsClientId=model.client)
                    if cp[3] in ids), key=lambda cp: cp[8])
    for _ in range(40):            # bisect x until a link is ``gap`` from the scene
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if nearest(mid)[8] > gap else (lo, mid)
    cp = nearest(lo)
    assert abs(cp[8] - gap) < 0.001
    base, quat, q = rob.get_state()[:3]
    com, Jc = rob.com_and_jacobian()
    feet = sorted(st.Contact(f, "floor", float(model.limb_ref(f)[0])) for f in hum.FEET)
    ref = dict(com=com + np.array([0.05, 0.0, 0.0]), q=q, quat=quat, support=feet, soft={})
    Jn = np.asarray(cp[7]) @ rob.jacobians(cp[3], np.asarray(cp[5])[None])[0][0]
    qdd = agent._qp(ref, com, Jc, np.zeros(27), None, quat)
    trunk = {rob.link_index[n] for n in hum.TRUNK_LINKS}
    assert Jn @ qdd > 0.9 * sa.KP_CLEAR * ((st.TRUNK_CLEARANCE if cp[3] in trunk else sa.CLEAR_MIN) - cp[8]) > 0.0
    monkeypatch.setattr(sa, "CLEAR_NEAR", 0.0)      # no clearance rows: the link goes towards the scene
    qdd = agent._qp(ref, com, Jc, np.zeros(27), None, quat)
    assert Jn @ qdd < 0.0
    agent.model.close()
    env.close()
    return cp, model.scene_ids


def test_a_shin_near_a_rung_is_not_driven_into_it(monkeypatch):
    """The QP has no contact force on a shin: a shin 5 mm from the lowest rung, the CoM asked
    to move towards the ladder, accelerates away from the rung (n^T J qdd >= KP (1 cm - d)) instead
    of into it (as it does with the clearance rows left out)."""
    task = MultiContactTask(family="ladder", start=0.45, size=1.2)
    cp, scene = _clearance_holds(monkeypatch, task, ("right_shin", "left_shin"),
                                 lambda rob, x: hum.place_standing(rob, x=x), 0.0, 1.0)
    assert cp[2] != scene[0]        # a rung, not the floor (cp[1] is the robot: pybullet body A)


@pytest.mark.parametrize("gap", [0.005, 0.015])
def test_the_torso_near_a_wall_is_not_driven_into_it(monkeypatch, gap):
    """The torso is pybullet's base (link -1), which the clearance rows once skipped: on eval
    slope 14 the body stood up under the rail and touched it with the torso (a fall). The robot
    leant 0.5 rad towards the gap's wall, its torso 5 mm or 1.5 cm from it, the CoM asked to move
    towards the wall: the torso accelerates away from it, back to TRUNK_CLEARANCE (2 cm). The env
    counts the torso as touching (a fall) from 9.5 mm, where pybullet reports a contact point: held
    to the 1 cm of the other links, the torso at 1.5 cm was let come to where its touch counts."""
    from scipy.spatial.transform import Rotation
    lean = Rotation.from_euler("y", 0.5)

    def leaning(rob, x):       # standing with the soles' midpoint at x, leant about it
        hum.place_standing(rob, x=x)
        base, quat, q = rob.get_state()[:3]
        pivot = np.array([x, 0.0, 0.0])
        rob.set_state(pivot + lean.apply(np.asarray(base) - pivot), (lean * Rotation.from_quat(quat)).as_quat(), q)
    cp, _ = _clearance_holds(monkeypatch, MultiContactTask(family="gap", start=0.45, size=0.4), ("torso",), leaning,
                             0.5, 0.6, gap=gap)
    assert cp[3] == -1


def test_before_the_trailing_foot_rises_onto_the_pad_the_com_goes_over_the_pad_sole():
    """Soft eval tasks 2, 7 and 25 fell in the last swing (the trailing foot from the floor onto the
    pad, on the pad sole and the rail hand): planned about 10 cm behind that sole, the CoM went back
    as the leg rose. That swing is first preceded by a centring of the CoM (the limb held) on the
    swing's own CoM target, which the sole and hand balance; on a rigid step (the same stance) the
    hand's grasp leaves the swing uncentred, as before."""
    soft = taigym.envs.tasks("multicontact_soft", "eval")[2]
    for task, centred in ((soft, True), (MultiContactTask(family="step", start=soft.start, size=soft.size), False)):
        env = gym.make("taigym/MultiContact-v1")
        env.reset(seed=0, options={"task": task})
        agent = StanceAgent(env)
        agent.model, agent._task = st.StanceModel(task), task
        support = sorted([st.Contact("left_hand", "rail", 0.65), st.Contact("right_foot", "step", 0.90)])
        ph = dict(kind="swing", support=support, limb="left_foot", com=np.array([0.912, -0.021, 1.14]))
        com = np.array([0.817, -0.105, 0.79])        # m, where soft task 2's CoM was as that swing began
        c = agent._centre(ph, com)
        if centred:
            assert c is not None and np.linalg.norm(c[:2] - ph["com"][:2]) < 0.05
            assert agent._balanced(support, c)
        else:
            assert c is None
        agent.model.close()
        env.close()
