"""``carry``: a resolved-rate controller for Transport3D-v0, the task's scripted reference.

Each step it asks for a container velocity and turns it into joint velocities through the
damped pseudo-inverse of the arm's Jacobian (Whitney's resolved-rate control):

* linear: towards the current waypoint at up to ``max_speed`` (m/s), ramped by ``max_accel``
  (m/s^2) from the last command and slowed to sqrt(2 a d) near the goal, so that the liquid
  is never shaken harder than a gentle carry;
* angular: ``upright_gain`` x (axis x z), turning the container's axis back to vertical.

Waypoints: straight to the goal, or, with boxes in the task, up to ``clearance`` above the
highest box, across, and down. No collision checking beyond that (it is not a planner: the
``sfrrt`` expert is the issue's planner); it shows the task is solvable and the liquid stays in
a container carried gently.
"""

from __future__ import annotations

import numpy as np

from taigym.sim.constants import CONTROL_DT

from .base import Agent, planning

DEFAULTS = dict(max_speed=0.25, max_accel=0.6, gain=2.0, upright_gain=3.0, clearance=0.06,
                damping=0.02, waypoint_radius=0.02)


class CarryAgent(Agent):
    name = "carry"
    families = ("transport3d",)

    def __init__(self, env, **cfg):
        unknown = set(cfg) - set(DEFAULTS)
        if unknown:
            raise ValueError(f"unknown carry-agent option(s): {', '.join(sorted(unknown))}; accepted: "
                             f"{', '.join(DEFAULTS)}")
        super().__init__(env, **{**DEFAULTS, **cfg})
        from taigym.envs.transport3d import MAX_JOINT_SPEED, PandaCarrier

        self.arm = PandaCarrier()                  # its own kinematic model of the robot
        self.dt, self.qd_max = CONTROL_DT, MAX_JOINT_SPEED
        self._task, self.waypoints, self.v_cmd = None, [], np.zeros(3)

    def reset(self, *, seed: int | None = None) -> None:
        super().reset(seed=seed)
        self._task, self.waypoints, self.v_cmd = None, [], np.zeros(3)

    @planning
    def _plan(self, task, position: np.ndarray) -> None:
        goal = np.asarray(task.goal, dtype=np.float64)
        self.waypoints = [goal]
        if task.obstacles:
            top = max(cz + hz for _, _, cz, _, _, hz in task.obstacles) + self.cfg["clearance"]
            z = max(top, position[2], goal[2])
            self.waypoints = [np.array([position[0], position[1], z]), np.array([goal[0], goal[1], z]), goal]
        self._task = task

    def act(self, obs, info: dict) -> np.ndarray:
        c = self.cfg
        task = self.env.unwrapped.task
        q, p, R = np.asarray(obs[:7], np.float64), info["position"], info["rotation"]
        if task is not self._task:
            self._plan(task, p)
        while len(self.waypoints) > 1 and np.linalg.norm(self.waypoints[0] - p) < c["waypoint_radius"]:
            self.waypoints.pop(0)
        d = self.waypoints[0] - p
        dist = np.linalg.norm(d)
        remaining = dist + sum(np.linalg.norm(b - a) for a, b in zip(self.waypoints, self.waypoints[1:]))
        speed = min(c["max_speed"], c["gain"] * dist, np.sqrt(2 * c["max_accel"] * remaining))
        v_des = d / max(dist, 1e-9) * speed
        step = c["max_accel"] * self.dt
        self.v_cmd = self.v_cmd + np.clip(v_des - self.v_cmd, -step, step)
        return upright_action(self.arm, q, R, self.v_cmd, c["upright_gain"], c["damping"], self.qd_max)


def upright_action(arm, q: np.ndarray, R: np.ndarray, velocity: np.ndarray, upright_gain: float,
                   damping: float, qd_max: float) -> np.ndarray:
    """The action (joint velocities / ``qd_max``) that moves the container's origin at
    ``velocity`` (m/s, robot frame) while turning its axis (``R[:, 1]``) back to vertical at
    ``upright_gain`` (1/s): the damped pseudo-inverse of the arm's Jacobian, scaled down so that
    no joint exceeds its speed."""
    w_des = upright_gain * np.cross(R[:, 1], [0.0, 0.0, 1.0])
    J = arm.jacobian(q)
    qd = J.T @ np.linalg.solve(J @ J.T + damping ** 2 * np.eye(6), np.concatenate([velocity, w_des]))
    qd /= max(1.0, np.abs(qd).max() / qd_max)
    return (qd / qd_max).astype(np.float32)


def family_action(arm, q: np.ndarray, velocity: np.ndarray, qd_max: float, damping: float = 0.02,
                  family_gain: float = 3.0) -> np.ndarray:
    """The action that moves the container's origin at ``velocity`` (m/s) within the upright
    posture family (``taigym.envs.transport3d_tasks.FAMILY``): the damped inverse of the
    origin's Jacobian in (base, shoulder, elbow), plus ``family_gain`` (1/s) x the other
    joints' offset from the family (zero once on it, so the arm's configuration is the one the
    planner checked at each position); scaled so that no joint exceeds its speed."""
    from taigym.envs.transport3d_tasks import FAMILY, upright_configuration

    J = arm.jacobian(q)[:3] @ FAMILY
    rates = J.T @ np.linalg.solve(J @ J.T + damping ** 2 * np.eye(3), np.asarray(velocity, np.float64))
    qd = FAMILY @ rates + family_gain * (upright_configuration(*q[[0, 1, 3]]) - q)
    qd /= max(1.0, np.abs(qd).max() / qd_max)
    return (qd / qd_max).astype(np.float32)
