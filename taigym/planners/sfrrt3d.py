"""SFRRT* (the SFRRT* paper, 2024) for a container carried upright in 3D (Transport3D-v0).

A configuration is the position (x, y, z) of the container's origin, m; the arm holds the
container upright, so the tilt that spills is the free surface's under the motion's
acceleration, which the time parameterization bounds. The same three stages as
:mod:`taigym.planners.sfrrt`, on the generic :func:`~taigym.planners.sfrrt.rrt_star`:

1. RRT* in the workspace box, collision by ``collides_at(p)`` (the caller's: the arm and the
   container against the boxes and the table, the arm's configuration from its inverse
   kinematics), then shortcutting;
2. Ruckig state-to-state calls chained over the waypoints;
3. SFTP: the jerk (and the acceleration with it) is lowered until the classifier accepts.

The classifier: :class:`SloshClassifier3D` (the free surface's slosh mode, driven by the
planned acceleration, must stay below the SFRRT* paper's maximum tilt of the 3D container and fill), or
the learned transformer of :mod:`taigym.models.sfc` trained on 3D trajectories.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from ..models.max_tilt import max_tilt_3d
from ..models.sfc import DT, SETTLE, slosh_tilt
from .sfrrt import SFRRTConfig, TimedTrajectory, rrt_star

# the arm's limits: 0.5 m/s along each axis (2 rad/s joints at 0.5-0.8 m reach, with a
# margin for tracking), 12 m/s^2; SFTP starts at 240 m/s^3, where the liquid spills
DEFAULTS_3D = dict(step=0.1, check_step=0.02, tilt_weight=1.0, goal_bias=0.15,
                   max_velocity=(0.5, 0.5, 0.5), max_acceleration=(12.0, 12.0, 12.0),
                   max_jerk=(240.0, 240.0, 240.0), time_budget=0.5, refine_iters=40)


def config_3d(**overrides) -> SFRRTConfig:
    """An :class:`SFRRTConfig` for positions in 3D (isotropic metric, arm-sized speeds)."""
    return SFRRTConfig(**{**DEFAULTS_3D, **overrides})


@dataclass(frozen=True)
class Problem3D:
    """Start and goal positions of the container's origin (m), its properties (r_b, r_u, h_c,
    h_w), the workspace box (lo, hi) to sample in, and the collision check of a position."""

    start: tuple[float, float, float]
    goal: tuple[float, float, float]
    props: tuple[float, float, float, float]
    bounds: tuple[tuple[float, float, float], tuple[float, float, float]]
    collides_at: Callable[[np.ndarray], bool]

    @property
    def theta_max(self) -> float:
        """The SFRRT* paper's maximum tilt of the 3D frustum at this fill (rad)."""
        return max_tilt_3d(*self.props)

    def path_free(self, positions: np.ndarray) -> bool:
        return not any(self.collides_at(p) for p in positions)


def plan_path3d(problem: Problem3D, cfg: SFRRTConfig | None = None,
                rng: np.random.Generator | None = None) -> np.ndarray:
    """RRT* + shortcutting between the start and goal positions; waypoints (K, 3)."""
    cfg = cfg or config_3d()
    start, goal = np.asarray(problem.start, float), np.asarray(problem.goal, float)
    lo, hi = (np.asarray(b, float) for b in problem.bounds)
    if problem.collides_at(start) or problem.collides_at(goal):
        raise RuntimeError("start or goal in collision")

    def edge_free(a, b) -> bool:
        n = max(1, int(math.ceil(np.linalg.norm(b - a) / cfg.check_step)))
        return not any(problem.collides_at(a + (b - a) * s) for s in np.linspace(0, 1, n + 1)[1:])

    return rrt_star(start, goal, lambda r: lo + r.random(3) * (hi - lo), problem.collides_at,
                    edge_free, np.ones(3), cfg, rng)


class SloshClassifier3D:
    """Spill-free when the free surface's fundamental slosh mode, driven by the trajectory's
    acceleration and left to ring for ``settle`` s at rest after it
    (:func:`taigym.models.sfc.slosh_tilt`, linear sloshing theory), stays below ``margin`` x
    the SFRRT* paper's maximum tilt of the 3D container and fill at every sample (z up)."""

    def __init__(self, margin: float = 1.0, settle: float = SETTLE):
        self.margin, self.settle = float(margin), float(settle)

    def __call__(self, traj: TimedTrajectory, props: Sequence[float]) -> bool:
        rest = np.zeros((int(round(self.settle / DT)), 3))     # trajectories are sampled every DT
        psi = slosh_tilt(np.concatenate([traj.acc, rest]), props)
        return bool(np.max(psi) <= self.margin * max_tilt_3d(*props))
