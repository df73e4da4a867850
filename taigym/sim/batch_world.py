"""``BatchWorld``: what ``World2D`` and ``World3D`` share (DESIGN.md §2).

A world holds ``batch_size`` independent scenes ("members") with the same grid and the same
body slots; each member has its own liquid, poses and, if wanted, its own shapes. Everything is
set up on the host, ``build()`` allocates and compiles, then ``set_pose``/``advance`` run the
control loop; one ``advance`` is one kernel launch for the whole batch. The subclasses give the
dimension (``DIM``), the pose's length (``POSE_SIZE``: x, y, theta in 2D; x, y, z and a rotation
vector in 3D), the solver, the shapes and how bodies move.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from . import backend
from .constants import (D_AREA, D_IN_FLIGHT, D_MAX_CFL, D_PCG_ITERS, D_SPILLED, D_SUBSTEPS, D_TIME,
                        D_UNSTABLE, N_DIAG)

JITTER = 0.125            # particle jitter, fraction of the spacing: breaks the lattice's
                          # symmetry without clumping particles


@dataclass
class _Member:
    x: np.ndarray             # (N, DIM) positions, m (the host copy: stale once the solver steps)
    v: np.ndarray             # (N, DIM) velocities, m/s
    shapes: list


def finite_vector(name: str, value, size: int) -> np.ndarray:
    a = np.asarray(value, dtype=np.float64)
    if a.shape != (size,) or not np.all(np.isfinite(a)):
        raise ValueError(f"{name} must be {size} finite numbers, got {value!r}")
    return a


def _number(name: str, value, lo: float, hi: float) -> float:
    if not (isinstance(value, (int, float, np.floating, np.integer)) and lo <= value <= hi):
        raise ValueError(f"{name} must be in [{lo}, {hi}], got {value!r}")
    return float(value)


class BatchWorld:
    """Set-up, control loop and read-out of a batch of liquid scenes; see ``World2D`` for the
    arguments."""

    DIM = 2
    POSE_SIZE = 3
    MAX_CELLS = 4096
    LIQUID_MEASURE = "area"      # the diagnostics' name for the liquid's size (area or volume)
    OPTIMIZE_IR = True           # ask for Taichi's advanced IR optimisations (backend.init)
    container_type: type = object

    def __init__(self, size: Sequence[float], cells: int, viscosity: float, *, density: float,
                 gravity: Sequence[float], arch: str, seed: int | Sequence[int], batch_size: int,
                 max_particles: int | None, cfl: float, flip_ratio: float, dt_max: float,
                 density_correction: float, settle_speed: float):
        D = self.DIM
        size = finite_vector("size", size, D)
        if np.any(size <= 0):
            raise ValueError(f"size must be positive (m), got {tuple(size)}")
        if not (isinstance(cells, (int, np.integer)) and 8 <= cells <= self.MAX_CELLS):
            raise ValueError(f"cells must be an integer in [8, {self.MAX_CELLS}], got {cells!r}")
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
        self.gravity = finite_vector("gravity", gravity, D)
        self.batch_size = int(batch_size)
        seeds = [seed] * self.batch_size if np.isscalar(seed) else list(seed)
        if len(seeds) != self.batch_size:
            raise ValueError(f"seed must be an int or {self.batch_size} ints, got {seed!r}")
        self._rngs = [np.random.default_rng(int(s)) for s in seeds]
        self._max_particles = max_particles
        self._members = [_Member(np.zeros((0, D)), np.zeros((0, D)), []) for _ in range(self.batch_size)]
        self._nu = np.full(self.batch_size, self.viscosity / self.density)  # m^2/s, per member
        self._pose = np.zeros((self.batch_size, 0, self.POSE_SIZE))
        self._vel = np.zeros((self.batch_size, 0, self.POSE_SIZE))
        self._solver = None
        self._diag = None
        self._in_body = None
        self._x_read = None            # positions read with the diagnostics (float32, B x P x DIM)
        self._owner_read = None        # ... with each particle's container (int8, B x P)

    # ------------------------------------------------------------------ what subclasses give
    def _new_solver(self, capacity: int):
        raise NotImplementedError

    def _upload_settings(self) -> None:
        """Upload what is set per member besides bodies and liquid (viscosity, gravity, ...)."""
        raise NotImplementedError

    def _upload_bodies(self) -> None:
        raise NotImplementedError

    def _upload_poses(self) -> None:
        raise NotImplementedError

    def _upload_viscosity(self) -> None:
        self._solver.nu.from_numpy(self._nu.astype(np.float32))

    def _read_diagnostics(self) -> None:
        raise NotImplementedError

    def _check_solid(self, shape) -> None:
        raise NotImplementedError

    def _check_inside(self, b: int, handle: int, shape) -> None:
        raise NotImplementedError

    def _move_bodies(self, members: np.ndarray, dt: float) -> None:
        """Move the bodies of ``members`` on by their velocities over ``dt`` s."""
        raise NotImplementedError

    def fill_body(self, handle: int, fill: float, *, member: int | None = None,
                  liquid_follows: bool = False) -> int:
        raise NotImplementedError

    # ------------------------------------------------------------------ scene set-up
    @property
    def spacing(self) -> float:
        """Particle spacing at rest (m): 2 particles per cell along each axis."""
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
        return self._rngs[b].uniform(-JITTER, JITTER, size=(n, self.DIM)) * self.spacing

    def _jittered(self, b: int):
        """``_add_particles``'s ``place`` that jitters member b's new particles."""
        return lambda x: x + self._jitter(b, len(x))

    def _add_particles(self, b: int, x: np.ndarray, v: np.ndarray, place=None) -> None:
        """Append particles at ``x`` with velocities ``v`` to member b; ``place`` (if given) maps
        ``x`` to the seeded positions, e.g. with the jitter, once the capacity is checked, so that
        a refused fill leaves the jitter's random stream as it was."""
        if self._solver is not None:
            self._download_particles()  # the host copy is stale once the solver has stepped
        m = self._members[b]
        if self._solver is not None and len(m.x) + len(x) > self._solver.P:
            raise ValueError(f"liquid needs {len(m.x) + len(x)} particles but max_particles="
                             f"{self._solver.P}; pass a larger max_particles to {type(self).__name__}")
        m.x = np.concatenate([m.x, x if place is None else place(x)])
        m.v = np.concatenate([m.v, v])
        if self._solver is not None:
            self._upload_particles([b])

    def add_body(self, shape, pose: Sequence[float] | None = None, *,
                 velocity: Sequence[float] | None = None, fill: float | None = None,
                 liquid_follows: bool = False) -> int:
        """Add a kinematic body to every member; returns its handle.

        ``pose`` is the body frame's pose (default: the origin); for a container its frame's
        origin is the centre of its inner bottom. ``fill`` seeds liquid in a container up to
        that fraction of its interior height; ``liquid_follows`` starts that liquid moving
        with the body (Pan & Manocha 2017's TRANSFER+FOLLOW) instead of at rest (TRANSFER+ZERO).
        """
        if self._solver is not None:
            raise RuntimeError("add_body must be called before build()")
        self._check_solid(shape)
        handle = self._pose.shape[1]
        zero = np.zeros(self.POSE_SIZE)
        pose = zero if pose is None else finite_vector("pose", pose, self.POSE_SIZE)
        velocity = zero if velocity is None else finite_vector("velocity", velocity, self.POSE_SIZE)
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
            self.fill_body(handle, fill, liquid_follows=liquid_follows)
        return handle

    def set_shape(self, handle: int, shape, *, member: int | None = None) -> None:
        """Replace a body's shape (e.g. a new task's container) in one or all members; it must
        fit in the domain at the body's pose."""
        self.set_body(handle, shape, member=member)

    def set_body(self, handle: int, shape, pose=None, velocity=None, *,
                 member: int | None = None) -> None:
        """Replace a body's shape and, if given, its pose and velocity at once (so that neither
        the new shape at the old pose nor the old shape at the new pose is checked)."""
        self._check_handle(handle)
        self._check_solid(shape)
        idx = self._members_of(member)
        poses, vels = self._pose.copy(), self._vel.copy()
        if pose is not None:
            poses[idx, handle] = finite_vector("pose", pose, self.POSE_SIZE)
            vels[idx, handle] = 0.0 if velocity is None else finite_vector("velocity", velocity,
                                                                             self.POSE_SIZE)
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
        self._nu[self._members_of(member)] = _number("viscosity", viscosity, 0.0, 5.0) / self.density
        if self._solver is not None:
            self._upload_viscosity()

    def reseed(self, seed: int, *, member: int | None = None) -> None:
        """Restart the particle-jitter random stream of one member (or all) from ``seed``."""
        for b in self._members_of(member):
            self._rngs[b] = np.random.default_rng(int(seed))

    def clear_liquid(self, *, member: int | None = None) -> None:
        """Remove all liquid from a member (or all) and clear its blow-up flag and clock."""
        if self._solver is not None:
            self._download_particles()
        for b in self._members_of(member):
            self._members[b].x = np.zeros((0, self.DIM))
            self._members[b].v = np.zeros((0, self.DIM))
            if self._diag is not None:
                self._diag[b] = 0.0
        if self._solver is not None:
            self._solver.diagnostics.from_numpy(self._diag.astype(np.float32))
            self._upload_particles(self._members_of(member))

    # ------------------------------------------------------------------ build and upload
    def build(self):
        """Initialise Taichi (explicit arch), allocate the solver and upload the scene."""
        if self._solver is not None:
            return self
        self.arch = backend.init(self.arch, optimize=self.OPTIMIZE_IR)
        counts = [len(m.x) for m in self._members]
        capacity = self._max_particles or max(max(counts), 1)
        if max(counts) > capacity:
            raise ValueError(f"max_particles={capacity} is below the {max(counts)} particles added")
        self._solver = self._new_solver(capacity)
        self._upload_settings()
        self._diag = np.zeros((self.batch_size, N_DIAG))
        self._upload_bodies()
        self._upload_particles()
        return self

    def _require_built(self) -> None:
        if self._solver is None:
            raise RuntimeError("call build() first")

    def _upload_particles(self, changed: list[int] | None = None) -> None:
        """Upload every member's liquid and measure it; ``changed`` (all if None) are the
        members whose liquid was just set."""
        s = self._solver
        counts = np.array([len(m.x) for m in self._members], np.int32)
        if counts.max() > s.P:
            raise ValueError(f"liquid needs {counts.max()} particles but max_particles={s.P}")
        x = np.zeros((self.batch_size, s.P, self.DIM), np.float32)
        v = np.zeros((self.batch_size, s.P, self.DIM), np.float32)
        for b, m in enumerate(self._members):
            x[b, :counts[b]] = m.x
            v[b, :counts[b]] = m.v
        s.x.from_numpy(x)
        s.v.from_numpy(v)
        s.n.from_numpy(counts)
        s.measure_all()
        self._read_diagnostics()

    def _particle_array(self, name: str) -> np.ndarray:
        """(B, capacity, DIM) positions ("x") or velocities ("v") as the solver has them."""
        return getattr(self._solver, name).to_numpy()

    def _download_particles(self) -> None:
        x, v = self._particle_array("x"), self._particle_array("v")
        for b, m in enumerate(self._members):
            n = len(m.x)
            m.x, m.v = x[b, :n].astype(np.float64), v[b, :n].astype(np.float64)

    # ------------------------------------------------------------------ control loop
    def set_pose(self, handle: int, pose, velocity=None, *, member: int | None = None) -> None:
        """Set a body's pose now and its velocity (default zero) over the next advance: (POSE_SIZE,)
        for the chosen member(s) or (batch_size, POSE_SIZE) for all."""
        self._check_handle(handle)
        idx = self._members_of(member)
        P = self.POSE_SIZE
        poses, vels = self._pose.copy(), self._vel.copy()
        for name, val, dst in (("pose", pose, poses), ("velocity", np.zeros(P) if velocity is None else velocity, vels)):
            a = np.asarray(val, dtype=np.float64)
            if a.shape not in ((P,), (len(idx), P)) or not np.all(np.isfinite(a)):
                raise ValueError(f"{name} must be finite with shape ({P},) or ({len(idx)}, {P}), got {a.shape}")
            dst[idx, handle] = a
        self._install_poses(poses, vels, idx)

    def set_poses(self, poses, velocities) -> None:
        """Set every body's pose and velocity in every member at once (one upload): arrays of
        shape (batch_size, bodies, POSE_SIZE), as :meth:`set_pose` takes per body."""
        new = []
        for name, val in (("poses", poses), ("velocities", velocities)):
            a = np.asarray(val, dtype=np.float64)
            if a.shape != self._pose.shape or not np.all(np.isfinite(a)):
                raise ValueError(f"{name} must be finite with shape {self._pose.shape}, got {a.shape}")
            new.append(a)
        self._install_poses(*new, range(self.batch_size))

    def _install_poses(self, poses: np.ndarray, vels: np.ndarray, members) -> None:
        """Make (B, K, POSE_SIZE) arrays the bodies' poses and velocities once every body of
        ``members`` passes its checks at its new pose; if one does not, nothing changes (a
        container carried out of the domain would lose its liquid to the edge)."""
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

    def advance(self, dt: float) -> None:
        """Advance every member by ``dt`` simulated seconds (one kernel launch)."""
        if not (isinstance(dt, (int, float, np.floating)) and math.isfinite(dt) and 0 < dt <= 1.0):
            raise ValueError(f"dt must be in (0, 1] s, got {dt!r}")
        self._require_built()
        self._solver.advance(float(dt))
        self._read_diagnostics()
        self._move_bodies(self._diag[:, D_UNSTABLE] == 0, dt)

    # ------------------------------------------------------------------ read-out
    def pose(self, handle: int, *, member: int = 0) -> np.ndarray:
        self._check_handle(handle)
        return self._pose[self._members_of(member)[0], handle].copy()

    def particle_count(self, member: int = 0) -> int:
        return len(self._members[self._members_of(member)[0]].x)

    def _positions_read(self) -> np.ndarray:
        """(B, capacity, DIM) float32 positions: those read with the diagnostics."""
        self._require_built()
        return self._particle_array("x") if self._x_read is None else self._x_read

    def positions(self, member: int = 0) -> np.ndarray:
        """(N, DIM) particle positions of a member, m."""
        b = self._members_of(member)[0]
        return self._positions_read()[b, :self.particle_count(b)].astype(np.float64)

    def velocities(self, member: int = 0) -> np.ndarray:
        """(N, DIM) particle velocities of a member, m/s."""
        return self.velocities_all()[self._members_of(member)[0]]

    def positions_all(self) -> list[np.ndarray]:
        """Every member's (N_b, DIM) positions, with one device read."""
        x = self._positions_read()
        return [x[b, :len(m.x)].astype(np.float64) for b, m in enumerate(self._members)]

    def velocities_all(self) -> list[np.ndarray]:
        """Every member's (N_b, DIM) velocities, with one device read."""
        self._require_built()
        v = self._particle_array("v")
        return [v[b, :len(m.x)].astype(np.float64) for b, m in enumerate(self._members)]

    def containing_body_all(self) -> list[np.ndarray]:
        """Every member's (N_b,) int8 array: the handle of the container whose interior holds
        each particle, or -1, as measured with the diagnostics after the last advance (or
        liquid upload): the per-particle version of ``fractions()["in"]``."""
        self._require_built()
        return [self._owner_read[b, :len(m.x)] for b, m in enumerate(self._members)]

    def containing_body(self, member: int = 0) -> np.ndarray:
        """(N,) int8: member's ``containing_body_all`` entry."""
        return self.containing_body_all()[self._members_of(member)[0]].copy()

    def particle_arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """Positions (B, P, DIM), m, and containing bodies (B, P), as ``containing_body_all``, of
        every member in two arrays, P the largest member's particle count: member b's particles
        are the first ``particle_count(b)`` entries of row b; the rest of the row is padding."""
        P = max(len(m.x) for m in self._members)
        return self._positions_read()[:, :P].astype(np.float64), self._owner_read[:, :P]

    def in_body_counts(self) -> np.ndarray:
        """(B, bodies) particles inside each container's interior, as last measured."""
        self._require_built()
        return self._in_body

    def fractions(self, member: int = 0) -> dict:
        """Fractions of the member's liquid: ``{"in": {handle: f}, "in_flight": f, "spilled": f}``.

        "in" counts particles inside a container's interior; outside every container, a
        particle that moved slower than ``settle_speed`` over the last advance (its own speed
        before any) is spilled, a faster one in flight.
        """
        self._require_built()
        b = self._members_of(member)[0]
        n = max(self.particle_count(b), 1)
        return {"in": {h: self._in_body[b, h] / n for h, s in enumerate(self._members[b].shapes)
                       if isinstance(s, self.container_type)},
                "in_flight": self._diag[b, D_IN_FLIGHT] / n, "spilled": self._diag[b, D_SPILLED] / n}

    def diagnostics(self, member: int = 0) -> dict:
        """Fractions plus: ``area`` (2D, m^2) or ``volume`` (3D, m^3) the liquid occupies (cells
        inside the liquid count their part outside solids, the others, at its edges and in
        spray, their particle number density), its drift ``area_drift`` / ``volume_drift``
        relative to the particles' rest area or volume N (dx/2)^DIM (a liquid compressed or
        expanded by the solver drifts; a freshly seeded lattice may start a fraction of a
        spacing off the walls, a few tenths of a percent), ``max_cfl`` (cells per substep in
        the last advance), ``substeps``, ``pressure_iterations``, ``time`` (s), ``unstable``."""
        b = self._members_of(member)[0]
        d = self._diag[b]
        out = self.fractions(b)
        size0, name = self.particle_count(b) * self.spacing ** self.DIM, self.LIQUID_MEASURE
        out.update({name: d[D_AREA], f"{name}_drift": (d[D_AREA] / size0 - 1.0) if size0 > 0 else 0.0},
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
