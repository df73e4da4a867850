"""Transport3D tasks (the SFRRT* paper (2024), in 3D): a Franka Panda carries a filled frustum
from a start configuration to a goal position, upright, past boxes, posts and shelves.

Coordinates are the robot's (pybullet's): z up, the arm's base at the origin on a table top
(z = 0 is the table; nothing may go below it). A :class:`Transport3DTask` fixes the arm's
start joint configuration (7 angles, rad; the container is then upright in the hand), the goal
position of the container's frame origin (the centre of its inner bottom, m), up to
:data:`MAX_OBSTACLES` static boxes (centre x, y, z and half extents, m), the SFRRT* paper's
frustum (bottom and top interior radius, height, m) and the fill (liquid height / container
height). :class:`PandaCarrier` (the arm holding the container upright) checks that the arm can
start and finish a task.

Sampled tasks: the start and the goal are configurations of the upright posture family
(:data:`FAMILY`: joints 3 and 5 at 0, joint 6 = joint 2 - joint 4 + pi/2, so the hand's approach
axis is horizontal), so the goal is reachable upright; the base joint turns by 30-60 deg. Four
layouts (:data:`LAYOUTS`, drawn 20/30/25/25 %; a task the arm cannot start or finish is redrawn
in its layout):

* ``open``: no obstacle;
* ``box``: a box between start and goal, its top 3-8 cm above the straight path's midpoint, so
  the container is lifted over it (or carried round it);
* ``shelf``: the goal is on a shelf board, under a second board 3-7 cm above the brim, in front
  of a back wall: the container goes in from the front or the sides, never from above;
* ``gap``: two posts taller than the arm reaches stand 10-15 cm in front of the goal; the arm
  reaches in between them, with 1-4 cm to spare on each side of the hand.

Containers: top radius 3-4 cm, bottom radius 0.7-1.0 x top, height 6-9 cm; fill 0.3-0.8.
``taigym.envs.tasks("transport3d", split)`` gives 1000 train and 100 eval tasks from fixed
seeds.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from .checks import bounded_float
from .panda import CONTAINER_WALL, JOINT_HIGH, JOINT_LOW, PandaArm

MAX_OBSTACLES = 3                  #: obstacle slots of the observation
MAX_TOP_RADIUS = 0.04              #: m, largest interior top radius the liquid grid holds
MAX_HEIGHT = 0.09                  #: m, tallest container the liquid grid holds
SPLIT_SIZES = {"train": 1000, "eval": 100}
_SPLIT_SEEDS = {"train": (20261122, 0), "eval": (20261122, 1)}


# The upright posture family: joints 3 and 5 at 0, joint 6 = joint 2 - joint 4 + pi/2 (the hand's
# approach axis horizontal), joint 7 at pi/4; FAMILY maps the rates of (base, shoulder, elbow)
# to the 7 joint rates. The elbow bends one way only, so each container position the arm
# reaches upright has one configuration in the family.
FAMILY = np.zeros((7, 3))
FAMILY[0, 0] = FAMILY[1, 1] = FAMILY[3, 2] = FAMILY[5, 1] = 1.0
FAMILY[5, 2] = -1.0


def upright_configuration(base: float, shoulder: float, elbow: float) -> np.ndarray:
    """Joint angles (rad) of the upright posture family: the container stays upright in the
    hand."""
    return FAMILY @ np.array([base, shoulder, elbow]) + np.array([0, 0, 0, 0, 0, 0.5 * math.pi, 0.785])


HOME = upright_configuration(0.0, -0.3, -2.2)   #: hand 0.59 m out, 0.70 m up; approach +x


@dataclass(frozen=True)
class Transport3DTask:
    """One 3D transport problem; validated on construction (ValueError naming the field)."""

    start: tuple[float, ...]                       # 7 joint angles, rad
    goal: tuple[float, float, float]               # container origin, m (robot frame, z up)
    obstacles: tuple[tuple[float, ...], ...] = ()  # (cx, cy, cz, hx, hy, hz), m
    bottom_radius: float = 0.025
    top_radius: float = 0.035
    height: float = 0.08
    fill: float = 0.5
    layout: str = "custom"                         # which of LAYOUTS sampled it (a label)

    def __post_init__(self) -> None:
        start = np.asarray(self.start, dtype=np.float64)
        if start.shape != (7,) or not np.all(np.isfinite(start)) or \
                np.any(start < JOINT_LOW) or np.any(start > JOINT_HIGH):
            raise ValueError(f"start must be 7 joint angles within the Panda's limits "
                             f"{JOINT_LOW.round(3).tolist()} .. {JOINT_HIGH.round(3).tolist()} rad, "
                             f"got {self.start!r}")
        goal = np.asarray(self.goal, dtype=np.float64)
        if goal.shape != (3,) or not np.all(np.isfinite(goal)) or goal[2] < 0.0:
            raise ValueError(f"goal must be 3 finite numbers (m) with z >= 0, got {self.goal!r}")
        obst = []
        for i, box in enumerate(self.obstacles):
            b = np.asarray(box, dtype=np.float64)
            if b.shape != (6,) or not np.all(np.isfinite(b)) or np.any(b[3:] <= 0):
                raise ValueError(f"obstacles[{i}] must be (cx, cy, cz, hx, hy, hz) with positive "
                                 f"half extents (m), got {box!r}")
            obst.append(tuple(float(v) for v in b))
        if len(obst) > MAX_OBSTACLES:
            raise ValueError(f"obstacles holds at most {MAX_OBSTACLES} boxes, got {len(obst)}")
        object.__setattr__(self, "start", tuple(float(v) for v in start))
        object.__setattr__(self, "goal", tuple(float(v) for v in goal))
        object.__setattr__(self, "obstacles", tuple(obst))
        object.__setattr__(self, "layout", str(self.layout))
        top = bounded_float("top_radius", self.top_radius, 0.01, MAX_TOP_RADIUS)
        bounded_float("bottom_radius", self.bottom_radius, 0.005, top)
        bounded_float("height", self.height, 0.02, MAX_HEIGHT)
        if not (isinstance(self.fill, (int, float)) and 0.0 < self.fill <= 1.0):
            raise ValueError(f"fill must be in (0, 1] of the container's height (above 1 the "
                             f"liquid would rise above the brim), got {self.fill!r}")

    @property
    def fill_height(self) -> float:
        """Liquid height at rest (the SFRRT* paper's h_w), m."""
        return self.fill * self.height

    def container(self, wall_thickness: float = 0.02):
        """The container (``sim.container3d("frustum", ...)``, interior dimensions)."""
        from ..sim import container3d

        return container3d("frustum", width=2 * self.top_radius, height=self.height,
                           wall_thickness=wall_thickness, bottom_width=2 * self.bottom_radius)

    def to_dict(self) -> dict:
        return {"start": list(self.start), "goal": list(self.goal),
                "obstacles": [list(b) for b in self.obstacles], "bottom_radius": self.bottom_radius,
                "top_radius": self.top_radius, "height": self.height, "fill": self.fill,
                "layout": self.layout}

    @classmethod
    def from_dict(cls, d: dict) -> Transport3DTask:
        if not isinstance(d, dict):
            raise ValueError(f"from_dict needs a dict, got {type(d).__name__}")
        unknown = sorted(set(d) - set(cls.__dataclass_fields__))
        if unknown:
            raise ValueError(f"unknown task field(s): {', '.join(unknown)}")
        d = dict(d)
        d["obstacles"] = tuple(tuple(b) for b in d.get("obstacles", ()))
        return cls(**d)


def as_task(value: Any) -> Transport3DTask:
    if isinstance(value, Transport3DTask):
        return value
    if isinstance(value, dict):
        return Transport3DTask.from_dict(value)
    raise ValueError(f"task must be a Transport3DTask or its to_dict(), got {type(value).__name__}")


class PandaCarrier(PandaArm):
    """The Panda holding the container upright at :data:`HOME` (:class:`~taigym.envs.panda.PandaArm`),
    with the transport tasks' inverse kinematics and feasibility checks."""

    def __init__(self):
        super().__init__(HOME)

    def upright_configuration_at(self, position, seed_q, iterations: int = 30) -> np.ndarray | None:
        """The configuration of the upright posture family (:data:`FAMILY`) that
        holds the container's origin at ``position`` (m): Newton's method on (base, shoulder,
        elbow) from those of ``seed_q``; None if it does not converge to 0.3 mm within the
        joint limits."""
        target = np.asarray(position, dtype=np.float64)
        x = np.asarray(seed_q, dtype=np.float64)[[0, 1, 3]]
        for _ in range(iterations):
            q = upright_configuration(*x)
            origin, _, J = self._kinematics(q, jacobian=True)
            e = target - origin
            if np.linalg.norm(e) < 3e-4:
                return q if np.all(q >= JOINT_LOW) and np.all(q <= JOINT_HIGH) else None
            J = J[:3] @ FAMILY
            step = np.linalg.solve(J.T @ J + 1e-6 * np.eye(3), J.T @ e)
            x = x + step / max(1.0, np.abs(step).max() / 0.3)
        return None

    def set_scene(self, task: Transport3DTask) -> None:
        self.set_obstacles(task.obstacles)
        self.set_held(task.top_radius + CONTAINER_WALL, task.height + CONTAINER_WALL)

    def goal_configuration(self, task: Transport3DTask) -> np.ndarray | None:
        """Joint angles holding the container upright at the goal (the upright posture family),
        or None if the arm cannot."""
        return self.upright_configuration_at(task.goal, task.start)

    def feasible(self, task: Transport3DTask) -> bool:
        """The start is collision-free, and the arm holds the container upright at the goal with
        neither touching a box or the table."""
        self.set_scene(task)
        if self.collides(task.start):
            return False
        q = self.goal_configuration(task)
        return q is not None and not self.collides(q)


LAYOUTS = ("open", "box", "shelf", "gap")
LAYOUT_WEIGHTS = (0.2, 0.3, 0.25, 0.25)
HAND_HALF_WIDTH = 0.105   #: m, half the Panda hand's width across its fingers (horizontal when upright)


def _box(centre, half) -> tuple[float, ...]:
    return (*(float(v) for v in centre), *(float(v) for v in half))


def _box_layout(rng, p0, p1, top_r, height) -> tuple:
    """One box between start and goal, its top 3-8 cm above the straight path's midpoint."""
    mid = 0.5 * (p0 + p1)
    d = (p1 - p0)[:2] / np.linalg.norm((p1 - p0)[:2])
    along, across = rng.uniform(0.03, 0.06), rng.uniform(0.05, 0.12)
    top = mid[2] + rng.uniform(0.03, 0.08)
    half = np.abs(d) * along + np.abs(d[::-1]) * across      # axis-aligned cover
    return (_box((mid[0], mid[1], 0.5 * top), (half[0], half[1], 0.5 * top)),)


def _shelf_layout(rng, p0, p1, top_r, height) -> tuple:
    """A shelf at the goal: the board the container is set down on, the board above it 3-7 cm
    over the container's brim and a back wall behind the goal, so the container goes in from
    the front or the sides under the upper board, never from above."""
    wall, board = 0.02, 0.02                       # m: the container's wall (the env's), boards
    outer_r = top_r + wall
    radial = p1[:2] / np.linalg.norm(p1[:2])       # out from the arm's base
    floor = p1[2] - wall - 0.015                   # board top 1.5 cm under the container: the
    roof = p1[2] + height + rng.uniform(0.03, 0.07)  # planner keeps 1 cm clear
    half = outer_r + rng.uniform(0.02, 0.05)       # square boards, centred a little beyond the goal
    centre = p1[:2] + radial * rng.uniform(0.0, 0.03)
    back = p1[:2] + radial * (outer_r + rng.uniform(0.01, 0.03) + 0.5 * board)
    return (_box((*centre, floor - 0.5 * board), (half, half, 0.5 * board)),
            _box((*centre, roof + 0.5 * board), (half, half, 0.5 * board)),
            _box((*back, 0.5 * (floor + roof)), (0.5 * board + abs(radial[1]) * half,
                                                 0.5 * board + abs(radial[0]) * half, 0.5 * (roof - floor))))


def _gap_layout(rng, p0, p1, top_r, height) -> tuple:
    """Two posts, from the table to above the arm's reach, 10-15 cm in front of the goal (seen
    from the arm's base) on either side of the line to it: the arm reaches in between them, the
    hand (its widest part, across its fingers) with 1-4 cm to spare on each side."""
    radial = p1[:2] / np.linalg.norm(p1[:2])
    side = np.array([-radial[1], radial[0]])
    front = p1[:2] - radial * rng.uniform(0.10, 0.15)
    post, top = 0.03, 1.2                          # m: half width of a square post; post height
    offset = HAND_HALF_WIDTH + rng.uniform(0.01, 0.04) + post
    return tuple(_box((*(front + s * offset * side), 0.5 * top), (post, post, 0.5 * top))
                 for s in (-1.0, 1.0))


_OBSTACLES = {"open": lambda *_: (), "box": _box_layout, "shelf": _shelf_layout, "gap": _gap_layout}


def sample_feasible_task(rng: np.random.Generator, arm, layout: str | None = None) -> Transport3DTask:
    """A random task of ``layout`` (one of :data:`LAYOUTS`; default: drawn with
    :data:`LAYOUT_WEIGHTS`) that ``arm`` (a ``PandaCarrier``) can start and finish, redrawn
    within the layout until it can."""
    if layout is None:
        layout = LAYOUTS[int(rng.choice(len(LAYOUTS), p=LAYOUT_WEIGHTS))]
    while True:
        task = sample_task(rng, lambda q: arm.container_pose(q)[0], layout)
        if arm.feasible(task):
            return task


def sample_task(rng: np.random.Generator, container_origin, layout: str = "open") -> Transport3DTask:
    """A random task of ``layout`` (one of :data:`LAYOUTS`), not checked for feasibility;
    ``container_origin(q)`` gives the container's origin (m) held by the arm at joint angles q
    (the env's forward kinematics, so that the goal is exactly reachable)."""
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")
    while True:
        start = upright_configuration(rng.uniform(-1.0, 1.0), rng.uniform(-0.5, 0.0),
                                      rng.uniform(-2.4, -2.0))
        base = start[0] + rng.choice([-1.0, 1.0]) * rng.uniform(0.5, 1.0)
        goal_q = upright_configuration(float(np.clip(base, -1.0, 1.0)), rng.uniform(-0.5, 0.2),
                                       rng.uniform(-2.6, -1.9))
        if any(np.any(q < JOINT_LOW) or np.any(q > JOINT_HIGH) for q in (start, goal_q)):
            continue
        p0, p1 = np.asarray(container_origin(start)), np.asarray(container_origin(goal_q))
        if p1[2] < 0.1 or np.linalg.norm(p1 - p0) < 0.15 or np.linalg.norm((p1 - p0)[:2]) < 0.05:
            continue
        top_r = rng.uniform(0.03, MAX_TOP_RADIUS)
        height = rng.uniform(0.06, MAX_HEIGHT)
        return Transport3DTask(start=tuple(start), goal=tuple(p1),
                               obstacles=_OBSTACLES[layout](rng, p0, p1, top_r, height),
                               bottom_radius=top_r * rng.uniform(0.7, 1.0), top_radius=top_r,
                               height=height, fill=rng.uniform(0.3, 0.8), layout=layout)


@functools.lru_cache(maxsize=2)
def transport3d_tasks(split: str = "train") -> tuple[Transport3DTask, ...]:
    """The fixed ``split`` ("train": 1000 tasks, "eval": 100), identical on every machine;
    a task the arm cannot start or finish is redrawn in its layout."""
    if split not in SPLIT_SIZES:
        raise ValueError(f"split must be one of {sorted(SPLIT_SIZES)}, got {split!r}")
    arm = PandaCarrier()
    rng = np.random.default_rng(_SPLIT_SEEDS[split])
    tasks = [sample_feasible_task(rng, arm) for _ in range(SPLIT_SIZES[split])]
    arm.close()
    return tuple(tasks)
