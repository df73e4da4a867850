"""The Franka Panda holding a container: kinematics and collisions in a private pybullet client.

Shared by ``taigym/Transport3D-v0`` and ``taigym/Pour3D-v0`` and by their experts (each builds
its own :class:`PandaArm` as its model of the robot). Coordinates are the robot's (pybullet's):
z up, the arm's base at the origin on a table top at z = 0. The held container's frame has its
origin at the centre of its inner bottom and its y axis along its axis (DESIGN.md §2); it is
fixed in the hand (:data:`GRASP_OFFSET`), upright at the reference configuration given to the
constructor.
"""

from __future__ import annotations

import numpy as np
from scipy.spatial.transform import Rotation

JOINT_LOW = np.array([-2.9671, -1.8326, -2.9671, -3.0718, -2.9671, -0.0175, -2.9671])
JOINT_HIGH = np.array([2.9671, 1.8326, 2.9671, -0.0698, 2.9671, 3.7525, 2.9671])
HAND_LINK = 11                                    # panda_grasptarget
# the container's origin in the hand (grasp-target) frame, whose x axis is up and z axis (the
# approach) horizontal at the upright reference: 3 cm ahead of the fingers' centre along the
# approach and 4 cm below it, so the fingers hold the container's wall near mid-height
GRASP_OFFSET = np.array([-0.04, 0.0, 0.03])
CONTAINER_WALL = 0.02                             # m, the held container's collision wall
# robot axes (z up) -> simulator axes (y up): (x, y, z) -> (x, z, -y), a proper rotation
TO_SIM = np.array([[1.0, 0.0, 0.0], [0.0, 0.0, 1.0], [0.0, -1.0, 0.0]])


class PandaArm:
    """The Panda with a container in its hand (private pybullet DIRECT client): the container's
    pose and Jacobian at joint angles q, and collisions of the arm and the container with the
    scene's boxes and cylinders and the table. ``reference``: 7 joint angles at which the
    container is upright in the hand."""

    def __init__(self, reference):
        import pybullet as pb
        import pybullet_data

        self.pb = pb
        self.client = pb.connect(pb.DIRECT)
        pb.setAdditionalSearchPath(pybullet_data.getDataPath(), physicsClientId=self.client)
        self.robot = pb.loadURDF("franka_panda/panda.urdf", useFixedBase=True,
                                 physicsClientId=self.client)
        table = pb.createCollisionShape(pb.GEOM_BOX, halfExtents=[2.0, 2.0, 0.05],
                                        physicsClientId=self.client)
        self.table = pb.createMultiBody(0, table, basePosition=[0, 0, -0.05], physicsClientId=self.client)
        self._set_values = None
        # the container's orientation in the hand: upright (its y axis along z) at the reference
        self.R_hand_container = np.eye(3)
        _, R_hand, _ = self._kinematics(reference)
        self.R_hand_container = R_hand.T @ TO_SIM.T
        # the collision cylinder's axis is its local z: turned onto the container's axis (its y)
        self._hand_cylinder = Rotation.from_matrix(
            self.R_hand_container @ Rotation.from_euler("x", -90, degrees=True).as_matrix()).as_quat().tolist()
        self.boxes: list[int] = []
        self.cup = None
        self._cup_size = None

    def _set(self, q) -> None:
        values = [[float(v)] for v in q[:7]]
        if values != self._set_values:          # a pose, then its Jacobian: one reset
            self.pb.resetJointStatesMultiDof(self.robot, range(7), values, physicsClientId=self.client)
            self._set_values = values

    def _kinematics(self, q, jacobian: bool = False):
        """The container's origin, rotation matrix (container axes -> robot axes) and, if asked,
        the (6, 7) Jacobian of the origin's velocity and the angular velocity, at joints q."""
        self._set(q)
        pb, c = self.pb, self.client
        s = pb.getLinkState(self.robot, HAND_LINK, computeForwardKinematics=True, physicsClientId=c)
        R_hand = np.array(pb.getMatrixFromQuaternion(s[5])).reshape(3, 3)
        origin = np.array(s[4]) + R_hand @ GRASP_OFFSET
        if not jacobian:
            return origin, R_hand @ self.R_hand_container, None
        # pybullet takes the point in the link's centre-of-mass frame, not its URDF frame
        R_com = np.array(pb.getMatrixFromQuaternion(s[1])).reshape(3, 3)
        local = R_com.T @ (origin - np.array(s[0]))
        zeros = [0.0] * 9
        lin, ang = pb.calculateJacobian(self.robot, HAND_LINK, local.tolist(), [*map(float, q[:7]), 0.04, 0.04],
                                        zeros, zeros, physicsClientId=c)
        J = np.vstack([np.array(lin)[:, :7], np.array(ang)[:, :7]])
        return origin, R_hand @ self.R_hand_container, J

    def container_pose(self, q) -> tuple[np.ndarray, np.ndarray]:
        """(origin (3,), rotation matrix (3, 3): container axes -> robot axes) at joints q."""
        return self._kinematics(q)[:2]

    def container_velocity(self, q, qd) -> np.ndarray:
        """(6,) linear velocity of the container's origin and angular velocity (robot axes)."""
        return self.jacobian(q) @ np.asarray(qd, dtype=np.float64)

    def jacobian(self, q) -> np.ndarray:
        """(6, 7) Jacobian of the container origin's velocity and the angular velocity."""
        return self._kinematics(q, jacobian=True)[2]

    def link_positions(self, q, links=range(HAND_LINK + 1)) -> np.ndarray:
        """(len(links), 3) world positions (m) of the links' frames at joints q."""
        self._set(q)
        states = self.pb.getLinkStates(self.robot, list(links), computeForwardKinematics=True,
                                       physicsClientId=self.client)
        return np.array([s[4] for s in states])

    def link_boxes(self, q, links) -> np.ndarray:
        """(len(links), 2, 3) axis-aligned bounding boxes (lower, upper corner; m) of the links'
        collision shapes at joints q."""
        self._set(q)
        return np.array([self.pb.getAABB(self.robot, k, physicsClientId=self.client) for k in links])

    def set_obstacles(self, boxes=(), cylinders=()) -> None:
        """The scene's solids: boxes (cx, cy, cz, hx, hy, hz) and upright cylinders (cx, cy, cz,
        radius, height; centre, m)."""
        pb, c = self.pb, self.client
        for body in self.boxes:
            pb.removeBody(body, physicsClientId=c)
        self.boxes = []
        for cx, cy, cz, hx, hy, hz in boxes:
            shape = pb.createCollisionShape(pb.GEOM_BOX, halfExtents=[hx, hy, hz], physicsClientId=c)
            self.boxes.append(pb.createMultiBody(0, shape, basePosition=[cx, cy, cz], physicsClientId=c))
        for cx, cy, cz, r, h in cylinders:
            shape = pb.createCollisionShape(pb.GEOM_CYLINDER, radius=r, height=h, physicsClientId=c)
            self.boxes.append(pb.createMultiBody(0, shape, basePosition=[cx, cy, cz], physicsClientId=c))

    def set_held(self, radius: float, height: float, wall: float = CONTAINER_WALL) -> None:
        """The held container's collision cylinder: outer radius and height (m) from the bottom
        of its wall, which is ``wall`` (m) below its origin."""
        self._wall = float(wall)
        size = (float(radius), float(height))
        if size != self._cup_size:
            pb, c = self.pb, self.client
            if self.cup is not None:
                pb.removeBody(self.cup, physicsClientId=c)
            shape = pb.createCollisionShape(pb.GEOM_CYLINDER, radius=size[0], height=size[1],
                                            physicsClientId=c)
            self.cup, self._cup_size = pb.createMultiBody(0, shape, physicsClientId=c), size

    def collides(self, q, margin: float = 0.0) -> bool:
        """The arm (but its base, on the table) or the container (its cylinder, if
        :meth:`set_held` gave one) comes within ``margin`` (m) of an obstacle or the table."""
        pb, c = self.pb, self.client
        if self.cup is None:          # no held container's cylinder: the arm only
            self._set(q)
            return self._arm_collides(margin)
        origin, R = self.container_pose(q)
        centre = origin + R[:, 1] * (0.5 * self._cup_size[1] - self._wall)
        hand = pb.getLinkState(self.robot, HAND_LINK, physicsClientId=c)[5]
        _, orientation = pb.multiplyTransforms([0, 0, 0], hand, [0, 0, 0], self._hand_cylinder)
        pb.resetBasePositionAndOrientation(self.cup, centre.tolist(), orientation, physicsClientId=c)
        for body in [*self.boxes, self.table]:
            if pb.getClosestPoints(self.cup, body, margin, physicsClientId=c):
                return True
        return self._arm_collides(margin)

    def _arm_collides(self, margin: float) -> bool:
        pb, c = self.pb, self.client
        for body in self.boxes:
            if pb.getClosestPoints(self.robot, body, margin, physicsClientId=c):
                return True
        # the base and the first link stand on the table (field 3 of a contact: the robot's link)
        return any(contact[3] >= 2 for contact in
                   pb.getClosestPoints(self.robot, self.table, margin, physicsClientId=c))

    def close(self) -> None:
        if self.client is not None:
            self.pb.disconnect(self.client)
            self.client = None


def joint_step(q: np.ndarray, qd: np.ndarray, action, max_speed, dt: float):
    """One control step of joint velocity actions (Pour3D-v0 and Transport3D-v0): ``action``
    (7 numbers, clipped to [-1, 1]) sets the joint velocities at the step's end as fractions of
    ``max_speed`` (rad/s); they change linearly over the step, so the angles move by the
    trapezoid rule. A joint that would leave its limits stops at it. ``action`` is checked
    by the env (``checks.check_action``). Returns (the clipped action, q1, qd1, whether a
    limit stopped a joint)."""
    a = np.clip(np.asarray(action, dtype=np.float64), -1.0, 1.0)
    qd1 = a * max_speed
    q1 = q + 0.5 * (qd + qd1) * dt
    clipped = bool(np.any(q1 < JOINT_LOW) or np.any(q1 > JOINT_HIGH))
    if clipped:
        q1 = np.clip(q1, JOINT_LOW, JOINT_HIGH)
        qd1 = np.where((q1 == JOINT_LOW) | (q1 == JOINT_HIGH), 0.0, qd1)
    return a, q1, qd1, clipped


def container_ik(arm: PandaArm, position, axis, q_seed, *, approach=None, posture=None,
                 posture_gain: float = 0.1, iterations: int = 100, tolerance: float = 2e-4,
                 damping: float = 0.01) -> tuple[np.ndarray, float]:
    """Joint angles that hold the container's origin at ``position`` (m) with its axis along
    ``axis`` (a unit vector), from ``q_seed``: damped least squares within the joint limits.
    Without ``approach`` the turn about the axis is free (the containers are axisymmetric: 5
    constraints); with it, the container's x axis (the hand's approach) is turned onto
    ``approach`` too (6). The redundancy is pulled towards ``posture`` (default ``q_seed``).
    Returns (q, error): error = position error (m) + axis error (rad) (+ approach error)."""
    target = np.asarray(position, np.float64)
    a_goal = np.asarray(axis, np.float64) / np.linalg.norm(axis)
    R_goal = None
    if approach is not None:
        x = np.asarray(approach, np.float64)
        x = x - (x @ a_goal) * a_goal
        x /= np.linalg.norm(x)
        R_goal = np.column_stack([x, a_goal, np.cross(x, a_goal)])
    q = np.clip(np.asarray(q_seed, np.float64), JOINT_LOW, JOINT_HIGH)
    rest = q.copy() if posture is None else np.asarray(posture, np.float64)
    err = np.inf
    for _ in range(iterations):
        origin, R, J = arm._kinematics(q, jacobian=True)
        e_pos = target - origin
        if R_goal is None:
            # the rotation turning the axis onto a_goal, and the Jacobian, without their
            # component about the axis (free)
            a = R[:, 1]
            P = np.eye(3) - np.outer(a, a)
            e_rot, J_rot = P @ np.cross(a, a_goal), P @ J[3:]
        else:
            e_rot, J_rot = Rotation.from_matrix(R_goal @ R.T).as_rotvec(), J[3:]
        err = float(np.linalg.norm(e_pos) + np.linalg.norm(e_rot))
        if err < tolerance:
            break
        Jt = np.vstack([J[:3], J_rot])
        JJ = Jt @ Jt.T + damping ** 2 * np.eye(6)
        step = Jt.T @ np.linalg.solve(JJ, np.concatenate([e_pos, e_rot]))
        step += (np.eye(7) - Jt.T @ np.linalg.solve(JJ, Jt)) @ (posture_gain * (rest - q))
        step /= max(1.0, np.abs(step).max() / 0.3)
        q = np.clip(q + step, JOINT_LOW, JOINT_HIGH)
    return q, err
