"""Pour3D tasks (Pan & Manocha 2016 and Pan, Park & Manocha 2016 in 3D): a Franka Panda pours from
an axisymmetric source container S into a fixed target T on a counter, past box obstacles.

Coordinates are the robot's (pybullet's): z up, the arm's base at the origin. The counter top
is at z = :data:`COUNTER_HEIGHT` (the arm is mounted beside the counter, its base 0.4 m lower:
the Panda holds a container from the side, its hand's approach axis horizontal, only well above
its base, since its wrist joint 6 ends at 3.75 rad). A :class:`Pour3DTask` fixes

* S: shape (``oval`` bottle with a narrow neck, ``cup``, ``frustum``; the 2D cross-sections of
  ``taigym.sim.container`` revolved about the axis), interior width at the opening, height and
  shape parameters; its start position (its frame's origin, the centre of its inner bottom),
  upright in the hand;
* T: shape (``rect``: a cylinder, ``frustum``, ``cup``), size, position (x, y) on the counter;
* the fill (liquid height / S's height, at rest), the viscosity (Pa s);
* up to :data:`MAX_OBSTACLES` boxes (centre x, y, z and half extents, m) standing on the counter.

The pour happens in the vertical plane through S's start and T (Pan & Manocha 2016 plans there on S's
axisymmetric cross-section): :meth:`Pour3DTask.plane` gives its frame, in which the liquid is
simulated (x from S towards T, y up from the counter, z across), and :meth:`Pour3DTask.section`
the task's cross-section in that plane as a 2D Pour task (``taigym.envs.pour_tasks.PourTask``).

``taigym.envs.tasks("pour3d", split)`` gives 1000 train and 100 eval tasks from fixed seeds
(``Generator.random`` only, identical on every machine): S and T on a line parallel to the
robot's y axis, 0.5-0.6 m in front of its base, within 25 cm of its x axis, 15-40 cm apart either way, S's inner bottom
3-12 cm above T's rim; S 6-9 cm wide (a bottle's body; its neck 0.45-0.6 of that), 8-12 cm tall,
fill 0.3-0.8; T 8-12 cm wide, 6-10 cm tall, holding at least 1.5x S's liquid; viscosity
log-uniform in [1e-3, 0.1] Pa s; no obstacles. :func:`pan_manocha_2016_scenes` has Pan & Manocha 2016's two scenes.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from .checks import bounded_float, finite_tuple, param_items
from .pour_tasks import MAX_VISCOSITY, PourTask, task_from_dict, task_to_dict

COUNTER_HEIGHT = 0.5                 #: m, the counter top above the arm's base
#: the counter as a box (cx, cy, cz, hx, hy, hz), m: in front of the arm, down to its base
COUNTER = (0.8, 0.0, 0.5 * COUNTER_HEIGHT, 0.4, 1.0, 0.5 * COUNTER_HEIGHT)
SOURCE_SHAPES = ("oval", "cup", "frustum")
TARGET_SHAPES = ("rect", "frustum", "cup")
MAX_OBSTACLES = 2
BACK, FRONT = 0.16, 0.14             #: m, room behind S's start and beyond T's centre
DOMAIN_HEIGHT = 0.5                  #: m, the liquid's domain above the counter
DOMAIN_DEPTH = 0.18                  #: m, across the pour plane
MAX_DIAMETER = 0.12                  #: m, widest container interior (walls up to 2.4 cm each side)
MAX_LENGTH = 0.8                     #: m, the domain's length along the plane (2D Pour's width)
#: m, T's wall stands this far above the counter (the simulator's check that a revolved container
#: is inside its domain is conservative by the chord sag of its 16-gon outline)
TARGET_LIFT = 0.003
REACH = ((0.45, 0.75), (-0.45, 0.45), (COUNTER_HEIGHT + 0.05, COUNTER_HEIGHT + 0.45))  #: S's start box, m
SPLIT_SIZES = {"train": 1000, "eval": 100}
_SPLIT_SEEDS = {"train": (20261124, 0), "eval": (20261124, 1)}


def _boxes(value: Any) -> tuple[tuple[float, ...], ...]:
    try:
        rows = [np.asarray(b, dtype=np.float64) for b in value]
    except (TypeError, ValueError):
        rows = [np.full(0, np.nan)]
    form = (f"obstacles must be at most {MAX_OBSTACLES} boxes (cx, cy, cz, hx, hy, hz) in m with "
            f"positive half extents, standing on the counter (bottom at z >= {COUNTER_HEIGHT:g})")
    if len(rows) > MAX_OBSTACLES:
        raise ValueError(f"{form}; got {len(rows)} boxes")
    for i, b in enumerate(rows):
        if b.shape != (6,) or not np.all(np.isfinite(b)) or np.any(b[3:] <= 0) or \
                b[2] - b[5] < COUNTER_HEIGHT - 1e-9:
            raise ValueError(f"obstacles[{i}]: {form}; got {tuple(b.tolist())!r}")
    return tuple(tuple(float(v) for v in b) for b in rows)


@dataclass(frozen=True)
class Pour3DTask:
    """One 3D pouring problem (SI units, robot frame; module docstring). Containers are given by
    their interior dimensions (``width`` at the opening, the diameter); the wall thickness is
    the env's (it depends on the grid). Build variants with ``dataclasses.replace``."""

    source_container: str = "oval"
    source_width: float = 0.04
    source_height: float = 0.12
    source_params: tuple[tuple[str, float], ...] = (("body_width", 0.08), ("neck_height", 0.03))
    target_container: str = "rect"
    target_width: float = 0.10
    target_height: float = 0.08
    target_params: tuple[tuple[str, float], ...] = ()
    source_position: tuple[float, float, float] = (0.55, -0.2, COUNTER_HEIGHT + 0.22)
    target_position: tuple[float, float] = (0.55, 0.2)
    fill: float = 0.6
    viscosity: float = 1e-3
    obstacles: tuple[tuple[float, ...], ...] = ()

    def __post_init__(self) -> None:
        set_ = functools.partial(object.__setattr__, self)
        for role, shapes in (("source", SOURCE_SHAPES), ("target", TARGET_SHAPES)):
            shape = getattr(self, f"{role}_container")
            if shape not in shapes:
                raise ValueError(f"{role}_container must be one of {', '.join(shapes)}; got {shape!r}")
            set_(f"{role}_width", bounded_float(f"{role}_width", getattr(self, f"{role}_width"), 0.02, 0.14))
            set_(f"{role}_height", bounded_float(f"{role}_height", getattr(self, f"{role}_height"), 0.03, 0.16))
            set_(f"{role}_params", param_items(f"{role}_params", getattr(self, f"{role}_params")))
        set_("source_position", finite_tuple("source_position", self.source_position, 3))
        set_("target_position", finite_tuple("target_position", self.target_position, 2))
        for k, (name, (lo, hi)) in enumerate(zip("xyz", REACH)):
            if not lo <= self.source_position[k] <= hi:
                raise ValueError(f"source_position's {name} must be in [{lo:g}, {hi:g}] m (the arm's "
                                 f"reach above the counter), got {self.source_position}")
        for k, (name, (lo, hi)) in enumerate(zip("xy", REACH[:2])):
            if not lo <= self.target_position[k] <= hi:
                raise ValueError(f"target_position's {name} must be in [{lo:g}, {hi:g}] m, got "
                                 f"{self.target_position}")
        fill = float(self.fill) if isinstance(self.fill, (int, float, np.number)) else math.nan
        if not (math.isfinite(fill) and 0.0 < fill <= 1.0):
            raise ValueError(f"fill must be in (0, 1], got {self.fill!r}")
        set_("fill", fill)
        set_("viscosity", bounded_float("viscosity", self.viscosity, 0.0, MAX_VISCOSITY))
        set_("obstacles", _boxes(self.obstacles))
        span = float(np.hypot(*(np.subtract(self.target_position, self.source_position[:2]))))
        if not 0.1 <= span <= MAX_LENGTH - BACK - FRONT:
            raise ValueError(f"the horizontal distance from source_position to target_position must "
                             f"be in [0.1, {MAX_LENGTH - BACK - FRONT:g}] m, got {span:.3f}")
        for role in ("source", "target"):    # the shapes' own checks name the parameter
            widest = 2 * float(np.abs(getattr(self, f"{role}_section")(0.01).interior[:, 0]).max())
            if widest > MAX_DIAMETER:
                raise ValueError(f"{role}_width and {role}_params make the {role} {widest:.3f} m "
                                 f"wide inside; at most {MAX_DIAMETER:g} m fits across the liquid's "
                                 f"domain ({DOMAIN_DEPTH:g} m with the walls)")
        origin, R, (L, _, D) = self.plane()
        corners = origin[:2] + np.array([[a, b] for a in (0, L) for b in (0, D)]) @ R[:2, [0, 2]].T
        lo, hi = np.subtract(COUNTER[:2], COUNTER[3:5]), np.add(COUNTER[:2], COUNTER[3:5])
        if np.any(corners < lo) or np.any(corners > hi):
            raise ValueError(f"source_position and target_position must put the liquid's domain "
                             f"({L:g} x {D:g} m around the pour plane) on the counter, x in "
                             f"[{lo[0]:g}, {hi[0]:g}], y in [{lo[1]:g}, {hi[1]:g}] m")

    # ------------------------------------------------------------------ geometry
    def source_section(self, wall_thickness: float = 0.01):
        """S's cross-section through its axis (``taigym.sim.Container``)."""
        from taigym.sim import container

        return container(self.source_container, self.source_width, self.source_height,
                         wall_thickness=wall_thickness, **dict(self.source_params))

    def target_section(self, wall_thickness: float = 0.01):
        from taigym.sim import container

        return container(self.target_container, self.target_width, self.target_height,
                         wall_thickness=wall_thickness, **dict(self.target_params))

    def source_shape(self, wall_thickness: float = 0.01):
        """S in 3D (``taigym.sim.Container3``): its cross-section revolved about its axis."""
        from taigym.sim import Container3

        return Container3(self.source_section(wall_thickness))

    def target_shape(self, wall_thickness: float = 0.01):
        from taigym.sim import Container3

        return Container3(self.target_section(wall_thickness))

    def plane(self) -> tuple[np.ndarray, np.ndarray, tuple[float, float, float]]:
        """The pour plane's frame, in which the liquid is simulated: (origin (3,), R (3, 3) whose
        columns are its axes in robot coordinates, size (L, H, D) m, the same for every task).
        x runs horizontally from S's start towards T, y up, z = x cross y across; the origin is
        on the counter, :data:`BACK` behind S's start and D / 2 to the side of the plane, so the
        plane is z = D / 2 and the domain [0, L] x [0, H] x [0, D]."""
        s = np.array([*self.source_position[:2], COUNTER_HEIGHT])
        d = np.array([*self.target_position, COUNTER_HEIGHT]) - s
        span = float(np.linalg.norm(d))
        u = d / span
        R = np.column_stack([u, [0.0, 0.0, 1.0], np.cross(u, [0.0, 0.0, 1.0])])
        origin = s - BACK * u - 0.5 * DOMAIN_DEPTH * R[:, 2]
        return origin, R, (MAX_LENGTH, DOMAIN_HEIGHT, DOMAIN_DEPTH)

    def obstacles_in_plane(self) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
        """The boxes in the plane's frame: (centre (3,), half extents along the robot's x, z, -y
        (the box's own axes, (3,)), rotation (3, 3) of those axes in the plane's frame)."""
        origin, R, _ = self.plane()
        own = np.column_stack([[1.0, 0, 0], [0, 0, 1.0], [0, -1.0, 0]])   # robot x, z, -y
        return [(R.T @ (np.array(b[:3]) - origin), np.array([b[3], b[5], b[4]]), R.T @ own)
                for b in self.obstacles]

    def section(self, wall_thickness: float = 0.01) -> PourTask:
        """The task in the pour plane as a 2D Pour task (Pan & Manocha 2016's cross-section): S and T
        through their axes, T static on the floor (the counter; :data:`TARGET_LIFT`), each box's extent along the
        plane where it meets the plane (boxes that miss the plane are left out)."""
        _, _, (L, H, D) = self.plane()
        boxes = []
        for c, half, rot in self.obstacles_in_plane():
            corners = np.array([[sx, sy, sz] for sx in (-1, 1) for sy in (-1, 1) for sz in (-1, 1)]) * half
            pts = corners @ rot.T + c
            if pts[:, 2].min() > 0.5 * D or pts[:, 2].max() < 0.5 * D:
                continue
            x0, x1 = max(pts[:, 0].min(), 0.0), min(pts[:, 0].max(), L)
            y1 = min(pts[:, 1].max(), H)
            if x1 > x0:
                boxes.append((0.5 * (x0 + x1), 0.5 * y1, x1 - x0, y1))
        s_z = self.source_position[2] - COUNTER_HEIGHT
        t_x = BACK + float(np.hypot(*np.subtract(self.target_position, self.source_position[:2])))
        t_y = wall_thickness + TARGET_LIFT
        return PourTask(source_container=self.source_container, source_width=self.source_width,
                        source_height=self.source_height, source_params=self.source_params,
                        target_container=self.target_container, target_width=self.target_width,
                        target_height=self.target_height, target_params=self.target_params,
                        source_pose=(BACK, s_z, 0.0), target_position=(t_x, t_y),
                        target_bounds=(t_x, t_x, t_y, t_y), fill=self.fill,
                        viscosity=self.viscosity, obstacles=tuple(boxes))

    # ------------------------------------------------------------------ serialisation
    def to_dict(self) -> dict:
        """A JSON-ready dict that ``from_dict`` turns back into the task."""
        return task_to_dict(self)

    @classmethod
    def from_dict(cls, d: dict) -> Pour3DTask:
        return task_from_dict(cls, d)


def as_task(value: Any) -> Pour3DTask:
    if isinstance(value, Pour3DTask):
        return value
    if isinstance(value, dict):
        return Pour3DTask.from_dict(value)
    raise ValueError(f"task must be a Pour3DTask or its to_dict(), got {type(value).__name__}")


# ---------------------------------------------------------------------- sampling
def sample_task(rng: np.random.Generator, *, source_container: str | None = None,
                fill: float | None = None, viscosity: float | None = None) -> Pour3DTask:
    """Draw a task from the distribution of the module docstring (``Generator.random`` only).

    Any argument given fixes that variable, as ``pour_tasks.sample_task`` does: the generator
    is advanced by the same draws (a fixed variable consumes its own), so the others do not
    change, and T is still deepened to hold 1.5x S's liquid at the fixed fill.
    """
    u = iter(rng.random(16).tolist())

    def uni(lo: float, hi: float) -> float:
        return lo + (hi - lo) * next(u)

    def pick(options):
        return options[min(int(next(u) * len(options)), len(options) - 1)]

    s_shape, outer_w, s_h, a, b = pick(SOURCE_SHAPES), uni(0.06, 0.09), uni(0.08, 0.12), uni(0, 1), uni(0, 1)
    s_shape = source_container if source_container is not None else s_shape
    s_w, s_params = outer_w, {}
    if s_shape == "frustum":
        s_params = {"bottom_width": (0.5 + 0.3 * a) * outer_w}
    elif s_shape == "cup":
        s_params = {"corner_radius": (0.1 + 0.2 * a) * outer_w}
    else:  # the bottle's body is the cup size, its neck about half as wide
        s_w = (0.45 + 0.15 * a) * outer_w
        s_params = {"body_width": outer_w, "neck_height": (0.2 + 0.15 * b) * s_h}
    t_shape, t_w, t_h, c = pick(TARGET_SHAPES), uni(0.08, 0.12), uni(0.06, 0.10), uni(0, 1)
    t_params = {"frustum": {"bottom_width": (0.6 + 0.3 * c) * t_w},
                "cup": {"corner_radius": (0.1 + 0.2 * c) * t_w}}.get(t_shape, {})
    x, d, sign = uni(0.5, 0.6), uni(0.15, 0.4), pick((-1.0, 1.0))
    y_s = uni(-0.25, 0.25 - d) if sign > 0 else uni(-0.25 + d, 0.25)
    gap, f, mu = uni(0.03, 0.12), uni(0.3, 0.8), 10.0 ** uni(-3.0, -1.0)
    fill = float(fill) if fill is not None else f
    mu = float(viscosity) if viscosity is not None else mu
    task = Pour3DTask(source_container=s_shape, source_width=s_w, source_height=s_h,
                      source_params=s_params, target_container=t_shape, target_width=t_w,
                      target_height=t_h, target_params=t_params, source_position=(x, y_s, 0.0 + REACH[2][1]),
                      target_position=(x, y_s + sign * d), fill=fill, viscosity=mu)
    # T holds 1.5x S's liquid (deepened if needed, up to 12 cm); S's bottom `gap` over T's rim
    need = 1.5 * task.source_shape().liquid_volume(fill)
    have = task.target_shape().interior_volume
    if have < need:
        t_h = min(t_h * need / have, 0.12)
    z = COUNTER_HEIGHT + 0.01 + t_h + gap
    return dataclasses.replace(task, target_height=t_h, source_position=(x, y_s, z))


@functools.lru_cache(maxsize=None)
def pour3d_tasks(split: str = "train") -> tuple[Pour3DTask, ...]:
    """The fixed, seeded split: 1000 ``train`` or 100 ``eval`` tasks (disjoint, identical on
    every machine)."""
    if split not in SPLIT_SIZES:
        raise ValueError(f"split must be one of {tuple(SPLIT_SIZES)}, got {split!r}")
    rng = np.random.default_rng(list(_SPLIT_SEEDS[split]))
    return tuple(sample_task(rng) for _ in range(SPLIT_SIZES[split]))


def pan_manocha_2016_scenes(viscosity: float = 1e-3) -> dict[str, Pour3DTask]:
    """Pan & Manocha 2016's two scenes in 3D, as ``pour_tasks.pan_manocha_2016_scenes`` in 2D: S a bottle (4 cm
    neck on an 8 cm body, 12 cm tall, fill 0.6), T a 10 cm wide, 8 cm tall cylinder, 40 cm
    apart along the robot's y axis, 55 cm in front of its base.

    * ``far``: T far from S; S carries the liquid there and pours.
    * ``block``: a block 4 cm thick and 26 cm tall stands midway, 20 cm wide, across the
      whole liquid domain: S lifts over it and pours past it (the hand, beside S, passes over
      it too; the arm's wrist, further back, beside it).
    """
    far = Pour3DTask(viscosity=viscosity)
    block = dataclasses.replace(far, obstacles=((0.55, 0.0, COUNTER_HEIGHT + 0.13, 0.1, 0.02, 0.13),))
    return {"far": far, "block": block}
