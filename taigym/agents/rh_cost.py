"""The NumPy reference of ``rh``'s horizon objective and its solver (Pan & Manocha 2017, §V).

:class:`HorizonCost` is sum_k C(S_k) over the planning horizon and its analytic gradient, term by
term as :mod:`taigym.agents.rh`'s docstring describes them; :func:`lbfgs` minimises it.
:mod:`taigym.agents.rh_kernel` compiles the same arithmetic into one Taichi kernel and takes its
constants from here.
"""

from __future__ import annotations

import math

import numpy as np

from taigym.sim.constants import GRAVITY

MIN_GRAVITY = 0.25 * GRAVITY    # m/s^2: least effective gravity of the surge angle (S dropping)
ACTIVE_MARGIN = 0.02            # m: steps this close to contact are checked for collision
LBFGS_MEMORY = 5                # L-BFGS pairs kept
LBFGS_GTOL = 1e-6               # L-BFGS stops once every gradient component is below this


# ---------------------------------------------------------------------- the objective
class HorizonCost:
    """sum_k C(S_k) of one planning step and its gradient with respect to the K poses."""

    def __init__(self, *, pose0, pose_prev, params, prior_poses, rims, tx, tvx, half_width,
                 s_points, s_radius, segments, seg_radius, cfg: dict, dt: float,
                 side: float = 1.0, max_tilt: float = math.pi, liquid_velocity=None):
        self.S0 = np.asarray(pose0, np.float64)
        self.Sm1 = np.asarray(pose_prev, np.float64)
        self.px, self.py, self.vx, self.vy, rho = (float(v) for v in params)
        self.rho = max(rho, cfg["rho_floor"])
        self.prior = prior_poses                      # (K, 3)
        self.rims, self.tx, self.tvx = rims, tx, tvx  # (K,) each
        self.W = half_width
        self.q = s_points                             # (Q, 2) S frame
        self.seg_a, self.seg_ab = segments            # (K, M, 2) world starts, (M, 2) directions
        self.seg_inv_len2 = 1.0 / np.maximum(np.sum(self.seg_ab ** 2, 1), 1e-12)
        self.reach = s_radius + seg_radius + cfg["clearance"]   # (M,)
        self.dt = dt
        self.pour_w = (cfg["pour_weight"] / self.W ** 2) * np.array([[1.0], [cfg["dribble_weight"]]])
        self.side, self.max_tilt, self.flow_gain = float(side), float(max_tilt), cfg["flow_gain"]
        self.w_drip = cfg["pour_weight"] * cfg["drip_weight"] / self.W ** 2
        self.drip_margin = float(cfg["drip_margin"])
        # the jet's spread: rho (jet_spread tau_k / W)^2, rho the network's flux now (module docstring)
        self.w_spread = cfg["pour_weight"] * cfg["jet_spread"] ** 2 / self.W ** 2
        # the liquid's velocity follows S's with the lag slosh_time: v_k = (1 - b) v_{k-1} + b u_k
        # (backward Euler, b = dt / (slosh_time + dt)), u_k S's velocity over step k, v_0 given
        b = self.lag_b = dt / (cfg["slosh_time"] + dt)
        k = np.arange(len(prior_poses))
        decay = (1.0 - b) ** np.maximum(k[:, None] - k[None, :], 0)
        self.lag_inv = np.tril(b * decay) / dt                         # (K, K): steps -> m/s
        self.lag_inv_t = self.lag_inv.T.copy()
        v0 = self.v0 = np.zeros(2) if liquid_velocity is None else np.asarray(liquid_velocity, np.float64)
        self.lag0 = ((1.0 - b) ** (k + 1))[:, None] * v0[None, :]      # (K, 2)
        self.w_prior = cfg["prior_weight"] / np.asarray(cfg["prior_scale"], np.float64) ** 2
        self.w_smooth = cfg["smooth_weight"] / np.asarray(cfg["smooth_scale"], np.float64) ** 2
        self.w_coll = cfg["collision_weight"] / max(cfg["clearance"], 1e-3) ** 2
        self._active = None                           # steps checked for collision

    def __call__(self, S: np.ndarray) -> tuple[float, np.ndarray]:
        """Cost and gradient (K, 3) for the poses S (K, 3) at steps 1..K."""
        # prior
        d = S - self.prior
        wd = self.w_prior * d
        # smoothness: Laplacians at k = 0..K-1 over [S_-1, S_0, S_1..S_K]
        full = np.empty((len(S) + 2, 3))
        full[0], full[1], full[2:] = self.Sm1, self.S0, S
        lap = full[2:] - 2.0 * full[1:-1] + full[:-2]          # (K, 3): row j centred at S_j
        wl = self.w_smooth * lap
        cost = float(np.vdot(wd, d) + np.vdot(wl, lap))
        grad = 2.0 * wd + _through_laplacian(2.0 * wl)
        c, gc = self._pour(S, lap)
        cost += c
        grad += gc
        c, gc = self._collision(S)
        return cost + c, grad + gc

    def _pour(self, S: np.ndarray, lap: np.ndarray):
        """sum_k rho_k (dist_k / W)^2 for the jet (weight ``pour_weight``; it leaves p with its
        own velocity v plus the liquid's; plus rho (jet_spread tau_k / W)^2) and the dribble
        (``pour_weight`` x ``dribble_weight``; the liquid's velocity only), and its gradient. The
        liquid moves with S's rotation about its origin and with S's translational velocity
        lagged by ``slosh_time`` (the liquid keeps its momentum for a while when S brakes);
        rho_k is :meth:`_flux`'s. Both parabolas are rows of (2, K) arrays."""
        g, inv = GRAVITY, 1.0 / self.dt
        x, th = S[:, 0], S[:, 2]
        c, s = np.cos(th), np.sin(th)
        ax, ay = c * self.px - s * self.py, s * self.px + c * self.py
        wx, wy = x + ax, S[:, 1] + ay
        jx, jy = c * self.vx - s * self.vy, s * self.vx + c * self.vy
        step = np.empty_like(S)                                            # S_k - S_{k-1}
        step[0] = S[0] - self.S0
        np.subtract(S[1:], S[:-1], out=step[1:])
        om = step[:, 2] * inv
        vl = self.lag_inv @ step[:, :2] + self.lag0                         # (K, 2) m/s
        Vx = np.empty((2, len(S)))
        Vy = np.empty((2, len(S)))
        Vx[1] = vl[:, 0] - om * ay
        Vy[1] = vl[:, 1] + om * ax
        Vx[0] = Vx[1] + jx
        Vy[0] = Vy[1] + jy
        disc = Vy * Vy + 2.0 * g * (wy - self.rims)
        ok = disc > 1e-6
        sD = np.sqrt(np.maximum(disc, 1e-6))
        tau = (Vy + sD) / g
        rel = Vx - self.tvx
        e = wx + rel * tau - self.tx
        # derivatives of e with respect to (x, y, theta) of pose k, to theta of pose k - 1 and
        # to the liquid's velocity (vl_x, vl_y) at k, from d wx = (1, 0, -ay), d wy = (0, 1, ax),
        # d Vx = (0, 0, -jy - ay/dt - om ax) + d vl_x, d Vy = (0, 0, jx + ax/dt - om ay) + d vl_y
        # (jx, jy: the jet's row only); for pose k - 1: d Vx / d theta = ay/dt,
        # d Vy / d theta = -ax/dt; d tau = (d Vy + (Vy d Vy + g d wy) / sqrt(disc)) / g
        ks = ok / sD
        cy = (1.0 + ks * Vy) / g                  # d tau / d Vy
        dVx_th = -ay * inv - om * ax
        dVy_th = ax * inv - om * ay
        lean = self._effective_lean(S, lap) if self.flow_gain > 0.0 else None
        rho, d_th, d_lap = self._flux(S, lap) if lean is None else self._weir(lean, 0.0)   # (K,), (K,), (K, 2)
        pe = self.pour_w * e                                    # (2, K)
        we = 2.0 * rho * pe                                      # d cost / d wx
        wVx = we * tau                                           # d cost / d Vx
        wtau = we * rel                                          # d cost / d tau
        wtau[0] += 2.0 * self.rho * self.w_spread * tau[0]       # the jet's spread
        wVy, wwy = wtau * cy, wtau * ks                          # d cost / d Vy, d wy
        grad = np.empty_like(S)
        # sums over the two rows written out: NumPy's reductions cost more on (2, 25) arrays
        wsum = we[0] + we[1]
        grad[:, 0] = wsum
        grad[:, 1] = wwy[0] + wwy[1]
        wt = wVx * dVx_th + wVy * dVy_th + wwy * ax
        grad[:, 2] = wt[0] + wt[1] - ay * wsum + (wVy[0] * jx - wVx[0] * jy)
        wp = wVx * ay - wVy * ax
        grad[:-1, 2] += (wp[0, 1:] + wp[1, 1:]) * inv
        wv = np.empty((len(S), 2))
        wv[:, 0] = wVx[0] + wVx[1]
        wv[:, 1] = wVy[0] + wVy[1]
        gv = self.lag_inv_t @ wv                                 # d / d (S_k - S_{k-1})
        gv[:-1] -= gv[1:]
        grad[:, :2] += gv
        pe *= e
        m = pe[0] + pe[1]                                        # d cost / d rho_k
        cost = float(rho @ m) + self.rho * self.w_spread * float(tau[0] @ tau[0])
        if d_th is None:
            return cost, grad
        grad[:, 2] += m * d_th
        g_lap = m[:, None] * d_lap
        if self.w_drip > 0.0:
            # the drip: the flux past (max tilt - drip_margin) leaving the lip at rest (it runs
            # down S's outer wall), costing only where it falls outside T's opening
            h = np.maximum(wy - self.rims, 0.0)
            t_fall = np.sqrt(2.0 * h / g)                            # s, to T's rim height
            e0 = wx - self.tx - self.tvx * t_fall
            out = np.maximum(np.abs(e0) - self.W, 0.0)               # m outside the opening
            if out.any():
                xr, x_th, x_lap = self._weir(lean, self.drip_margin)
                xr -= self.rho
                md = self.w_drip * out * out                         # d cost / d flux
                cost += float(xr @ md)
                ge = (2.0 * self.w_drip) * xr * out * np.sign(e0)    # d cost / d e0
                gy = -ge * self.tvx * np.where(h > 0.0, 1.0 / (g * np.maximum(t_fall, 1e-9)), 0.0)
                grad[:, 0] += ge
                grad[:, 1] += gy
                grad[:, 2] += ax * gy - ay * ge + md * x_th
                g_lap += md[:, None] * x_lap
        grad[:, :2] += _through_laplacian(g_lap)
        return cost, grad

    def _flux(self, S: np.ndarray, lap: np.ndarray):
        """The flux rho_k (K,) weighting step k's pour term, and its derivatives with respect
        to theta_k (K,) and to the Laplacian's (x, y) rows (K, 2) (None, None if it is constant):

            rho_k = max(rho, rho_floor) + flow_gain relu(phi_k - phi_max)^(3/2).

        The network's rho is that of the current state, but the plan changes the state: liquid
        leaves S once its free surface reaches the pouring lip, i.e. once S's effective lean
        phi_k = lean_k + atan2(-side a_x, g + a_y) (the lean towards T plus the tilt of the
        free surface in S's accelerated frame: braking while moving towards T tips the liquid
        towards the lip) exceeds the quasi-static max tilt phi_max at S's current volume
        (``taigym.models.outflow_tables``); past it the flux grows as the head over the lip to
        the power 3/2 (a weir), the head being about proportional to the excess angle. a is S's
        acceleration (S_k - 2 S_{k-1} + S_{k-2}) / dt^2 (m/s^2), the Laplacian's row k."""
        if self.flow_gain <= 0.0:
            return np.full(len(S), self.rho), None, None
        return self._weir(self._effective_lean(S, lap), 0.0)

    def _effective_lean(self, S: np.ndarray, lap: np.ndarray):
        """phi_k (K,) of :meth:`_flux` and its derivative with respect to the Laplacian's (x, y)
        rows (K, 2) (d phi / d theta_k = -side)."""
        inv2 = 1.0 / (self.dt * self.dt)
        u = -self.side * inv2 * lap[:, 0]       # m/s^2: S's inertial acceleration towards the lip
        v_raw = GRAVITY + inv2 * lap[:, 1]
        v = np.maximum(v_raw, MIN_GRAVITY)                        # free fall: the surface is lost
        phi = -self.side * S[:, 2] + np.arctan2(u, v)
        w = inv2 / (u * u + v * v)
        d_lap = np.empty((len(S), 2))
        d_lap[:, 0] = -self.side * v * w
        d_lap[:, 1] = -u * w * (v_raw > MIN_GRAVITY)
        return phi, d_lap

    def _weir(self, lean, margin: float):
        """rho_k and its derivatives (theta_k, Laplacian rows) from :meth:`_effective_lean`'s,
        the weir counted from ``margin`` rad below the max tilt (the drip term's)."""
        phi, dphi_lap = lean
        ex = np.maximum(phi - (self.max_tilt - margin), 0.0)
        sq = np.sqrt(ex)
        drho = (1.5 * self.flow_gain) * sq                       # d rho / d phi
        return self.rho + self.flow_gain * ex * sq, -self.side * drho, drho[:, None] * dphi_lap

    def _collision(self, S: np.ndarray):
        """D_k^2 + (D_k - D_{k-1})^2, scaled. The steps checked are those within 2 cm of contact
        at the first call (the optimiser moves the poses by less within one control step)."""
        if self.seg_a.shape[1] == 0:
            return 0.0, np.zeros_like(S)
        if self._active is None:
            D, _ = self._penetration(S, self.seg_a, margin=ACTIVE_MARGIN)
            self._active = np.flatnonzero(D > 0.0)
        act = self._active
        if len(act) == 0:
            return 0.0, np.zeros_like(S)
        D = np.zeros(len(S))
        dD = np.zeros_like(S)
        D[act], dD[act] = self._penetration(S[act], self.seg_a[act])
        Dp = np.concatenate([[0.0], D[:-1]])
        dd = D - Dp
        cost = float(self.w_coll * (D @ D + dd @ dd))
        gD = 2.0 * D + 2.0 * dd
        gD[:-1] -= 2.0 * dd[1:]
        return cost, self.w_coll * gD[:, None] * dD

    def _penetration(self, S, seg_a, margin: float = 0.0):
        """Max penetration D (n,) of S's wall circles at poses S (n, 3) into the segments starting
        at ``seg_a`` (n, M, 2) (plus ``margin``), and its gradient (n, 3). Component-wise on
        (n, Q, M) arrays: the segments only translate with T, so their directions are fixed."""
        x, y, th = S[:, 0], S[:, 1], S[:, 2]
        c, s = np.cos(th)[:, None], np.sin(th)[:, None]
        qx, qy = self.q[:, 0], self.q[:, 1]
        rx, ry = c * qx - s * qy, s * qx + c * qy              # (n, Q) offsets from S's origin
        dx0 = (x[:, None] + rx)[:, :, None] - seg_a[:, None, :, 0]   # (n, Q, M)
        dy0 = (y[:, None] + ry)[:, :, None] - seg_a[:, None, :, 1]
        abx, aby = self.seg_ab[:, 0], self.seg_ab[:, 1]
        t = np.clip((dx0 * abx + dy0 * aby) * self.seg_inv_len2, 0.0, 1.0)
        dx, dy = dx0 - t * abx, dy0 - t * aby
        dist = np.sqrt(dx * dx + dy * dy) + 1e-12
        pen = (self.reach + margin) - dist                      # (n, Q, M)
        n_ = len(S)
        rows = np.arange(n_)
        j = np.argmax(pen.reshape(n_, -1), 1)
        qi, mi = np.unravel_index(j, pen.shape[1:])
        D = np.maximum(pen[rows, qi, mi], 0.0)
        d = dist[rows, qi, mi]
        nx, ny = dx[rows, qi, mi] / d, dy[rows, qi, mi] / d
        # dD/dpose = -(n_x, n_y, n . d p / d theta), d p / d theta = (-ry, rx)
        dD = -np.stack([nx, ny, -nx * ry[rows, qi] + ny * rx[rows, qi]], 1)
        return D, dD * (D > 0.0)[:, None]


def _through_laplacian(g_lap: np.ndarray) -> np.ndarray:
    """The gradient with respect to S_1..S_K of a function of the Laplacian rows
    L_k = S_k - 2 S_{k-1} + S_{k-2} (k = 1..K; S_0, S_-1 fixed), given its gradient ``g_lap``
    (K, n) with respect to them."""
    g = g_lap.copy()
    g[:-1] -= 2.0 * g_lap[1:]
    g[:-2] += g_lap[2:]
    return g


# ---------------------------------------------------------------------- the optimiser
def lbfgs(f, x0: np.ndarray, max_iterations: int, memory: int = LBFGS_MEMORY, gtol: float = LBFGS_GTOL,
          scale0: float | None = None):
    """Minimise ``f(x) -> (value, gradient)`` by L-BFGS (two-loop recursion, Armijo
    backtracking). Returns (x, iterations, scale), ``scale`` being the last inverse-Hessian
    scale s.y / y.y: passed back as ``scale0`` when the next problem is alike (the next control
    step's), the first step is sized like the last ones instead of backtracking from a unit
    max-norm step (that cost 4.7 of the 19 evaluations per control step). In NumPy: SciPy's
    L-BFGS-B calls a threaded BLAS whose threads spin for milliseconds per call on a busy
    machine; this costs microseconds. The velocity bounds are a change of variables (actions =
    tanh(x)), so no box is needed."""
    x = np.asarray(x0, np.float64).copy()
    fx, g = f(x)
    s_hist: list = []
    y_hist: list = []
    scale = scale0
    it = 0
    for it in range(1, max_iterations + 1):
        if float(np.max(np.abs(g))) < gtol:
            break
        q = g.copy()
        alphas = []
        for s_, y_ in zip(reversed(s_hist), reversed(y_hist)):
            a = float(s_ @ q) / float(y_ @ s_)
            alphas.append(a)
            q -= a * y_
        if y_hist:
            scale = float(s_hist[-1] @ y_hist[-1]) / float(y_hist[-1] @ y_hist[-1])
            q *= scale
        elif scale is not None:
            q *= scale
        else:
            q *= 1.0 / max(float(np.max(np.abs(g))), 1e-12)    # first step: unit max-norm
        for (s_, y_), a in zip(zip(s_hist, y_hist), reversed(alphas)):
            b = float(y_ @ q) / float(y_ @ s_)
            q += (a - b) * s_
        d = -q
        slope = float(g @ d)
        if slope >= 0.0:                                        # not a descent direction: reset
            d, slope, s_hist, y_hist = -g, -float(g @ g), [], []
        step = 1.0
        for _ in range(20):
            x_new = x + step * d
            f_new, g_new = f(x_new)
            if f_new <= fx + 1e-4 * step * slope:
                break
            step *= 0.3
        else:
            break
        s_, y_ = x_new - x, g_new - g
        if float(s_ @ y_) > 1e-12:
            s_hist.append(s_)
            y_hist.append(y_)
            if len(s_hist) > memory:
                s_hist.pop(0)
                y_hist.pop(0)
        converged = fx - f_new <= 1e-9 * max(abs(fx), 1.0)
        x, fx, g = x_new, f_new, g_new
        if converged:
            break
    return x, it, scale


__all__ = ["ACTIVE_MARGIN", "GRAVITY", "HorizonCost", "LBFGS_GTOL", "LBFGS_MEMORY", "MIN_GRAVITY", "lbfgs"]
