"""Pan & Manocha 2016's pouring planner: trust-region SQP over the source container's trajectory.

The decision variables are S's poses z_i = (x_i, y_i, theta_i) at ``nodes`` control steps of
``dt`` seconds after the start pose z_0. The liquid is Pan & Manocha 2016's simplified model
(:mod:`taigym.models.simplified`), rolled out along the trajectory exactly as the simplified env
steps it: S's acceleration sloshes the free surface, and the outflow path is Pan & Manocha 2016's parabola
with the jet's own horizontal speed relaxing at the identified drag (less for thick jets,
``jet_drag``). The objective (Pan & Manocha 2016 Eq. 7 and §IV-C) is a sum of squares

| term | residual | scale |
|------|----------|-------|
| pour | sqrt(f_i) (landing point of the outflow path at T's rim height - T's opening centre at that time) | T's half opening |
| smoothness | Laplacian z_{i+1} - 2 z_i + z_{i-1}, from i = 0 with z_{-1} = z_0 - dt * S's start velocity | ``smooth_scale`` per axis |
| guide | theta_N - final lean (towards T) | ``guide_scale`` |

f_i is the fraction of the liquid that leaves S in step i (the paper weights by the outflow
cross-section A; A u dt is the volume that leaves, so this is the same weighting made
dimensionless). If a jet never comes down to T's rim, its residual is the apex's horizontal
error and its shortfall in height. The outflow is not one speed: its slowest part leaves with S's
own velocity and dribbles off the lip, its fastest keeps the jet's speed on Pan & Manocha 2016's drag-free
parabola (in FLIP the thin jet's drag spreads the outflow between the two), so the same residual
for both ends is added with weight ``dribble_weight``: the planner keeps both ends of the
outflow's fan over T's opening. Constraints: per-step velocity limits (the env's action
scale), the tilt limit, and no collision: S's walls as circles against T's walls (moving with
T), the obstacles' boxes, the floor and the scene's edges (and, if given, circles of what holds
S, e.g. a robot's hand, against all but T), each as an L1 penalty with a slack
per node and obstacle (TrajOpt's exact penalty, Pan & Manocha 2016 §V).

Each iteration linearises the residuals (Gauss-Newton; the pour residuals by finite differences
of a batched rollout) and the signed distances, and solves the convex subproblem with OSQP on a
fixed sparsity pattern (only the values are updated). Trust region and penalty updates follow
TrajOpt (Schulman et al. 2014): the step is accepted if the true merit improves by at least
``improve_ratio`` of the model's prediction; the region grows on success and shrinks otherwise;
after convergence with violated constraints the penalty grows. Iterations and wall time are
limited (``max_iterations``, ``time_limit``): the planner always returns its best trajectory.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import numpy as np
import osqp
from scipy import sparse

from taigym.models.outflow_tables import OutflowTables, outflow_tables
from taigym.models.simplified import (OutflowFit, fit_for, jet_directions, jet_drag, path_x,
                                      regressors_array, slosh_array)
from taigym.sim.constants import GRAVITY
from taigym.sim.geometry import Box, Container

from . import osqp_quiet


# ---------------------------------------------------------------------- problem and result
@dataclass(frozen=True)
class SQPConfig:
    nodes: int = 100                          #: trajectory nodes after the start pose
    dt: float = 0.05                          #: s per node (the envs' control step)
    max_step: tuple = (0.025, 0.025, 0.1)     #: per-node limits of |dx|, |dy| (m), |dtheta| (rad)
    tilt_limit: float = 2.5                   #: |theta| <= this (rad)
    final_lean: float = 2.4                   #: guide term's target lean towards T (rad)
    smooth_scale: tuple = (0.004, 0.004, 0.02)  #: Laplacian per axis counted as one unit of cost
    guide_scale: float = 0.05                 #: rad
    pour_weight: float = 30.0                 #: weight of the pour term against the others
    dribble_weight: float = 0.5               #: weight of the fan's ends' landing errors
    clearance: float = 0.004                  #: m kept between S's walls and any obstacle
    penalty: float = 300.0                    #: initial L1 penalty on collision (per m of overlap)
    max_penalty_increases: int = 3
    trust_region: tuple = (0.02, 0.02, 0.15)  #: initial half-widths (m, m, rad)
    min_trust: float = 1e-4                   #: stop when the region shrinks below this fraction
    improve_ratio: float = 0.2
    min_improvement: float = 1e-3             #: stop when a step improves the merit by less (relative)
    max_iterations: int = 60
    time_limit: float = 8.0                   #: s of wall time
    fd_step: float = 1e-4                     #: finite-difference step (m, rad)
    slosh: bool = True                        #: S's acceleration sloshes the free surface (as in the model)

    def __post_init__(self) -> None:
        if not (isinstance(self.nodes, int) and 2 <= self.nodes <= 1000):
            raise ValueError(f"nodes must be an integer in [2, 1000], got {self.nodes!r}")
        for name in ("dt", "final_lean", "time_limit", "guide_scale", "pour_weight"):
            v = getattr(self, name)
            if not (math.isfinite(v) and v > 0):
                raise ValueError(f"{name} must be > 0, got {v!r}")
        if not (0 < self.final_lean <= self.tilt_limit):
            raise ValueError(f"final_lean must be in (0, tilt_limit={self.tilt_limit}], got {self.final_lean}")
        if not (isinstance(self.max_iterations, int) and self.max_iterations >= 1):
            raise ValueError(f"max_iterations must be an integer >= 1, got {self.max_iterations!r}")


@dataclass(frozen=True)
class PourProblem:
    """One planning problem in SI units. ``target_path`` gives T's frame position (x, y) at the
    times of an array; build it from a Pour task with :meth:`from_task`."""

    source: Container
    target: Container
    start_pose: tuple
    start_velocity: tuple
    start_time: float
    volume: float                              #: m^2 of liquid in S now
    initial_volume: float                      #: m^2 of liquid at the start of the pour
    speed: float                               #: current outflow speed u (m/s)
    fit: OutflowFit
    target_position: tuple
    target_velocity: tuple
    target_bounds: tuple
    obstacles: tuple = ()                      #: (x_centre, y_centre, width, height) boxes, m
    domain: tuple = (0.8, 0.5)
    #: the slosh state (``SimplifiedLiquid.surface``): the free surface's tilt (rad), its rate
    #: (rad/s) and the velocity (m/s, x, y) the liquid last moved with
    surface: tuple = (0.0, 0.0, 0.0, 0.0)
    #: circles (x, y, radius; m, S's frame) of what holds S (a robot's hand, beside S in 3D):
    #: kept clear of the boxes, the floor and the edges like S's walls, not of T
    holder: tuple = ()
    #: the lip S pours over: +1 its right (T to S's right, S leans clockwise), -1 its left; 0:
    #: T's side of S at the horizon's middle. A replan keeps its plan's side: once S has moved
    #: its lip over T, S's centre is past T's opening and the geometric test would flip the lean
    side: float = 0.0

    def __post_init__(self) -> None:
        if self.side not in (-1.0, 0.0, 1.0):
            raise ValueError(f"side must be -1, 0 or 1, got {self.side!r}")

    def pour_side(self, nodes: int, dt: float) -> float:
        """:attr:`side`, or if 0 T's side of S (+1: right) at the middle of ``nodes`` steps."""
        if self.side:
            return float(self.side)
        t_mid = self.start_time + dt * (nodes // 2)
        tx = self.target_path(np.array([t_mid]))[0, 0] + self.target.opening_centre[0]
        return 1.0 if tx >= self.start_pose[0] else -1.0

    @classmethod
    def from_task(cls, task, *, wall_thickness: float = 0.01, pose=None, velocity=None,
                  time: float = 0.0, in_source: float = 1.0, speed: float = 0.0,
                  surface=None, domain=(0.8, 0.5), side: float = 0.0) -> "PourProblem":
        """The problem of a Pour task (``taigym.envs.pour_tasks.PourTask``) from its start, or
        from a later state: S's ``pose`` and ``velocity`` at ``time`` with the fraction
        ``in_source`` of the liquid still in S, its outflow speed ``speed`` and slosh state
        ``surface`` (:attr:`surface`; None: a flat surface on liquid moving with S, or at the
        task's start at rest unless the task's liquid follows S); ``side``: :attr:`side`."""
        source = task.source_shape(wall_thickness)
        v0 = source.liquid_area(task.fill)
        if not (0.0 <= in_source <= 1.0 + 1e-9):
            raise ValueError(f"in_source must be in [0, 1], got {in_source!r}")
        pose = task.source_pose if pose is None else pose
        vel = (*task.source_velocity, 0.0) if velocity is None else velocity
        if surface is None:
            moving = velocity is not None or task.liquid_velocity == "follow"
            surface = (0.0, 0.0, *(vel[:2] if moving else (0.0, 0.0)))
        return cls(source=source, target=task.target_shape(wall_thickness),
                   start_pose=tuple(float(v) for v in pose),
                   start_velocity=tuple(float(v) for v in vel), start_time=float(time),
                   volume=v0 * float(in_source), initial_volume=v0, speed=float(speed),
                   fit=fit_for(task.source_container, task.viscosity),
                   target_position=tuple(task.target_position),
                   target_velocity=tuple(task.target_velocity),
                   target_bounds=tuple(task.target_bounds),
                   obstacles=tuple(tuple(o) for o in getattr(task, "obstacles", ())),
                   domain=tuple(domain), surface=tuple(float(v) for v in surface), side=float(side))

    def target_path(self, t: np.ndarray) -> np.ndarray:
        """T's frame position (..., 2) at times t (s): constant velocity, elastic bounces."""
        out = []
        for k, (lo, hi) in enumerate(((self.target_bounds[0], self.target_bounds[1]),
                                      (self.target_bounds[2], self.target_bounds[3]))):
            p = self.target_position[k] + self.target_velocity[k] * np.asarray(t, np.float64)
            span = hi - lo
            if span <= 0:
                out.append(np.full_like(p, lo))
                continue
            q = np.mod(p - lo, 2 * span)                      # unfold the bounces
            out.append(lo + np.where(q > span, 2 * span - q, q))
        return np.stack(out, axis=-1)


@dataclass
class PourPlan:
    """The planner's result. ``poses`` (nodes + 1, 3) from the start pose; ``times`` (s);
    ``predicted``: the simplified model's fractions along the plan (``in_target``,
    ``spilled``, ``in_source``); ``status``: why it stopped; ``side``: the lip it pours over
    (:attr:`PourProblem.side`)."""

    poses: np.ndarray
    times: np.ndarray
    predicted: dict
    iterations: int
    wall_time: float
    status: str
    merit: float
    history: list = field(default_factory=list)
    side: float = 0.0


# ---------------------------------------------------------------------- batched model rollout
class _Rollout:
    """The simplified model along M trajectories at once (vectorised over trajectories)."""

    def __init__(self, prob: PourProblem, cfg: SQPConfig, tables: OutflowTables):
        self.p, self.cfg, self.t = prob, cfg, tables
        self.oc = prob.target.opening_centre
        self.half_width = 0.5 * prob.target.width
        self.times = prob.start_time + cfg.dt * np.arange(cfg.nodes + 1)
        # T moves slowly (<= 0.3 m/s): its rim height at each node's emission time
        self.rims = prob.target_path(self.times)[:, 1] + self.oc[1]

    def __call__(self, poses: np.ndarray):
        """poses (M, N + 1, 3) -> (residuals (M, N, 6) in m: the jet's landing error and height
        shortfall, the same for the fan's two ends, a dribble and a drag-free jet; fraction
        leaving (M, N); jet lands in T (M, N))."""
        p, cfg, t = self.p, self.cfg, self.t
        M, N = poses.shape[0], cfg.nodes
        fit = p.fit
        vol = np.full(M, p.volume)
        u = np.full(M, p.speed)
        tilt, rate = np.full(M, p.surface[0]), np.full(M, p.surface[1])
        v_prev = np.tile(np.asarray(p.surface[2:], np.float64)[:, None], (1, M))
        res = np.zeros((M, N, 6))
        frac = np.zeros((M, N))
        hit = np.zeros((M, N))
        for i in range(1, N + 1):
            x, y, th = poses[:, i, 0], poses[:, i, 1], poses[:, i, 2]
            th_prev = poses[:, i - 1, 2]
            vel = (poses[:, i, :2] - poses[:, i - 1, :2]).T / cfg.dt     # S's velocity (2, M)
            if cfg.slosh:
                # S's acceleration tilts the free surface (SimplifiedLiquid.step): h and A at the
                # lean theta + tilt; sloshed past upright, the other lip's section and jet
                tilt, rate = slosh_array(tilt, rate, vel, v_prev, vol, p.source.width, cfg.dt)
                v_prev = vel
            eff = th + tilt
            th_lip = np.where((eff * th > 0.0) | (tilt == 0.0), th, eff)
            sign = np.where(th_lip <= 0.0, 1.0, -1.0)        # pouring lip: right for theta <= 0
            lean = -th_lip * sign
            look = t.interpolate(lean, vol, partials=False)
            h, a = look["h"], look["A"]
            if np.any(tilt != 0.0):
                ha = t.interpolate(np.abs(eff), vol, partials=False)
                h, a = ha["h"], ha["A"]
            cx, cy = sign * look["cx"], look["cy"]
            drop, dx, dy = jet_directions(t, fit, lean)
            dx = dx * sign
            phi = np.array(regressors_array(h, drop, u, (th - th_prev) / cfg.dt, fit.terms))
            flowing = (a > 0.0) & (vol > 0.0)
            u = np.where(flowing, np.maximum(0.0, np.tensordot(fit.weights, phi, 1)), 0.0)
            out = np.minimum(vol, cfg.dt * fit.discharge * a * u)
            vol = vol - out
            frac[:, i - 1] = out / p.initial_volume
            c, s = np.cos(th), np.sin(th)
            wx, wy = x + c * cx - s * cy, y + s * cx + c * cy
            om = (th - th_prev) / cfg.dt
            # S's rigid velocity at the section's centroid, which the liquid keeps, plus the
            # jet's own, which the drag relaxes (taigym.models.simplified.path_x)
            rx, ry = vel[0] - om * (wy - y), vel[1] + om * (wx - x)
            jx, jy = rx + u * dx, ry + u * dy
            res[:, i - 1, :2], hit[:, i - 1] = self._landing(wx, wy, jx, jy, i, rx, jet_drag(fit, a))
            # the fan's ends: the slowest liquid leaves with S's velocity only and dribbles off
            # the lip; the fastest keeps the jet's speed (Pan & Manocha 2016's parabola, no drag)
            res[:, i - 1, 2:4], _ = self._landing(wx, wy, rx, ry, i, rx, 0.0)
            res[:, i - 1, 4:], _ = self._landing(wx, wy, jx, jy, i, rx, 0.0)
        res[..., 2:] *= cfg.dribble_weight
        return res, frac, hit

    def _landing(self, x0, y0, vx, vy, i: int, carried, drag):
        """Residual (M, 2) of jets emitted at node i against T's opening (where T is when they
        land), and whether each lands inside it; ``carried``: the part of vx that is S's rigid
        motion (no drag on it); ``drag`` (1/s, float or (M,)): the jet drag on the rest."""
        rim, t_emit = self.rims[i], self.times[i]
        disc = vy * vy + 2.0 * GRAVITY * (y0 - rim)
        ok = disc >= 0.0
        tau = np.where(ok, (vy + np.sqrt(np.maximum(disc, 0.0))) / GRAVITY,
                       np.maximum(vy, 0.0) / GRAVITY)              # else: the apex
        x_hit = path_x(x0, vx, tau, drag, carried)
        tx = self.p.target_path(t_emit + tau)[:, 0] + self.oc[0]
        err_x = x_hit - tx
        short = np.where(ok, 0.0, -disc / (2.0 * GRAVITY))         # rim - apex height, m
        inside = ok & (np.abs(err_x) < self.half_width)
        return np.stack([err_x, short], axis=1), inside


# ---------------------------------------------------------------------- collision
class _Collision:
    """Signed distances of S's walls (as circles) to every obstacle, per node, with gradients."""

    def __init__(self, prob: PourProblem, cfg: SQPConfig, times: np.ndarray):
        s = prob.source
        walls = np.asarray(s.walls)
        pts = [walls[:1]]
        for a, b in zip(walls[:-1], walls[1:]):
            n = max(int(math.ceil(np.linalg.norm(b - a) / s.radius)), 1)
            pts.append(a + (np.arange(1, n + 1)[:, None] / n) * (b - a))
        holder = np.asarray(prob.holder, np.float64).reshape(-1, 3)
        self.circles = np.concatenate(pts + [holder[:, :2]])          # S frame
        self.radii = np.concatenate([np.full(len(self.circles) - len(holder), s.radius), holder[:, 2]])
        self.n_holder = len(holder)
        self.prob, self.cfg = prob, cfg
        self.t_pos = prob.target_path(times[1:])        # T at every node (N, 2)
        W, H = prob.domain
        # obstacles: T, the boxes, the floor, left, right and top edges
        self.names = ["target"] + [f"box{k}" for k in range(len(prob.obstacles))] + \
                     ["floor", "left", "right", "top"]
        self.boxes = [Box(width=o[2], height=o[3]) for o in prob.obstacles]
        self.W, self.H = W, H

    @property
    def count(self) -> int:
        return len(self.names)

    def _sdf(self, k: int, pts: np.ndarray, node_pos: np.ndarray) -> np.ndarray:
        """Signed distance (m) of world points (N, C, 2) to obstacle k's solid."""
        if k == 0:
            loc = pts - node_pos[:, None, :]
            return self.prob.target.sdf(loc.reshape(-1, 2)).reshape(loc.shape[:2])
        k -= 1
        if k < len(self.boxes):
            o = self.prob.obstacles[k]
            return self.boxes[k].sdf((pts - (o[0], o[1])).reshape(-1, 2)).reshape(pts.shape[:2])
        k -= len(self.boxes)
        return (pts[..., 1], pts[..., 0], self.W - pts[..., 0], self.H - pts[..., 1])[k]

    def evaluate(self, poses: np.ndarray):
        """For poses (N, 3) (nodes 1..N): distances (N, K) = closest circle's signed distance
        minus its radius and the clearance, and gradients (N, K, 3) with respect to the pose."""
        x, y, th = poses[:, 0], poses[:, 1], poses[:, 2]
        c, s = np.cos(th), np.sin(th)
        q = self.circles
        px = x[:, None] + c[:, None] * q[:, 0] - s[:, None] * q[:, 1]
        py = y[:, None] + s[:, None] * q[:, 0] + c[:, None] * q[:, 1]
        pts = np.stack([px, py], axis=-1)               # (N, C, 2)
        N, K = len(poses), self.count
        dist = np.zeros((N, K))
        grad = np.zeros((N, K, 3))
        rows = np.arange(N)
        eps = 1e-5
        for k in range(K):
            d = self._sdf(k, pts, self.t_pos) - self.radii
            if k == 0 and self.n_holder:                # the holder is beside T, not over it
                d[:, -self.n_holder:] = np.inf
            j = np.argmin(d, axis=1)
            p = pts[rows, j]                            # closest circle centre (N, 2)
            gx = (self._sdf(k, (p + (eps, 0))[:, None], self.t_pos)[:, 0] -
                  self._sdf(k, (p - (eps, 0))[:, None], self.t_pos)[:, 0]) / (2 * eps)
            gy = (self._sdf(k, (p + (0, eps))[:, None], self.t_pos)[:, 0] -
                  self._sdf(k, (p - (0, eps))[:, None], self.t_pos)[:, 0]) / (2 * eps)
            dist[:, k] = d[rows, j] - self.cfg.clearance
            # d p / d theta = (-(p_y - y), p_x - x)
            grad[:, k, 0] = gx
            grad[:, k, 1] = gy
            grad[:, k, 2] = -gx * (p[:, 1] - y) + gy * (p[:, 0] - x)
        return dist, grad


# ---------------------------------------------------------------------- the planner
def initial_trajectory(prob: PourProblem, cfg: SQPConfig) -> np.ndarray:
    """A trajectory that moves S's lip over T's opening (where T will be) in the first 40 % of
    the horizon while level, then leans towards T up to ``final_lean`` by 90 % (Pan & Manocha 2016 starts
    from a trajectory that pours nothing; the guide term starts the pour)."""
    N = cfg.nodes
    t = prob.start_time + cfg.dt * np.arange(N + 1)
    z = np.tile(np.asarray(prob.start_pose, np.float64), (N + 1, 1))
    tx = prob.target_path(t)[:, 0] + prob.target.opening_centre[0]
    side = prob.pour_side(N, cfg.dt)
    lip = prob.source.lips[1][0] if side > 0 else prob.source.lips[0][0]
    goal_x = tx - lip                                   # S's lip over T's opening centre
    ramp = np.clip(np.arange(N + 1) / (0.4 * N), 0.0, 1.0)
    z[:, 0] = z[0, 0] + ramp * (goal_x - z[0, 0])
    lean = np.clip((np.arange(N + 1) / N - 0.3) / 0.6, 0.0, 1.0) * cfg.final_lean
    z[:, 2] = z[0, 2] - side * lean
    return _limit_steps(z, cfg)


def _limit_steps(z: np.ndarray, cfg: SQPConfig) -> np.ndarray:
    """Clamp every node's step to the velocity limits and the tilt limit (a feasible start)."""
    out = z.copy()
    lim = np.asarray(cfg.max_step)
    for i in range(1, len(z)):
        out[i] = out[i - 1] + np.clip(z[i] - out[i - 1], -lim, lim)
        out[i, 2] = np.clip(out[i, 2], -cfg.tilt_limit, cfg.tilt_limit)
    return out


class _Sparse:
    """A CSC matrix with a fixed pattern whose values are given in the order the entries were
    declared: ``values(v)`` returns the data array in CSC order (for OSQP's ``update``)."""

    def __init__(self, rows, cols, shape):
        order = sparse.csc_matrix((np.arange(1, len(rows) + 1, dtype=np.float64),
                                   (rows, cols)), shape=shape)
        order.sort_indices()
        self.perm = order.data.astype(np.int64) - 1
        self.matrix = order.copy()

    def values(self, v: np.ndarray) -> np.ndarray:
        return np.asarray(v, np.float64)[self.perm]


class _Subproblem:
    """The convex subproblem of one SQP iteration, solved by OSQP on a fixed sparsity pattern.

    Variables x = (delta (3N): the step of every node, slacks (N K): collision violations).
    Minimise 1/2 delta' H delta + g' delta + mu sum(slacks) subject to: lo <= delta <= hi (trust
    region, tilt limit); slacks >= 0; step_lo <= delta_i - delta_{i-1} <= step_hi (velocity
    limits, node 0 fixed); grad_ik . delta_i + slack_ik >= -dist_ik (linearised clearance).
    """

    def __init__(self, N: int, K: int):
        self.N, self.K = N, K
        n_z, n_t = 3 * N, N * K
        self.n_z, self.n_t = n_z, n_t
        self.iu = np.tril_indices(n_z)          # row-major lower triangle = CSC order of the upper
        self.P = sparse.csc_matrix((np.ones(len(self.iu[0])), (self.iu[1], self.iu[0])),
                                   shape=(n_z + n_t, n_z + n_t))
        self.P.sort_indices()
        rows, cols, vals = list(range(n_z + n_t)), list(range(n_z + n_t)), [1.0] * (n_z + n_t)
        r = n_z + n_t
        for i in range(N):                      # velocity rows: delta_i - delta_{i-1}
            for ax in range(3):
                if i > 0:
                    rows.append(r); cols.append(3 * (i - 1) + ax); vals.append(-1.0)
                rows.append(r); cols.append(3 * i + ax); vals.append(1.0)
                r += 1
        self.n_fixed = len(vals)
        for i in range(N):                      # clearance rows: gradient (3 entries) + slack
            for k in range(K):
                rows += [r] * 4
                cols += [3 * i, 3 * i + 1, 3 * i + 2, n_z + i * K + k]
                vals += [0.0, 0.0, 0.0, 1.0]
                r += 1
        self.A = _Sparse(np.array(rows), np.array(cols), (r, n_z + n_t))
        self.a_vals = np.array(vals)
        self.solver = None

    def solve(self, H, g, mu, lo, hi, step_lo, step_hi, dist, grad):
        """(delta, slacks), or None if OSQP returned nothing usable."""
        n_z, n_t = self.n_z, self.n_t
        self.a_vals[self.n_fixed:].reshape(n_t, 4)[:, :3] = grad.reshape(n_t, 3)
        Ax = self.A.values(self.a_vals)
        q = np.concatenate([g, np.full(n_t, mu)])
        lower = np.concatenate([lo, np.zeros(n_t), step_lo, -dist.ravel()])
        upper = np.concatenate([hi, np.full(n_t, np.inf), step_hi, np.full(n_t, np.inf)])
        Px = H[self.iu]
        if self.solver is None:
            P = self.P.copy()
            P.data = Px
            A = self.A.matrix.copy()
            A.data = Ax
            self.solver = osqp.OSQP()
            # loose tolerances: the trust-region loop judges each step by the true merit
            self.solver.setup(P, q, A, lower, upper, verbose=False, eps_abs=1e-3, eps_rel=1e-3,
                              max_iter=400, polishing=True, adaptive_rho_interval=25)
        else:
            self.solver.update(Px=Px, Ax=Ax, q=q, l=lower, u=upper)
        sol = osqp_quiet.solve(self.solver)
        if sol.x is None or not np.all(np.isfinite(sol.x)):
            return None
        return sol.x[:n_z], sol.x[n_z:]


def plan_pour(prob: PourProblem, cfg: SQPConfig | None = None, init: np.ndarray | None = None) -> PourPlan:
    """Plan S's trajectory for ``prob`` (module docstring). Never raises on a hard problem: it
    returns its best trajectory with ``status`` saying why it stopped."""
    cfg = cfg or SQPConfig()
    t_start = time.perf_counter()
    if prob.initial_volume <= 0:
        raise ValueError("the source holds no liquid (initial_volume = 0): nothing to pour")
    tables = outflow_tables(prob.source)
    roll = _Rollout(prob, cfg, tables)
    col = _Collision(prob, cfg, roll.times)
    N, K = cfg.nodes, col.count
    n_z = 3 * N
    z0 = np.asarray(prob.start_pose, np.float64)
    z = initial_trajectory(prob, cfg) if init is None else np.array(init, np.float64)
    if z.shape != (N + 1, 3):
        raise ValueError(f"init must have shape ({N + 1}, 3), got {np.shape(init)}")
    z = _limit_steps(np.vstack([z0, z[1:]]), cfg)[1:]
    side = prob.pour_side(N, cfg.dt)
    theta_goal = -side * cfg.final_lean                # lean towards T: clockwise if T is right
    ss = np.asarray(cfg.smooth_scale)
    w_pour = math.sqrt(cfg.pour_weight) / roll.half_width

    # S's pose one step before the start (from its velocity): the Laplacian at z_0 continues the
    # motion S already has, so that a replan from a state on a plan keeps that plan's next step
    # (without it the first step of a replan is free and its label jumps)
    z_prev = z0 - np.asarray(prob.start_velocity, np.float64) * cfg.dt

    def linear_residuals(zz: np.ndarray) -> np.ndarray:
        full = np.vstack([z_prev, z0, zz])
        lap = (full[2:] - 2 * full[1:-1] + full[:-2]) / ss         # (N, 3)
        guide = np.array([(zz[-1, 2] - theta_goal) / cfg.guide_scale])
        return np.concatenate([lap.ravel(), guide])

    # Jacobian of the linear residuals (constant)
    rows, cols, vals = [], [], []
    r = 0
    for i in range(N):                    # Laplacian at node i uses z_{i-1}, z_i, z_{i+1}
        for ax in range(3):
            for j, w in ((i - 1, 1.0), (i, -2.0), (i + 1, 1.0)):
                if j >= 1:
                    rows.append(r); cols.append(3 * (j - 1) + ax); vals.append(w / ss[ax])
            r += 1
    rows.append(r); cols.append(3 * (N - 1) + 2); vals.append(1.0 / cfg.guide_scale)
    J_lin = sparse.csr_matrix((vals, (rows, cols)), shape=(r + 1, n_z)).toarray()

    def pour_residuals(zz_batch: np.ndarray):
        full = np.concatenate([np.broadcast_to(z0, (len(zz_batch), 1, 3)), zz_batch], axis=1)
        res, frac, hit = roll(full)
        return (np.sqrt(frac)[..., None] * res * w_pour).reshape(len(zz_batch), -1), frac, hit

    def merit(zz: np.ndarray, mu: float):
        rp, frac, hit = pour_residuals(zz[None])
        rl = linear_residuals(zz)
        dist, _ = col.evaluate(zz)
        viol = np.maximum(0.0, -dist)
        return float(rp[0] @ rp[0] + rl @ rl) + mu * float(viol.sum()), float(viol.sum()), frac[0], hit[0]

    lim = np.tile(np.asarray(cfg.max_step), N)
    trust = np.tile(np.asarray(cfg.trust_region, np.float64), N)
    trust0 = trust.copy()
    mu = cfg.penalty
    qp = _Subproblem(N, K)
    cur_merit, cur_viol, frac, hit = merit(z, mu)
    history = [cur_merit]
    status, it, increases = "max_iterations", 0, 0
    for it in range(1, cfg.max_iterations + 1):
        if time.perf_counter() - t_start > cfg.time_limit:
            status = "time_limit"
            break
        # linearise: pour residuals by forward differences of one batched rollout
        zf = z.ravel()
        batch = np.repeat(zf[None], n_z + 1, axis=0)
        batch[1:] += np.eye(n_z) * cfg.fd_step
        rp_all, _, _ = pour_residuals(batch.reshape(-1, N, 3))
        rp = rp_all[0]
        Jp = (rp_all[1:] - rp).T / cfg.fd_step            # (n_res, n_z)
        rl = linear_residuals(z)
        J = np.vstack([Jp, J_lin])
        rr = np.concatenate([rp, rl])
        H = 2.0 * J.T @ J + 1e-9 * np.eye(n_z)
        g = 2.0 * J.T @ rr
        dist, grad = col.evaluate(z)
        step = np.diff(np.vstack([z0, z]), axis=0).ravel()
        lo = -trust.copy()
        hi = trust.copy()
        lo[2::3] = np.maximum(lo[2::3], -cfg.tilt_limit - zf[2::3])
        hi[2::3] = np.minimum(hi[2::3], cfg.tilt_limit - zf[2::3])
        sol = qp.solve(H, g, mu, lo, hi, -lim - step, lim - step, dist, grad)
        if sol is None:
            trust *= 0.5
            if trust.max() < cfg.min_trust * trust0.max():
                status = "qp_failed"
                break
            continue
        delta, slack = sol
        model_new = float(np.sum((rr + J @ delta) ** 2)) + mu * float(np.maximum(slack, 0).sum())
        model_old = float(rr @ rr) + mu * float(np.maximum(0.0, -dist).sum())
        predicted = model_old - model_new
        # ADMM meets the linear constraints to its tolerance only: clamp onto the limits exactly
        z_new = _limit_steps(np.vstack([z0, z + delta.reshape(N, 3)]), cfg)[1:]
        new_merit, new_viol, f_new, h_new = merit(z_new, mu)
        actual = cur_merit - new_merit
        if predicted > 1e-12 and actual >= cfg.improve_ratio * predicted:
            z, frac, hit = z_new, f_new, h_new
            converged = actual < cfg.min_improvement * max(cur_merit, 1e-9)
            cur_merit, cur_viol = new_merit, new_viol
            trust = np.minimum(trust * 2.0, 4 * trust0)
        else:
            trust *= 0.3
            converged = trust.max() < cfg.min_trust * trust0.max() or \
                predicted <= cfg.min_improvement * max(cur_merit, 1e-9)
        history.append(cur_merit)
        if converged:
            if cur_viol > 1e-4 and increases < cfg.max_penalty_increases:
                mu *= 10.0
                increases += 1
                trust = trust0.copy()
                cur_merit, cur_viol, frac, hit = merit(z, mu)
                continue
            status = "converged" if cur_viol <= 1e-4 else "infeasible"
            break
    poses = np.vstack([z0, z])
    in_t = float(np.sum(frac * hit))
    left = float(np.sum(frac))
    outcome = {"in_target": in_t, "spilled": left - in_t,
               "in_source": prob.volume / prob.initial_volume - left, "collision": float(cur_viol)}
    return PourPlan(poses, roll.times.copy(), outcome, it, time.perf_counter() - t_start,
                    status, cur_merit, history, side)
