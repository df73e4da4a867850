"""A batched 3D FLIP liquid solver in Taichi: ``flip2d``'s algorithm with a third axis.

Read ``flip2d`` first: the structure, names and passes are the same, one per section below.
One call of :meth:`Flip3D.advance` is ONE kernel launch that advances every scene of the batch
by a control interval, with CFL-limited substeps; scenes are the parallel loop, everything
inside a scene is serial (bit-identical whatever the batch size, and sequential MIC(0)).

One substep of a scene, on a dense MAC grid of cells ``dx`` wide (velocity component ``a`` on
the faces normal to axis ``a``; the three components are the list ``self.vel``, and every pass
is written once for an axis ``a`` unrolled at compile time):

1. solids: bodies move kinematically (position + rotation, constant linear and angular velocity
   over the interval); their signed distance is sampled at grid nodes; each face gets the
   fraction of its area open to liquid (Batty's weights, here the mean of the open fractions of
   its four edges) and the solid's velocity;
2. particle to grid (trilinear), a copy kept for the FLIP update;
3. body force (gravity, or in a carried container's frame the fictitious forces of that frame);
4. pressure projection: weighted Poisson equation on the liquid cells by MIC(0)-PCG, with
   ``flip2d``'s ghost-fluid free surface and density correction; for a viscous liquid, an
   implicit viscosity step (no-slip at every solid and the domain's edges) between it and a
   second projection with the same matrix, as in ``flip2d``;
5. extrapolation into air, grid to particle (FLIP/PIC blend), RK2 advection in legs of at most
   ``ADVECTION_CFL`` cells, each followed by a push out of solids.

Every grid pass runs over a region around the liquid: the *active tiles* (the grid cut into
tiles of TILE^3 cells, a tile active when a particle lies within ``dilation`` tiles of it) or,
when it has fewer cells, the liquid's bounding box; either keeps at least ``pad`` cells of air
around every particle, farther than the velocity extrapolation (``layers``) reaches, so both
give the same particles bit for bit. Cells outside the region read as empty air. The tiles
are the narrow band of Pan, Park & Manocha's DT-grid: a pour's source, stream and target, not the box
around them; the box wins for compact liquid (a tile rounds the band up to whole tiles). So a
substep's time grows with the liquid, not with the room; the pressure system is sized by the
particle count; the face and node arrays are dense over the room (memory, not time).

Units: SI (m, s, m/s); pressure is solved as ``p * dt / rho`` (m^2/s).
"""

import numpy as np
import taichi as ti

from .constants import (ADVECTION_CFL, BLOWUP_SPEED, D_AREA, D_IN_FLIGHT, D_MAX_CFL, D_PCG_ITERS,
                        D_SPILLED, D_SUBSTEPS, D_TIME, D_UNSTABLE, MAX_SUBSTEPS, N_DIAG,
                        VISCOSITY_SKIP, VISCOSITY_WALL_MIN)
from .flip2d import (MIC_SIGMA, MIC_TAU, PARALLEL_LANES, PCG_MAX_ITERS, PCG_TOLERANCE, SDF_BAND,
                     VISCOSITY_MAX_ITERS, VISCOSITY_TOLERANCE,
                     open_fraction, push_out_of_solids, surface_fraction, tent_cdf)
from .geometry3d import KIND_BOX3, KIND_REVOLVED

TILE = 4  # cells along each side of a tile of the active region

@ti.func
def unit(a: ti.template()):
    return ti.Vector([int(a == 0), int(a == 1), int(a == 2)])


@ti.func
def rotation(w):
    """Rotation matrix of the rotation vector w (axis * angle, rad), Rodrigues' formula."""
    th = w.norm()
    K = ti.Matrix([[0.0, -w[2], w[1]], [w[2], 0.0, -w[0]], [-w[1], w[0], 0.0]])
    s, c = 1.0, 0.5
    if th > 1e-6:
        s, c = ti.sin(th) / th, (1.0 - ti.cos(th)) / (th * th)
    return ti.Matrix.identity(ti.f32, 3) + s * K + c * (K @ K)


@ti.data_oriented
class Flip3D:
    """B independent liquid scenes on a ``nx`` x ``ny`` x ``nz`` grid of spacing ``dx`` (m)."""

    def __init__(self, batch: int, shape: tuple[int, int, int], dx: float, max_particles: int,
                 max_bodies: int, max_chain_points: int, *, cfl: float, flip_ratio: float,
                 dt_max: float, density_correction: float, settle_speed: float,
                 particles_per_cell: int = 8, region: str = "auto"):
        nx, ny, nz = shape
        self.B, self.nx, self.ny, self.nz, self.dx = batch, nx, ny, nz, dx
        self.P, self.K = max_particles, max_bodies
        self.cfl, self.flip_ratio, self.dt_max = cfl, flip_ratio, dt_max
        self.kappa, self.settle_speed, self.ppc = density_correction, settle_speed, particles_per_cell
        self.r_particle = 0.25 * dx
        if region not in ("auto", "tiles", "box"):
            raise ValueError(f"region must be 'auto', 'tiles' or 'box', got {region!r}")
        self.region = region  # auto: whichever has fewer cells (update_box); tiles, box: forced
        self.layers = int(np.ceil(cfl)) + 1
        self.pad = self.layers + 2                      # cells of air kept around the liquid
        self.dilation = -(-self.pad // TILE)             # the same, in whole tiles
        # liquid cells hold particles: the pressure system never has more rows than particles
        B, P, K, C = batch, max_particles, max_bodies, min(nx * ny * nz, max_particles)
        T = self.tiles = (-(-nx // TILE), -(-ny // TILE), -(-nz // TILE))
        # particles
        self.x = ti.Vector.field(3, ti.f32, shape=(B, P))
        self.v = ti.Vector.field(3, ti.f32, shape=(B, P))
        self.n = ti.field(ti.i32, shape=B)
        # per-scene physics
        self.nu = ti.field(ti.f32, shape=B)
        self.gravity = ti.Vector.field(3, ti.f32, shape=B)   # g - a_frame in world axes, m/s^2
        # Non-inertial frame: origin (3, domain coordinates, m), omega0 (3, rad/s) and alpha (3,
        # rad/s^2) in the frame's axes, flag; and the frame's rotation at the interval's start.
        self.frame_motion = ti.Vector.field(10, ti.f32, shape=B)
        self.frame_R0 = ti.Matrix.field(3, 3, ti.f32, shape=B)
        # bodies
        self.nbody = ti.field(ti.i32, shape=B)
        self.kind = ti.field(ti.i32, shape=(B, K))
        self.is_container = ti.field(ti.i32, shape=(B, K))
        self.half = ti.Vector.field(3, ti.f32, shape=(B, K))  # box half extents; square: (w/2, h, t)
        self.radius = ti.field(ti.f32, shape=(B, K))
        self.nchain = ti.field(ti.i32, shape=(B, K))
        self.chain = ti.Vector.field(2, ti.f32, shape=(B, K, max_chain_points))
        self.npoly = ti.field(ti.i32, shape=(B, K))
        self.poly = ti.Vector.field(2, ti.f32, shape=(B, K, max_chain_points))
        self.bound = ti.field(ti.f32, shape=(B, K))
        self.centre = ti.Vector.field(3, ti.f32, shape=(B, K))    # at the interval's start
        self.rot = ti.Matrix.field(3, 3, ti.f32, shape=(B, K))
        self.lin_vel = ti.Vector.field(3, ti.f32, shape=(B, K))
        self.ang_vel = ti.Vector.field(3, ti.f32, shape=(B, K))
        self.frame_c = ti.Vector.field(3, ti.f32, shape=(B, K))   # now
        self.frame_R = ti.Matrix.field(3, 3, ti.f32, shape=(B, K))
        # grid: per axis a, faces (B, n + e_a); cg: the viscosity solve's CG vectors per face
        # (residual, direction, product, diagonal)
        self.vel, self.old, self.tmp, self.wgt, self.solid, self.valid = [], [], [], [], [], []
        self.cg = []
        for a in range(3):
            fs = (B, nx + (a == 0), ny + (a == 1), nz + (a == 2))
            for lst in (self.vel, self.old, self.tmp, self.wgt, self.solid):
                lst.append(ti.field(ti.f32, shape=fs))
            self.valid.append(ti.field(ti.i32, shape=fs))
            self.cg.append(ti.Vector.field(4, ti.f32, shape=fs))
        self.phi = ti.field(ti.f32, shape=(B, nx + 1, ny + 1, nz + 1))
        self.vnode = ti.Vector.field(3, ti.f32, shape=(B, nx + 1, ny + 1, nz + 1))
        self.count = ti.field(ti.i32, shape=(B, nx, ny, nz))
        self.rho = ti.field(ti.f32, shape=(B, nx, ny, nz))
        self.cell_id = ti.field(ti.i32, shape=(B, nx, ny, nz))
        # active region: tiles holding particles (`tile_mark`), tiles within `dilation` of one
        # (`tile_on`), the active tiles' codes in lexicographic order (MIC(0) needs every cell's
        # -x, -y, -z neighbours listed before it: tile by tile, cell by cell, they are), and the
        # box of tiles whose flags were set (cleared at the next update)
        self.tile_mark = ti.field(ti.i32, shape=(B, *T))
        self.tile_on = ti.field(ti.i32, shape=(B, *T))
        self.tile_list = ti.field(ti.i32, shape=(B, T[0] * T[1] * T[2]))
        self.ntiles = ti.field(ti.i32, shape=B)
        self.tile_box = ti.Vector.field(6, ti.i32, shape=B)
        # the region a substep works on: the active tiles, or the liquid's bounding box padded
        # by `pad` cells when that box has fewer cells (compact liquid: the tiles' rounding up
        # would cost more); `nblocks` blocks of cells to loop over (the tiles, or the box)
        self.box = ti.Vector.field(6, ti.i32, shape=B)            # i0, i1, j0, j1, k0, k1
        self.use_tiles = ti.field(ti.i32, shape=B)
        self.nblocks = ti.field(ti.i32, shape=B)
        # pressure system on the liquid cells, lexicographic (i, j, k) order
        self.cells = ti.field(ti.i32, shape=(B, C))
        self.nbr = ti.Vector.field(6, ti.i32, shape=(B, C))       # -x, +x, -y, +y, -z, +z
        self.coef = ti.Vector.field(6, ti.f32, shape=(B, C))
        self.diag = ti.field(ti.f32, shape=(B, C))
        self.precon = ti.field(ti.f32, shape=(B, C))
        self.p = ti.field(ti.f32, shape=(B, C))
        self.r = ti.field(ti.f32, shape=(B, C))
        self.z = ti.field(ti.f32, shape=(B, C))
        self.s = ti.field(ti.f32, shape=(B, C))
        self.q = ti.field(ti.f32, shape=(B, C))
        # outputs
        self.diagnostics = ti.field(ti.f32, shape=(B, N_DIAG))
        self.in_body = ti.field(ti.i32, shape=(B, K))
        self.container_of = ti.field(ti.i8, shape=(B, P))

    # ------------------------------------------------------------------ bodies
    @ti.func
    def to_body(self, b, k, p):
        return self.frame_R[b, k].transpose() @ (p - self.frame_c[b, k])

    @ti.func
    def chain_distance(self, b, k, q):
        """Distance of the (r, y) point q to body k's capsule chain minus its radius, clipped at
        the band's edge (flip2d.body_sdf)."""
        reach = self.radius[b, k] + SDF_BAND * self.dx
        dmin = reach
        for s in range(self.nchain[b, k] - 1):
            a = self.chain[b, k, s]
            c = self.chain[b, k, s + 1]
            if (q[0] > ti.min(a[0], c[0]) - reach and q[0] < ti.max(a[0], c[0]) + reach
                    and q[1] > ti.min(a[1], c[1]) - reach and q[1] < ti.max(a[1], c[1]) + reach):
                ab = c - a
                h = ti.math.clamp((q - a).dot(ab) / ab.dot(ab), 0.0, 1.0)
                dmin = ti.min(dmin, (q - a - h * ab).norm())
        return dmin - self.radius[b, k]

    @ti.func
    def body_sdf(self, b, k, p):
        q = self.to_body(b, k, p)
        d = 0.0
        kind = self.kind[b, k]
        if kind == KIND_BOX3:
            d = box_sdf(q, self.half[b, k])
        elif kind == KIND_REVOLVED:
            d = self.chain_distance(b, k, ti.Vector([ti.sqrt(q[0] * q[0] + q[2] * q[2]), q[1]]))
        else:  # square box container: outer box minus the open inner box
            w, h, t = self.half[b, k]
            outer = box_sdf(q - ti.Vector([0.0, 0.5 * (h - t), 0.0]),
                            ti.Vector([w + t, 0.5 * (h + t), w + t]))
            inner = box_sdf(q - ti.Vector([0.0, 0.5 * h + t, 0.0]), ti.Vector([w, 0.5 * h + t, w]))
            d = ti.max(outer, -inner)
        return d

    @ti.func
    def inside_body(self, b, k, q):
        """Body-frame point q inside container k's interior."""
        res = 0
        if self.kind[b, k] == KIND_REVOLVED:
            res = self.inside_polygon(b, k, ti.Vector([ti.sqrt(q[0] * q[0] + q[2] * q[2]), q[1]]))
        else:
            w, h = self.half[b, k][0], self.half[b, k][1]
            if ti.abs(q[0]) < w and ti.abs(q[2]) < w and q[1] > 0.0 and q[1] < h:
                res = 1
        return res

    @ti.func
    def inside_polygon(self, b, k, q):
        inside = 0
        m = self.npoly[b, k]
        for e in range(m):
            a = self.poly[b, k, e]
            c = self.poly[b, k, (e + 1) % m]
            if (a[1] > q[1]) != (c[1] > q[1]):
                xc = a[0] + (q[1] - a[1]) * (c[0] - a[0]) / (c[1] - a[1])
                if q[0] < xc:
                    inside = 1 - inside
        return inside

    @ti.func
    def body_point_velocity(self, b, k, p):
        return self.lin_vel[b, k] + self.ang_vel[b, k].cross(p - self.frame_c[b, k])

    @ti.func
    def set_frames(self, b, t):
        for k in range(self.nbody[b]):
            self.frame_c[b, k] = self.centre[b, k] + self.lin_vel[b, k] * t
            self.frame_R[b, k] = rotation(self.ang_vel[b, k] * t) @ self.rot[b, k]

    @ti.func
    def update_solids(self, b):
        """Nodal SDF and velocity, then the faces' open fractions and solid velocities."""
        dx = self.dx
        L = ti.Vector([self.nx, self.ny, self.nz]) * dx
        for blk in range(self.nblocks[b]):
            tlo, thi = self.block_range(b, blk, ti.Vector([1, 1, 1]))
            for i, j, l in ti.ndrange((tlo[0], thi[0]), (tlo[1], thi[1]), (tlo[2], thi[2])):
                p = ti.Vector([i, j, l]) * dx
                phi = ti.min(p.min(), (L - p).min())  # domain walls
                vel = ti.Vector([0.0, 0.0, 0.0])
                for k in range(self.nbody[b]):
                    if (p - self.frame_c[b, k]).norm() < self.bound[b, k] + 2.0 * dx:
                        d = self.body_sdf(b, k, p)
                        if d < phi:
                            phi = d
                            vel = self.body_point_velocity(b, k, p)
                self.phi[b, i, j, l] = phi
                self.vnode[b, i, j, l] = vel
        for a in ti.static(range(3)):
            e, e1, e2 = unit(a), unit((a + 1) % 3), unit((a + 2) % 3)
            for blk in range(self.nblocks[b]):
                tlo, thi = self.block_range(b, blk, unit(a))
                for i, j, l in ti.ndrange((tlo[0], thi[0]), (tlo[1], thi[1]), (tlo[2], thi[2])):
                    I = ti.Vector([i, j, l])
                    # A face next to an empty solid-centred cell is closed (see flip2d.update_solids).
                    closed = self.solid_centred(b, I - e) or self.solid_centred(b, I)
                    n00, n10 = I, I + e1
                    n01, n11 = I + e2, I + e1 + e2
                    p00, p10 = self.phi[b, n00[0], n00[1], n00[2]], self.phi[b, n10[0], n10[1], n10[2]]
                    p01, p11 = self.phi[b, n01[0], n01[1], n01[2]], self.phi[b, n11[0], n11[1], n11[2]]
                    frac = 0.25 * (open_fraction(p00, p10) + open_fraction(p01, p11)
                                   + open_fraction(p00, p01) + open_fraction(p10, p11))
                    self.wgt[a][b, i, j, l] = 0.0 if closed else frac
                    vs = (self.vnode[b, n00[0], n00[1], n00[2]] + self.vnode[b, n10[0], n10[1], n10[2]]
                          + self.vnode[b, n01[0], n01[1], n01[2]] + self.vnode[b, n11[0], n11[1], n11[2]])
                    self.solid[a][b, i, j, l] = 0.25 * vs[a]

    @ti.func
    def solid_centred(self, b, I):
        res = False
        if self.in_box(b, I) and self.count[b, I[0], I[1], I[2]] == 0:
            res = self.cell_phi(b, I) < 0.0
        return res

    # ------------------------------------------------------------------ transfers
    @ti.func
    def splat(self, b, x, vel):
        for a in ti.static(range(3)):
            f = x / self.dx - 0.5 + 0.5 * unit(a)
            base = ti.cast(ti.floor(f), ti.i32)
            fr = f - base
            shp = ti.Vector([self.nx + (a == 0), self.ny + (a == 1), self.nz + (a == 2)])
            for d in ti.static(ti.grouped(ti.ndrange(2, 2, 2))):
                I = base + d
                if (I >= 0).all() and (I < shp).all():
                    wv = (1 - d) + (2 * d - 1) * fr
                    wgt = wv[0] * wv[1] * wv[2]
                    self.vel[a][b, I[0], I[1], I[2]] = self.vel[a][b, I[0], I[1], I[2]] + wgt * vel[a]
                    self.tmp[a][b, I[0], I[1], I[2]] = self.tmp[a][b, I[0], I[1], I[2]] + wgt

    @ti.func
    def splat_density(self, b):
        """Particle count per cell and the trilinear number density at cell centres (1 = rest)."""
        for blk in range(self.nblocks[b]):
            tlo, thi = self.block_range(b, blk, ti.Vector([0, 0, 0]))
            for i, j, l in ti.ndrange((tlo[0], thi[0]), (tlo[1], thi[1]), (tlo[2], thi[2])):
                self.count[b, i, j, l] = 0
                self.rho[b, i, j, l] = 0.0
        hi = ti.Vector([self.nx, self.ny, self.nz])
        for p in range(self.n[b]):
            x = self.x[b, p] / self.dx
            c = ti.min(ti.max(ti.cast(x, ti.i32), 0), hi - 1)
            self.count[b, c[0], c[1], c[2]] = self.count[b, c[0], c[1], c[2]] + 1
            f = x - 0.5
            base = ti.cast(ti.floor(f), ti.i32)
            fr = f - base
            for d in ti.static(ti.grouped(ti.ndrange(2, 2, 2))):
                I = base + d
                if (I >= 0).all() and (I < hi).all():
                    wv = (1 - d) + (2 * d - 1) * fr
                    wgt = wv[0] * wv[1] * wv[2]
                    self.rho[b, I[0], I[1], I[2]] = self.rho[b, I[0], I[1], I[2]] + wgt / self.ppc

    @ti.func
    def particles_to_grid(self, b):
        for a in ti.static(range(3)):
            for blk in range(self.nblocks[b]):
                tlo, thi = self.block_range(b, blk, unit(a))
                for i, j, l in ti.ndrange((tlo[0], thi[0]), (tlo[1], thi[1]), (tlo[2], thi[2])):
                    self.vel[a][b, i, j, l] = 0.0
                    self.tmp[a][b, i, j, l] = 0.0
        for p in range(self.n[b]):
            self.splat(b, self.x[b, p], self.v[b, p])
        for a in ti.static(range(3)):
            for blk in range(self.nblocks[b]):
                tlo, thi = self.block_range(b, blk, unit(a))
                for i, j, l in ti.ndrange((tlo[0], thi[0]), (tlo[1], thi[1]), (tlo[2], thi[2])):
                    self.valid[a][b, i, j, l] = 0
                    if self.wgt[a][b, i, j, l] == 0.0:
                        self.vel[a][b, i, j, l] = self.solid[a][b, i, j, l]
                        self.valid[a][b, i, j, l] = 1
                    elif self.tmp[a][b, i, j, l] > 1e-6:
                        self.vel[a][b, i, j, l] = self.vel[a][b, i, j, l] / self.tmp[a][b, i, j, l]
                        self.valid[a][b, i, j, l] = 1
                    self.old[a][b, i, j, l] = self.vel[a][b, i, j, l]

    @ti.func
    def extrapolate(self, b, a: ti.template(), f: ti.template(), valid: ti.template()):
        """Grow valid face velocities of component a (field f) into air, one layer at a time."""
        for layer in ti.static(range(self.layers)):
            for blk in range(self.nblocks[b]):
                tlo, thi = self.block_range(b, blk, unit(a))
                for i, j, l in ti.ndrange((tlo[0], thi[0]), (tlo[1], thi[1]), (tlo[2], thi[2])):
                    if valid[b, i, j, l] == 0:
                        acc, cnt = 0.0, 0
                        for d in ti.static(range(6)):
                            J = ti.Vector([i, j, l]) + (1 - 2 * (d % 2)) * unit(d // 2)
                            if self.face_in_box(b, a, J):
                                vv = valid[b, J[0], J[1], J[2]]
                                if vv >= 1 and vv <= layer + 1:
                                    acc += f[b, J[0], J[1], J[2]]
                                    cnt += 1
                        if cnt > 0:
                            f[b, i, j, l] = acc / cnt
                            valid[b, i, j, l] = layer + 2
        for blk in range(self.nblocks[b]):
            tlo, thi = self.block_range(b, blk, unit(a))
            for i, j, l in ti.ndrange((tlo[0], thi[0]), (tlo[1], thi[1]), (tlo[2], thi[2])):
                if valid[b, i, j, l] == 0:
                    f[b, i, j, l] = 0.0

    @ti.func
    def sample(self, b, f: ti.template(), a: ti.template(), x, noslip):
        """Trilinear sample of face component a (faces at (I + 1/2 - e_a / 2) dx). Within half
        a cell of the domain's edge no face lies beyond the point; with ``noslip`` the
        component tangential to the edge falls linearly to 0 at it (a ghost face mirroring the
        first, -f, as the viscosity solve's wall), else it holds the first face's value
        (free slip)."""
        shp = ti.Vector([self.nx + (a == 0), self.ny + (a == 1), self.nz + (a == 2)])
        raw = x / self.dx - 0.5 + 0.5 * unit(a)
        g = ti.math.clamp(raw, 0.0, shp - 1.0 - 1e-4)
        base = ti.cast(g, ti.i32)
        fr = g - base
        acc = 0.0
        for d in ti.static(ti.grouped(ti.ndrange(2, 2, 2))):
            wv = (1 - d) + (2 * d - 1) * fr
            acc += wv[0] * wv[1] * wv[2] * f[b, base[0] + d[0], base[1] + d[1], base[2] + d[2]]
        if noslip:
            for c in ti.static(range(3)):
                if ti.static(c != a):
                    acc *= ti.min(1.0, 1.0 + 2.0 * ti.min(raw[c], shp[c] - 1.0 - raw[c]))
        return acc

    @ti.func
    def grid_velocity(self, b, x, noslip):
        return ti.Vector([self.sample(b, self.vel[0], 0, x, noslip),
                          self.sample(b, self.vel[1], 1, x, noslip),
                          self.sample(b, self.vel[2], 2, x, noslip)])

    @ti.func
    def old_velocity(self, b, x, noslip):
        return ti.Vector([self.sample(b, self.old[0], 0, x, noslip),
                          self.sample(b, self.old[1], 1, x, noslip),
                          self.sample(b, self.old[2], 2, x, noslip)])

    @ti.func
    def solid_at(self, b, x):
        """Trilinear nodal SDF, its gradient and the solid velocity at a world point."""
        hi = ti.Vector([self.nx, self.ny, self.nz])
        g = ti.math.clamp(x / self.dx, 0.0, hi - 1e-4)
        base = ti.cast(g, ti.i32)
        fr = g - base
        phi = 0.0
        grad = ti.Vector([0.0, 0.0, 0.0])
        vs = ti.Vector([0.0, 0.0, 0.0])
        for d in ti.static(ti.grouped(ti.ndrange(2, 2, 2))):
            w = (1 - d) + (2 * d - 1) * fr  # trilinear weight factors
            val = self.phi[b, base[0] + d[0], base[1] + d[1], base[2] + d[2]]
            phi += w[0] * w[1] * w[2] * val
            # derivative of the weight along c: +-1 times the other two weights
            grad += ti.Vector([(2 * d[0] - 1) * w[1] * w[2], (2 * d[1] - 1) * w[0] * w[2],
                               (2 * d[2] - 1) * w[0] * w[1]]) * val
            vs += w[0] * w[1] * w[2] * self.vnode[b, base[0] + d[0], base[1] + d[1], base[2] + d[2]]
        return phi, grad / self.dx, vs

    # ------------------------------------------------------------------ forces
    @ti.func
    def in_box(self, b, I):
        """Cell I lies in the region (an active tile, or the box)."""
        res = False
        if self.use_tiles[b] == 1:
            if (I >= 0).all() and (I < ti.Vector([self.nx, self.ny, self.nz])).all():
                t = I // TILE
                res = self.tile_on[b, t[0], t[1], t[2]] == 1
        else:
            bx = self.box[b]
            res = (bx[0] <= I[0] and I[0] < bx[1] and bx[2] <= I[1] and I[1] < bx[3]
                   and bx[4] <= I[2] and I[2] < bx[5])
        return res

    @ti.func
    def face_in_box(self, b, a: ti.template(), J):
        """Face J of axis a borders a cell of an active tile."""
        return self.in_box(b, J) or self.in_box(b, J - unit(a))

    @ti.func
    def block_range(self, b, t, ext):
        """Index range [lo, hi) of the region's t-th block of cells: the box, or the t-th active
        tile, extended by one along each axis where ``ext`` is 1 (to take in the nodes or faces
        on its upper side; for a tile only where the next tile, which would hold them, is
        inactive); clipped to the grid, [0, n + ext)."""
        lo = ti.Vector([0, 0, 0])
        hi = ti.Vector([0, 0, 0])
        if self.use_tiles[b] == 0:
            bx = self.box[b]
            lo = ti.Vector([bx[0], bx[2], bx[4]])
            hi = ti.Vector([bx[1], bx[3], bx[5]]) + ext
        else:
            lo, hi = self.tile_range(b, t, ext)
        return lo, ti.min(hi, ti.Vector([self.nx, self.ny, self.nz]) + ext)

    @ti.func
    def tile_range(self, b, t, ext):
        """:meth:`block_range` of the t-th active tile (not clipped)."""
        T = ti.Vector([self.tiles[0], self.tiles[1], self.tiles[2]])
        code = self.tile_list[b, t]
        tc = ti.Vector([code // (T[1] * T[2]), (code // T[2]) % T[1], code % T[2]])
        lo = tc * TILE
        hi = lo + TILE
        for a in ti.static(range(3)):
            if ext[a] == 1:
                up = tc + unit(a)
                if up[a] >= T[a] or self.tile_on[b, up[0], up[1], up[2]] == 0:
                    hi[a] += 1
        return lo, hi

    @ti.func
    def clamp_cell(self, I):
        return ti.min(ti.max(I, 0), ti.Vector([self.nx, self.ny, self.nz]) - 1)

    @ti.func
    def count_at(self, b, I):
        """Particles in cell I; 0 outside the active box (where `count` is stale)."""
        c = self.clamp_cell(I)
        return self.count[b, c[0], c[1], c[2]] * self.in_box(b, I)

    @ti.func
    def fill_at(self, b, I):
        """Number density at cell I's centre relative to that of liquid at rest filling the open
        space there, at least 1/2 (flip2d.fill_at); 0 outside the region."""
        res = 0.0
        if self.in_box(b, I):
            res = self.rho[b, I[0], I[1], I[2]] / ti.max(tent_cdf(self.cell_phi(b, I) / self.dx), 0.5)
        return res

    @ti.func
    def liquid_id(self, b, I):
        """Index of cell I in the pressure system, or -1 (air, solid, outside the box)."""
        c = self.clamp_cell(I)
        res = self.cell_id[b, c[0], c[1], c[2]]
        if not self.in_box(b, I):
            res = -1
        return res

    @ti.func
    def body_forces(self, b, t, dt):
        """Gravity, or in a moving frame g' = R^T (g - a) - alpha x r - omega x (omega x r)
        - 2 omega x v at the substep's middle (omega, alpha in the frame's axes; the frame's
        rotation R = R0 rot(omega0 t + alpha t^2 / 2), exact when alpha is parallel to omega0)."""
        g = self.gravity[b]
        fm = self.frame_motion[b]
        moving = fm[9] != 0.0
        tm = t + 0.5 * dt
        o = ti.Vector([fm[0], fm[1], fm[2]])
        om0 = ti.Vector([fm[3], fm[4], fm[5]])
        al = ti.Vector([fm[6], fm[7], fm[8]])
        om = om0 + al * tm
        gl = (self.frame_R0[b] @ rotation(om0 * tm + 0.5 * al * tm * tm)).transpose() @ g
        for a in ti.static(range(3)):
            for blk in range(self.nblocks[b]):
                tlo, thi = self.block_range(b, blk, unit(a))
                for i, j, l in ti.ndrange((tlo[0], thi[0]), (tlo[1], thi[1]), (tlo[2], thi[2])):
                    if self.wgt[a][b, i, j, l] > 0.0:
                        f = g[a]
                        if moving:
                            # Coriolis reads the pre-force copies: independent of the visiting order
                            X = (ti.Vector([i, j, l]) + 0.5 - 0.5 * unit(a)) * self.dx
                            r = X - o
                            v = self.old_velocity(b, X, False)  # X on a face: no edge term
                            f = (gl - al.cross(r) - om.cross(om.cross(r)) - 2.0 * om.cross(v))[a]
                        self.vel[a][b, i, j, l] = self.vel[a][b, i, j, l] + f * dt

    @ti.func
    def viscous(self, b, dt):
        """The viscosity pass runs this substep (flip2d.viscous)."""
        return self.nu[b] * dt > VISCOSITY_SKIP * self.dx * self.dx

    @ti.func
    def face_phi(self, b, a: ti.template(), J):
        """Solid SDF (m) at the centre of face J of axis a: the mean of its four nodes'; off the
        grid, the domain edges' (negative there)."""
        res = 0.0
        shp = ti.Vector([self.nx + (a == 0), self.ny + (a == 1), self.nz + (a == 2)])
        if (J >= 0).all() and (J < shp).all():
            e1, e2 = unit((a + 1) % 3), unit((a + 2) % 3)
            res = 0.25 * (self.phi[b, J[0], J[1], J[2]]
                          + self.phi[b, J[0] + e1[0], J[1] + e1[1], J[2] + e1[2]]
                          + self.phi[b, J[0] + e2[0], J[1] + e2[1], J[2] + e2[2]]
                          + self.phi[b, J[0] + e1[0] + e2[0], J[1] + e1[1] + e2[1], J[2] + e1[2] + e2[2]])
        else:
            p = (J + 0.5 - 0.5 * unit(a)) * self.dx
            L = ti.Vector([self.nx, self.ny, self.nz]) * self.dx
            res = ti.min(p.min(), (L - p).min())
        return res

    @ti.func
    def viscous_unknown(self, b, a: ti.template(), wgt: ti.template(), J):
        """Face J of axis a takes part in the viscosity solve (flip2d.viscous_unknown)."""
        res = False
        shp = ti.Vector([self.nx + (a == 0), self.ny + (a == 1), self.nz + (a == 2)])
        if (J >= 0).all() and (J < shp).all() and self.face_in_box(b, a, J):
            if wgt[b, J[0], J[1], J[2]] > 0.0 and self.face_phi(b, a, J) > 0.0:
                res = (self.count_at(b, J - unit(a)) + self.count_at(b, J)) > 0
        return res

    @ti.func
    def viscous_product(self, b, c, a: ti.template(), cg: ti.template(), slot: ti.template(), I):
        """Row I of the viscosity matrix times ``cg``'s component ``slot`` (flip2d)."""
        acc = cg[b, I[0], I[1], I[2]][3] * cg[b, I[0], I[1], I[2]][slot]
        shp = ti.Vector([self.nx + (a == 0), self.ny + (a == 1), self.nz + (a == 2)])
        for d in ti.static(range(6)):
            J = I + (1 - 2 * (d % 2)) * unit(d // 2)
            if (J >= 0).all() and (J < shp).all():
                if cg[b, J[0], J[1], J[2]][3] > 0.0:
                    acc -= c * cg[b, J[0], J[1], J[2]][slot]
        return acc

    @ti.func
    def viscosity(self, b, dt, a: ti.template(), f: ti.template(), rhs: ti.template(),
                  wgt: ti.template(), fs: ti.template(), cg: ti.template()):
        """Implicit viscosity on component a (flip2d.viscosity): backward Euler with no-slip
        walls where the SDF puts them, zero gradient into air; Jacobi-PCG, ``cg`` holding per
        face (r, p, q, diagonal)."""
        c = dt * self.nu[b] / (self.dx * self.dx)
        shp = ti.Vector([self.nx + (a == 0), self.ny + (a == 1), self.nz + (a == 2)])
        rmax0 = 0.0
        for blk in range(self.nblocks[b]):
            tlo, thi = self.block_range(b, blk, unit(a))
            for i, j, l in ti.ndrange((tlo[0], thi[0]), (tlo[1], thi[1]), (tlo[2], thi[2])):
                I = ti.Vector([i, j, l])
                diag, r = 0.0, f[b, i, j, l]
                if self.viscous_unknown(b, a, wgt, I):
                    phi_c = self.face_phi(b, a, I)
                    diag = 1.0
                    for d in ti.static(range(6)):
                        J = I + (1 - 2 * (d % 2)) * unit(d // 2)
                        inside = (J >= 0).all() and (J < shp).all()
                        if self.viscous_unknown(b, a, wgt, J):
                            diag += c
                        elif not inside or self.face_in_box(b, a, J):
                            phi_n = self.face_phi(b, a, J)
                            closed = True
                            if inside:
                                closed = wgt[b, J[0], J[1], J[2]] == 0.0
                            if closed or phi_n < 0.0:
                                theta = 1.0
                                if phi_n < 0.0:
                                    theta = ti.max(phi_c / (phi_c - phi_n), VISCOSITY_WALL_MIN)
                                u_wall = 0.0
                                if inside:
                                    u_wall = fs[b, J[0], J[1], J[2]]
                                diag += c / theta
                                r += c * u_wall / theta
                    rmax0 = ti.max(rmax0, ti.abs(r))
                rhs[b, i, j, l] = r
                cg[b, i, j, l] = ti.Vector([0.0, f[b, i, j, l], 0.0, diag])
        rz = ti.cast(0.0, ti.f64)
        for blk in range(self.nblocks[b]):
            tlo, thi = self.block_range(b, blk, unit(a))
            for i, j, l in ti.ndrange((tlo[0], thi[0]), (tlo[1], thi[1]), (tlo[2], thi[2])):
                g = cg[b, i, j, l]
                if g[3] > 0.0:
                    g[0] = rhs[b, i, j, l] - self.viscous_product(b, c, a, cg, 1, ti.Vector([i, j, l]))
                    g[2] = g[0] / g[3]  # z = r / d until the first product
                    cg[b, i, j, l] = g
        for blk in range(self.nblocks[b]):
            tlo, thi = self.block_range(b, blk, unit(a))
            for i, j, l in ti.ndrange((tlo[0], thi[0]), (tlo[1], thi[1]), (tlo[2], thi[2])):
                g = cg[b, i, j, l]
                if g[3] > 0.0:
                    rz += ti.cast(g[0] * g[2], ti.f64)
                    g[1] = g[2]
                    cg[b, i, j, l] = g
        tol = VISCOSITY_TOLERANCE * rmax0
        iters = 0
        while iters < VISCOSITY_MAX_ITERS and rz > 0.0:
            iters += 1
            pq = ti.cast(0.0, ti.f64)
            for blk in range(self.nblocks[b]):
                tlo, thi = self.block_range(b, blk, unit(a))
                for i, j, l in ti.ndrange((tlo[0], thi[0]), (tlo[1], thi[1]), (tlo[2], thi[2])):
                    g = cg[b, i, j, l]
                    if g[3] > 0.0:
                        g[2] = self.viscous_product(b, c, a, cg, 1, ti.Vector([i, j, l]))
                        cg[b, i, j, l] = g
                        pq += ti.cast(g[1] * g[2], ti.f64)
            alpha = ti.cast(rz / pq, ti.f32) if pq != 0.0 else 0.0
            rmax = 0.0
            rz_new = ti.cast(0.0, ti.f64)
            for blk in range(self.nblocks[b]):
                tlo, thi = self.block_range(b, blk, unit(a))
                for i, j, l in ti.ndrange((tlo[0], thi[0]), (tlo[1], thi[1]), (tlo[2], thi[2])):
                    g = cg[b, i, j, l]
                    if g[3] > 0.0:
                        f[b, i, j, l] = f[b, i, j, l] + alpha * g[1]
                        g[0] -= alpha * g[2]
                        cg[b, i, j, l] = g
                        rmax = ti.max(rmax, ti.abs(g[0]))
                        rz_new += ti.cast(g[0] * g[0] / g[3], ti.f64)
            if rmax <= tol:
                break
            beta = ti.cast(rz_new / rz, ti.f32)
            rz = rz_new
            for blk in range(self.nblocks[b]):
                tlo, thi = self.block_range(b, blk, unit(a))
                for i, j, l in ti.ndrange((tlo[0], thi[0]), (tlo[1], thi[1]), (tlo[2], thi[2])):
                    g = cg[b, i, j, l]
                    if g[3] > 0.0:
                        g[1] = g[0] / g[3] + beta * g[1]
                        cg[b, i, j, l] = g

    # ------------------------------------------------------------------ pressure
    @ti.func
    def build_pressure_system(self, b):
        ny, nz, dx = self.ny, self.nz, self.dx
        m = 0
        for blk in range(self.nblocks[b]):
            tlo, thi = self.block_range(b, blk, ti.Vector([0, 0, 0]))
            for i, j, l in ti.ndrange((tlo[0], thi[0]), (tlo[1], thi[1]), (tlo[2], thi[2])):
                self.cell_id[b, i, j, l] = -1
                open_sum = 0.0
                for a in ti.static(range(3)):
                    e = unit(a)
                    open_sum += self.wgt[a][b, i, j, l] + self.wgt[a][b, i + e[0], j + e[1], l + e[2]]
                if self.count[b, i, j, l] > 0 and open_sum > 0.0:
                    self.cell_id[b, i, j, l] = m
                    self.cells[b, m] = (i * ny + j) * nz + l
                    m += 1
        for c in range(m):
            I = self.cell_of(b, c)
            wsum = 0.0
            for a in ti.static(range(3)):
                e = unit(a)
                J = I + e
                wlo = self.wgt[a][b, I[0], I[1], I[2]]
                whi = self.wgt[a][b, J[0], J[1], J[2]]
                wsum += wlo + whi
                self.nbr[b, c][2 * a] = self.liquid_id(b, I - e)
                self.nbr[b, c][2 * a + 1] = self.liquid_id(b, J)
                self.coef[b, c][2 * a] = wlo
                self.coef[b, c][2 * a + 1] = whi
            ghost = 0.0
            rc = self.fill_at(b, I)
            for a in ti.static(range(3)):
                e = unit(a)
                if self.nbr[b, c][2 * a] < 0 and self.coef[b, c][2 * a] > 0.0:
                    ghost += self.coef[b, c][2 * a] * (1.0 / surface_fraction(rc, self.fill_at(b, I - e)) - 1.0)
                if self.nbr[b, c][2 * a + 1] < 0 and self.coef[b, c][2 * a + 1] > 0.0:
                    ghost += self.coef[b, c][2 * a + 1] * (1.0 / surface_fraction(rc, self.fill_at(b, I + e)) - 1.0)
            self.diag[b, c] = wsum + ghost
            self.r[b, c] = self.pressure_rhs(b, I)
            self.p[b, c] = 0.0
        # MIC(0) (Bridson's book, 3D): neighbours at -x, -y, -z come first in the list
        for c in range(m):
            e = self.diag[b, c]
            for a in ti.static(range(3)):
                n = self.nbr[b, c][2 * a]
                if n >= 0:
                    pa = self.coef[b, c][2 * a] * self.precon[b, n]
                    other = 0.0
                    for o in ti.static(range(3)):
                        if ti.static(o != a):
                            if self.nbr[b, n][2 * o + 1] >= 0:
                                other += self.coef[b, n][2 * o + 1]
                    e -= pa * pa + MIC_TAU * self.coef[b, c][2 * a] * other * self.precon[b, n] ** 2
            if e < MIC_SIGMA * self.diag[b, c]:
                e = self.diag[b, c]
            self.precon[b, c] = 1.0 / ti.sqrt(e)
        return m

    @ti.func
    def cell_of(self, b, c):
        """Cell (i, j, k) of liquid cell c of the pressure system."""
        code = self.cells[b, c]
        return ti.Vector([code // (self.ny * self.nz), (code // self.nz) % self.ny, code % self.nz])

    @ti.func
    def pressure_rhs(self, b, I):
        """Right-hand side of liquid cell I's pressure equation (flip2d.pressure_rhs): -dx times
        Batty's divergence (the open part of a face carries the liquid, the rest the solid) less
        the density correction's target, a velocity kappa * excess * dx per dt_max (a fraction
        per substep worked like a drag on liquid moving over the grid: a cup coasting at 2 m/s
        held a -0.9 deg surface); inside the liquid to the density of liquid at rest filling the
        open space, near air only expansion."""
        dx = self.dx
        div = 0.0
        for a in ti.static(range(3)):
            J = I + unit(a)
            wlo = self.wgt[a][b, I[0], I[1], I[2]]
            whi = self.wgt[a][b, J[0], J[1], J[2]]
            div += ((whi * self.vel[a][b, J[0], J[1], J[2]] + (1 - whi) * self.solid[a][b, J[0], J[1], J[2]])
                    - (wlo * self.vel[a][b, I[0], I[1], I[2]] + (1 - wlo) * self.solid[a][b, I[0], I[1], I[2]]))
        excess = ti.max(self.rho[b, I[0], I[1], I[2]] - 1.0, 0.0)
        if self.surrounded(b, I):
            excess = self.rho[b, I[0], I[1], I[2]] - tent_cdf(self.cell_phi(b, I) / dx)
        div -= self.kappa * ti.math.clamp(excess, -0.5, 0.5) * dx / self.dt_max
        return -dx * div

    @ti.func
    def forward_sweep(self, b, c):
        """MIC(0) forward substitution at cell c: q = L^-1 r."""
        t = self.r[b, c]
        for a in ti.static(range(3)):
            n = self.nbr[b, c][2 * a]
            if n >= 0:
                t += self.coef[b, c][2 * a] * self.precon[b, n] * self.q[b, n]
        self.q[b, c] = t * self.precon[b, c]

    @ti.func
    def backward_sweep(self, b, c):
        """MIC(0) back substitution at cell c: z = L^-T q."""
        t = self.q[b, c]
        for a in ti.static(range(3)):
            n = self.nbr[b, c][2 * a + 1]
            if n >= 0:
                t += self.coef[b, c][2 * a + 1] * self.precon[b, c] * self.z[b, n]
        self.z[b, c] = t * self.precon[b, c]

    @ti.func
    def solve_pressure(self, b, m):
        """MIC(0)-PCG for A p = r (flip2d.solve_pressure); returns the iteration count."""
        rmax0 = 0.0
        for c in range(m):
            rmax0 = ti.max(rmax0, ti.abs(self.r[b, c]))
        iters = 0
        if rmax0 > 0.0:
            tol = PCG_TOLERANCE * rmax0
            for c in range(m):
                self.forward_sweep(b, c)
            for cc in range(m):
                self.backward_sweep(b, m - 1 - cc)
            sigma = ti.cast(0.0, ti.f64)
            for c in range(m):
                self.s[b, c] = self.z[b, c]
                sigma += ti.cast(self.z[b, c] * self.r[b, c], ti.f64)
            while iters < PCG_MAX_ITERS:
                iters += 1
                sq = ti.cast(0.0, ti.f64)
                for c in range(m):
                    acc = self.diag[b, c] * self.s[b, c]
                    for d in ti.static(range(6)):
                        k = self.nbr[b, c][d]
                        if k >= 0:
                            acc -= self.coef[b, c][d] * self.s[b, k]
                    self.q[b, c] = acc
                    sq += ti.cast(acc * self.s[b, c], ti.f64)
                alpha = ti.cast(sigma / sq, ti.f32) if sq != 0.0 else 0.0
                rmax = 0.0
                for c in range(m):
                    self.p[b, c] = self.p[b, c] + alpha * self.s[b, c]
                    self.r[b, c] = self.r[b, c] - alpha * self.q[b, c]
                    rmax = ti.max(rmax, ti.abs(self.r[b, c]))
                    self.forward_sweep(b, c)
                if rmax <= tol:
                    break
                sigma_new = ti.cast(0.0, ti.f64)
                for cc in range(m):
                    c = m - 1 - cc
                    self.backward_sweep(b, c)
                    sigma_new += ti.cast(self.z[b, c] * self.r[b, c], ti.f64)
                beta = ti.cast(sigma_new / sigma, ti.f32)
                sigma = sigma_new
                for c in range(m):
                    self.s[b, c] = self.z[b, c] + beta * self.s[b, c]
        return iters

    @ti.func
    def cell_pressure(self, b, I):
        c = self.liquid_id(b, I)
        return self.p[b, ti.max(c, 0)] * (c >= 0)

    @ti.func
    def project(self, b, dt):
        """Pressure projection; for a viscous liquid, then viscosity and a second projection
        with the same matrix (flip2d.project says why). Returns the pressure iterations."""
        m = self.build_pressure_system(b)
        iters = self.solve_pressure(b, m)
        self.subtract_pressure_gradient(b)
        if self.viscous(b, dt):
            for a in ti.static(range(3)):
                self.viscosity(b, dt, a, self.vel[a], self.tmp[a], self.wgt[a], self.solid[a],
                               self.cg[a])
            for c in range(m):
                self.r[b, c] = self.pressure_rhs(b, self.cell_of(b, c))
                self.p[b, c] = 0.0
            iters += self.solve_pressure(b, m)
            self.subtract_pressure_gradient(b)
        return iters

    @ti.func
    def subtract_pressure_gradient(self, b):
        """Faces next to a liquid cell lose the pressure gradient (the ghost pressure
        p (theta - 1) / theta on the air side of a free-surface face); solid faces take the
        solid's velocity."""
        for a in ti.static(range(3)):
            for blk in range(self.nblocks[b]):
                tlo, thi = self.block_range(b, blk, unit(a))
                for i, j, l in ti.ndrange((tlo[0], thi[0]), (tlo[1], thi[1]), (tlo[2], thi[2])):
                    I = ti.Vector([i, j, l])
                    lo, hi = I - unit(a), I
                    self.valid[a][b, i, j, l] = 0
                    if self.wgt[a][b, i, j, l] == 0.0:
                        self.vel[a][b, i, j, l] = self.solid[a][b, i, j, l]
                        self.valid[a][b, i, j, l] = 1
                    elif self.liquid_id(b, lo) >= 0 or self.liquid_id(b, hi) >= 0:
                        p_lo, p_hi = self.cell_pressure(b, lo), self.cell_pressure(b, hi)
                        if self.liquid_id(b, lo) < 0:
                            th = surface_fraction(self.fill_at(b, hi), self.fill_at(b, lo))
                            p_lo = p_hi * (th - 1.0) / th
                        elif self.liquid_id(b, hi) < 0:
                            th = surface_fraction(self.fill_at(b, lo), self.fill_at(b, hi))
                            p_hi = p_lo * (th - 1.0) / th
                        self.vel[a][b, i, j, l] = self.vel[a][b, i, j, l] - (p_hi - p_lo) / self.dx
                        self.valid[a][b, i, j, l] = 1

    # ------------------------------------------------------------------ particles
    @ti.func
    def grid_to_particles(self, b, dt):
        L = ti.Vector([self.nx, self.ny, self.nz]) * self.dx
        rp = self.r_particle
        # the domain's edges are no-slip where the viscosity solve made them so
        noslip = self.viscous(b, dt)
        for p in range(self.n[b]):
            x = self.x[b, p]
            v_pic = self.grid_velocity(b, x, noslip)
            v_old = self.old_velocity(b, x, noslip)
            vel = self.flip_ratio * (self.v[b, p] + v_pic - v_old) + (1.0 - self.flip_ratio) * v_pic
            # RK2 in legs of at most ADVECTION_CFL cells, each followed by a push out of solids
            # sampled where the solid point now over x was at the substep's start (flip2d)
            legs = ti.max(1, int(ti.ceil(v_pic.norm() * dt / (ADVECTION_CFL * self.dx))))
            h = dt / legs
            for leg in range(legs):
                mid = x + 0.5 * h * self.grid_velocity(b, x, noslip)
                x = x + h * self.grid_velocity(b, mid, noslip)
                x, vel = push_out_of_solids(self, b, x, vel, (leg + 1) * h, rp)
            self.x[b, p] = ti.math.clamp(x, rp, L - rp)
            self.v[b, p] = vel

    @ti.func
    def max_speed(self, b):
        vmax = 0.0
        for p in range(self.n[b]):
            s = self.v[b, p].norm()
            # ti.max drops a NaN: count one as a blow-up (else a NaN scene ran on, its particles
            # clamped to the domain's corner and counted spilled)
            if s < BLOWUP_SPEED:
                vmax = ti.max(vmax, s)
            else:
                vmax = ti.max(vmax, BLOWUP_SPEED)
        return vmax

    @ti.func
    def max_body_speed(self, b):
        vmax = 0.0
        for k in range(self.nbody[b]):
            vmax = ti.max(vmax, self.lin_vel[b, k].norm() + self.ang_vel[b, k].norm() * self.bound[b, k])
        return vmax

    # ------------------------------------------------------------------ step
    @ti.func
    def update_box(self, b):
        """The region of the next passes: the active tiles (within ``dilation`` tiles of a tile
        holding a particle) or, if it has fewer cells, the liquid's box padded by ``pad``."""
        T = ti.Vector([self.tiles[0], self.tiles[1], self.tiles[2]])
        tb = self.tile_box[b]
        for i, j, l in ti.ndrange((tb[0], tb[1]), (tb[2], tb[3]), (tb[4], tb[5])):
            self.tile_mark[b, i, j, l] = 0
            self.tile_on[b, i, j, l] = 0
        n_cells = ti.Vector([self.nx, self.ny, self.nz])
        clo = n_cells
        chi = ti.Vector([0, 0, 0])
        for p in range(self.n[b]):
            c = ti.min(ti.max(ti.cast(ti.floor(self.x[b, p] / self.dx), ti.i32), 0), n_cells - 1)
            self.tile_mark[b, c[0] // TILE, c[1] // TILE, c[2] // TILE] = 1
            clo = ti.min(clo, c)
            chi = ti.max(chi, c)
        blo = ti.max(clo - self.pad, 0)
        bhi = ti.min(chi + 1 + self.pad, n_cells)
        self.box[b] = ti.Vector([blo[0], bhi[0], blo[1], bhi[1], blo[2], bhi[2]])
        lo = clo // TILE
        hi = chi // TILE
        D = self.dilation
        lo = ti.max(lo - D, 0)
        hi = ti.min(hi + 1 + D, T)
        self.tile_box[b] = ti.Vector([lo[0], hi[0], lo[1], hi[1], lo[2], hi[2]])
        m = 0
        for i, j, l in ti.ndrange((lo[0], hi[0]), (lo[1], hi[1]), (lo[2], hi[2])):
            on = 0
            for di, dj, dl in ti.ndrange((-D, D + 1), (-D, D + 1), (-D, D + 1)):
                n = ti.Vector([i + di, j + dj, l + dl])
                if on == 0 and (n >= 0).all() and (n < T).all():
                    on = self.tile_mark[b, n[0], n[1], n[2]]
            if on == 1:
                self.tile_on[b, i, j, l] = 1
                self.tile_list[b, m] = (i * T[1] + j) * T[2] + l
                m += 1
        self.ntiles[b] = m
        box_cells = ti.max(bhi - blo, 0)
        fewer = m * TILE ** 3 < box_cells[0] * box_cells[1] * box_cells[2]
        self.use_tiles[b] = fewer if ti.static(self.region == "auto") else ti.static(self.region == "tiles")
        self.nblocks[b] = m if self.use_tiles[b] == 1 else 1

    @ti.func
    def substep(self, b, t, dt):
        self.set_frames(b, t)
        self.update_box(b)
        self.splat_density(b)
        self.update_solids(b)
        self.particles_to_grid(b)
        self.body_forces(b, t, dt)
        iters = self.project(b, dt)
        for a in ti.static(range(3)):
            self.extrapolate(b, a, self.vel[a], self.valid[a])
        self.grid_to_particles(b, dt)
        return iters

    @ti.func
    def measure(self, b):
        """Particles inside each container's interior, in flight and spilled; liquid volume
        (m^3) from the number density."""
        self.set_frames(b, 0.0)
        for k in range(self.K):
            self.in_body[b, k] = 0
        in_flight, spilled = 0, 0
        for p in range(self.n[b]):
            x = self.x[b, p]
            owner = -1
            for k in range(self.nbody[b]):
                if owner < 0 and self.is_container[b, k] == 1:
                    if self.inside_body(b, k, self.to_body(b, k, x)):
                        owner = k
                        self.in_body[b, k] = self.in_body[b, k] + 1
            self.container_of[b, p] = ti.cast(owner, ti.i8)
            if owner < 0:
                if self.v[b, p].norm() < self.settle_speed:
                    spilled += 1
                else:
                    in_flight += 1
        self.update_box(b)
        self.splat_density(b)
        self.update_solids(b)  # the walls where the bodies are now (the volume's cut cells)
        vol = 0.0
        for blk in range(self.nblocks[b]):
            tlo, thi = self.block_range(b, blk, ti.Vector([0, 0, 0]))
            for i, j, l in ti.ndrange((tlo[0], thi[0]), (tlo[1], thi[1]), (tlo[2], thi[2])):
                I = ti.Vector([i, j, l])
                if self.surrounded(b, I):
                    vol += ti.math.clamp(0.5 + self.cell_phi(b, I) / self.dx, 0.0, 1.0)
                elif not self.solid_centred(b, I):
                    vol += self.rho[b, i, j, l]
        self.diagnostics[b, D_IN_FLIGHT] = in_flight
        self.diagnostics[b, D_SPILLED] = spilled
        self.diagnostics[b, D_AREA] = vol * self.dx ** 3

    @ti.func
    def cell_phi(self, b, I):
        """Solid SDF at cell I's centre (m): the mean of its eight nodes'."""
        acc = 0.0
        for d in ti.static(ti.grouped(ti.ndrange(2, 2, 2))):
            acc += self.phi[b, I[0] + d[0], I[1] + d[1], I[2] + d[2]]
        return 0.125 * acc

    @ti.func
    def wet(self, b, I):
        """Cell I holds particles or is cut by a solid (flip2d.wet)."""
        res = True
        if (I >= 0).all() and (I < ti.Vector([self.nx, self.ny, self.nz])).all():
            res = self.in_box(b, I) and (self.count[b, I[0], I[1], I[2]] > 0
                                         or self.cell_phi(b, I) < 0.5 * self.dx)
        return res

    @ti.func
    def surrounded(self, b, I):
        """Cell I and its 26 neighbours are wet and one holds particles (flip2d.surrounded)."""
        res, liquid = True, False
        for d in ti.static(ti.grouped(ti.ndrange((-1, 2), (-1, 2), (-1, 2)))):
            if not self.wet(b, I + d):
                res = False
            if self.count_at(b, I + d) > 0:
                liquid = True
        return res and liquid

    @ti.kernel
    def advance(self, interval: ti.f32):
        """Advance every scene by `interval` seconds (one launch). Body poses advance too."""
        for b, lane in ti.ndrange(self.B, PARALLEL_LANES):  # see flip2d.advance
            if lane == 0 and self.diagnostics[b, D_UNSTABLE] == 0.0:
                t, n_sub, max_cfl, max_iters = 0.0, 0, 0.0, 0
                while t < interval * (1.0 - 1e-6):
                    speed = ti.max(self.max_speed(b), self.max_body_speed(b))
                    if not (speed < BLOWUP_SPEED) or n_sub >= MAX_SUBSTEPS:  # catches NaN too
                        self.diagnostics[b, D_UNSTABLE] = 1.0
                        break
                    dt = ti.min(self.dt_max, self.cfl * self.dx / ti.max(speed, 1e-6))
                    remaining = interval - t
                    if dt >= remaining:
                        dt = remaining
                    elif 2.0 * dt > remaining:
                        dt = 0.5 * remaining
                    iters = self.substep(b, t, dt)
                    max_iters = ti.max(max_iters, iters)
                    max_cfl = ti.max(max_cfl, speed * dt / self.dx)
                    t += dt
                    n_sub += 1
                if self.diagnostics[b, D_UNSTABLE] == 0.0:
                    for k in range(self.nbody[b]):
                        self.centre[b, k] = self.centre[b, k] + self.lin_vel[b, k] * interval
                        self.rot[b, k] = rotation(self.ang_vel[b, k] * interval) @ self.rot[b, k]
                    self.measure(b)
                    self.diagnostics[b, D_TIME] = self.diagnostics[b, D_TIME] + interval
                self.diagnostics[b, D_MAX_CFL] = max_cfl
                self.diagnostics[b, D_SUBSTEPS] = n_sub
                self.diagnostics[b, D_PCG_ITERS] = max_iters

    @ti.kernel
    def set_body_state(self, state: ti.types.ndarray(dtype=ti.f32, ndim=3)):
        """Every body's centre (3), rotation matrix (9, row major), linear velocity (3) and
        angular velocity (3, world axes): (B, K, 18)."""
        for b, k in ti.ndrange(self.B, self.K):
            self.centre[b, k] = ti.Vector([state[b, k, 0], state[b, k, 1], state[b, k, 2]])
            for r, c in ti.static(ti.ndrange(3, 3)):
                self.rot[b, k][r, c] = state[b, k, 3 + 3 * r + c]
            self.lin_vel[b, k] = ti.Vector([state[b, k, 12], state[b, k, 13], state[b, k, 14]])
            self.ang_vel[b, k] = ti.Vector([state[b, k, 15], state[b, k, 16], state[b, k, 17]])

    @ti.kernel
    def read_state(self, out: ti.types.ndarray(dtype=ti.f32, ndim=2),
                   x_out: ti.types.ndarray(dtype=ti.f32, ndim=3),
                   owner_out: ti.types.ndarray(dtype=ti.i8, ndim=2)):
        """Diagnostics row then the particle count inside each body (B, N_DIAG + K); positions
        (B, P, 3) and each particle's container (B, P): one launch after every advance."""
        for b in range(self.B):
            for d in range(N_DIAG):
                out[b, d] = self.diagnostics[b, d]
            for k in range(self.K):
                out[b, N_DIAG + k] = self.in_body[b, k]
        for b, p in ti.ndrange(self.B, self.P):
            if p < self.n[b]:
                for c in ti.static(range(3)):
                    x_out[b, p, c] = self.x[b, p][c]
                owner_out[b, p] = self.container_of[b, p]

    @ti.kernel
    def measure_all(self):
        for b in range(self.B):
            self.measure(b)


@ti.func
def box_sdf(q, half):
    e = ti.abs(q) - half
    return ti.max(e, 0.0).norm() + ti.min(e.max(), 0.0)
