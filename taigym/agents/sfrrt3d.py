"""The SFRRT* expert (the SFRRT* paper, 2024) for ``taigym/Transport3D-v0``: plans on reset, then tracks.

``taigym.agents.make("sfrrt", env)`` on Transport3D-v0 builds this agent. On ``reset`` it plans
the container's path with :func:`taigym.planners.sfrrt3d.plan_path3d` (RRT* over the
container's position; a position is free when the arm, holding the container upright there in
the upright posture family, and the container touch no box and not the table), times it with
Ruckig and lowers the jerk until the spill-free classifier accepts (SFTP): ``classifier=
"slosh"`` (default; :class:`~taigym.planners.sfrrt3d.SloshClassifier3D`: precision 0.98, recall
0.59 on 883 simulator-labelled 3D carries, nothing fitted to them), ``"learned"`` (the SFRRT* paper's
transformer trained on them, ``taigym/models/data/sfc3d.pt`` or ``classifier_path``; precision
0.83 on held-out tasks, ``docs/experts/sfrrt.md``) or a callable. ``act`` turns the planned velocity, plus
a correction of the position error, into joint velocities within that family
(:func:`taigym.agents.carry.family_action`), so the arm moves through the very configurations
the planner checked. With ``fixed_jerk=(j, j, j)`` it is the baseline: the same
path, one fixed jerk; with ``path_planner="ompl"`` the path comes from OMPL's InformedRRT*.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from ..planners.sfrrt import Plan, sfrrt
from ..planners.sfrrt3d import Problem3D, config_3d
from ..sim.constants import CONTROL_DT
from .base import Agent, planning
from .carry import family_action
from .sfrrt import check_planner_options, path_planners, spill_free_classifier

TRACK_GAIN = 0.3          # fraction of the predicted position error corrected per step
SAMPLE_MARGIN = 0.15      # m: the sampler's box is start's and goal's, this much larger
CLEARANCE = 0.01          # m: the planner's container is this much larger
APPROACH = 0.2            # m: the pre-place position's distance from the goal


class ArmCheck:
    """Collision check of a container position for the planner: the arm's configuration there
    (the upright posture family's, one per position; inverse kinematics seeded with the
    configuration of the nearest position already checked), then the arm and the container must
    keep ``margin`` (m) from the boxes and the table."""

    def __init__(self, arm, q0: np.ndarray, margin: float):
        self.arm, self.margin = arm, margin
        self.positions = np.zeros((1024, 3))
        self.positions[0], _ = arm.container_pose(q0)
        self.configurations, self.n = [np.asarray(q0, dtype=np.float64)], 1

    def __call__(self, p: np.ndarray) -> bool:
        p = np.asarray(p, dtype=np.float64)
        near = int(np.argmin(np.linalg.norm(self.positions[:self.n] - p, axis=1)))
        q = self.arm.upright_configuration_at(p, self.configurations[near])
        if q is None:
            return True
        if self.n == len(self.positions):
            self.positions = np.concatenate([self.positions, np.zeros_like(self.positions)])
        self.positions[self.n] = p
        self.configurations.append(q)
        self.n += 1
        return self.arm.collides(q, self.margin)


def planning_problem(arm, task, q0: np.ndarray) -> Problem3D:
    """The planner's problem for ``task`` from the arm (a ``PandaCarrier``) at joint angles
    ``q0``: the sampler's box around start and goal (and over the highest box), and an
    :class:`ArmCheck` at the planning clearance (less if the start or goal sits closer)."""
    arm.set_scene(task)
    check = ArmCheck(arm, q0, CLEARANCE)
    start = check.positions[0].copy()
    ends = np.stack([start, task.goal])
    top = max([cz + hz for _, _, cz, _, _, hz in task.obstacles], default=0.0)
    lo = ends.min(0) - SAMPLE_MARGIN
    # over the highest box, unless it is a post taller than worth lifting over
    top = min(top, ends[:, 2].max() + 0.25)
    hi = np.maximum(ends.max(0) + SAMPLE_MARGIN, [0.0, 0.0, top + SAMPLE_MARGIN])
    for margin in (CLEARANCE, CLEARANCE / 2, 0.0):
        check.margin = margin
        if not (check(start) or check(np.asarray(task.goal))):
            break
    return Problem3D(start=tuple(start), goal=task.goal,
                     props=(task.bottom_radius, task.top_radius, task.height, task.fill_height),
                     bounds=(tuple(np.maximum(lo, [-1.0, -1.0, 0.05])), tuple(hi)), collides_at=check)


def pre_place(problem: Problem3D) -> np.ndarray | None:
    """The pre-place position: :data:`APPROACH` m back from the goal towards the arm's base,
    the way into a shelf or between posts, if it and the straight line on to the goal are free
    (else None)."""
    goal = np.asarray(problem.goal, dtype=np.float64)
    back = np.array([goal[0], goal[1], 0.0]) / max(float(np.hypot(goal[0], goal[1])), 1e-9)
    line = goal - APPROACH * back * np.linspace(1.0, 0.0, 11)[:, None]
    return line[0] if problem.path_free(line) else None


class SFRRT3DAgent(Agent):
    """``taigym.agents.make("sfrrt", env)`` on Transport3D-v0."""

    name = "sfrrt"
    families = ("transport3d",)

    def __init__(self, env, fixed_jerk=None, classifier="slosh", classifier_path=None,
                 damping: float = 0.02, retries: int = 3, path_planner: str = "sfrrt", **cfg):
        super().__init__(env, fixed_jerk=fixed_jerk, classifier=classifier, path_planner=path_planner, **cfg)
        self.retries = int(retries)
        self.path_planner = path_planners(path_planner)[1]
        from taigym.envs.transport3d import MAX_JOINT_SPEED, PandaCarrier

        self.arm = PandaCarrier()                  # the planner's model of the robot
        self.dt, self.qd_max = CONTROL_DT, MAX_JOINT_SPEED
        self.damping = float(damping)
        self.fixed_jerk = None if fixed_jerk is None else np.asarray(fixed_jerk, dtype=np.float64)
        self.planner_cfg = config_3d(**check_planner_options(cfg))
        self.classifier = spill_free_classifier(classifier, classifier_path, "3d")
        self.plan: Plan | None = None

    def reset(self, *, seed: int | None = None) -> None:
        super().reset(seed=seed)
        task = self.env.unwrapped.task
        self.replan(task, np.asarray(task.start))

    @planning
    def replan(self, task, q0) -> Plan:
        """Plan from the arm at joint angles ``q0``, at rest, to the task's goal. The timed path
        is then followed from ``q0`` as the controller will and checked without clearance; if
        it collides, or no path was found, the planner tries again (``retries`` times in all),
        every second time to the pre-place position (:func:`pre_place`) and then straight in;
        then it falls back to lifting the container straight up over the highest box, across
        and down (``self.fallback`` is then True)."""
        problem = planning_problem(self.arm, task, q0)
        pre = pre_place(problem)
        self.fallback = False
        for attempt in range(self.retries):
            planner = self.path_planner
            if attempt % 2 == 1 and pre is not None:
                def planner(pr, cfg, rng):
                    return np.vstack([self.path_planner(replace(pr, goal=tuple(pre)), cfg, rng), pr.goal])
            try:
                self.plan = sfrrt(problem, self.classifier, self.planner_cfg, self.rng,
                                  fixed_jerk=self.fixed_jerk, planner=planner)
            except RuntimeError:
                continue
            if self._executable(task, q0):
                break
        else:
            self.fallback = True
            start, goal = np.asarray(problem.start), np.asarray(task.goal)
            z = max([cz + hz for _, _, cz, _, _, hz in task.obstacles] + [start[2], goal[2]]) + 0.06
            path = np.array([start, [*start[:2], z], [*goal[:2], z], goal])
            self.plan = sfrrt(problem, self.classifier, self.planner_cfg, self.rng,
                              fixed_jerk=self.fixed_jerk, planner=lambda *_: path)
        self.k = 0
        return self.plan

    def _executable(self, task, q0) -> bool:
        """Roll the controller out on the arm's kinematics, as the env steps it (joint angles by
        the trapezoid rule, collisions at mid-step and step end): no collision on the way."""
        q, qd = np.asarray(q0, dtype=np.float64), np.zeros(7)
        for k in range(len(self.plan.trajectory.t) + 10):
            p, _ = self.arm.container_pose(q)
            v_now = self.arm.container_velocity(q, qd)[:3]
            qd1 = self._command(k, q, p, v_now) * self.qd_max
            q1 = q + 0.5 * (qd + qd1) * self.dt
            if self.arm.collides(0.5 * (q + q1)) or self.arm.collides(q1):
                return False
            q, qd = q1, qd1
        return True

    def _command(self, k: int, q, p, v_now) -> np.ndarray:
        """The action at control step k: the planned velocity at the step's end, plus a
        correction of the position error predicted there."""
        tr = self.plan.trajectory
        n = min(k + 1, len(tr.t) - 1)
        v_ref = tr.vel[n] if k + 1 < len(tr.t) else np.zeros(3)
        predicted = p + 0.5 * (v_now + v_ref) * self.dt
        v = v_ref + TRACK_GAIN * (tr.pos[n] - predicted) / self.dt
        return family_action(self.arm, q, v, self.qd_max, self.damping)

    def act(self, obs, info) -> np.ndarray:
        a = self._command(self.k, np.asarray(obs[:7], np.float64), info["position"],
                          np.asarray(obs[20:23], np.float64))
        self.k += 1
        return a
