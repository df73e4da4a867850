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


def test_mass_matrix_predicts_the_simulated_acceleration(robot):
    """A torque on the (2, 1, 1)-axis shoulder accelerates it as M^-1 tau (normalised axes)."""
    c = robot.client
    p.setGravity(0, 0, 0, physicsClientId=c)
    p.setTimeStep(1 / 240, physicsClientId=c)
    q = hum.stand_posture()
    robot.set_state((0, 0, 2), (0, 0, 0, 1), q)
    k = hum.JOINTS.index("left_shoulder1")
    M = np.array(p.calculateMassMatrix(robot.body, list(q), physicsClientId=c))
    tau = np.zeros(27)
    tau[6 + k] = 2.0
    pred = np.linalg.solve(M, tau)[6 + k]
    joints = [int(j) for j in robot.joints]
    for _ in range(3):
        p.setJointMotorControlArray(robot.body, joints, p.TORQUE_CONTROL, forces=list(tau[6:]), physicsClientId=c)
        p.stepSimulation(physicsClientId=c)
    actual = p.getJointState(robot.body, joints[k], physicsClientId=c)[1] / (3 / 240)
    assert actual == pytest.approx(pred, rel=0.02)
