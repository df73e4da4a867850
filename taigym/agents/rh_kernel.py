"""``rh``'s planning step as one Taichi kernel: :class:`taigym.agents.rh_cost.HorizonCost` and
:func:`taigym.agents.rh_cost.lbfgs`, compiled.

The NumPy :class:`~taigym.agents.rh_cost.HorizonCost` is the reference, documented term by term; this
is the same arithmetic, term for term, so that one control step's whole L-BFGS solve (about 15
evaluations of the cost and its gradient) is one kernel launch instead of some two thousand
NumPy calls on arrays of 25 rows. Only the order of a few sums differs (the liquid's lag is a
recursion here, a matrix product there): costs and gradients agree to about 1e-16 relative, a
whole solve's plan to 1e-9 (``tests/test_rh.py``). ``python scripts/rh_speed.py`` prints the per-step times of both.

Everything is float64: Taichi is initialised with ``default_fp=f32`` for the solvers, so every
float constant below that is not exact in float32 is written ``F(...)``. The kernel runs serially
(one scene, 75 unknowns); ``a[i] = a[i] + x`` rather than ``+=``, which Taichi compiles to an
atomic add.
"""


import math

import numpy as np
import taichi as ti

from taigym.agents.rh_cost import ACTIVE_MARGIN, GRAVITY, LBFGS_GTOL, LBFGS_MEMORY, MIN_GRAVITY
from taigym.sim import backend
from taigym.sim.constants import CONTROL_DT

F = ti.f64
NO_SCALE = -1.0             # no inverse-Hessian scale yet (lbfgs' scale0=None)

# scalars of one problem, in `par`; P_W_PRIOR, P_W_SMOOTH, P_SCALE (the action scale), P_S0 and
# P_SM1 (S_0 and S_-1) hold 3 values (x, y, theta), P_V0 (the liquid's velocity now) 2
(P_PX, P_PY, P_VX, P_VY, P_RHO, P_W, P_DT, P_POUR0, P_POUR1, P_SIDE, P_MAX_TILT, P_FLOW_GAIN,
 P_W_DRIP, P_DRIP_MARGIN, P_LAG_B, P_W_COLL, P_W_PRIOR, P_W_SMOOTH, P_SCALE, P_S0, P_SM1, P_V0,
 P_HESS_SCALE, P_GRAVITY, P_MIN_GRAVITY, P_ACTIVE_MARGIN, P_W_SPREAD) = (
    0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 19, 22, 25, 28, 31, 33, 34, 35, 36, 37)
N_PAR = 38
# columns of `per_step` (K rows): the prior pose, T's rim height, opening centre x and velocity x
C_PRIOR, C_RIM, C_TX, C_TVX = 0, 3, 4, 5
# columns of `seg` (M rows, T's walls then the obstacles' edges): direction (x, y), 1 / length^2, reach (S's wall radius + the
# segment's + clearance)
C_ABX, C_ABY, C_INV_LEN2, C_REACH = 0, 1, 2, 3
# rows of the workspace `ws` (n = 3K columns; per-step rows use the first K or 3K)
(R_X, R_G, R_XN, R_GN, R_Q, R_D, R_U, R_S, R_GL, R_WV, R_DD, R_PEN, R_ACTIVE, R_ALPHA) = range(14)
N_ROWS = 14

nd1 = ti.types.ndarray(dtype=ti.f64, ndim=1)
nd2 = ti.types.ndarray(dtype=ti.f64, ndim=2)
nd3 = ti.types.ndarray(dtype=ti.f64, ndim=3)


@ti.func
def _pose(par: ti.template(), ws: ti.template(), k, j):
    """Coordinate j of pose k (k = -2: S_-1, k = -1: S_0, k >= 0: the plan's S_{k+1})."""
    v = F(0.0)
    if k >= 0:
        v = ws[R_S, 3 * k + j]
    elif k == -1:
        v = par[P_S0 + j]
    else:
        v = par[P_SM1 + j]
    return v


@ti.func
def _penetration(q: ti.template(), seg_a: ti.template(), seg: ti.template(), k, x, y, th, margin):
    """Max penetration D of S's wall circles at pose (x, y, th) into the segments of step k (plus
    ``margin``) and its gradient: (D, dD/dx, dD/dy, dD/dth) (HorizonCost._penetration)."""
    c, s = ti.cos(th), ti.sin(th)
    best, bdx, bdy, bd, brx, bry = -F(math.inf), F(0.0), F(0.0), F(1.0), F(0.0), F(0.0)
    for i in range(q.shape[0]):
        rx = c * q[i, 0] - s * q[i, 1]
        ry = s * q[i, 0] + c * q[i, 1]
        for m in range(seg.shape[0]):
            abx, aby = seg[m, C_ABX], seg[m, C_ABY]
            dx0 = (x + rx) - seg_a[k, m, 0]
            dy0 = (y + ry) - seg_a[k, m, 1]
            t = ti.min(ti.max((dx0 * abx + dy0 * aby) * seg[m, C_INV_LEN2], F(0.0)), F(1.0))
            dx, dy = dx0 - t * abx, dy0 - t * aby
            dist = ti.sqrt(dx * dx + dy * dy) + F(1e-12)
            pen = (seg[m, C_REACH] + margin) - dist
            if pen > best:                    # the first maximum, as np.argmax
                best, bdx, bdy, bd, brx, bry = pen, dx, dy, dist, rx, ry
    D = ti.max(best, F(0.0))
    g = ti.Vector([D, F(0.0), F(0.0), F(0.0)], dt=F)
    if D > 0.0:
        nx, ny = bdx / bd, bdy / bd
        g = ti.Vector([D, -nx, -ny, -(-nx * bry + ny * brx)], dt=F)
    return g


@ti.func
def _cost(par: ti.template(), per_step: ti.template(), q: ti.template(), seg_a: ti.template(), seg: ti.template(), ws: ti.template(), xrow: ti.template(), grow: ti.template(),
          from_actions: ti.template(), find_active):
    """The horizon cost at ws[xrow] and its gradient into ws[grow]: with respect to the poses
    S_1..S_K (from_actions False) or to the unbounded actions z (True: S_k = S_0 + scale *
    cumsum(tanh z), as RHAgent.plan's f). ``find_active``: mark the steps within
    ACTIVE_MARGIN of contact first (HorizonCost._collision at its first call)."""
    K = per_step.shape[0]
    g_acc, inv = par[P_GRAVITY], F(1.0) / par[P_DT]
    # ---- poses
    for j in range(3):
        acc = F(0.0)
        for k in range(K):
            if ti.static(from_actions):
                u = ti.tanh(ws[xrow, 3 * k + j])
                ws[R_U, 3 * k + j] = u
                acc = acc + u * par[P_SCALE + j]
                ws[R_S, 3 * k + j] = par[P_S0 + j] + acc
            else:
                ws[R_S, 3 * k + j] = ws[xrow, 3 * k + j]
    # ---- prior and smoothness; the Laplacian's gradient is gathered in R_GL
    cost = F(0.0)
    for k in range(K):
        for j in range(3):
            d = ws[R_S, 3 * k + j] - per_step[k, C_PRIOR + j]
            wd = par[P_W_PRIOR + j] * d
            lap = ws[R_S, 3 * k + j] - 2.0 * _pose(par, ws, k - 1, j) + _pose(par, ws, k - 2, j)
            wl = par[P_W_SMOOTH + j] * lap
            cost = cost + wd * d + wl * lap
            ws[grow, 3 * k + j] = 2.0 * wd
            ws[R_GL, 3 * k + j] = 2.0 * wl
    # ---- pour, dribble and drip (HorizonCost._pour, _effective_lean, _weir)
    px, py, vx, vy = par[P_PX], par[P_PY], par[P_VX], par[P_VY]
    side, fg, W = par[P_SIDE], par[P_FLOW_GAIN], par[P_W]
    b = par[P_LAG_B]
    vlx, vly = par[P_V0], par[P_V0 + 1]
    inv2 = inv * inv
    c_pour, c_drip, c_spread = F(0.0), F(0.0), F(0.0)
    for k in range(K):
        x, y, th = ws[R_S, 3 * k], ws[R_S, 3 * k + 1], ws[R_S, 3 * k + 2]
        c, s = ti.cos(th), ti.sin(th)
        ax, ay = c * px - s * py, s * px + c * py
        wx, wy = x + ax, y + ay
        jx, jy = c * vx - s * vy, s * vx + c * vy
        om = (th - _pose(par, ws, k - 1, 2)) * inv
        # the liquid's velocity: S's over step k through the lag (v_k = (1 - b) v_{k-1} + b u_k)
        vlx = (1.0 - b) * vlx + b * (x - _pose(par, ws, k - 1, 0)) * inv
        vly = (1.0 - b) * vly + b * (y - _pose(par, ws, k - 1, 1)) * inv
        Vx1, Vy1 = vlx - om * ay, vly + om * ax
        rim, tx, tvx = per_step[k, C_RIM], per_step[k, C_TX], per_step[k, C_TVX]
        dVx_th = -ay * inv - om * ax
        dVy_th = ax * inv - om * ay
        # the flux rho_k and its derivatives (theta_k; the Laplacian's x, y)
        rho, d_th, dlx, dly = par[P_RHO], F(0.0), F(0.0), F(0.0)
        phi, dphx, dphy = F(0.0), F(0.0), F(0.0)
        if fg > 0.0:
            lapx = x - 2.0 * _pose(par, ws, k - 1, 0) + _pose(par, ws, k - 2, 0)
            lapy = y - 2.0 * _pose(par, ws, k - 1, 1) + _pose(par, ws, k - 2, 1)
            ua = -side * inv2 * lapx
            v_raw = g_acc + inv2 * lapy
            va = ti.max(v_raw, par[P_MIN_GRAVITY])
            phi = -side * th + ti.atan2(ua, va)
            w = inv2 / (ua * ua + va * va)
            dphx = -side * va * w
            if v_raw > par[P_MIN_GRAVITY]:
                dphy = -ua * w
            ex = ti.max(phi - par[P_MAX_TILT], F(0.0))
            sq = ti.sqrt(ex)
            drho = (1.5 * fg) * sq
            rho = par[P_RHO] + fg * ex * sq
            d_th, dlx, dly = -side * drho, drho * dphx, drho * dphy
        m_rho = F(0.0)                      # d cost / d rho_k
        gx, gy, gth, gpth, wvx, wvy = F(0.0), F(0.0), F(0.0), F(0.0), F(0.0), F(0.0)
        for r in ti.static(range(2)):       # 0: the jet, 1: the dribble (no jet velocity)
            Vx, Vy = Vx1, Vy1
            if ti.static(r == 0):
                Vx, Vy = Vx1 + jx, Vy1 + jy
            disc = Vy * Vy + 2.0 * g_acc * (wy - rim)
            sD = ti.sqrt(ti.max(disc, F(1e-6)))
            ks = F(0.0)
            if disc > F(1e-6):
                ks = 1.0 / sD
            tau = (Vy + sD) / g_acc
            rel = Vx - tvx
            e = wx + rel * tau - tx
            cy = (1.0 + ks * Vy) / g_acc
            pe = par[P_POUR0 + r] * e
            we = 2.0 * rho * pe                                 # d cost / d wx
            wVx = we * tau                                      # d cost / d Vx
            wtau = we * rel                                     # d cost / d tau
            if ti.static(r == 0):                               # the jet's spread
                wtau = wtau + 2.0 * par[P_RHO] * par[P_W_SPREAD] * tau
                c_spread = c_spread + par[P_RHO] * par[P_W_SPREAD] * tau * tau
            wVy, wwy = wtau * cy, wtau * ks
            gx = gx + we
            gy = gy + wwy
            gth = gth + wVx * dVx_th + wVy * dVy_th + wwy * ax - ay * we
            if ti.static(r == 0):
                gth = gth + (wVy * jx - wVx * jy)
            gpth = gpth + wVx * ay - wVy * ax
            wvx = wvx + wVx
            wvy = wvy + wVy
            m_rho = m_rho + pe * e
        c_pour = c_pour + rho * m_rho
        ws[grow, 3 * k] = ws[grow, 3 * k] + gx
        ws[grow, 3 * k + 1] = ws[grow, 3 * k + 1] + gy
        ws[grow, 3 * k + 2] = ws[grow, 3 * k + 2] + gth + m_rho * d_th
        if k > 0:
            ws[grow, 3 * k - 1] = ws[grow, 3 * k - 1] + gpth * inv
        ws[R_WV, 3 * k] = wvx
        ws[R_WV, 3 * k + 1] = wvy
        glx, gly = m_rho * dlx, m_rho * dly
        if fg > 0.0 and par[P_W_DRIP] > 0.0:
            # the drip: the flux past (max tilt - drip_margin) leaving the lip at rest
            h = ti.max(wy - rim, F(0.0))
            t_fall = ti.sqrt(2.0 * h / g_acc)
            e0 = wx - tx - tvx * t_fall
            out = ti.max(ti.abs(e0) - W, F(0.0))
            if out > 0.0:
                exd = ti.max(phi - (par[P_MAX_TILT] - par[P_DRIP_MARGIN]), F(0.0))
                sqd = ti.sqrt(exd)
                xr = fg * exd * sqd
                x_drho = (1.5 * fg) * sqd
                md = par[P_W_DRIP] * out * out
                c_drip = c_drip + xr * md
                sign = F(1.0) if e0 > 0.0 else F(-1.0)
                ge = (2.0 * par[P_W_DRIP]) * xr * out * sign
                gyd = F(0.0)
                if h > 0.0:
                    gyd = -ge * tvx / (g_acc * ti.max(t_fall, F(1e-9)))
                ws[grow, 3 * k] = ws[grow, 3 * k] + ge
                ws[grow, 3 * k + 1] = ws[grow, 3 * k + 1] + gyd
                ws[grow, 3 * k + 2] = ws[grow, 3 * k + 2] + ax * gyd - ay * ge + md * (-side * x_drho)
                glx = glx + md * x_drho * dphx
                gly = gly + md * x_drho * dphy
        ws[R_GL, 3 * k] = ws[R_GL, 3 * k] + glx
        ws[R_GL, 3 * k + 1] = ws[R_GL, 3 * k + 1] + gly
    cost = cost + c_pour + c_drip + c_spread
    # the lag's adjoint, backwards: d cost / d (S_k - S_{k-1}) = (b / dt) sum_{i >= k} (1 - b)^(i - k) wv_i
    ax_, ay_, nx_, ny_ = F(0.0), F(0.0), F(0.0), F(0.0)
    for kk in range(K):
        k = K - 1 - kk
        ax_ = ws[R_WV, 3 * k] + (1.0 - b) * ax_
        ay_ = ws[R_WV, 3 * k + 1] + (1.0 - b) * ay_
        gvx, gvy = (b * inv) * ax_, (b * inv) * ay_
        ws[grow, 3 * k] = ws[grow, 3 * k] + gvx - nx_
        ws[grow, 3 * k + 1] = ws[grow, 3 * k + 1] + gvy - ny_
        nx_, ny_ = gvx, gvy
    # ---- collision (HorizonCost._collision)
    if find_active:
        for k in range(K):
            p = _penetration(q, seg_a, seg, k, ws[R_S, 3 * k], ws[R_S, 3 * k + 1],
                             ws[R_S, 3 * k + 2], par[P_ACTIVE_MARGIN])
            ws[R_ACTIVE, k] = F(1.0) if p[0] > 0.0 else F(0.0)
    c_coll = F(0.0)
    for k in range(K):
        p = ti.Vector([F(0.0), F(0.0), F(0.0), F(0.0)], dt=F)
        if ws[R_ACTIVE, k] > 0.0:
            p = _penetration(q, seg_a, seg, k, ws[R_S, 3 * k], ws[R_S, 3 * k + 1],
                             ws[R_S, 3 * k + 2], F(0.0))
        ws[R_PEN, k] = p[0]
        for j in ti.static(range(3)):
            ws[R_DD, 3 * k + j] = p[j + 1]
        dd = p[0]
        if k > 0:
            dd = dd - ws[R_PEN, k - 1]
        c_coll = c_coll + p[0] * p[0] + dd * dd
    cost = cost + par[P_W_COLL] * c_coll
    for k in range(K):
        D = ws[R_PEN, k]
        dd = D
        if k > 0:
            dd = dd - ws[R_PEN, k - 1]
        gD = 2.0 * D + 2.0 * dd
        if k + 1 < K:
            gD = gD - 2.0 * (ws[R_PEN, k + 1] - D)
        for j in range(3):
            ws[grow, 3 * k + j] = ws[grow, 3 * k + j] + par[P_W_COLL] * gD * ws[R_DD, 3 * k + j]
    # ---- through the Laplacian L_k = S_k - 2 S_{k-1} + S_{k-2}
    for k in range(K):
        for j in range(3):
            gl = ws[R_GL, 3 * k + j]
            if k + 1 < K:
                gl = gl - 2.0 * ws[R_GL, 3 * (k + 1) + j]
            if k + 2 < K:
                gl = gl + ws[R_GL, 3 * (k + 2) + j]
            ws[grow, 3 * k + j] = ws[grow, 3 * k + j] + gl
    # ---- to the actions: d S_k / d u_j = scale for j <= k, d u / d z = 1 - u^2
    if ti.static(from_actions):
        for j in range(3):
            acc = F(0.0)
            for kk in range(K):
                k = K - 1 - kk
                acc = acc + ws[grow, 3 * k + j]
                u = ws[R_U, 3 * k + j]
                ws[grow, 3 * k + j] = acc * par[P_SCALE + j] * (1.0 - u * u)
    return cost


@ti.kernel
def _cost_kernel(par: nd1, per_step: nd2, q: nd2, seg_a: nd3, seg: nd2, ws: nd2) -> F:
    """The cost at the poses ws[R_X] and its gradient into ws[R_G] (tests, the benchmark)."""
    cost = F(0.0)
    ti.loop_config(serialize=True)
    for _ in range(1):
        cost = _cost(par, per_step, q, seg_a, seg, ws, R_X, R_G, False, 1)
    return cost


@ti.func
def _hdot(hist: ti.template(), h, slot, ws: ti.template(), row, n):
    """s . ws[row] (h = 0) or y . ws[row] (h = 1) for the L-BFGS pair in ``slot``."""
    acc = F(0.0)
    for i in range(n):
        acc = acc + hist[h, slot, i] * ws[row, i]
    return acc


@ti.func
def _sy(hist: ti.template(), slot, n):
    """y . s of the L-BFGS pair in ``slot``."""
    acc = F(0.0)
    for i in range(n):
        acc = acc + hist[1, slot, i] * hist[0, slot, i]
    return acc


@ti.kernel
def _solve_kernel(par: nd1, per_step: nd2, q: nd2, seg_a: nd3, seg: nd2, ws: nd2, hist: nd3,
                  out: nd1, max_iterations: ti.i32):
    """:func:`taigym.agents.rh_cost.lbfgs` from the actions ws[R_X]; the solution back into ws[R_X],
    (iterations, last inverse-Hessian scale) into ``out``."""
    ti.loop_config(serialize=True)
    for _ in range(1):
        n = per_step.shape[0] * 3
        fx = _cost(par, per_step, q, seg_a, seg, ws, R_X, R_G, True, 1)
        scale = par[P_HESS_SCALE]
        count, head, it = 0, 0, 0
        for iteration in range(1, max_iterations + 1):
            it = iteration
            gmax = F(0.0)
            for i in range(n):
                gmax = ti.max(gmax, ti.abs(ws[R_G, i]))
            if gmax < F(LBFGS_GTOL):
                break
            # two-loop recursion: q = H g
            for i in range(n):
                ws[R_Q, i] = ws[R_G, i]
            for h in range(count):                       # newest first
                slot = (head + count - 1 - h) % LBFGS_MEMORY
                a = _hdot(hist, 0, slot, ws, R_Q, n) / _sy(hist, slot, n)
                ws[R_ALPHA, h] = a
                for i in range(n):
                    ws[R_Q, i] = ws[R_Q, i] - a * hist[1, slot, i]
            mult = F(0.0)
            if count > 0:
                last = (head + count - 1) % LBFGS_MEMORY
                yy = F(0.0)
                for i in range(n):
                    yy = yy + hist[1, last, i] * hist[1, last, i]
                scale = _sy(hist, last, n) / yy
                mult = scale
            elif scale > 0.0:
                mult = scale
            else:
                mult = 1.0 / ti.max(gmax, F(1e-12))       # first step: unit max-norm
            for i in range(n):
                ws[R_Q, i] = ws[R_Q, i] * mult
            for h in range(count):                       # oldest first
                slot = (head + h) % LBFGS_MEMORY
                bb = _hdot(hist, 1, slot, ws, R_Q, n) / _sy(hist, slot, n)
                a = ws[R_ALPHA, count - 1 - h]
                for i in range(n):
                    ws[R_Q, i] = ws[R_Q, i] + (a - bb) * hist[0, slot, i]
            slope = F(0.0)
            for i in range(n):
                ws[R_D, i] = -ws[R_Q, i]
                slope = slope + ws[R_G, i] * ws[R_D, i]
            if slope >= 0.0:                             # not a descent direction: reset
                slope = F(0.0)
                for i in range(n):
                    ws[R_D, i] = -ws[R_G, i]
                    slope = slope - ws[R_G, i] * ws[R_G, i]
                count, head = 0, 0
            # Armijo backtracking
            step, f_new, accepted = F(1.0), F(0.0), 0
            for _bt in range(20):
                for i in range(n):
                    ws[R_XN, i] = ws[R_X, i] + step * ws[R_D, i]
                f_new = _cost(par, per_step, q, seg_a, seg, ws, R_XN, R_GN, True, 0)
                if f_new <= fx + F(1e-4) * step * slope:
                    accepted = 1
                    break
                step = step * F(0.3)
            if accepted == 0:
                break
            sy = F(0.0)
            for i in range(n):
                sy = sy + (ws[R_XN, i] - ws[R_X, i]) * (ws[R_GN, i] - ws[R_G, i])
            if sy > F(1e-12):
                slot = 0
                if count < LBFGS_MEMORY:
                    slot = (head + count) % LBFGS_MEMORY
                    count += 1
                else:
                    slot = head
                    head = (head + 1) % LBFGS_MEMORY
                for i in range(n):
                    hist[0, slot, i] = ws[R_XN, i] - ws[R_X, i]
                    hist[1, slot, i] = ws[R_GN, i] - ws[R_G, i]
            converged = fx - f_new <= F(1e-9) * ti.max(ti.abs(fx), F(1.0))
            for i in range(n):
                ws[R_X, i] = ws[R_XN, i]
                ws[R_G, i] = ws[R_GN, i]
            fx = f_new
            if converged:
                break
        out[0] = F(it)
        out[1] = scale


def _pack(hc) -> tuple[np.ndarray, ...]:
    """The kernel's inputs from a :class:`~taigym.agents.rh_cost.HorizonCost`."""
    par = np.empty(N_PAR)
    par[[P_PX, P_PY, P_VX, P_VY, P_RHO, P_W, P_DT]] = hc.px, hc.py, hc.vx, hc.vy, hc.rho, hc.W, hc.dt
    par[[P_POUR0, P_POUR1]] = hc.pour_w[:, 0]
    par[[P_SIDE, P_MAX_TILT, P_FLOW_GAIN, P_W_DRIP, P_DRIP_MARGIN, P_LAG_B, P_W_COLL]] = (
        hc.side, hc.max_tilt, hc.flow_gain, hc.w_drip, hc.drip_margin, hc.lag_b, hc.w_coll)
    par[P_W_PRIOR:P_W_PRIOR + 3] = hc.w_prior
    par[P_W_SMOOTH:P_W_SMOOTH + 3] = hc.w_smooth
    par[P_SCALE:P_SCALE + 3] = 0.0
    par[P_S0:P_S0 + 3] = hc.S0
    par[P_SM1:P_SM1 + 3] = hc.Sm1
    par[P_V0:P_V0 + 2] = hc.v0
    par[[P_HESS_SCALE, P_GRAVITY, P_MIN_GRAVITY, P_ACTIVE_MARGIN]] = NO_SCALE, GRAVITY, MIN_GRAVITY, ACTIVE_MARGIN
    par[P_W_SPREAD] = hc.w_spread
    per_step = np.empty((len(hc.prior), 6))
    per_step[:, C_PRIOR:C_PRIOR + 3] = hc.prior
    per_step[:, C_RIM], per_step[:, C_TX], per_step[:, C_TVX] = hc.rims, hc.tx, hc.tvx
    M = hc.seg_ab.shape[0]
    seg = np.empty((M, 4))
    seg[:, [C_ABX, C_ABY]] = hc.seg_ab
    seg[:, C_INV_LEN2], seg[:, C_REACH] = hc.seg_inv_len2, hc.reach
    q = np.ascontiguousarray(hc.q, np.float64)
    seg_a = np.ascontiguousarray(hc.seg_a, np.float64)
    ws = np.zeros((N_ROWS, 3 * len(hc.prior)))
    return par, per_step, q, seg_a, seg, ws


def horizon_cost(hc, S: np.ndarray) -> tuple[float, np.ndarray]:
    """The kernel's cost and gradient (K, 3) at the poses S (K, 3): ``hc(S)`` compiled."""
    backend.init()
    par, per_step, q, seg_a, seg, ws = _pack(hc)
    ws[R_X] = np.asarray(S, np.float64).ravel()
    c = _cost_kernel(par, per_step, q, seg_a, seg, ws)
    return float(c), ws[R_G].reshape(-1, 3).copy()


_compiled = False       # this process has compiled _solve_kernel


def warm_up() -> None:
    """Compile the solve kernel now, once per process (a few seconds the first time, then cached
    on disk by Taichi), on a one-step dummy problem, so that no control step pays for it: the
    kernel's ndarray arguments make it one compilation for every horizon, S and scene."""
    global _compiled
    if _compiled:
        return
    backend.init()
    par = np.zeros(N_PAR)
    par[[P_W, P_DT, P_GRAVITY, P_MIN_GRAVITY]] = 1.0, CONTROL_DT, GRAVITY, MIN_GRAVITY
    seg = np.array([[1.0, 0.0, 1.0, 0.01]])
    _solve_kernel(par, np.zeros((1, 6)), np.zeros((1, 2)), np.zeros((1, 1, 2)), seg,
                  np.zeros((N_ROWS, 3)), np.zeros((2, LBFGS_MEMORY, 3)), np.zeros(2), 1)
    _compiled = True


def solve(hc, u0: np.ndarray, scale: np.ndarray, max_iterations: int,
          hessian_scale: float | None) -> tuple[np.ndarray, int, float | None]:
    """One control step's plan: :meth:`taigym.agents.rh.RHAgent.plan`'s L-BFGS over the
    actions (K, 3) from ``u0``, in one kernel launch. Returns (actions, iterations, the last
    inverse-Hessian scale or None)."""
    backend.init()
    par, per_step, q, seg_a, seg, ws = _pack(hc)
    par[P_SCALE:P_SCALE + 3] = scale
    par[P_HESS_SCALE] = NO_SCALE if hessian_scale is None else hessian_scale
    ws[R_X] = np.arctanh(u0).ravel()
    hist = np.zeros((2, LBFGS_MEMORY, ws.shape[1]))
    out = np.zeros(2)
    _solve_kernel(par, per_step, q, seg_a, seg, ws, hist, out, int(max_iterations))
    h = float(out[1])
    return np.tanh(ws[R_X].reshape(-1, 3)), int(out[0]), (h if h > 0.0 else None)
