"""Statics of the stance planner (Bouyarmane 2011, "Multi-Contact Planning"): friction cones,
the equilibrium of gravity and contact forces (stage 1 of the IK: the CoM and forces that
balance gravity on fixed contact points; stage 3: the forces and joint torques of a given
configuration), stability margins, and OSQP's use for these small QPs.

Contact forces are f = K lambda, lambda >= 0, K the edges of the pyramid inscribed in the
friction cone (the paper's discretised cones); a grasp transmits any force but down, bounded by
the grip force.
"""

from __future__ import annotations

import numpy as np
import osqp
from scipy import sparse
from scipy.optimize import linprog

from taigym.sim import humanoid as hum
from taigym.sim.constants import GRAVITY

from . import osqp_quiet
from .stance_model import DEBUG, StanceModel

#: a grasp's force on the hand: any direction but down (columns +x, +y, +z, -x, -y). A bar that
#: presses the hand down lets a stance "squeeze" the body between a rail and a foot far from the
#: CoM; statically valid, but the executions of such stances fell as soon as the rear foot left
GRASP_GENERATORS = np.hstack([np.eye(3), -np.eye(3)[:, :2]])


def cone_generators(n: np.ndarray, mu: float) -> np.ndarray:
    """(3, 4) edges of the pyramid inscribed in the friction cone of normal n."""
    a = np.array([1.0, 0.0, 0.0]) if abs(n[0]) < 0.9 else np.array([0.0, 1.0, 0.0])
    t1 = np.cross(n, a)
    t1 /= np.linalg.norm(t1)
    t2 = np.cross(n, t1)
    return np.column_stack([n + mu * t1, n - mu * t1, n + mu * t2, n - mu * t2])


def csc(M: np.ndarray) -> sparse.csc_matrix:
    """The nonzeros of the dense matrix M in CSC form, stored as ``sparse.csc_matrix(M)`` stores
    them (by column, rows ascending), built directly: scipy's generic dense conversion cost
    about as much as OSQP's solve of these small QPs."""
    cols, rows = np.nonzero(M.T)          # column-major order
    indptr = np.zeros(M.shape[1] + 1, dtype=np.int32)
    np.cumsum(np.bincount(cols, minlength=M.shape[1]), out=indptr[1:])
    return sparse.csc_matrix((M.T[cols, rows], rows.astype(np.int32), indptr), shape=M.shape)


def solve_qp(P, q, A, lo, hi, *, approximate: bool = False):
    """min 1/2 x'Px + q'x s.t. lo <= Ax <= hi with OSQP; None if not solved. ``approximate``
    accepts an iterate that hit the iteration limit if it meets the constraints to 1e-4 (an SQP
    step need not be exact: the next iteration corrects it)."""
    scale = 1.0 / max(float(np.abs(np.diag(P)).max()), 1e-12)
    solver = osqp.OSQP(algebra="builtin")   # naming it skips a per-call backend search (~1 ms)
    # P's upper triangle (all OSQP reads; given the full P it extracts it, again a slow scipy path)
    solver.setup(csc(np.triu(P * scale)), q * scale, csc(A), lo, hi, verbose=False,
                 eps_abs=1e-7, eps_rel=1e-7, max_iter=4000, polishing=True)
    res = osqp_quiet.solve(solver)
    if res.info.status in ("solved", "solved inaccurate"):
        return res.x
    if approximate and res.x is not None and np.all(np.isfinite(res.x)):
        Ax = A @ res.x
        if np.all(Ax >= lo - 1e-4) and np.all(Ax <= hi + 1e-4):
            return res.x
    if DEBUG:
        print("osqp", res.info.status, P.shape, A.shape)
    return None


# ---------------------------------------------------------------------- stage 1: CoM and forces
def equilibrium_rows(model: StanceModel, support, mass: float):
    """Stage 1's equilibrium rows, linear in the CoM xy c and cone coefficients lambda:
    A_c c + A_f lambda = b, 0 <= lambda <= hi (grasps bounded by the grip force)."""
    pts = [fp for c in support for fp in model.force_points(c)]
    cols = []
    for pt, kind, n, mu in pts:
        K = cone_generators(n, mu) if kind == "cone" else GRASP_GENERATORS
        for k in range(K.shape[1]):
            cols.append((pt, K[:, k], kind))
    W = mass * GRAVITY
    # sum f = (0, 0, W); sum p x f = c x (0, 0, W), all three moments: gravity has no moment
    # about z, but a rail hand pulling uphill beside a sole pushed downhill makes one, which
    # only the sole's friction can hold (without this row, CoM targets on steep slopes were
    # "balanced" here and failed stage 3's full equilibrium, the search spending its budget)
    A_f = np.zeros((6, len(cols)))
    for k, (pt, g, _) in enumerate(cols):
        A_f[:3, k] = g
        A_f[3:, k] = np.cross(pt, g)
    # c x (0, 0, W) = (c_y W, -c_x W, 0), moved to the left side
    A_c = np.zeros((6, 2))
    A_c[3, 1], A_c[4, 0] = -W, W
    b = np.array([0.0, 0.0, W, 0.0, 0.0, 0.0])
    hi = np.array([hum.GRIP_FORCE if kind == "grasp" else np.inf for _, _, kind in cols])
    return A_c, A_f, b, hi


def com_target(model: StanceModel, support, mass: float, ref_xy: np.ndarray, margin: float = 0.0):
    """A CoM (x, y) at which gravity is balanced by forces at the support's contact points
    (linear in CoM and cone coefficients), nearest ``ref_xy`` with small forces; None if none.

    ``margin`` (m) > 0: the CoM nearest ``ref_xy`` (in the 1-norm) whose whole diamond
    |dx| + |dy| <= margin is balanced (:func:`stability_margin`), so a CoM tracked to within
    ``margin`` of it is still held; one LP."""
    if margin < 0:
        raise ValueError(f"margin must be >= 0, got {margin}")
    if margin > 0:
        return diamond_lp(model, support, mass, ref_xy=np.asarray(ref_xy, float), r=margin)
    A_c, A_f, b, hi_l = equilibrium_rows(model, support, mass)
    m = A_f.shape[1]
    A_eq = np.hstack([A_c, A_f])
    A = np.vstack([A_eq, np.hstack([np.zeros((m, 2)), np.eye(m)])])
    P = np.diag(np.r_[1e4, 1e4, np.full(m, 1e-4)])   # CoM near ref (weight per m^2), small forces
    qv = np.r_[-1e4 * ref_xy, np.zeros(m)]
    x = solve_qp(P, qv, A, np.r_[b, np.zeros(m)], np.r_[b, hi_l])
    if x is None or np.abs(A_eq @ x - b).max() > 1e-2 * b[2]:
        return None
    return x[:2]


DIAMOND = np.array([[1.0, 0.0], [-1.0, 0.0], [0.0, 1.0], [0.0, -1.0]])


def diamond_lp(model: StanceModel, support, mass: float, *, com_xy=None, ref_xy=None, r=None, cap=0.1):
    """The LP behind :func:`stability_margin` and ``com_target(margin=r)``: variables (c, r, the
    cone coefficients of each diamond corner c + r d, and for ``ref_xy`` the 1-norm slacks
    |c - ref|); each corner balanced with its own forces. Fixed c (``com_xy``) or r (``r``);
    maximises r, or with ``ref_xy`` minimises |c - ref|_1. Returns (r, c) with r free, else c."""
    A_c, A_f, b, hi_l = equilibrium_rows(model, support, mass)
    m, nk = A_f.shape[1], len(DIAMOND)
    W = b[2]
    nv = 3 + nk * m + 2
    # rows per corner, divided by W (lambda in body weights, moments in m):
    # A_c c + (A_c d) r + A_f lambda_k = b
    A_eq = np.zeros((6 * nk, nv))
    for k, d in enumerate(DIAMOND):
        A_eq[6 * k:6 * k + 6, :2] = A_c / W
        A_eq[6 * k:6 * k + 6, 2] = A_c @ d / W
        A_eq[6 * k:6 * k + 6, 3 + k * m:3 + (k + 1) * m] = A_f
    b_eq = np.tile(b / W, nk)
    bounds = ([(None, None)] * 2 + [(0.0, cap) if r is None else (float(r), float(r))]
              + [(0.0, h / W if np.isfinite(h) else None) for h in hi_l] * nk + [(0.0, None)] * 2)
    if com_xy is not None:
        bounds[0], bounds[1] = (float(com_xy[0]),) * 2, (float(com_xy[1]),) * 2
    cost = np.zeros(nv)
    A_ub = b_ub = None
    if ref_xy is not None:     # t >= |c - ref| per axis; a small force term (1e-4 m per body weight)
        cost[-2:] = 1.0
        cost[3:3 + nk * m] = 1e-4
        A_ub = np.zeros((4, nv))
        for i in range(2):
            A_ub[2 * i, i], A_ub[2 * i, nv - 2 + i] = 1.0, -1.0
            A_ub[2 * i + 1, i], A_ub[2 * i + 1, nv - 2 + i] = -1.0, -1.0
        b_ub = np.array([ref_xy[0], -ref_xy[0], ref_xy[1], -ref_xy[1]])
    else:
        cost[2] = -1.0
    res = linprog(cost, A_ub=A_ub, b_ub=b_ub, A_eq=A_eq, b_eq=b_eq, bounds=bounds, method="highs")
    if res.status != 0:
        return None
    return res.x[:2] if r is not None else (float(res.x[2]), res.x[:2])


def stability_margin(model: StanceModel, support, mass: float, com_xy: np.ndarray | None = None,
                     cap: float = 0.1) -> tuple[float, np.ndarray] | None:
    """The largest radius r (m, at most ``cap``) of a diamond |dx| + |dy| <= r of CoM positions
    around c that the support balances, with that c: c = ``com_xy`` if given, else a best
    centre. Each corner c + r d is balanced with its own forces; the balanced set is convex, so
    the whole diamond is. One LP (HiGHS: exact and deterministic; a QP form of this stopped at
    OSQP's iteration limit on slope supports). None if no c balances (not even r = 0)."""
    return diamond_lp(model, support, mass, com_xy=com_xy, cap=cap)


# ---------------------------------------------------------------------- stage 3: forces for q
def contact_forces(model: StanceModel, support):
    """Forces at the support's points for the current configuration, with joint torques:
    min ||lambda||^2 + ||tau/tau_max||^2 s.t. floating-base equilibrium, cones, torque limits.
    Returns (points, tau, residual) or None."""
    rob = model.robot
    G = rob.gravity_forces()
    cols, rows = force_columns(model, support, rob.kinematics())
    m = len(cols)
    B = np.column_stack([cc[0] for cc in cols])      # (27, m): generalised force per coefficient
    tmax = hum.TORQUE_LIMITS
    # tau = -(G_q + B_q lambda); equilibrium: G_b + B_b lambda = 0
    Bq = B[6:] / tmax[:, None]
    gq = G[6:] / tmax
    P = 2 * (Bq.T @ Bq) + 2e-6 * np.eye(m)
    qv = 2 * Bq.T @ gq
    hi_l = np.array([hum.GRIP_FORCE if kind == "grasp" else np.inf for _, _, kind in cols])
    A = np.vstack([B[:6], np.eye(m), Bq])
    lo = np.r_[-G[:6], np.zeros(m), -1.0 - gq]
    hi = np.r_[-G[:6], hi_l, 1.0 - gq]
    # OSQP may stop at its iteration limit on a feasible problem (the rail hand carrying most of
    # the weight beside a sole on a slope steeper than its cone: a linear program finds forces
    # within every bound), and such a stance was lost. Its last iterate is taken if it meets
    # the bounds to 1e-4: what matters is that the forces are valid (clipped and re-checked
    # below, and check_step re-checks every stance), not that they are the least
    x = solve_qp(P, qv, A, lo, hi, approximate=True)
    if x is None:
        return None
    # OSQP meets lambda >= 0 to its tolerance: a coefficient of -1e-7 on a cone edge opposite a
    # loaded one left a sole's force just outside the cone on a 36 deg slope (the checker's
    # finding); the residual and torques below are those of the clipped forces
    x = np.maximum(x, 0.0)
    resid = float(np.abs(B[:6] @ x + G[:6]).max())
    tau = -(G[6:] + B[6:] @ x)
    if resid > 1.0 or np.any(np.abs(tau) > tmax * 1.01):
        return None
    return point_forces(rows, cols, x), tau, resid


def force_columns(model: StanceModel, support, kin: hum.Kinematics):
    """The support's contact points and cone generators for the configuration ``kin``: ``cols``
    (generalised force (27,), force (3,), kind) per cone coefficient and ``rows`` (limb, point,
    kind, normal, mu, first column, columns) per point. The points are the targets' (the IK met
    them); the Jacobians are the configuration's."""
    cols, rows = [], []
    for c in support:
        link = model.robot.link_index[hum.LIMB_LINK[c.limb]]
        fps = model.force_points(c)
        Jl, _ = kin.jacobians(link, np.array([fp[0] for fp in fps]))
        for (pt, kind, n, mu), J in zip(fps, Jl):
            K = cone_generators(n, mu) if kind == "cone" else GRASP_GENERATORS
            rows.append((c.limb, pt, kind, n, mu, len(cols), K.shape[1]))
            for k in range(K.shape[1]):
                cols.append((J.T @ K[:, k], K[:, k], kind))
    return cols, rows


def point_forces(rows, cols, lam: np.ndarray) -> list:
    """(limb, point, force (3,), kind, normal, mu) per point of :func:`force_columns` for the
    cone coefficients ``lam``."""
    return [(limb, pt, sum(lam[start + k] * cols[start + k][1] for k in range(cnt)), kind, n, mu)
            for limb, pt, kind, n, mu, start, cnt in rows]


def com_accel_margin(model: StanceModel, support, com: np.ndarray, cap: float = 5.0) -> float:
    """The least, over the four horizontal directions d (+-x, +-y), of the largest CoM
    acceleration a (m/s^2, at most ``cap``) that forces at the support's contact points (its
    friction cones, grasps bounded) give with no moment about the CoM ``com`` (3-D): total
    force m (a d + g e_z). 0 if some direction has none. One LP per direction (HiGHS)."""
    _, A_f, b, hi = equilibrium_rows(model, support, model.robot.total_mass)
    m = A_f.shape[1]
    A = np.zeros((6, m + 1))
    A[:3, :m] = A_f[:3]
    A[3:, :m] = A_f[3:] - np.cross(com, A_f[:3].T).T     # moments about the CoM, not the origin
    bounds = [(0.0, h if np.isfinite(h) else None) for h in hi] + [(None, cap)]
    cost = np.zeros(m + 1)
    cost[-1] = -1.0
    out = cap
    for d in DIAMOND:
        A[:2, -1] = -model.robot.total_mass * d
        res = linprog(cost, A_eq=A, b_eq=b, bounds=bounds, method="highs")
        out = min(out, float(res.x[-1]) if res.status == 0 else 0.0)
    return max(out, 0.0)
