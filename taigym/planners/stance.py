"""Bouyarmane & Kheddar's multi-contact stance planner: contacts, stances, the stance IK and a
best-first search over adjacent stances.

* A **contact** c = (robot link surface, environment surface, position on it, yaw): here a limb
  (a sole or a hand) on a :class:`~taigym.envs.multicontact_tasks.Surface` at coordinate ``u``
  along the surface's tangent (the lateral coordinate is fixed by the limb's side) and yaw 0.
* A **stance** is a set of contacts, at most one per limb. Stances are **adjacent** when one is
  the other plus (Adj+) or minus (Adj-) one contact. In Adj+ the new contact's position is left
  undetermined (the paper's equivalence class [sigma']); the IK chooses it, pulled towards the
  goal.
* The **IK problem** for a pair (sigma, sigma'): a configuration q (floating base + 21 joints)
  touching every contact of the larger stance, in static equilibrium on the contacts of the
  smaller one (that is q in F_sigma intersected with F_sigma'), with contact forces in
  linearised (pyramidal, inscribed) friction cones, grasps bounded by the grip force, joint
  torques within limits, joints within limits and no collision with the scene (on a ladder,
  both hands and any foot not in contact also stay in front of the plane of rungs). It is solved in
  two stages, each by a maintained QP solver (OSQP) on Jacobians from pybullet's forward
  kinematics: (1) the centre of mass xy and forces that balance gravity on the fixed contact
  points (linear in both), then (2) an SQP on the configuration (contacts, CoM, upright torso,
  posture, progress of the free contact; joint limits as bounds; its step bound shrinks when
  the objective rises), polished by a Gauss-Newton projection onto the contacts (so every
  contact is met to POS_TOL, well inside :func:`check_step`'s tolerance), then (3) the forces for that
  configuration: min ||f||^2 + ||tau / tau_max||^2 s.t. the six floating-base equilibrium rows
  G_b + J_b^T f = 0, cones, |tau| <= tau_max. Collision is checked with pybullet's closest points.
  The paper solves one NLP with IPOPT; the staged form is what the listed solvers allow.
* A **transition** (Bouyarmane & Kheddar's motion between adjacent stances): a foot's Adj+ step is kept
  only if a configuration of the smaller stance exists with that foot lifted clear of the
  terrain midway between its old and new places, in equilibrium (:func:`solve_transition`).
  The executor's swing does not follow it (that measured worse); the check only prunes moves.
* The **search**: best-first over stances (priority: distance of the feet contacts to the goal
  over a step length, plus a small cost per stance), lazily: a neighbour (Adj+ or Adj-) is
  queued with an optimistic priority and its IK solved only when it is popped; stances are
  identified on a 5 cm grid of contact positions. It runs until both feet are within the task's
  goal radius, within a node and wall-time budget. It returns a
  :class:`Plan` whose ``status`` is ``"solved"``, ``"budget"`` (node or time budget spent) or
  ``"exhausted"`` (no stance left to expand).

:func:`check_step` verifies a returned step independently of the solver (its own statics, not
the solver's Jacobians): contact points on their surfaces, forces in the true friction cones,
Newton-Euler equilibrium residual, joint torques (from the moments about each joint axis) and
joint limits, collision.
"""

from __future__ import annotations

import heapq
import math
import time
from dataclasses import dataclass, field

import numpy as np
import osqp
import pybullet as p
from scipy import sparse
from scipy.optimize import linprog
from scipy.spatial.transform import Rotation

from taigym.envs.multicontact_tasks import BAR_RADIUS, MultiContactTask, Surface
from taigym.sim import humanoid as hum

FOOT_Y = 0.10           #: m, lateral offset of a sole centre on a plane or rung
HAND_RUNG_Y = 0.20      #: m, lateral offset of a hand on a rung or a wall
GRASP_DIR = {"rail": (0.0, 0.0, 1.0), "rung": (-0.6, 0.0, 0.8)}   # hand centre from the bar's axis
POS_TOL = 2e-3          #: m, contact position residual accepted from the IK
ROT_TOL = 0.02          #: rad, sole orientation residual
COLLISION_TOL = 0.015   #: m of penetration tolerated (pybullet's contact margins)
REACH = 0.9             #: m, farthest a limb is tried ahead of where it is
SINGLE_SUPPORT_COST = 3.0   #: search cost (step lengths) of a one-contact stance left by releasing a hand
STEP_LENGTH = 0.3       #: m, heuristic scale: one stance change moves a foot about this far
DEBUG = False
W_CONTACT = 1e6        # IK weights: contacts (per m^2; soles' rotation at a tenth, per rad^2)
TRUST = 0.08           # m, rad: SQP trust region per step
W_COM = 1e4            # CoM on its target (per m^2)
W_UPRIGHT = 1e2        # torso upright (per rad^2)
MAX_TILT = math.radians(50)   # torso tilt from upright accepted in a stance configuration
LEAN = 0.4             # Adj+ CoM target: this fraction of the way from over the feet to the reach point,
LEAN_FRONT = 0.1       # or this when a support hand is in front of the body (wall, rung) or the new contact is
#                        a hand on a rung. Leaning there put the CoM ahead of the soles, held only by that hand:
#                        the executed shift back never arrived (a hand pushing on a wall can't pull it back) or
#                        the free arm was thrown forward (ladder). The rail runs alongside the path: leaning
#                        along it keeps the CoM between hand and feet, and stepping up onto the step needs it
HAND_PLANE_CLEARANCE = 0.03   # m, a hand centre's least distance from a ladder's plane (a grasp: 0.05)
FOOT_PLANE_CLEARANCE = 0.12   # m, a free sole centre's (its toe is 0.11 m ahead of it)
SWING_CLEARANCE = 0.06  # m, a swinging sole centre's height above the terrain under it at the transition
LIFT_TOL = 0.02        # m, the transition's lift point is a waypoint: met to this, not to POS_TOL
W_PROGRESS = 10.0      # pull of the new contact along the surface towards the goal (per m)
COM_ACCEL_MARGIN = 0.4  # m/s^2, least CoM acceleration a sole-and-hands support must give (see _line_support_ok)
_SIDE = {"right_foot": -1.0, "left_foot": 1.0, "right_hand": -1.0, "left_hand": 1.0}


@dataclass(frozen=True, order=True)
class Contact:
    """Bouyarmane & Kheddar's contact: limb (robot link surface), environment surface, position u (m) and yaw."""

    limb: str
    surface: str
    u: float
    yaw: float = 0.0


KEY_RESOLUTION = 0.05   #: m, stances whose contacts differ by less are one search node


def stance_key(stance) -> tuple:
    """The search's identity of a stance: contacts with u on a KEY_RESOLUTION grid (a hand 1 cm
    higher on the wall is not a new way forward; at 1 cm the search drowned in such copies)."""
    return tuple(sorted((c.limb, c.surface, round(c.u / KEY_RESOLUTION)) for c in stance))


@dataclass
class Step:
    """One configuration of the plan: ``touching`` (the larger stance, all in contact) and
    ``support`` (the stance whose forces hold it), the configuration, per-point contact forces
    (N, world frame) and joint torques (N m)."""

    touching: tuple[Contact, ...]
    support: tuple[Contact, ...]
    base_pos: np.ndarray
    base_quat: np.ndarray
    q: np.ndarray
    points: list            # (limb, world point, force (3,), kind, normal, mu)
    tau: np.ndarray
    #: Adj+ only: Bouyarmane & Kheddar's transition, a configuration (base_pos, base_quat, q) of ``support``
    #: alone with the new contact's limb lifted clear of the terrain between its old place and
    #: the new one (:func:`solve_transition`); kept for inspection, the executor does not use it
    transition: tuple | None = None


@dataclass
class Plan:
    status: str                       # "solved" | "budget" | "exhausted"
    steps: list[Step] = field(default_factory=list)
    stances: list[tuple[Contact, ...]] = field(default_factory=list)
    nodes: int = 0
    ik_calls: int = 0
    seconds: float = 0.0

    @property
    def solved(self) -> bool:
        return self.status == "solved"


# ---------------------------------------------------------------------- the model
class StanceModel:
    """The robot and the task's scene in a private pybullet client (DIRECT), with the contact
    geometry of Bouyarmane & Kheddar's contacts."""

    def __init__(self, task: MultiContactTask):
        self.task = task
        self.client = p.connect(p.DIRECT)
        self.robot = hum.Robot.load(self.client)
        boxes, bars = task.scene()
        self.scene_ids = hum.build_scene(self.client, boxes, bars, visual=False)
        self.surfaces: dict[str, Surface] = {s.name: s for s in task.surfaces()}
        self.sole_local = {f: np.mean(hum.LIMB_POINTS[f], axis=0) for f in hum.FEET}
        # hands stay on the robot's side of a ladder's plane of rungs (point, normal towards the
        # robot): the gaps between rungs are collision-free, and the CoM term of the IK threw a
        # free hand through them, where the executed swing then caught it behind a rung
        self.ladder_planes = []
        if task.family == "ladder":
            a = task.size
            self.ladder_planes.append((np.array([task.start, 0.0, 0.0]), np.array([-math.sin(a), 0.0, math.cos(a)])))
        # contact -> (point, rotation): target() is a pure function of the contact, asked for
        # every contact in every SQP iteration (its scipy rotation cost ~0.1 ms a call)
        self._targets: dict[Contact, tuple[np.ndarray, np.ndarray | None]] = {}

    def hand_clearance(self) -> float:
        """Least signed distance (m) of a hand centre from the planes of :attr:`ladder_planes`."""
        return min([float((self.limb_ref(h) - o) @ n) for o, n in self.ladder_planes for h in hum.HANDS],
                   default=math.inf)

    def close(self) -> None:
        try:
            p.disconnect(physicsClientId=self.client)
        except p.error:
            pass

    # ------------------------------------------------------------------ contact geometry
    def target(self, c: Contact) -> tuple[np.ndarray, np.ndarray | None]:
        """World target of the limb's reference point (sole centre / hand centre) and, for
        soles, the target rotation of the foot frame (x along the surface, z its normal).
        Fresh arrays (callers may keep or modify them) copied from a per-contact cache."""
        if c not in self._targets:
            self._targets[c] = self._target(c)
        pt, R = self._targets[c]
        return pt.copy(), (None if R is None else R.copy())

    def _target(self, c: Contact) -> tuple[np.ndarray, np.ndarray | None]:
        s = self.surfaces[c.surface]
        pt = s.point(c.u)
        n, t = np.asarray(s.normal, float), np.asarray(s.t, float)
        lateral = np.array([0.0, _SIDE[c.limb], 0.0])
        if c.limb in hum.FEET:
            pt = pt + FOOT_Y * lateral + (BAR_RADIUS * n if s.kind == "bar" else 0.0)
            if s.kind == "bar":
                t = np.array([1.0, 0.0, 0.0])
            x = Rotation.from_rotvec(c.yaw * n).apply(t)
            return pt, np.column_stack([x, np.cross(n, x), n])
        if s.kind == "bar":
            d = np.asarray(GRASP_DIR["rung" if c.surface.startswith("rung") else "rail"], float)
            d /= np.linalg.norm(d)
            off = HAND_RUNG_Y * lateral if c.surface.startswith("rung") else 0.0
            return pt + off + (BAR_RADIUS + hum.HAND_RADIUS) * d, None
        return pt + HAND_RUNG_Y * lateral + hum.HAND_RADIUS * n, None

    def force_points(self, c: Contact) -> list[tuple[np.ndarray, str, np.ndarray, float]]:
        """(world point, kind "cone" | "grasp", normal, mu) for the contact at its target."""
        s = self.surfaces[c.surface]
        n = np.asarray(s.normal, float)
        pt, R = self.target(c)
        if c.limb in hum.FEET:
            if s.kind == "bar":   # the sole across a rung: a line contact, two points
                return [(pt + R @ np.array([0, dy, 0]), "cone", n, s.mu) for dy in (-0.035, 0.035)]
            corners = np.asarray(hum.LIMB_POINTS[c.limb]) - self.sole_local[c.limb]
            return [(pt + R @ np.array([cx, cy, 0.0]), "cone", n, s.mu) for cx, cy, _ in corners]
        if s.kind == "bar":
            return [(pt, "grasp", n, s.mu)]
        return [(pt, "cone", n, s.mu)]

    def limb_ref(self, limb: str, kin: hum.Kinematics | None = None) -> np.ndarray:
        """Current world position of the limb's reference point (``kin``: the current
        configuration's kinematics, if already read)."""
        fk = kin or self.robot
        if limb in hum.FEET:
            o, R = fk.limb_frame(limb)
            return o + R @ self.sole_local[limb]
        return fk.limb_points(limb)[0]

    # ------------------------------------------------------------------ state
    def set(self, x) -> None:
        """Set the configuration x = (base position, base quaternion xyzw, joint angles) at rest."""
        self.robot.set_state(x[0], x[1], x[2])

    def collides(self, touching) -> bool:
        """True if a link other than the touching limbs' penetrates the scene."""
        allowed = {self.robot.link_index[hum.LIMB_LINK[c.limb]] for c in touching}
        for bid in self.scene_ids:
            for cp in p.getClosestPoints(self.robot.body, bid, 0.0, physicsClientId=self.client):
                if (cp[8] < -COLLISION_TOL and cp[3] not in allowed) or cp[8] < -2.5 * COLLISION_TOL:
                    if DEBUG:     # contact limbs may not sink into the scene either
                        print("collision", cp[3], cp[8], np.round(cp[5], 3))
                    return True
        return False


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


def _csc(M: np.ndarray) -> sparse.csc_matrix:
    """The nonzeros of the dense matrix M in CSC form, stored as ``sparse.csc_matrix(M)`` stores
    them (by column, rows ascending), built directly: scipy's generic dense conversion cost
    about as much as OSQP's solve of these small QPs."""
    cols, rows = np.nonzero(M.T)          # column-major order
    indptr = np.zeros(M.shape[1] + 1, dtype=np.int32)
    np.cumsum(np.bincount(cols, minlength=M.shape[1]), out=indptr[1:])
    return sparse.csc_matrix((M.T[cols, rows], rows.astype(np.int32), indptr), shape=M.shape)


def _qp(P, q, A, lo, hi, *, approximate: bool = False):
    """min 1/2 x'Px + q'x s.t. lo <= Ax <= hi with OSQP; None if not solved. ``approximate``
    accepts an iterate that hit the iteration limit if it meets the constraints to 1e-4 (an SQP
    step need not be exact: the next iteration corrects it)."""
    scale = 1.0 / max(float(np.abs(np.diag(P)).max()), 1e-12)
    solver = osqp.OSQP(algebra="builtin")   # naming it skips a per-call backend search (~1 ms)
    # P's upper triangle (all OSQP reads; given the full P it extracts it, again a slow scipy path)
    solver.setup(_csc(np.triu(P * scale)), q * scale, _csc(A), lo, hi, verbose=False,
                 eps_abs=1e-7, eps_rel=1e-7, max_iter=4000, polishing=True)
    res = solver.solve(raise_error=False)
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
def _statics(model: StanceModel, support, mass: float):
    """Stage 1's equilibrium rows, linear in the CoM xy c and cone coefficients lambda:
    A_c c + A_f lambda = b, 0 <= lambda <= hi (grasps bounded by the grip force)."""
    pts = [fp for c in support for fp in model.force_points(c)]
    cols = []
    for pt, kind, n, mu in pts:
        K = cone_generators(n, mu) if kind == "cone" else GRASP_GENERATORS
        for k in range(K.shape[1]):
            cols.append((pt, K[:, k], kind))
    W = mass * hum.GRAVITY
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
        return _diamond_lp(model, support, mass, ref_xy=np.asarray(ref_xy, float), r=margin)
    A_c, A_f, b, hi_l = _statics(model, support, mass)
    m = A_f.shape[1]
    A_eq = np.hstack([A_c, A_f])
    A = np.vstack([A_eq, np.hstack([np.zeros((m, 2)), np.eye(m)])])
    P = np.diag(np.r_[1e4, 1e4, np.full(m, 1e-4)])   # CoM near ref (weight per m^2), small forces
    qv = np.r_[-1e4 * ref_xy, np.zeros(m)]
    x = _qp(P, qv, A, np.r_[b, np.zeros(m)], np.r_[b, hi_l])
    if x is None or np.abs(A_eq @ x - b).max() > 1e-2 * b[2]:
        return None
    return x[:2]


_DIAMOND = np.array([[1.0, 0.0], [-1.0, 0.0], [0.0, 1.0], [0.0, -1.0]])


def _diamond_lp(model: StanceModel, support, mass: float, *, com_xy=None, ref_xy=None, r=None, cap=0.1):
    """The LP behind :func:`stability_margin` and ``com_target(margin=r)``: variables (c, r, the
    cone coefficients of each diamond corner c + r d, and for ``ref_xy`` the 1-norm slacks
    |c - ref|); each corner balanced with its own forces. Fixed c (``com_xy``) or r (``r``);
    maximises r, or with ``ref_xy`` minimises |c - ref|_1. Returns (r, c) with r free, else c."""
    A_c, A_f, b, hi_l = _statics(model, support, mass)
    m, nk = A_f.shape[1], len(_DIAMOND)
    W = b[2]
    nv = 3 + nk * m + 2
    # rows per corner, divided by W (lambda in body weights, moments in m):
    # A_c c + (A_c d) r + A_f lambda_k = b
    A_eq = np.zeros((6 * nk, nv))
    for k, d in enumerate(_DIAMOND):
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
    return _diamond_lp(model, support, mass, com_xy=com_xy, cap=cap)


# ---------------------------------------------------------------------- stage 3: forces for q
def contact_forces(model: StanceModel, support):
    """Forces at the support's points for the current configuration, with joint torques:
    min ||lambda||^2 + ||tau/tau_max||^2 s.t. floating-base equilibrium, cones, torque limits.
    Returns (points, tau, residual) or None."""
    rob = model.robot
    G = rob.gravity_forces()
    cols, rows = [], []
    for c in support:
        link = rob.link_index[hum.LIMB_LINK[c.limb]]
        fps = model.force_points(c)
        # the real contact points: the limb's points as they are in q (the IK met the targets)
        Jl, _ = rob.jacobians(link, np.array([fp[0] for fp in fps]))
        for (pt, kind, n, mu), J in zip(fps, Jl):
            K = cone_generators(n, mu) if kind == "cone" else GRASP_GENERATORS
            rows.append((c.limb, pt, kind, n, mu, len(cols), K.shape[1]))
            for k in range(K.shape[1]):
                cols.append((J.T @ K[:, k], K[:, k], kind))
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
    x = _qp(P, qv, A, lo, hi)
    if x is None or np.any(x < -1e-6):
        return None
    # OSQP meets lambda >= 0 to its tolerance: a coefficient of -1e-7 on a cone edge opposite a
    # loaded one left a sole's force just outside the cone on a 36 deg slope (the checker's
    # finding); the residual and torques below are those of the clipped forces
    x = np.maximum(x, 0.0)
    resid = float(np.abs(B[:6] @ x + G[:6]).max())
    tau = -(G[6:] + B[6:] @ x)
    if resid > 1.0 or np.any(np.abs(tau) > tmax * 1.01):
        return None
    points = []
    for limb, pt, kind, n, mu, start, cnt in rows:
        f = sum(x[start + k] * cols[start + k][1] for k in range(cnt))
        points.append((limb, pt, f, kind, n, mu))
    return points, tau, resid


# ---------------------------------------------------------------------- stage 2: configuration SQP
FAILURES: dict[str, int] = {}   # why IK calls failed, by stage (diagnostics)


def _fail(reason: str):
    FAILURES[reason] = FAILURES.get(reason, 0) + 1
    return None


def solve_ik(model: StanceModel, x0, touching, support, free: Contact | None = None,
             u_bounds=(0.0, 0.0), goal_dir: float = 1.0, iters: int = 30, lean: float | None = None):
    """The stance IK (module docstring). ``free``: the Adj+ contact whose u is a variable in
    ``u_bounds``, pulled along +``goal_dir``. Returns (Step, chosen free contact) or None.

    The CoM target is a point where the support balances gravity (stage 1): first between the
    point nearest the support's feet (hands carry part of the weight; the body stays over the
    feet) and, for Adj+, the point nearest the middle of all touched contacts (the free one at
    the far end of its range), i.e. leaning towards where the robot reaches (both are in the
    convex equilibrium region, so is their blend; the blend is ``lean``, by default
    :data:`LEAN`, or :data:`LEAN_FRONT` with a hand on the wall or a rung). If the forces then fail (the CoM had to
    leave its target to reach), a second pass aims at the balanced point nearest the CoM that
    the first pass reached, moved 15 % back towards the feet."""
    mass = model.robot.total_mass
    fixed = [c for c in touching if c is not free]
    feet = [c for c in support if c.limb in hum.FEET] or list(support)
    centre = com_target(model, support, mass, np.mean([model.target(c)[0][:2] for c in feet], axis=0))
    if centre is None:
        return _fail("com")
    com_xy = centre
    if free is not None:
        far = Contact(free.limb, free.surface, u_bounds[1] if goal_dir > 0 else u_bounds[0])
        reach = com_target(model, support, mass, np.mean([model.target(c)[0][:2] for c in fixed + [far]], axis=0))
        if reach is not None:
            if lean is None:
                front = (any(c.limb in hum.HANDS and c.surface != "rail" for c in support)
                         or (free.limb in hum.HANDS and free.surface.startswith("rung")))
                lean = LEAN_FRONT if front else LEAN
            com_xy = centre + lean * (reach - centre)
    x = (np.array(x0[0], float), np.array(x0[1], float), np.array(x0[2], float))
    u = float(np.clip(free.u, *u_bounds)) if free is not None else 0.0
    for attempt in range(2):
        res = _sqp(model, x, fixed, free, u, u_bounds, goal_dir, com_xy, iters)
        if isinstance(res, str):
            return _fail(res)
        x, u = res[:3], res[3]
        new = Contact(free.limb, free.surface, u) if free is not None else None
        touching_c = tuple(sorted(fixed + ([new] if new else [])))
        support_c = tuple(sorted(new if (free is not None and c is free) else c for c in support))
        out = contact_forces(model, support_c)
        if out is not None:
            points, tau, _ = out
            return Step(touching_c, support_c, x[0], x[1], x[2], points, tau), new
        reached = model.robot.com_and_jacobian()[0][:2]
        nearest = com_target(model, support, mass, reached)
        if nearest is None:
            break
        com_xy = nearest + 0.15 * (centre - nearest)
    return _fail("forces or torques")


def terrain_height(model: StanceModel, x: float) -> float:
    """Height (m) of the highest walkable plane (normal within 60 deg of up) under world x; a
    plane counts 0.12 m (half a sole) past its contact range, whose ends keep soles off edges."""
    out = -math.inf
    for s in model.surfaces.values():
        if s.kind != "plane" or s.normal[2] < 0.5 or abs(s.t[0]) < 1e-6:
            continue
        u = (x - s.origin[0]) / s.t[0]
        if s.u_range[0] - 0.12 <= u <= s.u_range[1] + 0.12:
            out = max(out, float(s.point(u)[2]))
    return out


def solve_transition(model: StanceModel, x0, step: Step, limb: str, iters: int = 30):
    """Bouyarmane & Kheddar's transition for the Adj+ ``step`` from configuration ``x0``: a configuration
    of ``step.support`` alone (static equilibrium, limits, no collision, as :func:`solve_ik`)
    with ``limb`` lifted to midway between its place in ``x0`` and its new contact,
    SWING_CLEARANCE above the terrain under the sole; the CoM aims at the balanced point nearest
    the middle of the two end configurations' CoMs. A step whose swing cannot pass there is not
    a move (the executed Cartesian swing asked the leg for a point 13 cm beyond its reach on
    eval slope 8 and the stance sole was unloaded chasing it). Returns (base, quat, q) or None."""
    mass = model.robot.total_mass
    model.set(x0)
    start, com0 = model.limb_ref(limb), model.robot.com_and_jacobian()[0]
    model.set((step.base_pos, step.base_quat, step.q))
    end, com1 = model.limb_ref(limb), model.robot.com_and_jacobian()[0]
    mid = 0.5 * (start + end)
    ground = max(terrain_height(model, mid[0] + dx) for dx in (-0.12, 0.0, 0.12))
    mid[2] = max(mid[2], ground + SWING_CLEARANCE)
    support = list(step.support)
    why = "com"
    for ref in (0.5 * (com0[:2] + com1[:2]), com0[:2], com1[:2]):
        com_xy = com_target(model, support, mass, ref)
        if com_xy is None:
            continue
        res = _sqp(model, x0, support, None, 0.0, (0.0, 0.0), 1.0, com_xy, iters, lift=(limb, mid))
        if isinstance(res, str):
            why = res
        elif np.linalg.norm(model.limb_ref(limb) - mid) > LIFT_TOL:
            why = "lift"
        elif contact_forces(model, support) is None:
            why = "forces"
        else:
            return res[:3]
    return _fail("transition " + why)


def _sqp(model: StanceModel, x, fixed, free, u, u_bounds, goal_dir, com_xy, iters, lift=None):
    """Stage 2: the configuration SQP. Returns (base, quat, q, u) or the failure's name.
    ``lift``: (limb, world point), a limb that is no contact taken to a point (a transition)."""
    rob = model.robot
    base, quat, q = x
    q_ref = hum.stand_posture()
    nv = 27 + (free is not None)
    # the step bound adapts: halved when the objective (merit) rose, regrown by 1.5 when it
    # fell; a fixed bound made the iterates oscillate at it when the CoM target is out of reach
    trust, prev, step = TRUST, math.inf, TRUST
    for it in range(iters):
        model.set((base, quat, q))
        kin = rob.kinematics()
        H = np.zeros((nv, nv))
        g = np.zeros(nv)
        err_max = 0.0
        merit = 0.0
        contacts = fixed + ([Contact(free.limb, free.surface, u)] if free is not None else [])
        targets = [(c.limb, *model.target(c)) for c in contacts] + ([(*lift, None)] if lift is not None else [])
        for limb, tgt, Rt in targets:
            link = rob.link_index[hum.LIMB_LINK[limb]]
            cur = model.limb_ref(limb, kin)
            Jl, Ja = kin.jacobians(link, cur[None])
            J = np.zeros((3, nv))
            J[:, :27] = Jl[0]
            e = tgt - cur
            if free is not None and limb == free.limb:
                J[:, 27] = -np.asarray(model.surfaces[free.surface].t)   # the target moves with u
            err_max = max(err_max, np.abs(e).max())
            merit += W_CONTACT * e @ e
            H += W_CONTACT * J.T @ J
            g -= W_CONTACT * J.T @ e
            if Rt is not None:
                _, Rc = kin.limb_frame(limb)
                er = Rotation.from_matrix(Rt @ Rc.T).as_rotvec()
                err_max = max(err_max, 0.1 * np.abs(er).max())
                merit += 0.1 * W_CONTACT * er @ er
                Jr = np.zeros((3, nv))
                Jr[:, :27] = Ja
                H += 0.1 * W_CONTACT * Jr.T @ Jr
                g -= 0.1 * W_CONTACT * Jr.T @ er
        com, Jc = kin.com_and_jacobian()
        Jc2 = np.zeros((2, nv))
        Jc2[:, :27] = Jc[:2]
        ec = com_xy - com[:2]
        H += W_COM * Jc2.T @ Jc2
        g -= W_COM * Jc2.T @ ec
        # torso upright (rotation vector of the base from upright) and posture (weak)
        eo = -Rotation.from_quat(quat).as_rotvec()
        H[3:6, 3:6] += W_UPRIGHT * np.eye(3)
        g[3:6] -= W_UPRIGHT * eo
        H[6:27, 6:27] += 1.0 * np.eye(21)
        g[6:27] -= 1.0 * (q_ref - q)
        merit += W_COM * ec @ ec + W_UPRIGHT * eo @ eo + (q_ref - q) @ (q_ref - q)
        if free is not None:
            g[27] -= W_PROGRESS * goal_dir      # progress of the new contact towards the goal
            merit -= 2 * W_PROGRESS * goal_dir * u
        trust = max(0.5 * trust, 1e-3) if merit > prev else min(1.5 * trust, TRUST)
        prev = merit
        if err_max < POS_TOL and max(step, trust) <= 2e-3:
            break        # contacts met and the steps (or their bound) vanish: converged
        H += 1e-3 * np.eye(nv)
        # (np.concatenate rather than np.r_, whose index parsing costs ~10 us a call)
        lo = np.concatenate([np.full(6, -trust), np.maximum(rob.lower - q, -trust)])
        hi = np.concatenate([np.full(6, trust), np.minimum(rob.upper - q, trust)])
        if free is not None:
            lo = np.concatenate([lo, [max(u_bounds[0] - u, -trust)]])
            hi = np.concatenate([hi, [min(u_bounds[1] - u, trust)]])
        # no collision: links near the scene may not approach it further (linearised distance)
        A_rows, a_lo = _collision_rows(model, contacts, nv, kin)
        for o, nrm in model.ladder_planes:
            for h, clearance in _plane_limbs(contacts):
                x_h = model.limb_ref(h, kin)
                Jh, _ = kin.jacobians(rob.link_index[hum.LIMB_LINK[h]], x_h[None])
                r = np.zeros(nv)
                r[:27] = nrm @ Jh[0]
                A_rows.append(r[None])
                a_lo.append(clearance - float((x_h - o) @ nrm))
        A = np.vstack([np.eye(nv)] + A_rows) if A_rows else np.eye(nv)
        dx = _qp(H, g, A, np.concatenate([lo, a_lo]), np.concatenate([hi, np.full(len(a_lo), np.inf)]),
                 approximate=True)
        if dx is None:
            return "sqp subproblem"
        base = base + dx[:3]
        step = float(np.abs(dx).max())
        quat = (Rotation.from_rotvec(dx[3:6]) * Rotation.from_quat(quat)).as_quat()
        q = np.clip(q + dx[6:27], rob.lower, rob.upper)
        if free is not None:
            u = float(np.clip(u + dx[27], *u_bounds))
        if err_max < POS_TOL and np.abs(com_xy - com[:2]).max() < 5e-3 and np.abs(dx).max() < 2e-3:
            break
        if it >= 20 and err_max > 0.05:      # far from the contacts after 20 steps: unreachable
            return "unreachable"
    contacts = fixed + ([Contact(free.limb, free.surface, u)] if free is not None else [])
    # polish: project onto the contact constraints (the weighted SQP leaves up to a few mm)
    base, quat, q = _polish(model, (base, quat, q), contacts)
    for c in contacts:
        tgt, Rt = model.target(c)
        if np.linalg.norm(tgt - model.limb_ref(c.limb)) > POS_TOL:
            return "position residual"
        if Rt is not None:
            _, Rc = rob.limb_frame(c.limb)
            if np.abs(Rotation.from_matrix(Rt @ Rc.T).as_rotvec()).max() > ROT_TOL:
                return "sole orientation"
    if Rotation.from_quat(quat).as_matrix()[2, 2] < math.cos(MAX_TILT):
        return "torso tilt"
    if model.collides(tuple(contacts)):
        return "collision"
    if model.hand_clearance() < 0.5 * HAND_PLANE_CLEARANCE:
        return "hand through the ladder"
    if any((model.limb_ref(f) - o) @ nrm < 0.5 * c for o, nrm in model.ladder_planes
           for f, c in _plane_limbs(contacts) if f in hum.FEET):
        return "foot through the ladder"
    return base, quat, q, u


def _plane_limbs(contacts) -> list[tuple[str, float]]:
    """The limbs kept on the robot's side of a ladder's plane of rungs, with their clearances (m):
    both hands, and the feet not in ``contacts``. A free foot the IK left behind the plane (9-12 cm
    on eval ladders 2, 14, 19, 23), its posture reference took it there through the gap between
    two rungs, where it caught under a rung when it swung on (ladder 19: 390 N on the foot, fall)."""
    touching = {c.limb for c in contacts}
    return [(h, HAND_PLANE_CLEARANCE) for h in hum.HANDS] + [
        (f, FOOT_PLANE_CLEARANCE) for f in hum.FEET if f not in touching]


def _polish(model: StanceModel, x, contacts, iters: int = 8):
    """Gauss-Newton projection of a configuration onto its contacts: min ||dx||^2 s.t. every
    contact's position (and sole orientation) error is cancelled to first order, joint limits
    as bounds; stops when the largest position error is below POS_TOL / 4. Leaves the model set
    to the result."""
    rob = model.robot
    base, quat, q = x
    for _ in range(iters):
        model.set((base, quat, q))
        kin = rob.kinematics()
        rows, errs, worst = [], [], 0.0
        for c in contacts:
            link = rob.link_index[hum.LIMB_LINK[c.limb]]
            tgt, Rt = model.target(c)
            cur = model.limb_ref(c.limb, kin)
            Jl, Ja = kin.jacobians(link, cur[None])
            rows.append(Jl[0])
            errs.append(tgt - cur)
            worst = max(worst, float(np.linalg.norm(tgt - cur)))
            if Rt is not None:
                _, Rc = kin.limb_frame(c.limb)
                er = Rotation.from_matrix(Rt @ Rc.T).as_rotvec()
                rows.append(Ja)
                errs.append(er)
                worst = max(worst, 0.1 * float(np.abs(er).max()))
        if worst < POS_TOL / 4:
            break
        J, e = np.vstack(rows), np.concatenate(errs)
        lo = np.concatenate([np.full(6, -TRUST), rob.lower - q])
        hi = np.concatenate([np.full(6, TRUST), rob.upper - q])
        A = np.vstack([J, np.eye(27)])
        dx = _qp(np.eye(27), np.zeros(27), A, np.concatenate([e, lo]), np.concatenate([e, hi]), approximate=True)
        if dx is None:
            break
        base = base + dx[:3]
        quat = (Rotation.from_rotvec(dx[3:6]) * Rotation.from_quat(quat)).as_quat()
        q = np.clip(q + dx[6:27], rob.lower, rob.upper)
    model.set((base, quat, q))
    return base, quat, q


def _collision_rows(model: StanceModel, contacts, nv: int, kin: hum.Kinematics, margin: float = 0.06):
    """Rows n^T J dx >= 0.005 - d for every robot point within ``margin`` of the scene, links of
    the contacting limbs excepted (they touch on purpose); ``kin``: the model's configuration."""
    rob = model.robot
    skip = {rob.link_index[hum.LIMB_LINK[c.limb]] for c in contacts}
    rows, lo = [], []
    for bid in model.scene_ids:
        for cp in p.getClosestPoints(rob.body, bid, margin, physicsClientId=model.client):
            if cp[3] in skip:
                continue
            Jl, _ = kin.jacobians(cp[3], np.asarray(cp[5])[None])
            r = np.zeros(nv)
            r[:27] = np.asarray(cp[7]) @ Jl[0]      # normal on the scene, pointing to the robot
            rows.append(r[None])
            lo.append(min(0.005 - cp[8], 0.01))
    return rows, lo


# ---------------------------------------------------------------------- the search
def _feet_mid(model: StanceModel, stance) -> np.ndarray | None:
    feet = [model.target(c)[0] for c in stance if c.limb in hum.FEET]
    return np.mean(feet, axis=0) if feet else None


def _heuristic(model: StanceModel, stance, goal: np.ndarray) -> float:
    """Goal distance in step lengths: of the feet contacts (each missing foot adds half a
    step), plus a third of that of the hands from a point 1 m above the goal (hands lead: on a
    ladder or a rail they go up and ahead of the feet)."""
    feet = [model.target(c)[0] for c in stance if c.limb in hum.FEET]
    d = np.mean([np.linalg.norm(f - goal) for f in feet]) if feet else 10.0
    hands = [model.target(c)[0] for c in stance if c.limb in hum.HANDS]
    lead = goal + np.array([0.0, 0.0, 1.0])
    dh = np.mean([np.linalg.norm(h - lead) for h in hands]) if hands else 1.0
    return (d + dh / 3.0) / STEP_LENGTH + 0.5 * (2 - len(feet))


def start_state(model: StanceModel):
    """The env's initial configuration and the stance it stands in (both soles on the floor)."""
    hum.place_standing(model.robot, x=0.0)
    base, quat, q = model.robot.get_state()[:3]
    stance = tuple(sorted(Contact(f, "floor", float(model.limb_ref(f)[0])) for f in hum.FEET))
    # settle the configuration on exact targets
    res = solve_ik(model, (base, quat, q), stance, stance)
    if res is None:
        return None, stance
    return res[0], stance


def plan(task: MultiContactTask, *, time_limit: float = 60.0, max_nodes: int = 400,
         goal: np.ndarray | None = None, goal_radius: float | None = None) -> Plan:
    """Best-first search for a stance sequence from the start stance to one with both feet
    within ``goal_radius`` (default: the task's) of ``goal`` (default: the task's)."""
    t0 = time.perf_counter()
    model = StanceModel(task)
    goal = task.goal() if goal is None else np.asarray(goal, float)
    radius = task.goal_radius if goal_radius is None else float(goal_radius)
    out = Plan("exhausted")
    try:
        step0, stance0 = start_state(model)
        out.ik_calls += 1
        if step0 is None:
            out.status = "exhausted"
            return out
        # lazy best-first: a child enters the queue with an optimistic priority (an Adj+ contact
        # at the far end of its range) and its IK is solved only when it is popped; a solved
        # child re-enters with its true priority. Most children are never popped, so the IK
        # runs about once per expansion instead of once per neighbour.
        counter = 0
        queue = [(_heuristic(model, stance0, goal), counter, 0.0, stance0, step0, None, None)]
        seen = {stance_key(stance0)}
        nodes = {}
        while queue:
            if time.perf_counter() - t0 > time_limit or out.nodes >= max_nodes:
                out.status = "budget"
                return out
            _, _, g, stance, step, parent, move = heapq.heappop(queue)
            if step is None:                       # a lazy child: solve its IK now
                out.ik_calls += 1
                res = move()
                if res is None:
                    continue
                child, cstep = res
                ck = stance_key(child)
                if ck in seen:
                    continue
                seen.add(ck)
                counter += 1
                heapq.heappush(queue, (g + _heuristic(model, child, goal), counter, g, child, cstep, parent, None))
                continue
            key = stance_key(stance)
            nodes[key] = (stance, step, parent)
            out.nodes += 1
            mid = _feet_mid(model, stance)
            if (mid is not None and sum(c.limb in hum.FEET for c in stance) == 2
                    and np.linalg.norm(mid - goal) <= radius):
                out.status = "solved"
                chain = []
                while key is not None:
                    st, sp, par = nodes[key]
                    chain.append((st, sp))
                    key = par
                chain.reverse()
                out.stances = [c[0] for c in chain]
                out.steps = [c[1] for c in chain]
                return out
            for estimate, move in _moves(model, stance, (step.base_pos, step.base_quat, step.q), goal):
                if stance_key(estimate) in seen:
                    continue
                counter += 1
                # a stance of one contact reached by letting go of a hand (the robot on one sole
                # with the other foot far behind, then a regrasp) costs more: executed, the shift
                # onto that sole fell on four step tasks
                c = 0.2 + (SINGLE_SUPPORT_COST if len(estimate) == 1 and any(x.limb in hum.HANDS for x in stance)
                           else 0.0)
                heapq.heappush(queue, (g + c + _heuristic(model, estimate, goal), counter, g + c, estimate,
                                       None, key, move))
        out.status = "exhausted"
        return out
    finally:
        out.seconds = time.perf_counter() - t0
        model.close()


def com_accel_margin(model: StanceModel, support, com: np.ndarray, cap: float = 5.0) -> float:
    """The least, over the four horizontal directions d (+-x, +-y), of the largest CoM
    acceleration a (m/s^2, at most ``cap``) that forces at the support's contact points (its
    friction cones, grasps bounded) give with no moment about the CoM ``com`` (3-D): total
    force m (a d + g e_z). 0 if some direction has none. One LP per direction (HiGHS)."""
    _, A_f, b, hi = _statics(model, support, model.robot.total_mass)
    m = A_f.shape[1]
    A = np.zeros((6, m + 1))
    A[:3, :m] = A_f[:3]
    A[3:, :m] = A_f[3:] - np.cross(com, A_f[:3].T).T     # moments about the CoM, not the origin
    bounds = [(0.0, h if np.isfinite(h) else None) for h in hi] + [(None, cap)]
    cost = np.zeros(m + 1)
    cost[-1] = -1.0
    out = cap
    for d in _DIAMOND:
        A[:2, -1] = -model.robot.total_mass * d
        res = linprog(cost, A_eq=A, b_eq=b, bounds=bounds, method="highs")
        out = min(out, float(res.x[-1]) if res.status == 0 else 0.0)
    return max(out, 0.0)


def _line_support_ok(model: StanceModel, step: Step) -> bool:
    """A release that leaves one sole on a plane and hands (point contacts: the body can only
    turn about the line through them) is kept only if that support can accelerate the CoM of
    its configuration by COM_ACCEL_MARGIN in every horizontal direction without turning the
    body. The next swing starts there; on eval slopes 5, 8, 14, 17, 21 (0.05-0.27 m/s^2) the
    executor's QP could not stop a 3 cm/s drift of the CoM without rolling the body about the
    sole-hand line, and the robot fell (the swings that reached the goal had 0.58-0.95)."""
    feet = [c for c in step.support if c.limb in hum.FEET]
    if len(step.support) < 2 or len(feet) != 1 or model.surfaces[feet[0].surface].kind == "bar":
        return True
    model.set((step.base_pos, step.base_quat, step.q))
    return com_accel_margin(model, step.support, model.robot.com_and_jacobian()[0]) >= COM_ACCEL_MARGIN


def _on_bar(model: StanceModel, new: Contact) -> bool:
    """Whether a swing of ``new.limb`` (the model set to its start) goes to or from a bar: the
    agent's path to or from a rung backs off the ladder instead (a foot within 0.1 m of a bar's
    axis is on it)."""
    if model.surfaces[new.surface].kind == "bar":
        return True
    x = model.limb_ref(new.limb)
    for s in model.surfaces.values():
        if s.kind == "bar":
            d = x - np.asarray(s.origin)
            t = np.asarray(s.t, float)
            if np.linalg.norm(d - (d @ t) * t) < 0.1:
                return True
    return False


def _moves(model: StanceModel, stance, x0, goal):
    """Adjacent stances, unsolved: (estimate, solve) with solve() -> (stance, Step) or None.
    Adj+: each free limb on each surface it may touch, its position chosen by the IK (the
    estimate puts it at the far end of its range towards the goal); Adj-: each contact released."""
    used = {c.limb for c in stance}
    model.set(x0)
    for limb in hum.LIMBS:
        if limb in used:
            continue
        here = model.limb_ref(limb)
        for s in model.surfaces.values():
            if limb not in s.limbs:
                continue
            t = np.asarray(s.t, float)
            # where the limb is now, along the surface; reach at most REACH ahead, 0.2 m back
            u_now = float((here - np.asarray(s.origin)) @ t)
            lo, hi = max(s.u_range[0], u_now - 0.2), min(s.u_range[1], u_now + REACH)
            if s.kind == "bar" and s.u_range[0] == s.u_range[1]:
                lo = hi = s.u_range[0]
                if np.linalg.norm(model.target(Contact(limb, s.name, lo))[0] - here) > 0.7:
                    continue
            if lo > hi:
                continue
            goal_dir = float(np.sign((goal - s.point(0.5 * (lo + hi))) @ t)) or 1.0
            free = Contact(limb, s.name, float(np.clip(u_now + 0.25 * goal_dir, lo, hi)))
            far = Contact(limb, s.name, hi if goal_dir > 0 else lo)

            def solve(free=free, lo=lo, hi=hi, goal_dir=goal_dir):
                res = solve_ik(model, x0, tuple(stance) + (free,), stance, free=free, u_bounds=(lo, hi),
                               goal_dir=goal_dir)
                if res is None:
                    return None
                step = res[0]
                model.set(x0)
                if free.limb in hum.FEET and not _on_bar(model, free):
                    # Bouyarmane & Kheddar: a step is a move only if a transition between its stances exists
                    step.transition = solve_transition(model, x0, step, free.limb)
                    if step.transition is None:
                        return None
                return tuple(sorted(step.touching)), step

            yield tuple(sorted(tuple(stance) + (far,))), solve
    if len(stance) >= 2:
        for c in stance:
            rest = tuple(x for x in stance if x is not c)

            def solve(rest=rest):
                res = solve_ik(model, x0, stance, rest)
                if res is None or not _line_support_ok(model, res[0]):
                    return None
                return rest, res[0]

            yield rest, solve


# ---------------------------------------------------------------------- the independent checker
def check_step(task: MultiContactTask, step: Step, *, force_tol: float = 1.0, pos_tol: float = 5e-3) -> list[str]:
    """Verify a plan step without the planner's Jacobians or QPs. Returns the violations
    (empty: valid): joint limits; every touching contact's points on its surface; forces in the
    true friction cones (grasps within the grip force); the Newton-Euler residual of the whole
    robot (gravity at the CoM, forces at their points) below ``force_tol`` (N and N m); each
    joint's torque, from the moments about its axis of the gravity and forces on its subtree,
    within limits and equal to the step's; no collision."""
    model = StanceModel(task)
    rob = model.robot
    bad = []
    try:
        if np.any(step.q < rob.lower - 1e-6) or np.any(step.q > rob.upper + 1e-6):
            bad.append("joint limits")
        model.set((step.base_pos, step.base_quat, step.q))
        for c in step.touching:
            tgt, _ = model.target(c)
            if np.linalg.norm(tgt - model.limb_ref(c.limb)) > pos_tol:
                bad.append(f"{c.limb} off its contact on {c.surface}")
        for limb, pt, f, kind, n, mu in step.points:
            if kind == "grasp":
                if np.linalg.norm(f) > math.sqrt(3) * hum.GRIP_FORCE + force_tol:
                    bad.append(f"{limb} grip force")
            else:
                fn = float(f @ n)
                ft = float(np.linalg.norm(f - fn * n))
                if fn < -1e-6 * max(1.0, np.linalg.norm(f)) or ft > mu * fn + 1e-6 * max(1.0, np.linalg.norm(f)):
                    bad.append(f"{limb} force outside its friction cone")
        # Newton-Euler with independent mass properties (link masses and COMs from pybullet)
        c, b = model.client, rob.body
        n_links = p.getNumJoints(b, physicsClientId=c)
        coms = [np.asarray(p.getBasePositionAndOrientation(b, physicsClientId=c)[0])]
        masses = [p.getDynamicsInfo(b, -1, physicsClientId=c)[0]]
        for j in range(n_links):
            coms.append(np.asarray(p.getLinkState(b, j, computeForwardKinematics=True, physicsClientId=c)[0]))
            masses.append(p.getDynamicsInfo(b, j, physicsClientId=c)[0])
        coms, masses = np.array(coms), np.array(masses)
        gvec = np.array([0.0, 0.0, -hum.GRAVITY])
        F = sum(f for _, _, f, *_ in step.points) + masses.sum() * gvec
        M = sum(np.cross(pt, f) for _, pt, f, *_ in step.points) + sum(
            np.cross(x, m * gvec) for x, m in zip(coms, masses))
        if np.abs(F).max() > force_tol or np.abs(M).max() > force_tol:
            bad.append(f"equilibrium residual {max(np.abs(F).max(), np.abs(M).max()):.3g}")
        # joint torques from moments about each joint axis over its subtree
        parent = [p.getJointInfo(b, j, physicsClientId=c)[16] for j in range(n_links)]

        def in_subtree(link, j):
            while link >= 0:
                if link == j:
                    return True
                link = parent[link]
            return False

        limb_link = {l: rob.link_index[hum.LIMB_LINK[l]] for l in hum.LIMBS}
        for k, j in enumerate(rob.joints):
            j = int(j)
            st = p.getLinkState(b, j, computeForwardKinematics=True, physicsClientId=c)
            Rj = np.array(p.getMatrixFromQuaternion(st[5])).reshape(3, 3)
            ax = np.asarray(p.getJointInfo(b, j, physicsClientId=c)[13], float)
            a, o = Rj @ (ax / np.linalg.norm(ax)), np.asarray(st[4])
            mom = sum(np.cross(coms[l + 1] - o, masses[l + 1] * gvec) for l in range(n_links) if in_subtree(l, j))
            mom = mom + sum(np.cross(pt - o, f) for limb, pt, f, *_ in step.points if in_subtree(limb_link[limb], j))
            tau = -float(a @ mom)
            if abs(tau) > hum.TORQUE_LIMITS[k] * 1.01 + force_tol:
                bad.append(f"{hum.JOINTS[k]} torque {tau:.1f} over its limit")
            if abs(tau - step.tau[k]) > force_tol + 0.01 * abs(tau):
                bad.append(f"{hum.JOINTS[k]} torque {step.tau[k]:.1f} != statics {tau:.1f}")
        if model.collides(step.touching):
            bad.append("collision")
    finally:
        model.close()
    return bad
