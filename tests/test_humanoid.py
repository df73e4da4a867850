"""taigym.sim.humanoid: Jacobians against finite differences, mass matrix against the simulation."""

import numpy as np
import pybullet as p
import pytest
from scipy.spatial.transform import Rotation

from taigym.sim import humanoid as hum


@pytest.fixture(scope="module")
def robot():
    c = p.connect(p.DIRECT)
    yield hum.Robot.load(c)
    p.disconnect(c)


def test_jacobians_match_finite_differences(robot):
    rng = np.random.default_rng(1)
    q = rng.uniform(robot.lower, robot.upper)
    quat = Rotation.from_euler("xyz", [0.3, -0.2, 0.5]).as_quat()
    base = np.array([0.1, 0.2, 1.0])

    def put(dz):
        robot.set_state(base + dz[:3], (Rotation.from_rotvec(dz[3:6]) * Rotation.from_quat(quat)).as_quat(),
                        q + dz[6:])

    h = 1e-4
    for limb in hum.LIMBS:
        put(np.zeros(27))
        x0 = robot.limb_points(limb)
        J, _ = robot.jacobians(robot.link_index[hum.LIMB_LINK[limb]], x0)
        fd = np.zeros_like(J)
        for k in range(27):
            dz = np.zeros(27)
            dz[k] = h
            put(dz)
            fd[:, :, k] = (robot.limb_points(limb) - x0) / h
        assert np.abs(fd - J).max() < 2e-3, limb
    put(np.zeros(27))
    c0, Jc = robot.com_and_jacobian()
    for k in (0, 4, 10, 20):
        dz = np.zeros(27)
        dz[k] = h
        put(dz)
        assert np.allclose((robot.com_and_jacobian()[0] - c0) / h, Jc[:, k], atol=1e-3)


def _plain_jacobians(robot, link, points):
    """Reference: the chain's link states asked of pybullet, their axes rotated together."""
    chain = [int(k) for k in robot.chain(link)]
    base = np.asarray(p.getBasePositionAndOrientation(robot.body, physicsClientId=robot.client)[0])
    Jl, Ja = np.zeros((len(points), 3, 27)), np.zeros((3, 27))
    Jl[:, :, :3], Jl[:, :, 3:6], Ja[:, 3:6] = np.eye(3), -hum._skew(points - base), np.eye(3)
    if chain:
        sts = p.getLinkStates(robot.body, [int(robot.joints[k]) for k in chain], computeForwardKinematics=True,
                              physicsClientId=robot.client)
        axes = Rotation.from_quat([s[5] for s in sts]).apply(np.asarray(robot._axes)[chain])
        cols = hum._cross(axes[None], points[:, None] - np.array([s[4] for s in sts])[None])
        Jl[:, :, 6 + np.array(chain)], Ja[:, 6 + np.array(chain)] = cols.transpose(0, 2, 1), axes.T
    return Jl, Ja


def test_kinematics_read_once_equal_the_plain_computation_bit_for_bit(robot):
    """Kinematics (every link read from pybullet once, all joint axes rotated as one stack) gives
    exactly the numbers of asking pybullet per link, signs of zeros included, and set_state's
    one call for all joints the state of one call per joint: the stance search's outcomes hinge
    on the last bit of the IK's results."""
    rng = np.random.default_rng(0)
    for _ in range(20):
        quat = rng.normal(size=4)
        x = (rng.normal(size=3), quat / np.linalg.norm(quat), rng.uniform(robot.lower, robot.upper))
        qd = rng.normal(size=hum.N_JOINTS)
        for j, a, v in zip(robot.joints, x[2], qd):
            p.resetJointState(robot.body, int(j), float(a), float(v), physicsClientId=robot.client)
        p.resetBasePositionAndOrientation(robot.body, list(x[0]), list(x[1]), physicsClientId=robot.client)
        before = robot._links(), robot.get_state()
        robot.set_state(*x, qd=qd)
        after = robot._links(), robot.get_state()
        assert before[0] == after[0] and all(np.array_equal(a, b) for a, b in zip(before[1], after[1]))
        kin = robot.kinematics()
        for limb in hum.LIMBS:
            assert all(np.array_equal(a, b) for a, b in zip(kin.limb_frame(limb), robot.limb_frame(limb)))
        for link in range(-1, len(robot.parent)):
            pts = rng.normal(size=(2, 3))
            for a, b in zip(kin.jacobians(link, pts), _plain_jacobians(robot, link, pts)):
                assert np.array_equal(a, b) and np.array_equal(np.signbit(a), np.signbit(b)), link


def test_mass_matrix_predicts_the_simulated_acceleration(robot):
    """A torque on the (2, 1, 1)-axis shoulder accelerates it as M^-1 tau (normalised axes)."""
    c = robot.client
    p.setGravity(0, 0, 0, physicsClientId=c)
    p.setTimeStep(1 / 240, physicsClientId=c)
    q = hum.stand_posture()
    robot.set_state((0, 0, 2), (0, 0, 0, 1), q)
    k = hum.JOINTS.index("left_shoulder1")
    M = robot.mass_matrix(q)
    tau = np.zeros(27)
    tau[6 + k] = 2.0
    pred = np.linalg.solve(M, tau)[6 + k]
    joints = [int(j) for j in robot.joints]
    for _ in range(3):
        p.setJointMotorControlArray(robot.body, joints, p.TORQUE_CONTROL, forces=list(tau[6:]), physicsClientId=c)
        p.stepSimulation(physicsClientId=c)
    actual = p.getJointState(robot.body, joints[k], physicsClientId=c)[1] / (3 / 240)
    assert actual == pytest.approx(pred, rel=0.02)
