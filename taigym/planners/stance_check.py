"""An independent check of a stance plan's steps (Bouyarmane 2011, "Multi-Contact Planning"):
:func:`check_step` verifies a returned step without the planner's Jacobians or QPs (its own
statics): contact points on their surfaces, forces in the true friction cones, Newton-Euler
equilibrium residual, joint torques (from the moments about each joint axis) and joint limits,
collision. Soles on a deformable support (Bouyarmane 2011's extension): sunk along the support's
normal, their forces checked against the support's finite-element model."""

from __future__ import annotations

import math

import numpy as np
import pybullet as p

from taigym.sim import fem
from taigym.sim import humanoid as hum
from taigym.sim.constants import GRAVITY

from .stance_model import StanceModel, StanceTask, Step

MAX_SINK = 0.03      #: m, a sole sunk deeper into a pad is no plausible contact


def check_step(task: StanceTask, step: Step, *, force_tol: float = 1.0, pos_tol: float = 5e-3) -> list[str]:
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
            off = tgt - model.limb_ref(c.limb)
            if c.limb in step.sinks:        # on a deformable support: sunk along its normal, not beside
                n = np.asarray(model.surfaces[c.surface].normal, float)
                sink = float(off @ n)
                off = off - sink * n
                if not -pos_tol <= sink <= MAX_SINK:
                    bad.append(f"{c.limb} sinks {sink:.4f} m into {c.surface}")
            if np.linalg.norm(off) > pos_tol:
                bad.append(f"{c.limb} off its contact on {c.surface}")
        bad += _check_soft(model, step, force_tol)
        for limb, pt, f, kind, n, mu in step.points:
            if kind == "soft":
                continue            # checked per contact by _check_soft
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
        gvec = np.array([0.0, 0.0, -GRAVITY])
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


def _check_soft(model: StanceModel, step: Step, force_tol: float) -> list[str]:
    """The forces of a step's soft points (one per footprint node of a sole on a deformable
    support): each sole's total in its friction cone, pressing on the pad; and the nodal forces
    equal to the pad's consistent nodal reactions for the displacements of the sole's points
    over the nodes (C_DD^-1 U^D, from the pad's compliance: another route than the planner's
    element-stress formula), to 2 % of the largest nodal force plus ``force_tol``."""
    bad = []
    by_limb: dict[str, list] = {}
    for limb, pt, f, kind, n, mu in step.points:
        if kind == "soft":
            by_limb.setdefault(limb, []).append((pt, f, n, mu))
    if not by_limb:
        return bad
    surf = {c.limb: c.surface for c in step.support}
    pads = {}
    for limb, pts in by_limb.items():
        F = np.sum([f for _, f, _, _ in pts], axis=0)
        n, mu = pts[0][2], pts[0][3]
        fn = float(F @ n)
        if fn <= 0 or np.linalg.norm(F - fn * n) > mu * fn + 1e-6 * np.linalg.norm(F):
            bad.append(f"{limb} soft force outside its friction cone")
        pads.setdefault(surf[limb], []).extend(pts)
    for name, pts in pads.items():
        solid = model.surfaces[name].solid.solid()
        top = solid.mesh.layer(-1)
        P = np.array([pt for pt, *_ in pts])
        F = np.array([f for _, f, *_ in pts])
        X = solid.mesh.nodes[top]
        nodes = top[np.argmin(np.linalg.norm(X[None, :, :2] - P[:, None, :2], axis=2), axis=1)]
        solid.preload(nodes)
        patch = fem.DirichletPatch(solid, nodes)
        expect = -patch.consistent_reactions(P - solid.mesh.nodes[nodes])
        if np.abs(expect - F).max() > 0.02 * np.abs(expect).max() + force_tol:
            bad.append(f"soft forces on {name} differ from the pad's reactions by {np.abs(expect - F).max():.1f} N")
    return bad
