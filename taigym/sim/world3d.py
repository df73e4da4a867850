"""``World3D``: the facade over the batched 3D FLIP solver, mirroring ``World2D`` (DESIGN.md §2).

A world holds ``batch_size`` independent scenes ("members") with the same grid and body slots.
Set up on the host, ``build()`` allocates and compiles, then ``set_pose``/``advance`` run the
control loop; one ``advance`` is one kernel launch for the whole batch.

Poses are 6 numbers (x, y, z, rx, ry, rz): the frame's origin (m) and its rotation as a rotation
vector (axis * angle, rad, world axes); y is up. Velocities are (vx, vy, vz, wx, wy, wz): the
origin's velocity (m/s) and the angular velocity (rad/s, world axes), constant over an advance.
A container's frame has its origin at the centre of its inner bottom and y along its axis.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
from scipy.spatial.transform import Rotation

from . import backend
from .constants import (D_AREA, D_IN_FLIGHT, D_MAX_CFL, D_PCG_ITERS, D_SPILLED, D_SUBSTEPS, D_TIME,
                        D_UNSTABLE, N_DIAG)
from .geometry3d import KIND_BOX3, KIND_SQUARE, Box3, Container3
from .world2d import _finite_vector

Shape3 = Box3 | Container3
MAX_CHAIN_POINTS = 48     # capacity per body: wall chain points / interior polygon vertices
VISCOUS_DT_LIMIT = 0.16   # explicit viscosity is stable for dt * nu / dx^2 <= 1/6 in 3D
JITTER = 0.125            # particle jitter, fraction of the spacing


@dataclass
class _Member:
    x: np.ndarray = field(default_factory=lambda: np.zeros((0, 3)))
    v: np.ndarray = field(default_factory=lambda: np.zeros((0, 3)))
    shapes: list[Shape3] = field(default_factory=list)


def _number(name: str, value, lo: float, hi: float) -> float:
    if not (isinstance(value, (int, float, np.floating, np.integer)) and lo <= value <= hi):
        raise ValueError(f"{name} must be in [{lo}, {hi}], got {value!r}")
    return float(value)


def _matrix(rotvec: np.ndarray) -> np.ndarray:
    return Rotation.from_rotvec(rotvec).as_matrix()


class World3D:
    """A batch of 3D liquid scenes in a box ``size`` metres, ``cells`` cells along x.

    Args are those of ``World2D`` with a third axis: ``size`` (x, y, z) m with y up (edges are
    solid walls), ``gravity`` (gx, gy, gz). Particles are seeded 2 x 2 x 2 per cell.
    """

    def __init__(self, size: Sequence[float] = (0.2, 0.2, 0.2), cells: int = 24,
                 viscosity: float = 1e-3, *, density: float = 1000.0,
                 gravity: Sequence[float] = (0.0, -9.81, 0.0), arch: str = "cpu",
                 seed: int | Sequence[int] = 0, batch_size: int = 1,
                 max_particles: int | None = None, cfl: float = 1.0, flip_ratio: float = 0.95,
                 dt_max: float = 0.01, density_correction: float = 0.5,
                 settle_speed: float = 0.05):
        size = _finite_vector("size", size, 3)
        if np.any(size <= 0):
            raise ValueError(f"size must be positive (m), got {tuple(size)}")
        if not (isinstance(cells, (int, np.integer)) and 8 <= cells <= 512):
            raise ValueError(f"cells must be an integer in [8, 512], got {cells!r}")
        if not (isinstance(batch_size, (int, np.integer)) and batch_size >= 1):
            raise ValueError(f"batch_size must be an integer >= 1, got {batch_size!r}")
        self.viscosity = _number("viscosity", viscosity, 0.0, 5.0)
        self.density = _number("density", density, 1.0, 1e5)
        self._params = dict(cfl=_number("cfl", cfl, 1e-3, 3.0),
                            flip_ratio=_number("flip_ratio", flip_ratio, 0.0, 1.0),
                            dt_max=_number("dt_max", dt_max, 1e-5, 0.1),
                            density_correction=_number("density_correction", density_correction, 0.0, 1.0),
                            settle_speed=_number("settle_speed", settle_speed, 0.0, 10.0))
        if arch not in backend.ARCHS:
            raise ValueError(f"arch must be one of {backend.ARCHS}, got {arch!r}")
        self.arch = arch
        self.size = tuple(float(s) for s in size)
        self.dx = self.size[0] / cells
        self.shape = (int(cells), int(round(self.size[1] / self.dx)), int(round(self.size[2] / self.dx)))
        self.gravity = _finite_vector("gravity", gravity, 3)
        self.batch_size = int(batch_size)
        seeds = [seed] * self.batch_size if np.isscalar(seed) else list(seed)
        if len(seeds) != self.batch_size:
            raise ValueError(f"seed must be an int or {self.batch_size} ints, got {seed!r}")
        self._rngs = [np.random.default_rng(int(s)) for s in seeds]
        self._max_particles = max_particles
        self._members = [_Member() for _ in range(self.batch_size)]
        self._nu = np.full(self.batch_size, self.viscosity / self.density)
        self._pose = np.zeros((self.batch_size, 0, 6))
        self._vel = np.zeros((self.batch_size, 0, 6))
        self._solver = None
        self._diag = None
        self._in_body = None
        self._x_read = None            # positions, read with the diagnostics after every change
        self._owner_read = None        # ... and each particle's container
        self._vol0 = np.zeros(self.batch_size)
        # per member: g - a (3, world), origin (3), omega0 (3), alpha (3), flag; rotation R0
        self._frame = np.zeros((self.batch_size, 13))
        self._frame[:, :3] = self.gravity
        self._frame_R0 = np.tile(np.eye(3), (self.batch_size, 1, 1))

    # ------------------------------------------------------------------ scene set-up
    @property
    def spacing(self) -> float:
        """Particle spacing at rest (m): 2 x 2 x 2 particles per cell."""
        return 0.5 * self.dx

    def _members_of(self, member: int | None) -> list[int]:
        if member is None:
            return list(range(self.batch_size))
        if not (isinstance(member, (int, np.integer)) and 0 <= member < self.batch_size):
            raise ValueError(f"member must be in [0, {self.batch_size}), got {member!r}")
        return [int(member)]

    def _check_handle(self, handle: int) -> None:
        if not (isinstance(handle, (int, np.integer)) and 0 <= handle < self._pose.shape[1]):
            raise ValueError(f"handle must be a body handle in [0, {self._pose.shape[1]}), got {handle!r}")

    def _jitter(self, b: int, n: int) -> np.ndarray:
        # a quarter of the spacing breaks the lattice's symmetry without clumping particles
        return self._rngs[b].uniform(-JITTER, JITTER, size=(n, 3)) * self.spacing

    def _add_particles(self, b: int, x: np.ndarray, v: np.ndarray) -> None:
        """Append particles (already jittered) to member b."""
        if self._solver is not None:
            self._download_particles()
        m = self._members[b]
        if self._solver is not None and len(m.x) + len(x) > self._solver.P:
            raise ValueError(f"liquid needs {len(m.x) + len(x)} particles but max_particles="
                             f"{self._solver.P}; pass a larger max_particles to World3D")
        m.x = np.concatenate([m.x, x])
        m.v = np.concatenate([m.v, v])
        if self._solver is not None:
            self._upload_particles([b])

    def add_liquid_box(self, lo: Sequence[float], hi: Sequence[float], *,
                       velocity: Sequence[float] = (0.0, 0.0, 0.0), member: int | None = None) -> int:
        """Fill the box [lo, hi] (m, domain coordinates) with liquid; returns the count added."""
        lo, hi = _finite_vector("lo", lo, 3), _finite_vector("hi", hi, 3)
        if not (np.all(lo >= 0) and np.all(lo < hi) and np.all(hi <= self.size)):
            raise ValueError(f"liquid box lo={tuple(lo)}, hi={tuple(hi)} must satisfy "
                             f"0 <= lo < hi <= {self.size}")
        h = self.spacing
        axes = [np.arange(math.ceil(a / h - 0.5), math.floor(c / h - 0.5) + 1) * h + 0.5 * h
                for a, c in zip(lo, hi)]
        axes = [ax[(ax > a) & (ax < c)] for ax, a, c in zip(axes, lo, hi)]
        pts = np.stack(np.meshgrid(*axes, indexing="ij"), -1).reshape(-1, 3)
        vel = np.broadcast_to(_finite_vector("velocity", velocity, 3), pts.shape)
        for b in self._members_of(member):
            self._add_particles(b, pts + self._jitter(b, len(pts)), vel)
        return len(pts)

    def add_body(self, shape: Shape3, pose: Sequence[float] = (0.0,) * 6, *,
                 velocity: Sequence[float] = (0.0,) * 6, fill: float | None = None) -> int:
        """Add a kinematic body to every member; returns its handle. ``fill`` seeds liquid at
        rest in a container up to that fraction of its interior height."""
        if self._solver is not None:
            raise RuntimeError("add_body must be called before build()")
        self._check_solid(shape)
        handle = self._pose.shape[1]
        pose = _finite_vector("pose", pose, 6)
        velocity = _finite_vector("velocity", velocity, 6)
        self._pose = np.concatenate([self._pose, np.tile(pose, (self.batch_size, 1, 1))], axis=1)
        self._vel = np.concatenate([self._vel, np.tile(velocity, (self.batch_size, 1, 1))], axis=1)
        for m in self._members:
            m.shapes.append(shape)
        try:
            for b in range(self.batch_size):
                self._check_inside(b, handle, shape)
        except ValueError:
            self._pose, self._vel = self._pose[:, :-1], self._vel[:, :-1]
            for m in self._members:
                m.shapes.pop()
            raise
        if fill is not None:
            self.fill_body(handle, fill)
        return handle

    def _check_solid(self, shape: Shape3) -> None:
        if not isinstance(shape, (Box3, Container3)):
            raise ValueError(f"shape must be a sim.Box3 or a sim.container3d(...), got "
                             f"{type(shape).__name__}")
        if isinstance(shape, Container3):
            if shape.wall_thickness < 2 * self.dx - 1e-12:
                raise ValueError(f"wall_thickness {shape.wall_thickness} m must be at least two grid "
                                 f"cells ({2 * self.dx:.4g} m) so that liquid cannot cross it")
            if max(len(shape.walls), len(shape.interior)) > MAX_CHAIN_POINTS:
                raise ValueError(f"container profile has more than {MAX_CHAIN_POINTS} vertices")

    def _check_inside(self, b: int, handle: int, shape: Shape3) -> None:
        """A container at its pose lies inside the domain (its bounding sphere, then its walls'
        outline); a box obstacle may reach through the domain's edge."""
        if not isinstance(shape, Container3):
            return
        c = self._pose[b, handle, :3]
        reach = shape.bounding_radius
        if np.all(c - reach >= 0) and np.all(c + reach <= self.size):
            return
        if shape.kind == KIND_SQUARE:
            r, t = shape.width / 2 + shape.wall_thickness, shape.wall_thickness
            outline = np.array([[x, y, z] for x in (-r, r) for y in (-t, shape.height)
                                for z in (-r, r)])
            margin = 0.0
        else:  # the wall chain's points revolved at 16 angles; the capsules' radius around them
            phi = np.linspace(0.0, 2 * math.pi, 16, endpoint=False)
            rr, yy = np.abs(shape.walls[:, 0])[:, None], shape.walls[:, 1][:, None]
            outline = np.stack([rr * np.cos(phi), np.broadcast_to(yy, (len(rr), 16)),
                                rr * np.sin(phi)], -1).reshape(-1, 3)
            # + the chord's sag between two of the 16 angles
            margin = shape.radius + float(rr.max()) * (1 - math.cos(math.pi / 16))
        world = outline @ _matrix(self._pose[b, handle, 3:]).T + c
        if (world.min(0) - margin < -1e-9).any() or \
                (world.max(0) + margin > np.array(self.size) + 1e-9).any():
            raise ValueError(f"pose {tuple(self._pose[b, handle])} puts the container outside the "
                             f"domain [0, {self.size[0]}] x [0, {self.size[1]}] x [0, {self.size[2]}] m")

    def set_shape(self, handle: int, shape: Shape3, *, member: int | None = None) -> None:
        """Replace a body's shape (e.g. a new task's container) in one or all members; it must
        fit in the domain at the body's pose."""
        self._check_handle(handle)
        self._check_solid(shape)
        idx = self._members_of(member)
        old = [self._members[b].shapes[handle] for b in idx]
        try:
            for b in idx:
                self._members[b].shapes[handle] = shape
                self._check_inside(b, handle, shape)
        except ValueError:
            for b, prev in zip(idx, old):
                self._members[b].shapes[handle] = prev
            raise
        if self._solver is not None:
            self._upload_bodies()

    def fill_body(self, handle: int, fill: float, *, member: int | None = None) -> int:
        """Seed liquid at rest in a container up to ``fill`` of its interior height."""
        self._check_handle(handle)
        n = 0
        for b in self._members_of(member):
            shape = self._members[b].shapes[handle]
            if not isinstance(shape, Container3):
                raise ValueError(f"body {handle} is not a container and cannot be filled")
            local = shape.fill_points(fill, self.spacing)
            # a point that its jitter would take out of the interior stays on the lattice
            moved = local + self._jitter(b, len(local))
            local = np.where(shape.contains(moved)[:, None], moved, local)
            pts = local @ _matrix(self._pose[b, handle, 3:]).T + self._pose[b, handle, :3]
            self._add_particles(b, pts, np.zeros_like(pts))
            n = len(pts)
        return n

    def clear_liquid(self, *, member: int | None = None) -> None:
        """Remove all liquid from a member (or all) and clear its blow-up flag and clock."""
        if self._solver is not None:
            self._download_particles()
        for b in self._members_of(member):
            self._members[b].x = np.zeros((0, 3))
            self._members[b].v = np.zeros((0, 3))
            if self._diag is not None:
                self._diag[b] = 0.0
        if self._solver is not None:
            self._solver.diagnostics.from_numpy(self._diag.astype(np.float32))
            self._upload_particles(self._members_of(member))

    def reseed(self, seed: int, *, member: int | None = None) -> None:
        """Restart the particle-jitter random stream of one member (or all) from ``seed``."""
        for b in self._members_of(member):
            self._rngs[b] = np.random.default_rng(int(seed))

    def set_viscosity(self, viscosity: float, *, member: int | None = None) -> None:
        """Dynamic viscosity (Pa·s, in [0, 5]) of one member's liquid, or all members'."""
        self._nu[self._members_of(member)] = _number("viscosity", viscosity, 0.0, 5.0) / self.density
        if self._solver is not None:
            self._solver.nu.from_numpy(self._nu.astype(np.float32))

    # ------------------------------------------------------------------ build and upload
    def build(self) -> World3D:
        """Initialise Taichi (explicit arch), allocate the solver and upload the scene."""
        from .flip3d import Flip3D

        if self._solver is not None:
            return self
        self.arch = backend.init(self.arch)
        counts = [len(m.x) for m in self._members]
        capacity = self._max_particles or max(max(counts), 1)
        if max(counts) > capacity:
            raise ValueError(f"max_particles={capacity} is below the {max(counts)} particles added")
        self._solver = Flip3D(self.batch_size, self.shape, self.dx, capacity,
                              max(self._pose.shape[1], 1), MAX_CHAIN_POINTS, **self._params)
        self._solver.nu.from_numpy(self._nu.astype(np.float32))
        self._upload_frame()
        self._diag = np.zeros((self.batch_size, N_DIAG))
        self._upload_bodies()
        self._upload_particles()
        return self

    def _require_built(self) -> None:
        if self._solver is None:
            raise RuntimeError("call build() first")

    def _upload_bodies(self) -> None:
        B, K = self.batch_size, max(self._pose.shape[1], 1)
        kind = np.zeros((B, K), np.int32)
        is_container = np.zeros((B, K), np.int32)
        half = np.zeros((B, K, 3), np.float32)
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
                if shape.kind == KIND_BOX3:
                    half[b, k] = shape.half_extents
                    continue
                is_container[b, k] = 1
                if shape.kind == KIND_SQUARE:
                    half[b, k] = (shape.width / 2, shape.height, shape.wall_thickness)
                radius[b, k] = shape.radius
                nchain[b, k] = len(shape.walls)
                chain[b, k, :len(shape.walls)] = shape.walls
                npoly[b, k] = len(shape.interior)
                poly[b, k, :len(shape.interior)] = shape.interior
        s = self._solver
        s.nbody.from_numpy(np.full(B, self._pose.shape[1], np.int32))
        for f, a in ((s.kind, kind), (s.is_container, is_container), (s.half, half),
                     (s.radius, radius), (s.nchain, nchain), (s.chain, chain), (s.bound, bound),
                     (s.npoly, npoly), (s.poly, poly)):
            f.from_numpy(a)
        self._upload_poses()

    def _upload_poses(self) -> None:
        B, K = self.batch_size, self._pose.shape[1]
        state = np.zeros((B, max(K, 1), 18), np.float32)
        if K:
            state[:, :K, :3] = self._pose[..., :3]
            state[:, :K, 3:12] = _matrix(self._pose[..., 3:].reshape(-1, 3)).reshape(B, K, 9)
            state[:, :K, 12:] = self._vel
        self._solver.set_body_state(state)

    def _upload_particles(self, changed: list[int] | None = None) -> None:
        s = self._solver
        counts = np.array([len(m.x) for m in self._members], np.int32)
        if counts.max() > s.P:
            raise ValueError(f"liquid needs {counts.max()} particles but max_particles={s.P}")
        x = np.zeros((self.batch_size, s.P, 3), np.float32)
        v = np.zeros((self.batch_size, s.P, 3), np.float32)
        for b, m in enumerate(self._members):
            x[b, :counts[b]] = m.x
            v[b, :counts[b]] = m.v
        s.x.from_numpy(x)
        s.v.from_numpy(v)
        s.n.from_numpy(counts)
        s.measure_all()
        self._read_diagnostics()
        idx = slice(None) if changed is None else changed
        self._vol0[idx] = self._diag[idx, D_AREA]

    def _upload_frame(self) -> None:
        s = self._solver
        s.gravity.from_numpy(self._frame[:, :3].astype(np.float32))
        s.frame_motion.from_numpy(self._frame[:, 3:].astype(np.float32))
        s.frame_R0.from_numpy(self._frame_R0.astype(np.float32))

    def _download_particles(self) -> None:
        x, v = self._solver.x.to_numpy(), self._solver.v.to_numpy()
        for b, m in enumerate(self._members):
            n = len(m.x)
            m.x, m.v = x[b, :n].astype(np.float64), v[b, :n].astype(np.float64)

    def _read_diagnostics(self) -> None:
        out = np.zeros((self.batch_size, N_DIAG + self._solver.K), np.float32)
        if self._x_read is None:
            self._x_read = np.zeros((self.batch_size, self._solver.P, 3), np.float32)
            self._owner_read = np.zeros((self.batch_size, self._solver.P), np.int8)
        self._solver.read_state(out, self._x_read, self._owner_read)
        self._diag = out[:, :N_DIAG].astype(np.float64)
        self._in_body = out[:, N_DIAG:].round().astype(np.int64)

    # ------------------------------------------------------------------ control loop
    def set_pose(self, handle: int, pose, velocity=(0.0,) * 6, *, member: int | None = None) -> None:
        """Set a body's pose (x, y, z, rx, ry, rz) now and its velocity (vx, vy, vz, wx, wy, wz)
        over the next advance; (6,) for the chosen member(s) or (batch_size, 6) for all."""
        self._check_handle(handle)
        idx = self._members_of(member)
        poses, vels = self._pose.copy(), self._vel.copy()
        for name, val, dst in (("pose", pose, poses), ("velocity", velocity, vels)):
            a = np.asarray(val, dtype=np.float64)
            if a.shape not in ((6,), (len(idx), 6)) or not np.all(np.isfinite(a)):
                raise ValueError(f"{name} must be finite with shape (6,) or ({len(idx)}, 6), got {a.shape}")
            dst[idx, handle] = a
        self._install_poses(poses, vels, idx)

    def set_poses(self, poses, velocities) -> None:
        """Every body's pose and velocity in every member at once: arrays (batch_size, bodies, 6)."""
        new = []
        for name, val in (("poses", poses), ("velocities", velocities)):
            a = np.asarray(val, dtype=np.float64)
            if a.shape != self._pose.shape or not np.all(np.isfinite(a)):
                raise ValueError(f"{name} must be finite with shape {self._pose.shape}, got {a.shape}")
            new.append(a)
        self._install_poses(*new, range(self.batch_size))

    def _install_poses(self, poses: np.ndarray, vels: np.ndarray, members) -> None:
        old = self._pose, self._vel
        self._pose, self._vel = poses, vels
        try:
            for b in members:
                for handle, shape in enumerate(self._members[b].shapes):
                    self._check_inside(b, handle, shape)
        except ValueError:
            self._pose, self._vel = old
            raise
        if self._solver is not None:
            self._upload_poses()

    def set_frame_motion(self, origin, rotation=(0.0, 0.0, 0.0), omega=(0.0, 0.0, 0.0),
                         alpha=(0.0, 0.0, 0.0), accel=(0.0, 0.0, 0.0), *,
                         member: int | None = None) -> None:
        """Simulate the next advance in a moving frame (a carried container's) instead of the
        room: the domain's axes are the frame's, fixed to it at ``origin`` (domain coordinates,
        m). The frame's orientation in the world is ``rotation`` (rotation vector, rad) now; its
        angular velocity ``omega`` (rad/s) now and constant angular acceleration ``alpha``
        (rad/s^2) are in the FRAME's axes; ``accel`` is its origin's acceleration (world axes,
        m/s^2). Every particle then feels
        g' = R^T (g - a) - alpha x r - omega x (omega x r) - 2 omega x v;
        bodies stay where the frame holds them. The orientation over the advance is
        R0 rot(omega t + alpha t^2 / 2) (exact when alpha is parallel to omega; a planar carry
        or a tilt about one axis is). Call before every advance."""
        o = _finite_vector("origin", origin, 3)
        rv = _finite_vector("rotation", rotation, 3)
        om = _finite_vector("omega", omega, 3)
        al = _finite_vector("alpha", alpha, 3)
        a = _finite_vector("accel", accel, 3)
        idx = self._members_of(member)
        self._frame[idx] = [*(self.gravity - a), *o, *om, *al, 1.0]
        self._frame_R0[idx] = _matrix(rv)
        if self._solver is not None:
            self._upload_frame()

    def clear_frame_motion(self, *, member: int | None = None) -> None:
        """Back to the inertial (room) frame with plain gravity."""
        idx = self._members_of(member)
        self._frame[idx] = 0.0
        self._frame[idx, :3] = self.gravity
        self._frame_R0[idx] = np.eye(3)
        if self._solver is not None:
            self._upload_frame()

    def advance(self, dt: float) -> None:
        """Advance every member by ``dt`` simulated seconds (one kernel launch)."""
        if not (isinstance(dt, (int, float, np.floating)) and math.isfinite(dt) and 0 < dt <= 1.0):
            raise ValueError(f"dt must be in (0, 1] s, got {dt!r}")
        self._require_built()
        self._solver.advance(float(dt), VISCOUS_DT_LIMIT)
        self._read_diagnostics()
        for b in np.flatnonzero(self._diag[:, D_UNSTABLE] == 0):
            self._pose[b, :, :3] += self._vel[b, :, :3] * dt
            if self._pose.shape[1]:
                rot = Rotation.from_rotvec(self._vel[b, :, 3:] * dt) * Rotation.from_rotvec(self._pose[b, :, 3:])
                self._pose[b, :, 3:] = rot.as_rotvec()

    # ------------------------------------------------------------------ read-out
    def pose(self, handle: int, *, member: int = 0) -> np.ndarray:
        self._check_handle(handle)
        return self._pose[self._members_of(member)[0], handle].copy()

    def particle_count(self, member: int = 0) -> int:
        return len(self._members[self._members_of(member)[0]].x)

    def positions(self, member: int = 0) -> np.ndarray:
        """(N, 3) particle positions of a member, m."""
        self._require_built()
        b = self._members_of(member)[0]
        return self._x_read[b, :self.particle_count(b)].astype(np.float64)

    def velocities(self, member: int = 0) -> np.ndarray:
        """(N, 3) particle velocities of a member, m/s."""
        self._require_built()
        b = self._members_of(member)[0]
        return self._solver.v.to_numpy()[b, :self.particle_count(b)].astype(np.float64)

    def containing_body(self, member: int = 0) -> np.ndarray:
        """(N,) int8: the container holding each particle, or -1, as of the last measure."""
        self._require_built()
        b = self._members_of(member)[0]
        return self._owner_read[b, :self.particle_count(b)].copy()

    def fractions(self, member: int = 0) -> dict:
        """``{"in": {handle: f}, "in_flight": f, "spilled": f}``, fractions of the member's liquid."""
        self._require_built()
        b = self._members_of(member)[0]
        n = max(self.particle_count(b), 1)
        return {"in": {h: self._in_body[b, h] / n for h, s in enumerate(self._members[b].shapes)
                       if isinstance(s, Container3)},
                "in_flight": self._diag[b, D_IN_FLIGHT] / n, "spilled": self._diag[b, D_SPILLED] / n}

    def diagnostics(self, member: int = 0) -> dict:
        """Fractions plus ``volume`` (m^3, from the particle number density), ``volume_drift``
        (relative to build or the last liquid change), ``max_cfl``, ``substeps``,
        ``pressure_iterations``, ``time`` (s), ``unstable``."""
        b = self._members_of(member)[0]
        d = self._diag[b]
        out = self.fractions(b)
        v0 = self._vol0[b]
        out.update(volume=d[D_AREA], volume_drift=(d[D_AREA] / v0 - 1.0) if v0 > 0 else 0.0,
                   max_cfl=d[D_MAX_CFL], substeps=int(d[D_SUBSTEPS]),
                   pressure_iterations=int(d[D_PCG_ITERS]), time=d[D_TIME],
                   unstable=bool(d[D_UNSTABLE]))
        return out

    @property
    def unstable(self) -> bool:
        """True once any member has blown up."""
        return bool(self._diag is not None and self._diag[:, D_UNSTABLE].any())

    def unstable_members(self) -> np.ndarray:
        return np.zeros(self.batch_size, bool) if self._diag is None else self._diag[:, D_UNSTABLE] != 0
