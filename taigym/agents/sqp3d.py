"""``sqp`` on ``taigym/Pour3D-v0``: Pan & Manocha 2016's planner in joint space (its appendix).

``taigym.agents.make("sqp", env)`` on Pour3D-v0 builds this agent. At the first ``act`` of an
episode it plans, then tracks the plan:

1. The pour in the vertical plane through S and T (``task.plane()``): the 2D trust-region SQP
   of :mod:`taigym.planners.sqp` on the task's cross-section (``task.section()``: S's and T's
   cross-sections through their axes, the boxes where they meet the plane, the hand's
   footprint beside S as circles fixed to S, :func:`holder_circles`), with Pan & Manocha 2016's
   simplified liquid model on S's cross-section (the 2D tables and the coefficients identified
   from 2D FLIP pours: ``scripts/outflow3d_check.py`` measures how they predict the 3D
   outflow). The plan's poses are then checked against the 3D walls (S's revolved wall can
   meet T's off the plane while the cross-sections keep their clearance); if they meet, the
   SQP plans again from its plan with the clearance raised by the depth (at most 3 plans).
2. The planned (x, y, theta) of every node mapped to S's pose (origin and axis in the robot
   frame) and to joint angles by inverse kinematics (:func:`joint_trajectory`), node after
   node from the start configuration, the arm approximated by spheres
   (:class:`ArmSpheres`) kept ``arm_clearance`` from the boxes, the counter and T in the IK's
   null space, within the joint limits; the joint speeds between nodes are checked against
   the Panda's.
3. ``act``: the planned joint velocity at the end of the next step plus ``track_gain`` of the
   predicted joint error (the env integrates joint angles by the trapezoid rule). The plan
   ends ``drain_time`` s before the horizon; S then holds its last pose.

Options: ``drain_time`` (s, default 1), ``arm_clearance`` (m, 0.01), ``track_gain`` (0.5),
``max_tilt_rate`` (rad per node, 0.08: the wrist's roll tilts S, 2.61 rad/s at most) and any
field of :class:`taigym.planners.sqp.SQPConfig` (``time_limit`` default
:data:`PLAN_TIME_LIMIT`, for all the plans). ``plan_seconds`` (s): the time spent planning this
episode, 2D SQP and IK; ``plan2d``: the 2D plan; ``joints``: the joint trajectory; ``report``: IK
error, sphere clearance, joint speed, the SQP's status and the 3D check.
"""

from __future__ import annotations

import dataclasses
import math
import time

import numpy as np

from taigym.planners.sqp import PourPlan, PourProblem, SQPConfig, plan_pour
from taigym.sim.geometry import densify

from .base import Agent, planning
from .sqp import split_options

AGENT_OPTIONS = {"drain_time": 1.0, "arm_clearance": 0.01, "track_gain": 0.5, "max_tilt_rate": 0.08}
# link frames along the arm, base to wrist: the links the IK's null space can move with S's pose
# held. The hand and the fingers are fixed to S (the grasp): the 2D planner keeps their footprint
# (holder_circles) clear of the boxes instead
LINK_CHAIN = (0, 2, 3, 4, 6)
LINK_RADIUS = 0.06                          # m, the Panda's links
HAND_LINKS = (8, 9, 10)                     # the hand and its fingers
# s of wall time for the 2D SQP (SQPConfig.time_limit; the IK takes ~0.1 s more): under load 3-5
# on 2 cores a hard eval task took 15 s to converge (8 s, Pour-v0's limit, left S in T's wall)
PLAN_TIME_LIMIT = 25.0


class ArmSpheres:
    """The arm as spheres (Pan & Manocha 2016's collision model): along the chain of link frames
    :data:`LINK_CHAIN`, at most 8 cm apart, radius :data:`LINK_RADIUS`, against boxes given by
    (centre, half extents, rotation) in the robot frame."""

    def __init__(self, arm, boxes):
        self.arm = arm
        self.boxes = [(np.asarray(c, float), np.asarray(h, float), np.asarray(r, float)) for c, h, r in boxes]

    def centres(self, q) -> np.ndarray:
        return densify(self.arm.link_positions(q, LINK_CHAIN), 0.08)

    def clearance(self, q) -> np.ndarray:
        """(spheres,) distance (m) of each sphere's surface to the nearest box (< 0: inside)."""
        c = self.centres(q)
        d = np.full(len(c), np.inf)
        for centre, half, rot in self.boxes:
            e = np.abs((c - centre) @ rot) - half
            d = np.minimum(d, np.linalg.norm(np.maximum(e, 0.0), axis=1) + np.minimum(e.max(1), 0.0))
        return d - LINK_RADIUS


def holder_circles(arm, q0: np.ndarray, task) -> tuple:
    """The hand's footprint in S's cross-section frame (x, y, radius; m), for the 2D planner:
    the bounding box of the hand and fingers (links :data:`HAND_LINKS`) at the start (S upright)
    projected onto the pour plane, covered by circles as tall as it. The grasp is fixed, so
    the footprint turns with S."""
    _, R, _ = task.plane()
    corners = [[a, b, c] for lo, hi in arm.link_boxes(q0, HAND_LINKS)
               for a in (lo[0], hi[0]) for b in (lo[1], hi[1]) for c in (lo[2], hi[2])]
    loc = (np.array(corners) - np.asarray(task.source_position)) @ R       # S upright at the start
    (x0, y0), (x1, y1) = loc[:, :2].min(0), loc[:, :2].max(0)
    r = 0.5 * (y1 - y0)
    xs = np.linspace(x0 + r, x1 - r, max(int(math.ceil((x1 - x0 - 2 * r) / r)), 1) + 1)
    return tuple((float(x), 0.5 * (y0 + y1), r) for x in xs)


def joint_trajectory(arm, poses: np.ndarray, q0: np.ndarray, spheres: ArmSpheres,
                     clearance: float, qd_max: np.ndarray, dt: float) -> tuple[np.ndarray, dict]:
    """Joint angles (N + 1, 7) holding S at ``poses`` = (origins (N + 1, 3), axes (N + 1, 3);
    robot frame), node after node from ``q0`` (node 0's angles). At each node the IK
    (:func:`taigym.envs.panda.container_ik`, seeded and postured at the previous node's angles)
    is followed by null-space steps that push the arm's spheres out to ``clearance`` from the
    boxes. Returns the angles and a report: the
    worst IK error (m + rad), the smallest sphere clearance (m) and the largest joint speed
    as a fraction of ``qd_max``."""
    from taigym.envs.panda import JOINT_HIGH, JOINT_LOW, container_ik

    origins, axes = poses
    qs = [np.asarray(q0, float)]
    worst_err, min_clear = 0.0, np.inf
    for p, a in zip(origins[1:], axes[1:]):
        q, err = container_ik(arm, p, a, qs[-1], posture=qs[-1], iterations=30)
        q_plain, err_plain = q, err
        for _ in range(10):                     # keep the spheres clear, S's pose fixed
            d = spheres.clearance(q)
            k = int(np.argmin(d))
            if d[k] >= clearance:
                break
            grad = np.array([(spheres.clearance(q + 1e-4 * e)[k] - d[k]) / 1e-4 for e in np.eye(7)])
            J = arm.jacobian(q)
            R_axis = np.eye(3) - np.outer(a, a)
            Jt = np.vstack([J[:3], R_axis @ J[3:]])
            null = np.eye(7) - np.linalg.pinv(Jt) @ Jt
            g = null @ grad
            if g @ grad < 1e-9:
                break
            step = g * (clearance - d[k]) / (g @ grad)
            q = np.clip(q + step / max(1.0, np.abs(step).max() / 0.1), JOINT_LOW, JOINT_HIGH)
            q, err = container_ik(arm, p, a, q, posture=q, iterations=10)
        if err > max(2 * err_plain, 1e-3):      # the push cost S's pose: keep the plain IK
            q, err = q_plain, err_plain
        worst_err = max(worst_err, err)
        min_clear = min(min_clear, float(spheres.clearance(q).min()))
        qs.append(q)
    qs = np.array(qs)
    speed = float((np.abs(np.diff(qs, axis=0)) / dt / qd_max).max()) if len(qs) > 1 else 0.0
    return qs, {"ik_error": worst_err, "sphere_clearance": min_clear, "joint_speed": speed}


class SQP3DAgent(Agent):
    """``taigym.agents.make("sqp", env)`` on Pour3D-v0."""

    name = "sqp"
    families = ("pour3d",)

    def __init__(self, env, **cfg):
        self.planner_cfg = split_options(cfg, AGENT_OPTIONS)
        super().__init__(env, **{**AGENT_OPTIONS, **cfg})
        from taigym.envs.panda import PandaArm
        from taigym.envs.pour3d import MAX_JOINT_SPEED
        from taigym.envs.transport3d_tasks import HOME

        self.arm = PandaArm(HOME)                # the planner's model of the robot
        self.qd_max = MAX_JOINT_SPEED
        self.reset()

    def reset(self, *, seed: int | None = None) -> None:
        super().reset(seed=seed)
        self._task, self.joints, self.plan2d, self.report = None, None, None, {}
        self._step = 0

    @planning
    def plan(self, task, q0: np.ndarray) -> np.ndarray:
        """Plan the pour of ``task`` from joint angles ``q0`` (module docstring, steps 1-2)."""
        from taigym.envs.pour3d import PlaneScene
        from taigym.envs.pour3d_tasks import COUNTER

        u = self.env.unwrapped
        t0 = time.perf_counter()
        dt, wall = u.dt, u.wall
        scene = PlaneScene(task, wall)
        origin, R, (L, H, D) = scene.origin, scene.R, scene.size
        nodes = max(int(round((u.horizon - self.cfg["drain_time"]) / dt)), 10)
        cfg = SQPConfig(**{"nodes": nodes, "dt": dt, "time_limit": PLAN_TIME_LIMIT,
                           "max_step": (0.025, 0.025, self.cfg["max_tilt_rate"]), **self.planner_cfg})
        prob = dataclasses.replace(PourProblem.from_task(scene.section, wall_thickness=wall, domain=(L, H)),
                                   holder=holder_circles(self.arm, q0, task))
        # S's revolved wall can meet T's off the plane while their cross-sections keep the
        # clearance: check the plan in 3D and plan again, from it, with the clearance raised
        # by the depth, within the time limit
        init, budget, clearance = None, cfg.time_limit, cfg.clearance
        for _ in range(3):
            cfg = dataclasses.replace(cfg, clearance=clearance,
                                      time_limit=max(budget - (time.perf_counter() - t0), 2.0))
            self.plan2d: PourPlan = plan_pour(prob, cfg, init=init)
            depth = max(scene.penetration(np.array([x, y, 0.5 * D, 0.0, 0.0, th]))
                        for x, y, th in self.plan2d.poses)
            if depth <= 0.0:
                break
            init, clearance = self.plan2d.poses, clearance + depth + 0.002
        x, y, th = self.plan2d.poses.T
        origins = origin + np.column_stack([x, y, np.full_like(x, 0.5 * D)]) @ R.T
        axes = np.column_stack([-np.sin(th), np.cos(th), np.zeros_like(th)]) @ R.T
        # the arm against the boxes, the counter and T (its bounding box)
        boxes = [(b[:3], b[3:], np.eye(3)) for b in (COUNTER, *task.obstacles)]
        *t_centre, t_r, t_h = scene.target_cylinder()
        boxes.append((t_centre, np.array([t_r, t_r, 0.5 * t_h]), np.eye(3)))
        self.joints, self.report = joint_trajectory(self.arm, (origins, axes), q0, ArmSpheres(self.arm, boxes),
                                                    self.cfg["arm_clearance"], self.qd_max, dt)
        self.report.update(sqp_status=self.plan2d.status, sqp_seconds=self.plan2d.wall_time,
                           clearance=float(cfg.clearance), wall_depth_3d=float(depth))
        self._task, self._step = task, 0
        return self.joints

    def act(self, obs, info: dict) -> np.ndarray:
        u = self.env.unwrapped
        q, qd = np.asarray(obs[:7], float), np.asarray(obs[7:14], float)
        if self.joints is None or u.task is not self._task:
            self.plan(u.task, q)
        J, dt, k = self.joints, u.dt, self._step
        n = min(k + 1, len(J) - 1)
        # the planned velocity at node n (central differences; zero once the plan has ended)
        v_ref = (J[min(n + 1, len(J) - 1)] - J[n - 1]) / (2 * dt) if k + 1 < len(J) - 1 else np.zeros(7)
        predicted = q + 0.5 * (qd + v_ref) * dt
        v = v_ref + self.cfg["track_gain"] * (J[n] - predicted) / dt
        self._step += 1
        return np.clip(v / self.qd_max, -1.0, 1.0).astype(np.float32)
