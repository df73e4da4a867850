"""Deformable supports (Bouyarmane 2011, "Multi-Contact Planning", part 5): the pad simulated in
pybullet (taigym.sim.soft_support), the planner's reaction forces f_e(q) and their gradient
(taigym.planners.stance_soft), the soft task family."""

import gymnasium as gym
import numpy as np
import pybullet as p
import pytest
from scipy.spatial.transform import Rotation

import taigym
from taigym.envs.multicontact_tasks import MultiContactTask, soft_tasks
from taigym.planners import stance as st
from taigym.planners import stance_soft
from taigym.sim import humanoid as hum
from taigym.sim.soft_support import Punches, SoftBlock, SoftSupport, top_nodes_under

SOLE = (0.11, 0.045, 0.025)     # m, half extents of a box like a sole


@pytest.mark.parametrize("E", [2.5e5, 1e6])
def test_a_box_resting_on_the_pad_sinks_as_the_fem_rigid_punch(E):
    """A 40 kg box with a sole's footprint settles on the pad, pybullet's contacts moving its top
    face: the pad's dent under it is the sink of its finite-element model under a rigid punch
    carrying the box's weight (within 5 %; 2.8 and 0.7 mm), and the box rests in the dent."""
    c = p.connect(p.DIRECT)
    try:
        p.setGravity(0, 0, -9.81, physicsClientId=c)
        p.setPhysicsEngineParameter(fixedTimeStep=1 / 240, numSolverIterations=50, physicsClientId=c)
        pad = SoftSupport(c, SoftBlock(x0=0.0, top=0.3, E=E), friction=0.9)
        col = p.createCollisionShape(p.GEOM_BOX, halfExtents=list(SOLE), physicsClientId=c)
        box = p.createMultiBody(40.0, col, -1, [0.35, 0.1, 0.3 + SOLE[2] + 1e-3], physicsClientId=c)
        corners = np.array([[sx * SOLE[0], sy * SOLE[1], -SOLE[2]] for sx in (-1, 1) for sy in (-1, 1)])
        heights, dents = [], []
        for _ in range(720):
            p.stepSimulation(physicsClientId=c)
            pos, orn = p.getBasePositionAndOrientation(box, physicsClientId=c)
            pts = np.asarray(pos) + corners @ np.array(p.getMatrixFromQuaternion(orn)).reshape(3, 3).T
            pad.update(box, 1 / 240, {-1: pts})
            heights.append(pts[:, 2].mean())
            dents.append(pad.dent(0.35, 0.1))
        sink = 0.3 - np.mean(heights[-240:])
        nodes = top_nodes_under(pad.solid, pts)
        _, motion = Punches(pad.solid, [nodes]).solve([np.r_[0.0, 0.0, -40.0 * 9.81, 0.0, 0.0, 0.0]])
        assert np.mean(dents[-240:]) == pytest.approx(-motion[0][2], rel=0.05)
        # the box rests in the dent, to pybullet's contact resolution
        assert abs(sink - np.mean(dents[-240:])) < 5e-4
    finally:
        p.disconnect(c)


@pytest.fixture(scope="module")
def soft_model():
    task = MultiContactTask(family="soft", start=0.45, size=0.3, stiffness=1e6)
    model = st.StanceModel(task)
    yield model
    model.close()


def _configuration(model, contacts, x):
    """The robot standing with its soles on ``contacts`` (the IK from standing at x on the pad)."""
    hum.place_standing(model.robot, x=x, ground=model.task.size)
    res = st.solve_ik(model, model.robot.get_state()[:3], contacts, contacts)
    assert res is not None
    return res[0]


def test_reaction_forces_gradient_in_q_matches_finite_differences(soft_model):
    """f_e(q) = -(alpha_e/3)(n_e(q)^T (x) I) D A B_e KK_e U^D(q), summed per node, and its
    analytic gradient over the configuration's velocities (base translation, base rotation in
    the world frame, joints) against central differences of the configuration."""
    model = soft_model
    c = st.Contact("right_foot", "step", 0.7)
    group = stance_soft.SoftContacts(model, [c])
    base, quat, q = np.array([0.75, -0.02, 1.55]), Rotation.from_rotvec([0.01, -0.02, 0.03]).as_quat(), hum.stand_posture()
    # put the right sole 2 mm into the pad at its target: move the base by the sole's offset
    model.set((base, quat, q))
    o, _ = model.target(c)
    base = base + (o - np.array([0.0, 0.0, 0.002])) - model.limb_ref(c.limb)
    model.set((base, quat, q))
    _, F, dF, _ = group.forces(model.robot.kinematics(), jacobian=True)
    assert -F[:, 2].sum() < -100.0          # pressed in: the pad pushes the sole up (F is on the robot)
    h = 1e-3          # pybullet's link positions carry ~1e-8 m of round-off: smaller steps measure it
    rng = np.random.default_rng(0)
    for k in list(range(6)) + list(6 + rng.choice(21, 6, replace=False)):
        Fs = []
        for sgn in (1.0, -1.0):
            dx = np.zeros(27)
            dx[k] = sgn * h
            model.set((base + dx[:3], (Rotation.from_rotvec(dx[3:6]) * Rotation.from_quat(quat)).as_quat(), q + dx[6:]))
            Fs.append(group.forces(model.robot.kinematics())[1].ravel())
        fd = (Fs[0] - Fs[1]) / (2 * h)
        np.testing.assert_allclose(dF[:, k], fd, rtol=0, atol=1e-3 * np.abs(dF[:, k]).max())


def test_standing_on_the_pad_the_ik_sinks_into_it_and_checks(soft_model):
    """Both soles on the pad: the IK's equilibrium with the pad's reaction forces sinks them
    (about the FEM's punch sink under half the weight each), and the independent checker
    accepts the step (the soft forces equal the pad's consistent reactions)."""
    model = soft_model
    feet = tuple(sorted(st.Contact(f, "step", 0.8) for f in hum.FEET))
    step = _configuration(model, feet, 0.8)
    assert set(step.sinks) == set(hum.FEET)
    assert all(2e-4 < s < 2e-3 for s in step.sinks.values())
    assert st.check_step(model.task, step) == []
    soft = [pt for pt in step.points if pt[3] == "soft"]
    total = sum(f for _, _, f, *_ in soft)
    assert total[2] == pytest.approx(model.robot.total_mass * 9.81, rel=1e-2)


def test_soft_split_fixed_and_stiffness_around_the_papers():
    tr, ev = soft_tasks("train"), soft_tasks("eval")
    assert len(tr) == 400 and len(ev) == 40 and not set(tr) & set(ev)
    assert taigym.envs.tasks("multicontact_soft", "eval") == ev
    E = np.array([t.stiffness for t in ev])
    assert E.min() >= 2.5e5 and E.max() <= 4e6 and 5e5 < np.median(E) < 2e6
    assert all(t.family == "soft" and MultiContactTask.from_dict(t.to_dict()) == t for t in ev)


def test_the_env_reports_the_sink_of_soles_on_the_pad():
    """Standing on the pad (PD posture hold), each sole's sink is in info, positive, and a
    millimetre or less at 0.8 MPa; on rigid families info["sink"] is empty."""
    task = soft_tasks("eval")[1]
    env = gym.make("taigym/MultiContact-v1", control="pd", control_dt=0.05)
    try:
        _, info = env.reset(seed=0, options={"task": task})
        assert info["sink"] == {}
        u = env.unwrapped
        hum.place_standing(u.robot, x=float(task.goal()[0]), ground=task.size)
        rob = u.robot
        a = np.zeros(23, dtype=np.float32)
        a[:21] = 2 * (hum.stand_posture() - rob.lower) / (rob.upper - rob.lower) - 1
        for _ in range(40):
            _, _, term, _, info = env.step(a)
        assert info["success"] and set(info["sink"]) == set(hum.FEET)
        assert all(5e-5 < s < 2e-3 for s in info["sink"].values())
    finally:
        env.close()


@pytest.mark.slow
def test_the_expert_climbs_onto_the_pad_and_predicts_its_sink():
    """Eval soft task 1 (a 0.34 m step, E = 0.82 MPa) with the env's defaults: the expert reaches
    the goal without a fall, and the sink its plan predicts under the sole that stands alone on the
    pad is the simulated one within 20 %. The trailing shin rests millimetres from the pad's edge
    as its foot leaves the floor: held off the edge by the QP's clearance rows (at a cost above
    the CoM task's), the body sank and the robot fell at 22.9 s."""
    env = gym.make("taigym/MultiContact-v1")
    try:
        agent = taigym.agents.make("stance", env)
        out = taigym.agents.run_episode(env, agent, seed=1, task=soft_tasks("eval")[1])
        assert out["success"] and not out["fell"]
        assert agent.sink_log and all(abs(sim / plan - 1) <= 0.2 for _, plan, sim, *_ in agent.sink_log)
    finally:
        env.close()
