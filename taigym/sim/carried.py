"""The liquid in a carried container, simulated in the container's own frame (DESIGN.md §3).

For transport only the liquid inside the carried container matters, so the solver runs on a
small domain fixed to the container: the container stays still at ``origin`` and the liquid
feels the fictitious forces of the accelerating, rotating frame (``World2D.set_frame_motion``).
The cost is the container's, not the room's. A particle that leaves the container (outside the
interior and not in the column above the opening, where it may still fall back) is *spilled*
for good: in the room it would be falling away. It stays in the small domain (collecting on its
floor, outside the container), but is counted spilled from then on.

Motion over one control interval follows the SFRRT* paper's jerk-limited trajectories sampled at the
control rate: the container's world pose, velocity and angular velocity are given at the start
and the end of the interval, and acceleration (linear and angular) is constant in between.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from scipy.spatial.transform import Rotation

from .geometry import Container, rotate
from .world2d import World2D


def _positive_lengths(**lengths: float) -> None:
    for name, v in lengths.items():
        if not (isinstance(v, (int, float)) and math.isfinite(v) and v > 0):
            raise ValueError(f"{name} must be a positive number of metres, got {v!r}")


class _Carried:
    """What both carried containers share: the world, the loaded container and which particles
    have spilled for good."""

    def __init__(self, world, origin: tuple) -> None:
        self.world, self.origin = world, origin
        self.handle = None
        self.container = None
        self.n = 0
        self._spilled = np.zeros(0, dtype=bool)

    def _install(self, container, fill: float, seed: int | None) -> None:
        """Put ``container`` at rest at the frame's origin, upright, filled to ``fill``."""
        self.container = container
        w = self.world
        pose = (*self.origin, *(0.0,) * (w.POSE_SIZE - w.DIM))
        if self.handle is None:
            self.handle = w.add_body(container, pose=pose)
            w.build()
        else:
            w.set_body(self.handle, container, pose=pose)
        w.clear_liquid()
        w.clear_frame_motion()
        if seed is not None:
            w.reseed(seed)
        self.n = w.fill_body(self.handle, fill)
        self._spilled = np.zeros(self.n, dtype=bool)

    def local_positions(self) -> np.ndarray:
        """(N, DIM) particle positions in the container frame (origin at the inner bottom), m."""
        return self.world.positions() - self.origin

    @property
    def spilled(self) -> float:
        """Fraction of the liquid that has left the container so far (never decreases)."""
        return float(self._spilled.mean()) if self.n else 0.0

    @property
    def unstable(self) -> bool:
        return self.world.unstable


class CarriedContainer2D(_Carried):
    """Containers carried through the room (2D), one at a time, their liquid simulated in their
    own frame on a fixed small grid (so that changing containers costs no recompilation).

    Args:
        max_width: widest interior width of any container loaded (m).
        max_height: tallest interior height (m).
        dx: grid spacing (m); walls thinner than two cells are thickened to 2 dx.
        margin: free space around the container (m); spilled liquid collects there.
        world_kw: passed to :class:`World2D` (viscosity, seed, arch, ...).
    """

    def __init__(self, max_width: float, max_height: float, *, dx: float = 0.0035,
                 margin: float = 0.03, **world_kw):
        _positive_lengths(max_width=max_width, max_height=max_height, dx=dx, margin=margin)
        self.dx, self.margin = float(dx), float(margin)
        self.max_width, self.max_height = float(max_width), float(max_height)
        t = 2 * self.dx + 0.01  # room for walls up to 1 cm + 2 cells thick
        width = max_width + 2 * (t + margin)
        height = max_height + t + margin + max(margin, 0.5 * max_height)
        cells = int(math.ceil(width / dx))
        # capacity: the largest interior full, at 2 x 2 particles per cell
        capacity = int(1.1 * max_width * max_height / (0.5 * dx) ** 2) + 64
        super().__init__(World2D(size=(cells * dx, height), cells=cells, max_particles=capacity,
                                 **world_kw),
                         (0.5 * cells * dx, t + margin))   # container frame origin in the domain

    def load(self, container: Container, fill: float, *, seed: int | None = None) -> None:
        """Put ``container`` (at rest, upright) filled to ``fill`` of its height in the frame;
        any previous liquid is removed. ``seed`` restarts the particle jitter."""
        if not isinstance(container, Container):
            raise ValueError(f"container must be a sim.container(...), got {type(container).__name__}")
        lo, hi = container.interior.min(0), container.interior.max(0)
        if hi[0] - lo[0] > self.max_width + 1e-9 or hi[1] - lo[1] > self.max_height + 1e-9:
            raise ValueError(f"container interior {hi[0] - lo[0]:.3g} x {hi[1] - lo[1]:.3g} m is "
                             f"larger than this frame's max_width x max_height = "
                             f"{self.max_width:.3g} x {self.max_height:.3g} m")
        if container.wall_thickness < 2 * self.dx:  # walls must be two cells thick to hold liquid
            container = Container(shape=container.shape, width=container.width,
                                  height=container.height, wall_thickness=2 * self.dx,
                                  interior=container.interior, params=container.params)
        self._install(container, fill, seed)
        left, right = container.lips
        t = container.wall_thickness
        self._column = (min(left[0], right[0]) - t, max(left[0], right[0]) + t,
                        min(left[1], right[1]))

    def _outside(self, p: np.ndarray) -> np.ndarray:
        x0, x1, lip = self._column
        above = (p[:, 1] >= lip) & (p[:, 0] >= x0) & (p[:, 0] <= x1)
        return ~self.container.contains(p) & ~above

    def step(self, pose: Sequence[float], velocity: Sequence[float],
             next_velocity: Sequence[float], dt: float) -> None:
        """Advance ``dt`` s while the container moves from ``pose`` (x, y, theta; world, m and
        rad) with world velocity ``velocity`` (vx, vy, omega) to ``next_velocity`` at the end,
        under constant acceleration."""
        if self.container is None:
            raise RuntimeError("call load() first")
        v0 = np.asarray(velocity, dtype=np.float64)
        v1 = np.asarray(next_velocity, dtype=np.float64)
        acc = (v1 - v0) / dt
        self.world.set_frame_motion(self.origin, float(pose[2]), float(v0[2]), float(acc[2]),
                                    acc[:2])
        self.world.advance(dt)
        self._spilled |= self._outside(self.local_positions())

    def world_positions(self, pose: Sequence[float]) -> np.ndarray:
        """(N, 2) particle positions in the room for a container at ``pose``."""
        return rotate(self.local_positions(), float(pose[2])) + np.asarray(pose[:2], dtype=np.float64)


class CarriedContainer3D(_Carried):
    """A container carried through a room (3D), its liquid simulated in its own frame on a
    fixed small grid (``World3D``), as :class:`CarriedContainer2D`.

    The container's frame has y along its axis (origin at the centre of the inner bottom); the
    room's frame here is the simulator's, y up (a z-up robot world maps to it by a rotation,
    see ``taigym.envs.transport3d``).

    Args:
        max_radius: largest interior radius at the opening of any container loaded (m).
        max_height: tallest interior height (m).
        dx: grid spacing (m); walls thinner than two cells are thickened to 2 dx.
        margin: free space around the container (m); spilled liquid collects there.
        world_kw: passed to :class:`World3D` (viscosity, seed, arch, ...).
    """

    def __init__(self, max_radius: float, max_height: float, *, dx: float = 0.01,
                 margin: float = 0.02, **world_kw):
        from .world3d import World3D

        _positive_lengths(max_radius=max_radius, max_height=max_height, dx=dx, margin=margin)
        self.dx, self.margin = float(dx), float(margin)
        self.max_radius, self.max_height = float(max_radius), float(max_height)
        self.wall = 2 * self.dx                          # walls two cells thick hold the liquid
        half = max_radius + self.wall + margin
        cells = int(math.ceil(2 * half / dx))
        height = max_height + self.wall + margin + max(margin, 0.5 * max_height)
        side = cells * dx
        # capacity: the largest interior full, at 2 x 2 x 2 particles per cell
        capacity = int(1.1 * math.pi * max_radius ** 2 * max_height / (0.5 * dx) ** 3) + 64
        super().__init__(World3D(size=(side, height, side), cells=cells, max_particles=capacity,
                                 **world_kw),
                         np.array([0.5 * side, self.wall + margin, 0.5 * side]))

    def load(self, container, fill: float, *, seed: int | None = None) -> None:
        """Put ``container`` (a ``sim.container3d``, upright, at rest) filled to ``fill`` of its
        height in the frame; any previous liquid is removed. ``seed`` restarts the jitter."""
        from .geometry3d import Container3

        if not isinstance(container, Container3) or container.section != "round":
            raise ValueError(f"container must be a round sim.container3d(...), got {container!r}")
        r = float(np.abs(container.interior[:, 0]).max())
        if r > self.max_radius + 1e-9 or container.height > self.max_height + 1e-9:
            raise ValueError(f"container interior radius {r:.3g} m x height {container.height:.3g} m "
                             f"exceeds this frame's max_radius x max_height = "
                             f"{self.max_radius:.3g} x {self.max_height:.3g} m")
        if container.wall_thickness < self.wall:
            s = container.section2d
            container = Container3(Container(shape=s.shape, width=s.width, height=s.height,
                                             wall_thickness=self.wall, interior=s.interior,
                                             params=s.params))
        self._install(container, fill, seed)
        lip_r = float(np.abs(container.walls[:, 0]).max()) + container.radius
        self._column = (lip_r, container.height)       # the column above the opening

    def step(self, rotation, velocity, next_velocity, dt: float) -> None:
        """Advance ``dt`` s while the container, at orientation ``rotation`` (rotation vector,
        room axes), moves from the room velocity ``velocity`` (vx, vy, vz of its origin, m/s;
        wx, wy, wz, rad/s) to ``next_velocity`` at the end, under constant acceleration."""
        if self.container is None:
            raise RuntimeError("call load() first")
        v0 = np.asarray(velocity, dtype=np.float64)
        v1 = np.asarray(next_velocity, dtype=np.float64)
        R = Rotation.from_rotvec(np.asarray(rotation, dtype=np.float64)).as_matrix()
        # World3D takes the angular velocity and acceleration in the frame's axes
        omega = R.T @ v0[3:]
        alpha = R.T @ (v1[3:] - v0[3:]) / dt
        self.world.set_frame_motion(self.origin, rotation, omega, alpha, (v1[:3] - v0[:3]) / dt)
        self.world.advance(dt)
        p = self.local_positions()
        lip_r, lip_y = self._column
        above = (p[:, 1] >= lip_y) & (np.hypot(p[:, 0], p[:, 2]) <= lip_r)
        self._spilled |= ~self.container.contains(p) & ~above
