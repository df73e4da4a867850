"""Contacts on a deformable support in the stance IK (Bouyarmane 2011, "Multi-Contact Planning",
part 5: the extension to linear-elasticity models).

A sole on a linear-elastic pad holds the pad's top nodes under it (the footprint D, taken at
the contact's place on the undeformed pad) at the displacements of the sole's points that
rest on them: U^D(q) = o(q) + R(q) xi - X, with X the nodes' rest positions, xi their
coordinates in the sole's frame at the contact target and (o, R) the sole's pose in the
configuration q. The pad's finite-element model (:class:`taigym.sim.fem.DirichletPatch`) gives
the paper's nodal reaction forces f^(j)(q) = -(alpha_e/3)(n_e(q)^T (x) I)[D][A][B_e][KK_e]{U^D(q)},
the forces the soles apply to the pad; the pad's forces on the robot are their opposites, at the
sole points over the nodes. Their gradient is the paper's two terms (the deformed face normals',
the displacements') chained with dU^D/dq, the sole points' Jacobians.

:func:`soft_equilibrium` is the IK's static equilibrium with these forces: from a configuration
in equilibrium on the undeformed support (the IK's rigid stages), Newton steps on (q, lambda)
(lambda: the rigid contacts' cone coefficients) meet G_b(q) + B_b lambda + sum_j J_j,b^T F_j(q) = 0,
each step a QP (OSQP) with the linearised soft forces, the rigid contacts kept in place, joint
torques and limits bounded. The configuration that results stands sunk into the pad: its soles'
sinks are the planner's prediction of the support's deformation.
"""

from __future__ import annotations

import numpy as np
from scipy.spatial.transform import Rotation

from taigym.sim import fem
from taigym.sim import humanoid as hum
from taigym.sim.constants import GRAVITY
from taigym.sim.soft_support import top_nodes_under

from .stance_model import MU_MARGIN, Contact, StanceModel
from .stance_statics import force_columns, point_forces, solve_qp

SOFT_ITERS = 12          # Newton steps at most
SOFT_TRUST = 0.03        # m, rad: step bound of a Newton step (sinks are below 1.5 cm)
SOFT_RESIDUAL = 0.5      # N, N m: equilibrium residual accepted
W_STEP = 1.0             # per m^2 (rad^2): the configuration moves as little as it needs to
SOFT_STEP_TOL = 1e-5     # m, rad: a Newton step this small has converged
MM = 1e-3                # m: the Newton step's unit in its QP
_E = np.hstack([np.eye(3), np.zeros((3, 24))])     # d(base position)/d(dx)


def is_soft(model: StanceModel, c: Contact) -> bool:
    """Whether ``c`` is a sole on a deformable support."""
    return c.limb in hum.FEET and model.surfaces[c.surface].solid is not None


def _solid(model: StanceModel, surface: str) -> fem.LinearElasticSolid:
    cache = model.cache.setdefault("solids", {})
    if surface not in cache:
        cache[surface] = model.surfaces[surface].solid.solid()
    return cache[surface]


def footprint(model: StanceModel, c: Contact) -> tuple[np.ndarray, np.ndarray]:
    """The pad's top nodes under the sole of ``c`` at its target (the sole's four corners), and
    their coordinates xi (k, 3) in the sole's target frame (origin: the sole's reference point)."""
    solid = _solid(model, c.surface)
    o, R = model.target(c)
    corners = np.array([fp[0] for fp in model.force_points(c)])
    nodes = top_nodes_under(solid, corners)
    xi = (solid.mesh.nodes[nodes] - o) @ R
    return nodes, xi


class SoftContacts:
    """The soft contacts of a support on one pad, held together (they interact through it): the
    footprints' union D, one :class:`~taigym.sim.fem.DirichletPatch`, and per node the sole it
    rests on. :meth:`forces` evaluates the paper's relation for the model's configuration."""

    def __init__(self, model: StanceModel, contacts: list[Contact]):
        surfaces = {c.surface for c in contacts}
        if len(surfaces) != 1:
            raise ValueError("SoftContacts holds the contacts on one pad")
        self.model, self.contacts = model, sorted(contacts)
        self.solid = _solid(model, contacts[0].surface)
        parts = [footprint(model, c) for c in self.contacts]
        self.nodes = np.concatenate([n for n, _ in parts])
        self.xi = [xi for _, xi in parts]
        self.sizes = [len(n) for n, _ in parts]
        key = ("patch", tuple(int(i) for i in self.nodes))
        if key not in model.cache:
            self.solid.preload(self.nodes)
            model.cache[key] = fem.DirichletPatch(self.solid, self.nodes)
        self.patch = model.cache[key]
        self.rest = self.solid.mesh.nodes[self.nodes]

    def points(self, kin: hum.Kinematics) -> list[np.ndarray]:
        """Per contact, the world positions (k, 3) of its sole's points over its nodes."""
        out = []
        for c, xi in zip(self.contacts, self.xi):
            o = self.model.limb_ref(c.limb, kin)
            _, R = kin.limb_frame(c.limb)
            out.append(o + xi @ R.T)
        return out

    def forces(self, kin: hum.Kinematics, *, jacobian: bool = False):
        """(points (k, 3), the pad's forces on the robot there (k, 3), N) and, with
        ``jacobian``, d(forces)/d(dx) (3k, 27) over the generalised velocities and the points'
        Jacobians (3k, 27)."""
        pts = self.points(kin)
        P = np.vstack(pts)
        UD = P - self.rest
        F = -self.patch.reactions(UD)
        if not jacobian:
            return P, F
        J = np.vstack([kin.jacobians(self.model.robot.link_index[hum.LIMB_LINK[c.limb]], p_)[0].reshape(-1, 27)
                       for c, p_ in zip(self.contacts, pts)])
        dF = -self.patch.reactions_jacobian(UD) @ J
        return P, F, dF, J

    def sinks(self, kin: hum.Kinematics) -> dict[str, float]:
        """Per sole: how far its reference point is below its target on the undeformed pad,
        along the pad's normal (m, positive down)."""
        out = {}
        for c in self.contacts:
            o, _ = self.model.target(c)
            n = np.asarray(self.model.surfaces[c.surface].normal, float)
            out[c.limb] = float((o - self.model.limb_ref(c.limb, kin)) @ n)
        return out


def soft_groups(model: StanceModel, support) -> list[SoftContacts]:
    """The support's soft contacts grouped by pad."""
    by = {}
    for c in support:
        if is_soft(model, c):
            by.setdefault(c.surface, []).append(c)
    return [SoftContacts(model, cs) for cs in by.values()]


def soft_equilibrium(model: StanceModel, x, touching, support):
    """The static equilibrium with the pads' reaction forces (module docstring), from the
    configuration ``x`` (in equilibrium on the undeformed pads). Returns (x, points, tau, sinks)
    with points as :class:`~taigym.planners.stance_model.Step`'s (the soft ones of kind "soft",
    one per footprint node), or the failure's name."""
    groups = soft_groups(model, support)
    rob = model.robot
    soft = {c for g in groups for c in g.contacts}
    rigid = [c for c in support if c not in soft]
    held = [c for c in touching if c not in soft]          # rigid contacts and unloaded soft ones stay put
    base, quat, q = (np.array(v, float) for v in x)
    tmax = hum.TORQUE_LIMITS
    lam_prev = None
    for it in range(SOFT_ITERS + 1):
        model.set((base, quat, q))
        kin = rob.kinematics()
        _, Jc = kin.com_and_jacobian()
        G = Jc.T @ np.array([0.0, 0.0, -GRAVITY * rob.total_mass])
        gen, dgen = np.zeros(27), np.zeros((27, 27))
        soft_pts = []
        for g in groups:
            P, F, dF, J = g.forces(kin, jacobian=True)
            gen += J.T @ F.ravel()
            dgen += J.T @ dF
            # the moments' lever arms move too: d((p - base) x F) = -[F]x (J_p - E) dx + ...
            for i, Fi in enumerate(F):
                dgen[3:6] -= _skew(Fi) @ (J[3 * i:3 * i + 3] - _E)
            soft_pts.append((g, P, F))
        # rigid support: cone coefficients at its points (as stage 3)
        cols, rows = force_columns(model, rigid, kin)
        m = len(cols)
        B = np.column_stack([cc[0] for cc in cols]) if m else np.zeros((27, 0))
        if lam_prev is not None and len(lam_prev) == m:
            # the rigid forces' lever arms about a moving base (with the last step's forces)
            for k, (_, g_, _) in enumerate(cols):
                dgen[3:6] += lam_prev[k] * _skew(g_) @ _E
        hi_l = np.array([hum.GRIP_FORCE if kind == "grasp" else np.inf for _, _, kind in cols])
        resid_gen = G + gen                                    # + B lambda
        dgen[3:6] -= _skew(np.array([0.0, 0.0, -GRAVITY * rob.total_mass])) @ (Jc - _E)   # gravity's lever arm
        # the held contacts' points do not move: J dx = 0 (soles: reference point and rotation)
        hold = []
        for c in held:
            link = rob.link_index[hum.LIMB_LINK[c.limb]]
            Jl, Ja = kin.jacobians(link, model.limb_ref(c.limb, kin)[None])
            hold.append(Jl[0])
            if c.limb in hum.FEET:
                hold.append(Ja)
        Hd = np.vstack(hold) if hold else np.zeros((0, 27))
        # variables z = (dx in mm (27), lambda / W (m)), rows in body weights W: OSQP stalled at
        # its iteration limit with the rows in newtons (stiffnesses of 1e5-1e6 N/m against steps of
        # mm), and with dx in m its tolerances left 20 um of noise in the steps
        W = GRAVITY * rob.total_mass
        Tq = np.hstack([MM * dgen[6:], W * B[6:]]) / tmax[:, None]
        t0 = resid_gen[6:] / tmax
        nz = 27 + m
        P_ = np.zeros((nz, nz))
        P_[:27, :27] = W_STEP * np.eye(27)
        P_[27:, 27:] = 1e-6 * np.eye(m)
        qv = np.zeros(nz)
        A_eq = np.hstack([MM * dgen[:6] / W, B[:6]])
        lo_j = np.maximum(rob.lower - q, -SOFT_TRUST) / MM
        hi_j = np.minimum(rob.upper - q, SOFT_TRUST) / MM
        A = np.vstack([A_eq, np.hstack([Hd, np.zeros((len(Hd), m))]), np.eye(nz), Tq])
        lo = np.concatenate([-resid_gen[:6] / W, np.zeros(len(Hd)), np.full(6, -SOFT_TRUST / MM), lo_j, np.zeros(m),
                             -1.0 - t0])
        hi = np.concatenate([-resid_gen[:6] / W, np.zeros(len(Hd)), np.full(6, SOFT_TRUST / MM), hi_j, hi_l / W, 1.0 - t0])
        z = solve_qp(P_, qv, A, lo, hi, approximate=True)
        if z is None:
            return "soft qp"
        dx, lam = MM * z[:27], W * np.maximum(z[27:], 0.0)
        lam_prev = lam
        resid = float(np.abs(resid_gen[:6] + B[:6] @ lam).max())
        if resid < SOFT_RESIDUAL and np.abs(dx).max() < SOFT_STEP_TOL:
            break
        if it == SOFT_ITERS:
            return "soft equilibrium"
        base = base + dx[:3]
        quat = (Rotation.from_rotvec(dx[3:6]) * Rotation.from_quat(quat)).as_quat()
        q = np.clip(q + dx[6:], rob.lower, rob.upper)
    # the equilibrium as it stands (lambda of the last QP, soft forces of this configuration)
    tau = -(resid_gen[6:] + B[6:] @ lam)
    if resid > SOFT_RESIDUAL or np.any(np.abs(tau) > tmax * 1.01):
        return "soft torques"
    points = point_forces(rows, cols, lam)
    sinks = {}
    for g, P, F in soft_pts:
        k = 0
        for c, size in zip(g.contacts, g.sizes):
            s = model.surfaces[c.surface]
            n = np.asarray(s.normal, float)
            Fc = F[k:k + size]
            fn = float(Fc.sum(axis=0) @ n)
            ft = float(np.linalg.norm(Fc.sum(axis=0) - fn * n))
            if fn <= 0 or ft > MU_MARGIN * s.mu * fn:
                return "soft friction"
            points += [(c.limb, P[k + i], Fc[i], "soft", n, MU_MARGIN * s.mu) for i in range(size)]
            k += size
        sinks.update(g.sinks(kin))
    return (base, quat, q), points, tau, sinks


def _skew(v: np.ndarray) -> np.ndarray:
    """[v]x: [v]x w = v x w."""
    return np.array([[0.0, -v[2], v[1]], [v[2], 0.0, -v[0]], [-v[1], v[0], 0.0]])
