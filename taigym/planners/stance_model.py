"""The stance planner's data and model (Bouyarmane 2011, "Multi-Contact Planning"): contacts,
stances, plan steps, and :class:`StanceModel`, the robot and a task's scene in a private
pybullet client with the contact geometry of the paper's contacts.

* A **contact** c = (robot link surface, environment surface, position on it, yaw): here a limb
  (a sole or a hand) on a :class:`~taigym.models.contact_surface.Surface` at coordinate ``u``
  along the surface's tangent (the lateral coordinate is fixed by the limb's side) and yaw 0.
* A **stance** is a set of contacts, at most one per limb.

A *task* here is anything with the MultiContact tasks' geometry (:class:`StanceTask`): the
planner takes it from the agent and never imports the envs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np
import pybullet as p
from scipy.spatial.transform import Rotation

from taigym.models.contact_surface import Surface
from taigym.sim import humanoid as hum


class StanceTask(Protocol):
    """What the planner reads of a task (``taigym.envs.multicontact_tasks.MultiContactTask``)."""

    family: str
    start: float
    size: float

    def scene(self) -> tuple[list, list]: ...

    def surfaces(self) -> list[Surface]: ...

    def goal(self) -> np.ndarray: ...

    @property
    def goal_radius(self) -> float: ...


FOOT_Y = 0.10           #: m, lateral offset of a sole centre on a plane or rung
HAND_RUNG_Y = 0.20      #: m, lateral offset of a hand on a rung or a wall
GRASP_DIR = {"rail": (0.0, 0.0, 1.0), "rung": (-0.6, 0.0, 0.8)}   # hand centre from the bar's axis
COLLISION_TOL = 0.015   #: m of penetration tolerated (pybullet's contact margins)
#: fraction of a surface's friction coefficient a contact force may use, in the plan's statics
#: and in the executor's QP alike: a plan standing at the edge of a cone (a lone sole on a
#: 28.5 deg slope of friction 0.55 used 99 % of it) is one the controller cannot hold
MU_MARGIN = 0.85
DEBUG = False

SIDE = {"right_foot": -1.0, "left_foot": 1.0, "right_hand": -1.0, "left_hand": 1.0}


@dataclass(frozen=True, order=True)
class Contact:
    """The paper's contact: limb (robot link surface), environment surface, position u (m) and yaw."""

    limb: str
    surface: str
    u: float
    yaw: float = 0.0


KEY_RESOLUTION = 0.05   #: m, stances whose contacts differ by less are one search node


def stance_key(stance) -> tuple:
    """The search's identity of a stance: contacts with u on a KEY_RESOLUTION grid (a hand 1 cm
    higher on the wall is not a new way forward; at 1 cm the search drowned in such copies)."""
    return tuple(sorted((c.limb, c.surface, round(c.u / KEY_RESOLUTION)) for c in stance))


@dataclass
class Step:
    """One configuration of the plan: ``touching`` (the larger stance, all in contact) and
    ``support`` (the stance whose forces hold it), the configuration, per-point contact forces
    (N, world frame) and joint torques (N m)."""

    touching: tuple[Contact, ...]
    support: tuple[Contact, ...]
    base_pos: np.ndarray
    base_quat: np.ndarray
    q: np.ndarray
    points: list            # (limb, world point, force (3,), kind, normal, mu)
    tau: np.ndarray
    #: Adj+ only: the paper's transition, a configuration (base_pos, base_quat, q) of ``support``
    #: alone with the new contact's limb lifted clear of the terrain between its old place and
    #: the new one (:func:`solve_transition`); kept for inspection, the executor does not use it
    transition: tuple | None = None
    #: per sole on a deformable support: its predicted sink below the undeformed surface (m)
    sinks: dict = field(default_factory=dict)


@dataclass
class Plan:
    status: str                       # "solved" | "budget" | "exhausted"
    steps: list[Step] = field(default_factory=list)
    stances: list[tuple[Contact, ...]] = field(default_factory=list)
    nodes: int = 0                    # stances expanded, over every search run
    ik_calls: int = 0
    seconds: float = 0.0
    #: (name, status, stances expanded) of each search run, in order: "plain", then "climb" if
    #: the plain one spent its budget on a slope climb (:func:`taigym.planners.stance.plan`)
    searches: list[tuple[str, str, int]] = field(default_factory=list)

    @property
    def solved(self) -> bool:
        return self.status == "solved"


# ---------------------------------------------------------------------- the model
class StanceModel:
    """The robot and the task's scene in a private pybullet client (DIRECT), with the contact
    geometry of the paper's contacts."""

    def __init__(self, task: StanceTask):
        self.task = task
        self.client = p.connect(p.DIRECT)
        self.robot = hum.Robot.load(self.client)
        boxes, bars = task.scene()
        n_rigid = len(boxes)
        self.surfaces: dict[str, Surface] = {s.name: s for s in task.surfaces()}
        # a deformable support collides as its undeformed block
        for s in self.surfaces.values():
            if s.solid is not None:
                b = s.solid
                L, W, T = b.size
                boxes = list(boxes) + [((b.x0 + L / 2, b.y0, b.top - T / 2), (L / 2, W / 2, T / 2), 0.0, s.mu)]
        self.scene_ids = hum.build_scene(self.client, boxes, bars, visual=False)
        #: pybullet ids of the deformable supports' blocks
        self.soft_ids = set(self.scene_ids[n_rigid:len(boxes)])
        self.cache: dict = {}       # per-task data of the planner's parts (pads' FEM, footprints)
        self.sole_local = {f: np.mean(hum.LIMB_POINTS[f], axis=0) for f in hum.FEET}
        # hands stay on the robot's side of a ladder's plane of rungs (point, normal towards the
        # robot): the gaps between rungs are collision-free, and the CoM term of the IK threw a
        # free hand through them, where the executed swing then caught it behind a rung
        self.ladder_planes = []
        if task.family == "ladder":
            a = task.size
            self.ladder_planes.append((np.array([task.start, 0.0, 0.0]), np.array([-math.sin(a), 0.0, math.cos(a)])))
        # contact -> (point, rotation): target() is a pure function of the contact, asked for
        # every contact in every SQP iteration (its scipy rotation cost ~0.1 ms a call)
        self._targets: dict[Contact, tuple[np.ndarray, np.ndarray | None]] = {}

    def hand_clearance(self) -> float:
        """Least signed distance (m) of a hand centre from the planes of :attr:`ladder_planes`."""
        return min([float((self.limb_ref(h) - o) @ n) for o, n in self.ladder_planes for h in hum.HANDS],
                   default=math.inf)

    def trunk_distance(self, within: float) -> float:
        """Least distance (m) of a trunk link (torso, waist, pelvis) from the scene; ``within`` if
        none is nearer than that."""
        trunk = {self.robot.link_index[name] for name in hum.TRUNK_LINKS}
        return min((cp[8] for bid in self.scene_ids
                    for cp in p.getClosestPoints(self.robot.body, bid, within, physicsClientId=self.client)
                    if cp[3] in trunk), default=within)

    def close(self) -> None:
        try:
            p.disconnect(physicsClientId=self.client)
        except p.error:
            pass

    # ------------------------------------------------------------------ contact geometry
    def target(self, c: Contact) -> tuple[np.ndarray, np.ndarray | None]:
        """World target of the limb's reference point (sole centre / hand centre) and, for
        soles, the target rotation of the foot frame (x along the surface, z its normal).
        Fresh arrays (callers may keep or modify them) copied from a per-contact cache."""
        if c not in self._targets:
            self._targets[c] = self._target(c)
        pt, R = self._targets[c]
        return pt.copy(), (None if R is None else R.copy())

    def _target(self, c: Contact) -> tuple[np.ndarray, np.ndarray | None]:
        s = self.surfaces[c.surface]
        pt = s.point(c.u)
        n, t = np.asarray(s.normal, float), np.asarray(s.t, float)
        lateral = np.array([0.0, SIDE[c.limb], 0.0])
        if c.limb in hum.FEET:
            pt = pt + FOOT_Y * lateral + (s.radius * n if s.kind == "bar" else 0.0)
            if s.kind == "bar":
                t = np.array([1.0, 0.0, 0.0])
            x = Rotation.from_rotvec(c.yaw * n).apply(t)
            return pt, np.column_stack([x, np.cross(n, x), n])
        if s.kind == "bar":
            d = np.asarray(GRASP_DIR["rung" if c.surface.startswith("rung") else "rail"], float)
            d /= np.linalg.norm(d)
            off = HAND_RUNG_Y * lateral if c.surface.startswith("rung") else 0.0
            return pt + off + (s.radius + hum.HAND_RADIUS) * d, None
        return pt + HAND_RUNG_Y * lateral + hum.HAND_RADIUS * n, None

    def force_points(self, c: Contact) -> list[tuple[np.ndarray, str, np.ndarray, float]]:
        """(world point, kind "cone" | "grasp", normal, mu) for the contact at its target; mu is
        the surface's friction coefficient times MU_MARGIN, the part of the cone forces may use."""
        s = self.surfaces[c.surface]
        n = np.asarray(s.normal, float)
        mu = MU_MARGIN * s.mu
        pt, R = self.target(c)
        if c.limb in hum.FEET:
            if s.kind == "bar":   # the sole across a rung: a line contact, two points
                return [(pt + R @ np.array([0, dy, 0]), "cone", n, mu) for dy in (-0.035, 0.035)]
            corners = np.asarray(hum.LIMB_POINTS[c.limb]) - self.sole_local[c.limb]
            return [(pt + R @ np.array([cx, cy, 0.0]), "cone", n, mu) for cx, cy, _ in corners]
        if s.kind == "bar":
            return [(pt, "grasp", n, mu)]
        return [(pt, "cone", n, mu)]

    def limb_ref(self, limb: str, kin: hum.Kinematics | None = None) -> np.ndarray:
        """Current world position of the limb's reference point (``kin``: the current
        configuration's kinematics, if already read)."""
        fk = kin or self.robot
        if limb in hum.FEET:
            o, R = fk.limb_frame(limb)
            return o + R @ self.sole_local[limb]
        return fk.limb_points(limb)[0]

    # ------------------------------------------------------------------ state
    def set(self, x) -> None:
        """Set the configuration x = (base position, base quaternion xyzw, joint angles) at rest."""
        self.robot.set_state(x[0], x[1], x[2])

    def collides(self, touching) -> bool:
        """True if a link other than the touching limbs' penetrates the scene."""
        allowed = {self.robot.link_index[hum.LIMB_LINK[c.limb]] for c in touching}
        for bid in self.scene_ids:
            for cp in p.getClosestPoints(self.robot.body, bid, 0.0, physicsClientId=self.client):
                if (cp[8] < -COLLISION_TOL and cp[3] not in allowed) or cp[8] < -2.5 * COLLISION_TOL:
                    if DEBUG:     # contact limbs may not sink into the scene either
                        print("collision", cp[3], cp[8], np.round(cp[5], 3))
                    return True
        return False
