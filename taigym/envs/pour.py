"""``taigym/Pour-v0``: pour liquid from a source container S into a moving target T (2D).

This is Pan & Manocha 2017's pouring problem (§IV-VI) at kitchen scale, simulated by
the FLIP solver of ``taigym.sim``. The task (``env.unwrapped.task``, a frozen
:class:`~taigym.envs.pour_tasks.PourTask`) fixes both containers, T's constant velocity, the fill
level, the viscosity, whether the liquid starts at rest (TRANSFER+ZERO) or moving with S
(TRANSFER+FOLLOW) and up to two static obstacles; see :mod:`taigym.envs.pour_tasks` for the
distribution and its mapping from the paper's.

The scene is 0.8 m x 0.5 m with solid edges (the bottom edge is the floor). S is moved
kinematically by the agent; T moves at its constant velocity and bounces off the sides of a box
that keeps it on the table (``task.target_pose_at(t)`` gives its whole trajectory). Poses are
those of the containers' frames: origin at the centre of the inner bottom, y along the axis,
theta counter-clockwise (pouring to the right means theta < 0). Obstacles (``task.obstacles``,
e.g. Pan & Manocha 2016's tall block between S and T; sampled tasks have none) are static solid boxes
(x_centre, y_centre, width, height); liquid cannot pass through them, and liquid resting on one
is spilled.

## Action space

``Box(-1, 1, (3,), float32)``, scaled to S's displacement over one 0.05 s control step:

| index | action | scale per step | max rate |
|-------|--------|----------------|----------|
| 0 | dx of S's frame origin | 0.025 m | 0.5 m/s |
| 1 | dy of S's frame origin | 0.025 m | 0.5 m/s |
| 2 | dtheta of S (counter-clockwise) | 0.1 rad | 2 rad/s |

theta is kept in [-2.5, 2.5] rad. A component of the move that would make S's solid penetrate
T's or an obstacle (deeper than it already does; for obstacles, also on the way, so that S
cannot jump through a thin box), go below the floor or leave the scene is not applied (the
others are, if they are valid on their own); ``info["action_clipped"]`` says when that happened.
Components outside [-1, 1] are clipped; a nan or an infinity, or an action of another shape,
raises ``ValueError``.

## Observation space

``obs_mode="features"`` (default; Pan & Manocha 2017, Fig. 4a): a float32 vector, every entry bounded:

| index | observation | unit | range |
|-------|-------------|------|-------|
| 0-2 | S pose x, y, theta | m, m, rad | [0, 0.8], [0, 0.5], [-2.5, 2.5] |
| 3-5 | S velocity vx, vy, omega (last step) | m/s, rad/s | [-1, 1], [-1, 1], [-2, 2] |
| 6-7 | T position x, y | m | [0, 0.8], [0, 0.5] |
| 8-9 | T velocity vx, vy | m/s | [-1, 1] |
| 10-11 | T's opening centre minus S's opening centre | m | [-0.8, 0.8], [-0.5, 0.5] |
| 12 | initial fill level | - | [0, 1] |
| 13 | log10 viscosity (Pa s) | - | [-4, 0] |
| 14 | time / horizon | - | [0, 1] |
| 15-18 | S shape one-hot (rect, frustum, oval, cup) | - | {0, 1} |
| 19-20 | S interior width (opening), height | m | [0, 0.4] |
| 21-22 | S shape parameters (frustum: bottom/width; cup: corner radius/width; oval: body/width, neck height/height) | - | [0, 5] |
| 23 | S's geometric max tilt angle at the task's fill | rad | [0, pi] |
| 24-31 | the same for T (one-hot, width, height, 2 parameters) | | |
| 32-35 | obstacle 0: x_centre, y_centre, width, height (zeros if the task has no obstacle 0) | m | [0, 0.8], [0, 0.5], [0, 0.5], [0, 0.5] |
| 36-39 | obstacle 1, the same | m | |
| 40-... | liquid free-surface heightfield in S's frame, ``heightfield_bins`` columns across S's interior, newest of the last 4 frames first; height of the highest particle over S's inner bottom / S's height (0 = no liquid) | - | [0, 1.5] |

``obs_mode="lip"`` (Fig. 4b): entries 0-39, then the liquid height at S's left and right lips
(the highest particle within a band beside each lip, in S's frame, / S's height) for the last 4
frames (8 numbers in [0, 1.5]). ``obs_mode="particles"``: ``Dict(state=Box(40,), particles=Box
(n_particles, 4))`` with a fixed subsample of the particles (x, y, vx, vy; m, m/s). ``obs_mode=
"rgb"``: a ``Box(0, 255, (H, W, 3), uint8)`` image of size ``image_size``.

## Rewards

Per step, normalised by the number of particles N (so that the return does not depend on the
resolution):

| term | value |
|------|-------|
| target | Pan & Manocha 2017's R_p = (W - dist)/W, clipped to [0, 1], for each particle entering T this step (dist: distance from T's opening centre where it crosses the opening, W: half the opening width), minus the R_p earned earlier by each particle that leaves T; summed and divided by N |
| spill | ``-spill_penalty`` (default 2) times the increase of the spilled fraction |
| smoothness | ``-smoothness_penalty`` (default 1e-3) times ``||a_t - a_{t-1}||^2`` |

The undiscounted return is thus (sum of R_p over the particles in T)/N - spill_penalty * spilled
- smoothness, in about [-2, 1]. ``info`` holds the three terms.

## Episode end

* Termination: S is empty (``in_source <= 0.02``) and the liquid has settled (``in_flight <=
  0.005``).
* Truncation: at ``horizon`` (5 s = 100 steps), or when the solver blows up
  (``info["sim_unstable"]``).

## Info (every step, including reset)

``in_source``, ``in_target``, ``spilled``, ``in_flight`` (fractions of the initial liquid; liquid
outside both containers is spilled if it moved slower than 5 cm/s over the last step, e.g.
resting on the floor or an obstacle, or is below the level of T's opening, else in flight),
``success`` (= ``is_success``: in_target >= 0.9 and spilled <= 0.05), ``sim_unstable``,
``time`` (s), ``source_pose``, ``source_velocity``, ``target_pose``, ``target_velocity``,
``action_clipped``, ``collision`` (S's solid overlaps T's or an obstacle), ``reward_target``,
``reward_spill``, ``reward_smooth``, ``n_particles``.

## Arguments

``gym.make("taigym/Pour-v0", container=None, target_container=None, fill=None, viscosity=None,
target_velocity=None, liquid_velocity=None, task_split=None, obs_mode="features",
resolution=128, render_mode=None, ...)``: task arguments left at ``None`` are sampled, others
fix that variable of every sampled task; ``task_split="train"|"eval"`` samples tasks from the
fixed split instead; ``reset(options={"task": task})`` runs a given task (or its ``to_dict``)
exactly. ``resolution`` is the number of grid cells across the 0.8 m scene (64-512; walls are
``max(1 cm, 2 cells)`` thick). Other arguments: ``horizon`` (s, default 5), ``max_particles``
(capacity per scene; default: a full 10 x 12 cm cup), ``n_particles`` (particles obs, 256),
``heightfield_bins`` (16), ``image_size`` ((80, 128), rgb obs), ``render_size`` ((320, 512)),
``spill_penalty`` (2), ``smoothness_penalty`` (1e-3), ``arch`` ("cpu"), ``fidelity``
("particles"). Closed envs hand their solver to the next env built with the same resolution
and batch size, which saves Taichi's kernel compilation. The batched version is
``gym.make_vec("taigym/Pour-v0", num_envs=B, vectorization_mode="vector_entry_point")``.

## Fidelity

``fidelity="particles"`` (default) simulates the liquid with the FLIP solver.
``fidelity="simplified"`` replaces it with Pan & Manocha 2016's reduced model (``taigym.envs.
pour_simplified``): the liquid in S is its volume and mean outflow speed, identified from FLIP
pours (``scripts/sysid_pour.py``); what leaves S follows the outflow parabola and counts as in T
if it comes down through T's opening, else as spilled once it lands. Same spaces, moves,
clipping, rewards and info keys (``n_particles`` is 0); no ``particles`` observation; the
heightfield and lip heights come from the flat free surface that holds the volume. Thousands of
steps per second, for RL and for planning.

## Version history

* v0 (2026-11-22): initial version.
* v0 (2026-11-27): ``metadata["episode_metrics"]`` declares what evaluations report (no change to
  the dynamics).
* v0 (2026-11-28): the liquid solver changed (ghost-fluid free surface, implicit no-slip
  viscosity, rest-density correction; see the validation page): the same task and actions
  give a different liquid, so results from before are not comparable.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from taigym.sim.constants import CONTROL_DT, GRAVITY, MAX_PROBE_COLUMNS
from taigym.sim.geometry import densify

from . import render as _render
from .checks import check_action, reset_options
from .pour_tasks import (ALL_SHAPES, DOMAIN, LIQUID_VELOCITIES, MAX_OBSTACLES, MAX_VISCOSITY,
                         OBSTACLE_SIZE, SPLIT_SIZES, PourTask, pour_tasks, sample_task)

ACTION_SCALE = np.array([0.025, 0.025, 0.1])      # per step: m, m, rad
TILT_LIMIT = 2.5                                  # rad
EMPTY_FRACTION = 0.02
SETTLED_FRACTION = 0.005
SUCCESS_IN_TARGET = 0.9
SUCCESS_MAX_SPILLED = 0.05
#: what an episode is judged by (evaluation, benchmarks): info key -> kind (taigym.agents.metrics)
EPISODE_METRICS = {"success": "rate", "in_target": "fraction", "spilled": "fraction", "in_source": "fraction"}
HISTORY = 4                                       # frames of heightfield / lip height
OBS_MODES = ("features", "lip", "particles", "rgb")
FIDELITIES = ("particles", "simplified")
SETTLE_SPEED = 0.05    # m/s: liquid outside both containers that moved slower over a step is spilled
SOURCE, TARGET = 0, 1                             # body handles in the world
OBSTACLE_HANDLES = tuple(range(2, 2 + MAX_OBSTACLES))  # static boxes, after S and T, always there
N_BODIES = 2 + MAX_OBSTACLES
# An unused obstacle slot holds this tiny box below the floor, out of the domain: further from
# every grid node than its bounding radius plus two cells, so the solver never evaluates it.
PARKED_BOX_SIZE = 0.005                           # m
PARKED_POSE = (-0.1, -0.1, 0.0)
N_STATE = 32 + 4 * MAX_OBSTACLES
_EPS = 1e-6


# ---------------------------------------------------------------------- configuration
def _check_number(name: str, value: Any, lo: float, hi: float, *, integer: bool = False,
                  lo_open: bool = False) -> float:
    ok_type = isinstance(value, (int, np.integer)) if integer else \
        isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool)
    v = float(value) if ok_type else math.nan
    ok = ok_type and math.isfinite(v) and (v > lo if lo_open else v >= lo) and v <= hi
    if not ok:
        kind = "an integer" if integer else "a number"
        rng = f"{'(' if lo_open else '['}{lo:g}, {hi:g}]"
        raise ValueError(f"{name} must be {kind} in {rng}, got {value!r}")
    return int(value) if integer else v


@dataclass(frozen=True)
class PourConfig:
    """Validated constructor arguments shared by :class:`PourEnv` and the vector env."""

    container: str | None = None
    target_container: str | None = None
    fill: float | None = None
    viscosity: float | None = None
    target_velocity: tuple | None = None
    liquid_velocity: str | None = None
    task_split: str | None = None
    obs_mode: str = "features"
    resolution: int = 128
    render_mode: str | None = None
    horizon: float = 5.0
    max_particles: int | None = None
    n_particles: int = 256
    heightfield_bins: int = 16
    image_size: tuple = (80, 128)
    render_size: tuple = (320, 512)
    spill_penalty: float = 2.0
    smoothness_penalty: float = 1e-3
    arch: str = "cpu"
    fidelity: str = "particles"
    extra: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        set_ = lambda k, v: object.__setattr__(self, k, v)  # noqa: E731
        if self.extra:
            raise ValueError(f"unknown argument(s) for taigym/Pour-v0: {', '.join(sorted(self.extra))}")
        for name in ("container", "target_container"):
            v = getattr(self, name)
            if v is not None and v not in ALL_SHAPES:
                raise ValueError(f"{name} must be None (sampled) or one of {', '.join(ALL_SHAPES)}; got {v!r}")
        if self.fill is not None:
            set_("fill", _check_number("fill", self.fill, 0.0, 1.0, lo_open=True))
        if self.viscosity is not None:
            set_("viscosity", _check_number("viscosity", self.viscosity, 0.0, MAX_VISCOSITY))
        if self.target_velocity is not None:
            try:
                tv = np.asarray(self.target_velocity, dtype=np.float64)
            except (TypeError, ValueError):
                tv = np.full(0, np.nan)
            if tv.shape != (2,) or not np.all(np.isfinite(tv)) or np.hypot(*tv) > 1.0:
                raise ValueError("target_velocity must be None (sampled) or (vx, vy) in m/s with "
                                 f"speed <= 1, got {self.target_velocity!r}")
            set_("target_velocity", (float(tv[0]), float(tv[1])))
        if self.liquid_velocity is not None and self.liquid_velocity not in LIQUID_VELOCITIES:
            raise ValueError(f"liquid_velocity must be None (sampled) or one of {LIQUID_VELOCITIES}, "
                             f"got {self.liquid_velocity!r}")
        if self.task_split is not None and self.task_split not in SPLIT_SIZES:
            raise ValueError(f"task_split must be None or one of {tuple(SPLIT_SIZES)}, got {self.task_split!r}")
        fixed = [k for k in ("container", "target_container", "fill", "viscosity", "target_velocity",
                             "liquid_velocity") if getattr(self, k) is not None]
        if self.task_split is not None and fixed:
            raise ValueError(f"task_split={self.task_split!r} draws whole tasks from the split; it cannot "
                             f"be combined with {', '.join(fixed)}")
        if self.obs_mode not in OBS_MODES:
            raise ValueError(f"obs_mode must be one of {OBS_MODES}, got {self.obs_mode!r}")
        _check_number("resolution", self.resolution, 64, 512, integer=True)
        if self.render_mode not in (None, "rgb_array"):
            raise ValueError(f"render_mode must be None or 'rgb_array', got {self.render_mode!r}")
        set_("horizon", _check_number("horizon", self.horizon, CONTROL_DT, 60.0))
        if self.max_particles is not None:
            _check_number("max_particles", self.max_particles, 1, 10_000_000, integer=True)
        _check_number("n_particles", self.n_particles, 1, 100_000, integer=True)
        _check_number("heightfield_bins", self.heightfield_bins, 2, MAX_PROBE_COLUMNS, integer=True)
        for name in ("image_size", "render_size"):
            v = getattr(self, name)
            if not (isinstance(v, (tuple, list)) and len(v) == 2 and
                    all(isinstance(s, (int, np.integer)) and 8 <= s <= 4096 for s in v)):
                raise ValueError(f"{name} must be (height, width) in pixels, each in [8, 4096], got {v!r}")
            set_(name, (int(v[0]), int(v[1])))
        set_("spill_penalty", _check_number("spill_penalty", self.spill_penalty, 0.0, 1e6))
        set_("smoothness_penalty", _check_number("smoothness_penalty", self.smoothness_penalty, 0.0, 1e6))
        if self.fidelity not in FIDELITIES:
            raise ValueError(f"fidelity must be one of {FIDELITIES} (the FLIP solver or Pan & Manocha 2016's "
                             f"reduced model), got {self.fidelity!r}")
        if self.fidelity == "simplified" and self.obs_mode == "particles":
            raise ValueError("obs_mode='particles' needs fidelity='particles': the simplified "
                             "model has no particles")
        if self.arch not in ("cpu", "gpu", "cuda"):
            raise ValueError(f"arch must be 'cpu', 'gpu' or 'cuda', got {self.arch!r}")

    @property
    def dx(self) -> float:
        return DOMAIN[0] / self.resolution

    @property
    def wall_thickness(self) -> float:
        """Container walls: 1 cm, or two grid cells if that is thicker (m)."""
        return max(0.01, 2.0 * self.dx * (1.0 + 1e-9))

    @property
    def capacity(self) -> int:
        """Particle capacity per scene: a full 10 cm x 12 cm cup plus 15 %, unless given."""
        if self.max_particles is not None:
            return int(self.max_particles)
        spacing = 0.5 * self.dx
        return int(math.ceil(1.15 * 0.10 * 0.12 / spacing ** 2)) + 16

    @property
    def max_steps(self) -> int:
        return int(round(self.horizon / CONTROL_DT))

    def sample(self, rng: np.random.Generator) -> PourTask:
        if self.task_split is not None:
            split = pour_tasks(self.task_split)
            return split[min(int(rng.random() * len(split)), len(split) - 1)]
        return sample_task(rng, source_container=self.container,
                           target_container=self.target_container, fill=self.fill,
                           viscosity=self.viscosity, target_velocity=self.target_velocity,
                           liquid_velocity=self.liquid_velocity)


def make_config(**kwargs) -> PourConfig:
    names = set(PourConfig.__dataclass_fields__) - {"extra"}
    known = {k: v for k, v in kwargs.items() if k in names}
    extra = {k: v for k, v in kwargs.items() if k not in names}
    return PourConfig(**known, extra=extra)


def as_task(value) -> PourTask:
    if isinstance(value, PourTask):
        return value
    if isinstance(value, dict):
        return PourTask.from_dict(value)
    raise ValueError(f"options['task'] must be a PourTask or its to_dict(), got {type(value).__name__}")


# ---------------------------------------------------------------------- spaces
def state_bounds() -> tuple[np.ndarray, np.ndarray]:
    W, H = DOMAIN
    lo = [0, 0, -TILT_LIMIT, -1, -1, -2, 0, 0, -1, -1, -W, -H, 0, -4, 0]
    hi = [W, H, TILT_LIMIT, 1, 1, 2, W, H, 1, 1, W, H, 1, 0, 1]
    box_lo = [0, 0, 0, 0, 0, 0, 0, 0]
    box_hi = [1, 1, 1, 1, 0.4, 0.4, 5, 5]
    lo += box_lo + [0] + box_lo
    hi += box_hi + [math.pi] + box_hi
    lo += [0, 0, 0, 0] * MAX_OBSTACLES                # obstacles: x, y, width, height
    hi += [W, H, OBSTACLE_SIZE[1], OBSTACLE_SIZE[1]] * MAX_OBSTACLES
    assert len(lo) == N_STATE
    return np.array(lo, np.float32), np.array(hi, np.float32)


def observation_space(cfg: PourConfig) -> spaces.Space:
    lo, hi = state_bounds()
    if cfg.obs_mode == "features":
        n = HISTORY * cfg.heightfield_bins
        return spaces.Box(np.concatenate([lo, np.zeros(n, np.float32)]),
                          np.concatenate([hi, np.full(n, 1.5, np.float32)]), dtype=np.float32)
    if cfg.obs_mode == "lip":
        n = HISTORY * 2
        return spaces.Box(np.concatenate([lo, np.zeros(n, np.float32)]),
                          np.concatenate([hi, np.full(n, 1.5, np.float32)]), dtype=np.float32)
    if cfg.obs_mode == "particles":
        W, H = DOMAIN
        plo = np.tile(np.array([0, 0, -10, -10], np.float32), (cfg.n_particles, 1))
        phi = np.tile(np.array([W, H, 10, 10], np.float32), (cfg.n_particles, 1))
        return spaces.Dict({"state": spaces.Box(lo, hi, dtype=np.float32),
                            "particles": spaces.Box(plo, phi, dtype=np.float32)})
    return spaces.Box(0, 255, (*cfg.image_size, 3), dtype=np.uint8)


def action_space() -> spaces.Box:
    return spaces.Box(-1.0, 1.0, (3,), dtype=np.float32)


# ---------------------------------------------------------------------- geometry helpers
def _rot(theta: float) -> np.ndarray:
    """Matrix M with world = local @ M for a counter-clockwise rotation by theta."""
    c, s = math.cos(theta), math.sin(theta)
    return np.array([[c, s], [-s, c]])


def to_local(points: np.ndarray, pose) -> np.ndarray:
    """World points (N, 2) -> the frame of ``pose`` = (x, y, theta)."""
    if pose[2] == 0.0:
        return points - pose[:2]
    return (points - pose[:2]) @ _rot(pose[2]).T


def to_world(points: np.ndarray, pose) -> np.ndarray:
    if pose[2] == 0.0:
        return points + pose[:2]
    return points @ _rot(pose[2]) + pose[:2]


class _Walls:
    """A container's wall solid (capsule chain) prepared for fast distance queries."""

    def __init__(self, shape):
        w = np.asarray(shape.walls, np.float64)
        self.a = w[:-1]
        self.ab = w[1:] - w[:-1]
        self.inv = 1.0 / np.maximum(np.einsum("ij,ij->i", self.ab, self.ab), 1e-300)
        self.radius = shape.radius
        # per-axis copies (contiguous) for min_distance
        self.ax, self.ay = self.a[:, 0].copy(), self.a[:, 1].copy()
        self.abx, self.aby = self.ab[:, 0].copy(), self.ab[:, 1].copy()

    def min_distance(self, pts: np.ndarray) -> float:
        """Smallest distance (m) from points (N, 2), body frame, to the wall solid (< 0 inside)."""
        apx = pts[:, 0:1] - self.ax                           # (N, segments)
        apy = pts[:, 1:2] - self.ay
        abx, aby = self.abx, self.aby
        t = np.minimum(np.maximum((apx * abx + apy * aby) * self.inv, 0.0), 1.0)
        dx = apx - t * abx
        dy = apy - t * aby
        return math.sqrt(float((dx * dx + dy * dy).min())) - self.radius


def _box_distance(px: float, py: float, box: tuple) -> float:
    """Signed distance (m) from the point (px, py) to the axis-aligned box (cx, cy, hx, hy)
    (centre and half extents, m); < 0 inside. Python floats: the fast path's check."""
    cx, cy, hx, hy = box
    qx, qy = abs(px - cx) - hx, abs(py - cy) - hy
    return math.hypot(max(qx, 0.0), max(qy, 0.0)) + min(max(qx, qy), 0.0)


def _box_sdf(pts: np.ndarray, box: tuple) -> np.ndarray:
    """Signed distance (m) from world points (N, 2) to the axis-aligned box (cx, cy, hx, hy)."""
    cx, cy, hx, hy = box
    qx = np.abs(pts[:, 0] - cx) - hx
    qy = np.abs(pts[:, 1] - cy) - hy
    return np.hypot(np.maximum(qx, 0.0), np.maximum(qy, 0.0)) + np.minimum(np.maximum(qx, qy), 0.0)


def _solid_box(shape) -> tuple[float, float, float, float]:
    """(x_min, y_min, x_max, y_max) of a container's wall solid in its own frame (m)."""
    w = np.asarray(shape.walls)
    lo, hi = w.min(axis=0) - shape.radius, w.max(axis=0) + shape.radius
    return float(lo[0]), float(lo[1]), float(hi[0]), float(hi[1])


def shape_features(shape) -> np.ndarray:
    onehot = [float(shape.shape == s) for s in ALL_SHAPES]
    p = shape.params
    if shape.shape == "frustum":
        params = [p["bottom_width"] / shape.width, 0.0]
    elif shape.shape == "cup":
        params = [p["corner_radius"] / shape.width, 0.0]
    elif shape.shape == "oval":
        params = [p["body_width"] / shape.width, p["neck_height"] / shape.height]
    else:
        params = [0.0, 0.0]
    return np.array(onehot + [shape.width, shape.height] + params)


class _Region:
    """Fast point-in-interior test of a container in its own frame: half-planes for a convex
    interior polygon (rect, frustum, cup) or two convex pieces split at the chord between its
    two reflex vertices (the oval bottle's shoulders), else bounding box + crossing number."""

    def __init__(self, shape):
        poly = np.asarray(shape.interior, np.float64)
        self.shape = shape
        self.lo, self.hi = poly.min(0), poly.max(0)
        reflex = np.flatnonzero(_turns(poly) < -1e-15)
        self.pieces = None
        if len(reflex) == 0:
            self.pieces = [_half_planes(poly)]
        elif len(reflex) == 2:
            i, j = reflex
            a, b = poly[i:j + 1], np.concatenate([poly[j:], poly[:i + 1]])
            if np.all(_turns(a) >= -1e-15) and np.all(_turns(b) >= -1e-15):
                self.pieces = [_half_planes(a), _half_planes(b)]

    def inside(self, loc: np.ndarray) -> np.ndarray:
        if self.pieces is not None:
            out = None
            for normals, offsets in self.pieces:
                # same test as np.all(..., axis=1), reduced over a contiguous first axis (faster)
                ins = np.logical_and.reduce(np.ascontiguousarray((loc @ normals < offsets).T), axis=0)
                out = ins if out is None else out | ins
            return out
        cand = np.all((loc >= self.lo) & (loc <= self.hi), axis=1)
        out = np.zeros(len(loc), bool)
        if cand.any():
            out[cand] = self.shape.contains(loc[cand])
        return out


def _turns(poly: np.ndarray) -> np.ndarray:
    """Cross product of consecutive edges at each vertex of a closed polygon (> 0: convex, CCW)."""
    e_in = poly - np.roll(poly, 1, axis=0)
    e_out = np.roll(poly, -1, axis=0) - poly
    return e_in[:, 0] * e_out[:, 1] - e_in[:, 1] * e_out[:, 0]


def _half_planes(poly: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(normals (2, K), offsets (K,)) of a convex CCW polygon: inside iff p @ normals < offsets."""
    e = np.roll(poly, -1, axis=0) - poly
    n = np.column_stack((e[:, 1], -e[:, 0]))               # outward normals of a CCW polygon
    keep = np.linalg.norm(n, axis=1) > 1e-12                  # drop zero-length edges
    return n[keep].T.copy(), np.einsum("ij,ij->i", n[keep], poly[keep])


class _TaskGeometry:
    """A task's scene geometry at one wall thickness, the constants that resets to the task
    share (containers are immutable): S, T, S's solid sampled along its walls, the fast
    inside/distance tests, the solids' bounding boxes (own frames, m), the liquid's area at the
    task's fill (m^2), S's outflow lookup tables and max tilt at that fill (rad) and the
    per-task entries of the state vector (read-only)."""

    def __init__(self, task: PourTask, wall_thickness: float):
        from taigym.models.outflow_tables import outflow_tables

        self.source = source = task.source_shape(wall_thickness)
        self.target = target = task.target_shape(wall_thickness)
        self.solid_pts = densify(source.walls, 0.75 * source.radius)
        self.s_region = _Region(source)
        self.t_walls = _Walls(target)
        self.s_box, self.t_box = _solid_box(source), _solid_box(target)
        self.fill_area = source.liquid_area(task.fill)
        self.tables = outflow_tables(source)
        # from Pan & Manocha 2016's lookup tables (within 2e-3 rad of ``Container.max_tilt_angle``, ~20x
        # faster)
        self.max_tilt = self.tables.max_lean(self.fill_area)
        n_obst = len(task.obstacles)
        self.state = np.concatenate([
            np.zeros(12), [task.fill, math.log10(max(task.viscosity, 1e-4))],
            [0.0],  # time, filled in per step
            shape_features(source), [self.max_tilt], shape_features(target),
            np.ravel(task.obstacles), np.zeros(4 * (MAX_OBSTACLES - n_obst))])
        for a in (self.solid_pts, self.state):
            a.setflags(write=False)


@functools.lru_cache(maxsize=256)
def task_geometry(task: PourTask, wall_thickness: float) -> _TaskGeometry:
    """The task's :class:`_TaskGeometry`, built once per (task, wall thickness): resetting to a
    task seen before (a fixed split) costs no geometry."""
    return _TaskGeometry(task, wall_thickness)


# Built worlds handed back by closed envs, by (resolution, batch size, capacity, arch): Taichi
# compiles the solver's kernels anew for every solver instance, which costs seconds.
_WORLD_POOL: dict[tuple, list] = {}


class Member:
    """Host-side state of one scene of the batch."""

    def __init__(self) -> None:
        self.task: PourTask | None = None
        self.source = self.target = None
        self.s_region = None
        self.t_walls = None
        self.s_box = self.t_box = (0.0, 0.0, 0.0, 0.0)  # solids' bounding boxes, own frames (m)
        self.s_bound = 0.0
        self.t_oc = self.s_oc = (0.0, 0.0)   # opening centres, own frames (m)
        self.solid_pts = None          # S's wall centreline, densified (S frame)
        self.obst: list[tuple] = []    # the task's obstacles as (cx, cy, hx, hy), m
        self.obst_step = math.inf      # longest sub-move that cannot jump through one (m)
        self.obst_poses = np.tile(PARKED_POSE, (MAX_OBSTACLES, 1))  # every slot's pose (parked too)
        self.s_pose = np.zeros(3)
        self.s_vel = np.zeros(3)
        self.t_pose = np.zeros(3)
        self.t_vel = np.zeros(3)
        self.time = 0.0
        self.steps = 0
        self.prev_action = np.zeros(3)
        self.n = 0
        self.x = None                  # positions (m) and velocities (m/s) after the last step,
        self.v = None                  # read lazily (render, particles obs): PourBatch.positions
        self.spilled = 0.0
        self.hist = None
        self.state_buf = None          # state vector; its per-task part is filled at reset
        self.obs_buf = None            # state vector + history (features, lip obs), same
        self.max_tilt = 0.0
        self.info: dict = {}
        self.unstable = False


class PourBatch:
    """B pouring scenes on one batched ``World2D`` (built lazily, kept across resets).

    Shared by :class:`PourEnv` (B = 1) and ``PourVectorEnv`` so that both give identical
    transitions. Not a Gymnasium object itself.
    """

    def __init__(self, cfg: PourConfig, batch_size: int = 1):
        self.cfg = cfg
        self.B = int(batch_size)
        self.world = None
        self._key = None
        self._slots: list[list] = []   # (shape, pose) in each member's obstacle slots of the world
        self.members = [Member() for _ in range(self.B)]
        self.state_lo, self.state_hi = state_bounds()
        self.obs_space = observation_space(cfg)
        if cfg.obs_mode in ("features", "lip"):
            self.obs_lo = self.obs_space.low.astype(np.float64)
            self.obs_hi = self.obs_space.high.astype(np.float64)

    # ------------------------------------------------------------------ world
    def _ensure_world(self, task: PourTask) -> None:
        if self.world is not None:
            return
        cfg = self.cfg
        key = (cfg.resolution, self.B, cfg.capacity, cfg.arch)
        # unknown contents (a pooled world's slots hold its last tasks' obstacles): reset_member
        # sets every slot the first time
        self._slots = [[None] * MAX_OBSTACLES for _ in range(self.B)]
        pooled = _WORLD_POOL.get(key)
        if pooled:
            self.world, self._key = pooled.pop(), key
            return
        from taigym import sim

        w = sim.World2D(size=DOMAIN, cells=cfg.resolution, viscosity=task.viscosity,
                        arch=cfg.arch, seed=0, batch_size=self.B, max_particles=cfg.capacity,
                        settle_speed=SETTLE_SPEED)
        w.add_body(task.source_shape(cfg.wall_thickness), pose=task.source_pose)
        w.add_body(task.target_shape(cfg.wall_thickness), pose=task.target_pose_at(0.0))
        # the obstacle slots exist in every world, so that its layout (and the pool) does not
        # depend on the task
        for _ in OBSTACLE_HANDLES:
            w.add_body(sim.Box(PARKED_BOX_SIZE, PARKED_BOX_SIZE), pose=PARKED_POSE)
        w.build()
        self.world, self._key = w, key

    def release(self) -> None:
        """Hand the world back to the pool, for the next env with the same grid and batch size.

        Every ``reset_member`` sets all of a member's state (liquid, shapes, poses, viscosity,
        jitter seed), so a pooled world gives the same transitions as a new one; reusing it
        saves the solver's allocation and kernel compilation.
        """
        if self.world is not None:
            _WORLD_POOL.setdefault(self._key, []).append(self.world)
            self.world = None
            for m in self.members:
                m.task = None

    def positions(self, b: int) -> np.ndarray:
        """Member b's particle positions after the last step (read on demand)."""
        m = self.members[b]
        if m.x is None:
            m.x = np.nan_to_num(self.world.positions(b))
        return m.x

    def velocities(self, b: int) -> np.ndarray:
        """Member b's particle velocities after the last step (read on demand)."""
        m = self.members[b]
        if m.v is None:
            m.v = np.nan_to_num(self.world.velocities(b))
        return m.v

    # ------------------------------------------------------------------ reset
    def _prepare(self, task: PourTask, particles: bool = True):
        """(the task's geometry, S's liquid lattice, obstacles as (x, y, half width, half
        height)) of a task, checked before anything changes, so that a failed reset leaves the
        member as it was (any fidelity; the lattice only with ``particles`` or obstacles)."""
        cfg = self.cfg
        geo = task_geometry(task, cfg.wall_thickness)
        obst = [(x, y, 0.5 * wd, 0.5 * ht) for x, y, wd, ht in task.obstacles]
        fill_pts = geo.source.fill_points(task.fill, 0.5 * cfg.dx) if (obst or particles) else None
        if obst:
            self._check_obstacles(task, geo.source, geo.target, geo.solid_pts, fill_pts, obst)
        return geo, fill_pts, obst

    def reset_member(self, b: int, task: PourTask, jitter_seed: int) -> None:
        from taigym.sim import Box

        cfg = self.cfg
        geo, fill_pts, obst = self._prepare(task)
        source, target = geo.source, geo.target
        if len(fill_pts) > cfg.capacity:
            raise ValueError(f"the task needs {len(fill_pts)} particles but max_particles="
                             f"{cfg.capacity}; pass a larger max_particles to gym.make")
        self._ensure_world(task)
        w, m = self.world, self.members[b]
        s_vel = np.array([task.source_velocity[0], task.source_velocity[1], 0.0])
        w.clear_liquid(member=b)
        w.set_body(SOURCE, source, task.source_pose, s_vel, member=b)
        w.set_body(TARGET, target, task.target_pose_at(0.0), task.target_velocity_at(0.0), member=b)
        m.obst_poses = np.tile(PARKED_POSE, (MAX_OBSTACLES, 1))
        for i, handle in enumerate(OBSTACLE_HANDLES):
            if i < len(obst):
                shape, pose = Box(task.obstacles[i][2], task.obstacles[i][3]), obst[i][:2] + (0.0,)
            else:
                shape, pose = Box(PARKED_BOX_SIZE, PARKED_BOX_SIZE), PARKED_POSE
            m.obst_poses[i] = pose
            if self._slots[b][i] != (shape, pose):  # each set_body uploads every body: skip if set
                w.set_body(handle, shape, pose, (0.0, 0.0, 0.0), member=b)
                self._slots[b][i] = (shape, pose)
        w.set_viscosity(task.viscosity, member=b)
        columns = self._probe_columns(source)
        w.set_height_probe(None if columns is None else SOURCE, columns,
                           (-source.radius, 1.5 * source.height), member=b)
        lip_l, lip_r = target.lips     # Pan & Manocha 2017's R_p and the spill level: T's opening
        w.set_target_opening(TARGET, target.opening_centre, 0.5 * float(np.linalg.norm(lip_r - lip_l)),
                             member=b)
        w.reseed(jitter_seed, member=b)
        w.fill_body(SOURCE, task.fill, member=b, liquid_follows=task.liquid_velocity == "follow")
        m = self._init_member(b, task, geo, obst)
        m.n, m.x, m.v = w.particle_count(b), None, None
        frames = self._frames([b], [m])
        self._finish_reset(b, w.fractions(b), np.zeros(0) if frames is None else frames[0])

    def _init_member(self, b: int, task: PourTask, geo: _TaskGeometry,
                     obst: list[tuple]) -> Member:
        """Member b's geometry, poses, clock and per-task state vector (any fidelity)."""
        m = self.members[b]
        source, target = geo.source, geo.target
        m.task, m.source, m.target = task, source, target
        m.s_region = geo.s_region
        m.solid_pts = geo.solid_pts
        m.obst = obst
        # sub-moves no longer than half the thinnest obstacle plus S's wall cannot cross it
        # unseen (see _clip_move)
        m.obst_step = min((source.radius + min(hx, hy) for _, _, hx, hy in obst), default=math.inf)
        m.t_walls = geo.t_walls
        m.s_bound = source.bounding_radius
        m.s_box, m.t_box = geo.s_box, geo.t_box
        m.t_oc, m.s_oc = tuple(target.opening_centre.tolist()), tuple(source.opening_centre.tolist())
        m.s_pose = np.array(task.source_pose, dtype=np.float64)
        m.s_vel = np.array([task.source_velocity[0], task.source_velocity[1], 0.0])
        m.t_pose = task.target_pose_at(0.0)
        m.t_vel = task.target_velocity_at(0.0)
        m.time, m.steps, m.unstable = 0.0, 0, False
        m.prev_action = np.clip(m.s_vel * CONTROL_DT / ACTION_SCALE, -1, 1)
        m.max_tilt = geo.max_tilt
        m.state_buf = geo.state.copy()
        # the history of frames lives in the observation buffer (newest first): ``hist`` is a
        # view, so the observation needs no copy of it
        m.obs_buf = np.concatenate([geo.state, np.zeros(HISTORY * self._frame_size())])
        m.hist = m.obs_buf[N_STATE:].reshape(HISTORY, self._frame_size())
        return m

    def _frame_size(self) -> int:
        return {"features": self.cfg.heightfield_bins, "lip": 2}.get(self.cfg.obs_mode, 0)

    def _finish_reset(self, b: int, fr: dict, frame: np.ndarray) -> None:
        m = self.members[b]
        m.spilled = fr["spilled"]
        m.hist[:] = frame
        m.info = self._info(b, fr, r_target=0.0, r_spill=0.0, r_smooth=0.0, clipped=False,
                            collision=False)

    def _check_obstacles(self, task: PourTask, source, target, solid_pts: np.ndarray,
                         fill_pts: np.ndarray, obst: list[tuple]) -> None:
        """Raise ValueError if an obstacle overlaps S (its solid or its liquid) at the start or T
        anywhere on its path over the horizon: both are moved kinematically and would carry
        their walls and liquid through the box."""
        s_pts = to_world(solid_pts, np.asarray(task.source_pose))
        liquid = to_world(fill_pts, np.asarray(task.source_pose))
        # T is never rotated and the solver moves it linearly between control steps, so its
        # path is covered by the bounding box of its solid at the control steps' poses
        times = np.arange(self.cfg.max_steps + 1) * CONTROL_DT
        path = np.array([task.target_pose_at(t)[:2] for t in times])
        walls = np.asarray(target.walls)
        t_lo = path.min(0) + walls.min(0) - target.radius
        t_hi = path.max(0) + walls.max(0) + target.radius
        for i, box in enumerate(obst):
            cx, cy, hx, hy = box
            if float(_box_sdf(s_pts, box).min()) < source.radius - 1e-9 or \
                    (len(liquid) and float(_box_sdf(liquid, box).min()) < 0.0):
                raise ValueError(f"obstacles[{i}] {task.obstacles[i]} overlaps the source container "
                                 f"at its start pose {task.source_pose}")
            if (cx + hx > t_lo[0] + 1e-9 and cx - hx < t_hi[0] - 1e-9 and
                    cy + hy > t_lo[1] + 1e-9 and cy - hy < t_hi[1] - 1e-9):
                raise ValueError(f"obstacles[{i}] {task.obstacles[i]} overlaps the target container's "
                                 f"path (its bounding box over the {self.cfg.horizon:g} s horizon: "
                                 f"x in [{t_lo[0]:.3f}, {t_hi[0]:.3f}], y in [{t_lo[1]:.3f}, "
                                 f"{t_hi[1]:.3f}] m)")

    # ------------------------------------------------------------------ geometry
    @staticmethod
    def _near(m: Member, x: float, y: float, theta: float, t_pose) -> tuple[bool, bool]:
        """(S's solid may touch T's, S's solid may cross the scene's edges) at pose (x, y,
        theta): a broad phase on bounding boxes (S's local one rotated, so conservative)."""
        c, s = math.cos(theta), math.sin(theta)
        x0, y0, x1, y1 = m.s_box
        # the rotated corners' extremes, c x - s y and s x + c y over x in {x0, x1}, y in {y0,
        # y1}: rounding is monotone, so each is the sum of the terms' extremes (exactly the min
        # and max over the four corners)
        cx, cX, cy, cY = (c * x0, c * x1, c * y0, c * y1) if c >= 0.0 else \
            (c * x1, c * x0, c * y1, c * y0)
        sx, sX, sy, sY = (s * x0, s * x1, s * y0, s * y1) if s >= 0.0 else \
            (s * x1, s * x0, s * y1, s * y0)
        sx0, sx1, sy0, sy1 = x + (cx - sY), x + (cX - sy), y + (sx + cy), y + (sX + cY)
        tx, ty = float(t_pose[0]), float(t_pose[1])
        a0, b0, a1, b1 = m.t_box
        near_t = sx0 < tx + a1 and tx + a0 < sx1 and sy0 < ty + b1 and ty + b0 < sy1
        W, H = DOMAIN
        return near_t, (sx0 < 0.0 or sy0 < 0.0 or sx1 > W or sy1 > H)

    def _penetration(self, m: Member, pose: np.ndarray,
                     t_pose: np.ndarray) -> tuple[float, float, float]:
        """(penetration of S's solid into T's, into the floor or scene edges, into the deepest
        obstacle), m. S's solid is sampled every 3/4 wall radius along its centreline (error <
        0.08 radius)."""
        r = m.source.radius
        near_t, near_edge = self._near(m, float(pose[0]), float(pose[1]), float(pose[2]), t_pose)
        R = m.s_bound
        W, H = DOMAIN
        near_o = bool(m.obst) and any(_box_distance(pose[0], pose[1], o) < R for o in m.obst)
        if not (near_t or near_edge or near_o):
            return 0.0, 0.0, 0.0
        pts = to_world(m.solid_pts, pose)
        pen_e = 0.0
        if near_edge:
            lo, hi = pts.min(0), pts.max(0)
            pen_e = max(0.0, r - min(lo[0], lo[1], W - hi[0], H - hi[1]))
        pen_t = 0.0
        if near_t:
            loc = pts - t_pose[:2]                          # T is never rotated
            # only points within r of T's solid's bounding box can reach T's solid (exact cut)
            a0, b0, a1, b1 = m.t_box
            x, y = loc[:, 0], loc[:, 1]
            close = (x > a0 - r) & (x < a1 + r) & (y > b0 - r) & (y < b1 + r)
            if close.any():
                pen_t = max(0.0, r - m.t_walls.min_distance(loc[close]))
        pen_o = self._obstacle_penetration(m, pose, pts) if near_o else 0.0
        return pen_t, pen_e, pen_o

    def _obstacle_penetration(self, m: Member, pose: np.ndarray,
                              pts: np.ndarray | None = None) -> float:
        """Penetration (m) of S's solid at ``pose`` into the deepest obstacle (``pts``: S's
        sampled solid at that pose, if already computed)."""
        # S's solid lies within s_bound of its frame origin: a box further away cannot touch it
        near = [o for o in m.obst if _box_distance(pose[0], pose[1], o) < m.s_bound]
        if not near:
            return 0.0
        if pts is None:
            pts = to_world(m.solid_pts, pose)
        return max(0.0, max(m.source.radius - float(_box_sdf(pts, o).min()) for o in near))

    def _swept_obstacle_penetration(self, m: Member, cur: np.ndarray, p: np.ndarray) -> float:
        """Deepest penetration (m) of S's solid into an obstacle at the poses between ``cur`` and
        ``p``, sampled so that no solid point moves further than ``m.obst_step`` between two of
        them (a move of up to 2.5 cm could otherwise jump over a thin box)."""
        d = p - cur
        travel = math.hypot(d[0], d[1]) + m.s_bound * abs(d[2])  # of any point of S's solid, m
        n = math.ceil(travel / m.obst_step)
        pen = 0.0
        for k in range(1, n):
            pen = max(pen, self._obstacle_penetration(m, cur + (k / n) * d))
        return pen

    def _clip_move(self, m: Member, delta, t_next: np.ndarray):
        """S's next pose under the displacement ``delta`` (dx, dy, dtheta; m, m, rad); components
        that would push S's solid deeper into T's, an obstacle (at the new pose or on the way),
        the floor or the scene's edges are dropped.

        Returns (pose, clipped, penetration of S into T or an obstacle at that pose)."""
        cur = m.s_pose
        # fast path in Python floats (same arithmetic as the arrays): S far from T, the edges and
        # the obstacles (from every pose on the way: the margin is the move's length)
        c0, c1, c2 = cur.tolist()
        d0, d1, d2 = map(float, delta)
        px, py, th_raw = c0 + d0, c1 + d1, c2 + d2
        th = min(max(th_raw, -TILT_LIMIT), TILT_LIMIT)
        R = m.s_bound
        near_t, near_edge = self._near(m, px, py, th, t_next)
        if not (near_t or near_edge) and not (m.obst and any(
                _box_distance(px, py, o) < R + abs(d0) + abs(d1) for o in m.obst)):
            return np.array([px, py, th]), th != th_raw, 0.0
        sweep = bool(m.obst)
        delta = np.array([d0, d1, d2])

        def depth(p: np.ndarray) -> tuple[float, float, float]:
            pen_t, pen_e, pen_o = self._penetration(m, p, t_next)
            if sweep:
                pen_o = max(pen_o, self._swept_obstacle_penetration(m, cur, p))
            return pen_t, pen_e, pen_o

        p = cur + delta
        p[2] = min(max(p[2], -TILT_LIMIT), TILT_LIMIT)
        pen_t, pen_e, pen_o = depth(p)
        if pen_t == 0.0 and pen_e == 0.0 and pen_o == 0.0:
            return p, bool(p[2] != cur[2] + delta[2]), 0.0
        p0_t, p0_e, p0_o = self._penetration(m, cur, t_next)

        def allowed(pen_t: float, pen_e: float, pen_o: float) -> bool:
            return pen_t <= p0_t + _EPS and pen_e <= p0_e and pen_o <= p0_o + _EPS

        if allowed(pen_t, pen_e, pen_o):
            return p, True, max(pen_t, pen_o)
        for mask in ((1, 0, 1), (1, 1, 0), (0, 1, 1), (1, 0, 0), (0, 0, 1), (0, 1, 0)):
            mk = np.array(mask, float)
            if not np.any(mk * delta):
                continue
            p = cur + mk * delta
            p[2] = min(max(p[2], -TILT_LIMIT), TILT_LIMIT)
            pen_t, pen_e, pen_o = depth(p)
            if allowed(pen_t, pen_e, pen_o):
                return p, True, max(pen_t, pen_o)
        return cur.copy(), bool(np.any(delta != 0)), max(p0_t, p0_o)

    # ------------------------------------------------------------------ features
    def _probe_columns(self, source) -> np.ndarray | None:
        """The columns in S's frame (m) over which the solver measures the liquid's height for the
        observation: ``heightfield_bins`` equal columns across S's interior (features), or a band
        around each lip, within the interior's span (lip); None in the other obs modes."""
        poly = np.asarray(source.interior)
        lo, hi = poly[:, 0].min(), poly[:, 0].max()
        if self.cfg.obs_mode == "features":
            edges = np.linspace(lo, hi, self.cfg.heightfield_bins + 1)
            return np.stack([edges[:-1], edges[1:]], axis=1)
        if self.cfg.obs_mode == "lip":
            band = max(0.2 * source.width, 1.5 * 0.5 * self.cfg.dx)   # 1.5 particle spacings at least
            (lx, _), (rx, _) = source.lips
            return np.array([[max(lo, x - band), min(hi, x + band)] for x in (lx, rx)])
        return None

    def _frames(self, rows, ms: list) -> np.ndarray | None:
        """(k, bins) heightfields or (k, 2) lip heights of members ``ms`` (``rows`` of the batch):
        the height of the liquid in S's frame over each probe column, / S's height, in [0, 1.5]
        (0: no liquid; the probe counts liquid from a wall radius below S's inner bottom up to
        1.5 S's heights); None in the other obs modes."""
        if self.cfg.obs_mode not in ("features", "lip"):
            return None
        heights = self.world.heights_all()[rows, :self._frame_size()]
        inv_h = np.array([1.0 / m.source.height for m in ms])[:, None]
        return np.minimum(np.maximum(heights * inv_h, 0.0), 1.5)

    def _fill_state(self, m: Member, st: np.ndarray) -> bool:
        """Write the per-step entries of the state vector (``st[:N_STATE]``, unclipped); returns
        False if they are surely free of nan (the per-task entries are finite: validated)."""
        x, y, th = m.s_pose.tolist()
        tx, ty, _ = m.t_pose.tolist()
        tvx, tvy, _ = m.t_vel.tolist()
        ox, oy = m.s_oc
        c, s_ = math.cos(th), math.sin(th)
        per_step = (x, y, th, *m.s_vel.tolist(), tx, ty, tvx, tvy,
                    tx + m.t_oc[0] - (x + c * ox - s_ * oy), ty + m.t_oc[1] - (y + s_ * ox + c * oy))
        st[0:12] = per_step
        st[14] = t = m.time / self.cfg.horizon
        return math.isnan(sum(per_step) + t)             # (inf - inf too: a harmless false alarm)

    def _state(self, m: Member) -> np.ndarray:
        st = m.state_buf
        self._fill_state(m, st)
        out = np.minimum(np.maximum(st, self.state_lo), self.state_hi).astype(np.float32)
        if not np.all(np.isfinite(out)):
            out = np.clip(np.nan_to_num(out), self.state_lo, self.state_hi)
        return out

    def observation(self, b: int):
        cfg, m = self.cfg, self.members[b]
        if cfg.obs_mode in ("features", "lip"):
            # state and history in one buffer (``m.hist`` is a view of its tail), clipped in one
            # go: the same values as clipping the state to its bounds and the history to [0, 1.5]
            # separately
            buf = m.obs_buf
            maybe_nan = self._fill_state(m, buf)
            obs = np.minimum(np.maximum(buf, self.obs_lo), self.obs_hi).astype(np.float32)
            if maybe_nan:                               # clipping leaves only nan to fix
                st = obs[:N_STATE]
                obs[:N_STATE] = np.clip(np.nan_to_num(st), self.state_lo, self.state_hi)
            return obs
        if cfg.obs_mode == "particles":
            x, v = self.positions(b), self.velocities(b)
            idx = np.linspace(0, max(m.n - 1, 0), cfg.n_particles).round().astype(np.int64)
            p = np.concatenate([x[idx], v[idx]], axis=1) if m.n else np.zeros((cfg.n_particles, 4))
            sp = self.obs_space["particles"]
            p = np.clip(np.nan_to_num(p), sp.low, sp.high).astype(np.float32)
            return {"state": self._state(m), "particles": p}
        return self.render(b, cfg.image_size, parabola=False)

    # ------------------------------------------------------------------ step
    def _moves(self, actions: np.ndarray, active: np.ndarray) -> list[tuple]:
        """The active members' moves (all if ``active`` is None) under actions in [-1, 1]^3:
        (member, action, S's next pose, S's velocity, T's next pose, T's next velocity,
        clipped, S's penetration into T) each."""
        dt, members = CONTROL_DT, self.members
        sx, sy, sth = ACTION_SCALE.tolist()
        rows = np.asarray(actions, np.float64).tolist()
        plans = []
        # per member in Python floats: the numbers of np.clip(np.nan_to_num(a), -1, 1) * scale
        # and (s_next - s_pose) / dt without a NumPy call each
        for b in (range(self.B) if active is None else np.flatnonzero(active).tolist()):
            m = members[b]
            a = [min(max(v, -1.0), 1.0) if v == v else 0.0 for v in rows[b]]   # nan -> 0
            (tx, ty), (tvx, tvy) = m.task.target_state_at(m.time + dt)
            t_next = np.array([tx, ty, 0.0])
            s_next, clipped, pen = self._clip_move(m, (a[0] * sx, a[1] * sy, a[2] * sth), t_next)
            (x0, y0, th0), (x1, y1, th1) = m.s_pose.tolist(), s_next.tolist()
            s_vel = np.array([(x1 - x0) / dt, (y1 - y0) / dt, (th1 - th0) / dt])
            plans.append((b, np.array(a), s_next, s_vel, t_next, np.array([tvx, tvy, 0.0]),
                          clipped, pen))
        return plans

    def step(self, actions: np.ndarray, active: np.ndarray | None) -> None:
        """Advance the active members (all if ``active`` is None) by one control step under their
        actions in [-1, 1]^3."""
        w, dt = self.world, CONTROL_DT
        B, members = self.B, self.members
        poses = np.empty((B, N_BODIES, 3))   # (member, body: SOURCE, TARGET, obstacles, x y theta)
        vels = np.zeros((B, N_BODIES, 3))    # obstacles are static
        for b, m in enumerate(members):
            poses[b, SOURCE] = m.s_pose
            poses[b, TARGET] = m.t_pose
            poses[b, OBSTACLE_HANDLES[0]:] = m.obst_poses
        plans = self._moves(actions, active)
        for b, _, _, s_vel, t_next, _, _, _ in plans:
            vels[b, SOURCE] = s_vel
            vels[b, TARGET] = (t_next - members[b].t_pose) / dt
        w.set_poses(poses, vels)
        w.advance(dt)
        self._after_step(plans, w.unstable_members())

    def _advance_clock(self, m: Member, s_next, s_vel, t_next, t_vel) -> None:
        """Move member m's poses, velocities and clock on by one control step."""
        m.s_vel, m.t_vel = s_vel, t_vel
        m.s_pose, m.t_pose = s_next, t_next
        m.time += CONTROL_DT
        m.steps += 1

    def _after_step(self, plans: list[tuple], unstable: np.ndarray) -> None:
        """The stepped members' rewards, fractions and features, from what the solver measured
        in its step (Pan & Manocha 2017's R_p as the world's target score, fractions, heightfields);
        ``plans`` as ``_moves`` gives them."""
        if not plans:
            return
        rows = [p[0] for p in plans]
        ms = [self.members[b] for b in rows]
        w = self.world
        scores = w.target_scores()
        frames = self._frames(rows, ms)
        for i, (m, (b, a, s_next, s_vel, t_next, t_vel, clipped, pen)) in enumerate(zip(ms, plans)):
            self._advance_clock(m, s_next, s_vel, t_next, t_vel)
            m.unstable, m.x, m.v = bool(unstable[b]), None, None
            self._finish_step(b, a, w.fractions(b), scores[b] / max(m.n, 1),
                              None if frames is None else frames[i], clipped, pen)

    def _finish_step(self, b: int, a, fr: dict, r_target: float, frame, clipped: bool,
                     pen: float) -> None:
        """Rewards, observation history and info of member b's step (any fidelity)."""
        cfg, m = self.cfg, self.members[b]
        r_spill = -cfg.spill_penalty * (fr["spilled"] - m.spilled)
        da = a - m.prev_action
        r_smooth = -cfg.smoothness_penalty * float(da.dot(da))   # (half the call cost of @)
        m.spilled = fr["spilled"]
        m.prev_action = a
        if frame is not None:
            hist = m.hist
            hist[1:] = hist[:-1]                    # newest first (overlapping copy is safe)
            hist[0] = frame
        m.info = self._info(b, fr, r_target=r_target, r_spill=r_spill, r_smooth=r_smooth,
                            clipped=clipped, collision=pen > 1e-4)

    def _info(self, b: int, fr: dict, *, r_target, r_spill, r_smooth, clipped, collision) -> dict:
        m = self.members[b]
        in_s, in_t = float(fr["in"][SOURCE]), float(fr["in"][TARGET])
        spilled, flight = float(fr["spilled"]), float(fr["in_flight"])
        success = bool(in_t >= SUCCESS_IN_TARGET and spilled <= SUCCESS_MAX_SPILLED)
        return {"in_source": in_s, "in_target": in_t, "spilled": spilled, "in_flight": flight,
                "success": success, "is_success": success, "sim_unstable": bool(m.unstable),
                "time": float(m.time), "source_pose": m.s_pose.copy(),
                "source_velocity": m.s_vel.copy(), "target_pose": m.t_pose.copy(),
                "target_velocity": m.t_vel.copy(), "action_clipped": bool(clipped),
                "collision": bool(collision), "reward_target": float(r_target),
                "reward_spill": float(r_spill), "reward_smooth": float(r_smooth),
                "n_particles": int(m.n)}

    def outcome(self, b: int) -> tuple[float, bool, bool]:
        """(reward, terminated, truncated) of member b's last step."""
        m, info = self.members[b], self.members[b].info
        reward = info["reward_target"] + info["reward_spill"] + info["reward_smooth"]
        terminated = (not m.unstable and info["in_source"] <= EMPTY_FRACTION
                      and info["in_flight"] <= SETTLED_FRACTION)
        truncated = m.unstable or (not terminated and m.steps >= self.cfg.max_steps)
        return float(reward), bool(terminated), bool(truncated)

    # ------------------------------------------------------------------ rendering
    def outflow(self, b: int):
        """Estimated outflow (start point c, velocity u) of liquid leaving S's lower lip, or None."""
        m = self.members[b]
        if abs(m.s_pose[2]) < 0.2 or m.n == 0:
            return None
        x, v = self.positions(b), self.velocities(b)
        lips = to_world(np.array(m.source.lips), m.s_pose)
        lip = lips[np.argmin(lips[:, 1])]
        outside_s = ~m.s_region.inside(to_local(x, m.s_pose))
        in_t = self.world.containing_body_all()[b] == TARGET
        near = outside_s & ~in_t & (np.linalg.norm(x - lip, axis=1) < 0.03)
        if near.sum() < 3:
            return None
        return x[near].mean(0), v[near].mean(0)

    def render(self, b: int, size_hw, parabola: bool = True) -> np.ndarray:
        m, w = self.members[b], self.world
        x, v = self.positions(b), self.velocities(b)
        bodies = [(m.target, m.t_pose, _render.TARGET_COLOUR),
                  (m.source, m.s_pose, _render.SOURCE_COLOUR)]
        lines = self._parabola(b) if parabola else []
        return _render.render_scene(size_hw, DOMAIN, bodies, x, v,
                                    particle_size=1.2 * w.spacing, polylines=lines,
                                    boxes=m.task.obstacles)

    def _parabola(self, b: int) -> list:
        """The outflow parabola of member b as a polyline to draw (0.6 s of flight), if any."""
        est = self.outflow(b)
        if est is None:
            return []
        c, u = est
        tau = np.linspace(0.0, 0.6, 40)[:, None]
        pts = c + u * tau + 0.5 * np.array([0.0, -GRAVITY]) * tau ** 2
        pts = pts[pts[:, 1] >= 0.0]
        return [(pts, _render.PARABOLA_COLOUR)] if len(pts) > 1 else []


def make_batch(cfg: PourConfig, batch_size: int = 1) -> PourBatch:
    """The batch of the config's fidelity: the FLIP solver or Pan & Manocha 2016's reduced model."""
    if cfg.fidelity == "simplified":
        from .pour_simplified import SimplifiedPourBatch

        return SimplifiedPourBatch(cfg, batch_size)
    return PourBatch(cfg, batch_size)


# ---------------------------------------------------------------------- the env
class PourEnv(gym.Env):
    __doc__ = __doc__
    metadata = {"render_modes": ["rgb_array"], "render_fps": int(round(1 / CONTROL_DT)),
                "episode_metrics": EPISODE_METRICS}

    def __init__(self, **kwargs):
        self.cfg = make_config(**kwargs)
        self.render_mode = self.cfg.render_mode
        self.action_space = action_space()
        self.observation_space = observation_space(self.cfg)
        self._batch = make_batch(self.cfg, 1)
        self._needs_reset = True

    # public read-outs for experts, scripts and tests
    @property
    def task(self) -> PourTask | None:
        return self._batch.members[0].task

    @property
    def world(self):
        """The ``taigym.sim.World2D`` (member 0); None before the first reset."""
        return self._batch.world

    @property
    def source_shape(self):
        return self._batch.members[0].source

    @property
    def target_shape(self):
        return self._batch.members[0].target

    @property
    def dt(self) -> float:
        return CONTROL_DT

    @property
    def action_scale(self) -> np.ndarray:
        return ACTION_SCALE.copy()

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        options = reset_options(options)
        task = as_task(options["task"]) if options.get("task") is not None else self.cfg.sample(self.np_random)
        jitter = int(self.np_random.integers(2 ** 31))
        self._batch.reset_member(0, task, jitter)
        self._needs_reset = False
        return self._batch.observation(0), dict(self._batch.members[0].info)

    def step(self, action):
        if self._needs_reset:
            raise RuntimeError("call reset() before step()")
        self._batch.step(check_action(action, self.action_space).reshape(1, 3), None)
        reward, terminated, truncated = self._batch.outcome(0)
        return (self._batch.observation(0), reward, terminated, truncated,
                dict(self._batch.members[0].info))

    def render(self):
        if self.render_mode != "rgb_array" or self.task is None:
            return None
        return self._batch.render(0, self.cfg.render_size)

    def outflow(self):
        """Estimated outflow start point and velocity (world, m and m/s), or None."""
        return None if self.task is None else self._batch.outflow(0)

    def close(self):
        self._batch.release()
        self._needs_reset = True
