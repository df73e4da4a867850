"""``World3D``: the facade over the batched 3D FLIP solver, mirroring ``World2D`` (DESIGN.md §2).

A world holds ``batch_size`` independent scenes ("members") with the same grid and body slots.
Set up on the host, ``build()`` allocates and compiles, then ``set_pose``/``advance`` run the
control loop; one ``advance`` is one kernel launch for the whole batch. What it shares with
``World2D`` is in :class:`~taigym.sim.batch_world.BatchWorld`.

Poses are 6 numbers (x, y, z, rx, ry, rz): the frame's origin (m) and its rotation as a rotation
vector (axis * angle, rad, world axes); y is up. Velocities are (vx, vy, vz, wx, wy, wz): the
origin's velocity (m/s) and the angular velocity (rad/s, world axes), constant over an advance.
A container's frame has its origin at the centre of its inner bottom and y along its axis.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from scipy.spatial.transform import Rotation

from .batch_world import BatchWorld, finite_vector
from .constants import DENSITY, GRAVITY, N_DIAG
from .geometry3d import KIND_BOX3, KIND_SQUARE, Box3, Container3

Shape3 = Box3 | Container3
MAX_CHAIN_POINTS = 48     # capacity per body: wall chain points / interior polygon vertices


def _matrix(rotvec: np.ndarray) -> np.ndarray:
    return Rotation.from_rotvec(rotvec).as_matrix()


class World3D(BatchWorld):
    """A batch of 3D liquid scenes in a box ``size`` metres, ``cells`` cells along x.

    Args are those of ``World2D`` with a third axis: ``size`` (x, y, z) m with y up (edges are
    solid walls), ``gravity`` (gx, gy, gz). Particles are seeded 2 x 2 x 2 per cell.
    """

    DIM = 3
    POSE_SIZE = 6
    MAX_CELLS = 512
    OPTIMIZE_IR = False       # 21 s to compile instead of 262 s, 8 % slower (backend.init)
    REGION = "auto"           # the solver's region: active tiles or box, whichever is smaller
    LIQUID_MEASURE = "volume"
    container_type = Container3

    def __init__(self, size: Sequence[float] = (0.2, 0.2, 0.2), cells: int = 24,
                 viscosity: float = 1e-3, *, density: float = DENSITY,
                 gravity: Sequence[float] = (0.0, -GRAVITY, 0.0), arch: str = "cpu",
                 seed: int | Sequence[int] = 0, batch_size: int = 1,
                 max_particles: int | None = None, cfl: float = 1.0, flip_ratio: float = 0.95,
                 dt_max: float = 0.01, density_correction: float = 0.5,
                 settle_speed: float = 0.05):
        super().__init__(size, cells, viscosity, density=density, gravity=gravity, arch=arch,
                         seed=seed, batch_size=batch_size, max_particles=max_particles, cfl=cfl,
                         flip_ratio=flip_ratio, dt_max=dt_max, density_correction=density_correction,
                         settle_speed=settle_speed)
        self.shape = (int(cells), int(round(self.size[1] / self.dx)), int(round(self.size[2] / self.dx)))
        # per member: g - a (3, world), origin (3), omega0 (3), alpha (3), flag; rotation R0
        self._frame = np.zeros((self.batch_size, 13))
        self._frame[:, :3] = self.gravity
        self._frame_R0 = np.tile(np.eye(3), (self.batch_size, 1, 1))

    # ------------------------------------------------------------------ scene set-up
    def add_liquid_box(self, lo: Sequence[float], hi: Sequence[float], *,
                       velocity: Sequence[float] = (0.0, 0.0, 0.0), member: int | None = None) -> int:
        """Fill the box [lo, hi] (m, domain coordinates) with liquid; returns the count added."""
        lo, hi = finite_vector("lo", lo, 3), finite_vector("hi", hi, 3)
        if not (np.all(lo >= 0) and np.all(lo < hi) and np.all(hi <= self.size)):
            raise ValueError(f"liquid box lo={tuple(lo)}, hi={tuple(hi)} must satisfy "
                             f"0 <= lo < hi <= {self.size}")
        h = self.spacing
        axes = [np.arange(math.ceil(a / h - 0.5), math.floor(c / h - 0.5) + 1) * h + 0.5 * h
                for a, c in zip(lo, hi)]
        axes = [ax[(ax > a) & (ax < c)] for ax, a, c in zip(axes, lo, hi)]
        pts = np.stack(np.meshgrid(*axes, indexing="ij"), -1).reshape(-1, 3)
        vel = np.broadcast_to(finite_vector("velocity", velocity, 3), pts.shape)
        for b in self._members_of(member):
            self._add_particles(b, pts, vel, place=self._jittered(b))
        return len(pts)

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

    def fill_body(self, handle: int, fill: float, *, member: int | None = None,
                  liquid_follows: bool = False) -> int:
        """Seed liquid in a container up to ``fill`` of its interior height, at rest or, with
        ``liquid_follows``, moving with the container (its velocity v + w x r); returns the
        count."""
        self._check_handle(handle)
        n = 0
        for b in self._members_of(member):
            shape = self._members[b].shapes[handle]
            if not isinstance(shape, Container3):
                raise ValueError(f"body {handle} is not a container and cannot be filled")
            local = shape.fill_points(fill, self.spacing)
            R, origin = _matrix(self._pose[b, handle, 3:]), self._pose[b, handle, :3]

            def place(pts, b=b, shape=shape, local=local, R=R, origin=origin):
                # a point that its jitter would take out of the interior stays on the lattice
                moved = local + self._jitter(b, len(local))
                return np.where(shape.contains(moved)[:, None], moved, local) @ R.T + origin

            pts = local @ R.T + origin
            vel = np.zeros_like(pts)
            if liquid_follows:
                v, w = self._vel[b, handle, :3], self._vel[b, handle, 3:]
                vel = v + np.cross(w, pts - origin)
            self._add_particles(b, pts, vel, place=place)
            n = len(pts)
        return n

    # ------------------------------------------------------------------ build and upload
    def _new_solver(self, capacity: int):
        from .flip3d import Flip3D

        return Flip3D(self.batch_size, self.shape, self.dx, capacity, max(self._pose.shape[1], 1),
                      MAX_CHAIN_POINTS, region=self.REGION, **self._params)

    def _upload_settings(self) -> None:
        self._upload_viscosity()
        self._upload_frame()

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

    def _upload_frame(self) -> None:
        s = self._solver
        s.gravity.from_numpy(self._frame[:, :3].astype(np.float32))
        s.frame_motion.from_numpy(self._frame[:, 3:].astype(np.float32))
        s.frame_R0.from_numpy(self._frame_R0.astype(np.float32))

    def _read_diagnostics(self) -> None:
        out = np.zeros((self.batch_size, N_DIAG + self._solver.K), np.float32)
        if self._x_read is None:
            self._x_read = np.zeros((self.batch_size, self._solver.P, 3), np.float32)
            self._owner_read = np.zeros((self.batch_size, self._solver.P), np.int8)
        self._solver.read_state(out, self._x_read, self._owner_read)
        self._diag = out[:, :N_DIAG].astype(np.float64)
        self._in_body = out[:, N_DIAG:].round().astype(np.int64)

    # ------------------------------------------------------------------ control loop
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
        o = finite_vector("origin", origin, 3)
        rv = finite_vector("rotation", rotation, 3)
        om = finite_vector("omega", omega, 3)
        al = finite_vector("alpha", alpha, 3)
        a = finite_vector("accel", accel, 3)
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

    def _move_bodies(self, members: np.ndarray, dt: float) -> None:
        for b in np.flatnonzero(members):
            self._pose[b, :, :3] += self._vel[b, :, :3] * dt
            if self._pose.shape[1]:
                rot = Rotation.from_rotvec(self._vel[b, :, 3:] * dt) * Rotation.from_rotvec(self._pose[b, :, 3:])
                self._pose[b, :, 3:] = rot.as_rotvec()
