r"""``rh``: seed 001's receding-horizon feedback planner, guided by the liquid-parameter network.

Every control step (Pan & Manocha 2017, §V, Eq. 1) the agent solves

    argmin_{S(t + dt), ..., S(t + K dt)}  sum_{k=1..K} C(S(t + k dt)),   C = C_l + C_r + C_o

over K = 25 steps of dt = 0.05 s (1.25 s) and applies only the first step. The network
(:class:`taigym.models.liquid_net.LiquidNet`, trained on the CMA-ES dataset and on rh's own
rollouts) predicts, from the current observation only (no liquid simulation in the loop), the
outflow parabola's start p and jet velocity v in S's frame, the flux rho and the
mean-trajectory prior's ratios (alpha, beta, gamma) over the horizon. The terms (k = 1..K,
poses S_k = (x, y, theta)):

* C_l, pour (weight ``pour_weight``): rho_k (dist_k / W)^2, dist_k the distance from T's
  opening centre (where T is then, moving at its velocity) at which the parabola comes down
  through T's rim height; the parabola starts at p moved with S_k and leaves with R(theta_k) v
  plus the liquid's velocity: S's rotation about its origin plus S's translational velocity
  (S_{k-1} -> S_k) lagged by ``slosh_time`` (below); W is T's half opening.
* C_l, jet spread (``pour_weight``): rho (``jet_spread`` tau_k / W)^2, tau_k the jet's flight
  time to T's rim height: with it the jet's terms are its expected squared miss when its
  horizontal velocity is known to ``jet_spread`` (0.3 m/s, 1 sigma), so the planner prefers
  short falls, where an error in the network's jet or in the liquid's lag misses T by less.
  Weighted by the network's flux now (rho), not by the planned rho_k: with rho_k a pour aimed
  into T cost its spread too and rh hesitated (FLIP eval tasks: 2 of 60 never poured within the
  episode, one spilled 89 %). FLIP test runs under 5 % spill, jitters 0-11: 710 of 720 against
  687 without; validation 348 against 335 of 360; README.
* C_l, dribble (``pour_weight`` x ``dribble_weight``): the same for the outflow's slow end, which
  leaves p with the liquid's velocity only (seed 000's fan, as in ``taigym.planners.sqp``).
* C_l, drip (``pour_weight`` x ``drip_weight``): rho'_k (relu(|e_k| - W) / W)^2, the liquid
  pushed over the lip leaving it at rest (running down S's outer wall, as logged in the particle
  env when S leans while still far from T), e_k the distance from T's opening centre at which it
  falls through T's rim height, rho'_k the flux model's excess (below) counted from
  ``drip_margin`` below the max tilt: nothing while the lip is above T's opening.
* C_l, prior (``prior_weight``, ``prior_scale`` sigma): |(S_k - S'_k) / sigma|^2, S'_k having S's
  gaps to T's opening (x, y) and to the final lean shrunk by (alpha, beta, gamma)^(k/K) (the
  monotone coordinates of ``taigym.planners.cmaes``).
* C_r (``smooth_weight``, ``smooth_scale`` sigma_r): the Laplacian
  |(S_{k+1} - 2 S_k + S_{k-1}) / sigma_r|^2 (S_{-1}, S_0: the last and current poses).
* C_o (``collision_weight``, ``clearance`` sigma_o): (D_k^2 + (D_k - D_{k-1})^2) / sigma_o^2, D the
  maximal penetration of S's walls (circles) into T's walls and the obstacles (segments).

The paper weights the pour term by max(rho, 0), rho the network's flux at the current state,
so that it acts only while liquid flows. The plan changes the state, so here the flux of step k
is predicted from the planned poses (:meth:`HorizonCost._flux`):

    rho_k = max(rho, rho_floor) + flow_gain relu(phi_k - phi_max)^(3/2),
    phi_k = lean_k + atan2(-side a_x, g + a_y)

phi_k being S's effective lean: its lean towards T plus the tilt of the free surface in S's
accelerated frame (a: S's acceleration at step k; braking while moving towards T tips the
liquid towards the pouring lip), phi_max S's quasi-static max tilt at the liquid it holds now
(seed 000's tables, ``taigym.models.outflow_tables``), the power 3/2 a weir's. So the planner
does not lean or brake S past the max tilt unless the outflow then lands in T. ``rho_floor``
(default 0.1 s^-1) still aims the parabola a little before the flow starts. When S brakes, its
liquid keeps its momentum for a while: the liquid's translational velocity follows S's through
a first-order lag of ``slosh_time`` (0.1 s, about a quarter period of the first slosh mode of a
7 cm wide S half full, omega^2 = (pi g / L) tanh(pi h / L), omega ~ 20 s^-1; 0.2 s did no better
on validation problems), tracked over the episode by the agent. Without the two (``flow_gain=0, slosh_time=0``) the worst test problems, a T that
turns back at the end of its track while S pours, spilled 24-45 % (S leaned past the max tilt
while still far from T, then braked hard with T and surged the liquid over T's far rim); with
them 4-18 % (``scripts/rh_eval.py``, README). The dribble term's weight 1 was chosen on 30
validation problems in the particle env (27 of them under 5 % spill; 24 at weight 0.5, 25 at 2).
The drip term (weight 1, margin 0.2 rad; chosen on the validation problems, three particle
jitters, 180 runs: 167 under 5 % spill, mean spilled 1.2 %, worst 10 %; without it 166, 1.4 %,
12 %; at margin 0 165, 1.4 %, 17 %; at weight 0.3 and margin 0 168, 1.5 %, 16 %) keeps S from
leaning its liquid over the lip while the lip is not yet above T; the network's jet at such
states leaves upwards in S's frame where the particle env's runs down the wall.
The paper names the pour and prior terms C_o and the collision term C_o too (a typo); here C_l
is the liquid term. The decision variables are the K actions in [-1, 1]^3 (S_k = S_0 + the
scaled sum of the first k), bounded through a change of variables (actions = tanh(z)), solved by
L-BFGS (:func:`lbfgs`) with the analytic gradient, warm-started from the last step's solution
shifted by one and from its last inverse-Hessian scale. S translates at most ``max_speed`` m/s
along each axis, or as fast as T where T is faster (:meth:`RHAgent.speed_cap`; default 0.25, half
the env's limit): at full speed S reached T with its liquid sloshing and, where T turned back at
its track's end, reversed at up to 18 m/s^2 to follow it; the surge flew over T's far rim
(README: FLIP test runs under 5 % spill 347 of 360 with the cap, 335 without; validation 171
against 164 of 180).
The network's forward pass is NumPy. The solve runs as one Taichi kernel per control step
(``solver="taichi"``, :mod:`taigym.agents.rh_kernel`: the same arithmetic compiled, 1.2-1.6 ms
a step on a 2-core machine where this NumPy reference, ``solver="numpy"``, takes 7-11 ms;
``scripts/rh_speed.py``).

Train: ``python -m taigym.apps.train agent=rh env=pour_simplified`` generates the CMA-ES
dataset (``taigym.data.cmaes_dataset``, resumable) in the run directory (or uses
``agent.dataset``), keeps the successful pours (R/N >= ``min_reward``), adds every state of
``rh``'s own rollouts in ``agent.onpolicy`` (``scripts/cmaes_dataset.py --onpolicy``: the
states the planner reaches, surges included, which the teacher's pours never visit), fits the
network and saves ``agent.pt``; ``make("rh", env, checkpoint=path)`` or
``RHAgent.load(path, env)`` loads it.
"""

from __future__ import annotations

import math
import time
from pathlib import Path

import numpy as np

from taigym.models.liquid_net import FitConfig, LiquidNet, fit
from taigym.models.outflow_tables import outflow_tables
from taigym.planners.cmaes import Reference, target_path

from .base import Agent, check_ranges
from .cmaes import env_constants
from .policy import torch_load, torch_save_atomic

GRAVITY = 9.81
MIN_GRAVITY = 0.25 * GRAVITY    # m/s^2: least effective gravity of the surge angle (S dropping)
ACTIVE_MARGIN = 0.02            # m: steps this close to contact are checked for collision
LBFGS_MEMORY = 5                # L-BFGS pairs kept
LBFGS_GTOL = 1e-6               # L-BFGS stops once every gradient component is below this
FINAL_CHECKPOINT = "agent.pt"
PLANNER_DEFAULTS = dict(horizon_steps=25, pour_weight=10.0, prior_weight=1.0,
                        prior_scale=(0.02, 0.02, 0.2), smooth_weight=0.05,
                        smooth_scale=(0.004, 0.004, 0.02), collision_weight=1.0, clearance=0.003,
                        max_iterations=12, lean=2.3, rho_floor=0.1,
                        dribble_weight=1.0, flow_gain=2.0, slosh_time=0.1,
                        drip_weight=1.0, drip_margin=0.2, max_speed=0.25, jet_spread=0.3, solver="taichi")
SOLVERS = ("taichi", "numpy")   # the solve as one Taichi kernel (rh_kernel), or the NumPy reference
#: accepted range (closed) of each numeric planner option, with its unit; horizon_steps and
#: max_iterations are integers, prior_scale and smooth_scale three positive scales (m, m, rad)
PLANNER_RANGES = dict(horizon_steps=(1, 200, "steps"), pour_weight=(0.0, math.inf, ""),
                      prior_weight=(0.0, math.inf, ""), smooth_weight=(0.0, math.inf, ""),
                      collision_weight=(0.0, math.inf, ""), clearance=(0.0, 0.1, "m"),
                      max_iterations=(1, 1000, "iterations"), lean=(0.1, math.pi, "rad"),
                      rho_floor=(1e-6, math.inf, ""), dribble_weight=(0.0, math.inf, ""),
                      flow_gain=(0.0, math.inf, ""), slosh_time=(0.0, 10.0, "s"),
                      drip_weight=(0.0, math.inf, "(0: off)"), drip_margin=(0.0, math.pi / 2, "rad"),
                      max_speed=(0.01, 10.0, "m/s"), jet_spread=(0.0, 10.0, "m/s"))
TRAIN_DEFAULTS = dict(dataset=None, problems=40, obs_mode="features", popsize=8, iterations=15,
                      labels="particles", min_reward=0.0, onpolicy=None, epochs=300, lr=3e-3,
                      batch_size=256, val_fraction=0.15, seed=0, progress=True)


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
        self._pour_w = (cfg["pour_weight"] / self.W ** 2) * np.array([[1.0], [cfg["dribble_weight"]]])
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
        pe = self._pour_w * e                                    # (2, K)
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


# ---------------------------------------------------------------------- geometry helpers
def _resample(poly: np.ndarray, max_segments: int) -> np.ndarray:
    """At most ``max_segments`` segments along a polyline (every n-th vertex, ends kept)."""
    if len(poly) - 1 <= max_segments:
        return poly
    idx = np.unique(np.linspace(0, len(poly) - 1, max_segments + 1).round().astype(int))
    return poly[idx]


def _source_points(shape, per_edge: int = 2) -> np.ndarray:
    """S's wall centreline vertices plus ``per_edge - 1`` points on each edge (S frame, m)."""
    w = np.asarray(shape.walls, np.float64)
    w = _resample(w, 8)
    pts = [w[:1]]
    for a, b in zip(w[:-1], w[1:]):
        pts.append(a + (np.arange(1, per_edge + 1)[:, None] / per_edge) * (b - a))
    return np.concatenate(pts)


# ---------------------------------------------------------------------- the agent
#: the network ``make("rh", env)`` loads without a checkpoint: the CMA-ES dataset plus three
#: rounds of rh's own rollouts on its 160 problems (data aggregation for the model; rectangular S):
#: ``D=scripts/cmaes_dataset.py --problems 160`` (CMA-ES pours, particle labels), then for
#: n = 1, 2, 3: ``scripts/cmaes_dataset.py --onpolicy <net n-1> --out R<n> --problems 160`` and
#: ``python -m taigym.apps.train agent=rh env=pour_simplified agent.dataset=D agent.problems=160
#: 'agent.onpolicy=[R1, .., R<n>]'`` -> net n; net 0 is the network shipped before (git 49aae5e,
#: CMA-ES pours only). Validation problems, three particle jitters, both shapes: 166 of 180 runs
#: under 5 % spill (net 0: 149; nets 1, 2: 156, 164); test: 170 of 180 (net 0: 144).
SHIPPED_CHECKPOINT = Path(__file__).resolve().parent.parent / "models" / "data" / "rh_liquid_net.pt"


def _check_ranges(cfg: dict) -> None:
    """ValueError naming the first planner option outside its PLANNER_RANGES range."""
    check_ranges(cfg, PLANNER_RANGES)
    if cfg["solver"] not in SOLVERS:
        raise ValueError(f"solver must be one of {SOLVERS}, got {cfg['solver']!r}")
    for k in ("prior_scale", "smooth_scale"):
        if len(cfg[k]) != 3 or min(cfg[k]) <= 0.0:
            raise ValueError(f"{k} must be three positive scales (m, m, rad), got {cfg[k]!r}")


class RHAgent(Agent):
    """Receding-horizon planner over the network's predictions (module docstring)."""

    name = "rh"

    def __init__(self, env, checkpoint: str | Path | None = None, net: LiquidNet | None = None,
                 meta: dict | None = None, **cfg):
        # the training options (conf/agent/rh.yaml holds both) do not change how it plans
        cfg = {k: v for k, v in cfg.items() if k not in TRAIN_DEFAULTS}
        unknown = set(cfg) - set(PLANNER_DEFAULTS)
        if unknown:
            raise ValueError(f"unknown rh option(s): {', '.join(sorted(unknown))}; accepted: "
                             f"checkpoint, {', '.join(sorted(PLANNER_DEFAULTS))}")
        if checkpoint is None and net is None:
            checkpoint = SHIPPED_CHECKPOINT
        if checkpoint is not None:
            net, saved_meta, saved_cfg = _read(checkpoint)
            meta = {**saved_meta, **(meta or {})}
            cfg = {**saved_cfg, **cfg}
        super().__init__(env, **{**PLANNER_DEFAULTS, **cfg})
        for k in ("prior_scale", "smooth_scale"):
            self.cfg[k] = tuple(float(v) for v in self.cfg[k])
        _check_ranges(self.cfg)
        self.net, self.meta = net, dict(meta or {})
        obs_dim = int(np.prod(env.observation_space.shape or (0,)))
        if obs_dim != net.in_dim:
            raise ValueError(f"the network takes {net.in_dim} inputs but the env's observations have "
                             f"{obs_dim} (obs_mode {self.meta.get('obs_mode', '?')!r}: build the env with it)")
        self.predict = net.numpy_predictor()
        self.dt, _, self.scale = env_constants(env)
        self._task = None
        self.solve_seconds: list[float] = []        # wall time of each step's plan (s)
        self.solve_cpu_seconds: list[float] = []    # CPU time of this process (s): without the
        # time other processes hold the core, the latency an unloaded core would see

    # ------------------------------------------------------------------ episode state
    def reset(self, *, seed: int | None = None) -> None:
        super().reset(seed=seed)
        self._task, self._u, self._v_liquid, self._hessian_scale = None, None, None, None
        self.solve_seconds, self.solve_cpu_seconds = [], []
        if self.cfg["solver"] == "taichi":
            from .rh_kernel import warm_up

            warm_up()                   # the kernel's compilation is not a decision's latency

    def _prepare(self, task) -> None:
        dt, wall, scale = env_constants(self.env)
        self.dt, self.scale = dt, scale
        self.ref = Reference(task, wall, self.cfg["lean"])
        source, target = task.source_shape(wall), task.target_shape(wall)
        self.s_points = _source_points(source)
        self.outflow_tables = outflow_tables(source)
        self.liquid_area = source.liquid_area(task.fill)          # m^2 (2D) at the start
        self.s_radius = source.radius
        tw = _resample(np.asarray(target.walls, np.float64), 8)
        self.t_a, self.t_b = tw[:-1], tw[1:]
        boxes_a, boxes_b = [], []
        for ox, oy, w, h in task.obstacles:
            cs = np.array([[ox - w / 2, oy - h / 2], [ox + w / 2, oy - h / 2], [ox + w / 2, oy + h / 2],
                           [ox - w / 2, oy + h / 2]])
            boxes_a.append(cs)
            boxes_b.append(np.roll(cs, -1, axis=0))
        self.o_a = np.concatenate(boxes_a) if boxes_a else np.zeros((0, 2))
        self.o_b = np.concatenate(boxes_b) if boxes_b else np.zeros((0, 2))
        self.seg_ab = np.concatenate([self.t_b - self.t_a, self.o_b - self.o_a])
        self.seg_radius = np.concatenate([np.full(len(self.t_a), target.radius), np.zeros(len(self.o_a))])
        self.half_width = 0.5 * target.width
        self.t_oc = np.asarray(target.opening_centre, np.float64)
        self._task, self._u = task, None

    def cost(self, obs, info: dict) -> HorizonCost:
        """The horizon objective at the state (obs, info)."""
        task = self.env.unwrapped.task
        if task is not self._task:
            self._prepare(task)
        K, dt = int(self.cfg["horizon_steps"]), self.dt
        outflow, ratios = self.predict(np.asarray(obs, np.float64).ravel())
        pose = np.asarray(info["source_pose"], np.float64)
        vel = np.asarray(info.get("source_velocity", np.zeros(3)), np.float64)
        t = float(info.get("time", 0.0))
        times = t + dt * np.arange(1, K + 1)
        tpos, tvel = target_path(task, times)
        tvx = tvel[:, 0]
        ref = self.ref
        gaps0, signs = ref.gaps(pose, t), ref.signs(pose, t)
        frac = (np.arange(1, K + 1) / K)[:, None]
        prior = ref.pose(gaps0 * np.clip(ratios, 1e-3, 1.0) ** frac, signs, times)
        seg_a = np.concatenate([tpos[:, None] + self.t_a, np.broadcast_to(self.o_a, (K,) + self.o_a.shape)], 1)
        return HorizonCost(pose0=pose, pose_prev=pose - vel * dt, params=outflow, prior_poses=prior,
                           rims=tpos[:, 1] + self.t_oc[1], tx=tpos[:, 0] + self.t_oc[0], tvx=tvx,
                           half_width=self.half_width, s_points=self.s_points, s_radius=self.s_radius,
                           segments=(seg_a, self.seg_ab), seg_radius=self.seg_radius, cfg=self.cfg, dt=dt,
                           side=ref.side, max_tilt=self.max_tilt(info),
                           liquid_velocity=vel[:2] if self._v_liquid is None else self._v_liquid)

    def max_tilt(self, info: dict) -> float:
        """S's quasi-static max tilt (rad) at the liquid it holds now (``info["in_source"]``)."""
        return self.outflow_tables.max_lean(float(info.get("in_source", 1.0)) * self.liquid_area)

    def speed_cap(self) -> np.ndarray:
        """The fraction (x, y, theta) of the env's action range the planner uses: S translates at
        most ``max_speed`` m/s along each axis, or as fast as T moves along it if T is faster (S
        must keep up with T while it pours); the env allows ``action_scale / dt``."""
        v_env = self.scale[:2] / self.dt
        v_t = np.abs(np.asarray(self._task.target_velocity, np.float64))
        return np.array([*np.minimum(1.0, np.maximum(self.cfg["max_speed"], v_t) / v_env), 1.0])

    def plan(self, obs, info: dict) -> np.ndarray:
        """The K actions (K, 3) minimising the horizon objective (L-BFGS, warm-started)."""
        hc = self.cost(obs, info)
        cap = self.speed_cap()
        # the solver's actions u in [-1, 1]^3 move S by u * scale per step; the env's are u * cap
        K, scale = int(self.cfg["horizon_steps"]), self.scale * cap
        S0 = hc.S0
        if self._u is None:
            # start from the prior: the actions that follow it, within the limits
            u0 = np.clip(np.diff(np.vstack([S0, hc.prior]), axis=0) / scale, -0.95, 0.95)
        else:
            u0 = np.clip(np.vstack([self._u[1:], self._u[-1:]]), -0.95, 0.95)
        scale0 = self._hessian_scale if self._u is not None else None
        if self.cfg["solver"] == "taichi":
            from .rh_kernel import solve

            self._u, self.last_iterations, self._hessian_scale = solve(
                hc, u0, scale, int(self.cfg["max_iterations"]), scale0)
            return self._u * cap

        def f(z):
            u = np.tanh(z.reshape(K, 3))
            S = S0 + np.cumsum(u * scale, axis=0)
            c, gS = hc(S)
            gu = np.cumsum(gS[::-1], axis=0)[::-1] * scale     # d S_k / d u_j = scale for j <= k
            return c, (gu * (1.0 - u * u)).ravel()

        z, self.last_iterations, self._hessian_scale = lbfgs(
            f, np.arctanh(u0).ravel(), int(self.cfg["max_iterations"]), scale0=scale0)
        self._u = np.tanh(z.reshape(K, 3))
        return self._u * cap

    def act(self, obs, info: dict) -> np.ndarray:
        t0, c0 = time.perf_counter(), time.process_time()
        self._track_liquid(info)
        u = self.plan(obs, info)
        self.solve_seconds.append(time.perf_counter() - t0)
        self.solve_cpu_seconds.append(time.process_time() - c0)
        return u[0].astype(np.float32)

    def _track_liquid(self, info: dict) -> None:
        """The liquid's translational velocity (m/s): S's, lagged by ``slosh_time`` (as in
        :class:`HorizonCost`); S's own at the episode's start (the liquid at rest with a resting
        S, or moving with S: TRANSFER+FOLLOW)."""
        v = np.asarray(info.get("source_velocity", np.zeros(3)), np.float64)[:2]
        if self._v_liquid is None:
            self._v_liquid = v.copy()
            return
        b = self.dt / (self.cfg["slosh_time"] + self.dt)
        self._v_liquid = (1.0 - b) * self._v_liquid + b * v

    # ------------------------------------------------------------------ persistence
    def save(self, path: str | Path) -> None:
        torch_save_atomic({"format": "taigym-rh/1", "agent": "rh", "net": self.net.config(),
                           "state_dict": self.net.state_dict(), "meta": self.meta,
                           "planner": {k: self.cfg[k] for k in PLANNER_DEFAULTS}}, path)

    @classmethod
    def load(cls, path: str | Path, env, **cfg) -> "RHAgent":
        return cls(env, checkpoint=path, **cfg)


def _read(path: str | Path) -> tuple[LiquidNet, dict, dict]:
    d = torch_load(path)
    if not isinstance(d, dict) or d.get("format") != "taigym-rh/1":
        raise ValueError(f"{path} is not an rh checkpoint (format taigym-rh/1)")
    net = LiquidNet(**d["net"])
    net.load_state_dict(d["state_dict"])
    net.eval()
    return net, d.get("meta", {}), d.get("planner", {})


# ---------------------------------------------------------------------- training
def train(make_env, cfg: dict, run_dir: str | Path, logger=None, expert=None) -> RHAgent:
    """Generate (or complete) the CMA-ES dataset, fit the network, return the agent.

    ``cfg``: ``TRAIN_DEFAULTS`` (dataset directory, or None for ``run_dir/cmaes_dataset``;
    ``problems``, ``popsize``, ``iterations`` of the generator; ``labels``: the env, simplified
    or particles, in which the CMA-ES pours are replayed and recorded; ``min_reward``: keep the
    pours whose R/N reaches it; ``onpolicy``: directories of ``rh``'s own rollouts on the same
    problems (``taigym.data.cmaes_dataset.generate_onpolicy``), all their states added;
    ``epochs``, ``lr``, ``batch_size``, ``val_fraction``, ``seed`` of the fit) plus the
    planner's options (``PLANNER_DEFAULTS``)."""
    from taigym.data.cmaes_dataset import generate, load

    known = set(TRAIN_DEFAULTS) | set(PLANNER_DEFAULTS) | {"checkpoint_every", "threads", "torch_threads"}
    unknown = set(cfg) - known
    if unknown:
        raise ValueError(f"unknown rh training option(s): {', '.join(sorted(unknown))}; accepted: "
                         f"{', '.join(sorted(known))}")
    c = {**TRAIN_DEFAULTS, **PLANNER_DEFAULTS, **cfg}
    run_dir = Path(run_dir)
    env = make_env()
    env_mode = getattr(getattr(env.unwrapped, "cfg", None), "obs_mode", c["obs_mode"])
    if env_mode != c["obs_mode"]:
        raise ValueError(f"obs_mode={c['obs_mode']!r} but the env observes {env_mode!r}")
    data_dir = Path(c["dataset"]) if c["dataset"] else run_dir / "cmaes_dataset"
    resolution = int(getattr(getattr(env.unwrapped, "cfg", None), "resolution", 128))
    generate(data_dir, int(c["problems"]), obs_mode=c["obs_mode"], resolution=resolution,
             cmaes={"popsize": int(c["popsize"]), "max_iterations": int(c["iterations"])},
             progress=bool(c["progress"]), label_fidelity=c["labels"])
    d = load(data_dir, int(c["problems"]))
    keep = d["reward"] >= float(c["min_reward"])
    if not keep.any():
        raise RuntimeError(f"no CMA-ES pour in {data_dir} reached R/N >= {c['min_reward']}")
    m = keep[d["problem"]]
    # rh's own rollouts (generate_onpolicy), every state kept: the failed ones hold the states
    # the teacher's pours never reach; grouped by problem index with the teacher's pour of it
    onpolicy = [c["onpolicy"]] if isinstance(c["onpolicy"], (str, Path)) else list(c["onpolicy"] or [])
    parts = [(d["obs"][m], d["labels"][m], d["index"][d["problem"]][m])]
    for p in onpolicy:
        e = load(p, int(c["problems"]))
        parts.append((e["obs"], e["labels"], e["index"][e["problem"]]))
    obs, labels, groups = (np.concatenate(a) for a in zip(*parts))
    fc = FitConfig(epochs=int(c["epochs"]), lr=float(c["lr"]), batch_size=int(c["batch_size"]),
                   val_fraction=float(c["val_fraction"]), seed=int(c["seed"]))
    net, report = fit(obs, labels, groups, fc, progress=bool(c["progress"]))
    meta = {"obs_mode": c["obs_mode"], "dataset": str(data_dir), "problems_used": int(keep.sum()),
            "problems": int(len(keep)), "states": int(m.sum()),
            "onpolicy": [str(p) for p in onpolicy], "onpolicy_states": int(len(obs) - m.sum()),
            "val_errors": report.get("val_errors"), "val_constant_errors": report.get("val_constant_errors")}
    if logger is not None:
        flat = {f"train/val_{k}": v for k, v in (report.get("val_errors") or {}).items()}
        flat.update({"train/problems_used": meta["problems_used"], "train/states": meta["states"]})
        logger.log(flat, step=0)
    planner = {k: c[k] for k in PLANNER_DEFAULTS}
    agent = RHAgent(env, net=net, meta=meta, **planner)
    agent.save(run_dir / FINAL_CHECKPOINT)
    return agent


def latency_summary(seconds: list[float]) -> dict:
    """Median and 95th percentile (ms) of per-step solve times."""
    if not seconds:
        return {"median_ms": math.nan, "p95_ms": math.nan}
    a = np.asarray(seconds) * 1e3
    return {"median_ms": float(np.median(a)), "p95_ms": float(np.percentile(a, 95))}
