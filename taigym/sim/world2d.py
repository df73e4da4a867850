"""``World2D``: the small facade over the batched FLIP solver (DESIGN.md §2).

A world holds ``batch_size`` independent scenes ("members") with the same grid and the same
body slots; each member has its own liquid, poses and, if wanted, its own shapes. Everything is
set up on the host, ``build()`` allocates and compiles, then ``set_pose``/``advance`` run the
control loop. One ``advance`` is one kernel launch for the whole batch.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from . import backend
from .constants import (D_AREA, D_IN_FLIGHT, D_MAX_CFL, D_PCG_ITERS, D_SPILLED, D_SUBSTEPS,
                          D_TARGET_SCORE, D_TIME, D_UNSTABLE, MAX_PROBE_COLUMNS, N_DIAG)
from .geometry import KIND_BOX, Box, Container

Shape = Box | Container
MAX_CHAIN_POINTS = 48     # capacity per body: walls polyline points / interior polygon vertices
VISCOUS_DT_LIMIT = 0.24   # explicit viscosity is stable for dt * nu / dx^2 <= 1/4 in 2D


@dataclass
class _Member:
    x: np.ndarray = field(default_factory=lambda: np.zeros((0, 2)))
    v: np.ndarray = field(default_factory=lambda: np.zeros((0, 2)))
    shapes: list[Shape] = field(default_factory=list)


def _finite_vector(name: str, value, size: int) -> np.ndarray:
    a = np.asarray(value, dtype=np.float64)
    if a.shape != (size,) or not np.all(np.isfinite(a)):
        raise ValueError(f"{name} must be {size} finite numbers, got {value!r}")
    return a


class World2D:
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
        density_correction: fraction of a cell's compression undone per substep.
        settle_speed: m/s; liquid outside every container that moved slower than this over the
            last advance (its own speed before any) counts as spilled.
    """

    def __init__(self, size: Sequence[float] = (0.6, 0.4), cells: int = 128,
                 viscosity: float = 1e-3, *, density: float = 1000.0,
                 gravity: Sequence[float] = (0.0, -9.81), arch: str = "cpu",
                 seed: int | Sequence[int] = 0, batch_size: int = 1,
                 max_particles: int | None = None, cfl: float = 1.0, flip_ratio: float = 0.95,
                 dt_max: float = 0.01, density_correction: float = 0.5,
                 settle_speed: float = 0.05):
        size = _finite_vector("size", size, 2)
        if np.any(size <= 0):
            raise ValueError(f"size must be positive (m), got {tuple(size)}")
        if not (isinstance(cells, (int, np.integer)) and 8 <= cells <= 4096):
            raise ValueError(f"cells must be an integer in [8, 4096], got {cells!r}")
        if not (isinstance(batch_size, (int, np.integer)) and batch_size >= 1):
            raise ValueError(f"batch_size must be an integer >= 1, got {batch_size!r}")
        for name, val, lo, hi in (("viscosity", viscosity, 0.0, 5.0), ("density", density, 1.0, 1e5),
                                  ("cfl", cfl, 1e-3, 3.0), ("flip_ratio", flip_ratio, 0.0, 1.0),
                                  ("dt_max", dt_max, 1e-5, 0.1),
                                  ("density_correction", density_correction, 0.0, 1.0),
                                  ("settle_speed", settle_speed, 0.0, 10.0)):
            if not (isinstance(val, (int, float, np.floating, np.integer)) and lo <= val <= hi):
                raise ValueError(f"{name} must be in [{lo}, {hi}], got {val!r}")
        self.size = (float(size[0]), float(size[1]))
        self.dx = self.size[0] / cells
        self.nx, self.ny = int(cells), int(round(self.size[1] / self.dx))
        self.viscosity, self.density = float(viscosity), float(density)
        self.gravity = _finite_vector("gravity", gravity, 2)
        self.arch = arch
        if arch not in backend.ARCHS:
            raise ValueError(f"arch must be one of {backend.ARCHS}, got {arch!r}")
        self.batch_size = int(batch_size)
        seeds = [seed] * self.batch_size if np.isscalar(seed) else list(seed)
        if len(seeds) != self.batch_size:
            raise ValueError(f"seed must be an int or {self.batch_size} ints, got {seed!r}")
        self._rngs = [np.random.default_rng(int(s)) for s in seeds]
        self._max_particles = max_particles
        self._params = dict(cfl=float(cfl), flip_ratio=float(flip_ratio), dt_max=float(dt_max),
                            density_correction=float(density_correction),
                            settle_speed=float(settle_speed))
        self._members = [_Member() for _ in range(self.batch_size)]
        self._nu = np.full(self.batch_size, self.viscosity / self.density)  # m^2/s, per member
        self._pose = np.zeros((self.batch_size, 0, 3))
        self._vel = np.zeros((self.batch_size, 0, 3))
        self._solver = None
        self._diag = None
        self._in_body = None
        self._x_read = None            # positions read with the diagnostics (float32, B x P x 2)
        self._x_fresh = False          # ... and still what the solver holds
        self._owner_read = None        # ... with each particle's container (int8, B x P)
        self._heights_read = None      # ... and the height probe's columns (float32)
        # height probe per member: (body or -1, y_lo, y_hi, column count), columns (lo, hi)
        self._probe = np.tile([-1.0, 0.0, 0.0, 0.0], (self.batch_size, 1))
        self._probe_columns = np.zeros((self.batch_size, MAX_PROBE_COLUMNS, 2))
        # target opening per member: (body or -1, centre x, centre y, half width), see set_target_opening
        self._target = np.tile([-1.0, 0.0, 0.0, 1.0], (self.batch_size, 1))
        self._area0 = np.zeros(self.batch_size)
        # per member: g - a_frame (world axes, m/s^2), origin x, y (m), theta0, omega0, alpha,
        # flag (see set_frame_motion)
        self._frame = np.zeros((self.batch_size, 8))
        self._frame[:, :2] = self.gravity

    # ------------------------------------------------------------------ scene set-up
    @property
    def spacing(self) -> float:
        """Particle spacing at rest (m): 2 x 2 particles per cell."""
        return 0.5 * self.dx

    def _members_of(self, member: int | None) -> list[int]:
        if member is None:
            return list(range(self.batch_size))
        if not (0 <= member < self.batch_size):
            raise ValueError(f"member must be in [0, {self.batch_size}), got {member!r}")
        return [int(member)]

    def _jitter(self, b: int, n: int) -> np.ndarray:
        # a quarter of the spacing breaks the lattice's symmetry without clumping particles
        return self._rngs[b].uniform(-0.125, 0.125, size=(n, 2)) * self.spacing

    def _add_particles(self, b: int, x: np.ndarray, v: np.ndarray) -> None:
        if self._solver is not None:
            self._download_particles()  # the host copy is stale once the solver has stepped
        m = self._members[b]
        if self._solver is not None and len(m.x) + len(x) > self._solver.P:
            raise ValueError(f"liquid needs {len(m.x) + len(x)} particles but max_particles="
                             f"{self._solver.P}; pass a larger max_particles to World2D")
        x = x + self._jitter(b, len(x))
        m.x = np.concatenate([m.x, x])
        m.v = np.concatenate([m.v, v])
        if self._solver is not None:
            self._upload_particles([b])

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
        vel = np.broadcast_to(_finite_vector("velocity", velocity, 2), pts.shape)
        for b in self._members_of(member):
            self._add_particles(b, pts, vel)
        return len(pts)

    def add_body(self, shape: Shape, pose: Sequence[float] = (0.0, 0.0, 0.0), *,
                 velocity: Sequence[float] = (0.0, 0.0, 0.0), fill: float | None = None,
                 liquid_follows: bool = False) -> int:
        """Add a kinematic body to every member; returns its handle.

        ``pose`` = (x, y, theta) of the body's frame (m, m, rad); for a container that is the
        centre of its inner bottom. ``fill`` seeds liquid in a container up to that fraction of
        its interior height; ``liquid_follows`` starts that liquid moving with the body
        (seed 001's TRANSFER+FOLLOW) instead of at rest (TRANSFER+ZERO).
        """
        if self._solver is not None:
            raise RuntimeError("add_body must be called before build()")
        self._check_solid(shape)
        handle = self._pose.shape[1]
        pose = _finite_vector("pose", pose, 3)
        velocity = _finite_vector("velocity", velocity, 3)
        self._pose = np.concatenate([self._pose, np.tile(pose, (self.batch_size, 1, 1))], axis=1)
        self._vel = np.concatenate([self._vel, np.tile(velocity, (self.batch_size, 1, 1))], axis=1)
        for m in self._members:
            m.shapes.append(shape)
        for b in range(self.batch_size):
            self._check_inside(b, handle, shape)
        if fill is not None:
            self.fill_body(handle, fill, liquid_follows=liquid_follows)
        return handle

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
        outline = np.concatenate([shape.walls, shape.interior])
        c, s = math.cos(th), math.sin(th)
        world = outline @ np.array([[c, s], [-s, c]]) + (x, y)
        margin = shape.radius
        if (world.min(0) - margin < -1e-9).any() or world[:, 0].max() + margin > W + 1e-9 \
                or world[:, 1].max() + margin > H + 1e-9:
            raise ValueError(f"pose {(x, y, th)} puts the container outside the domain "
                             f"[0, {W}] x [0, {H}] m")

    def set_shape(self, handle: int, shape: Shape, *, member: int | None = None) -> None:
        """Replace a body's shape (e.g. a new task's container) in one or all members."""
        self.set_body(handle, shape, member=member)

    def set_body(self, handle: int, shape: Shape, pose=None, velocity=(0.0, 0.0, 0.0), *,
                 member: int | None = None) -> None:
        """Replace a body's shape and, if given, its pose and velocity at once (so that neither
        the new shape at the old pose nor the old shape at the new pose is checked)."""
        self._check_handle(handle)
        self._check_solid(shape)
        idx = self._members_of(member)
        poses, vels = self._pose.copy(), self._vel.copy()
        if pose is not None:
            poses[idx, handle] = _finite_vector("pose", pose, 3)
            vels[idx, handle] = _finite_vector("velocity", velocity, 3)
        old_shapes = [self._members[b].shapes[handle] for b in idx]
        for b in idx:
            self._members[b].shapes[handle] = shape
        try:
            self._install_poses(poses, vels, idx)
        except ValueError:
            for b, prev in zip(idx, old_shapes):
                self._members[b].shapes[handle] = prev
            raise
        if self._solver is not None:
            self._upload_bodies()

    def set_viscosity(self, viscosity: float, *, member: int | None = None) -> None:
        """Dynamic viscosity (Pa·s, in [0, 5]) of one member's liquid, or all members'."""
        if not (isinstance(viscosity, (int, float, np.floating)) and 0.0 <= viscosity <= 5.0):
            raise ValueError(f"viscosity must be in [0.0, 5.0] Pa·s, got {viscosity!r}")
        self._nu[self._members_of(member)] = viscosity / self.density
        if self._solver is not None:
            self._upload_viscosity()

    def set_height_probe(self, handle: int | None, columns=(), y_range=(0.0, 0.0), *,
                         member: int | None = None) -> None:
        """Measure the liquid's height over body ``handle`` with the diagnostics (after every
        advance or change of liquid; read by ``heights_all``): for each of ``columns``, x
        intervals (lo, hi) in the body's frame (m, up to 64), the highest y in the body's frame
        (m) of the particles in it whose y is within ``y_range`` (lo, hi); ``y_range[0]`` where
        there are none. ``handle=None`` stops it. Costs no extra launch: seed 001's heightfield
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
            lo, hi = _finite_vector("y_range", y_range, 2)
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
        advance scores seed 001's R_p = max(1 - dist / half_width, 0), dist from the centre
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
            cx, cy = _finite_vector("centre", centre, 2)
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

    def reseed(self, seed: int, *, member: int | None = None) -> None:
        """Restart the particle-jitter random stream of one member (or all) from ``seed``."""
        for b in self._members_of(member):
            self._rngs[b] = np.random.default_rng(int(seed))

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
            self._add_particles(b, pts, vel)
            n = len(pts)
        return n

    def clear_liquid(self, *, member: int | None = None) -> None:
        """Remove all liquid from a member (or all) and clear its blow-up flag and clock."""
        if self._solver is not None:
            self._download_particles()
        for b in self._members_of(member):
            self._members[b].x = np.zeros((0, 2))
            self._members[b].v = np.zeros((0, 2))
            if self._diag is not None:
                self._diag[b] = 0.0
        if self._solver is not None:
            self._solver.diagnostics.from_numpy(self._diag.astype(np.float32))
            self._upload_particles(self._members_of(member))

    def _check_handle(self, handle: int) -> None:
        if not (0 <= handle < self._pose.shape[1]):
            raise ValueError(f"handle must be a body handle in [0, {self._pose.shape[1]}), got {handle!r}")

    # ------------------------------------------------------------------ build and upload
    def build(self) -> "World2D":
        """Initialise Taichi (explicit arch), allocate the solver and upload the scene."""
        from .flip2d import Flip2D

        if self._solver is not None:
            return self
        self.arch = backend.init(self.arch)
        counts = [len(m.x) for m in self._members]
        capacity = self._max_particles or max(max(counts), 1)
        if max(counts) > capacity:
            raise ValueError(f"max_particles={capacity} is below the {max(counts)} particles added")
        self._solver = Flip2D(self.batch_size, self.nx, self.ny, self.dx, capacity,
                              max(self._pose.shape[1], 1), MAX_CHAIN_POINTS, MAX_CHAIN_POINTS,
                              **self._params)
        s = self._solver
        self._upload_viscosity()
        self._upload_gravity()
        self._upload_probe()
        self._upload_target()
        self._diag = np.zeros((self.batch_size, s.diagnostics.shape[1]))
        self._upload_bodies()
        self._upload_particles()
        return self

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
        """Upload every member's liquid; the area-drift baseline restarts for `changed` (all if
        None), the members whose liquid was just set."""
        s = self._solver
        counts = np.array([len(m.x) for m in self._members], np.int32)
        if counts.max() > s.P:
            raise ValueError(f"liquid needs {counts.max()} particles but max_particles={s.P}")
        x = np.zeros((self.batch_size, s.P, 2), np.float32)
        v = np.zeros((self.batch_size, s.P, 2), np.float32)
        for b, m in enumerate(self._members):
            x[b, :counts[b]] = m.x
            v[b, :counts[b]] = m.v
        s.x.from_numpy(x)
        s.v.from_numpy(v)
        s.n.from_numpy(counts)
        new_liquid = np.zeros(self.batch_size, np.int32)
        new_liquid[slice(None) if changed is None else changed] = 1
        s.new_liquid.from_numpy(new_liquid)
        s.measure_all()
        self._read_diagnostics()
        idx = slice(None) if changed is None else changed
        self._area0[idx] = self._diag[idx, D_AREA]

    def _upload_gravity(self) -> None:
        s = self._solver
        s.gravity.from_numpy(self._frame[:, :2].astype(np.float32))
        s.frame_motion.from_numpy(self._frame[:, 2:].astype(np.float32))

    def _upload_viscosity(self) -> None:
        self._solver.nu.from_numpy(self._nu.astype(np.float32))

    def _particle_array(self, name: str) -> np.ndarray:
        """(B, capacity, 2) positions ("x") or velocities ("v") as the solver has them."""
        return getattr(self._solver, name).to_numpy()

    def _download_particles(self) -> None:
        x, v = self._particle_array("x"), self._particle_array("v")
        for b, m in enumerate(self._members):
            n = len(m.x)
            m.x, m.v = x[b, :n].astype(np.float64), v[b, :n].astype(np.float64)

    def _read_diagnostics(self) -> None:
        """Read the diagnostics, the per-body counts and the positions in one launch; the
        positions stay valid (``positions_all`` serves them) until the particles change."""
        out = np.zeros((self.batch_size, N_DIAG + self._solver.K), np.float32)
        if self._x_read is None:
            self._x_read = np.zeros((self.batch_size, self._solver.P, 2), np.float32)
            self._owner_read = np.zeros((self.batch_size, self._solver.P), np.int8)
            self._heights_read = np.zeros((self.batch_size, MAX_PROBE_COLUMNS), np.float32)
        self._solver.read_state(out, self._x_read, self._owner_read, self._heights_read)
        self._x_fresh = True
        self._diag = out[:, :N_DIAG].astype(np.float64)
        self._in_body = out[:, N_DIAG:].round().astype(np.int64)

    def _require_built(self) -> None:
        if self._solver is None:
            raise RuntimeError("call build() first")

    # ------------------------------------------------------------------ control loop
    def set_pose(self, handle: int, pose, velocity=(0.0, 0.0, 0.0), *,
                 member: int | None = None) -> None:
        """Set a body's pose (x, y, theta) now and its velocity (vx, vy, omega) over the next advance.

        ``pose``/``velocity`` may be (3,) for the chosen member(s) or (batch_size, 3) for all.
        """
        self._check_handle(handle)
        idx = self._members_of(member)
        poses, vels = self._pose.copy(), self._vel.copy()
        for name, val, dst in (("pose", pose, poses), ("velocity", velocity, vels)):
            a = np.asarray(val, dtype=np.float64)
            if a.shape not in ((3,), (len(idx), 3)) or not np.all(np.isfinite(a)):
                raise ValueError(f"{name} must be finite with shape (3,) or ({len(idx)}, 3), got {a.shape}")
            dst[idx, handle] = a
        self._install_poses(poses, vels, idx)
        if self._solver is not None:
            self._upload_poses()

    def set_poses(self, poses, velocities) -> None:
        """Set every body's pose and velocity in every member at once (one upload):
        arrays of shape (batch_size, n_bodies, 3), as :meth:`set_pose` takes per body."""
        shape = self._pose.shape
        new = []
        for name, val in (("poses", poses), ("velocities", velocities)):
            a = np.asarray(val, dtype=np.float64)
            if a.shape != shape or not np.all(np.isfinite(a)):
                raise ValueError(f"{name} must be finite with shape {shape}, got {a.shape}")
            new.append(a)
        self._install_poses(*new, range(self.batch_size))
        if self._solver is not None:
            self._upload_poses()

    def _install_poses(self, poses: np.ndarray, vels: np.ndarray, members) -> None:
        """Make (B, K, 3) arrays the bodies' poses and velocities once every body of `members`
        passes its checks at its new pose; if one does not, nothing changes. (A container
        carried out of the domain would lose its liquid to the edge.)"""
        old = self._pose, self._vel
        self._pose, self._vel = poses, vels
        try:
            for b in members:
                for handle, shape in enumerate(self._members[b].shapes):
                    self._check_inside(b, handle, shape)
        except ValueError:
            self._pose, self._vel = old
            raise

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
        o = _finite_vector("origin", origin, 2)
        a = _finite_vector("accel", accel, 2)
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

    def advance(self, dt: float) -> None:
        """Advance every member by ``dt`` simulated seconds (one kernel launch)."""
        if not (isinstance(dt, (int, float, np.floating)) and math.isfinite(dt) and 0 < dt <= 1.0):
            raise ValueError(f"dt must be in (0, 1] s, got {dt!r}")
        self._require_built()
        self._solver.advance(float(dt), VISCOUS_DT_LIMIT)
        self._read_diagnostics()
        ok = self._diag[:, D_UNSTABLE] == 0
        self._pose[ok] += self._vel[ok] * dt

    # ------------------------------------------------------------------ read-out
    def pose(self, handle: int, *, member: int = 0) -> np.ndarray:
        self._check_handle(handle)
        return self._pose[self._members_of(member)[0], handle].copy()

    def positions(self, member: int = 0) -> np.ndarray:
        """(N, 2) particle positions of a member, m."""
        return self.positions_all()[self._members_of(member)[0]]

    def velocities(self, member: int = 0) -> np.ndarray:
        """(N, 2) particle velocities of a member, m/s."""
        return self.velocities_all()[self._members_of(member)[0]]

    def positions_all(self) -> list[np.ndarray]:
        """Every member's (N_b, 2) positions, with one device read."""
        x = self._positions_read()
        return [x[b, :len(m.x)].astype(np.float64) for b, m in enumerate(self._members)]

    def _positions_read(self) -> np.ndarray:
        """(B, capacity, 2) float32 positions: those read with the diagnostics, if still valid."""
        self._require_built()
        return self._x_read if self._x_fresh else self._particle_array("x")

    def containing_body_all(self) -> list[np.ndarray]:
        """Every member's (N_b,) int8 array: the handle of the container whose interior polygon
        holds each particle, or -1, as measured with the diagnostics after the last advance (or
        liquid upload): the per-particle version of ``fractions()["in"]``."""
        _, owner = self.particle_arrays()
        return [owner[b, :len(m.x)] for b, m in enumerate(self._members)]

    def particle_arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """Positions (B, P, 2), m, and containing bodies (B, P), as ``containing_body_all``, of
        every member in two arrays, P the largest member's particle count: member b's particles
        are the first ``particle_count(b)`` entries of row b; the rest of the row is padding."""
        P = max(len(m.x) for m in self._members)
        return self._positions_read()[:, :P].astype(np.float64), self._owner_read[:, :P]

    def in_body_counts(self) -> np.ndarray:
        """(B, bodies) particles inside each container's interior polygon, as last measured."""
        self._require_built()
        return self._in_body

    def heights_all(self) -> np.ndarray:
        """(B, 64) heights of the probe's columns (``set_height_probe``), m, as last measured."""
        self._require_built()
        return self._heights_read.astype(np.float64)

    def velocities_all(self) -> list[np.ndarray]:
        """Every member's (N_b, 2) velocities, with one device read."""
        self._require_built()
        v = self._particle_array("v")
        return [v[b, :len(m.x)].astype(np.float64) for b, m in enumerate(self._members)]

    def particle_count(self, member: int = 0) -> int:
        return len(self._members[self._members_of(member)[0]].x)

    def fractions(self, member: int = 0) -> dict:
        """Fractions of the member's liquid: ``{"in": {handle: f}, "in_flight": f, "spilled": f}``.

        "in" counts particles inside a container's interior polygon; outside every container, a
        particle that moved slower than ``settle_speed`` over the last advance (or below the
        target opening, see ``set_target_opening``) is spilled, a faster one in flight.
        """
        self._require_built()
        b = self._members_of(member)[0]
        n = max(self.particle_count(b), 1)
        return {"in": {h: self._in_body[b, h] / n for h, s in enumerate(self._members[b].shapes)
                       if isinstance(s, Container)},
                "in_flight": self._diag[b, D_IN_FLIGHT] / n, "spilled": self._diag[b, D_SPILLED] / n}

    def diagnostics(self, member: int = 0) -> dict:
        """Fractions plus: ``area`` (m^2, from the particle number density), ``area_drift``
        (relative to the area at build or after the last liquid change), ``max_cfl`` (cells per
        substep in the last advance), ``substeps``, ``pressure_iterations``, ``time`` (s),
        ``unstable``."""
        b = self._members_of(member)[0]
        d = self._diag[b]
        out = self.fractions(b)
        area0 = self._area0[b]
        out.update(area=d[D_AREA], area_drift=(d[D_AREA] / area0 - 1.0) if area0 > 0 else 0.0,
                   max_cfl=d[D_MAX_CFL], substeps=int(d[D_SUBSTEPS]),
                   pressure_iterations=int(d[D_PCG_ITERS]), time=d[D_TIME],
                   unstable=bool(d[D_UNSTABLE]))
        return out

    @property
    def unstable(self) -> bool:
        """True once any member has blown up (its state is left as it was, for inspection)."""
        return bool(self._diag is not None and self._diag[:, D_UNSTABLE].any())

    def unstable_members(self) -> np.ndarray:
        return np.zeros(self.batch_size, bool) if self._diag is None else self._diag[:, D_UNSTABLE] != 0
