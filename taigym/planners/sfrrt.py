"""SFRRT* (the SFRRT* paper, 2024): spill-free RRT* path planning and spill-free time parameterization.

Pure functions of the problem (no Gymnasium, no envs). A configuration is the container's planar
pose q = (x, z, tilt) in m, m, rad; distances weigh a radian of tilt as ``tilt_weight`` metres.

1. :func:`plan_path` - RRT* (k nearest neighbours from a scipy cKDTree, choose-parent and
   rewiring) whose **informed sampler** draws tilts only within the maximum tilt angle of
   :mod:`taigym.models.max_tilt` (times ``tilt_fraction``: the static bound leaves no room for
   the accelerations of the motion), then greedy **shortcutting**.
2. :func:`time_parameterize` - jerk-limited timing by **chaining Ruckig state-to-state calls**
   over the waypoints (Ruckig's own multi-waypoint mode needs its cloud server: not used). Each
   interior waypoint gets a pass-through velocity along the bisector of its two segments,
   shrunk with the turn; if the timed motion then leaves the collision-free corridor, the
   waypoints are passed at rest (straight segments, phase-synchronised).
3. :func:`spill_free_time_parameterize` - the SFRRT* paper's Algorithm 1 (SFTP): divide the max jerk by
   ``rate`` until the spill-free classifier accepts the trajectory, at most ``sftp_iters`` times;
   then ``margin_levels`` (default 1) more divisions (not in the paper: the first accepted
   trajectory is on the classifier's decision boundary, where it errs most).
   Here the acceleration limit follows the jerk (a <= J * ``accel_time``): with a fixed
   acceleration limit, lowering the jerk alone would not lower the peak acceleration of long
   moves, which is what tilts the liquid.

The classifier is any callable ``classifier(traj, props) -> bool`` (True: spill-free), ``props``
= (r_b, r_u, h_c, h_w) as in the paper. :class:`QuasiStaticClassifier` is the default: a
physics placeholder, not the SFRRT* paper's learned transformer.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
from ruckig import InputParameter, Result, Ruckig, Synchronization, Trajectory
from scipy.spatial import cKDTree

from ..models.max_tilt import max_tilt
from ..sim.collide2d import collides, segment_collides
from ..sim.constants import GRAVITY



@dataclass(frozen=True)
class Problem:
    """Start and goal poses, boxes (x_centre, z_centre, width, height), the container hull in its
    frame (K, 2) and properties (r_b, r_u, h_c, h_w), the room (W, H); SI units."""

    start: tuple[float, float, float]
    goal: tuple[float, float, float]
    obstacles: tuple
    hull: np.ndarray
    props: tuple[float, float, float, float]
    room: tuple[float, float]

    @property
    def theta_max(self) -> float:
        """The SFRRT* paper's maximum tilt for this container and fill (rad)."""
        return max_tilt(*self.props)

    def path_free(self, poses: np.ndarray) -> bool:
        """No pose of (N, 3) ``poses`` puts the container into a box or the room's walls."""
        return not collides(self.hull, poses, self.obstacles, self.room).any()


@dataclass
class SFRRTConfig:
    max_iters: int = 3000         # RRT* samples
    time_budget: float = 1.5      # s for RRT*; it also stops at max_iters
    refine_iters: int = 150       # samples spent improving the first path found
    step: float = 0.2            # m, steering distance (tilt weighted)
    goal_bias: float = 0.1
    tilt_weight: float = 0.05     # m per rad in the configuration-space metric
    tilt_fraction: float = 0.3    # the sampler's tilt bound, as a fraction of theta_max
    clearance: float = 0.005      # m, hull inflation for planning
    check_step: float = 0.01      # m, collision checks along edges
    max_velocity: tuple = (0.72, 0.72, 1.8)        # m/s, m/s, rad/s
    max_acceleration: tuple = (6.0, 6.0, 12.0)     # m/s^2, m/s^2, rad/s^2
    max_jerk: tuple = (80.0, 80.0, 160.0)          # initial jerk of SFTP, m/s^3, rad/s^3
    accel_time: float = 0.25      # s: a <= J * accel_time
    rate: float = 1.6             # SFTP jerk decrease factor
    sftp_iters: int = 14          # SFTP max iterations
    margin_levels: int = 1        # extra jerk divisions after the classifier's first acceptance
    dt: float = 0.05              # s, trajectory sampling (the env's control step)


@dataclass
class TimedTrajectory:
    """Samples every ``dt`` s from t = 0 to the end (inclusive): pos, vel, acc (N, 3)."""

    t: np.ndarray
    pos: np.ndarray
    vel: np.ndarray
    acc: np.ndarray
    jerk: tuple = ()
    waypoints: np.ndarray = field(default_factory=lambda: np.zeros((0, 3)))

    @property
    def duration(self) -> float:
        return float(self.t[-1]) if len(self.t) else 0.0


# ---------------------------------------------------------------------- path
def _scaled(q: np.ndarray, w: float) -> np.ndarray:
    return np.asarray(q, dtype=np.float64) * np.array([1.0, 1.0, w])


def plan_path(problem: Problem, cfg: SFRRTConfig | None = None, rng: np.random.Generator | None = None
              ) -> np.ndarray:
    """RRT* with the tilt-informed sampler, then shortcutting. Returns waypoints (K, 3) from
    start to goal; raises RuntimeError if no path was found within the budget."""
    cfg = cfg or SFRRTConfig()
    hull = problem.hull
    start, goal = np.asarray(problem.start, float), np.asarray(problem.goal, float)
    bound = cfg.tilt_fraction * problem.theta_max
    w = cfg.tilt_weight
    W, H = problem.room

    def edge_free(a, b) -> bool:
        return not segment_collides(hull, a, b, problem.obstacles, problem.room, cfg.check_step, w)

    def sample(rng: np.random.Generator) -> np.ndarray:
        # informed: positions in the room, tilts within the spill bound (half the samples
        # upright: the safest tilt, and the one narrow gaps are passed at)
        tilt = (2 * rng.random() - 1) * bound if rng.random() < 0.5 else 0.0
        return np.array([rng.random() * W, rng.random() * H, tilt])

    if collides(hull, np.stack([start, goal]), problem.obstacles, problem.room).any():
        raise RuntimeError("start or goal in collision with the planning clearance")
    return rrt_star(start, goal, sample,
                    lambda q: bool(collides(hull, q[None], problem.obstacles, problem.room)[0]),
                    edge_free, np.array([1.0, 1.0, w]), cfg, rng)


def rrt_star(start: np.ndarray, goal: np.ndarray, sample: Callable, collides_at: Callable,
             edge_free: Callable, weights: np.ndarray, cfg: SFRRTConfig,
             rng: np.random.Generator | None = None) -> np.ndarray:
    """RRT* (k nearest neighbours from a cKDTree, choose-parent and rewiring) from ``start`` to
    ``goal`` in a space with the metric |weights * dq|; ``sample(rng)`` draws a configuration,
    ``collides_at(q)`` and ``edge_free(a, b)`` check them; then greedy shortcutting. Returns the
    waypoints (K, n); raises RuntimeError if no path was found within the budget."""
    rng = rng or np.random.default_rng(0)

    def scaled(q):
        return np.asarray(q, dtype=np.float64) * weights

    if edge_free(start, goal):
        return np.stack([start, goal])
    nodes = [start]
    parent = [-1]
    cost = [0.0]
    children: list[set] = [set()]
    tree, tree_n = None, 0
    goal_node, best = -1, math.inf
    t0 = time.perf_counter()
    found_at = -1
    for it in range(cfg.max_iters):
        if time.perf_counter() - t0 > cfg.time_budget:
            break
        if found_at >= 0 and it - found_at >= cfg.refine_iters:
            break
        q = goal.copy() if rng.random() < cfg.goal_bias else sample(rng)
        pts = np.asarray(nodes)
        sp = scaled(pts)
        if tree is None or len(nodes) - tree_n >= 64:
            tree, tree_n = cKDTree(sp), len(nodes)
        # nearest: the k-d tree over the first tree_n nodes, a scan over the rest
        d_tree, i_tree = tree.query(scaled(q))
        tail = sp[tree_n:]
        i_near = int(i_tree)
        if len(tail):
            dt_ = np.linalg.norm(tail - scaled(q), axis=1)
            j = int(np.argmin(dt_))
            if dt_[j] < d_tree:
                i_near = tree_n + j
        near_q = pts[i_near]
        dist = float(np.linalg.norm(scaled(q - near_q)))
        if dist < 1e-9:
            continue
        new = near_q + (q - near_q) * min(1.0, cfg.step / dist)
        if collides_at(new):
            continue
        n = len(nodes)
        k = min(n, int(math.ceil(math.e * math.log(n + 1))) + 1)
        cand = set(np.atleast_1d(tree.query(scaled(new), k=min(k, tree_n))[1]).tolist())
        if len(tail):
            cand |= set((tree_n + np.argsort(np.linalg.norm(tail - scaled(new), axis=1))[:k]).tolist())
        cand = [c for c in cand if c < n]
        cd = {c: cost[c] + float(np.linalg.norm(scaled(new - pts[c]))) for c in cand}
        best_parent = None
        for c in sorted(cd, key=cd.get):  # choose parent: cheapest collision-free
            if edge_free(pts[c], new):
                best_parent = c
                break
        if best_parent is None:
            continue
        nodes.append(new)
        parent.append(best_parent)
        cost.append(cd[best_parent])
        children.append(set())
        children[best_parent].add(n)
        for c in cand:  # rewire, and pass the saving on to c's subtree (costs stay exact, so a
            # node can never be rewired below its own descendant)
            nc = cost[n] + float(np.linalg.norm(scaled(pts[c] - new)))
            if nc < cost[c] - 1e-9 and edge_free(new, pts[c]):
                children[parent[c]].discard(c)
                children[n].add(c)
                parent[c] = n
                delta, stack = cost[c] - nc, [c]
                while stack:
                    m = stack.pop()
                    cost[m] -= delta
                    stack.extend(children[m])
        dg = float(np.linalg.norm(scaled(goal - new)))
        if dg <= cfg.step and cost[n] + dg < best and edge_free(new, goal):
            goal_node, best = n, cost[n] + dg
            found_at = it if found_at < 0 else found_at
    if goal_node < 0:
        raise RuntimeError(f"SFRRT*: no path found in {len(nodes)} nodes")
    path = [goal]
    i = goal_node
    while i >= 0:
        path.append(nodes[i])
        i = parent[i]
    path = np.asarray(path[::-1])
    return shortcut(path, edge_free)


def shortcut(path: np.ndarray, edge_free: Callable) -> np.ndarray:
    """Greedy shortcutting: from each kept waypoint jump to the farthest one in straight sight."""
    out = [path[0]]
    i = 0
    while i < len(path) - 1:
        j = len(path) - 1
        while j > i + 1 and not edge_free(path[i], path[j]):
            j -= 1
        out.append(path[j])
        i = j
    return np.asarray(out)


# ---------------------------------------------------------------------- timing
def _ruckig_segment(p0, v0, p1, v1, vmax, amax, jmax) -> Trajectory:
    otg = Ruckig(3)
    inp = InputParameter(3)
    inp.current_position, inp.current_velocity, inp.current_acceleration = list(p0), list(v0), [0.0] * 3
    inp.target_position, inp.target_velocity, inp.target_acceleration = list(p1), list(v1), [0.0] * 3
    inp.max_velocity, inp.max_acceleration, inp.max_jerk = list(vmax), list(amax), list(jmax)
    inp.synchronization = Synchronization.Phase
    traj = Trajectory(3)
    res = otg.calculate(inp, traj)
    if res not in (Result.Working, Result.Finished):
        raise RuntimeError(f"Ruckig failed on a segment: {res}")
    return traj


def _pass_velocities(wp: np.ndarray, vmax: np.ndarray, w: float) -> np.ndarray:
    v = np.zeros_like(wp)
    for k in range(1, len(wp) - 1):
        a, b = _scaled(wp[k] - wp[k - 1], w), _scaled(wp[k + 1] - wp[k], w)
        la, lb = np.linalg.norm(a), np.linalg.norm(b)
        if la < 1e-9 or lb < 1e-9:
            continue
        a, b = a / la, b / lb
        cos = float(a @ b)
        if cos <= 0.0:
            continue
        d = (a + b) / np.linalg.norm(a + b) / np.array([1.0, 1.0, w])
        # as fast as the turn allows: half speed at most, nothing at right angles
        s = 0.5 * cos * cos * float(np.min(vmax / np.maximum(np.abs(d), 1e-9)))
        v[k] = d * s
    return v


def time_parameterize(waypoints: np.ndarray, jerk, problem: Problem | None = None,
                      cfg: SFRRTConfig | None = None) -> TimedTrajectory:
    """Chain Ruckig state-to-state trajectories through the waypoints with max jerk ``jerk``
    (3,) (and a <= min(max_acceleration, jerk * accel_time)); sample every ``cfg.dt``. The
    waypoints are passed on the move unless the timed path then leaves ``problem.path_free``."""
    cfg = cfg or SFRRTConfig()
    wp = np.asarray(waypoints, dtype=np.float64)
    jerk = np.asarray(jerk, dtype=np.float64)
    vmax = np.asarray(cfg.max_velocity, dtype=np.float64)
    amax = np.minimum(np.asarray(cfg.max_acceleration), jerk * cfg.accel_time)
    for passing in (True, False):
        vel = _pass_velocities(wp, vmax, cfg.tilt_weight) if passing and len(wp) > 2 else np.zeros_like(wp)
        segs = [_ruckig_segment(wp[k], vel[k], wp[k + 1], vel[k + 1], vmax, amax, jerk)
                for k in range(len(wp) - 1)]
        traj = _sample(segs, cfg.dt, wp, tuple(jerk))
        if problem is None or not passing or len(wp) <= 2 or problem.path_free(traj.pos):
            break
    return traj


def _sample(segs: Sequence[Trajectory], dt: float, wp: np.ndarray, jerk: tuple) -> TimedTrajectory:
    ends = np.cumsum([s.duration for s in segs])
    total = float(ends[-1]) if len(ends) else 0.0
    n = int(math.ceil(total / dt - 1e-9)) + 1
    ts = np.arange(n) * dt
    pos, vel, acc = np.zeros((n, 3)), np.zeros((n, 3)), np.zeros((n, 3))
    starts = np.concatenate([[0.0], ends[:-1]])
    for i, t in enumerate(ts):
        k = min(int(np.searchsorted(ends, t, side="right")), len(segs) - 1)
        p, v, a = segs[k].at_time(min(t - starts[k], segs[k].duration))
        pos[i], vel[i], acc[i] = p, v, a
    return TimedTrajectory(ts, pos, vel, acc, jerk, wp)


class QuasiStaticClassifier:
    """Placeholder spill-free classifier (not the SFRRT* paper's learned transformer): the liquid's
    surface follows the effective gravity g - a, tilted from the vertical by
    atan(a_x / (g + a_z)); the trajectory is called spill-free when |tilt| + ``amplification`` x
    that angle stays below the maximum tilt of the container and fill at every sample (the
    factor covers the sloshing overshoot of a changing acceleration)."""

    def __init__(self, amplification: float = 2.5):
        self.amplification = float(amplification)

    def __call__(self, traj: TimedTrajectory, props: Sequence[float]) -> bool:
        theta_max = max_tilt(*props)
        a = traj.acc
        gz = GRAVITY + a[:, 1]
        if np.any(gz <= 0):
            return False
        psi = np.abs(traj.pos[:, 2]) + self.amplification * np.abs(np.arctan2(a[:, 0], gz))
        return bool(np.max(psi) <= theta_max)


def spill_free_time_parameterize(waypoints: np.ndarray, problem: Problem,
                                 classifier: Callable | None = None,
                                 cfg: SFRRTConfig | None = None) -> tuple[TimedTrajectory, bool]:
    """The SFRRT* paper's Algorithm 1 (SFTP). Returns (trajectory, accepted by the classifier)."""
    cfg = cfg or SFRRTConfig()
    classifier = classifier or QuasiStaticClassifier()
    jerk = np.asarray(cfg.max_jerk, dtype=np.float64)
    traj, margin = None, None
    for _ in range(cfg.sftp_iters + cfg.margin_levels):
        traj = time_parameterize(waypoints, jerk, problem, cfg)
        if classifier(traj, problem.props):
            # the first accepted trajectory sits on the classifier's boundary, where it errs
            # most: step margin_levels further down, to one it accepts too (a slower timing can
            # ring the liquid harder: acceptance is not monotonic in the jerk)
            margin = cfg.margin_levels if margin is None else margin - 1
            if margin <= 0:
                return traj, True
        jerk = jerk / cfg.rate
    return traj, False


@dataclass
class Plan:
    trajectory: TimedTrajectory
    accepted: bool
    path_seconds: float
    timing_seconds: float

    @property
    def planning_seconds(self) -> float:
        return self.path_seconds + self.timing_seconds


def sfrrt(problem: Problem, classifier: Callable | None = None, cfg: SFRRTConfig | None = None,
          rng: np.random.Generator | None = None, fixed_jerk=None, planner: Callable = plan_path) -> Plan:
    """The whole planner: path (``planner``: RRT* + shortcut), then SFTP; with ``fixed_jerk``
    (3,) the baseline instead: the same path timed once with that jerk."""
    cfg = cfg or SFRRTConfig()
    t0 = time.perf_counter()
    path = planner(problem, cfg, rng)
    t1 = time.perf_counter()
    if fixed_jerk is None:
        traj, ok = spill_free_time_parameterize(path, problem, classifier, cfg)
    else:
        traj, ok = time_parameterize(path, fixed_jerk, problem, cfg), True
    return Plan(traj, ok, t1 - t0, time.perf_counter() - t1)
