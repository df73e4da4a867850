"""The liquid in a carried container, simulated in the container's own frame (DESIGN.md §3).

For transport only the liquid inside the carried container matters, so the solver runs on a
small domain fixed to the container: the container stays still at ``origin`` and the liquid
feels the fictitious forces of the accelerating, rotating frame (``World2D.set_frame_motion``).
The cost is the container's, not the room's. A particle that leaves the container (outside the
interior and not in the column above the opening, where it may still fall back) is *spilled*
for good: in the room it would be falling away. It stays in the small domain (collecting on its
floor, outside the container), but is counted spilled from then on.

Motion over one control interval follows seed 002's jerk-limited trajectories sampled at the
control rate: the container's world pose, velocity and angular velocity are given at the start
and the end of the interval, and acceleration (linear and angular) is constant in between.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from .geometry import Container, rotate
from .world2d import World2D


class CarriedContainer2D:
    """One container carried through the room (2D), its liquid simulated in its frame.

    Args:
        container: the container (``sim.container(...)``), interior dimensions in m.
        fill: liquid height / interior height at rest, upright, in (0, 1].
        cells_across: grid cells across the container's widest interior width (resolution).
        margin: free space around the container in the small domain, m (spilled liquid goes
            there).
        world_kw: passed to :class:`World2D` (viscosity, seed, arch, ...).
    """

    def __init__(self, container: Container, fill: float, *, cells_across: int = 32,
                 margin: float = 0.03, **world_kw):
        if not isinstance(container, Container):
            raise ValueError(f"container must be a sim.container(...), got {type(container).__name__}")
        if not (isinstance(cells_across, (int, np.integer)) and 8 <= cells_across <= 256):
            raise ValueError(f"cells_across must be an integer in [8, 256], got {cells_across!r}")
        self.container = container
        lo, hi = container.interior.min(0), container.interior.max(0)
        dx = (hi[0] - lo[0]) / cells_across
        t = max(container.wall_thickness, 2 * dx)
        if t > container.wall_thickness:  # walls must be two cells thick to hold liquid
            container = type(container)(shape=container.shape, width=container.width,
                                        height=container.height, wall_thickness=t,
                                        interior=container.interior, params=container.params)
            self.container = container
        pad = t + margin
        width = (hi[0] - lo[0]) + 2 * pad
        height = (hi[1] - lo[1]) + t + margin + max(margin, 0.5 * container.height)
        cells = int(math.ceil(width / dx))
        width = cells * dx
        self.origin = (pad - lo[0], t + margin - lo[1])   # container frame origin in the domain
        self.world = World2D(size=(width, height), cells=cells, **world_kw)
        self.handle = self.world.add_body(container, pose=(*self.origin, 0.0), fill=fill)
        self.world.build()
        self.n = self.world.particle_count()
        self._spilled = np.zeros(self.n, dtype=bool)
        left, right = container.lips
        self._column = (min(left[0], right[0]) - t, max(left[0], right[0]) + t,
                        min(left[1], right[1]))

    def local_positions(self) -> np.ndarray:
        """(N, 2) particle positions in the container frame (origin at the inner bottom), m."""
        return self.world.positions() - self.origin

    def _outside(self, p: np.ndarray) -> np.ndarray:
        x0, x1, lip = self._column
        above = (p[:, 1] >= lip) & (p[:, 0] >= x0) & (p[:, 0] <= x1)
        return ~self.container.contains(p) & ~above

    def step(self, pose: Sequence[float], velocity: Sequence[float],
             next_velocity: Sequence[float], dt: float) -> None:
        """Advance ``dt`` s while the container moves from ``pose`` (x, y, theta; world, m and
        rad) with world velocity ``velocity`` (vx, vy, omega) to ``next_velocity`` at the end,
        under constant acceleration."""
        v0 = np.asarray(velocity, dtype=np.float64)
        v1 = np.asarray(next_velocity, dtype=np.float64)
        acc = (v1 - v0) / dt
        self.world.set_frame_motion(self.origin, float(pose[2]), float(v0[2]), float(acc[2]),
                                    acc[:2])
        self.world.advance(dt)
        self._spilled |= self._outside(self.local_positions())

    @property
    def spilled(self) -> float:
        """Fraction of the liquid that has left the container so far (never decreases)."""
        return float(self._spilled.mean()) if self.n else 0.0

    @property
    def unstable(self) -> bool:
        return self.world.unstable

    def world_positions(self, pose: Sequence[float]) -> np.ndarray:
        """(N, 2) particle positions in the room for a container at ``pose``."""
        return rotate(self.local_positions(), float(pose[2])) + np.asarray(pose[:2], dtype=np.float64)
