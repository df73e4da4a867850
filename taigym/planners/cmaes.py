"""Pan & Manocha 2017's dataset generator: CMA-ES over S's trajectory in the monotone coordinates.

Pan & Manocha (2017, §VI-A) search S's trajectory as a spline through 6 control points
S(i T_s / 5), i = 0..5, the first fixed at the start pose. Instead of the 15 free coordinates
(x, y, theta) of control points 1..5 they search the *monotone coordinates*

    alpha_i = |x_S - x_T|_i / |x_S - x_T|_{i-1},  beta_i = |y_S - y_T|_i / |y_S - y_T|_{i-1},
    gamma_i = |theta_max - theta|_i / |theta_max - theta|_{i-1},       (alpha, beta, gamma) in (0, 1]^3

which encode the pattern of human pours: S only ever gets closer to T and only ever leans
further. The mapping to S's trajectory, as implemented here (the paper leaves the reference
points implicit; these are ours, in its spirit):

* x_T(t) is the x of T's *opening centre* at time t (T moves: the reference moves with it), and
  y_T(t) the height of T's rim (its opening centre's y): S closes in on T's opening from the
  side and from above. theta_max = -``lean`` when T is to S's right (pouring over the right lip
  is theta < 0), +``lean`` otherwise.
* The gaps at control point i are D_i = D_0 * prod_{j<=i} ratio_j (per axis), D_0 the gaps at
  the start; ratios in (0, 1] make them shrink monotonically.
* Between control points, at the control times t_i = i T_s / 5, the gaps are interpolated by a
  monotone cubic (PCHIP: no overshoot, so the gaps still shrink monotonically); after T_s they
  stay at D_5. S's pose at time t is

      x_S = x_T(t) - s_x D_x(t),  y_S = y_T(t) + s_y D_y(t),  theta_S = theta_max - s_t D_theta(t)

  with the signs s of the start (S starts left of / above T: s_x = s_y = +1).

CMA-ES (``cma``, Hansen's reference implementation) searches an unconstrained z in R^15 with
ratio = sigmoid(z), so every candidate lies in (0, 1)^15; z = 0 (every gap halves between
control points) is the initial mean. The reward (Pan & Manocha 2017) is R = sum_p R_p over the liquid,
R_p = (W - dist(p))/W for liquid entering T's opening at distance dist(p) < W from its centre
(W: half the opening), -100 for all other liquid (spilled, or still in S or in flight at the
end). Normalised by the amount of liquid, R is in [-100, 1]: the caller's ``evaluate`` returns
it from an env rollout (``taigym.agents.cmaes`` uses the simplified Pour-v0 and its metrics).
Pan & Manocha 2016's model follows only the outflow's mean jet; the particle simulator's outflow is a fan
from that jet down to liquid dribbling off the lip with S's own velocity. ``dribble_weight``
(default 0.5, as Pan & Manocha 2016's planner here) adds the dribble's R_p: without it, the CMA-ES pours
spilled 5 % or more in the particle env on 10 of 30 test problems, with it on 4.
``free_jet_weight`` (default 0.5) adds the R_p of the fan's fast end, the full jet without the
identified drag: the drag was fitted on thin jets, and a surge (S braking or tilting fast) is
thick and flies further. With the slosh of S's acceleration in the model, both ends of the fan
and 30 iterations, 27 of the 30 rect test problems spill less than 5 % in FLIP; without the
fast end 21, with 15 iterations 25 (``scripts/rh_eval.py --agent cmaes``).
CMA-ES maximises R (it minimises -R).

The paper uses I = 200 iterations of R = 30 samples over a 5 s trajectory; here the defaults
(30 iterations of 8 samples) fit a shared CPU, and are options.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
from scipy.interpolate import PchipInterpolator

SPILL_REWARD = -100.0               #: R_p of liquid that does not end in T (Pan & Manocha 2017)
N_CONTROL = 6                       #: spline control points, the first fixed at the start pose


@dataclass(frozen=True)
class CMAESConfig:
    """Options of the CMA-ES search (times in s, angles in rad)."""

    spline_time: float = 3.5        #: T_s: time of the last control point (S then holds)
    horizon: float = 5.0            #: s of trajectory (the env's episode)
    dt: float = 0.05                #: s per trajectory node (the env's control step)
    lean: float = 2.3               #: |theta_max|, the final lean towards T (rad)
    popsize: int = 8                #: CMA-ES samples per iteration (paper: 30)
    max_iterations: int = 30        #: CMA-ES iterations (paper: 200)
    sigma0: float = 1.0             #: initial step size in z (ratio = sigmoid(z))
    target_reward: float = 0.9      #: stop early once the best R/N reaches this
    dribble_weight: float = 0.5     #: weight of the outflow fan's slow end in the reward
    free_jet_weight: float = 0.5    #: weight of the fan's fast end (the jet without drag)
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("spline_time", "horizon", "dt", "lean", "sigma0"):
            v = getattr(self, name)
            if not (isinstance(v, (int, float)) and math.isfinite(v) and v > 0):
                raise ValueError(f"{name} must be a number > 0, got {v!r}")
        if not self.spline_time <= self.horizon:
            raise ValueError(f"spline_time must be in (0, horizon={self.horizon}], got {self.spline_time}")
        if not self.lean <= 2.5:
            raise ValueError(f"lean must be in (0, 2.5] rad (the env's tilt limit), got {self.lean}")
        for name in ("popsize", "max_iterations"):
            v = getattr(self, name)
            if not (isinstance(v, int) and v >= 2 - (name == "max_iterations")):
                raise ValueError(f"{name} must be an integer >= {2 - (name == 'max_iterations')}, got {v!r}")

    @property
    def nodes(self) -> int:
        return int(round(self.horizon / self.dt))


# ---------------------------------------------------------------------- references
def target_path(task, times) -> tuple[np.ndarray, np.ndarray]:
    """T's frame position (n, 2) and velocity (n, 2) at ``times`` (s): ``task.target_pose_at``
    and ``target_velocity_at`` vectorised (constant velocity, elastic bounces in
    ``task.target_bounds``, a triangle wave)."""
    t = np.asarray(times, np.float64).ravel()
    b = task.target_bounds
    pos, vel = np.empty((len(t), 2)), np.empty((len(t), 2))
    for k, (lo, hi) in enumerate(((b[0], b[1]), (b[2], b[3]))):
        p0, v = task.target_position[k], task.target_velocity[k]
        span = hi - lo
        if span <= 0.0 or v == 0.0:
            pos[:, k] = min(max(p0, lo), hi)
            vel[:, k] = 0.0 if span <= 0.0 else v
            continue
        s = np.mod(p0 - lo + v * t, 2.0 * span)
        back = s > span
        pos[:, k] = np.where(back, lo + 2.0 * span - s, lo + s)
        vel[:, k] = np.where(back, -v, v)
    return pos, vel


class Reference:
    """The moving references of the monotone coordinates for one Pour task: T's opening centre
    x_T(t) and rim height y_T(t) (world, m), and theta_max (rad)."""

    def __init__(self, task, wall_thickness: float = 0.01, lean: float = 2.3):
        self.task = task
        self.oc = np.asarray(task.target_shape(wall_thickness).opening_centre, np.float64)
        x0 = float(task.source_pose[0])
        self.side = 1.0 if self.xy(0.0)[0] >= x0 else -1.0   # T to the right of S: +1
        self.theta_max = -self.side * float(lean)

    def xy(self, t: float) -> np.ndarray:
        """(x_T, y_T) at time t: T's opening centre (world, m)."""
        p = self.task.target_pose_at(float(t))
        return p[:2] + self.oc

    def path(self, times) -> np.ndarray:
        """(len(times), 2) references at the given times."""
        return target_path(self.task, times)[0] + self.oc

    def gaps(self, pose, t: float) -> np.ndarray:
        """|x_S - x_T|, |y_S - y_T|, |theta_max - theta| of S's ``pose`` at time t."""
        r = self.xy(t)
        return np.abs(np.array([pose[0] - r[0], pose[1] - r[1], self.theta_max - pose[2]]))

    def signs(self, pose, t: float) -> np.ndarray:
        """Which side of each reference S is on (+1: x_S < x_T, y_S > y_T, theta on the far
        side of theta_max's complement, i.e. theta_max - theta has theta_max's sign)."""
        r = self.xy(t)
        sx = 1.0 if pose[0] <= r[0] else -1.0
        sy = 1.0 if pose[1] >= r[1] else -1.0
        st = 1.0 if (self.theta_max - pose[2]) * self.theta_max >= 0 else -1.0
        return np.array([sx, sy, st])

    def pose(self, gaps: np.ndarray, signs: np.ndarray, times) -> np.ndarray:
        """S's poses (n, 3) at ``times`` with the given gaps (n, 3) and signs (3,)."""
        r = self.path(times)
        g = np.asarray(gaps, np.float64)
        out = np.empty((len(r), 3))
        out[:, 0] = r[:, 0] - signs[0] * g[:, 0]
        out[:, 1] = r[:, 1] + signs[1] * g[:, 1]
        out[:, 2] = self.theta_max - signs[2] * np.sign(self.theta_max) * g[:, 2]
        return out


# ---------------------------------------------------------------------- the mapping
def ratios_from_z(z: np.ndarray) -> np.ndarray:
    """(5, 3) ratios (alpha_i, beta_i, gamma_i) in (0, 1) from the search variable z (15,)."""
    z = np.asarray(z, np.float64).reshape(N_CONTROL - 1, 3)
    return 1.0 / (1.0 + np.exp(-z))


def trajectory(ratios: np.ndarray, ref: Reference, cfg: CMAESConfig, start_pose=None,
               start_time: float = 0.0) -> np.ndarray:
    """S's poses (nodes + 1, 3) at ``start_time + k dt`` from the monotone coordinates
    ``ratios`` (5, 3) (module docstring). The first pose is the start pose."""
    start = np.asarray(ref.task.source_pose if start_pose is None else start_pose, np.float64)
    ratios = np.asarray(ratios, np.float64).reshape(N_CONTROL - 1, 3)
    g0 = ref.gaps(start, start_time)
    signs = ref.signs(start, start_time)
    gaps = np.vstack([g0, g0 * np.cumprod(ratios, axis=0)])       # (6, 3) at the control times
    t_ctrl = np.linspace(0.0, cfg.spline_time, N_CONTROL)
    t = cfg.dt * np.arange(cfg.nodes + 1)
    g = PchipInterpolator(t_ctrl, gaps, axis=0, extrapolate=False)(np.minimum(t, cfg.spline_time))
    poses = ref.pose(g, signs, start_time + t)
    poses[0] = start
    return poses


# ---------------------------------------------------------------------- the search
@dataclass
class CMAESResult:
    """``ratios`` (5, 3) and ``poses`` of the best trajectory, its reward ``reward`` (R / N),
    the initial mean's reward, the best reward after each iteration and the wall time (s)."""

    ratios: np.ndarray
    poses: np.ndarray
    reward: float
    initial_reward: float
    history: list = field(default_factory=list)
    evaluations: int = 0
    wall_time: float = 0.0
    details: dict = field(default_factory=dict)


def search(ref: Reference, evaluate: Callable[[np.ndarray], tuple[float, dict]],
           cfg: CMAESConfig | None = None, start_pose=None) -> CMAESResult:
    """CMA-ES for one problem. ``evaluate(poses) -> (R / N, details)`` rolls a trajectory out
    (poses (nodes + 1, 3) at the env's control steps) and returns Pan & Manocha 2017's normalised reward."""
    import cma

    cfg = cfg or CMAESConfig()
    t0 = time.perf_counter()
    z0 = np.zeros(3 * (N_CONTROL - 1))

    def score(z):
        ratios = ratios_from_z(z)
        poses = trajectory(ratios, ref, cfg, start_pose)
        r, det = evaluate(poses)
        return float(r), ratios, poses, det

    r0, best_ratios, best_poses, best_det = score(z0)
    best, history, n_eval = r0, [r0], 1
    es = cma.CMAEvolutionStrategy(z0, cfg.sigma0, {"popsize": cfg.popsize, "seed": cfg.seed + 1,
                                                   "maxiter": cfg.max_iterations, "verbose": -9})
    while not es.stop() and best < cfg.target_reward:
        zs = es.ask()
        fit = []
        for z in zs:
            r, ratios, poses, det = score(z)
            n_eval += 1
            fit.append(-r)
            if r > best:
                best, best_ratios, best_poses, best_det = r, ratios, poses, det
        es.tell(zs, fit)
        history.append(best)
    return CMAESResult(best_ratios, best_poses, best, r0, history, n_eval,
                       time.perf_counter() - t0, best_det)
