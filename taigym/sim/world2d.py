"""``World2D``: the small facade over the batched 2D FLIP solver (DESIGN.md §2).

A world holds ``batch_size`` independent scenes ("members") with the same grid and the same
body slots; each member has its own liquid, poses and, if wanted, its own shapes. Everything is
set up on the host, ``build()`` allocates and compiles, then ``set_pose``/``advance`` run the
control loop. One ``advance`` is one kernel launch for the whole batch. Poses are (x, y, theta)
(m, m, rad, counter-clockwise) and velocities (vx, vy, omega). What it shares with ``World3D``
is in :class:`~taigym.sim.batch_world.BatchWorld`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from .batch_world import BatchWorld, finite_vector
from .constants import D_TARGET_SCORE, DENSITY, GRAVITY, MAX_PROBE_COLUMNS, N_DIAG
from .geometry import KIND_BOX, Box, Container

Shape = Box | Container
MAX_CHAIN_POINTS = 48     # capacity per body: walls polyline points / interior polygon vertices


class World2D(BatchWorld):
    """A batch of 2D liquid scenes in a box ``size`` metres wide, with ``cells`` cells along x.

    Args:
        size: (width, height) of the domain in m; its edges are solid walls.
        cells: grid cells along x (dx = size[0] / cells); along y, as many as fit.
        viscosity: dynamic viscosity in Pa·s, in [0, 5] (water 1e-3, honey-like 0.5).
        density: liquid density, kg/m^3.
        gravity: (gx, gy) m/s^2.
        arch: "cpu" (default) or "gpu"/"cuda" (falls back to the CPU with a warning).
        seed: particle jitter seed; an int, or one per member.
        batch_size: number of independent scenes stepped by one launch.
        max_particles: particle capacity per member (default: what was added before build).
        cfl: substep limit, grid cells the fastest liquid or solid point travels per substep,
            in [0.001, 3]. Particles still move at most 0.9 cells between two pushes out of
            solids, so walls two cells thick hold at any setting.
        flip_ratio: FLIP/PIC blend (1 = pure FLIP, noisy; 0 = PIC, viscous-looking).
        dt_max: longest substep, s.
        density_correction: fraction of a cell's compression undone per ``dt_max`` of
            simulated time (a rate, whatever the substep).
        settle_speed: m/s; liquid outside every container that moved slower than this over the
            last advance (its own speed before any) counts as spilled.
    """

    container_type = Container

    def __init__(self, size: Sequence[float] = (0.6, 0.4), cells: int = 128,
                 viscosity: float = 1e-3, *, density: float = DENSITY,
                 gravity: Sequence[float] = (0.0, -GRAVITY), arch: str = "cpu",
                 seed: int | Sequence[int] = 0, batch_size: int = 1,
                 max_particles: int | None = None, cfl: float = 2.0, flip_ratio: float = 0.95,
                 dt_max: float = 0.01, density_correction: float = 0.5,
                 settle_speed: float = 0.05):
        super().__init__(size, cells, viscosity, density=density, gravity=gravity, arch=arch,
                         seed=seed, batch_size=batch_size, max_particles=max_particles, cfl=cfl,
                         flip_ratio=flip_ratio, dt_max=dt_max, density_correction=density_correction,
                         settle_speed=settle_speed)
        self.nx, self.ny = int(cells), int(round(self.size[1] / self.dx))
        self._heights_read = None      # the height probe's columns, read with the diagnostics
        # height probe per member: (body or -1, y_lo, y_hi, column count), columns (lo, hi)
        self._probe = np.tile([-1.0, 0.0, 0.0, 0.0], (self.batch_size, 1))
        self._probe_columns = np.zeros((self.batch_size, MAX_PROBE_COLUMNS, 2))
        # target opening per member: (body or -1, centre x, centre y, half width), see set_target_opening
        self._target = np.tile([-1.0, 0.0, 0.0, 1.0], (self.batch_size, 1))
        # per member: g - a_frame (world axes, m/s^2), origin x, y (m), theta0, omega0, alpha,
        # flag (see set_frame_motion)
        self._frame = np.zeros((self.batch_size, 8))
        self._frame[:, :2] = self.gravity

    # ------------------------------------------------------------------ scene set-up
    def add_liquid_rect(self, x0: float, y0: float, x1: float, y1: float, *,
                        velocity: Sequence[float] = (0.0, 0.0), member: int | None = None) -> int:
        """Fill the rectangle [x0, x1] x [y0, y1] (m) with liquid; returns the particle count added."""
        W, H = self.size
        if not (0 <= x0 < x1 <= W and 0 <= y0 < y1 <= H):
            raise ValueError(f"liquid rectangle ({x0}, {y0}, {x1}, {y1}) must satisfy "
                             f"0 <= x0 < x1 <= {W} and 0 <= y0 < y1 <= {H}")
        h = self.spacing
        xs = np.arange(math.ceil(x0 / h - 0.5), math.floor(x1 / h - 0.5) + 1) * h + 0.5 * h
        ys = np.arange(math.ceil(y0 / h - 0.5), math.floor(y1 / h - 0.5) + 1) * h + 0.5 * h
        pts = np.stack(np.meshgrid(xs[(xs > x0) & (xs < x1)], ys[(ys > y0) & (ys < y1)],
                                   indexing="ij"), -1).reshape(-1, 2)
        vel = np.broadcast_to(finite_vector("velocity", velocity, 2), pts.shape)
        for b in self._members_of(member):
            self._add_particles(b, pts, vel, place=self._jittered(b))
        return len(pts)

    def _check_solid(self, shape: Shape) -> None:
        """A body's shape is one the solver can hold."""
        if not isinstance(shape, (Box, Container)):
            raise ValueError(f"shape must be a sim.Box or a sim.container(...), got {type(shape).__name__}")
        if isinstance(shape, Container):
            if shape.wall_thickness < 2 * self.dx - 1e-12:
                raise ValueError(f"wall_thickness {shape.wall_thickness} m must be at least two grid "
                                 f"cells ({2 * self.dx:.4g} m) so that liquid cannot cross it")
            if max(len(shape.walls), len(shape.interior)) > MAX_CHAIN_POINTS:
                raise ValueError(f"container polygon has more than {MAX_CHAIN_POINTS} vertices")

    def _check_inside(self, b: int, handle: int, shape: Shape) -> None:
        """A container at its pose lies inside the domain (a static box may reach through the
        domain's edge). Called for every body at every pose update, so it first tries the
        container's bounding circle about its frame origin and transforms the outline only
        when that circle crosses an edge."""
        if not isinstance(shape, Container):
            return
        x, y, th = self._pose[b, handle].tolist()
        W, H = self.size
        reach = shape.bounding_radius
        if x - reach >= 0.0 and y - reach >= 0.0 and x + reach <= W and y + reach <= H:
            return
        c, s = math.cos(th), math.sin(th)
        rot = np.array([[c, s], [-s, c]])
        # the wall solid (its centreline grown by the wall radius) and the interior (the liquid's
        # room; its opening corners stand above the walls' centreline, but are not solid)
        for points, margin in ((shape.walls, shape.radius), (shape.interior, 0.0)):
            world = points @ rot + (x, y)
            lo, hi = world.min(0) - margin, world.max(0) + margin
            if lo[0] < -1e-9 or lo[1] < -1e-9 or hi[0] > W + 1e-9 or hi[1] > H + 1e-9:
                raise ValueError(f"pose {(x, y, th)} puts the container outside the domain "
                                 f"[0, {W}] x [0, {H}] m")

    def set_height_probe(self, handle: int | None, columns=(), y_range=(0.0, 0.0), *,
                         member: int | None = None) -> None:
        """Measure the liquid's height over body ``handle`` with the diagnostics (after every
        advance or change of liquid; read by ``heights_all``): for each of ``columns``, x
        intervals (lo, hi) in the body's frame (m, up to 64), the highest y in the body's frame
        (m) of the particles in it whose y is within ``y_range`` (lo, hi); ``y_range[0]`` where
        there are none. ``handle=None`` stops it. Costs no extra launch: Pan & Manocha 2017's heightfield
        of the liquid in the source container, without reading every particle on the host."""
        idx = self._members_of(member)
        if handle is None:
            self._probe[idx] = [-1.0, 0.0, 0.0, 0.0]
        else:
            self._check_handle(handle)
            cols = np.asarray(columns, dtype=np.float64)
            if cols.ndim != 2 or cols.shape[1] != 2 or not 1 <= len(cols) <= MAX_PROBE_COLUMNS \
                    or not np.all(np.isfinite(cols)) or np.any(cols[:, 1] < cols[:, 0]):
                raise ValueError(f"columns must be 1 to {MAX_PROBE_COLUMNS} finite intervals (lo, hi) "
                                 f"with lo <= hi, got {np.shape(columns)}")
            lo, hi = finite_vector("y_range", y_range, 2)
            if hi < lo:
                raise ValueError(f"y_range must be (lo, hi) with lo <= hi, got {y_range!r}")
            self._probe[idx] = [handle, lo, hi, len(cols)]
            self._probe_columns[idx] = 0.0
            self._probe_columns[idx, :len(cols)] = cols
        if self._solver is not None:
            self._upload_probe()

    def set_target_opening(self, handle: int | None, centre=(0.0, 0.0), half_width: float = 1.0, *,
                           member: int | None = None) -> None:
        """Score the liquid entering container ``handle`` through its opening, a segment of
        ``half_width`` (m) either side of ``centre`` (x, y in the body's frame, m) along the
        body's x axis; read by ``target_scores``. Each particle that enters the container in an
        advance scores Pan & Manocha 2017's R_p = max(1 - dist / half_width, 0), dist from the centre
        where its path crossed the opening's line; one that leaves gives back what it scored.
        Liquid outside every container below the opening's centre then counts as spilled: it
        can no longer reach it. ``handle=None`` stops it. Measured with the diagnostics, at no
        extra launch."""
        idx = self._members_of(member)
        if handle is None:
            self._target[idx] = [-1.0, 0.0, 0.0, 1.0]
        else:
            self._check_handle(handle)
            for b in idx:
                if not isinstance(self._members[b].shapes[handle], Container):
                    raise ValueError(f"handle {handle} is not a container; a target opening needs one")
            cx, cy = finite_vector("centre", centre, 2)
            if not (isinstance(half_width, (int, float, np.floating)) and 0.0 < half_width <= 10.0):
                raise ValueError(f"half_width must be in (0, 10] m, got {half_width!r}")
            self._target[idx] = [handle, cx, cy, half_width]
        if self._solver is not None:
            self._upload_target()

    def _upload_target(self) -> None:
        self._solver.target.from_numpy(self._target.astype(np.float32))

    def target_scores(self) -> np.ndarray:
        """(B,) each member's target score (``set_target_opening``) over the last advance: the
        R_p of the particles that entered the target less that of those that left it."""
        self._require_built()
        return self._diag[:, D_TARGET_SCORE].copy()

    def _upload_probe(self) -> None:
        self._solver.probe.from_numpy(self._probe.astype(np.float32))
        self._solver.probe_columns.from_numpy(self._probe_columns.astype(np.float32))

    def fill_body(self, handle: int, fill: float, *, member: int | None = None,
                  liquid_follows: bool = False) -> int:
        """Seed liquid in a container up to ``fill`` of its interior height; returns the count."""
        self._check_handle(handle)
        n = 0
        for b in self._members_of(member):
            shape = self._members[b].shapes[handle]
            if not isinstance(shape, Container):
                raise ValueError(f"body {handle} is not a container and cannot be filled")
            local = shape.fill_points(fill, self.spacing)
            x, y, th = self._pose[b, handle]
            c, s = math.cos(th), math.sin(th)
            pts = local @ np.array([[c, s], [-s, c]]) + (x, y)
            vel = np.zeros_like(pts)
            if liquid_follows:
                vx, vy, om = self._vel[b, handle]
                vel = np.stack([vx - om * (pts[:, 1] - y), vy + om * (pts[:, 0] - x)], -1)
            self._add_particles(b, pts, vel, place=self._jittered(b))
            n = len(pts)
        return n

    # ------------------------------------------------------------------ build and upload
    def _new_solver(self, capacity: int):
        from .flip2d import Flip2D

        return Flip2D(self.batch_size, self.nx, self.ny, self.dx, capacity, max(self._pose.shape[1], 1),
                      MAX_CHAIN_POINTS, MAX_CHAIN_POINTS, **self._params)

    def _upload_settings(self) -> None:
        self._upload_viscosity()
        self._upload_gravity()
        self._upload_probe()
        self._upload_target()

    def _upload_bodies(self) -> None:
        B, K = self.batch_size, max(self._pose.shape[1], 1)
        kind = np.zeros((B, K), np.int32)
        half = np.zeros((B, K, 2), np.float32)
        radius = np.zeros((B, K), np.float32)
        nchain = np.zeros((B, K), np.int32)
        chain = np.zeros((B, K, MAX_CHAIN_POINTS, 2), np.float32)
        bound = np.zeros((B, K), np.float32)
        npoly = np.zeros((B, K), np.int32)
        poly = np.zeros((B, K, MAX_CHAIN_POINTS, 2), np.float32)
        for b, m in enumerate(self._members):
            for k, shape in enumerate(m.shapes):
                kind[b, k] = shape.kind
                bound[b, k] = shape.bounding_radius
                if shape.kind == KIND_BOX:
                    half[b, k] = shape.half_extents
                else:
                    radius[b, k] = shape.radius
                    nchain[b, k] = len(shape.walls)
                    chain[b, k, :len(shape.walls)] = shape.walls
                    npoly[b, k] = len(shape.interior)
                    poly[b, k, :len(shape.interior)] = shape.interior
        s = self._solver
        s.nbody.from_numpy(np.full(B, self._pose.shape[1], np.int32))
        for f, a in ((s.kind, kind), (s.half, half), (s.radius, radius), (s.nchain, nchain),
                     (s.chain, chain), (s.bound, bound), (s.npoly, npoly), (s.poly, poly)):
            f.from_numpy(a)
        self._upload_poses()

    def _upload_poses(self) -> None:
        # one launch for poses and velocities: at a few hundred particles a launch costs as much
        # as a tenth of the step
        state = np.zeros((self.batch_size, max(self._pose.shape[1], 1), 6), np.float32)
        state[:, :self._pose.shape[1], :3] = self._pose
        state[:, :self._vel.shape[1], 3:] = self._vel
        self._solver.set_body_state(state)

    def _upload_particles(self, changed: list[int] | None = None) -> None:
        # the replaced liquid's particles have earned no target score yet
        new_liquid = np.zeros(self.batch_size, np.int32)
        new_liquid[slice(None) if changed is None else changed] = 1
        self._solver.new_liquid.from_numpy(new_liquid)
        super()._upload_particles(changed)

    def _upload_gravity(self) -> None:
        s = self._solver
        s.gravity.from_numpy(self._frame[:, :2].astype(np.float32))
        s.frame_motion.from_numpy(self._frame[:, 2:].astype(np.float32))

    def _read_diagnostics(self) -> None:
        """Read the diagnostics, the per-body counts and the positions in one launch; the
        positions stay valid (``positions_all`` serves them) until the particles change."""
        out = np.zeros((self.batch_size, N_DIAG + self._solver.K), np.float32)
        if self._x_read is None:
            self._x_read = np.zeros((self.batch_size, self._solver.P, 2), np.float32)
            self._owner_read = np.zeros((self.batch_size, self._solver.P), np.int8)
            self._heights_read = np.zeros((self.batch_size, MAX_PROBE_COLUMNS), np.float32)
        self._solver.read_state(out, self._x_read, self._owner_read, self._heights_read)
        self._diag = out[:, :N_DIAG].astype(np.float64)
        self._in_body = out[:, N_DIAG:].round().astype(np.int64)

    # ------------------------------------------------------------------ control loop
    def set_frame_motion(self, origin, theta: float, omega: float = 0.0, alpha: float = 0.0,
                         accel=(0.0, 0.0), *, member: int | None = None) -> None:
        """Simulate the next advances in a moving frame (a carried container's) instead of the
        room: the domain's axes are the frame's, fixed to it at ``origin`` (x, y in the domain,
        m), and the frame moves in the world with angle ``theta`` (rad) now, angular velocity
        ``omega`` (rad/s) now, constant angular acceleration ``alpha`` (rad/s^2) and the
        acceleration ``accel`` of its origin (world axes, m/s^2) over the advance. Every liquid
        particle then feels, in the frame,
        g' = R^T (g - a) - alpha x r - omega x (omega x r) - 2 omega x v
        (r from the origin, v relative to the frame); bodies stay where the frame holds them.
        Call it before every advance (theta and omega move on); ``clear_frame_motion`` ends it.
        """
        o = finite_vector("origin", origin, 2)
        a = finite_vector("accel", accel, 2)
        for name, val in (("theta", theta), ("omega", omega), ("alpha", alpha)):
            if not (isinstance(val, (int, float, np.floating, np.integer)) and math.isfinite(val)):
                raise ValueError(f"{name} must be a finite number, got {val!r}")
        idx = self._members_of(member)
        self._frame[idx] = [*(self.gravity - a), *o, theta, omega, alpha, 1.0]
        if self._solver is not None:
            self._upload_gravity()

    def clear_frame_motion(self, *, member: int | None = None) -> None:
        """Back to the inertial (room) frame with plain gravity."""
        idx = self._members_of(member)
        self._frame[idx] = 0.0
        self._frame[idx, :2] = self.gravity
        if self._solver is not None:
            self._upload_gravity()

    def _move_bodies(self, members: np.ndarray, dt: float) -> None:
        self._pose[members] += self._vel[members] * dt

    # ------------------------------------------------------------------ read-out
    def heights_all(self) -> np.ndarray:
        """(B, 64) heights of the probe's columns (``set_height_probe``), m, as last measured."""
        self._require_built()
        return self._heights_read.astype(np.float64)
