"""A NumPy reference of the Taichi FLIP step (:mod:`taigym.sim.flip2d`), for ONE scene.

:class:`ReferenceWorld2D` is :class:`~taigym.sim.world2d.World2D` with ``batch_size=1`` whose
solver is :class:`NumpyFlip2D` instead of the Taichi kernels: the host-side set-up (validation,
particle seeding with the same jitter from the same seed, body bookkeeping, read-out) is
inherited unchanged, so both worlds start from bit-identical particles. Taichi is never
imported or initialised.

The algorithm is the same, step for step (see ``flip2d.py``'s docstring): nodal solid SDF
(domain walls + bodies, each shape's own ``sdf()``), Batty open-face fractions and face solid
velocities, bilinear particle-to-grid, two-layer order-independent extrapolation, implicit
viscosity with no-slip walls where the SDF puts them (skipped, as in the kernel, when
``nu * dt <= 1e-3 dx^2``), then gravity; liquid-cell marking (cells holding particles and the
empty ones wetting a wall) with the density-correction term (to the rest density of the open
space inside the liquid), the weighted pressure Poisson equation with the ghost-fluid free
surface, FLIP/PIC blend, RK2 advection, solid push-out, domain clamp, CFL substep choice,
blow-up detection and the same diagnostics. Differences, all deliberate:

* float64 throughout (Taichi: float32), shapes' SDFs in float64 from ``geometry.py``;
* every pass covers the whole grid (the kernel restricts its passes to the liquid's padded
  bounding box, which changes nothing that a particle can see);
* the pressure and viscosity systems are solved by a sparse direct solver (SuperLU) instead
  of MIC(0)-PCG and Jacobi-PCG to a relative residual of 1e-5; ``pressure_iterations`` reports
  1 per direct solve (0 if the right-hand side is zero or there is no liquid cell);
* the substep clock (``t``, ``dt``, the remaining interval) is kept in float32 exactly as the
  kernel keeps it, so that both sides take the same substeps: when dt sits at ``dt_max``, the
  tests ``dt >= remaining`` / ``2 dt > remaining`` compare nearly equal numbers, and a float64
  clock may decide them the other way (one more or one fewer substep).
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import scipy.sparse as sp
import scipy.sparse.linalg as spla

from .constants import (ADVECTION_CFL, BLOWUP_SPEED, D_AREA, D_IN_FLIGHT, D_MAX_CFL, D_PCG_ITERS,
                        D_SPILLED, D_SUBSTEPS, D_TARGET_SCORE, D_TIME, D_UNSTABLE, MAX_SUBSTEPS, N_DIAG,
                        SURFACE_FRACTION_MIN, VISCOSITY_SKIP, VISCOSITY_WALL_MIN)
from .geometry import Container
from .world2d import World2D



def open_fraction(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Fraction of each face between nodes with SDF ``a`` and ``b`` lying outside solids."""
    pa, pb = a > 0.0, b > 0.0
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(pa & pb, 1.0, np.where(pa, a / (a - b), np.where(pb, b / (b - a), 0.0)))


def tent_cdf(d: np.ndarray) -> np.ndarray:
    """As the kernel's ``tent_cdf``: the unit tent's mass below d cells from its centre."""
    d = np.clip(d, -1.0, 1.0)
    return np.where(d <= 0.0, 0.5 * (1.0 + d) ** 2, 1.0 - 0.5 * (1.0 - d) ** 2)


def density_depth(rho: np.ndarray) -> np.ndarray:
    """As the kernel's ``density_depth``: depth (cells) below a flat surface from the tent-filtered
    number density."""
    r = np.clip(rho, 0.0, 1.0)
    return np.where(r >= 0.5, 1.0 - np.sqrt(2.0 * (1.0 - r)), np.sqrt(2.0 * r) - 1.0)


def surface_fraction(rho_liquid: np.ndarray, rho_air: np.ndarray) -> np.ndarray:
    """As the kernel's ``surface_fraction``: where the free surface lies between a liquid cell's
    centre (0) and its air neighbour's (1)."""
    dl, da = density_depth(rho_liquid), density_depth(rho_air)
    with np.errstate(divide="ignore", invalid="ignore"):
        th = np.clip(dl / (dl - da), SURFACE_FRACTION_MIN, 1.0)
    return np.where(dl <= 0.0, SURFACE_FRACTION_MIN, np.where(dl > da, th, 1.0))


def splat(fx: np.ndarray, fy: np.ndarray, ni: int, nj: int, vals: np.ndarray | None):
    """Bilinear scatter to samples (i, j) at grid coordinates (fx, fy); samples outside
    [0, ni) x [0, nj) are dropped. Returns (sum w * val or None, sum w) as (ni, nj) arrays."""
    i0, j0 = np.floor(fx).astype(np.int64), np.floor(fy).astype(np.int64)
    ax, ay = fx - i0, fy - j0
    idx, wts, vs = [], [], []
    for di in (0, 1):
        for dj in (0, 1):
            i, j = i0 + di, j0 + dj
            ok = (i >= 0) & (i < ni) & (j >= 0) & (j < nj)
            idx.append((i * nj + j)[ok])
            wts.append(((ax if di else 1.0 - ax) * (ay if dj else 1.0 - ay))[ok])
            if vals is not None:
                vs.append(vals[ok])
    idx, w = np.concatenate(idx), np.concatenate(wts)
    wsum = np.bincount(idx, weights=w, minlength=ni * nj).reshape(ni, nj)
    if vals is None:
        return None, wsum
    fsum = np.bincount(idx, weights=w * np.concatenate(vs), minlength=ni * nj).reshape(ni, nj)
    return fsum, wsum


def extrapolate(f: np.ndarray, valid: np.ndarray, layers: int) -> None:
    """Grow valid samples into the rest, `layers` layers (each the mean of its valid
    4-neighbours of earlier layers), then zero what is still invalid. In place."""
    for layer in range(layers):
        src = (valid >= 1) & (valid <= layer + 1)
        fm = np.where(src, f, 0.0)
        acc, cnt = np.zeros_like(f), np.zeros(f.shape, np.int64)
        acc[1:] += fm[:-1]
        cnt[1:] += src[:-1]
        acc[:-1] += fm[1:]
        cnt[:-1] += src[1:]
        acc[:, 1:] += fm[:, :-1]
        cnt[:, 1:] += src[:, :-1]
        acc[:, :-1] += fm[:, 1:]
        cnt[:, :-1] += src[:, 1:]
        grow = (valid == 0) & (cnt > 0)
        f[grow] = acc[grow] / cnt[grow]
        valid[grow] = layer + 2
    f[valid == 0] = 0.0


def sample(f: np.ndarray, x: np.ndarray, dx: float, ox: float, oy: float, noslip: bool = False) -> np.ndarray:
    """Bilinear sample of a staggered field whose sample (i, j) sits at ((i+ox) dx, (j+oy) dx);
    with ``noslip``, falling linearly to 0 at the domain's edges it is tangential to (as the kernel)."""
    ni, nj = f.shape
    rx, ry = x[:, 0] / dx - ox, x[:, 1] / dx - oy
    fx = np.clip(rx, 0.0, ni - 1.0 - 1e-4)
    fy = np.clip(ry, 0.0, nj - 1.0 - 1e-4)
    i0, j0 = fx.astype(np.int64), fy.astype(np.int64)
    ax, ay = fx - i0, fy - j0
    acc = ((1 - ax) * (1 - ay) * f[i0, j0] + ax * (1 - ay) * f[i0 + 1, j0]
           + (1 - ax) * ay * f[i0, j0 + 1] + ax * ay * f[i0 + 1, j0 + 1])
    if noslip:
        r, n = (rx, ni) if ox > 0.25 else (ry, nj)
        acc = acc * np.minimum(1.0, 1.0 + 2.0 * np.minimum(r, n - 1.0 - r))
    return acc


class NumpyFlip2D:
    """One scene of :class:`~taigym.sim.flip2d.Flip2D` in float64 NumPy (no batch axis)."""

    def __init__(self, nx: int, ny: int, dx: float, max_particles: int, *, cfl: float,
                 flip_ratio: float, dt_max: float, density_correction: float,
                 settle_speed: float, particles_per_cell: int = 4):
        self.nx, self.ny, self.dx, self.P = nx, ny, dx, max_particles
        self.cfl, self.flip_ratio, self.dt_max = cfl, flip_ratio, dt_max
        self.kappa, self.settle_speed, self.ppc = density_correction, settle_speed, particles_per_cell
        self.layers = int(math.ceil(cfl)) + 1  # as the kernel: extrapolation reaches `cfl` cells
        self.r_particle = 0.25 * dx
        self.x = np.zeros((0, 2))
        self.v = np.zeros((0, 2))
        self.nu = 0.0
        self.gravity = np.zeros(2)
        self.shapes: list = []
        self.pose = np.zeros((0, 3))
        self.body_vel = np.zeros((0, 3))
        self.diag = np.zeros(N_DIAG)
        self.in_body = np.zeros(1, np.int64)
        # the kernel's per-particle measure state: body holding it (-1: none), position at the
        # last measure, score earned entering the target; the target opening (body, centre x,
        # centre y, half width) or None
        self.owner = np.zeros(0, np.int64)
        self.x_measured = np.zeros((0, 2))
        self.earned = np.zeros(0)
        self.target = None
        self.pressure = np.zeros((nx, ny))      # p * dt / rho of the last substep (m^2/s)
        self.nodes = np.stack(np.meshgrid(np.arange(nx + 1) * dx, np.arange(ny + 1) * dx,
                                          indexing="ij"), -1)

    # ------------------------------------------------------------------ bodies
    def _frames(self, t: float):
        pz = self.pose + self.body_vel * t
        return [(p[0], p[1], math.cos(p[2]), math.sin(p[2])) for p in pz]

    @staticmethod
    def _to_body(frame, p: np.ndarray) -> np.ndarray:
        fx, fy, c, s = frame
        d = p - (fx, fy)
        return np.stack([c * d[..., 0] + s * d[..., 1], -s * d[..., 0] + c * d[..., 1]], -1)

    def update_solids(self, t: float) -> None:
        dx, nx, ny = self.dx, self.nx, self.ny
        W, H = nx * dx, ny * dx
        p = self.nodes
        phi = np.minimum(np.minimum(p[..., 0], W - p[..., 0]), np.minimum(p[..., 1], H - p[..., 1]))
        vel = np.zeros((nx + 1, ny + 1, 2))
        for k, frame in enumerate(self._frames(t)):
            shape, bv = self.shapes[k], self.body_vel[k]
            near = np.hypot(p[..., 0] - frame[0], p[..., 1] - frame[1]) < shape.bounding_radius + 2.0 * dx
            if not near.any():
                continue
            pts = p[near]
            d = shape.sdf(self._to_body(frame, pts))
            closer = d < phi[near]
            ii, jj = np.nonzero(near)
            ii, jj, pts = ii[closer], jj[closer], pts[closer]
            phi[ii, jj] = d[closer]
            vel[ii, jj, 0] = bv[0] - bv[2] * (pts[:, 1] - frame[1])
            vel[ii, jj, 1] = bv[1] + bv[2] * (pts[:, 0] - frame[0])
        self.phi, self.vnode = phi, vel
        # as the kernel: faces next to an empty cell centred inside a solid are closed
        self.cell_phi = 0.25 * (phi[:-1, :-1] + phi[1:, :-1] + phi[:-1, 1:] + phi[1:, 1:])
        solid = (self.cell_phi < 0.0) & (self.count == 0)
        closed_u = np.zeros((nx + 1, ny), bool)
        closed_u[:-1] |= solid
        closed_u[1:] |= solid
        closed_v = np.zeros((nx, ny + 1), bool)
        closed_v[:, :-1] |= solid
        closed_v[:, 1:] |= solid
        self.wu = np.where(closed_u, 0.0, open_fraction(phi[:, :-1], phi[:, 1:]))
        self.us = 0.5 * (vel[:, :-1, 0] + vel[:, 1:, 0])
        self.wv = np.where(closed_v, 0.0, open_fraction(phi[:-1, :], phi[1:, :]))
        self.ws = 0.5 * (vel[:-1, :, 1] + vel[1:, :, 1])

    # ------------------------------------------------------------------ transfers
    def splat_density(self, x: np.ndarray) -> None:
        dx, nx, ny = self.dx, self.nx, self.ny
        ci = np.clip((x[:, 0] / dx).astype(np.int64), 0, nx - 1)
        cj = np.clip((x[:, 1] / dx).astype(np.int64), 0, ny - 1)
        self.count = np.bincount(ci * ny + cj, minlength=nx * ny).reshape(nx, ny)
        _, w = splat(x[:, 0] / dx - 0.5, x[:, 1] / dx - 0.5, nx, ny, None)
        self.rho = w / self.ppc

    def particles_to_grid(self) -> None:
        dx, nx, ny, x, v = self.dx, self.nx, self.ny, self.x, self.v
        su, wu_sum = splat(x[:, 0] / dx, x[:, 1] / dx - 0.5, nx + 1, ny, v[:, 0])
        sw, wv_sum = splat(x[:, 0] / dx - 0.5, x[:, 1] / dx, nx, ny + 1, v[:, 1])
        for f_sum, w_sum, wgt, fs, name in ((su, wu_sum, self.wu, self.us, "u"),
                                            (sw, wv_sum, self.wv, self.ws, "w")):
            solid, has = wgt == 0.0, w_sum > 1e-6
            with np.errstate(divide="ignore", invalid="ignore"):
                f = np.where(solid, fs, np.where(has, f_sum / w_sum, f_sum))
            setattr(self, name, f)
            setattr(self, "valid_" + name, (solid | has).astype(np.int64))

    # ------------------------------------------------------------------ forces
    def body_forces(self, dt: float) -> None:
        self.u = np.where(self.wu > 0.0, self.u + self.gravity[0] * dt, self.u)
        self.w = np.where(self.wv > 0.0, self.w + self.gravity[1] * dt, self.w)

    def viscosity(self, dt: float) -> None:
        """As the kernel's, on both components (between the two projections)."""
        nx, ny, cnt = self.nx, self.ny, self.count
        il, ir = np.clip(np.arange(nx + 1) - 1, 0, nx - 1), np.clip(np.arange(nx + 1), 0, nx - 1)
        near_u = (cnt[il, :] + cnt[ir, :]) > 0
        jd, jt = np.clip(np.arange(ny + 1) - 1, 0, ny - 1), np.clip(np.arange(ny + 1), 0, ny - 1)
        near_w = (cnt[:, jd] + cnt[:, jt]) > 0
        c = dt * self.nu / (self.dx * self.dx)
        phi = self.phi
        self.u = self._viscosity(self.u, self.wu, self.us, 0.5 * (phi[:, :-1] + phi[:, 1:]),
                                 near_u, c, (0.0, 0.5))
        self.w = self._viscosity(self.w, self.wv, self.ws, 0.5 * (phi[:-1, :] + phi[1:, :]),
                                 near_w, c, (0.5, 0.0))

    def _viscosity(self, f, wgt, fs, face_phi, near, c, offset):
        """As the kernel's implicit viscosity, solved directly: (I - c lap) f' = f on the open
        faces next to liquid with their centre outside solids; a neighbour across a solid or the
        domain's edge (SDF < 0 at its centre, or closed) holds the wall's velocity at the wall,
        a fraction theta of the spacing away; air neighbours give zero gradient. ``offset``: the
        faces' position in cells, (i + ox, j + oy)."""
        dx = self.dx
        ni, nj = f.shape
        unknown = (wgt > 0.0) & (face_phi > 0.0) & near
        # one ring of faces off the grid: closed, static, the domain edges' SDF
        pi = (np.arange(-1, ni + 1) + offset[0]) * dx
        pj = (np.arange(-1, nj + 1) + offset[1]) * dx
        P, Q = np.meshgrid(pi, pj, indexing="ij")
        ring_phi = np.minimum(np.minimum(P, self.nx * dx - P), np.minimum(Q, self.ny * dx - Q))
        phi_p = ring_phi.copy()
        phi_p[1:-1, 1:-1] = face_phi
        wgt_p, fs_p, unk_p = np.pad(wgt, 1), np.pad(fs, 1), np.pad(unknown, 1)
        idx = np.full((ni, nj), -1, np.int64)
        m = int(unknown.sum())
        if m == 0:
            return f
        idx[unknown] = np.arange(m)
        idx_p = np.pad(idx, 1, constant_values=-1)
        diag = np.ones((ni, nj))
        rhs = f.copy()
        rows, cols = [], []
        for di, dj in ((-1, 0), (1, 0), (0, -1), (0, 1)):
            sl = (slice(1 + di, 1 + di + ni), slice(1 + dj, 1 + dj + nj))
            unk_n, phi_n = unk_p[sl], phi_p[sl]
            wall = ~unk_n & ((wgt_p[sl] == 0.0) | (phi_n < 0.0))
            with np.errstate(divide="ignore", invalid="ignore"):
                theta = np.where(phi_n < 0.0, np.maximum(face_phi / (face_phi - phi_n), VISCOSITY_WALL_MIN), 1.0)
            diag += np.where(unk_n, c, 0.0) + np.where(wall, c / theta, 0.0)
            rhs += np.where(wall, c * fs_p[sl] / theta, 0.0)
            pair = unknown & unk_n
            rows.append(idx[pair])
            cols.append(idx_p[sl][pair])
        rows, cols = np.concatenate(rows), np.concatenate(cols)
        A = sp.coo_matrix((np.concatenate([diag[unknown], np.full(len(rows), -c)]),
                           (np.concatenate([np.arange(m), rows]), np.concatenate([np.arange(m), cols]))),
                          shape=(m, m)).tocsc()
        out = f.copy()
        out[unknown] = spla.spsolve(A, rhs[unknown])
        return out

    # ------------------------------------------------------------------ pressure
    def wets_wall(self) -> np.ndarray:
        """As the kernel's wets_wall: empty cells cut by a solid (centre outside) whose
        neighbour away from the wall, along the SDF's gradient, holds particles."""
        phi = self.phi
        p00, p10, p01, p11 = phi[:-1, :-1], phi[1:, :-1], phi[:-1, 1:], phi[1:, 1:]
        cut = ((np.minimum(np.minimum(p00, p10), np.minimum(p01, p11)) < 0.0)
               & (p00 + p10 + p01 + p11 > 0.0) & (self.count == 0))
        gx, gy = p10 + p11 - p00 - p01, p01 + p11 - p00 - p10
        wet = np.pad(self.count > 0, 1)
        wet_x = np.where(gx > 0.0, wet[2:, 1:-1], wet[:-2, 1:-1])
        wet_y = np.where(gy > 0.0, wet[1:-1, 2:], wet[1:-1, :-2])
        return cut & (((np.abs(gx) >= 0.5 * np.abs(gy)) & wet_x) | ((np.abs(gy) >= 0.5 * np.abs(gx)) & wet_y))

    def project(self, dt: float) -> int:
        """As the kernel's: pressure projection; for a viscous liquid, then viscosity and a
        second projection with the same matrix."""
        nx, ny, dx = self.nx, self.ny, self.dx
        wu, wv, cnt = self.wu, self.wv, self.count
        open_sum = wu[:-1] + wu[1:] + wv[:, :-1] + wv[:, 1:]
        liquid = ((cnt > 0) | self.wets_wall()) & (open_sum > 0.0)
        m = int(liquid.sum())
        A = None
        self.fill = self.rho / np.maximum(tent_cdf(self.cell_phi / dx), 0.5)  # as the kernel's fill_at
        if m > 0:
            cid = np.full((nx, ny), -1, np.int64)
            cid[liquid] = np.arange(m)  # C order, i * ny + j (the kernel numbers by anti-diagonal
                                        # for its PCG; a direct solve does not depend on the order)
            # as the kernel: cells inside the liquid go to the density of liquid filling the
            # open space around them, the others only expand; a velocity target
            excess = np.where(self.surrounded(), self.rho - tent_cdf(self.cell_phi / dx),
                              np.maximum(self.rho - 1.0, 0.0))
            self.div_target = self.kappa * np.clip(excess, -0.5, 0.5) * dx / self.dt_max
            # ghost fluid at the free surface: an open face to an air cell weighs w / theta
            fill = np.pad(self.fill, 1)
            lq = np.pad(liquid, 1)
            ghost = np.zeros((nx, ny))
            for w_face, sl in ((wu[:-1], (slice(0, -2), slice(1, -1))), (wu[1:], (slice(2, None), slice(1, -1))),
                               (wv[:, :-1], (slice(1, -1), slice(0, -2))), (wv[:, 1:], (slice(1, -1), slice(2, None)))):
                air = ~lq[sl] & (w_face > 0.0)
                th = surface_fraction(self.fill, fill[sl])
                ghost += np.where(air, w_face * (1.0 / th - 1.0), 0.0)
            diag = (open_sum + ghost)[liquid]
            # couplings across interior faces between two liquid cells (symmetric)
            pu = liquid[:-1] & liquid[1:]
            pv = liquid[:, :-1] & liquid[:, 1:]
            a = np.concatenate([cid[:-1][pu], cid[:, :-1][pv]])
            b = np.concatenate([cid[1:][pu], cid[:, 1:][pv]])
            c = np.concatenate([wu[1:-1][pu], wv[:, 1:-1][pv]])
            keep = c != 0.0
            a, b, c = a[keep], b[keep], c[keep]
            A = sp.coo_matrix((np.concatenate([diag, -c, -c]),
                               (np.concatenate([np.arange(m), a, b]),
                                np.concatenate([np.arange(m), b, a]))), shape=(m, m)).tocsc()
        self.liquid = liquid
        iters = self._solve_and_update(A, liquid)
        if self.nu * dt > VISCOSITY_SKIP * dx * dx:  # as the kernel
            self.viscosity(dt)
            iters += self._solve_and_update(A, liquid)
        return iters

    def _solve_and_update(self, A, liquid) -> int:
        """Solve for the pressure with the current face velocities' divergence and subtract its
        gradient (faces next to a liquid cell; the ghost pressure p (theta - 1) / theta on the
        air side of a free-surface face). Returns 1 per direct solve, 0 if none was needed."""
        wu, wv, us, ws, u, w, dx = self.wu, self.wv, self.us, self.ws, self.u, self.w, self.dx
        pgrid = np.zeros((self.nx, self.ny))
        iters = 0
        if A is not None:
            # Batty's divergence less the density-correction target
            div = ((wu[1:] * u[1:] + (1 - wu[1:]) * us[1:]) - (wu[:-1] * u[:-1] + (1 - wu[:-1]) * us[:-1])
                   + (wv[:, 1:] * w[:, 1:] + (1 - wv[:, 1:]) * ws[:, 1:])
                   - (wv[:, :-1] * w[:, :-1] + (1 - wv[:, :-1]) * ws[:, :-1])) - self.div_target
            rhs = -dx * div[liquid]
            if np.abs(rhs).max() > 0.0:
                pgrid[liquid] = self._solve(A, rhs)
                iters = 1
        self.pressure = pgrid
        self.u, self.valid_u = self._pressure_update(u, wu, us, pgrid, liquid, self.fill, 0)
        self.w, self.valid_w = self._pressure_update(w, wv, ws, pgrid, liquid, self.fill, 1)
        return iters

    def _pressure_update(self, f, wgt, fs, pgrid, liquid, fill, axis):
        pad = ((1, 1), (0, 0)) if axis == 0 else ((0, 0), (1, 1))
        pp, lq, rr = np.pad(pgrid, pad), np.pad(liquid, pad), np.pad(fill, pad)
        lo = (slice(None, -1), slice(None)) if axis == 0 else (slice(None), slice(None, -1))
        hi = (slice(1, None), slice(None)) if axis == 0 else (slice(None), slice(1, None))
        p_lo, p_hi, l_lo, l_hi = pp[lo], pp[hi], lq[lo], lq[hi]
        th_lo_air = surface_fraction(rr[hi], rr[lo])   # liquid above/right, air below/left
        th_hi_air = surface_fraction(rr[lo], rr[hi])
        p_lo = np.where(l_hi & ~l_lo, p_hi * (th_lo_air - 1.0) / th_lo_air, p_lo)
        p_hi = np.where(l_lo & ~l_hi, p_lo * (th_hi_air - 1.0) / th_hi_air, p_hi)
        touch = l_lo | l_hi
        solid = wgt == 0.0
        out = np.where(solid, fs, np.where(touch, f - (p_hi - p_lo) / self.dx, f))
        return out, (solid | touch).astype(np.int64)

    @staticmethod
    def _solve(A, rhs):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("error", spla.MatrixRankWarning)
                return spla.splu(A).solve(rhs)
        except (RuntimeError, spla.MatrixRankWarning):
            # a liquid region sealed from air has a pure-Neumann (singular) system: least squares
            return spla.lsqr(A, rhs, atol=1e-12, btol=1e-12)[0]

    # ------------------------------------------------------------------ particles
    def solid_at(self, x: np.ndarray):
        dx, nx, ny = self.dx, self.nx, self.ny
        fx = np.clip(x[:, 0] / dx, 0.0, nx - 1e-4)
        fy = np.clip(x[:, 1] / dx, 0.0, ny - 1e-4)
        i, j = fx.astype(np.int64), fy.astype(np.int64)
        ax, ay = (fx - i)[:, None], (fy - j)[:, None]
        phi = self.phi
        p00, p10, p01, p11 = phi[i, j], phi[i + 1, j], phi[i, j + 1], phi[i + 1, j + 1]
        a1, b1 = ax[:, 0], ay[:, 0]
        ph = (1 - a1) * (1 - b1) * p00 + a1 * (1 - b1) * p10 + (1 - a1) * b1 * p01 + a1 * b1 * p11
        grad = np.stack([(1 - b1) * (p10 - p00) + b1 * (p11 - p01),
                         (1 - a1) * (p01 - p00) + a1 * (p11 - p10)], -1) / dx
        vn = self.vnode
        vs = ((1 - ax) * (1 - ay) * vn[i, j] + ax * (1 - ay) * vn[i + 1, j]
              + (1 - ax) * ay * vn[i, j + 1] + ax * ay * vn[i + 1, j + 1])
        return ph, grad, vs

    def grid_velocity(self, x: np.ndarray, noslip: bool = False) -> np.ndarray:
        return np.stack([sample(self.u, x, self.dx, 0.0, 0.5, noslip),
                         sample(self.w, x, self.dx, 0.5, 0.0, noslip)], -1)

    def grid_to_particles(self, dt: float) -> None:
        dx, rp = self.dx, self.r_particle
        W, H = self.nx * dx, self.ny * dx
        x = self.x
        noslip = self.nu * dt > VISCOSITY_SKIP * dx * dx     # as the kernel: the viscosity solve's edges
        v_pic = self.grid_velocity(x, noslip)
        v_old = np.stack([sample(self.u_old, x, dx, 0.0, 0.5, noslip),
                          sample(self.w_old, x, dx, 0.5, 0.0, noslip)], -1)
        vel = self.flip_ratio * (self.v + v_pic - v_old) + (1.0 - self.flip_ratio) * v_pic
        # as the kernel: RK2 legs of at most ADVECTION_CFL cells, each with a push out of solids
        legs = np.maximum(1, np.ceil(np.linalg.norm(v_pic, axis=1) * dt / (ADVECTION_CFL * dx))).astype(np.int64)
        h = dt / legs
        for leg in range(int(legs.max(initial=0))):
            on = legs > leg
            xo, ho = x[on], h[on][:, None]
            mid = xo + 0.5 * ho * self.grid_velocity(xo, noslip)
            xo = xo + ho * self.grid_velocity(mid, noslip)
            _, _, vs = self.solid_at(xo)
            phi, grad, _ = self.solid_at(xo - (leg + 1) * ho * vs)
            hit = phi < rp
            nrm = grad[hit] / (np.linalg.norm(grad[hit], axis=1, keepdims=True) + 1e-12)
            xo[hit] += (rp - phi[hit])[:, None] * nrm
            vo = vel[on]
            vn = np.einsum("ij,ij->i", vo[hit] - vs[hit], nrm)
            vo[hit] -= np.minimum(vn, 0.0)[:, None] * nrm
            x[on], vel[on] = xo, vo
        x[:, 0] = np.clip(x[:, 0], rp, W - rp)
        x[:, 1] = np.clip(x[:, 1], rp, H - rp)
        self.x, self.v = x, vel

    def max_speed(self) -> float:
        return float(np.sqrt((self.v ** 2).sum(1)).max()) if len(self.v) else 0.0

    def max_body_speed(self) -> float:
        bv = self.body_vel
        return max((math.hypot(b[0], b[1]) + abs(b[2]) * s.bounding_radius
                    for b, s in zip(bv, self.shapes)), default=0.0)

    # ------------------------------------------------------------------ step
    def substep(self, t: float, dt: float) -> int:
        self.splat_density(self.x)
        self.update_solids(t)
        self.particles_to_grid()  # as the kernel: no extrapolation before the forces
        self.u_old, self.w_old = self.u.copy(), self.w.copy()
        self.body_forces(dt)
        iters = self.project(dt)
        extrapolate(self.u, self.valid_u, self.layers)
        extrapolate(self.w, self.valid_w, self.layers)
        self.grid_to_particles(dt)
        return iters

    def measure(self, step: float = 0.0, new_liquid: bool = False) -> None:
        """Fractions inside each container, in flight and spilled; liquid area (m^2); the target
        opening's score: as the kernel's ``measure`` (``step``: the interval just advanced, 0
        after an upload; ``new_liquid``: the particles were replaced)."""
        x, frames = self.x, self._frames(0.0)
        owner = np.full(len(x), -1, np.int64)
        self.in_body = np.zeros(max(len(self.shapes), 1), np.int64)
        for k, shape in enumerate(self.shapes):
            if isinstance(shape, Container) and len(x):
                inside = (owner < 0) & shape.contains(self._to_body(frames[k], x))
                self.in_body[k] = np.count_nonzero(inside)
                owner[inside] = k
        if new_liquid:
            self.earned = np.zeros(len(x))
        rim, score = -np.inf, 0.0
        if self.target is not None:
            tb, ocx, ocy, half_w = self.target
            oc = np.array([ocx, ocy])
            rim = frames[tb][1] + frames[tb][3] * ocx + frames[tb][2] * ocy
            if step > 0.0 and not new_liquid:
                was_in, now_in = self.owner == tb, owner == tb
                enter = np.flatnonzero(now_in & ~was_in)
                pz = self.pose[tb] - self.body_vel[tb] * step
                prev = (pz[0], pz[1], math.cos(pz[2]), math.sin(pz[2]))
                lp = self._to_body(prev, self.x_measured[enter])
                ln = self._to_body(frames[tb], x[enter])
                dy = ln[:, 1] - lp[:, 1]
                ok = np.abs(dy) > 1e-12
                t = np.clip(np.where(ok, (ocy - lp[:, 1]) / np.where(ok, dy, 1.0), 1.0), 0.0, 1.0)
                dist = np.linalg.norm(lp + t[:, None] * (ln - lp) - oc, axis=1)
                rp = np.maximum(1.0 - dist / half_w, 0.0)
                leave = was_in & ~now_in
                score = rp.sum() - self.earned[leave].sum()
                self.earned[enter] = rp
                self.earned[leave] = 0.0
        if step > 0.0:
            speed = np.linalg.norm(x - self.x_measured, axis=1) / step
        else:
            speed = np.linalg.norm(self.v, axis=1)
        out = owner < 0
        spilled = out & ((speed < self.settle_speed) | (x[:, 1] < rim))
        self.owner, self.x_measured = owner, x.copy()
        self.diag[D_IN_FLIGHT] = np.count_nonzero(out & ~spilled)
        self.diag[D_SPILLED] = np.count_nonzero(spilled)
        self.diag[D_TARGET_SCORE] = score
        self.splat_density(x)
        self.update_solids(0.0)
        self.diag[D_AREA] = self.liquid_area()

    def surrounded(self) -> np.ndarray:
        """As the kernel's: each cell and its eight neighbours wet (holding particles or cut by a
        solid; outside the domain is solid) and one of them holding particles."""
        cnt = self.count
        nx, ny = cnt.shape
        wet = np.pad((cnt > 0) | (self.cell_phi < 0.5 * self.dx), 1, constant_values=True)
        liquid = np.pad(cnt > 0, 1)
        res, anyl = np.ones((nx, ny), bool), np.zeros((nx, ny), bool)
        for di in (0, 1, 2):
            for dj in (0, 1, 2):
                res &= wet[di:di + nx, dj:dj + ny]
                anyl |= liquid[di:di + nx, dj:dj + ny]
        return res & anyl

    def liquid_area(self) -> float:
        """As the kernel's: cells inside the liquid (surrounded) count their open part, the
        other cells not centred in a solid their number density."""
        solid = (self.cell_phi < 0.0) & (self.count == 0)
        interior = self.surrounded()
        open_part = np.clip(0.5 + self.cell_phi / self.dx, 0.0, 1.0)
        area = open_part[interior].sum() + self.rho[~interior & ~solid].sum()
        return float(area * self.dx * self.dx)

    def advance(self, interval: float) -> None:
        """Advance the scene by ``interval`` s, with the kernel's substep rule (float32 clock)."""
        if self.diag[D_UNSTABLE] != 0.0:
            return
        f32 = np.float32
        interval32 = f32(interval)
        t, n_sub, max_cfl, max_iters = f32(0.0), 0, 0.0, 0
        while t < interval32 * f32(1.0 - 1e-6):
            speed = max(self.max_speed(), self.max_body_speed())
            if not (speed < BLOWUP_SPEED) or n_sub >= MAX_SUBSTEPS:  # catches NaN too
                self.diag[D_UNSTABLE] = 1.0
                break
            dt = f32(min(self.dt_max, self.cfl * self.dx / max(speed, 1e-6)))
            remaining = interval32 - t
            if dt >= remaining:
                dt = remaining
            elif f32(2.0) * dt > remaining:  # two even substeps instead of a sliver
                dt = f32(0.5) * remaining
            iters = self.substep(float(t), float(dt))
            max_iters = max(max_iters, iters)
            max_cfl = max(max_cfl, speed * float(dt) / self.dx)
            t = f32(t + dt)
            n_sub += 1
        if self.diag[D_UNSTABLE] == 0.0:
            self.pose = self.pose + self.body_vel * interval
            self.measure(interval)
            self.diag[D_TIME] += interval
        self.diag[D_MAX_CFL] = max_cfl
        self.diag[D_SUBSTEPS] = n_sub
        self.diag[D_PCG_ITERS] = max_iters


class ReferenceWorld2D(World2D):
    """Same constructor arguments and methods as :class:`World2D` for ONE scene
    (``batch_size`` must be 1; ``arch`` is validated but ignored), stepped by :class:`NumpyFlip2D`.
    ``set_shape`` and liquid added after ``build()`` work as in ``World2D``."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if self.batch_size != 1:
            raise ValueError(f"ReferenceWorld2D simulates one scene; got batch_size={self.batch_size}")

    def build(self) -> "ReferenceWorld2D":
        if self._solver is not None:
            return self
        n = len(self._members[0].x)
        capacity = self._max_particles or max(n, 1)
        if n > capacity:
            raise ValueError(f"max_particles={capacity} is below the {n} particles added")
        s = NumpyFlip2D(self.nx, self.ny, self.dx, capacity, **self._params)
        s.nu = float(self._nu[0])
        s.gravity = self.gravity.copy()
        self._solver = s
        self._diag = np.zeros((1, N_DIAG))
        self._upload_target()
        self._upload_bodies()
        self._upload_particles()
        return self

    def _upload_bodies(self) -> None:
        self._solver.shapes = list(self._members[0].shapes)
        self._upload_poses()

    def _upload_poses(self) -> None:
        self._solver.pose = self._pose[0].copy()
        self._solver.body_vel = self._vel[0].copy()

    def _upload_particles(self, changed: list[int] | None = None) -> None:
        s, m = self._solver, self._members[0]
        if len(m.x) > s.P:
            raise ValueError(f"liquid needs {len(m.x)} particles but max_particles={s.P}")
        s.x, s.v = m.x.astype(np.float64).copy(), m.v.astype(np.float64).copy()
        s.measure(new_liquid=True)
        self._read_diagnostics()

    def _upload_viscosity(self) -> None:
        self._solver.nu = float(self._nu[0])

    def _upload_target(self) -> None:
        k, cx, cy, half_w = self._target[0]
        self._solver.target = None if k < 0 else (int(k), cx, cy, half_w)

    def _particle_array(self, name: str) -> np.ndarray:
        return getattr(self._solver, name)[None].copy()

    def _read_diagnostics(self) -> None:
        self._diag = self._solver.diag[None].copy()
        self._in_body = self._solver.in_body[None].copy()

    def clear_liquid(self, *, member: int | None = None) -> None:
        self._members_of(member)  # validates
        self._members[0].x, self._members[0].v = np.zeros((0, 2)), np.zeros((0, 2))
        if self._solver is not None:
            self._solver.diag[:] = 0.0
            self._upload_particles()
        elif self._diag is not None:
            self._diag[0] = 0.0


