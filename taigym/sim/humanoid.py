"""The MultiContact robot and scenes in pybullet (DIRECT mode only; no Gymnasium, no planners).

Robot: pybullet_data's ``mjcf/humanoid.xml`` (the MuJoCo humanoid: 40.8 kg, 1.4 m tall with
straight legs, a free-floating torso and 21 revolute joints, spheres for hands and two capsules
per foot). It is chosen over ``humanoid/humanoid.urdf`` (DeepMimic) because its joints are
revolute with finite limits, so position targets, limits and Jacobians are plain per-joint
numbers. Torque limits are the MJCF actuators' ``gear`` (control 1): abdomen and hip x/z
200 N m, hip y 600, knee 400, ankles 100, shoulders 100, elbows 200. The file's control range
0.4 (what its Gym versions run with) gives 40 N m shoulders, too weak for a hand to carry a
useful part of the 400 N body weight (a human shoulder gives 60-100 N m), so every multi-contact
stance with a hand on a wall failed the torque limits.

The file's feet are pairs of capsules; pybullet's MJCF importer places their collision shapes
where they are hard to model (a resting foot touches the floor on a 7 cm patch), so the model is
loaded from a copy of pybullet_data's file (written to a temporary directory) whose feet are
boxes (22 x 9 x 5 cm soles) instead, and whose joint axes are normalised: the file has axes
such as (2, 1, 1), which pybullet's forward kinematics and mass matrix normalise but its
simulation does not (a torque then accelerated a shoulder 6 = |(2, 1, 1)|^2 times less than the
mass matrix predicts). Nothing else changes.

Contact links (Bouyarmane's "robot link surface"): each foot's sole, given by its four corners
(measured on the loaded model, in the link frame, by probing its collision shape), and each
hand, the centre of its 4 cm sphere. A hand may also *grasp* a bar (a bilateral contact): the env then holds it with a
point-to-point constraint whose force is limited to :data:`GRIP_FORCE`.

A scene is plain geometry (tuples, SI units, z up, x forward): ``boxes`` (centre, half extents,
pitch about y in rad, friction) and ``bars`` (centre, axis "x" | "y" | a unit 3-vector, half
length, radius, friction); see :mod:`taigym.envs.multicontact_tasks`.
"""

from __future__ import annotations

import contextlib
import ctypes
import math
import os
import re
import sys
import tempfile
from dataclasses import dataclass

import numpy as np
import pybullet as p
import pybullet_data
from scipy.spatial.transform import Rotation

from .constants import GRAVITY

ROBOT_FILE = "mjcf/humanoid.xml"
JOINTS = ("abdomen_z", "abdomen_y", "abdomen_x",
          "right_hip_x", "right_hip_z", "right_hip_y", "right_knee", "right_ankle_y", "right_ankle_x",
          "left_hip_x", "left_hip_z", "left_hip_y", "left_knee", "left_ankle_y", "left_ankle_x",
          "right_shoulder1", "right_shoulder2", "right_elbow",
          "left_shoulder1", "left_shoulder2", "left_elbow")
N_JOINTS = len(JOINTS)
_GEAR = {"abdomen": 200, "hip_x": 200, "hip_z": 200, "hip_y": 600, "knee": 400, "ankle": 100,
         "shoulder": 100, "elbow": 200}
#: N m: the actuators' gear (module docstring)
TORQUE_LIMITS = np.array([1.0 * next(g for k, g in _GEAR.items() if k in name) for name in JOINTS])
GRIP_FORCE = 600.0          #: N, the most a grasping hand's constraint transmits
LIMBS = ("right_foot", "left_foot", "right_hand", "left_hand")
FEET, HANDS = LIMBS[:2], LIMBS[2:]
#: the link that carries each limb's contact surface
LIMB_LINK = {"right_foot": "right_foot", "left_foot": "left_foot",
             "right_hand": "right_lower_arm", "left_hand": "left_lower_arm"}
HAND_RADIUS = 0.04
SOLE_HALF = (0.11, 0.045, 0.025)   #: m, half extents of the sole boxes
_SOLE_BOX = "<geom name='{side}_sole' type='box' pos='0.035 {y} -0.005' size='{hx} {hy} {hz}' />"
#: contact points in the limb link's frame (m): sole corners (set by :meth:`Robot.load`); hand centre
LIMB_POINTS = {
    "right_foot": (),
    "left_foot": (),
    "right_hand": ((0.18, 0.18, 0.18),),
    "left_hand": ((0.18, -0.18, 0.18),),
}
#: links whose touching the scene is a fall (trunk and head) or a contact violation (the rest)
TRUNK_LINKS = ("torso", "lwaist", "pelvis")
ALLOWED_LINKS = ("right_foot", "left_foot", "right_lower_arm", "left_lower_arm", "right_shin",
                 "left_shin")
STAND_HEIGHT = 1.285        #: m, base height with straight legs and soles on z = 0
#: nominal standing posture (rad): knees slightly bent, hands in front of the hips, elbows in
STAND_POSTURE = dict(right_hip_y=-0.25, right_knee=-0.5, right_ankle_y=-0.25,
                     left_hip_y=-0.25, left_knee=-0.5, left_ankle_y=-0.25,
                     right_shoulder1=0.7, right_shoulder2=-0.5, right_elbow=-1.04,
                     left_shoulder1=-0.7, left_shoulder2=0.5, left_elbow=-1.04)


def stand_posture() -> np.ndarray:
    return np.array([STAND_POSTURE.get(n, 0.0) for n in JOINTS])


@dataclass
class Robot:
    """The humanoid loaded in a pybullet client, with kinematics helpers (world frame, SI).

    Generalised coordinates are (base position, base orientation quaternion xyzw, 21 joint
    angles); generalised velocities (base linear, base angular (world), joint rates): 27 dofs.
    """

    client: int
    body: int
    joints: np.ndarray          # pybullet joint indices of JOINTS
    lower: np.ndarray
    upper: np.ndarray
    link_index: dict            # link name -> pybullet link index (-1: the torso, the base)
    parent: np.ndarray          # parent link index of each link
    masses: np.ndarray          # kg, per link index + 1 (index 0: the base)
    total_mass: float

    @classmethod
    def load(cls, client: int) -> "Robot":
        ids = p.loadMJCF(_model_file(), physicsClientId=client)
        floor, body = ids[0], ids[1]
        p.removeBody(floor, physicsClientId=client)
        n = p.getNumJoints(body, physicsClientId=client)
        infos = [p.getJointInfo(body, j, physicsClientId=client) for j in range(n)]
        by_name = {i[1].decode(): i for i in infos}
        joints = np.array([by_name[name][0] for name in JOINTS])
        lower = np.array([by_name[name][8] for name in JOINTS])
        upper = np.array([by_name[name][9] for name in JOINTS])
        link_index = {i[12].decode(): i[0] for i in infos}
        link_index["torso"] = -1
        parent = np.array([i[16] for i in infos])
        masses = np.array([p.getDynamicsInfo(body, j, physicsClientId=client)[0] for j in range(-1, n)])
        for j in range(-1, n):   # MJCF joints come with damping 1 and default velocity motors: off
            p.changeDynamics(body, j, linearDamping=0.0, angularDamping=0.0, physicsClientId=client)
            # pybullet multiplies the two bodies' friction coefficients; the file's links have
            # 0.5, which would halve every scene surface's mu: 1 makes a contact's friction
            # coefficient the surface's, as the tasks and the planner state it
            p.changeDynamics(body, j, lateralFriction=1.0, physicsClientId=client)
        for j in range(n):
            p.changeDynamics(body, j, jointDamping=0.0, physicsClientId=client)
        p.setJointMotorControlArray(body, list(range(n)), p.VELOCITY_CONTROL, forces=[0.0] * n,
                                    physicsClientId=client)
        robot = cls(client, body, joints, lower, upper, link_index, parent, masses, float(masses.sum()))
        if not LIMB_POINTS["right_foot"]:
            _calibrate_soles(robot)
        return robot

    # ------------------------------------------------------------------ state
    def set_state(self, base_pos, base_quat, q, base_vel=None, base_omega=None, qd=None) -> None:
        c, b = self.client, self.body
        p.resetBasePositionAndOrientation(b, list(map(float, base_pos)), list(map(float, base_quat)),
                                          physicsClientId=c)
        p.resetBaseVelocity(b, list(map(float, base_vel if base_vel is not None else (0, 0, 0))),
                            list(map(float, base_omega if base_omega is not None else (0, 0, 0))),
                            physicsClientId=c)
        qd = np.zeros(N_JOINTS) if qd is None else qd
        # one call for all joints (0.05 ms instead of 0.15 ms; the stance IK sets a configuration
        # per iteration), the same state as a resetJointState per joint
        p.resetJointStatesMultiDof(b, self._joint_ids, [[float(a)] for a in q], [[float(v)] for v in qd],
                                   physicsClientId=c)

    def get_state(self):
        """(base_pos, base_quat, q, base_vel, base_omega, qd) as numpy arrays."""
        c, b = self.client, self.body
        pos, quat = p.getBasePositionAndOrientation(b, physicsClientId=c)
        vel, omega = p.getBaseVelocity(b, physicsClientId=c)
        js = p.getJointStates(b, [int(j) for j in self.joints], physicsClientId=c)
        return (np.array(pos), np.array(quat), np.array([s[0] for s in js]), np.array(vel),
                np.array(omega), np.array([s[1] for s in js]))

    # ------------------------------------------------------------------ kinematics
    def _links(self):
        c, b = self.client, self.body
        n = len(self.parent)
        states = p.getLinkStates(b, list(range(n)), computeForwardKinematics=True, physicsClientId=c)
        pos, quat = p.getBasePositionAndOrientation(b, physicsClientId=c)
        return pos, quat, states

    def limb_points(self, limb: str) -> np.ndarray:
        """World positions (k, 3) of a limb's contact points (m)."""
        return _limb_points(limb, *self.limb_frame(limb))

    def limb_frame(self, limb: str) -> tuple[np.ndarray, np.ndarray]:
        """(origin, rotation matrix) of a limb link's MJCF body frame in the world."""
        link = self.link_index[LIMB_LINK[limb]]
        return _frame(p.getLinkState(self.body, link, computeForwardKinematics=True, physicsClientId=self.client))

    def chain(self, link: int) -> np.ndarray:
        """Indices into JOINTS of the revolute joints between the base and ``link`` (cached)."""
        cache = self.__dict__.setdefault("_chain_cache", {})
        if link not in cache:
            out, j = [], link
            jset = {int(v): k for k, v in enumerate(self.joints)}
            while j >= 0:
                if j in jset:
                    out.append(jset[j])
                j = int(self.parent[j])
            cache[link] = np.array(out, dtype=int)
        return cache[link]

    @property
    def _joint_ids(self) -> list[int]:
        return [int(j) for j in self.joints]

    def kinematics(self) -> "Kinematics":
        """The forward kinematics of the current configuration, read from pybullet once: ask it
        for several Jacobians of one configuration (valid until the configuration changes)."""
        return Kinematics(self)

    def jacobians(self, link: int, points: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """As :meth:`Kinematics.jacobians`, for the current configuration."""
        return self.kinematics().jacobians(link, points)

    @property
    def _axes(self):
        if not hasattr(self, "_axes_cache"):
            self._axes_cache = []
            for j in self.joints:
                a = np.asarray(p.getJointInfo(self.body, int(j), physicsClientId=self.client)[13], float)
                self._axes_cache.append(a / np.linalg.norm(a))
        return self._axes_cache

    def com(self) -> np.ndarray:
        """Centre of mass (3,) of the current configuration (m): the links' mass-weighted COMs."""
        base, _, states = self._links()
        coms = np.array([base] + [s[0] for s in states])
        return self.masses @ coms / self.total_mass

    def com_and_jacobian(self) -> tuple[np.ndarray, np.ndarray]:
        """As :meth:`Kinematics.com_and_jacobian`, for the current configuration."""
        return self.kinematics().com_and_jacobian()

    @property
    def _descendants(self):
        if not hasattr(self, "_desc_cache"):
            n = len(self.parent)
            self._desc_cache = []
            for j in self.joints:
                out = []
                for l in range(n):
                    a = l
                    while a >= 0 and a != j:
                        a = int(self.parent[a])
                    if a == j:
                        out.append(l + 1)      # row in the (base + links) arrays
                self._desc_cache.append(np.array(out, dtype=int))
            self._desc_mass = np.array([self.masses[d].sum() for d in self._desc_cache])
        return self._desc_cache

    def mass_matrix(self, q) -> np.ndarray:
        """pybullet's (27, 27) mass matrix (``calculateMassMatrix``) at joint angles q (JOINTS
        order) and the current base state: over (base angular, base linear velocity in the base
        frame, joint rates). The first call on a body builds pybullet's inverse-dynamics model,
        which prints two lines (``b3Warning ... axis of motion not a unit axis``) per joint with
        an oblique axis (hips, shoulders, elbows): pybullet parses a model file's axes as
        float32, so no text gives a unit vector to its tolerance (5 double epsilons), and then
        normalises them itself. Those lines are dropped; anything else printed is kept."""
        args = (self.body, [float(v) for v in q])
        if self.__dict__.get("_dynamics_built"):
            return np.array(p.calculateMassMatrix(*args, physicsClientId=self.client))
        with _dropping_axis_warnings():
            M = np.array(p.calculateMassMatrix(*args, physicsClientId=self.client))
        self._dynamics_built = True
        return M

    def gravity_forces(self) -> np.ndarray:
        """Generalised gravity forces G (27,): sum_l J_l^T m_l g, g = (0, 0, -9.81) (N, N m)."""
        _, Jc = self.com_and_jacobian()
        return Jc.T @ np.array([0.0, 0.0, -GRAVITY * self.total_mass])


class Kinematics:
    """Forward kinematics of a Robot's current configuration, read from pybullet once (every
    link's frame, the joints' world axes and origins), and the Jacobians computed from it. An IK
    iteration or a control step asks for several Jacobians of one configuration (contacts, CoM,
    collision rows); reading pybullet and rotating the joint axes anew for each cost 0.25-0.45 ms
    a call. Valid until the configuration changes."""

    def __init__(self, robot: Robot):
        self.robot = robot
        self.base, _, self.states = robot._links()
        idx = robot.joints.astype(int)
        self.origins = np.array([self.states[j][4] for j in idx])       # (21, 3), m
        self.axes = Rotation.from_quat(np.array([self.states[j][5] for j in idx])).apply(np.asarray(robot._axes))

    def limb_frame(self, limb: str) -> tuple[np.ndarray, np.ndarray]:
        """As :meth:`Robot.limb_frame`."""
        return _frame(self.states[self.robot.link_index[LIMB_LINK[limb]]])

    def limb_points(self, limb: str) -> np.ndarray:
        """As :meth:`Robot.limb_points`."""
        return _limb_points(limb, *self.limb_frame(limb))

    def jacobians(self, link: int, points: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Linear Jacobians (k, 3, 27) of world points rigidly attached to ``link`` and the
        link's angular Jacobian (3, 27), over the velocities (base v, base omega, qdot), from
        pybullet's forward kinematics: column of revolute joint j = a_j x (x - o_j)."""
        robot = self.robot
        points = np.atleast_2d(points)
        Jl = np.zeros((len(points), 3, 6 + N_JOINTS))
        Ja = np.zeros((3, 6 + N_JOINTS))
        Jl[:, :, :3] = np.eye(3)
        Jl[:, :, 3:6] = -_skew(points - np.asarray(self.base))       # omega x r = -[r]x omega
        Ja[:, 3:6] = np.eye(3)
        chain = robot.chain(link)
        if len(chain):
            if len(chain) == 1:
                # scipy rotates a lone vector by another formula than a stack (the last bit
                # differs): rotated alone, as this link's Jacobian always was (the stance
                # search's outcomes hinge on the last bit of the IK's results)
                quat = [self.states[int(robot.joints[chain[0]])][5]]
                axes = Rotation.from_quat(quat).apply(np.asarray(robot._axes)[chain])
            else:
                axes = self.axes[chain]
            # (k points, n joints, 3)
            cols = _cross(axes[None, :, :], points[:, None, :] - self.origins[chain][None, :, :])
            Jl[:, :, 6 + chain] = cols.transpose(0, 2, 1)
            Ja[:, 6 + chain] = axes.T
        return Jl, Ja

    def com_and_jacobian(self) -> tuple[np.ndarray, np.ndarray]:
        """Centre of mass (3,) and its Jacobian (3, 27); mass-weighted link COM Jacobians."""
        robot = self.robot
        coms = np.array([self.base] + [s[0] for s in self.states])
        mc = robot.masses[:, None] * coms
        com = mc.sum(axis=0) / robot.total_mass
        J = np.zeros((3, 6 + N_JOINTS))
        J[:, :3] = np.eye(3)
        J[:, 3:6] = -_skew((com - np.asarray(self.base))[None])[0]
        # joint columns: a_j x (sum over descendants m_l (x_l - o_j)) / M, all joints at once
        mx = np.array([mc[d].sum(axis=0) for d in robot._descendants]) - robot._desc_mass[:, None] * self.origins
        J[:, 6:] = _cross(self.axes, mx).T / robot.total_mass
        return com, J


# what pybullet's inverse dynamics prints (to the C stdout, fd 1) for each oblique joint axis
_AXIS_WARNING = re.compile(rb"b3Warning\[[^\]\n]*\]:[ \t]*\r?\n[ \t]*axis of motion not a unit axis[^\n]*\n")


@contextlib.contextmanager
def _dropping_axis_warnings():
    """Write everything printed to fd 1 inside the block but pybullet's axis warnings
    (:meth:`Robot.mass_matrix`) to fd 1 after it."""
    libc = ctypes.CDLL(None)
    sys.stdout.flush()
    libc.fflush(None)
    try:
        saved = os.dup(1)
    except OSError:                              # no stdout at all: nothing to keep clean
        yield
        return
    with tempfile.TemporaryFile() as tmp:
        os.dup2(tmp.fileno(), 1)
        try:
            yield
        finally:
            libc.fflush(None)                    # pybullet's printf output still buffered
            os.dup2(saved, 1)
            os.close(saved)
            tmp.seek(0)
            rest = memoryview(_AXIS_WARNING.sub(b"", tmp.read()))
            while rest:
                rest = rest[os.write(1, rest):]


def _model_file() -> str:
    """Path of the humanoid with box soles (module docstring), written once per process."""
    global _MODEL_PATH
    if _MODEL_PATH is None:
        text = open(os.path.join(pybullet_data.getDataPath(), ROBOT_FILE)).read()
        for side, y in (("right", -0.01), ("left", 0.01)):
            caps = re.findall(rf"\s*<geom name='{side}_foot_cap\d'[^>]*/>", text)
            text = text.replace(caps[0], "\n" + _SOLE_BOX.format(side=side, y=y, hx=SOLE_HALF[0], hy=SOLE_HALF[1],
                                                                hz=SOLE_HALF[2]))
            text = text.replace(caps[1], "")
        def unit(m):
            a = np.array([float(v) for v in m.group(1).split()])
            return "axis='" + " ".join(f"{v:.9f}" for v in a / np.linalg.norm(a)) + "'"

        text = re.sub(r"axis='([^']*)'", unit, text)
        fd, path = tempfile.mkstemp(prefix="taigym_humanoid_", suffix=".xml")
        with os.fdopen(fd, "w") as f:
            f.write(text)
        _MODEL_PATH = path
    return _MODEL_PATH


_MODEL_PATH: str | None = None


def _calibrate_soles(robot: Robot) -> None:
    """Find each sole box's bottom corners in its link frame: probe the link from below, in
    front, behind and beside with a 1 mm sphere (closest points), with the robot upright."""
    c = robot.client
    robot.set_state((0.0, 0.0, 3.0), (0, 0, 0, 1), np.zeros(N_JOINTS))
    col = p.createCollisionShape(p.GEOM_SPHERE, radius=1e-3, physicsClientId=c)
    probe = p.createMultiBody(0.0, col, -1, [0, 0, -10], physicsClientId=c)
    for foot in FEET:
        link = robot.link_index[LIMB_LINK[foot]]
        o, R = robot.limb_frame(foot)

        def surface(d):
            # the closest point of the link to a probe 0.5 m away along d from the link origin
            p.resetBasePositionAndOrientation(probe, list(o + 0.5 * d), [0, 0, 0, 1], physicsClientId=c)
            cp = min(p.getClosestPoints(robot.body, probe, 2.0, linkIndexA=link, physicsClientId=c),
                     key=lambda k: k[8])
            return R.T @ (np.asarray(cp[5]) - o)

        lo_x, hi_x = surface(-R[:, 0])[0], surface(R[:, 0])[0]
        lo_y, hi_y = surface(-R[:, 1])[1], surface(R[:, 1])[1]
        cx, cy = 0.5 * (lo_x + hi_x), 0.5 * (lo_y + hi_y)
        o2 = o + R @ np.array([cx, cy, 0.0])
        p.resetBasePositionAndOrientation(probe, list(o2 - 0.5 * R[:, 2]), [0, 0, 0, 1], physicsClientId=c)
        cp = min(p.getClosestPoints(robot.body, probe, 2.0, linkIndexA=link, physicsClientId=c), key=lambda k: k[8])
        z = (R.T @ (np.asarray(cp[5]) - o))[2]
        LIMB_POINTS[foot] = tuple((float(x), float(y), float(z)) for x in (lo_x, hi_x) for y in (lo_y, hi_y))
    p.removeBody(probe, physicsClientId=c)


def _frame(link_state) -> tuple[np.ndarray, np.ndarray]:
    """(origin, rotation matrix) of a link's MJCF body frame from its pybullet link state."""
    return np.asarray(link_state[4]), np.array(p.getMatrixFromQuaternion(link_state[5])).reshape(3, 3)


def _limb_points(limb: str, origin: np.ndarray, R: np.ndarray) -> np.ndarray:
    """World positions (k, 3) of a limb's contact points, its link frame being (origin, R)."""
    return origin + np.asarray(LIMB_POINTS[limb]) @ R.T


def _cross(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Cross product over the last axis, broadcast (np.cross is slow for small arrays)."""
    out = np.empty(np.broadcast_shapes(np.shape(a), np.shape(b)))
    out[..., 0] = a[..., 1] * b[..., 2] - a[..., 2] * b[..., 1]
    out[..., 1] = a[..., 2] * b[..., 0] - a[..., 0] * b[..., 2]
    out[..., 2] = a[..., 0] * b[..., 1] - a[..., 1] * b[..., 0]
    return out


def _skew(r: np.ndarray) -> np.ndarray:
    """(k, 3, 3) matrices [r]x such that [r]x v = r x v."""
    out = np.zeros((len(r), 3, 3))
    out[:, 0, 1], out[:, 0, 2] = -r[:, 2], r[:, 1]
    out[:, 1, 0], out[:, 1, 2] = r[:, 2], -r[:, 0]
    out[:, 2, 0], out[:, 2, 1] = -r[:, 1], r[:, 0]
    return out


def _rotate(quat, v) -> np.ndarray:
    return np.array(p.getMatrixFromQuaternion(quat)).reshape(3, 3) @ np.asarray(v)


# ---------------------------------------------------------------------- scenes
def _quat_pitch(pitch: float) -> list:
    return list(p.getQuaternionFromEuler([0.0, pitch, 0.0]))


def _bar_quat(axis) -> list:
    if isinstance(axis, str):
        axis = {"x": (1, 0, 0), "y": (0, 1, 0), "z": (0, 0, 1)}[axis]
    a = np.asarray(axis, float) / np.linalg.norm(axis)
    z = np.array([0.0, 0.0, 1.0])
    v = np.cross(z, a)
    s, cth = np.linalg.norm(v), float(z @ a)
    if s < 1e-9:
        return [0.0, 0.0, 0.0, 1.0] if cth > 0 else [1.0, 0.0, 0.0, 0.0]
    ang = math.atan2(s, cth)
    v = v / s * math.sin(ang / 2)
    return [float(v[0]), float(v[1]), float(v[2]), math.cos(ang / 2)]


def build_scene(client: int, boxes, bars, *, visual: bool = True) -> list[int]:
    """Create the static scene; returns the pybullet body ids (boxes then bars)."""
    ids = []
    colours = [(0.75, 0.72, 0.68, 1.0), (0.55, 0.6, 0.7, 1.0)]
    for centre, half, pitch, mu in boxes:
        col = p.createCollisionShape(p.GEOM_BOX, halfExtents=list(half), physicsClientId=client)
        vis = p.createVisualShape(p.GEOM_BOX, halfExtents=list(half), rgbaColor=colours[0],
                                  physicsClientId=client) if visual else -1
        b = p.createMultiBody(0.0, col, vis, list(centre), _quat_pitch(pitch), physicsClientId=client)
        p.changeDynamics(b, -1, lateralFriction=float(mu), physicsClientId=client)
        ids.append(b)
    for centre, axis, half_len, radius, mu in bars:
        col = p.createCollisionShape(p.GEOM_CYLINDER, radius=radius, height=2 * half_len,
                                     physicsClientId=client)
        vis = p.createVisualShape(p.GEOM_CYLINDER, radius=radius, length=2 * half_len,
                                  rgbaColor=colours[1], physicsClientId=client) if visual else -1
        b = p.createMultiBody(0.0, col, vis, list(centre), _bar_quat(axis), physicsClientId=client)
        p.changeDynamics(b, -1, lateralFriction=float(mu), physicsClientId=client)
        ids.append(b)
    return ids


def place_standing(robot: Robot, x: float = 0.0, posture: np.ndarray | None = None, ground: float = 0.0) -> None:
    """Put the robot upright in ``posture`` (default :func:`stand_posture`), its soles'
    midpoint at (x, 0) and its lowest sole point 1 mm above z = ``ground``."""
    q = stand_posture() if posture is None else posture
    robot.set_state((0.0, 0.0, STAND_HEIGHT), (0, 0, 0, 1), q)
    pts = np.vstack([robot.limb_points(f) for f in FEET])
    mid = pts.mean(axis=0)
    robot.set_state((x - mid[0], -mid[1], STAND_HEIGHT - pts[:, 2].min() + ground + 1e-3), (0, 0, 0, 1), q)
