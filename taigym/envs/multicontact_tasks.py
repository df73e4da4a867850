"""MultiContact tasks: scene families that need more than feet, their sampler and fixed splits.

A :class:`MultiContactTask` is one locomotion problem in the manner of Bouyarmane & Kheddar
(multi-contact planning): the humanoid starts standing on the floor at x = 0 facing +x, and must reach the
task's goal (its feet near ``goal``) across an obstacle. SI units, z up.

================  =============================================================================
family            scene (sampled ranges)
================  =============================================================================
``step``          a high step (0.30-0.45 m) starting 0.35-0.6 m ahead, a handrail (bar, r = 2 cm)
                  on the left (y = 0.35 m) 0.70 m above the step top; goal on the step
``gap``           a gap 0.30-0.50 m wide in the floor starting 0.3-0.5 m ahead (the pit is
                  1.5 m deep) and a wall 0.45 m beyond it, facing the robot: too wide to step
                  across on one foot, crossed leaning on the wall with a hand; goal between the
                  gap and the wall
``slope``         a slope of 28-36 deg (friction 0.55, i.e. steeper than the friction cone of a
                  foot alone, 28.8 deg, in most tasks) starting 0.3-0.5 m ahead, with a handrail
                  0.85 m above it on the left; goal 0.8-1.2 m up the slope. The right hand may
                  lean on the slope: on one sole and the rail hand, the hand's uphill pull beside
                  the sole twists the body, which one sole's friction barely holds
``ladder``        a ladder inclined at 65-75 deg, rungs (r = 2 cm) every 0.25-0.30 m from one
                  rung-spacing up; goal: the feet on the third rung
``soft``          a step (0.25-0.40 m) whose first 0.9 m is a linear-elastic pad (as wide as the step,
                  0.1 m thick; Young's modulus E 0.25-4 MPa, log-uniform around the paper's
                  1 MPa; nu = 0.4, rho = 1000 kg/m^3; :class:`taigym.sim.soft_support.SoftBlock`)
                  on a rigid base, starting 0.35-0.6 m ahead, with the step family's handrail;
                  goal on the pad as the step family's, 0.55 m in (the paper's extension to
                  linear-elasticity models)
================  =============================================================================

Bouyarmane & Kheddar's contacts are between a robot link surface and an environment surface, at a position
(x, y) and yaw on that surface. :meth:`MultiContactTask.surfaces` lists the environment
surfaces as :class:`Surface` records (planes and bars, each with a 1-D position coordinate u
along its tangent; the lateral coordinate is fixed by the limb's side). ``taigym.envs.tasks(
"multicontact", split)`` gives 1000 train and 100 eval tasks (25 % per family of the four rigid
ones) and ``taigym.envs.tasks("multicontact_soft", split)`` 400 train and 40 eval ``soft`` tasks,
from fixed seeds, with ``Generator.random`` only, identical on every machine. The sampler without
a family draws among the four rigid families.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
from dataclasses import dataclass

import numpy as np

from taigym.models.contact_surface import Surface
from taigym.sim.soft_support import PAD_SIZE, SoftBlock

from .checks import bounded_float

RIGID_FAMILIES = ("step", "gap", "slope", "ladder")
FAMILIES = RIGID_FAMILIES + ("soft",)
SPLIT_SIZES = {"train": 1000, "eval": 100}
_SPLIT_SEEDS = {"train": (20261122, 0), "eval": (20261122, 1)}
SOFT_SPLIT_SIZES = {"train": 400, "eval": 40}
_SOFT_SPLIT_SEEDS = {"train": (20261127, 0), "eval": (20261127, 1)}
SOFT_LENGTH = PAD_SIZE[0]   #: m of the soft step covered by its pad, from the step's front edge
SOFT_GOAL = 0.55            #: m from the step's front edge to the soft family's goal (as the step's)
FLOOR_FRICTION = 0.9
SLOPE_FRICTION = 0.55
BAR_RADIUS = 0.02
RAIL_Y = 0.35               #: m, handrails on the robot's left
WALL_GAP = 0.45             #: m from the gap's far edge to the face of the wall beyond it
LADDER_RUNGS = 6
GOAL_RUNG = 3               #: ladder goal: the feet on this rung (1 = lowest)
RANGES = {
    "step": {"start": (0.35, 0.6), "height": (0.30, 0.45)},
    "gap": {"start": (0.3, 0.5), "width": (0.30, 0.50)},
    "slope": {"start": (0.3, 0.5), "angle": (math.radians(28), math.radians(36)), "goal": (0.8, 1.2)},
    "ladder": {"start": (0.35, 0.5), "angle": (math.radians(65), math.radians(75)), "spacing": (0.25, 0.30)},
    "soft": {"start": (0.35, 0.6), "height": (0.25, 0.40), "stiffness": (2.5e5, 4e6)},   # E log-uniform, Pa
}


_SIZE_NAME = {"step": "height", "gap": "width", "slope": "angle", "ladder": "angle", "soft": "height"}


@dataclass(frozen=True)
class MultiContactTask:
    """One multi-contact locomotion problem (SI units, angles in rad).

    ``start`` is the distance (m) from the robot's start (x = 0) to the obstacle; ``size`` the
    family's main dimension: step height, gap width, slope angle or ladder angle (rad);
    ``spacing`` the ladder's rung spacing (m, ladder only); ``goal_distance`` how far up the
    slope the goal is (m, slope only); ``stiffness`` the soft pad's Young's modulus (Pa, soft only).
    """

    family: str = "step"
    start: float = 0.45
    size: float = 0.35
    spacing: float = 0.28
    goal_distance: float = 1.0
    stiffness: float = 1e6

    def __post_init__(self) -> None:
        if self.family not in FAMILIES:
            raise ValueError(f"family must be one of {', '.join(FAMILIES)}; got {self.family!r}")
        set_ = functools.partial(object.__setattr__, self)
        r = RANGES[self.family]
        set_("start", bounded_float("start", self.start, 0.2, 1.0))
        name = _SIZE_NAME[self.family]
        lo, hi = r[name]
        set_("size", bounded_float(f"size ({self.family} {name})", self.size, 0.8 * lo, 1.1 * hi))
        set_("spacing", bounded_float("spacing", self.spacing, 0.2, 0.35))
        set_("goal_distance", bounded_float("goal_distance", self.goal_distance, 0.5, 1.5))
        lo, hi = RANGES["soft"]["stiffness"]
        set_("stiffness", bounded_float("stiffness", self.stiffness, 0.5 * lo, 2.0 * hi))

    # ------------------------------------------------------------------ geometry
    def scene(self) -> tuple[list, list]:
        """(boxes, bars) for :func:`taigym.sim.humanoid.build_scene`: boxes (centre, half
        extents, pitch, friction), bars (centre, axis, half length, radius, friction)."""
        s, f = self.start, self.family
        boxes, bars = [], []
        if f == "gap":
            w = self.size
            boxes.append(((s - 1.5, 0.0, -0.25), (1.5, 1.5, 0.25), 0.0, FLOOR_FRICTION))
            boxes.append(((s + w + 1.5, 0.0, -0.25), (1.5, 1.5, 0.25), 0.0, FLOOR_FRICTION))
            boxes.append(((s + w / 2, 0.0, -1.6), (w / 2 + 0.1, 1.5, 0.1), 0.0, FLOOR_FRICTION))
            boxes.append(((s + w + WALL_GAP + 0.05, 0.0, 1.0), (0.05, 1.5, 1.0), 0.0, FLOOR_FRICTION))
        else:
            boxes.append(((1.0, 0.0, -0.25), (4.0, 1.5, 0.25), 0.0, FLOOR_FRICTION))
        if f == "step":
            h = self.size
            boxes.append(((s + 0.75, 0.0, h / 2), (0.75, 1.0, h / 2), 0.0, FLOOR_FRICTION))
            bars.append(((s + 0.2, RAIL_Y, h + 0.7), "x", 1.4, BAR_RADIUS, FLOOR_FRICTION))
        elif f == "soft":
            # the rigid step: under the pad up to its bottom, full height behind it
            h, T, L = self.size, PAD_SIZE[2], SOFT_LENGTH
            boxes.append(((s + L / 2, 0.0, (h - T) / 2), (L / 2, 1.0, (h - T) / 2), 0.0, FLOOR_FRICTION))
            boxes.append(((s + L + (1.5 - L) / 2, 0.0, h / 2), ((1.5 - L) / 2, 1.0, h / 2), 0.0, FLOOR_FRICTION))
            bars.append(((s + 0.2, RAIL_Y, h + 0.7), "x", 1.4, BAR_RADIUS, FLOOR_FRICTION))
        elif f == "slope":
            a, L = self.size, 2.0
            # a thick slab whose top face is the slope, from (s, 0) rising at angle a
            c = np.array([s + 0.5 * L * math.cos(a), 0.0, 0.5 * L * math.sin(a)])
            c += -0.25 * np.array([-math.sin(a), 0.0, math.cos(a)])
            boxes.append((tuple(c), (L / 2, 1.0, 0.25), -a, SLOPE_FRICTION))
            top = (s + L * math.cos(a), L * math.sin(a))
            boxes.append(((top[0] + 0.5, 0.0, top[1] / 2), (0.5, 1.0, top[1] / 2), 0.0, FLOOR_FRICTION))
            mid = np.array([s + 0.5 * L * math.cos(a), RAIL_Y, 0.5 * L * math.sin(a) + 0.85])
            bars.append((tuple(mid), (math.cos(a), 0.0, math.sin(a)), L / 2 + 0.6, BAR_RADIUS, FLOOR_FRICTION))
        elif f == "ladder":
            for x, z in self.rungs():
                bars.append(((x, 0.0, z), "y", 0.3, BAR_RADIUS, FLOOR_FRICTION))
        return boxes, bars

    def soft_blocks(self) -> list[SoftBlock]:
        """The scene's linear-elastic pads (soft family: the step's first SOFT_LENGTH m, its top
        level with the step's); :meth:`scene` holds the rigid geometry only."""
        if self.family != "soft":
            return []
        return [SoftBlock(x0=self.start, top=self.size, E=self.stiffness)]

    def rungs(self) -> list[tuple[float, float]]:
        """Ladder rung axes (x, z), m, lowest first."""
        a, d = self.size, self.spacing
        return [(self.start + k * d * math.cos(a), k * d * math.sin(a)) for k in range(1, LADDER_RUNGS + 1)]

    def ground_height(self, x: float) -> float:
        """Height of the walkable ground below x (m; the pit's bottom in the gap)."""
        s = self.start
        if self.family in ("step", "soft"):
            return self.size if s <= x <= s + 1.5 else 0.0
        if self.family == "gap":
            return -1.5 if s < x < s + self.size else 0.0
        if self.family == "slope":
            L, a = 2.0, self.size
            if x <= s:
                return 0.0
            return min(x - s, L * math.cos(a)) * math.tan(a)
        return 0.0

    def goal(self) -> np.ndarray:
        """Goal point (m): where the midpoint of the soles should end."""
        s, f = self.start, self.family
        if f == "step":
            return np.array([s + 0.55, 0.0, self.size])
        if f == "soft":
            return np.array([s + SOFT_GOAL, 0.0, self.size])
        if f == "gap":
            return np.array([s + self.size + 0.22, 0.0, 0.0])
        if f == "slope":
            a = self.size
            return np.array([s + self.goal_distance * math.cos(a), 0.0, self.goal_distance * math.sin(a)])
        x, z = self.rungs()[GOAL_RUNG - 1]
        return np.array([x, 0.0, z + BAR_RADIUS])

    @property
    def goal_radius(self) -> float:
        """m: success when the soles' midpoint is this close to :meth:`goal`."""
        return 0.15 if self.family == "ladder" else 0.3

    def surfaces(self) -> list[Surface]:
        """The environment contact surfaces of Bouyarmane & Kheddar's contacts (module docstring)."""
        s, f = self.start, self.family
        feet, hands, left = ("right_foot", "left_foot"), ("right_hand", "left_hand"), ("left_hand",)
        up = (0.0, 0.0, 1.0)
        out = []
        if f == "gap":
            w = self.size
            out.append(Surface("floor", "plane", (0, 0, 0), (1, 0, 0), up, (-0.5, s - 0.11), FLOOR_FRICTION, feet))
            out.append(Surface("far_floor", "plane", (0, 0, 0), (1, 0, 0), up, (s + w + 0.11, s + w + WALL_GAP - 0.13),
                               FLOOR_FRICTION, feet))
            # u: the height of the hand on the wall
            out.append(Surface("wall", "plane", (s + w + WALL_GAP, 0, 0), (0, 0, 1), (-1, 0, 0), (0.8, 1.4),
                               FLOOR_FRICTION, hands))
        elif f == "step":
            h = self.size
            out.append(Surface("floor", "plane", (0, 0, 0), (1, 0, 0), up, (-0.5, s - 0.11), FLOOR_FRICTION, feet))
            out.append(Surface("step", "plane", (0, 0, h), (1, 0, 0), up, (s + 0.11, s + 1.4), FLOOR_FRICTION, feet))
            out.append(Surface("rail", "bar", (0, RAIL_Y, h + 0.7), (1, 0, 0), up, (s - 1.0, s + 1.5),
                               FLOOR_FRICTION, left, lateral=False, radius=BAR_RADIUS))
        elif f == "soft":
            h = self.size
            # a sole on the floor stays 5 cm short of the step's face (at the face, the toe dragged up
            # it in the swing onto the pad: the foot pitched and the shin caught the pad's edge)
            out.append(Surface("floor", "plane", (0, 0, 0), (1, 0, 0), up, (-0.5, s - 0.16), FLOOR_FRICTION, feet))
            # soles wholly on the pad, clear of its rigid rim (1 cm) and a centimetre more
            out.append(Surface("step", "plane", (0, 0, h), (1, 0, 0), up, (s + 0.13, s + SOFT_LENGTH - 0.13),
                               FLOOR_FRICTION, feet, solid=self.soft_blocks()[0]))
            out.append(Surface("rail", "bar", (0, RAIL_Y, h + 0.7), (1, 0, 0), up, (s - 1.0, s + 1.5),
                               FLOOR_FRICTION, left, lateral=False, radius=BAR_RADIUS))
        elif f == "slope":
            a = self.size
            t = (math.cos(a), 0.0, math.sin(a))
            n = (-math.sin(a), 0.0, math.cos(a))
            # a sole on the floor ends 1 cm short of the slope's foot: at s - 0.05 its toe was 6 cm up
            # the slope (3 cm into it), and the executed sole rested on the slope's edge, tilted 12 deg,
            # the body 2-4 cm higher than planned (eval slope 0: the right hand stopped short of the slope)
            out.append(Surface("floor", "plane", (0, 0, 0), (1, 0, 0), up, (-0.5, s - 0.12), FLOOR_FRICTION, feet))
            out.append(Surface("slope", "plane", (s, 0, 0), t, n, (0.05, 1.9), SLOPE_FRICTION, feet + ("right_hand",)))
            out.append(Surface("rail", "bar", (s, RAIL_Y, 0.85), t, up, (-1.0, 2.0), FLOOR_FRICTION, left,
                               lateral=False, radius=BAR_RADIUS))
        else:
            out.append(Surface("floor", "plane", (0, 0, 0), (1, 0, 0), up, (-0.5, s - 0.12), FLOOR_FRICTION, feet))
            for k, (x, z) in enumerate(self.rungs(), start=1):
                out.append(Surface(f"rung{k}", "bar", (x, 0.0, z), (1, 0, 0), up, (0.0, 0.0), FLOOR_FRICTION,
                                   feet + hands, radius=BAR_RADIUS))
        return out

    # ------------------------------------------------------------------ serialisation
    def to_dict(self) -> dict:
        """A JSON-ready dict that ``from_dict`` turns back into the task."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "MultiContactTask":
        if not isinstance(d, dict):
            raise ValueError(f"from_dict needs a dict, got {type(d).__name__}")
        unknown = sorted(set(d) - {f.name for f in dataclasses.fields(cls)})
        if unknown:
            raise ValueError(f"unknown MultiContactTask field(s): {', '.join(unknown)}")
        return cls(**d)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)


def sample_task(rng: np.random.Generator, family: str | None = None) -> MultiContactTask:
    """Draw a task; ``family`` fixes the family (default: one of the four rigid ones). Five
    draws in a fixed order (the rigid families' splits depend on it), a sixth for the soft
    family's stiffness (log-uniform)."""
    u = rng.random(5)
    fam = RIGID_FAMILIES[min(int(u[0] * len(RIGID_FAMILIES)), len(RIGID_FAMILIES) - 1)]
    fam = family if family is not None else fam
    if fam not in FAMILIES:
        raise ValueError(f"family must be one of {', '.join(FAMILIES)}; got {fam!r}")
    r = RANGES[fam]
    lerp = lambda rng_, x: rng_[0] + (rng_[1] - rng_[0]) * float(x)  # noqa: E731
    extra = {}
    if fam == "soft":
        lo, hi = r["stiffness"]
        extra["stiffness"] = float(math.exp(lerp((math.log(lo), math.log(hi)), rng.random())))
    return MultiContactTask(
        family=fam, start=lerp(r["start"], u[1]), size=lerp(r[_SIZE_NAME[fam]], u[2]),
        spacing=lerp(RANGES["ladder"]["spacing"], u[3]), goal_distance=lerp(RANGES["slope"]["goal"], u[4]), **extra)


@functools.lru_cache(maxsize=None)
def _split(split: str) -> tuple[MultiContactTask, ...]:
    rng = np.random.default_rng(list(_SPLIT_SEEDS[split]))
    n = SPLIT_SIZES[split]
    # a quarter per family, interleaved, so that any prefix is balanced
    return tuple(sample_task(rng, RIGID_FAMILIES[i % len(RIGID_FAMILIES)]) for i in range(n))


@functools.lru_cache(maxsize=None)
def _soft_split(split: str) -> tuple[MultiContactTask, ...]:
    rng = np.random.default_rng(list(_SOFT_SPLIT_SEEDS[split]))
    return tuple(sample_task(rng, "soft") for _ in range(SOFT_SPLIT_SIZES[split]))


def multicontact_tasks(split: str = "train") -> tuple[MultiContactTask, ...]:
    """The fixed, seeded split of the four rigid families: 1000 ``train`` or 100 ``eval`` tasks
    (disjoint, identical on every machine)."""
    if split not in SPLIT_SIZES:
        raise ValueError(f"split must be one of {tuple(SPLIT_SIZES)}, got {split!r}")
    return _split(split)


def soft_tasks(split: str = "train") -> tuple[MultiContactTask, ...]:
    """The fixed, seeded split of the ``soft`` family: 400 ``train`` or 40 ``eval`` tasks."""
    if split not in SOFT_SPLIT_SIZES:
        raise ValueError(f"split must be one of {tuple(SOFT_SPLIT_SIZES)}, got {split!r}")
    return _soft_split(split)
