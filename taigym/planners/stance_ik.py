"""The stance IK (Bouyarmane 2011, "Multi-Contact Planning"): a configuration in static
equilibrium touching a stance's contacts, and the transitions between adjacent stances.

* The **IK problem** for a pair (sigma, sigma'): a configuration q (floating base + 21 joints)
  touching every contact of the larger stance, in static equilibrium on the contacts of the
  smaller one (that is q in F_sigma intersected with F_sigma'), with contact forces in
  linearised (pyramidal, inscribed) friction cones, grasps bounded by the grip force, joint
  torques within limits, joints within limits and no collision with the scene (the trunk at
  least TRUNK_CLEARANCE from it; on a ladder,
  both hands and any foot not in contact also stay in front of the plane of rungs). It is solved in
  stages, each by a maintained QP solver (OSQP) on Jacobians from pybullet's forward
  kinematics: (1) the centre of mass xy and forces that balance gravity on the fixed contact
  points (linear in both), then (2) an SQP on the configuration (contacts, CoM, upright torso,
  posture, progress of the free contact; joint limits as bounds; its step bound shrinks when
  the objective rises), polished by a Gauss-Newton projection onto the contacts (so every
  contact is met to POS_TOL, well inside ``check_step``'s tolerance), then (3) the forces for that
  configuration: min ||f||^2 + ||tau / tau_max||^2 s.t. the six floating-base equilibrium rows
  G_b + J_b^T f = 0, cones, |tau| <= tau_max. Collision is checked with pybullet's closest points.
  The paper solves one NLP with IPOPT; the staged form is what the listed solvers allow.
* A **transition** (the paper's motion between adjacent stances): a foot's Adj+ step is kept
  only if a configuration of the smaller stance exists with that foot lifted clear of the
  terrain midway between its old and new places, in equilibrium (:func:`solve_transition`).
  The executor's swing does not follow it (that measured worse); the check only prunes moves.
"""

from __future__ import annotations

import math

import numpy as np
from scipy.spatial.transform import Rotation
import pybullet as p

from taigym.sim import humanoid as hum

from .stance_model import Contact, StanceModel, Step
from .stance_soft import is_soft, soft_equilibrium
from .stance_statics import com_target, contact_forces, solve_qp

POS_TOL = 2e-3          #: m, contact position residual accepted from the IK
ROT_TOL = 0.02          #: rad, sole orientation residual
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
#: m, least distance of a trunk link (torso, waist, pelvis) from the scene in a stance (not in a
#: transition, which the executor does not follow), and the distance the executor's QP drives a
#: trunk link back to: the env counts a link as touching the scene from where pybullet reports a
#: contact point (9.5 mm for the torso, 4-5 mm for the waist and pelvis) and a trunk's touch as a
#: fall. Eval slope 2's plan stood the pelvis 5-7 mm from the rail (the SQP's rows keep links 5 mm
#: off) and the robot fell as the pelvis touched it
TRUNK_CLEARANCE = 0.02


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
        if out is not None and any(is_soft(model, c) for c in support_c):
            # on a deformable support: its reaction forces, the configuration sunk into it
            soft = soft_equilibrium(model, x, touching_c, support_c)
            if isinstance(soft, str):
                return _fail(soft)
            x, points, tau, sinks = soft
            return Step(touching_c, support_c, x[0], x[1], x[2], points, tau, sinks=sinks), new
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
    """The paper's transition for the Adj+ ``step`` from configuration ``x0``: a configuration
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
            for h, clearance in plane_limbs(contacts):
                x_h = model.limb_ref(h, kin)
                Jh, _ = kin.jacobians(rob.link_index[hum.LIMB_LINK[h]], x_h[None])
                r = np.zeros(nv)
                r[:27] = nrm @ Jh[0]
                A_rows.append(r[None])
                a_lo.append(clearance - float((x_h - o) @ nrm))
        A = np.vstack([np.eye(nv)] + A_rows) if A_rows else np.eye(nv)
        dx = solve_qp(H, g, A, np.concatenate([lo, a_lo]), np.concatenate([hi, np.full(len(a_lo), np.inf)]),
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
    if lift is None and model.trunk_distance(TRUNK_CLEARANCE) < TRUNK_CLEARANCE:
        return "trunk near the scene"     # (a transition is not executed: the 5 mm of its rows)
    if model.hand_clearance() < 0.5 * HAND_PLANE_CLEARANCE:
        return "hand through the ladder"
    if any((model.limb_ref(f) - o) @ nrm < 0.5 * c for o, nrm in model.ladder_planes
           for f, c in plane_limbs(contacts) if f in hum.FEET):
        return "foot through the ladder"
    return base, quat, q, u


def plane_limbs(contacts) -> list[tuple[str, float]]:
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
        dx = solve_qp(np.eye(27), np.zeros(27), A, np.concatenate([e, lo]), np.concatenate([e, hi]), approximate=True)
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
