"""A batched 2D FLIP liquid solver in Taichi (Zhu & Bridson 2005, solid boundaries after Batty,
Bertails & Bridson 2007), the integrator of Pan, Park & Manocha's appendix.

One call of :meth:`Flip2D.advance` is ONE kernel launch: it advances every scene of the batch by
a control interval, with as many CFL-limited substeps as each scene needs. The outer loop over
scenes is the parallel one; everything inside a scene runs serially, which makes a scene's
result bit-identical whatever the batch size, and lets the pressure solve use the (sequential)
MIC(0) preconditioner.

One substep of a scene, all on a MAC grid of cells ``dx`` wide (u on x-faces, v on y-faces):

1. solids: bodies move kinematically at their set velocity; their signed distance is sampled at
   grid nodes, and every face gets the fraction of its length open to liquid (``wu``/``wv``,
   Batty's weights) and the solid's velocity there;
2. particle to grid (bilinear), extrapolation into air, a copy kept for the FLIP update;
3. body force (gravity, or in a carried container's accelerating, rotating frame the fictitious
   forces of that frame too);
4. pressure projection: weighted Poisson equation on the liquid cells (those holding particles,
   and empty ones between such a cell and a wall), solved by MIC(0)-preconditioned conjugate
   gradients (in Eisenstat's form, which needs no product with the matrix). The free surface
   is a ghost-fluid boundary (Gibou et al. 2002): p = 0 where the particles' tent-filtered
   density crosses 0.5 between a liquid and an air cell's centre, not at the air cell's
   centre, so the pressure sees sub-cell surface motion (sloshing's frequency and damping).
   Cells inside the liquid get an expansion target (density correction) that drives their
   density to that of liquid at rest filling the cell's open part, so the liquid keeps its
   volume over long runs, along walls as in the open. With a viscosity, the projection runs
   twice around an implicit viscosity step (backward Euler, Jacobi-PCG per velocity
   component, no-slip at every solid and at the domain's edges): the viscous step sees the
   pressure-balanced velocity, so liquid at rest stays at rest at any viscosity;
5. grid to particle (FLIP/PIC blend), RK2 advection in the grid velocity, and particles pushed
   back out of solids (and their velocity into the solid removed).

Every grid pass of a substep is restricted to the cells near the liquid: the columns of its padded
bounding box (``box``), and in each column the rows near its particles (``span``).

Inside a scene the code is serial, so field updates are written ``a[i] = a[i] + x``: Taichi
compiles ``a[i] += x`` on a field to an atomic add, several times slower here.

Units: SI throughout (m, s, m/s). Pressure is solved as ``p * dt / rho`` (m^2/s).
"""


import numpy as np
import taichi as ti

from .constants import (ADVECTION_CFL, BLOWUP_SPEED, D_AREA, D_IN_FLIGHT, D_MAX_CFL, D_PCG_ITERS,
                        D_SPILLED, D_SUBSTEPS, D_TARGET_SCORE, D_TIME, D_UNSTABLE, MAX_PROBE_COLUMNS,
                        MAX_SUBSTEPS, N_DIAG, SURFACE_FRACTION_MIN, VISCOSITY_SKIP,
                        VISCOSITY_WALL_MIN)
from .geometry import KIND_BOX

# Tolerances and limits (dimensionless unless stated).
PCG_TOLERANCE = 1e-5      # relative max-norm residual of the pressure solve
PCG_MAX_ITERS = 400
VISCOSITY_TOLERANCE = 1e-5  # relative max-norm residual of each viscosity solve
VISCOSITY_MAX_ITERS = 200
MIC_TAU = 0.97            # modified incomplete Cholesky blend (Bridson's book)
MIC_SIGMA = 0.25
SDF_BAND = 2.0            # cells: solid distances beyond this are not needed exactly
PUSH_REACH = 1.424        # cells: sqrt(2) and a margin for float32 rounding (push_clearance)
PARALLEL_LANES = 4096      # see advance()
UNNUMBERED = -2           # cell_id of a liquid cell before build_pressure_system numbers it
# What a grid pass visits (Flip2D.rows): u-faces, v-faces, cells, nodes.
U_FACES, V_FACES, CELLS, NODES = range(4)
# What a pass of the viscosity solve does (Flip2D.viscous_sweep).
CG_RESIDUAL, CG_FIRST_DIRECTION, CG_PRODUCT, CG_STEP, CG_DIRECTION = range(5)



@ti.data_oriented
class Flip2D:
    """B independent liquid scenes on a ``nx`` x ``ny`` grid of spacing ``dx`` (metres)."""

    def __init__(self, batch: int, nx: int, ny: int, dx: float, max_particles: int,
                 max_bodies: int, max_chain_points: int, max_polygon_vertices: int, *,
                 cfl: float, flip_ratio: float, dt_max: float, density_correction: float,
                 settle_speed: float, particles_per_cell: int = 4):
        self.B, self.nx, self.ny, self.dx = batch, nx, ny, dx
        # 1 / dx: the particle passes map positions to cells by a multiply, not a division
        # (divisions were a large part of their cost)
        self.inv_dx = 1.0 / dx
        self.P, self.K = max_particles, max_bodies
        self.cfl, self.flip_ratio, self.dt_max = cfl, flip_ratio, dt_max
        self.kappa, self.settle_speed, self.ppc = density_correction, settle_speed, particles_per_cell
        self.r_particle = 0.25 * dx  # particles are seeded dx/2 apart
        # A particle travels up to `cfl` cells in a substep and samples the grid velocity on
        # its way: valid velocities must reach that far into air, and the active box further.
        self.layers = int(np.ceil(cfl)) + 1          # extrapolation layers
        self.pad = self.layers + 2                   # active-box padding, cells
        B, P, K, C = batch, max_particles, max_bodies, nx * ny

        # particles
        self.x = ti.Vector.field(2, ti.f32, shape=(B, P))
        self.v = ti.Vector.field(2, ti.f32, shape=(B, P))
        # grid_to_particles' first advection leg: midpoint (x, y, m), leg duration h (s), legs
        self.leg = ti.Vector.field(4, ti.f32, shape=(B, P))
        self.n = ti.field(ti.i32, shape=B)
        # per-scene physics
        self.nu = ti.field(ti.f32, shape=B)             # kinematic viscosity, m^2/s
        self.gravity = ti.Vector.field(2, ti.f32, shape=B)
        # Non-inertial frame (a carried container's), per scene: origin (x, y) in the domain,
        # angle theta0 (rad) at the interval's start, omega0 (rad/s), alpha (rad/s^2), and a flag.
        # With the flag set, `gravity` holds g - a_frame in WORLD axes (m/s^2).
        self.frame_motion = ti.Vector.field(6, ti.f32, shape=B)
        # bodies: pose (x, y, theta) at the start of the interval and constant velocity over it
        self.nbody = ti.field(ti.i32, shape=B)
        self.kind = ti.field(ti.i32, shape=(B, K))
        self.half = ti.Vector.field(2, ti.f32, shape=(B, K))        # box half extents
        self.radius = ti.field(ti.f32, shape=(B, K))                # capsule-chain radius
        self.nchain = ti.field(ti.i32, shape=(B, K))
        self.chain = ti.Vector.field(2, ti.f32, shape=(B, K, max_chain_points))
        self.bound = ti.field(ti.f32, shape=(B, K))                 # bounding radius
        self.npoly = ti.field(ti.i32, shape=(B, K))                 # 0: not a container
        self.poly = ti.Vector.field(2, ti.f32, shape=(B, K, max_polygon_vertices))
        self.pose = ti.Vector.field(3, ti.f32, shape=(B, K))
        self.body_vel = ti.Vector.field(3, ti.f32, shape=(B, K))
        self.frame = ti.Vector.field(4, ti.f32, shape=(B, K))       # (x, y, cos, sin) now
        # grid
        self.u = ti.field(ti.f32, shape=(B, nx + 1, ny))
        self.u_old = ti.field(ti.f32, shape=(B, nx + 1, ny))
        self.u_tmp = ti.field(ti.f32, shape=(B, nx + 1, ny))
        self.wu = ti.field(ti.f32, shape=(B, nx + 1, ny))
        self.us = ti.field(ti.f32, shape=(B, nx + 1, ny))
        self.valid_u = ti.field(ti.i32, shape=(B, nx + 1, ny))
        self.w = ti.field(ti.f32, shape=(B, nx, ny + 1))
        self.w_old = ti.field(ti.f32, shape=(B, nx, ny + 1))
        self.w_tmp = ti.field(ti.f32, shape=(B, nx, ny + 1))
        self.wv = ti.field(ti.f32, shape=(B, nx, ny + 1))
        self.ws = ti.field(ti.f32, shape=(B, nx, ny + 1))
        self.valid_w = ti.field(ti.i32, shape=(B, nx, ny + 1))
        # the viscosity solve's CG vectors per face: residual, direction, product, diagonal
        self.u_cg = ti.Vector.field(4, ti.f32, shape=(B, nx + 1, ny))
        self.w_cg = ti.Vector.field(4, ti.f32, shape=(B, nx, ny + 1))
        self.phi = ti.field(ti.f32, shape=(B, nx + 1, ny + 1))      # solid SDF at nodes
        self.vnode = ti.Vector.field(2, ti.f32, shape=(B, nx + 1, ny + 1))
        self.count = ti.field(ti.i32, shape=(B, nx, ny))
        self.rho = ti.field(ti.f32, shape=(B, nx, ny))              # particles / rest count
        self.cell_id = ti.field(ti.i32, shape=(B, nx, ny))
        # Active cells: all grid work of a substep happens in the columns [i0, i1) of the
        # liquid's bounding box padded by `pad` cells (box = i0, i1, j0, j1), and in column i
        # only in rows span[b, i] = [lo, hi): the cells within `pad` cells (along i and j) of a
        # cell holding a particle. Cost follows the liquid, not the room, nor the air between a
        # pour's source and target (half of the box). Nothing outside is read: the look-ups
        # below treat it as empty air. `extent` holds each column's lowest and highest particle
        # row while the spans are made (set_box).
        self.box = ti.Vector.field(4, ti.i32, shape=B)
        self.span = ti.Vector.field(2, ti.i32, shape=(B, nx))
        self.extent = ti.Vector.field(2, ti.i32, shape=(B, nx))
        # pressure system on the compact list of liquid cells, ordered by anti-diagonal
        # (build_pressure_system); `wave` counts and then numbers each diagonal's cells
        self.wave = ti.field(ti.i32, shape=(B, nx + ny))
        self.cells = ti.field(ti.i32, shape=(B, C))
        self.nbr = ti.Vector.field(4, ti.i32, shape=(B, C))         # left, right, down, up
        # MIC(0) factor L = E + F E^-1 of A = F + D + F^T (F: A's strictly lower part, i.e. minus
        # the face weights to the left and lower neighbours; E diagonal): `precon` = 1 / E,
        # `e_mic` = E, `diag_rest` = D - 2 E^2 (what the two sweeps leave of A's diagonal,
        # Eisenstat's trick), and `lfac` the factor's off-diagonal entries, negated, of the row
        # (left, lower) and column (right, upper) of each cell: -L[c, l], -L[r, c], -L[c, d], -L[u, c].
        self.lfac = ti.Vector.field(4, ti.f32, shape=(B, C))
        self.precon = ti.field(ti.f32, shape=(B, C))
        self.e_mic = ti.field(ti.f32, shape=(B, C))
        self.diag_rest = ti.field(ti.f32, shape=(B, C))
        # CG on the split-preconditioned system L^-1 A L^-T (Eisenstat 1981): pressure p (m^2/s),
        # the right-hand side and then the transformed residual r^ = L^-1 r, the transformed
        # search direction s^, the direction s = L^-T s^ in p's space, and the forward sweep's
        # output t
        self.p = ti.field(ti.f32, shape=(B, C))
        self.r = ti.field(ti.f32, shape=(B, C))
        self.s_hat = ti.field(ti.f32, shape=(B, C))
        self.s = ti.field(ti.f32, shape=(B, C))
        self.t = ti.field(ti.f32, shape=(B, C))
        # outputs
        self.diagnostics = ti.field(ti.f32, shape=(B, N_DIAG))
        self.in_body = ti.field(ti.i32, shape=(B, K))
        self.container_of = ti.field(ti.i8, shape=(B, P))          # body whose interior holds p, or -1
        self.x_measured = ti.Vector.field(2, ti.f32, shape=(B, P))  # positions at the last measure
        # target opening, per scene: (body or -1 for none, centre x, centre y in the body's
        # frame (m), half width (m)); the score each particle inside that body earned entering
        # it; a flag set when a scene's liquid was replaced (its particles earned nothing yet)
        self.target = ti.Vector.field(4, ti.f32, shape=B)
        self.earned = ti.field(ti.f32, shape=(B, P))
        self.new_liquid = ti.field(ti.i32, shape=B)
        # liquid-height probe, per scene: (body or -1 for none, y_lo, y_hi, column count) and the
        # columns' x intervals, in the body's frame (m); the height over each column (m)
        self.probe = ti.Vector.field(4, ti.f32, shape=B)
        self.probe_columns = ti.Vector.field(2, ti.f32, shape=(B, MAX_PROBE_COLUMNS))
        self.heights = ti.field(ti.f32, shape=(B, MAX_PROBE_COLUMNS))

    # ------------------------------------------------------------------ bodies
    @ti.func
    def to_body(self, b, k, p):
        """World point -> body frame, with the frame stored for the current time."""
        f = self.frame[b, k]
        d = p - ti.Vector([f[0], f[1]])
        return ti.Vector([f[2] * d[0] + f[3] * d[1], -f[3] * d[0] + f[2] * d[1]])

    @ti.func
    def body_sdf(self, b, k, p):
        q = self.to_body(b, k, p)
        d = 0.0
        if self.kind[b, k] == KIND_BOX:
            e = ti.abs(q) - self.half[b, k]
            d = ti.max(e, 0.0).norm() + ti.min(ti.max(e[0], e[1]), 0.0)
        else:
            # Only |d| < SDF_BAND matters to the solver (face fractions, push-out): segments
            # whose box, grown by radius + band, misses q are skipped, and a point that misses
            # them all is reported at the band's edge (free space).
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
            d = dmin - self.radius[b, k]
        return d

    @ti.func
    def body_point_velocity(self, b, k, p):
        bv = self.body_vel[b, k]
        f = self.frame[b, k]
        return ti.Vector([bv[0] - bv[2] * (p[1] - f[1]), bv[1] + bv[2] * (p[0] - f[0])])

    @ti.func
    def set_frames(self, b, t):
        for k in range(self.nbody[b]):
            pz = self.pose[b, k] + self.body_vel[b, k] * t
            self.frame[b, k] = ti.Vector([pz[0], pz[1], ti.cos(pz[2]), ti.sin(pz[2])])

    @ti.func
    def inside_polygon(self, b, k, q):
        """Crossing-number test of a body-frame point against body k's interior polygon."""
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
    def update_solids(self, b):
        """Nodal solid SDF and velocity, then Batty's open-face fractions and face solid velocity.
        Returns the largest nodal solid speed (m/s)."""
        dx = self.dx
        W, H = self.nx * dx, self.ny * dx
        i0, i1 = self.box[b][0], self.box[b][1]
        vs_max = 0.0
        for i in range(i0, i1 + 1):
            j_lo, j_hi = self.rows(b, NODES, i)
            for j in range(j_lo, j_hi):
                p = ti.Vector([i * dx, j * dx])
                phi = ti.min(ti.min(p[0], W - p[0]), ti.min(p[1], H - p[1]))  # domain walls
                vel = ti.Vector([0.0, 0.0])
                for k in range(self.nbody[b]):
                    f = self.frame[b, k]
                    if (p - ti.Vector([f[0], f[1]])).norm() < self.bound[b, k] + 2.0 * dx:
                        d = self.body_sdf(b, k, p)
                        if d < phi:
                            phi = d
                            vel = self.body_point_velocity(b, k, p)
                self.phi[b, i, j] = phi
                self.vnode[b, i, j] = vel
                vs_max = ti.max(vs_max, vel.norm())
        # A face next to an empty cell centred inside a solid is closed: as air (p = 0) that
        # cell would draw liquid into the wall through the face's open sliver, and as liquid
        # its tiny open faces would carry large spurious velocities. A solid-centred cell that
        # does hold particles (a wall cutting a cell's corner) stays liquid with Batty's
        # fractions, or the particles in it would pile up out of the pressure solve's reach.
        for i in range(i0, i1 + 1):
            j_lo, j_hi = self.rows(b, U_FACES, i)
            lo_l, hi_l = self.cell_rows(b, i - 1)  # active cells either side, read once
            lo_r, hi_r = self.cell_rows(b, i)
            for j in range(j_lo, j_hi):
                closed = (self.solid_centred_in_rows(b, i - 1, j, lo_l, hi_l)
                          or self.solid_centred_in_rows(b, i, j, lo_r, hi_r))
                self.wu[b, i, j] = 0.0 if closed else open_fraction(self.phi[b, i, j], self.phi[b, i, j + 1])
                self.us[b, i, j] = 0.5 * (self.vnode[b, i, j][0] + self.vnode[b, i, j + 1][0])
        for i in range(i0, i1):
            j_lo, j_hi = self.rows(b, V_FACES, i)
            lo, hi = self.cell_rows(b, i)
            for j in range(j_lo, j_hi):
                closed = (self.solid_centred_in_rows(b, i, j - 1, lo, hi)
                          or self.solid_centred_in_rows(b, i, j, lo, hi))
                self.wv[b, i, j] = 0.0 if closed else open_fraction(self.phi[b, i, j], self.phi[b, i + 1, j])
                self.ws[b, i, j] = 0.5 * (self.vnode[b, i, j][1] + self.vnode[b, i + 1, j][1])
        return vs_max

    @ti.func
    def wets_wall(self, b, i, j):
        """Cell (i, j) holds no particle but lies between a solid and liquid: a solid cuts it
        (centre outside), and its neighbour away from the wall (along the SDF's gradient; both
        axes' neighbours for a wall within ~60 deg of the diagonal) holds particles.

        Particles are kept r_particle from walls, so a cut cell's sliver of liquid along a
        sloped wall is often empty. As air (p = 0) it pulled the liquid above it into the wall
        every substep; the particles, pushed back out, piled up on the wall (area loss) and
        the density correction drove currents out of the pile. As liquid it has the wall's
        pressure instead."""
        p00, p10 = self.phi[b, i, j], self.phi[b, i + 1, j]
        p01, p11 = self.phi[b, i, j + 1], self.phi[b, i + 1, j + 1]
        res = False
        if ti.min(ti.min(p00, p10), ti.min(p01, p11)) < 0.0 and p00 + p10 + p01 + p11 > 0.0:
            gx, gy = p10 + p11 - p00 - p01, p01 + p11 - p00 - p10
            sx, sy = 1 if gx > 0.0 else -1, 1 if gy > 0.0 else -1
            if ti.abs(gx) >= 0.5 * ti.abs(gy) and self.count_at(b, i + sx, j) > 0:
                res = True
            if ti.abs(gy) >= 0.5 * ti.abs(gx) and self.count_at(b, i, j + sy) > 0:
                res = True
        return res

    @ti.func
    def solid_centred(self, b, i, j):
        """Cell (i, j) in the active box, holding no particle, with its centre inside a solid
        (mean of its nodes' SDF)."""
        lo, hi = self.cell_rows(b, i)
        return self.solid_centred_in_rows(b, i, j, lo, hi)

    @ti.func
    def solid_centred_in_rows(self, b, i, j, lo, hi):
        """solid_centred(b, i, j) given column i's active rows [lo, hi) (cell_rows)."""
        res = False
        if lo <= j and j < hi and self.count[b, i, j] == 0:
            res = self.cell_phi(b, i, j) < 0.0
        return res

    # ------------------------------------------------------------------ transfers
    @ti.func
    def splat(self, b, x, vel):
        inv_dx = self.inv_dx
        # u-faces sit at (i dx, (j + 1/2) dx), v-faces at ((i + 1/2) dx, j dx)
        fx, fy = x[0] * inv_dx, x[1] * inv_dx - 0.5
        i0, j0 = int(ti.floor(fx)), int(ti.floor(fy))
        ax, ay = fx - i0, fy - j0
        for di, dj in ti.static(ti.ndrange(2, 2)):
            i, j = i0 + di, j0 + dj
            if 0 <= i <= self.nx and 0 <= j < self.ny:
                wgt = (ax if di else 1.0 - ax) * (ay if dj else 1.0 - ay)
                self.u[b, i, j] = self.u[b, i, j] + (wgt * vel[0])
                self.u_tmp[b, i, j] = self.u_tmp[b, i, j] + wgt
        fx, fy = x[0] * inv_dx - 0.5, x[1] * inv_dx
        i0, j0 = int(ti.floor(fx)), int(ti.floor(fy))
        ax, ay = fx - i0, fy - j0
        for di, dj in ti.static(ti.ndrange(2, 2)):
            i, j = i0 + di, j0 + dj
            if 0 <= i < self.nx and 0 <= j <= self.ny:
                wgt = (ax if di else 1.0 - ax) * (ay if dj else 1.0 - ay)
                self.w[b, i, j] = self.w[b, i, j] + (wgt * vel[1])
                self.w_tmp[b, i, j] = self.w_tmp[b, i, j] + wgt

    @ti.func
    def clear_density(self, b):
        i0, i1 = self.box[b][0], self.box[b][1]
        for i in range(i0, i1):
            j_lo, j_hi = self.rows(b, CELLS, i)
            for j in range(j_lo, j_hi):
                self.count[b, i, j] = 0
                self.rho[b, i, j] = 0.0

    @ti.func
    def splat_particle_density(self, b, x):
        """Particle x's count in its cell and its bilinear share of the number density at cell
        centres (1 = rest)."""
        inv_dx = self.inv_dx
        ci = ti.min(ti.max(int(x[0] * inv_dx), 0), self.nx - 1)
        cj = ti.min(ti.max(int(x[1] * inv_dx), 0), self.ny - 1)
        self.count[b, ci, cj] = self.count[b, ci, cj] + 1
        fx, fy = x[0] * inv_dx - 0.5, x[1] * inv_dx - 0.5
        i0, j0 = int(ti.floor(fx)), int(ti.floor(fy))
        ax, ay = fx - i0, fy - j0
        for di, dj in ti.static(ti.ndrange(2, 2)):
            i, j = i0 + di, j0 + dj
            if 0 <= i < self.nx and 0 <= j < self.ny:
                wgt = (ax if di else 1.0 - ax) * (ay if dj else 1.0 - ay)
                self.rho[b, i, j] = self.rho[b, i, j] + (wgt / self.ppc)

    @ti.func
    def splat_density(self, b):
        """Particle count per cell and the bilinear number density at cell centres."""
        self.clear_density(b)
        for p in range(self.n[b]):
            self.splat_particle_density(b, self.x[b, p])

    @ti.func
    def splat_particles(self, b):
        """Density (splat_density) and velocity sums and weights on the faces, in one pass over
        the particles."""
        self.clear_density(b)
        i0, i1 = self.box[b][0], self.box[b][1]
        for i in range(i0, i1 + 1):
            j_lo, j_hi = self.rows(b, U_FACES, i)
            for j in range(j_lo, j_hi):
                self.u[b, i, j] = 0.0
                self.u_tmp[b, i, j] = 0.0
        for i in range(i0, i1):
            j_lo, j_hi = self.rows(b, V_FACES, i)
            for j in range(j_lo, j_hi):
                self.w[b, i, j] = 0.0
                self.w_tmp[b, i, j] = 0.0
        for p in range(self.n[b]):
            x = self.x[b, p]
            self.splat_particle_density(b, x)
            self.splat(b, x, self.v[b, p])

    @ti.func
    def particles_to_grid(self, b):
        """Face velocities from splat_particles' sums; solid faces take the solid's velocity."""
        self.normalise_faces(b, self.u, self.u_tmp, self.wu, self.us, self.valid_u, self.u_old, U_FACES)
        self.normalise_faces(b, self.w, self.w_tmp, self.wv, self.ws, self.valid_w, self.w_old, V_FACES)

    @ti.func
    def viscous(self, b, dt):
        """The viscosity pass runs this substep: below ~1e-3 of a cell's diffusion per substep
        (water on these grids), physical viscosity is far under the scheme's own numerical
        viscosity (and the walls act free-slip)."""
        return self.nu[b] * dt > VISCOSITY_SKIP * self.dx * self.dx

    @ti.func
    def normalise_faces(self, b, f: ti.template(), weight: ti.template(), open_frac: ti.template(),
                        solid_vel: ti.template(), valid: ti.template(), old: ti.template(),
                        kind: ti.template()):
        """One component (u- or v-faces: ``kind``) of particles_to_grid."""
        i0, i1 = self.box[b][0], self.box[b][1] + (kind == U_FACES)
        for i in range(i0, i1):
            j_lo, j_hi = self.rows(b, kind, i)
            for j in range(j_lo, j_hi):
                valid[b, i, j] = 0
                if open_frac[b, i, j] == 0.0:
                    f[b, i, j] = solid_vel[b, i, j]
                    valid[b, i, j] = 1
                elif weight[b, i, j] > 1e-6:
                    f[b, i, j] = f[b, i, j] / weight[b, i, j]
                    valid[b, i, j] = 1
                old[b, i, j] = f[b, i, j]  # kept for the FLIP update

    @ti.func
    def extrapolate(self, b, f: ti.template(), valid: ti.template(), kind: ti.template()):
        """Grow valid face velocities (u- or v-faces: ``kind``) into air, one layer at a time
        (order independent), over the active faces."""
        i0, i1 = self.box[b][0], self.box[b][1] + (kind == U_FACES)
        for layer in ti.static(range(self.layers)):
            for i in range(i0, i1):
                j_lo, j_hi = self.rows(b, kind, i)
                lo_l, hi_l = self.rows(b, kind, i - 1)  # the neighbour columns' active rows,
                lo_r, hi_r = self.rows(b, kind, i + 1)  # read once per column
                for j in range(j_lo, j_hi):
                    if valid[b, i, j] == 0:
                        acc, cnt = 0.0, 0
                        for d in ti.static(range(4)):
                            ii = i + (d == 1) - (d == 0)
                            jj = j + (d == 3) - (d == 2)
                            lo = (lo_l, lo_r, j_lo, j_lo)[d]
                            hi = (hi_l, hi_r, j_hi, j_hi)[d]
                            if lo <= jj and jj < hi:  # face (ii, jj) is active
                                vv = valid[b, ii, jj]
                                if vv >= 1 and vv <= layer + 1:
                                    acc += f[b, ii, jj]
                                    cnt += 1
                        if cnt > 0:
                            f[b, i, j] = acc / cnt
                            valid[b, i, j] = layer + 2
        for i in range(i0, i1):  # beyond the grown band: at rest
            j_lo, j_hi = self.rows(b, kind, i)
            for j in range(j_lo, j_hi):
                if valid[b, i, j] == 0:
                    f[b, i, j] = 0.0

    @ti.func
    def sample(self, b, f: ti.template(), x, ox, oy, noslip):
        """Bilinear sample of a staggered field whose sample (i, j) sits at ((i+ox) dx, (j+oy) dx).
        Within half a cell of the domain's edge no sample lies beyond the point; with ``noslip``
        the component tangential to the edge (the axis offset by 1/2) falls linearly to 0 at it
        (a ghost sample mirroring the first, -f, as the viscosity solve's wall), else it holds
        the first sample's value (free slip)."""
        ni, nj = f.shape[1], f.shape[2]
        rx, ry = x[0] * self.inv_dx - ox, x[1] * self.inv_dx - oy
        fx = ti.math.clamp(rx, 0.0, ni - 1.0 - 1e-4)
        fy = ti.math.clamp(ry, 0.0, nj - 1.0 - 1e-4)
        i0, j0 = int(fx), int(fy)
        ax, ay = fx - i0, fy - j0
        acc = ((1 - ax) * (1 - ay) * f[b, i0, j0] + ax * (1 - ay) * f[b, i0 + 1, j0]
               + (1 - ax) * ay * f[b, i0, j0 + 1] + ax * ay * f[b, i0 + 1, j0 + 1])
        if noslip:
            r, n = ry, nj            # u: tangential to the floor and the ceiling
            if ox > 0.25:
                r, n = rx, ni        # w: to the side walls
            acc *= ti.min(1.0, 1.0 + 2.0 * ti.min(r, n - 1.0 - r))
        return acc

    @ti.func
    def grid_velocity(self, b, x, noslip):
        return ti.Vector([self.sample(b, self.u, x, 0.0, 0.5, noslip),
                          self.sample(b, self.w, x, 0.5, 0.0, noslip)])

    @ti.func
    def node_cell(self, x):
        """The cell (i, j) of the node grid holding world point x, and x's fractions in it."""
        fx = ti.math.clamp(x[0] * self.inv_dx, 0.0, self.nx - 1e-4)
        fy = ti.math.clamp(x[1] * self.inv_dx, 0.0, self.ny - 1e-4)
        i, j = int(fx), int(fy)
        return i, j, fx - i, fy - j

    @ti.func
    def solid_at(self, b, x):
        """Bilinear nodal SDF, its gradient and the solid velocity at a world point."""
        i, j, ax, ay = self.node_cell(x)
        p00, p10 = self.phi[b, i, j], self.phi[b, i + 1, j]
        p01, p11 = self.phi[b, i, j + 1], self.phi[b, i + 1, j + 1]
        phi = (1 - ax) * (1 - ay) * p00 + ax * (1 - ay) * p10 + (1 - ax) * ay * p01 + ax * ay * p11
        grad = ti.Vector([(1 - ay) * (p10 - p00) + ay * (p11 - p01),
                          (1 - ax) * (p01 - p00) + ax * (p11 - p10)]) * self.inv_dx
        vs = ((1 - ax) * (1 - ay) * self.vnode[b, i, j] + ax * (1 - ay) * self.vnode[b, i + 1, j]
              + (1 - ax) * ay * self.vnode[b, i, j + 1] + ax * ay * self.vnode[b, i + 1, j + 1])
        return phi, grad, vs

    # ------------------------------------------------------------------ forces
    @ti.func
    def in_box(self, b, i, j):
        """Cell (i, j) is active (in the box and its column's span)."""
        return self.active(b, CELLS, i, j)

    @ti.func
    def cell_rows(self, b, i):
        """Active cells of column i: rows [lo, hi), empty (lo > hi) outside the box."""
        lo, hi = self.ny, 0
        if self.box[b][0] <= i and i < self.box[b][1]:
            lo, hi = self.span[b, i][0], self.span[b, i][1]
        return lo, hi

    @ti.func
    def rows(self, b, kind: ti.template(), i):
        """Active rows [lo, hi) of column i of the u-faces, v-faces, cells or nodes (``kind``):
        those touching an active cell."""
        lo, hi = self.cell_rows(b, i)
        if ti.static(kind == U_FACES or kind == NODES):  # faces/nodes i lie between cells i-1, i
            lo_l, hi_l = self.cell_rows(b, i - 1)
            lo, hi = ti.min(lo, lo_l), ti.max(hi, hi_l)
        if ti.static(kind == V_FACES or kind == NODES):  # v-face/node j lies between rows j-1, j
            hi += 1
        return lo, hi

    @ti.func
    def active(self, b, kind: ti.template(), i, j):
        lo, hi = self.rows(b, kind, i)
        return lo <= j and j < hi

    @ti.func
    def count_at(self, b, i, j):
        """Particles in cell (i, j); 0 outside the active cells (where `count` is stale)."""
        ic = ti.min(ti.max(i, 0), self.nx - 1)
        jc = ti.min(ti.max(j, 0), self.ny - 1)
        return self.count[b, ic, jc] * self.in_box(b, i, j)

    @ti.func
    def fill_at(self, b, i, j):
        """Number density at cell (i, j)'s centre relative to that of liquid at rest filling the
        open space there (1 in a full cell, also beside a wall; rest_density, at least 1/2);
        0 outside the active cells. The free surface's position (surface_fraction) reads it:
        the raw density, lower beside a wall, put the surface too low along the walls."""
        res = 0.0
        if self.in_box(b, i, j):
            res = self.rho[b, i, j] / ti.max(self.rest_density(b, i, j), 0.5)
        return res

    @ti.func
    def liquid_id(self, b, i, j):
        """Index of cell (i, j) in the pressure system, or -1 (air, solid, inactive)."""
        ic = ti.min(ti.max(i, 0), self.nx - 1)
        jc = ti.min(ti.max(j, 0), self.ny - 1)
        c = self.cell_id[b, ic, jc]
        if not self.in_box(b, i, j):
            c = -1
        return c

    @ti.func
    def liquid_id_in_rows(self, b, i, j, lo, hi):
        """liquid_id(b, i, j) given column i's active rows [lo, hi) (cell_rows)."""
        c = -1
        if lo <= j and j < hi:
            c = self.cell_id[b, i, j]
        return c

    @ti.func
    def near_liquid_u(self, b, i, j):
        return (self.count_at(b, i - 1, j) + self.count_at(b, i, j)) > 0

    @ti.func
    def near_liquid_w(self, b, i, j):
        return (self.count_at(b, i, j - 1) + self.count_at(b, i, j)) > 0

    @ti.func
    def body_forces(self, b, t, dt):
        """Gravity, or in a moving frame the body force per unit mass
        g' = R^T (g - a) - alpha x r - omega x (omega x r) - 2 omega x v
        (R the frame's rotation, r the position from its origin, v the velocity in the frame),
        evaluated at the substep's middle."""
        g = self.gravity[b]
        fm = self.frame_motion[b]
        i0, i1, j0, j1 = self.box[b]
        if fm[5] == 0.0:
            for i in range(i0, i1 + 1):
                j_lo, j_hi = self.rows(b, U_FACES, i)
                for j in range(j_lo, j_hi):
                    if self.wu[b, i, j] > 0.0:
                        self.u[b, i, j] = self.u[b, i, j] + (g[0] * dt)
            for i in range(i0, i1):
                j_lo, j_hi = self.rows(b, V_FACES, i)
                for j in range(j_lo, j_hi):
                    if self.wv[b, i, j] > 0.0:
                        self.w[b, i, j] = self.w[b, i, j] + (g[1] * dt)
        else:
            tm = t + 0.5 * dt
            om = fm[3] + fm[4] * tm
            th = fm[2] + fm[3] * tm + 0.5 * fm[4] * tm * tm
            c, s = ti.cos(th), ti.sin(th)
            gl = ti.Vector([c * g[0] + s * g[1], -s * g[0] + c * g[1]])  # R^T (g - a)
            al, om2, dx = fm[4], om * om, self.dx
            # Coriolis reads the other component from the pre-force copies (u_old, w_old): the
            # update is then independent of the order faces are visited in.
            for i in range(i0, i1 + 1):
                j_lo, j_hi = self.rows(b, U_FACES, i)
                for j in range(j_lo, j_hi):
                    if self.wu[b, i, j] > 0.0:
                        rx, ry = i * dx - fm[0], (j + 0.5) * dx - fm[1]
                        ia, ib = ti.max(i - 1, i0), ti.min(i, i1 - 1)
                        vy = 0.25 * (self.w_old[b, ia, j] + self.w_old[b, ib, j]
                                     + self.w_old[b, ia, j + 1] + self.w_old[b, ib, j + 1])
                        f = gl[0] + om2 * rx + al * ry + 2.0 * om * vy
                        self.u[b, i, j] = self.u[b, i, j] + (f * dt)
            for i in range(i0, i1):
                j_lo, j_hi = self.rows(b, V_FACES, i)
                for j in range(j_lo, j_hi):
                    if self.wv[b, i, j] > 0.0:
                        rx, ry = (i + 0.5) * dx - fm[0], j * dx - fm[1]
                        ja, jb = ti.max(j - 1, j0), ti.min(j, j1 - 1)
                        vx = 0.25 * (self.u_old[b, i, ja] + self.u_old[b, i + 1, ja]
                                     + self.u_old[b, i, jb] + self.u_old[b, i + 1, jb])
                        f = gl[1] + om2 * ry - al * rx - 2.0 * om * vx
                        self.w[b, i, j] = self.w[b, i, j] + (f * dt)

    @ti.func
    def face_phi(self, b, kind: ti.template(), i, j):
        """Solid SDF (m) at the centre of u- or v-face (i, j) (``kind``): the mean of its two
        nodes'; off the grid, the domain edges' (negative there)."""
        res = 0.0
        if ti.static(kind == U_FACES):
            if 0 <= i <= self.nx and 0 <= j < self.ny:
                res = 0.5 * (self.phi[b, i, j] + self.phi[b, i, j + 1])
            else:
                res = self.domain_phi(ti.Vector([i * self.dx, (j + 0.5) * self.dx]))
        else:
            if 0 <= i < self.nx and 0 <= j <= self.ny:
                res = 0.5 * (self.phi[b, i, j] + self.phi[b, i + 1, j])
            else:
                res = self.domain_phi(ti.Vector([(i + 0.5) * self.dx, j * self.dx]))
        return res

    @ti.func
    def domain_phi(self, p):
        """Distance (m) of point p from the domain's edges, negative outside."""
        W, H = self.nx * self.dx, self.ny * self.dx
        return ti.min(ti.min(p[0], W - p[0]), ti.min(p[1], H - p[1]))

    @ti.func
    def viscous_unknown(self, b, kind: ti.template(), wgt: ti.template(), i, j):
        """Face (i, j) takes part in the viscosity solve: active, open, its centre outside
        solids and next to a cell holding particles."""
        res = False
        if self.active(b, kind, i, j):
            if wgt[b, i, j] > 0.0 and self.face_phi(b, kind, i, j) > 0.0:
                if ti.static(kind == U_FACES):
                    res = self.near_liquid_u(b, i, j)
                else:
                    res = self.near_liquid_w(b, i, j)
        return res

    @ti.func
    def viscous_product(self, b, c, kind: ti.template(), cg: ti.template(), slot: ti.template(),
                        i, j):
        """Row (i, j) of the viscosity matrix times the vector in ``cg``'s component ``slot``:
        d x - c sum of x over the neighbours that are unknowns."""
        acc = cg[b, i, j][3] * cg[b, i, j][slot]
        for d in ti.static(range(4)):
            ii = i + (d == 1) - (d == 0)
            jj = j + (d == 3) - (d == 2)
            if 0 <= ii < cg.shape[1] and 0 <= jj < cg.shape[2]:
                if cg[b, ii, jj][3] > 0.0:
                    acc -= c * cg[b, ii, jj][slot]
        return acc

    @ti.func
    def viscosity(self, b, dt, f: ti.template(), rhs: ti.template(), wgt: ti.template(),
                  fs: ti.template(), cg: ti.template(), kind: ti.template()):
        """Implicit viscosity on the u- or v-faces (``kind``) next to the liquid: backward Euler
        (I - dt nu lap) f' = f, unconditionally stable (Batty & Bridson 2008 solve it
        implicitly too). Neighbours across a solid or the domain's edge hold the wall's velocity
        where the SDF puts the wall, a fraction theta of the spacing away (ghost values, as
        Gibou et al. 2002 for the pressure: the wall adds c / theta to the diagonal): no-slip
        with the wall in its place, not at the next face. Neighbours in air: zero gradient.
        Jacobi-preconditioned CG to VISCOSITY_TOLERANCE of the right-hand side (max norm).
        ``cg`` holds per face (r, p, q, diagonal); diagonal 0 marks a face outside the solve."""
        c = dt * self.nu[b] * self.inv_dx * self.inv_dx
        i0, i1 = self.box[b][0], self.box[b][1] + (kind == U_FACES)
        rmax0 = 0.0
        for i in range(i0, i1):
            j_lo, j_hi = self.rows(b, kind, i)
            for j in range(j_lo, j_hi):
                diag, r = 0.0, f[b, i, j]
                if self.viscous_unknown(b, kind, wgt, i, j):
                    phi_c = self.face_phi(b, kind, i, j)
                    diag = 1.0
                    for d in ti.static(range(4)):
                        ii = i + (d == 1) - (d == 0)
                        jj = j + (d == 3) - (d == 2)
                        inside = 0 <= ii < wgt.shape[1] and 0 <= jj < wgt.shape[2]
                        if self.viscous_unknown(b, kind, wgt, ii, jj):
                            diag += c
                        elif not inside or self.active(b, kind, ii, jj):
                            phi_n = self.face_phi(b, kind, ii, jj)
                            if not inside or wgt[b, ii, jj] == 0.0 or phi_n < 0.0:
                                theta = 1.0
                                if phi_n < 0.0:
                                    theta = ti.max(phi_c / (phi_c - phi_n), VISCOSITY_WALL_MIN)
                                u_wall = 0.0
                                if inside:
                                    u_wall = fs[b, ii, jj]
                                diag += c / theta
                                r += c * u_wall / theta
                    rmax0 = ti.max(rmax0, ti.abs(r))
                rhs[b, i, j] = r
                # CG from f: (r, p, q) start as (0, f, 0) on the unknowns
                cg[b, i, j] = ti.Vector([0.0, f[b, i, j] if diag > 0.0 else 0.0, 0.0, diag])
        self.viscous_sweep(b, c, f, rhs, cg, kind, CG_RESIDUAL, 0.0, 0.0)  # r = rhs - A f, q = r / d
        rz, _ = self.viscous_sweep(b, c, f, rhs, cg, kind, CG_FIRST_DIRECTION, 0.0, 0.0)  # p = r / d
        tol = VISCOSITY_TOLERANCE * rmax0
        iters = 0
        while iters < VISCOSITY_MAX_ITERS and rz > 0.0:
            iters += 1
            pq, _ = self.viscous_sweep(b, c, f, rhs, cg, kind, CG_PRODUCT, 0.0, 0.0)
            alpha = ti.cast(rz / pq, ti.f32) if pq != 0.0 else 0.0
            rz_new, rmax = self.viscous_sweep(b, c, f, rhs, cg, kind, CG_STEP, alpha, 0.0)
            if rmax <= tol:
                break
            beta = ti.cast(rz_new / rz, ti.f32)
            rz = rz_new
            self.viscous_sweep(b, c, f, rhs, cg, kind, CG_DIRECTION, 0.0, beta)

    @ti.func
    def viscous_sweep(self, b, c, f: ti.template(), rhs: ti.template(), cg: ti.template(),
                      kind: ti.template(), op: ti.template(), alpha, beta):
        """One pass of viscosity()'s Jacobi-PCG over its unknowns (the faces of ``cg`` with a
        diagonal), each face's (r, p, q, d) in ``cg``; ``op`` is what the pass does:
        CG_RESIDUAL r = rhs - A f and q = r / d; CG_FIRST_DIRECTION p = q, returns r.q;
        CG_PRODUCT q = A p, returns p.q; CG_STEP f += alpha p, r -= alpha q, returns r.r / d
        and max |r|; CG_DIRECTION p = r / d + beta p. Returns (the dot product in f64, max |r|)."""
        i0, i1 = self.box[b][0], self.box[b][1] + (kind == U_FACES)
        acc = ti.cast(0.0, ti.f64)
        rmax = 0.0
        for i in range(i0, i1):
            j_lo, j_hi = self.rows(b, kind, i)
            for j in range(j_lo, j_hi):
                g = cg[b, i, j]
                if g[3] > 0.0:
                    if ti.static(op == CG_RESIDUAL):
                        g[0] = rhs[b, i, j] - self.viscous_product(b, c, kind, cg, 1, i, j)
                        g[2] = g[0] / g[3]
                    elif ti.static(op == CG_FIRST_DIRECTION):
                        acc += ti.cast(g[0] * g[2], ti.f64)
                        g[1] = g[2]
                    elif ti.static(op == CG_PRODUCT):
                        g[2] = self.viscous_product(b, c, kind, cg, 1, i, j)
                        acc += ti.cast(g[1] * g[2], ti.f64)
                    elif ti.static(op == CG_STEP):
                        f[b, i, j] = f[b, i, j] + alpha * g[1]
                        g[0] -= alpha * g[2]
                        rmax = ti.max(rmax, ti.abs(g[0]))
                        acc += ti.cast(g[0] * g[0] / g[3], ti.f64)
                    else:  # CG_DIRECTION
                        g[1] = g[0] / g[3] + beta * g[1]
                    cg[b, i, j] = g
        return acc, rmax

    # ------------------------------------------------------------------ pressure
    @ti.func
    def build_pressure_system(self, b):
        ny, dx = self.ny, self.dx
        # Liquid cells: those holding particles, or wetting a wall (wets_wall), and not sealed
        # off by solids.
        m = 0
        for k in range(self.nx + self.ny):
            self.wave[b, k] = 0  # liquid cells on the anti-diagonal i + j = k
        i0, i1 = self.box[b][0], self.box[b][1]
        for i in range(i0, i1):
            j_lo, j_hi = self.rows(b, CELLS, i)
            for j in range(j_lo, j_hi):
                self.cell_id[b, i, j] = -1
                open_sum = self.wu[b, i, j] + self.wu[b, i + 1, j] + self.wv[b, i, j] + self.wv[b, i, j + 1]
                liquid = False
                if open_sum > 0.0:
                    liquid = self.count[b, i, j] > 0
                    if not liquid:
                        liquid = self.wets_wall(b, i, j)
                if liquid:
                    self.cell_id[b, i, j] = UNNUMBERED
                    self.wave[b, i + j] = self.wave[b, i + j] + 1
                    m += 1
        # Number the cells by anti-diagonal (i + j), then i: a cell's left and lower
        # neighbours are on the diagonal before it, as MIC(0) needs, and the cells of one
        # diagonal do not depend on each other, so the preconditioner's sweeps (a chain of
        # dependent loads and multiplies down each column in lexicographic order) overlap
        # several cells at a time on the CPU.
        start = 0
        for k in range(self.nx + self.ny):  # counts -> first index of each diagonal
            n_k = self.wave[b, k]
            self.wave[b, k] = start
            start += n_k
        for i in range(i0, i1):
            j_lo, j_hi = self.rows(b, CELLS, i)
            for j in range(j_lo, j_hi):
                if self.cell_id[b, i, j] == UNNUMBERED:
                    c = self.wave[b, i + j]
                    self.wave[b, i + j] = c + 1
                    self.cell_id[b, i, j] = c
                    self.cells[b, c] = i * ny + j
        # One pass in list order: right-hand side, neighbours and the MIC(0) factor (a cell's
        # left and lower neighbours come earlier in the list, so their factor is known).
        for c in range(m):
            i, j = self.cells[b, c] // ny, self.cells[b, c] % ny
            wl, wr = self.wu[b, i, j], self.wu[b, i + 1, j]
            wd, wt = self.wv[b, i, j], self.wv[b, i, j + 1]
            lo, hi = self.cell_rows(b, i)
            lo_l, hi_l = self.cell_rows(b, i - 1)
            lo_r, hi_r = self.cell_rows(b, i + 1)
            l, d = self.liquid_id_in_rows(b, i - 1, j, lo_l, hi_l), self.liquid_id_in_rows(b, i, j - 1, lo, hi)
            self.nbr[b, c] = ti.Vector([l, self.liquid_id_in_rows(b, i + 1, j, lo_r, hi_r),
                                        d, self.liquid_id_in_rows(b, i, j + 1, lo, hi)])
            self.r[b, c] = self.pressure_rhs(b, i, j)
            self.p[b, c] = 0.0
            # MIC(0) (Bridson's book): e = E^2; the left neighbour's upper weight is the v-face
            # above it, the lower neighbour's right weight the u-face right of it
            diag = wl + wr + wd + wt
            nb4 = self.nbr[b, c]
            rc = 0.0
            if ti.min(ti.min(nb4[0], nb4[1]), ti.min(nb4[2], nb4[3])) < 0:  # beside air or solid
                rc = self.fill_at(b, i, j)
            if nb4[0] < 0 and wl > 0.0:
                diag += wl * (1.0 / surface_fraction(rc, self.fill_at(b, i - 1, j)) - 1.0)
            if nb4[1] < 0 and wr > 0.0:
                diag += wr * (1.0 / surface_fraction(rc, self.fill_at(b, i + 1, j)) - 1.0)
            if nb4[2] < 0 and wd > 0.0:
                diag += wd * (1.0 / surface_fraction(rc, self.fill_at(b, i, j - 1)) - 1.0)
            if nb4[3] < 0 and wt > 0.0:
                diag += wt * (1.0 / surface_fraction(rc, self.fill_at(b, i, j + 1)) - 1.0)
            e = diag
            fl, fd = 0.0, 0.0
            if l >= 0:
                fl = wl * self.precon[b, l]
                e -= fl * fl + MIC_TAU * wl * self.wv[b, i - 1, j + 1] * self.precon[b, l] ** 2
            if d >= 0:
                fd = wd * self.precon[b, d]
                e -= fd * fd + MIC_TAU * wd * self.wu[b, i + 1, j - 1] * self.precon[b, d] ** 2
            if e < MIC_SIGMA * diag:
                e = diag
            e_c = ti.sqrt(e)
            pc = 1.0 / e_c
            self.precon[b, c] = pc
            self.e_mic[b, c] = e_c
            self.diag_rest[b, c] = diag - 2.0 * e
            self.lfac[b, c] = ti.Vector([fl, wr * pc, fd, wt * pc])
        return m

    @ti.func
    def pressure_rhs(self, b, i, j):
        """Right-hand side of liquid cell (i, j)'s pressure equation: -dx times the divergence
        of the face velocities less the density correction's target."""
        dx = self.dx
        wl, wr = self.wu[b, i, j], self.wu[b, i + 1, j]
        wd, wt = self.wv[b, i, j], self.wv[b, i, j + 1]
        # Batty's divergence: open part of a face carries the liquid, the rest the solid.
        div = ((wr * self.u[b, i + 1, j] + (1 - wr) * self.us[b, i + 1, j])
               - (wl * self.u[b, i, j] + (1 - wl) * self.us[b, i, j])
               + (wt * self.w[b, i, j + 1] + (1 - wt) * self.ws[b, i, j + 1])
               - (wd * self.w[b, i, j] + (1 - wd) * self.ws[b, i, j]))
        # Density correction: a compressed cell is asked to expand back over ~1/kappa
        # substeps of dt_max; one inside the liquid (surrounded: its eight neighbours hold
        # particles or touch solids) to reach the density a liquid filling the open space
        # around it has (rest_density: below 1 next to walls), so that a sparse layer along
        # a wall closes as one in the open does. Near air a low count is geometry, not a void.
        # The target is a velocity (kappa * excess * dx / dt_max), not a fraction per substep:
        # it is computed on the fixed grid from the particles' start positions, and moving
        # liquid crosses up to `cfl` cells per substep, so a per-substep correction (~1/dt,
        # dt ~ dx / speed) misplaced by that travel grew with speed and worked like a drag
        # against the container's motion (a cup coasting at 2 m/s held a -4 deg surface).
        excess = self.rho[b, i, j] - 1.0
        if self.surrounded(b, i, j):
            excess = self.rho[b, i, j] - self.rest_density(b, i, j)
        else:
            excess = ti.max(excess, 0.0)
        div -= self.kappa * ti.math.clamp(excess, -0.5, 0.5) * dx / self.dt_max
        return -dx * div

    @ti.func
    def forward_sweep(self, b, c, y, f: ti.template()):
        """Row c of L f = y (cells in list order): f[c], given f of c's left and lower neighbours."""
        nb, lf = self.nbr[b, c], self.lfac[b, c]
        if nb[0] >= 0:
            y += lf[0] * f[b, nb[0]]
        if nb[2] >= 0:
            y += lf[2] * f[b, nb[2]]
        res = y * self.precon[b, c]
        f[b, c] = res
        return res

    @ti.func
    def solve_pressure(self, b, m):
        """CG on A p = r preconditioned by MIC(0), M = L L^T, in Eisenstat's (1981) form: CG on
        L^-1 A L^-T, whose product with a vector s^ takes the two triangular sweeps and no
        product with A, since A = L E + E L^T + (D - 2 E^2) gives
            L^-1 A L^-T s^ = E s + L^-1 (E s^ + (D - 2 E^2) s),  s = L^-T s^.
        Same iterates as MIC(0)-PCG in exact arithmetic (p += alpha s, the PCG's direction), one
        pass less per iteration. Stops on the max norm of the true residual r = L r^ (as the
        PCG on r). Returns the iteration count."""
        rmax0 = 0.0
        for c in range(m):
            rmax0 = ti.max(rmax0, ti.abs(self.r[b, c]))
        iters = 0
        if rmax0 > 0.0:
            tol = PCG_TOLERANCE * rmax0
            sigma = ti.cast(0.0, ti.f64)
            for c in range(m):  # r^ = L^-1 r, in place
                rh = self.forward_sweep(b, c, self.r[b, c], self.r)
                sigma += ti.cast(rh * rh, ti.f64)
            beta = 0.0
            while iters < PCG_MAX_ITERS:
                iters += 1
                # s^ = r^ + beta s^ and s = L^-T s^, in one pass in reverse order
                for cc in range(m):
                    c = m - 1 - cc
                    sh = self.r[b, c] + beta * self.s_hat[b, c]
                    self.s_hat[b, c] = sh
                    nb, lf = self.nbr[b, c], self.lfac[b, c]
                    if nb[1] >= 0:
                        sh += lf[1] * self.s[b, nb[1]]
                    if nb[3] >= 0:
                        sh += lf[3] * self.s[b, nb[3]]
                    self.s[b, c] = sh * self.precon[b, c]
                # q^ = E s + t, t = L^-1 (E s^ + (D - 2 E^2) s); s^.q^
                sq = ti.cast(0.0, ti.f64)
                for c in range(m):
                    es = self.e_mic[b, c] * self.s[b, c]
                    t = self.forward_sweep(b, c, self.e_mic[b, c] * self.s_hat[b, c]
                                           + self.diag_rest[b, c] * self.s[b, c], self.t)
                    sq += ti.cast(self.s_hat[b, c] * (es + t), ti.f64)
                alpha = ti.cast(sigma / sq, ti.f32) if sq != 0.0 else 0.0
                # p += alpha s, r^ -= alpha q^, and the true residual L r^ (it reads r^ of the
                # left and lower neighbours, updated earlier in this pass)
                rmax = 0.0
                sigma_new = ti.cast(0.0, ti.f64)
                for c in range(m):
                    s = self.s[b, c]
                    e_c = self.e_mic[b, c]
                    self.p[b, c] = self.p[b, c] + (alpha * s)
                    rh = self.r[b, c] - alpha * (e_c * s + self.t[b, c])
                    self.r[b, c] = rh
                    sigma_new += ti.cast(rh * rh, ti.f64)
                    res = e_c * rh
                    nb, lf = self.nbr[b, c], self.lfac[b, c]
                    if nb[0] >= 0:
                        res -= lf[0] * self.r[b, nb[0]]
                    if nb[2] >= 0:
                        res -= lf[2] * self.r[b, nb[2]]
                    rmax = ti.max(rmax, ti.abs(res))
                if rmax <= tol:
                    break
                beta = ti.cast(sigma_new / sigma, ti.f32)
                sigma = sigma_new
        return iters

    @ti.func
    def project(self, b, dt):
        """Pressure projection; for a viscous liquid, then viscosity and a second projection
        with the same matrix. Viscosity between two projections, not before the first: a step
        that diffuses the body force's dt g before the pressure balances it drags that
        velocity to zero at no-slip walls, leaving a circulation the projection cannot remove
        (liquid at rest stirs itself and drifts); applied before the body force instead, it
        leaves the carried velocity dt g off the steady viscous flow (a slot's Poiseuille
        profile slipping at the walls by dt g). Returns the pressure iterations."""
        m = self.build_pressure_system(b)
        iters = self.solve_pressure(b, m)
        self.subtract_pressure_gradient(b, self.u, self.wu, self.us, self.valid_u, U_FACES)
        self.subtract_pressure_gradient(b, self.w, self.wv, self.ws, self.valid_w, V_FACES)
        if self.viscous(b, dt):
            self.viscosity(b, dt, self.u, self.u_tmp, self.wu, self.us, self.u_cg, U_FACES)
            self.viscosity(b, dt, self.w, self.w_tmp, self.wv, self.ws, self.w_cg, V_FACES)
            ny = self.ny
            for c in range(m):
                self.r[b, c] = self.pressure_rhs(b, self.cells[b, c] // ny, self.cells[b, c] % ny)
                self.p[b, c] = 0.0
            iters += self.solve_pressure(b, m)
            self.subtract_pressure_gradient(b, self.u, self.wu, self.us, self.valid_u, U_FACES)
            self.subtract_pressure_gradient(b, self.w, self.wv, self.ws, self.valid_w, V_FACES)
        return iters

    @ti.func
    def subtract_pressure_gradient(self, b, f: ti.template(), open_frac: ti.template(),
                                   solid_vel: ti.template(), valid: ti.template(), kind: ti.template()):
        """One component (u- or v-faces: ``kind``) of project: a face between cells (i - di, j - dj)
        and (i, j) next to liquid loses the pressure gradient; solid faces take the solid's velocity."""
        di, dj = ti.static(1 if kind == U_FACES else 0, 0 if kind == U_FACES else 1)
        i0, i1 = self.box[b][0], self.box[b][1] + (kind == U_FACES)
        for i in range(i0, i1):
            j_lo, j_hi = self.rows(b, kind, i)
            lo_c, hi_c = self.cell_rows(b, i)  # active cells of the columns beside the faces
            lo_p, hi_p = self.cell_rows(b, i - di)
            for j in range(j_lo, j_hi):
                valid[b, i, j] = 0
                if open_frac[b, i, j] == 0.0:
                    f[b, i, j] = solid_vel[b, i, j]
                    valid[b, i, j] = 1
                else:
                    c_lo = self.liquid_id_in_rows(b, i - di, j - dj, lo_p, hi_p)
                    c_hi = self.liquid_id_in_rows(b, i, j, lo_c, hi_c)
                    if c_lo >= 0 or c_hi >= 0:  # air has p = 0
                        p_lo = self.p[b, ti.max(c_lo, 0)] * (c_lo >= 0)
                        p_hi = self.p[b, ti.max(c_hi, 0)] * (c_hi >= 0)
                        if c_lo < 0:  # ghost fluid: p = 0 at the surface between the centres
                            th = surface_fraction(self.fill_at(b, i, j), self.fill_at(b, i - di, j - dj))
                            p_lo = p_hi * (th - 1.0) / th
                        elif c_hi < 0:
                            th = surface_fraction(self.fill_at(b, i - di, j - dj), self.fill_at(b, i, j))
                            p_hi = p_lo * (th - 1.0) / th
                        f[b, i, j] = f[b, i, j] - ((p_hi - p_lo) / self.dx)
                        valid[b, i, j] = 1

    # ------------------------------------------------------------------ particles
    @ti.func
    def push_clearance(self, dt, vs_max):
        """Nodal SDF (m) such that a particle whose cell's four nodes all lie at least this far
        from solids is not pushed out in this substep (grid_to_particles skips the test), given
        the largest nodal solid speed ``vs_max`` (m/s).

        The test is phi < r_particle at x's cell when the solid there is still: the bilinear phi
        is at least its nodes' smallest. When it moves, the test reads the cell of
        x - s, s the solid's travel since the substep's start (|s| <= vs_max dt): within one
        cell of x's cell if |s| < dx, so each node of it lies within sqrt(2) dx of one of x's
        cell's nodes. The nodal SDF is exact where it is under SDF_BAND cells (else at least
        that), so min(phi, SDF_BAND dx) is 1-Lipschitz: nodes at least r_particle + sqrt(2) dx
        (< SDF_BAND dx) from solids keep x - s's nodes, hence its phi, at least r_particle
        away. Farther travel: no skip."""
        clearance = self.r_particle
        if vs_max > 0.0:
            clearance = 1e30
            if vs_max * dt < 0.99 * self.dx:
                clearance = self.r_particle + PUSH_REACH * self.dx
        return clearance

    @ti.func
    def grid_to_particles(self, b, dt, clearance):
        """FLIP/PIC velocity update and advection; also does update_box and returns max_speed of
        the particles' new state (saves two passes over the particles). Particles in cells whose
        nodes are all ``clearance`` (push_clearance) or more from solids skip the push-out test.

        Three passes over the particles where one would do: one particle's update is a long
        chain of dependent steps (grid samples, a square root and a division, samples at the
        midpoint, the SDF there), and split into short ones the CPU overlaps several particles
        (bench pour scene: 0.40 -> 0.24 ms a substep, same numbers)."""
        W, H = self.nx * self.dx, self.ny * self.dx
        rp = self.r_particle
        vmax = 0.0
        noslip = self.viscous(b, dt)  # the domain's edges as the viscosity solve sees them
        self.clear_extent(b)
        for p in range(self.n[b]):  # FLIP/PIC velocity; the first leg's midpoint
            x = self.x[b, p]
            v_pic = self.grid_velocity(b, x, noslip)
            v_old = ti.Vector([self.sample(b, self.u_old, x, 0.0, 0.5, noslip),
                               self.sample(b, self.w_old, x, 0.5, 0.0, noslip)])
            self.v[b, p] = self.flip_ratio * (self.v[b, p] + v_pic - v_old) + (1.0 - self.flip_ratio) * v_pic
            # RK2 through the grid velocity in legs of at most ADVECTION_CFL cells, each followed
            # by a push out of solids, so that no particle can cross a wall two cells thick
            # even when the substep's CFL number is larger.
            legs = ti.max(1, int(ti.ceil(v_pic.norm() * dt * (self.inv_dx / ADVECTION_CFL))))
            h = dt / legs
            mid = x + 0.5 * h * v_pic
            self.leg[b, p] = ti.Vector([mid[0], mid[1], h, legs])
        for p in range(self.n[b]):  # the first leg
            lg = self.leg[b, p]
            self.x[b, p] = self.x[b, p] + lg[2] * self.grid_velocity(b, ti.Vector([lg[0], lg[1]]), noslip)
        for p in range(self.n[b]):  # push-outs, further legs
            x = self.x[b, p]
            vel = self.v[b, p]
            lg = self.leg[b, p]
            h = lg[2]
            legs = ti.cast(lg[3], ti.i32)
            for leg in range(legs):
                if leg > 0:
                    mid = x + 0.5 * h * self.grid_velocity(b, x, noslip)
                    x = x + h * self.grid_velocity(b, mid, noslip)
                i, j, ax, ay = self.node_cell(x)
                near = ti.min(ti.min(self.phi[b, i, j], self.phi[b, i + 1, j]),
                              ti.min(self.phi[b, i, j + 1], self.phi[b, i + 1, j + 1])) < clearance
                if near:  # most particles are not: no solid point within reach of the test
                    x, vel = push_out_of_solids(self, b, x, vel, (leg + 1) * h, rp)
            x = ti.Vector([ti.math.clamp(x[0], rp, W - rp), ti.math.clamp(x[1], rp, H - rp)])
            self.x[b, p] = x
            self.v[b, p] = vel
            vmax = self.speed_bound(vmax, vel)
            self.add_to_extent(b, x)
        self.set_box(b)
        return vmax

    @ti.func
    def speed_bound(self, vmax, v):
        """max(vmax, |v|), with |v| capped at BLOWUP_SPEED: ti.max drops a NaN, so a NaN counts
        as a blow-up (else a NaN scene ran on, its particles clamped to the domain's corner and
        counted spilled)."""
        s = v.norm()
        res = ti.max(vmax, BLOWUP_SPEED)
        if s < BLOWUP_SPEED:
            res = ti.max(vmax, s)
        return res

    @ti.func
    def max_speed(self, b):
        vmax = 0.0
        for p in range(self.n[b]):
            vmax = self.speed_bound(vmax, self.v[b, p])
        return vmax

    @ti.func
    def max_body_speed(self, b):
        vmax = 0.0
        for k in range(self.nbody[b]):
            bv = self.body_vel[b, k]
            vmax = ti.max(vmax, ti.Vector([bv[0], bv[1]]).norm() + ti.abs(bv[2]) * self.bound[b, k])
        return vmax

    # ------------------------------------------------------------------ step
    @ti.func
    def update_box(self, b):
        """The active box and spans of the particles' current positions."""
        self.clear_extent(b)
        for p in range(self.n[b]):
            self.add_to_extent(b, self.x[b, p])
        self.set_box(b)

    @ti.func
    def clear_extent(self, b):
        for i in range(self.nx):
            self.extent[b, i] = ti.Vector([self.ny, -1])

    @ti.func
    def add_to_extent(self, b, x):
        """Widen the row extent of the column holding point x to x's row."""
        c = ti.cast(ti.floor(x * self.inv_dx), ti.i32)
        i = ti.min(ti.max(c[0], 0), self.nx - 1)
        j = ti.min(ti.max(c[1], 0), self.ny - 1)
        e = self.extent[b, i]
        self.extent[b, i] = ti.Vector([ti.min(e[0], j), ti.max(e[1], j)])

    @ti.func
    def set_box(self, b):
        """The active box (the particles' bounding box of cells, padded by `pad`) and each of
        its columns' span (the rows within `pad` of a particle's cell in the columns within
        `pad`), from the columns' row extents."""
        pad = self.pad
        lo = ti.Vector([self.nx, self.ny])
        hi = ti.Vector([0, 0])
        for i in range(self.nx):
            e = self.extent[b, i]
            if e[0] <= e[1]:
                lo = ti.min(lo, ti.Vector([i, e[0]]))
                hi = ti.max(hi, ti.Vector([i, e[1]]))
        i0, i1 = ti.max(lo[0] - pad, 0), ti.min(hi[0] + 1 + pad, self.nx)
        self.box[b] = ti.Vector([i0, i1, ti.max(lo[1] - pad, 0), ti.min(hi[1] + 1 + pad, self.ny)])
        for i in range(i0, i1):
            j_lo, j_hi = self.ny, 0
            for ii in range(ti.max(i - pad, 0), ti.min(i + pad + 1, self.nx)):
                e = self.extent[b, ii]
                if e[0] <= e[1]:
                    j_lo = ti.min(j_lo, e[0] - pad)
                    j_hi = ti.max(j_hi, e[1] + 1 + pad)
            self.span[b, i] = ti.Vector([ti.max(j_lo, 0), ti.min(j_hi, self.ny)])

    @ti.func
    def extrapolate_both(self, b):
        self.extrapolate(b, self.u, self.valid_u, U_FACES)
        self.extrapolate(b, self.w, self.valid_w, V_FACES)

    @ti.func
    def substep(self, b, t, dt):
        """One substep; `box` must hold the particles' padded bounding box (update_box, or the
        previous substep's grid_to_particles). Returns the PCG iterations and the particles'
        largest speed afterwards (max_speed)."""
        self.set_frames(b, t)
        self.splat_particles(b)
        vs_max = self.update_solids(b)
        # No extrapolation yet: every face a particle's stencil or the pressure update touches
        # got weight from a particle (bilinear support reaches one cell).
        self.particles_to_grid(b)
        self.body_forces(b, t, dt)
        iters = self.project(b, dt)
        self.extrapolate_both(b)
        vmax = self.grid_to_particles(b, dt, self.push_clearance(dt, vs_max))
        return iters, vmax

    @ti.func
    def measure(self, b, step):
        """Fractions inside each container, in flight and spilled; liquid area (m^2: cells
        inside the liquid (surrounded) count their open part, the others not centred in a solid
        their number density, so that neither the particles' disorder nor walls bias it); the
        probe's heights: over each column, the highest particle's y in the probed body's frame
        among those with y in [y_lo, y_hi], else y_lo; the target opening's score.

        ``step`` is the interval (s) just advanced, 0 after a liquid upload. Liquid outside every
        container is spilled if it moved slower than ``settle_speed`` over that interval (its
        own speed when there was none), or if it is below the target opening (it can no longer
        reach it); else it is in flight. The target score is Pan & Manocha 2017's R_p = max(1 - dist / W,
        0) of each particle that entered the target body this step (dist from the opening's
        centre where its path crossed the opening's line, W the half width), less the score
        earned by each particle that left it."""
        self.set_frames(b, 0.0)
        for k in range(self.K):
            self.in_body[b, k] = 0
        probe = self.probe[b]
        probe_body, y_lo, y_hi = ti.cast(probe[0], ti.i32), probe[1], probe[2]
        for c in range(MAX_PROBE_COLUMNS):
            self.heights[b, c] = y_lo
        target = self.target[b]
        tb = ti.cast(target[0], ti.i32)
        oc = ti.Vector([target[1], target[2]])
        rim = -1e9                                    # world height of the opening's centre, m
        prev = ti.Vector([0.0, 0.0, 1.0, 0.0])        # the target's frame one step ago
        if tb >= 0:
            f = self.frame[b, tb]
            rim = f[1] + f[3] * oc[0] + f[2] * oc[1]
            pz = self.pose[b, tb] - self.body_vel[b, tb] * step
            prev = ti.Vector([pz[0], pz[1], ti.cos(pz[2]), ti.sin(pz[2])])
        scoring = tb >= 0 and step > 0.0 and self.new_liquid[b] == 0
        if self.new_liquid[b] != 0:
            for p in range(self.n[b]):
                self.earned[b, p] = 0.0
            self.new_liquid[b] = 0
        in_flight, spilled, score = 0, 0, 0.0
        for p in range(self.n[b]):
            x = self.x[b, p]
            if probe_body >= 0:
                q = self.to_body(b, probe_body, x)
                if y_lo <= q[1] and q[1] <= y_hi:
                    for c in range(ti.cast(probe[3], ti.i32)):
                        col = self.probe_columns[b, c]
                        if col[0] <= q[0] and q[0] <= col[1]:
                            self.heights[b, c] = ti.max(self.heights[b, c], q[1])
            owner = -1
            for k in range(self.nbody[b]):
                if owner < 0 and self.npoly[b, k] > 0:
                    if self.inside_polygon(b, k, self.to_body(b, k, x)):
                        owner = k
                        self.in_body[b, k] = self.in_body[b, k] + 1
            x_prev = self.x_measured[b, p]
            if scoring:
                was_in = ti.cast(self.container_of[b, p], ti.i32) == tb
                if owner == tb and not was_in:
                    d = x_prev - ti.Vector([prev[0], prev[1]])
                    lp = ti.Vector([prev[2] * d[0] + prev[3] * d[1], -prev[3] * d[0] + prev[2] * d[1]])
                    ln = self.to_body(b, tb, x)
                    dy = ln[1] - lp[1]
                    t = 1.0
                    if ti.abs(dy) > 1e-12:
                        t = ti.math.clamp((oc[1] - lp[1]) / dy, 0.0, 1.0)
                    rp = ti.max(1.0 - (lp + t * (ln - lp) - oc).norm() / target[3], 0.0)
                    self.earned[b, p] = rp
                    score += rp
                elif was_in and owner != tb:
                    score -= self.earned[b, p]
                    self.earned[b, p] = 0.0
            self.container_of[b, p] = ti.cast(owner, ti.i8)
            self.x_measured[b, p] = x
            if owner < 0:
                speed = self.v[b, p].norm()
                if step > 0.0:
                    speed = (x - x_prev).norm() / step
                if speed < self.settle_speed or x[1] < rim:
                    spilled += 1
                else:
                    in_flight += 1
        self.update_box(b)
        self.splat_density(b)
        self.update_solids(b)  # the walls where the bodies are now (the area's cut cells)
        area = 0.0
        i0, i1 = self.box[b][0], self.box[b][1]
        for i in range(i0, i1):
            j_lo, j_hi = self.rows(b, CELLS, i)
            for j in range(j_lo, j_hi):
                if self.surrounded(b, i, j):
                    area += ti.math.clamp(0.5 + self.cell_phi(b, i, j) * self.inv_dx, 0.0, 1.0)
                elif not self.solid_centred(b, i, j):
                    area += self.rho[b, i, j]
        self.diagnostics[b, D_IN_FLIGHT] = in_flight
        self.diagnostics[b, D_SPILLED] = spilled
        self.diagnostics[b, D_AREA] = area * self.dx * self.dx
        self.diagnostics[b, D_TARGET_SCORE] = score

    @ti.func
    def cell_phi(self, b, i, j):
        """Solid SDF at cell (i, j)'s centre (m): the mean of its nodes'."""
        return 0.25 * (self.phi[b, i, j] + self.phi[b, i + 1, j] + self.phi[b, i, j + 1]
                       + self.phi[b, i + 1, j + 1])

    @ti.func
    def surrounded(self, b, i, j):
        """Cell (i, j) and its eight neighbours are wet and one of them holds particles: a cell
        inside the liquid (or in the solid beside it), whose number density is known from the
        geometry alone (rest_density). A cell is wet if it holds particles or a solid cuts it
        (its centre less than half a cell from one); outside the domain counts as solid,
        inactive cells are not wet."""
        res, liquid = True, False
        # each column's active rows read once (look-ups per cell were most of the pressure
        # right-hand side's cost)
        for di in ti.static(range(-1, 2)):
            ii = i + di
            lo, hi = self.cell_rows(b, ii)
            for dj in ti.static(range(-1, 2)):
                jj = j + dj
                if 0 <= ii < self.nx and 0 <= jj < self.ny:  # outside the domain: wet, empty
                    if lo <= jj and jj < hi:
                        if self.count[b, ii, jj] > 0:
                            liquid = True
                        elif self.cell_phi(b, ii, jj) >= 0.5 * self.dx:
                            res = False
                    else:
                        res = False
        return res and liquid

    @ti.func
    def rest_density(self, b, i, j):
        """Number density at cell (i, j)'s centre of liquid at rest filling the open space
        around it: the tent kernel's mass on the open side of the wall at the centre's solid
        distance (exact for a plane along an axis, within 0.01 at any angle)."""
        return tent_cdf(self.cell_phi(b, i, j) * self.inv_dx)

    @ti.kernel
    def advance(self, interval: ti.f32):
        """Advance every scene by `interval` seconds (one launch). Body poses advance too."""
        # Taichi's CPU backend runs a range-for of a few iterations on one thread; spread over
        # (scene, lane) pairs and working on lane 0 only, the scenes are shared among threads.
        for b, lane in ti.ndrange(self.B, PARALLEL_LANES):
            if lane == 0 and self.diagnostics[b, D_UNSTABLE] == 0.0:
                t, n_sub, max_cfl, max_iters = 0.0, 0, 0.0, 0
                vmax = self.max_speed(b)  # then kept by each substep, as is the box
                self.update_box(b)
                while t < interval * (1.0 - 1e-6):
                    speed = ti.max(vmax, self.max_body_speed(b))
                    if not (speed < BLOWUP_SPEED) or n_sub >= MAX_SUBSTEPS:  # catches NaN too
                        self.diagnostics[b, D_UNSTABLE] = 1.0
                        break
                    dt = ti.min(self.dt_max, self.cfl * self.dx / ti.max(speed, 1e-6))
                    remaining = interval - t
                    if dt >= remaining:
                        dt = remaining
                    elif 2.0 * dt > remaining:  # two even substeps instead of a sliver
                        dt = 0.5 * remaining
                    iters, vmax = self.substep(b, t, dt)
                    max_iters = ti.max(max_iters, iters)
                    max_cfl = ti.max(max_cfl, speed * dt / self.dx)
                    t += dt
                    n_sub += 1
                if self.diagnostics[b, D_UNSTABLE] == 0.0:
                    for k in range(self.nbody[b]):
                        self.pose[b, k] = self.pose[b, k] + (self.body_vel[b, k] * interval)
                    self.measure(b, interval)
                    self.diagnostics[b, D_TIME] = self.diagnostics[b, D_TIME] + interval
                self.diagnostics[b, D_MAX_CFL] = max_cfl
                self.diagnostics[b, D_SUBSTEPS] = n_sub
                self.diagnostics[b, D_PCG_ITERS] = max_iters

    @ti.kernel
    def set_body_state(self, state: ti.types.ndarray(dtype=ti.f32, ndim=3)):
        """Poses (x, y, theta) and velocities (vx, vy, omega) of every body: (B, K, 6)."""
        for b, k in ti.ndrange(self.B, self.K):
            self.pose[b, k] = ti.Vector([state[b, k, 0], state[b, k, 1], state[b, k, 2]])
            self.body_vel[b, k] = ti.Vector([state[b, k, 3], state[b, k, 4], state[b, k, 5]])

    @ti.kernel
    def read_state(self, out: ti.types.ndarray(dtype=ti.f32, ndim=2),
                   x_out: ti.types.ndarray(dtype=ti.f32, ndim=3),
                   owner_out: ti.types.ndarray(dtype=ti.i8, ndim=2),
                   heights_out: ti.types.ndarray(dtype=ti.f32, ndim=2)):
        """Diagnostics row, then the particle count inside each body: (B, N_DIAG + K); the
        particle positions (B, P, 2), the container holding each particle (B, P) and the probe's
        heights (B, MAX_PROBE_COLUMNS), as of the last measure: one launch for what the host
        reads after every advance."""
        for b in range(self.B):
            for d in range(N_DIAG):
                out[b, d] = self.diagnostics[b, d]
            for k in range(self.K):
                out[b, N_DIAG + k] = self.in_body[b, k]
            for c in range(MAX_PROBE_COLUMNS):
                heights_out[b, c] = self.heights[b, c]
        for b, p in ti.ndrange(self.B, self.P):
            if p < self.n[b]:
                x_out[b, p, 0] = self.x[b, p][0]
                x_out[b, p, 1] = self.x[b, p][1]
                owner_out[b, p] = self.container_of[b, p]

    @ti.kernel
    def measure_all(self):
        for b in range(self.B):
            self.measure(b, 0.0)


@ti.func
def push_out_of_solids(solver: ti.template(), b, x, vel, elapsed, rp):
    """Particle at x (m) with velocity vel (m/s), ``elapsed`` s into the substep, pushed out to
    r_particle ``rp`` (m) from the solids of scene b and its velocity's inward normal component
    relative to the solid removed; returns (x, vel). Shared by Flip2D and Flip3D, whose
    ``solid_at(b, x)`` gives (phi, grad phi, solid velocity) from the nodal SDF.

    The nodal SDF is from the start of the substep; sampling it where the solid point now over
    x was then (x - elapsed * v_solid) follows the body's motion (still: at x)."""
    phi, grad, vs = solver.solid_at(b, x)
    moving = vs[0] != 0.0
    for k in ti.static(range(1, vs.n)):
        moving = moving or vs[k] != 0.0
    if moving:
        phi, grad, _vs = solver.solid_at(b, x - elapsed * vs)
    if phi < rp:
        nrm = grad.normalized(1e-12)
        x = x + (rp - phi) * nrm
        vn = (vel - vs).dot(nrm)
        if vn < 0.0:
            vel = vel - vn * nrm
    return x, vel


@ti.func
def open_fraction(phi_a, phi_b):
    """Fraction of a face between two nodes that lies outside solids (phi > 0)."""
    f = 0.0
    if phi_a > 0.0 and phi_b > 0.0:
        f = 1.0
    elif phi_a > 0.0:
        f = phi_a / (phi_a - phi_b)
    elif phi_b > 0.0:
        f = phi_b / (phi_b - phi_a)
    return f



@ti.func
def tent_cdf(d):
    """Mass of the unit tent kernel (1 - |t|, |t| < 1) on the side t < d of a plane d cells
    from its centre: the number density at a cell centre d cells inside a half-space of liquid
    at rest (flip2d.rest_density)."""
    res = 1.0
    if d <= -1.0:
        res = 0.0
    elif d <= 0.0:
        res = 0.5 * (1.0 + d) ** 2
    elif d < 1.0:
        res = 1.0 - 0.5 * (1.0 - d) ** 2
    return res


@ti.func
def density_depth(rho):
    """Depth (cells) below a flat free surface of a cell centre whose tent-filtered number
    density is rho: the inverse of rho(d) = 1 - (1 - d)^2 / 2 (0 <= d <= 1), (1 + d)^2 / 2
    (-1 <= d <= 0); the 0.5 iso-line of the density is the surface."""
    r = ti.math.clamp(rho, 0.0, 1.0)
    d = 0.0
    if r >= 0.5:
        d = 1.0 - ti.sqrt(2.0 * (1.0 - r))
    else:
        d = ti.sqrt(2.0 * r) - 1.0
    return d


@ti.func
def surface_fraction(rho_liquid, rho_air):
    """Fraction of the way from a liquid cell's centre to its air neighbour's at which the
    free surface lies (ghost fluid, Gibou et al. 2002; Enright et al. 2003)."""
    dl, da = density_depth(rho_liquid), density_depth(rho_air)
    th = 1.0
    if dl <= 0.0:
        th = SURFACE_FRACTION_MIN
    elif dl > da:
        th = ti.min(ti.max(dl / (dl - da), SURFACE_FRACTION_MIN), 1.0)
    return th
