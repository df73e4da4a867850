"""Pour tasks: the frozen dataclass, its sampler and the fixed train/eval splits.

A :class:`PourTask` is one instance of Pan & Manocha 2017's pouring problem (§VI-A, Fig. 4c): a source
container S holding liquid, a target container T moving at constant velocity, the fill level,
the viscosity and the initial liquid velocity (TRANSFER+ZERO: at rest; TRANSFER+FOLLOW: moving
with S). Everything is in SI units; poses are those of the containers' frames (origin at the
centre of the inner bottom, y along the axis, DESIGN.md §2).

Kitchen scaling of Pan & Manocha 2017's distribution (the paper's workspace is metres-large):

=====================  ===========================  =========================================
variable               Pan & Manocha 2017           here (``sample_task``)
=====================  ===========================  =========================================
S - T, horizontal      [-3, 0] m                    x_S - x_T in [-0.40, -0.05] m (S on the
                                                    left, as in the paper)
S - T, vertical        [-3, 3] m                    S's inner bottom 3-12 cm above T's rim at
                                                    its highest (pouring from above)
speed of T             [-5, 5]^2 m/s                vx in [-0.3, 0.3], vy in [-0.05, 0.05],
                                                    |v| <= 0.3 m/s; T bounces (elastic) off a
                                                    box that keeps it on the table
fill level             [0.3, 0.8]                   [0.3, 0.8] (same)
containers             rect (test: + 2 shapes)      S: rect, frustum, cup, oval bottle, 6-10 cm
                                                    wide, 8-12 cm tall; T: rect, frustum, cup,
                                                    8-12 cm wide, 6-10 cm tall, holding at
                                                    least 1.5x S's liquid
viscosity              1e-3 (test: up to 0.125)     log-uniform in [1e-3, 0.1] Pa s
initial liquid         FOLLOW or ZERO (datasets)    50/50; FOLLOW: S starts moving towards T
velocity                                            at 0-0.2 m/s and the liquid with it
=====================  ===========================  =========================================

The domain is :data:`DOMAIN` = 0.8 m x 0.5 m; its edges are solid (the bottom one is the
floor). A task may also hold up to :data:`MAX_OBSTACLES` static boxes (``obstacles``, e.g. seed
000's tall block between S and T); sampled tasks and the fixed splits have none.
``taigym.envs.tasks("pour", split)`` gives 1000 train and 100 eval tasks drawn from fixed seeds
with ``Generator.random`` only, so the lists are identical on every machine, and 400 ``val``
tasks (own seed) for model selection (a DAgger round, a BC snapshot) off both.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from .checks import bounded_float, finite_tuple, param_items

DOMAIN = (0.8, 0.5)                 #: (width, height) of the pouring scene, m
TARGET_BOUNDS = (0.12, 0.68, 0.03, 0.09)  #: box (x_lo, x_hi, y_lo, y_hi) of T's frame origin, m
SOURCE_SHAPES = ("rect", "frustum", "cup", "oval")
TARGET_SHAPES = ("rect", "frustum", "cup")
ALL_SHAPES = ("rect", "frustum", "oval", "cup")
LIQUID_VELOCITIES = ("zero", "follow")
MAX_TARGET_SPEED = 0.3              #: m/s, sampled speeds of T
MAX_VISCOSITY = 0.5                 #: Pa s, upper limit accepted anywhere (honey-like)
SPLIT_SIZES = {"train": 1000, "eval": 100, "val": 400}
MAX_OBSTACLES = 2                   #: static boxes per task (the env's world has this many slots)
OBSTACLE_SIZE = (0.005, 0.5)        #: m, range of an obstacle's width and height
_SPLIT_SEEDS = {"train": (20260301, 0), "eval": (20260301, 1), "val": (20260301, 3)}
_EXTRA_TRAIN_SEED = (20260301, 2)   #: extra_train_task: more tasks from the train distribution


def _obstacles(value: Any) -> tuple[tuple[float, float, float, float], ...]:
    """Validated ``obstacles``: at most MAX_OBSTACLES boxes (x_centre, y_centre, width, height)
    in m, finite, sized in OBSTACLE_SIZE and inside the domain."""
    lo, hi = OBSTACLE_SIZE
    W, H = DOMAIN
    form = (f"obstacles must be at most {MAX_OBSTACLES} boxes (x_centre, y_centre, width, height) "
            f"in m with width and height in [{lo:g}, {hi:g}], inside the domain [0, {W:g}] x "
            f"[0, {H:g}]")
    try:
        a = np.asarray(value if len(value) else np.zeros((0, 4)), dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError(f"{form}; got {value!r}") from None
    if a.ndim != 2 or a.shape[1] != 4 or len(a) > MAX_OBSTACLES or not np.all(np.isfinite(a)):
        raise ValueError(f"{form}; got {value!r}")
    tol = 1e-9
    for i, (x, y, w, h) in enumerate(a.tolist()):
        if not (lo <= w <= hi and lo <= h <= hi):
            raise ValueError(f"obstacles[{i}]: width and height must be in [{lo:g}, {hi:g}] m, "
                             f"got {w!r} x {h!r}")
        if not (x - 0.5 * w >= -tol and x + 0.5 * w <= W + tol and y - 0.5 * h >= -tol
                and y + 0.5 * h <= H + tol):
            raise ValueError(f"obstacles[{i}]: the box must lie inside the domain [0, {W:g}] x "
                             f"[0, {H:g}] m, got centre ({x!r}, {y!r}), size {w!r} x {h!r}")
    return tuple(tuple(row) for row in a.tolist())


def task_to_dict(task) -> dict:
    """A pour task (2D or 3D) as a JSON-ready dict: shape parameters as a dict, tuples as lists."""
    d = dataclasses.asdict(task)
    for k, v in d.items():
        if k.endswith("_params"):
            d[k] = {name: val for name, val in v}
        elif k == "obstacles":
            d[k] = [list(box) for box in v]
        elif isinstance(v, tuple):
            d[k] = list(v)
    return d


def task_from_dict(cls, d: dict):
    """The task of class ``cls`` from its ``task_to_dict``; ValueError on unknown fields."""
    if not isinstance(d, dict):
        raise ValueError(f"from_dict needs a dict, got {type(d).__name__}")
    unknown = sorted(set(d) - {f.name for f in dataclasses.fields(cls)})
    if unknown:
        raise ValueError(f"unknown {cls.__name__} field(s): {', '.join(unknown)}")
    kw = {}
    for k, v in d.items():
        kw[k] = tuple(sorted(dict(v).items())) if k.endswith("_params") else \
            v if k == "obstacles" else tuple(v) if isinstance(v, list) else v
    return cls(**kw)


def reflect(p0: float, v: float, t: float, lo: float, hi: float) -> tuple[float, float]:
    """Position and velocity at time t of a point starting at p0 with velocity v that bounces
    elastically between lo and hi (a triangle wave)."""
    span = hi - lo
    if span <= 0.0 or v == 0.0:
        return min(max(p0, lo), hi), (0.0 if span <= 0.0 else v)
    s = (p0 - lo + v * t) % (2.0 * span)
    if s <= span:
        return lo + s, v
    return lo + 2.0 * span - s, -v


@dataclass(frozen=True)
class PourTask:
    """One pouring problem (SI units). Build variants with ``dataclasses.replace``.

    Containers are given by their interior dimensions (``width`` at the opening, ``height``) and
    shape parameters (see ``taigym.sim.container``); the wall thickness is the env's (it depends
    on the grid resolution). ``target_bounds`` = (x_lo, x_hi, y_lo, y_hi) is the box in which
    T's frame origin moves at ``target_velocity``, bouncing elastically off its sides.
    ``obstacles`` are static solid boxes (x_centre, y_centre, width, height) in m, at most
    :data:`MAX_OBSTACLES`; a block standing on the floor has y_centre = height / 2.
    """

    source_container: str = "rect"
    source_width: float = 0.08
    source_height: float = 0.10
    source_params: tuple[tuple[str, float], ...] = ()
    target_container: str = "rect"
    target_width: float = 0.10
    target_height: float = 0.08
    target_params: tuple[tuple[str, float], ...] = ()
    source_pose: tuple[float, float, float] = (0.2, 0.3, 0.0)
    source_velocity: tuple[float, float] = (0.0, 0.0)
    target_position: tuple[float, float] = (0.45, 0.05)
    target_velocity: tuple[float, float] = (0.0, 0.0)
    target_bounds: tuple[float, float, float, float] = TARGET_BOUNDS
    fill: float = 0.6
    viscosity: float = 1e-3
    liquid_velocity: str = "zero"
    obstacles: tuple[tuple[float, float, float, float], ...] = ()

    def __post_init__(self) -> None:
        set_ = functools.partial(object.__setattr__, self)
        for role, shapes in (("source", ALL_SHAPES), ("target", ALL_SHAPES)):
            shape = getattr(self, f"{role}_container")
            if shape not in shapes:
                raise ValueError(f"{role}_container must be one of {', '.join(shapes)}; got {shape!r}")
            set_(f"{role}_width", bounded_float(f"{role}_width", getattr(self, f"{role}_width"), 0.01, 0.4))
            set_(f"{role}_height", bounded_float(f"{role}_height", getattr(self, f"{role}_height"), 0.01, 0.4))
            set_(f"{role}_params", param_items(f"{role}_params", getattr(self, f"{role}_params")))
        set_("source_pose", finite_tuple("source_pose", self.source_pose, 3))
        set_("source_velocity", finite_tuple("source_velocity", self.source_velocity, 2))
        set_("target_position", finite_tuple("target_position", self.target_position, 2))
        set_("target_velocity", finite_tuple("target_velocity", self.target_velocity, 2))
        set_("target_bounds", finite_tuple("target_bounds", self.target_bounds, 4))
        x_lo, x_hi, y_lo, y_hi = self.target_bounds
        if not (0 <= x_lo <= x_hi <= DOMAIN[0] and 0 <= y_lo <= y_hi <= DOMAIN[1]):
            raise ValueError(f"target_bounds must satisfy 0 <= x_lo <= x_hi <= {DOMAIN[0]} and "
                             f"0 <= y_lo <= y_hi <= {DOMAIN[1]}, got {self.target_bounds}")
        x, y = self.target_position
        if not (x_lo - 1e-9 <= x <= x_hi + 1e-9 and y_lo - 1e-9 <= y <= y_hi + 1e-9):
            raise ValueError(f"target_position {self.target_position} must lie in target_bounds "
                             f"{self.target_bounds}")
        if math.hypot(*self.target_velocity) > 1.0:
            raise ValueError(f"target_velocity must have a speed <= 1 m/s, got {self.target_velocity}")
        if math.hypot(*self.source_velocity) > 1.0:
            raise ValueError(f"source_velocity must have a speed <= 1 m/s, got {self.source_velocity}")
        fill = float(self.fill) if isinstance(self.fill, (int, float, np.number)) else math.nan
        if not (math.isfinite(fill) and 0.0 < fill <= 1.0):
            raise ValueError(f"fill must be in (0, 1], got {self.fill!r}")
        set_("fill", fill)
        set_("viscosity", bounded_float("viscosity", self.viscosity, 0.0, MAX_VISCOSITY))
        if self.liquid_velocity not in LIQUID_VELOCITIES:
            raise ValueError(f"liquid_velocity must be one of {LIQUID_VELOCITIES}, "
                             f"got {self.liquid_velocity!r}")
        set_("obstacles", _obstacles(self.obstacles))

    # ------------------------------------------------------------------ geometry
    def source_shape(self, wall_thickness: float = 0.01):
        """S as a ``taigym.sim.Container`` with the given wall thickness (m)."""
        from taigym.sim import container

        return container(self.source_container, self.source_width, self.source_height,
                         wall_thickness=wall_thickness, **dict(self.source_params))

    def target_shape(self, wall_thickness: float = 0.01):
        """T as a ``taigym.sim.Container`` with the given wall thickness (m)."""
        from taigym.sim import container

        return container(self.target_container, self.target_width, self.target_height,
                         wall_thickness=wall_thickness, **dict(self.target_params))

    def obstacle_boxes(self) -> list:
        """The obstacles as (``taigym.sim.Box``, pose (x, y, 0)) pairs, poses in m."""
        from taigym.sim import Box

        return [(Box(w, h), np.array([x, y, 0.0])) for x, y, w, h in self.obstacles]

    def target_pose_at(self, t: float) -> np.ndarray:
        """T's pose (x, y, 0) at time t (s): constant velocity, elastic bounces in target_bounds."""
        x_lo, x_hi, y_lo, y_hi = self.target_bounds
        x, _ = reflect(self.target_position[0], self.target_velocity[0], t, x_lo, x_hi)
        y, _ = reflect(self.target_position[1], self.target_velocity[1], t, y_lo, y_hi)
        return np.array([x, y, 0.0])

    def target_velocity_at(self, t: float) -> np.ndarray:
        """T's velocity (vx, vy, 0) at time t (s), signs flipped by the bounces."""
        x_lo, x_hi, y_lo, y_hi = self.target_bounds
        _, vx = reflect(self.target_position[0], self.target_velocity[0], t, x_lo, x_hi)
        _, vy = reflect(self.target_position[1], self.target_velocity[1], t, y_lo, y_hi)
        return np.array([vx, vy, 0.0])

    def target_state_at(self, t: float) -> tuple[tuple[float, float], tuple[float, float]]:
        """T's position (x, y) and velocity (vx, vy) at time t (s) as Python floats: what
        ``target_pose_at`` and ``target_velocity_at`` give, in one pass (the env's step path)."""
        x_lo, x_hi, y_lo, y_hi = self.target_bounds
        x, vx = reflect(self.target_position[0], self.target_velocity[0], t, x_lo, x_hi)
        y, vy = reflect(self.target_position[1], self.target_velocity[1], t, y_lo, y_hi)
        return (x, y), (vx, vy)

    # ------------------------------------------------------------------ serialisation
    def to_dict(self) -> dict:
        """A JSON-ready dict (lists and plain floats) that ``from_dict`` turns back into the task."""
        return task_to_dict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "PourTask":
        return task_from_dict(cls, d)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)


# ---------------------------------------------------------------------- sampling
def sample_task(rng: np.random.Generator, *, source_container: str | None = None,
                target_container: str | None = None, fill: float | None = None,
                viscosity: float | None = None, target_velocity=None,
                liquid_velocity: str | None = None) -> PourTask:
    """Draw a task from the kitchen-scaled distribution (module docstring).

    Any argument given fixes that variable. The generator is always advanced by the same number
    of draws (fixed variables consume theirs too), so fixing one variable does not change the
    others; only ``Generator.random`` is used, which keeps the draws identical across platforms.
    """
    u = rng.random(24)  # every draw, in a fixed order
    k = iter(range(24))

    def uni(lo: float, hi: float) -> float:
        return lo + (hi - lo) * float(u[next(k)])

    def pick(options):
        return options[min(int(u[next(k)] * len(options)), len(options) - 1)]

    s_shape = pick(SOURCE_SHAPES)
    s_shape = source_container if source_container is not None else s_shape
    outer_w, s_h = uni(0.06, 0.10), uni(0.08, 0.12)
    a, b = uni(0.0, 1.0), uni(0.0, 1.0)
    if s_shape == "frustum":
        s_w, s_params = outer_w, {"bottom_width": (0.5 + 0.3 * a) * outer_w}
    elif s_shape == "cup":
        s_w, s_params = outer_w, {"corner_radius": (0.1 + 0.2 * a) * outer_w}
    elif s_shape == "oval":  # the bottle's body is the cup size, its neck half as wide
        s_w = (0.45 + 0.15 * a) * outer_w
        s_params = {"body_width": outer_w, "neck_height": (0.2 + 0.15 * b) * s_h}
    else:
        s_w, s_params = outer_w, {}

    t_shape = pick(TARGET_SHAPES)
    t_shape = target_container if target_container is not None else t_shape
    t_w, t_h = uni(0.08, 0.12), uni(0.06, 0.10)
    c = uni(0.0, 1.0)
    t_params = {"frustum": {"bottom_width": (0.6 + 0.3 * c) * t_w},
                "cup": {"corner_radius": (0.1 + 0.2 * c) * t_w}}.get(t_shape, {})
    if t_shape == "oval":
        t_params = {"body_width": 1.5 * t_w}

    f = uni(0.3, 0.8)
    f = float(fill) if fill is not None else f
    mu = 10.0 ** uni(-3.0, -1.0)
    mu = float(viscosity) if viscosity is not None else mu
    speed, vy = uni(-MAX_TARGET_SPEED, MAX_TARGET_SPEED), uni(-0.05, 0.05)
    vel = (speed, vy)
    if math.hypot(*vel) > MAX_TARGET_SPEED:
        vel = tuple(MAX_TARGET_SPEED * np.asarray(vel) / math.hypot(*vel))
    vel = tuple(target_velocity) if target_velocity is not None else vel
    follow = pick(LIQUID_VELOCITIES)
    follow = liquid_velocity if liquid_velocity is not None else follow
    s_speed = uni(0.0, 0.2)

    x_lo, x_hi, y_lo, y_hi = TARGET_BOUNDS
    d = uni(0.05, 0.40)                              # x_T - x_S at t = 0
    x_t = uni(max(x_lo, 0.10 + d), x_hi)
    y_t = uni(y_lo, y_hi)
    gap = uni(0.03, 0.12)                           # S's inner bottom over T's highest rim
    task = PourTask(
        source_container=s_shape, source_width=s_w, source_height=s_h, source_params=s_params,
        target_container=t_shape, target_width=t_w, target_height=t_h, target_params=t_params,
        source_pose=(x_t - d, y_hi + t_h + gap, 0.0),
        source_velocity=(s_speed, 0.0) if follow == "follow" else (0.0, 0.0),
        target_position=(x_t, y_t), target_velocity=vel, fill=f, viscosity=mu,
        liquid_velocity=follow)
    # T must hold S's liquid with room to spare: deepen it if needed (T keeps its width).
    s_area = task.source_shape().liquid_area(task.fill)
    t_shape_obj = task.target_shape()
    if t_shape_obj.interior_area < 1.5 * s_area:
        scale = min(1.5 * s_area / t_shape_obj.interior_area, 0.12 / t_h)
        task = dataclasses.replace(task, target_height=t_h * scale,
                                   source_pose=(x_t - d, y_hi + t_h * scale + gap, 0.0))
    return task


@functools.lru_cache(maxsize=None)
def _split(split: str) -> tuple[PourTask, ...]:
    rng = np.random.default_rng(list(_SPLIT_SEEDS[split]))
    return tuple(sample_task(rng) for _ in range(SPLIT_SIZES[split]))


def fingerprint(tasks) -> str:
    """SHA-256 of the tasks' fields rounded to 1e-9 (robust to last-bit libm differences).

    ``obstacles`` is left out when empty (it was added later), so the digests of obstacle-free
    tasks, e.g. the fixed splits', are those recorded before it existed."""
    import hashlib

    def rounded(v):
        if isinstance(v, float):
            return round(v, 9)
        if isinstance(v, dict):
            return {k: rounded(x) for k, x in v.items()}
        if isinstance(v, list):
            return [rounded(x) for x in v]
        return v

    def fields(t: PourTask) -> dict:
        d = t.to_dict()
        if not d["obstacles"]:
            del d["obstacles"]
        return d

    text = json.dumps([rounded(fields(t)) for t in tasks], sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()


def pour_tasks(split: str = "train") -> tuple[PourTask, ...]:
    """The fixed, seeded split: 1000 ``train``, 100 ``eval`` or 400 ``val`` tasks (disjoint,
    identical on every machine)."""
    if split not in SPLIT_SIZES:
        raise ValueError(f"split must be one of {tuple(SPLIT_SIZES)}, got {split!r}")
    return _split(split)


_EXTRA: list = []                   # extra_train_task's draws so far, and its generator
_EXTRA_RNG = np.random.default_rng(list(_EXTRA_TRAIN_SEED))


def extra_train_task(j: int) -> PourTask:
    """The ``j``-th of more tasks from the splits' distribution, drawn in order from their own
    fixed seed (the same on every machine): for learners that need more tasks than the train
    split's 1000 (disjoint from both splits: continuous draws)."""
    if not (isinstance(j, int) and j >= 0):
        raise ValueError(f"j must be an integer >= 0, got {j!r}")
    while len(_EXTRA) <= j:
        _EXTRA.append(sample_task(_EXTRA_RNG))
    return _EXTRA[j]


def over_target(task: PourTask, aim: float = 0.25) -> PourTask:
    """``task`` with S moved sideways so that its right (pouring) lip is over T's opening at the
    start, ``aim`` half-widths short of the opening's centre: the last part of a pour, for a
    start-state curriculum (an RL agent that starts there learns what tilting over T earns
    before it has to learn the approach). S keeps its height (above T's highest rim), tilt and
    velocity; it stays inside the scene."""
    if not (isinstance(aim, (int, float)) and -1.0 <= aim <= 1.0):
        raise ValueError(f"aim must be in [-1, 1] half-widths of T's opening, got {aim!r}")
    source, target = task.source_shape(), task.target_shape()
    lip_x = float(source.lips[1][0])
    t_x = task.target_position[0] + float(target.opening_centre[0])
    half = 0.5 * float(np.max(np.abs(np.asarray(source.walls)[:, 0]))) * 2.0 + source.radius + 0.005
    x = min(max(t_x - aim * 0.5 * target.width - lip_x, half), DOMAIN[0] - half)
    return dataclasses.replace(task, source_pose=(x, task.source_pose[1], task.source_pose[2]))


def pan_manocha_2016_scenes(viscosity: float = 1e-3) -> dict[str, PourTask]:
    """Pan & Manocha 2016's two benchmark scenes (its Fig. 1 and Table I) at kitchen scale, static T:

    * ``far``: T 40 cm from S across the table; S must carry the liquid there and pour.
    * ``block``: a 26 cm tall block stands between S and T; S must lift over it and pour past it.

    S is a bottle (``oval``: 4 cm neck on an 8 cm body, 12 cm tall), as the paper's source, filled
    to 0.6; T a 10 cm x 8 cm cup.
    """
    common = dict(source_container="oval", source_width=0.04, source_height=0.12,
                  source_params={"body_width": 0.08, "neck_height": 0.03},
                  target_container="rect", target_width=0.10, target_height=0.08,
                  target_velocity=(0.0, 0.0), fill=0.6, viscosity=viscosity,
                  liquid_velocity="zero")
    return {
        "far": PourTask(**common, source_pose=(0.18, 0.22, 0.0), target_position=(0.58, 0.05)),
        "block": PourTask(**common, source_pose=(0.16, 0.22, 0.0), target_position=(0.56, 0.05),
                          obstacles=((0.36, 0.13, 0.04, 0.26),)),
    }
