"""Bouyarmane & Kheddar's stance planner: the independent checker, a simple solved scene, unreachable goals."""

import dataclasses

import numpy as np
import pytest
from scipy import sparse
from scipy.optimize import linprog

import taigym
from taigym.envs.multicontact_tasks import MultiContactTask
from taigym.planners import stance as st
from taigym.planners import stance_ik, stance_statics
from taigym.sim import humanoid as hum
from taigym.sim.constants import GRAVITY

TASK = MultiContactTask(family="gap", start=0.45, size=0.4)


def _eval(family: str, index: int):
    return [t for t in taigym.envs.tasks("multicontact", "eval") if t.family == family][index]


@pytest.fixture(scope="module")
def start_step():
    model = st.StanceModel(TASK)
    try:
        step, _ = st.start_state(model)
        step.mass = model.robot.total_mass
    finally:
        model.close()
    assert step is not None
    return step


def test_checker_accepts_the_start_stance(start_step):
    assert st.check_step(TASK, start_step) == []
    total = sum(f for _, _, f, *_ in start_step.points)
    assert total[2] == pytest.approx(start_step.mass * 9.81, rel=1e-3)   # the feet carry the weight


def test_checker_rejects_bad_stances(start_step):
    heavy = dataclasses.replace(start_step, points=[(l, x, 1.5 * f, k, n, mu) for l, x, f, k, n, mu in start_step.points])
    assert any("equilibrium" in v for v in st.check_step(TASK, heavy))
    l, x, f, k, n, mu = start_step.points[0]
    slip = [(l, x, f + np.array([2.0 * np.linalg.norm(f), 0.0, 0.0]), k, n, mu)] + start_step.points[1:]
    assert any("friction cone" in v for v in st.check_step(TASK, dataclasses.replace(start_step, points=slip)))
    q = start_step.q.copy()
    q[6] = 0.5          # knee beyond its upper limit (-2 deg)
    assert "joint limits" in st.check_step(TASK, dataclasses.replace(start_step, q=q))
    weak = dataclasses.replace(start_step, tau=start_step.tau + 20.0)
    assert any("!= statics" in v for v in st.check_step(TASK, weak))


@pytest.fixture(scope="module")
def walk():
    return st.plan(TASK, goal=np.array([0.3, 0.0, 0.0]), goal_radius=0.1)


def test_planner_solves_a_short_walk_and_every_step_checks(walk):
    plan = walk
    assert plan.status == "solved", plan
    assert len(plan.steps) >= 3
    for a, b in zip(plan.stances, plan.stances[1:]):      # adjacent: one contact added or removed
        assert abs(len(a) - len(b)) == 1
    model = st.StanceModel(TASK)
    try:
        for step in plan.steps:
            assert st.check_step(TASK, step) == []
            # the IK's own promise, tighter than the checker's 5 mm: contacts met to POS_TOL
            model.set((step.base_pos, step.base_quat, step.q))
            for c in step.touching:
                assert np.linalg.norm(model.target(c)[0] - model.limb_ref(c.limb)) <= st.POS_TOL
    finally:
        model.close()


def test_every_foot_step_has_a_balanced_transition_with_the_foot_lifted(walk, monkeypatch):
    """Bouyarmane & Kheddar: a step is a move only if a transition exists between its stances; here a
    configuration of the support alone, the swinging sole lifted clear of the floor midway."""
    feet_steps = [(a, b, (set(sb) - set(sa)).pop()) for sa, sb, a, b
                  in zip(walk.stances, walk.stances[1:], walk.steps, walk.steps[1:])
                  if len(sb) > len(sa) and (set(sb) - set(sa)).pop().limb in ("left_foot", "right_foot")]
    assert feet_steps
    model = st.StanceModel(TASK)
    try:
        for a, b, new in feet_steps:
            assert b.transition is not None
            limb = new.limb
            model.set((a.base_pos, a.base_quat, a.q))
            start = model.limb_ref(limb)
            model.set(b.transition)
            lifted = model.limb_ref(limb)
            assert lifted[2] >= st.SWING_CLEARANCE - st.LIFT_TOL             # floor at z = 0
            end = model.target(new)[0]
            assert np.linalg.norm(lifted[:2] - 0.5 * (start + end)[:2]) <= st.LIFT_TOL
            points, tau, _ = st.contact_forces(model, b.support)
            # the independent checker: equilibrium on the support, cones, torques, limits, no collision
            check = st.Step(b.support, b.support, *b.transition, points, tau)
            assert st.check_step(TASK, check) == []
        # a lift the leg cannot reach (hip about 0.9 m up, leg 0.8 m): no transition, so no move
        monkeypatch.setattr(stance_ik, "SWING_CLEARANCE", 3.0)
        a, b, new = feet_steps[0]
        assert st.solve_transition(model, (a.base_pos, a.base_quat, a.q), b, new.limb) is None
    finally:
        model.close()


def test_a_replan_starts_where_the_robot_stands_and_avoids_the_move_that_failed(walk):
    """From a stance of the plan and its configuration (as the agent replans when a transition
    failed), the planner searches from that stance and never takes the excluded move from it."""
    stance, step = walk.stances[0], walk.steps[0]          # both soles down; the plan lets go of one
    failed = st.move_signature(walk.stances[0], walk.stances[1])
    assert failed[0] == "release"
    plan = st.plan(TASK, goal=np.array([0.3, 0.0, 0.0]), goal_radius=0.1, max_nodes=200,
                   start=(stance, (step.base_pos, step.base_quat, step.q)),
                   exclude=frozenset({(st.stance_key(stance), failed)}))
    assert plan.solved and plan.stances[0] == tuple(sorted(stance))
    assert all(not (st.stance_key(a) == st.stance_key(stance) and st.move_signature(a, b) == failed)
               for a, b in zip(plan.stances, plan.stances[1:]))


def test_osqp_matrices_built_directly_equal_scipys():
    """The IK's QPs get their CSC matrices built directly, exactly as scipy would store them: the
    search's outcomes hinge on the last bit of the IK's results."""
    M = np.random.default_rng(0).normal(size=(9, 7)) * (np.random.default_rng(1).random((9, 7)) < 0.4)
    a, b = stance_statics.csc(M), sparse.csc_matrix(M)
    assert a.shape == b.shape and a.has_sorted_indices
    assert all(np.array_equal(getattr(a, k), getattr(b, k)) for k in ("data", "indices", "indptr"))


def test_unreachable_goal_ends_within_budget():
    plan = st.plan(TASK, goal=np.array([0.0, 0.0, 5.0]), time_limit=4.0)
    assert plan.status in ("budget", "exhausted") and not plan.solved


def test_ladder_stances_keep_the_hands_on_the_robots_side_of_the_rungs():
    """The gaps between rungs are free space, but a hand through them is caught behind a rung
    when it swings on: every IK stance on the ladder keeps both hands in front of the rungs."""
    task = MultiContactTask(family="ladder", start=0.43, size=1.24, spacing=0.29)
    model = st.StanceModel(task)
    try:
        step, stance = st.start_state(model)
        (o, n), = model.ladder_planes
        solved = 0
        for estimate, solve in st.adjacent_moves(model, stance, (step.base_pos, step.base_quat, step.q), task.goal()):
            if not any(c.limb in hum.HANDS and c.surface.startswith("rung") for c in estimate):
                continue
            res = solve()
            if res is None:
                continue
            solved += 1
            s = res[1]
            model.set((s.base_pos, s.base_quat, s.q))
            for h in hum.HANDS:
                assert (model.limb_ref(h) - o) @ n >= 0.5 * st.HAND_PLANE_CLEARANCE
        assert solved >= 2
    finally:
        model.close()


def test_ladder_plans_keep_a_free_foot_off_the_rungs():
    """A foot let go on the ladder waits for its swing where the plan put it; left behind the
    plane of rungs (eval ladder 2: 11 cm) the leg went there through the gap between two rungs
    and the foot caught under a rung when it swung on. Every planned stance keeps it in front."""
    task = [t for t in taigym.envs.tasks("multicontact", "eval") if t.family == "ladder"][2]
    plan = st.plan(task, time_limit=60.0)
    assert plan.solved
    model = st.StanceModel(task)
    try:
        (o, n), = model.ladder_planes
        free = 0
        for s in plan.steps:
            model.set((s.base_pos, s.base_quat, s.q))
            for f in set(hum.FEET) - {c.limb for c in s.touching}:
                free += 1
                assert (model.limb_ref(f) - o) @ n >= 0.5 * st.FOOT_PLANE_CLEARANCE
        assert free >= 1
    finally:
        model.close()


class _FloorToTheSlope:
    """A slope task with its floor's contact surface as it was before it ended 0.12 m short of
    the slope (0.05 m): the configurations and plans of the tests using it were found then."""

    def __init__(self, task):
        self.task = task
        self.family, self.start, self.size, self.goal_radius = task.family, task.start, task.size, task.goal_radius

    def scene(self):
        return self.task.scene()

    def goal(self):
        return self.task.goal()

    def surfaces(self):
        return [dataclasses.replace(s, u_range=(s.u_range[0], self.start - 0.05)) if s.name == "floor" else s
                for s in self.task.surfaces()]


def test_no_stance_stands_the_trunk_nearer_the_scene_than_the_controller_keeps_it():
    """A trunk link touching the scene is a fall (the env counts a touch from where pybullet
    reports a contact point: 9.5 mm for the torso, 4-5 mm for the waist and pelvis) and the
    executor's QP drives a trunk link back to TRUNK_CLEARANCE (2 cm) from it. Eval slope 2's plan
    stood the pelvis 6.6 mm from the rail as the right hand let go of the slope (the SQP keeps
    links 5 mm off), and the robot fell as the pelvis touched it. Its moves replayed from the
    start, that release now has no stance; the moves before it keep the trunk TRUNK_CLEARANCE away."""
    moves = [("add", "left_hand", "rail"), ("release", "right_foot"), ("add", "right_foot", "floor"),
             ("release", "left_hand"), ("release", "left_foot"), ("add", "left_foot", "slope"),
             ("add", "left_hand", "rail"), ("add", "right_hand", "slope"), ("release", "right_foot"),
             ("release", "right_hand")]
    task = _FloorToTheSlope([t for t in taigym.envs.tasks("multicontact", "eval") if t.family == "slope"][2])
    model = st.StanceModel(task)
    try:
        step, stance = st.start_state(model)
        for move in moves:
            x = (step.base_pos, step.base_quat, step.q)
            solve = next(s for est, s in st.adjacent_moves(model, stance, x, task.goal())
                         if st.move_signature(stance, est) == move)
            res = solve()
            if res is None:
                assert move == moves[-1]
                break
            stance, step = res
            model.set((step.base_pos, step.base_quat, step.q))
            assert model.trunk_distance(0.1) >= st.TRUNK_CLEARANCE
    finally:
        model.close()


def test_a_sole_on_the_floor_stays_off_the_slope():
    """A sole's contact points lie on its surface: a sole at the end of a slope task's floor
    has its toe short of the slope's foot. Ending 0.05 m before the slope, the floor put the toe
    6 cm up the slope (3 cm into it); executed, eval slope 0's rear sole rested on the slope's
    edge, tilted 12 deg, the body 2-4 cm above the plan's, and the right hand stopped 2.5 cm short
    of the slope (both swing tries timed out)."""
    for task in [t for t in taigym.envs.tasks("multicontact", "eval") if t.family == "slope"][:5]:
        model = st.StanceModel(task)
        try:
            floor = model.surfaces["floor"]
            for foot in hum.FEET:
                pts = np.array([pt for pt, *_ in model.force_points(st.Contact(foot, "floor", floor.u_range[1]))])
                assert pts[:, 0].max() < task.start and np.allclose(pts[:, 2], 0.0)
        finally:
            model.close()


def test_com_target_balances_the_yaw_moment_of_a_rail_hand():
    """On a 34 deg slope (steeper than a sole's friction cone) a single sole needs the rail hand
    to pull it uphill; beside the sole, that pull twists the body about the vertical, which the
    sole's friction alone holds only if the hand carries much of the weight. Stage 1's CoM target
    must account for it (stage 3's full equilibrium does): not over the sole but towards the hand."""
    task = MultiContactTask(family="slope", start=0.42, size=0.6)
    model = st.StanceModel(task)
    try:
        support = (st.Contact("left_foot", "slope", 0.55), st.Contact("left_hand", "rail", 0.32))
        foot = model.target(support[0])[0]
        com = st.com_target(model, support, model.robot.total_mass, foot[:2])
        assert com is not None
        # over the sole the twist cannot be held: the CoM target moves towards the rail hand
        assert com[1] > foot[1] + 0.1
    finally:
        model.close()


def test_com_target_margin_balances_a_neighbourhood():
    """With a margin r the CoM target is balanced in the whole diamond |dx| + |dy| <= r around it
    (its four corners each balanced on their own, checked with margin 0), so a CoM tracked to
    within r of it is held; stability_margin measures r (a sole 9 cm wide: about 4.5 cm at its
    centre, none outside it); a negative r is refused."""
    model = st.StanceModel(TASK)
    mass = model.robot.total_mass
    try:
        feet = (st.Contact("left_foot", "floor", 0.0), st.Contact("right_foot", "floor", 0.3))
        ref = np.array([0.6, 0.3])          # far outside the support: the target is pushed inside it
        edge = st.com_target(model, feet, mass, ref)
        assert st.stability_margin(model, feet, mass, edge)[0] < 0.005     # the plain target: on the edge
        com = st.com_target(model, feet, mass, ref, margin=0.03)
        assert com is not None and np.linalg.norm(com - edge) > 0.02   # moved in from the edge
        assert st.stability_margin(model, feet, mass, com)[0] == pytest.approx(0.03, abs=1e-6)
        for d in ((0.03, 0.0), (-0.03, 0.0), (0.0, 0.03), (0.0, -0.03)):
            corner = com + np.array(d)
            # (to 5 mm: the small-force term of the target QP pulls it a few mm)
            assert np.allclose(st.com_target(model, feet, mass, corner), corner, atol=5e-3)
        sole = feet[:1]
        r, centre = st.stability_margin(model, sole, mass)
        assert 0.03 < r < 0.06
        assert st.com_target(model, sole, mass, ref, margin=0.03) is not None
        assert st.com_target(model, sole, mass, ref, margin=r + 0.005) is None
        assert st.stability_margin(model, sole, mass, centre + np.array([0.0, 0.1])) is None
        with pytest.raises(ValueError, match="margin"):
            st.com_target(model, sole, mass, ref, margin=-0.01)
    finally:
        model.close()


def test_com_accel_margin_is_the_zero_moment_point_bound():
    """With no moment about the CoM, a sole can accelerate a CoM h above it by at most g d / h in a
    direction, d the distance from the CoM's projection back to the sole's edge (the zero-moment
    point stays on the sole): com_accel_margin, the least over four directions, must give that
    bound, and 0 for a CoM outside the sole. (Releases onto a sole and a hand with less than 0.4
    m/s^2 of it fell in the next swing on eval slopes.)"""
    model = st.StanceModel(TASK)
    try:
        sole = (st.Contact("left_foot", "floor", 0.0),)
        pts = np.array([pt for pt, *_ in model.force_points(sole[0])])
        lo, hi = pts[:, :2].min(0), pts[:, :2].max(0)
        h = 0.9                                        # m, CoM height above the sole
        com = np.r_[(lo + hi) / 2 + np.array([0.0, 0.02]), pts[0, 2] + h]   # 2 cm towards the +y edge
        expected = GRAVITY * (hi[1] - com[1]) / h  # towards -y, the CoP on the +y edge
        assert st.com_accel_margin(model, sole, com) == pytest.approx(expected, rel=1e-3)
        assert st.com_accel_margin(model, sole, com + np.array([0.0, 0.1, 0.0])) == 0.0
        both = sole + (st.Contact("right_foot", "floor", 0.0),)
        mid = np.r_[(lo[0] + hi[0]) / 2, 0.0, com[2]]      # between the soles: the soles' length binds
        assert st.com_accel_margin(model, both, mid) == pytest.approx(GRAVITY * (hi[0] - lo[0]) / 2 / h, rel=1e-3)
    finally:
        model.close()


@pytest.mark.slow
def test_planner_climbs_a_steep_slope():
    """A 36 deg eval slope (beyond a sole's friction cone): a checked plan within 60 s. (Slope 5,
    34 deg, this test's task before 2026-11-25, has spent the 400-node budget since the planner
    keeps only releases onto one sole and hands that can accelerate the CoM.)"""
    task = [t for t in taigym.envs.tasks("multicontact", "eval") if t.family == "slope"][16]
    assert task.size > np.radians(34)
    plan = st.plan(task, time_limit=60.0)
    assert plan.solved
    assert all(st.check_step(task, s) == [] for s in plan.steps)


@pytest.mark.slow
def test_the_climb_search_plans_a_long_slope_the_plain_one_does_not():
    """Eval slope 17 (31.5 deg, the goal 0.97 m up it: both feet must leave the floor): the plain
    search spends its 400 stances; the climb search after it finds a checked plan within its own
    400."""
    task = _eval("slope", 17)
    plan = st.plan(task, max_nodes=400)
    assert [(name, status) for name, status, _ in plan.searches] == [("plain", "budget"), ("climb", "solved")]
    assert plan.nodes == sum(n for *_, n in plan.searches)
    assert not any(c.surface == "floor" for c in plan.stances[-1])
    assert all(st.check_step(task, s) == [] for s in plan.steps)


def test_plans_stay_within_the_friction_cones_the_controller_uses():
    """Eval slope 19 (28.5 deg, friction 0.55) is just inside a lone sole's friction cone (28.8
    deg) but outside the MU_MARGIN (85 %) of it the executor's QP may use. Its plan stood on one
    sole there at 99 % of the cone and the robot fell: the planner must find no equilibrium on that
    sole alone, and one on the sole with the rail hand."""
    task = [t for t in taigym.envs.tasks("multicontact", "eval") if t.family == "slope"][19]
    model = st.StanceModel(task)
    try:
        mu = model.surfaces["slope"].mu
        assert st.MU_MARGIN * mu < np.tan(task.size) < mu
        mass = model.robot.total_mass
        sole = st.Contact("left_foot", "slope", 0.5)
        over = model.target(sole)[0][:2]
        assert st.com_target(model, (sole,), mass, over) is None
        assert st.com_target(model, (sole, st.Contact("left_hand", "rail", 0.3)), mass, over) is not None
    finally:
        model.close()


def test_stage_3_finds_forces_where_osqp_stops_at_its_iteration_limit():
    """Eval slope 5 (34 deg), a configuration of the search releasing the floor foot onto the
    slope sole, the rail hand behind it and the right hand on the slope: the rail hand carries
    most of the weight and OSQP stops at its iteration limit on stage 3's force QP, which is
    feasible (a linear program finds forces within every bound). contact_forces must return
    forces that balance the robot within the cones, the grip force and the torque limits, and
    check_step accept them."""
    task = [t for t in taigym.envs.tasks("multicontact", "eval") if t.family == "slope"][5]
    support = (st.Contact("left_foot", "slope", 0.5530740418096399),
               st.Contact("left_hand", "rail", -0.06928260120746019),
               st.Contact("right_hand", "slope", 1.0703609548657853))
    x = ([0.8037277094867523, 0.103681140195763, 1.0655773454223136],
         [-0.0039231808755628, 0.40155291037473584, 0.21119789004542608, 0.891142704656082],
         [0.11568932359711756, 0.06687532607382349, 0.39961329004301366, -0.19594830731065496, -0.65898027793364,
          -0.8072087110040279, -0.31704913366777193, -0.4678267775314835, 0.17748560632812818, 0.0872664675116539,
          0.6108652949333191, -2.094395160675049, -1.352301029739639, -0.8726646304130554, 0.1443286141519469,
          -0.20950221668417907, 0.0918652541465585, -1.570691819184531, -0.5796868108329085, 0.7705100754074562,
          -1.5674772801962125])
    model = st.StanceModel(task)
    try:
        model.set(tuple(np.asarray(v, float) for v in x))
        cols, _ = stance_statics.force_columns(model, support, model.robot.kinematics())
        B = np.column_stack([c[0] for c in cols])
        G = model.robot.gravity_forces()
        tmax = hum.TORQUE_LIMITS
        grip = [hum.GRIP_FORCE if kind == "grasp" else None for _, _, kind in cols]
        lp = linprog(np.zeros(len(cols)), A_eq=B[:6], b_eq=-G[:6], A_ub=np.vstack([B[6:], -B[6:]]),
                     b_ub=np.r_[tmax - G[6:], tmax + G[6:]], bounds=[(0.0, g) for g in grip], method="highs")
        assert lp.status == 0                           # feasible
        out = st.contact_forces(model, support)
        assert out is not None
        points, tau, resid = out
        assert resid <= 1.0 and np.all(np.abs(tau) <= 1.01 * tmax)
        # the floor foot the release lets go of still touches (where the floor's contact range
        # ended when the search found this configuration, 0.05 m before the slope)
        floor = st.Contact("right_foot", "floor", task.start - 0.05)
        step = st.Step(tuple(sorted(support + (floor,))), support, *(np.asarray(v, float) for v in x), points, tau)
        assert st.check_step(task, step) == []
    finally:
        model.close()


def test_the_climb_search_runs_only_where_the_feet_climb_beyond_a_soles_cone():
    """Where the plain search spends its budget on a slope steeper than a lone sole's cone, plan()
    runs the climb search with a budget of its own (a fresh start and a replan alike); the plan
    counts the stances of both. Elsewhere (a gap; a solved plan) the plain search alone, as before."""
    slope = _eval("slope", 12)
    model = st.StanceModel(slope)
    try:
        assert st.climbs_beyond_sole_cone(model)
        step, stance = st.start_state(model)
    finally:
        model.close()
    for start in (None, (stance, (step.base_pos, step.base_quat, step.q))):
        plan = st.plan(slope, max_nodes=3, start=start)
        assert plan.status == "budget"
        assert plan.searches == [("plain", "budget", 3), ("climb", "budget", 3)]
        assert plan.nodes == 6
    gap = _eval("gap", 0)
    model = st.StanceModel(gap)
    try:
        assert not st.climbs_beyond_sole_cone(model)
    finally:
        model.close()
    plan = st.plan(gap, max_nodes=3)
    assert plan.searches == [("plain", "budget", 3)] and plan.nodes == 3


def test_a_solved_plain_search_is_the_plan(walk):
    assert walk.searches == [("plain", "solved", walk.nodes)]


def test_the_climb_search_offers_a_foot_a_near_foothold_on_a_slope_beyond_its_cone():
    """On a plane a lone sole cannot stand on (eval slope 12, 29 deg: beyond the part of the
    sole's cone the plan may use), the IK's farthest foothold leaves the feet so far apart that
    the rear one can never be released (the plain search spends its budget there), so the climb
    search also offers a foot a second class of places, within SHORT_REACH ahead. The plain search
    and level ground: one class."""
    slope = _eval("slope", 12)
    for task, up, near, classes in ((slope, "slope", True, 2), (slope, "slope", False, 1),
                                    (MultiContactTask(family="step", start=0.45, size=0.35), "step", True, 1)):
        model = st.StanceModel(task)
        try:
            step, stance = st.start_state(model)
            x0 = (step.base_pos, step.base_quat, step.q)
            # the right foot let go (the left sole alone holds the robot)
            release = next(solve for est, solve in st.adjacent_moves(model, stance, x0, task.goal())
                           if {c.limb for c in est} == {"left_foot"})
            stance, step = release()
            x0 = (step.base_pos, step.base_quat, step.q)
            moves = [solve for est, solve in st.adjacent_moves(model, stance, x0, task.goal(), near_footholds=near)
                     if any(c.limb == "right_foot" and c.surface == up for c in est)]
            assert len(moves) == classes
            if classes == 1:
                continue
            surface = model.surfaces[up]
            model.set(x0)
            u_now = float((model.limb_ref("right_foot") - np.asarray(surface.origin)) @ np.asarray(surface.t))
            placed = []
            for solve in moves:
                res = solve()
                assert res is not None
                placed.append(next(c.u for c in res[0] if c.limb == "right_foot"))
            far, near_u = sorted(placed, reverse=True)
            assert near_u <= u_now + st.SHORT_REACH + 1e-6 < far
        finally:
            model.close()

