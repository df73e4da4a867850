"""``scripted``: a tilt-and-track pouring heuristic for ``taigym/Pour-v0``.

It shows that the task is solvable without learning or a liquid model beyond the geometric
max tilt angle. Each step it reads S's pose and velocity from ``info`` and T's future pose from
``env.unwrapped.task.target_pose_at`` and:

1. approach: brings S's pouring lip (the one facing T) to an aim point over the near half of T's
   opening, high enough that S clears T's rim, leading T by ``lead`` seconds;
2. pour: tilts towards T, quickly up to ``tilt_margin`` below the max tilt angle of the task's
   fill (no liquid leaves before that), then at ``tilt_slow`` rad/s up to ``tilt_max``, all the
   while keeping the lip on the aim point (it rotates about its lip and lowers it as S's body
   swings up, keeping S's lowest point ``clearance`` above T's rim);
3. holds the final tilt over T until the episode ends.

Translations are acceleration-limited (``accel``) so that the liquid does not slosh out.
"""

from __future__ import annotations

import math

import numpy as np

from taigym.sim.constants import CONTROL_DT
from taigym.sim.geometry import densify

from .base import Agent

DEFAULTS = dict(lead=0.0, aim=0.25, clearance=0.012, accel=2.5, vmax=0.45, tilt_fast=1.2,
                tilt_slow=0.5, tilt_max=2.3, tilt_margin=0.1, tol=0.015)


def _rot(theta: float) -> np.ndarray:
    c, s = math.cos(theta), math.sin(theta)
    return np.array([[c, -s], [s, c]])  # column-vector convention: world = R @ local


class ScriptedAgent(Agent):
    name = "scripted"
    families = ("pour",)

    def __init__(self, env, **cfg):
        unknown = set(cfg) - set(DEFAULTS)
        if unknown:
            raise ValueError(f"unknown scripted-agent option(s): {', '.join(sorted(unknown))}; "
                             f"accepted: {', '.join(DEFAULTS)}")
        super().__init__(env, **{**DEFAULTS, **cfg})
        self._task = None

    def reset(self, *, seed: int | None = None) -> None:
        super().reset(seed=seed)
        self._task = None

    # ------------------------------------------------------------------ episode set-up
    def _setup(self, task) -> None:
        u = self.env.unwrapped
        self._task = task
        self.S = getattr(u, "source_shape", None) or task.source_shape()
        self.T = getattr(u, "target_shape", None) or task.target_shape()
        self.dt = float(getattr(u, "dt", CONTROL_DT))
        self.scale = np.asarray(getattr(u, "action_scale", (0.025, 0.025, 0.1)), float)
        self.solid = densify(self.S.walls, 0.5 * self.S.radius)
        self.max_tilt = self.S.max_tilt_angle(task.fill)
        self.phase, self.d, self.phi = "approach", 1, 0.0

    def _lowest(self, theta: float, lip: np.ndarray) -> float:
        """Lowest point of S's solid relative to the lip when S is tilted by theta (m, <= 0)."""
        rel = (self.solid - lip) @ _rot(theta).T
        return float(rel[:, 1].min()) - self.S.radius

    # ------------------------------------------------------------------ control
    def act(self, obs, info: dict) -> np.ndarray:
        task = self.env.unwrapped.task
        if task is not self._task:
            self._setup(task)
        c, dt = self.cfg, self.dt
        t = float(info["time"])
        pose = np.asarray(info["source_pose"], float)
        vel = np.asarray(info["source_velocity"], float)
        t_pose = task.target_pose_at(t + dt + c["lead"])
        t_vel = task.target_velocity_at(t + dt + c["lead"])
        if self.phase == "approach":
            self.d = 1 if t_pose[0] >= pose[0] else -1
        lip = self.S.lips[1] if self.d > 0 else self.S.lips[0]

        if self.phase == "pour":
            rate = c["tilt_fast"] if self.phi < self.max_tilt - c["tilt_margin"] else c["tilt_slow"]
            self.phi = min(self.phi + rate * dt, c["tilt_max"])
        theta = -self.d * self.phi

        # aim point for the lip: over the near half of T's opening, S's lowest point above the rim
        opening = t_pose[:2] + self.T.opening_centre
        aim_x = opening[0] - self.d * c["aim"] * 0.5 * self.T.width
        rim = opening[1] + self.T.radius
        aim = np.array([aim_x, rim + c["clearance"] - self._lowest(theta, lip)])
        goal = aim - _rot(theta) @ lip                       # S's frame origin for that lip
        if self.phase == "approach":
            lip_now = pose[:2] + _rot(pose[2]) @ lip
            if abs(lip_now[0] - aim[0]) < c["tol"] and abs(lip_now[1] - aim[1]) < 2 * c["tol"]:
                self.phase = "pour"

        # acceleration-limited tracking of the goal, feeding forward T's velocity
        err = goal - pose[:2]
        v_des = t_vel[:2] + np.sign(err) * np.minimum(c["vmax"], np.sqrt(2 * c["accel"] * np.abs(err)) * 0.9)
        v_des = np.where(np.abs(err) < 1e-4, t_vel[:2], v_des)
        v_cmd = np.clip(v_des, vel[:2] - c["accel"] * dt, vel[:2] + c["accel"] * dt)
        step_xy = v_cmd * dt
        step_xy = np.where(np.abs(step_xy) > np.abs(err) + np.abs(t_vel[:2]) * dt,
                           err + t_vel[:2] * dt, step_xy)
        d_theta = theta - pose[2]
        action = np.concatenate([step_xy, [d_theta]]) / self.scale
        return np.clip(action, -1.0, 1.0).astype(np.float32)
