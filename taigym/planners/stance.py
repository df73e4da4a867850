"""The stance planner of Bouyarmane 2011, "Multi-Contact Planning": a best-first search over
adjacent stances, each checked by the stance IK (:mod:`.stance_ik`).

* Stances are **adjacent** when one is the other plus (Adj+) or minus (Adj-) one contact. In
  Adj+ the new contact's position is left undetermined (the paper's equivalence class
  [sigma']); the IK chooses it, pulled towards the goal.
* The **search**: best-first over stances (priority: distance of the feet contacts to the goal
  over a step length, plus a small cost per stance), lazily: a neighbour (Adj+ or Adj-) is
  queued with an optimistic priority and its IK solved only when it is popped; stances are
  identified on a 5 cm grid of contact positions. It runs until both feet are within the task's
  goal radius, within a budget of expanded stances (``max_nodes``; the outcome does not depend
  on the machine's speed) and optionally of wall time. It returns a :class:`Plan` whose
  ``status`` is ``"solved"``, ``"budget"`` (node or time budget spent) or ``"exhausted"`` (no
  stance left to expand).
* A **second search** where the feet climb a plane a lone sole cannot stand on (steeper than
  the part of its friction cone the plan uses: the slope family) and the first one spent its
  budget: the hands' goal distance weighs as much as the feet's, and a foot's Adj+ onto that
  plane has a second class, its place at most SHORT_REACH ahead. It has its own budget of
  ``max_nodes`` (and what is left of the wall time). Either search alone solves slopes the
  other does not; run after the first, it leaves the first one's plans unchanged.

The planner's parts: :mod:`.stance_model` (contacts, stances, the robot and scene model),
:mod:`.stance_statics` (friction cones, equilibrium, stability margins), :mod:`.stance_ik` (the IK
and transitions), :mod:`.stance_check` (the independent checker). This module re-exports the
names their users need.
"""

from __future__ import annotations

import heapq
import math
import time

import numpy as np

from taigym.sim import humanoid as hum

from .stance_check import check_step
from .stance_ik import (FOOT_PLANE_CLEARANCE, HAND_PLANE_CLEARANCE, LIFT_TOL, POS_TOL, SWING_CLEARANCE,
                        TRUNK_CLEARANCE, solve_ik, solve_transition, terrain_height)
from .stance_model import MU_MARGIN, Contact, Plan, StanceModel, StanceTask, Step, stance_key
from .stance_statics import (GRASP_GENERATORS, com_accel_margin, com_target, cone_generators, contact_forces,
                             stability_margin)

__all__ = ["COM_ACCEL_MARGIN", "Contact", "FOOT_PLANE_CLEARANCE", "GRASP_GENERATORS", "HAND_PLANE_CLEARANCE",
           "LIFT_TOL", "MU_MARGIN", "POS_TOL", "Plan", "SWING_CLEARANCE", "StanceModel", "StanceTask", "Step",
           "TRUNK_CLEARANCE", "adjacent_moves", "beyond_sole_cone", "check_step", "climbs_beyond_sole_cone",
           "com_accel_margin", "com_target", "cone_generators", "contact_forces", "move_signature", "plan", "solve_ik",
           "solve_transition", "stability_margin", "stance_key", "start_state", "terrain_height"]

REACH = 0.9             #: m, farthest a limb is tried ahead of where it is
SHORT_REACH = 0.45      #: m, the climb search's second Adj+ class for a foot: its place at most this far ahead
HAND_DISCOUNT = 3.0     #: the heuristic counts the hands' goal distance divided by this (the plain search)
CLIMB_HAND_DISCOUNT = 1.0   #: or by this (the climb search)
SINGLE_SUPPORT_COST = 3.0   #: search cost (step lengths) of a one-contact stance left by releasing a hand
STEP_LENGTH = 0.3       #: m, heuristic scale: one stance change moves a foot about this far
COM_ACCEL_MARGIN = 0.4  # m/s^2, least CoM acceleration a sole-and-hands support must give (see _line_support_ok)


# ---------------------------------------------------------------------- the search
def _feet_mid(model: StanceModel, stance) -> np.ndarray | None:
    feet = [model.target(c)[0] for c in stance if c.limb in hum.FEET]
    return np.mean(feet, axis=0) if feet else None


def _heuristic(model: StanceModel, stance, goal: np.ndarray, hand_discount: float = HAND_DISCOUNT) -> float:
    """Goal distance in step lengths: of the feet contacts (each missing foot adds half a
    step), plus that of the hands from a point 1 m above the goal over ``hand_discount`` (hands
    lead: on a ladder or a rail they go up and ahead of the feet).

    The climb search counts the hands as the feet (CLIMB_HAND_DISCOUNT): on a plane steeper than
    a sole's cone no stance of the feet alone is balanced, so the rail hand cannot move once both
    feet are on it and where it was grasped from the floor bounds the climb. At a third, the
    searches of eval slopes 8 and 12 grasped the rail 0.7-0.8 m up, climbed till both feet stood
    below that hand and spent their 400 stances there."""
    feet = [model.target(c)[0] for c in stance if c.limb in hum.FEET]
    d = np.mean([np.linalg.norm(f - goal) for f in feet]) if feet else 10.0
    hands = [model.target(c)[0] for c in stance if c.limb in hum.HANDS]
    lead = goal + np.array([0.0, 0.0, 1.0])
    dh = np.mean([np.linalg.norm(h - lead) for h in hands]) if hands else 1.0
    return (d + dh / hand_discount) / STEP_LENGTH + 0.5 * (2 - len(feet))


def climbs_beyond_sole_cone(model: StanceModel) -> bool:
    """Whether the feet may stand on a plane too steep for a lone sole (:func:`beyond_sole_cone`):
    where the plain search spends its budget, :func:`plan` runs the climb search."""
    return any(beyond_sole_cone(s) and any(l in hum.FEET for l in s.limbs) for s in model.surfaces.values())


def beyond_sole_cone(s) -> bool:
    """Whether a lone sole cannot stand on plane ``s``: it is inclined beyond the part of its
    friction cone the plan may use (MU_MARGIN)."""
    return s.kind == "plane" and float(s.normal[2]) < math.cos(math.atan(MU_MARGIN * s.mu))


def move_signature(stance, child) -> tuple:
    """What a move changes: ("add", limb, surface) or ("release", limb) (positions aside)."""
    added, removed = set(child) - set(stance), set(stance) - set(child)
    if added:
        c = added.pop()
        return ("add", c.limb, c.surface)
    return ("release", removed.pop().limb)


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


def plan(task: StanceTask, *, time_limit: float | None = None, max_nodes: int = 400,
         goal: np.ndarray | None = None, goal_radius: float | None = None, start=None,
         exclude=frozenset()) -> Plan:
    """Best-first search for a stance sequence from the start stance to one with both feet
    within ``goal_radius`` (default: the task's) of ``goal`` (default: the task's).

    ``start``: (stance, (base position, base quaternion, joint angles)) to plan from instead of
    the env's initial stance (a replan from where the robot stands; the configuration is first
    settled on the stance's contacts). ``exclude``: moves not to take, as (stance_key of the
    stance moved from, :func:`move_signature`) pairs (a transition that failed when executed).

    The plain search first; if it spends its budget where the feet climb a plane a lone sole
    cannot stand on (:func:`climbs_beyond_sole_cone`), the climb search, with ``max_nodes``
    stances of its own and what is left of ``time_limit`` (``Plan.searches`` lists both;
    ``Plan.nodes`` counts the stances of both)."""
    t0 = time.perf_counter()
    deadline = None if time_limit is None else t0 + time_limit
    model = StanceModel(task)
    goal = task.goal() if goal is None else np.asarray(goal, float)
    radius = task.goal_radius if goal_radius is None else float(goal_radius)
    out = Plan("exhausted")
    try:
        if start is None:
            step0, stance0 = start_state(model)
        else:
            stance0 = tuple(sorted(start[0]))
            res = solve_ik(model, start[1], stance0, stance0)
            step0 = None if res is None else res[0]
        out.ik_calls += 1
        if step0 is None:
            return out
        args = (model, stance0, step0, goal, radius, max_nodes, deadline, exclude, out)
        _search("plain", *args, hand_discount=HAND_DISCOUNT, near_footholds=False)
        if out.status == "budget" and climbs_beyond_sole_cone(model):
            _search("climb", *args, hand_discount=CLIMB_HAND_DISCOUNT, near_footholds=True)
            if out.status == "exhausted":
                out.status = "budget"     # the plain search's space was not all searched
        return out
    finally:
        out.seconds = time.perf_counter() - t0
        model.close()


def _search(name: str, model: StanceModel, stance0, step0, goal: np.ndarray, radius: float, max_nodes: int,
            deadline: float | None, exclude, out: Plan, *, hand_discount: float, near_footholds: bool) -> None:
    """One best-first search from ``stance0`` (configuration ``step0``), at most ``max_nodes``
    expanded stances and until ``deadline`` (perf_counter time); sets ``out.status`` (and on
    success its stances and steps), adds its stances and IK calls to ``out``'s and appends
    (``name``, status, stances) to ``out.searches``. ``hand_discount``: :func:`_heuristic`'s;
    ``near_footholds``: :func:`adjacent_moves`'s."""
    nodes0 = out.nodes
    # lazy best-first: a child enters the queue with an optimistic priority (an Adj+ contact
    # at the far end of its range) and its IK is solved only when it is popped; a solved
    # child re-enters with its true priority. Most children are never popped, so the IK
    # runs about once per expansion instead of once per neighbour.
    counter = 0
    queue = [(_heuristic(model, stance0, goal, hand_discount), counter, 0.0, stance0, step0, None, None)]
    seen = {stance_key(stance0)}
    nodes = {}
    out.status = "exhausted"
    while queue:
        if out.nodes - nodes0 >= max_nodes or (deadline is not None and time.perf_counter() > deadline):
            out.status = "budget"
            break
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
            heapq.heappush(queue, (g + _heuristic(model, child, goal, hand_discount), counter, g, child, cstep,
                                   parent, None))
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
            break
        for estimate, move in adjacent_moves(model, stance, (step.base_pos, step.base_quat, step.q), goal,
                                             near_footholds=near_footholds):
            if stance_key(estimate) in seen or (key, move_signature(stance, estimate)) in exclude:
                continue
            counter += 1
            # a stance of one contact reached by letting go of a hand (the robot on one sole
            # with the other foot far behind, then a regrasp) costs more: executed, the shift
            # onto that sole fell on four step tasks
            c = 0.2 + (SINGLE_SUPPORT_COST if len(estimate) == 1 and any(x.limb in hum.HANDS for x in stance)
                       else 0.0)
            heapq.heappush(queue, (g + c + _heuristic(model, estimate, goal, hand_discount), counter, g + c,
                                   estimate, None, key, move))
    out.searches.append((name, out.status, out.nodes - nodes0))


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


def adjacent_moves(model: StanceModel, stance, x0, goal, *, near_footholds: bool = False):
    """Adjacent stances, unsolved: (estimate, solve) with solve() -> (stance, Step) or None.
    Adj+: each free limb on each surface it may touch, its position chosen by the IK (the
    estimate puts it at the far end of its range towards the goal); Adj-: each contact released.

    ``near_footholds`` (the climb search): a foot's Adj+ onto a plane a lone sole cannot stand
    on has a second class, its place at most SHORT_REACH ahead. The IK takes the farthest place
    it reaches (up to REACH); there, the rear foot can be released only with the lead foot low
    on the plane (traced on eval slopes 5, 8, 12: of 136-244 floor-foot releases, the 1-15 the
    IK solved all but one had the slope foot at most 0.55 m up)."""
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
            ranges = [(lo, hi)]
            if near_footholds and limb in hum.FEET and beyond_sole_cone(s):
                near = (lo, min(hi, u_now + SHORT_REACH)) if goal_dir > 0 else (max(lo, u_now - SHORT_REACH), hi)
                if near[0] <= near[1] and near != (lo, hi):
                    ranges.append(near)
            for lo_, hi_ in ranges:
                free = Contact(limb, s.name, float(np.clip(u_now + 0.25 * goal_dir, lo_, hi_)))
                far = Contact(limb, s.name, hi_ if goal_dir > 0 else lo_)

                def solve(free=free, lo=lo_, hi=hi_, goal_dir=goal_dir):
                    res = solve_ik(model, x0, tuple(stance) + (free,), stance, free=free, u_bounds=(lo, hi),
                                   goal_dir=goal_dir)
                    if res is None:
                        return None
                    step = res[0]
                    model.set(x0)
                    if free.limb in hum.FEET and not _on_bar(model, free):
                        # the paper: a step is a move only if a transition between its stances exists
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
