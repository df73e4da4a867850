"""Constants, validated arguments and spaces of ``taigym/Pour-v0`` (both fidelities and the vector
env): :class:`PourConfig` checks every constructor argument before any work, and
:func:`observation_space` / :func:`action_space` give the spaces the env's docstring tables."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from gymnasium import spaces

from taigym.sim.constants import CONTROL_DT, MAX_PROBE_COLUMNS

from .checks import choice
from .pour_reward import REWARD_MODES
from .pour_tasks import (ALL_SHAPES, DOMAIN, LIQUID_VELOCITIES, MAX_OBSTACLES, MAX_VISCOSITY,
                         OBSTACLE_SIZE, SPLIT_SIZES, PourTask, over_target, pour_tasks, sample_task)

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
PIVOTS = ("frame", "lip")                         # what the tilt action rotates S about
SETTLE_SPEED = 0.05    # m/s: liquid outside both containers that moved slower over a step is spilled
N_STATE = 32 + 4 * MAX_OBSTACLES          # entries of the state vector (docstring table)


# ---------------------------------------------------------------------- configuration
def check_number(name: str, value: Any, lo: float, hi: float, *, integer: bool = False,
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
    reward_mode: str = "rp"
    shaping_gamma: float = 0.99
    pivot: str = "frame"
    over_target: float = 0.0
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
            set_("fill", check_number("fill", self.fill, 0.0, 1.0, lo_open=True))
        if self.viscosity is not None:
            set_("viscosity", check_number("viscosity", self.viscosity, 0.0, MAX_VISCOSITY))
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
        check_number("resolution", self.resolution, 64, 512, integer=True)
        if self.render_mode not in (None, "rgb_array"):
            raise ValueError(f"render_mode must be None or 'rgb_array', got {self.render_mode!r}")
        set_("horizon", check_number("horizon", self.horizon, CONTROL_DT, 60.0))
        if self.max_particles is not None:
            check_number("max_particles", self.max_particles, 1, 10_000_000, integer=True)
        check_number("n_particles", self.n_particles, 1, 100_000, integer=True)
        check_number("heightfield_bins", self.heightfield_bins, 2, MAX_PROBE_COLUMNS, integer=True)
        for name in ("image_size", "render_size"):
            v = getattr(self, name)
            if not (isinstance(v, (tuple, list)) and len(v) == 2 and
                    all(isinstance(s, (int, np.integer)) and 8 <= s <= 4096 for s in v)):
                raise ValueError(f"{name} must be (height, width) in pixels, each in [8, 4096], got {v!r}")
            set_(name, (int(v[0]), int(v[1])))
        set_("spill_penalty", check_number("spill_penalty", self.spill_penalty, 0.0, 1e6))
        set_("smoothness_penalty", check_number("smoothness_penalty", self.smoothness_penalty, 0.0, 1e6))
        choice("reward_mode", self.reward_mode, REWARD_MODES)
        set_("shaping_gamma", check_number("shaping_gamma", self.shaping_gamma, 0.0, 1.0))
        set_("over_target", check_number("over_target", self.over_target, 0.0, 1.0))
        if self.pivot not in PIVOTS:
            raise ValueError(f"pivot must be one of {PIVOTS} (S tilts about its frame origin or its "
                             f"pouring lip), got {self.pivot!r}")
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
        """The next task the env draws itself (a reset without ``options["task"]``): from the
        split or the distribution, moved over T with probability ``over_target``."""
        if self.task_split is not None:
            split = pour_tasks(self.task_split)
            task = split[min(int(rng.random() * len(split)), len(split) - 1)]
        else:
            task = sample_task(rng, source_container=self.container,
                               target_container=self.target_container, fill=self.fill,
                               viscosity=self.viscosity, target_velocity=self.target_velocity,
                               liquid_velocity=self.liquid_velocity)
        if self.over_target > 0.0 and rng.random() < self.over_target:
            task = over_target(task)
        return task


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

