"""``taigym/Transport3D-v0``: a Franka Panda carries a filled container to a goal, upright and
without spilling, past boxes (the SFRRT* paper (2024), in 3D).

The arm (``franka_panda/panda.urdf`` from pybullet_data, in a private pybullet DIRECT client)
holds the SFRRT* paper's frustum in its hand; pybullet gives the kinematics and the collisions,
the liquid is simulated by Taichi in the container's own frame with the fictitious forces of that
accelerating, rotating frame (:class:`taigym.sim.carried.CarriedContainer3D`), so the cost is the
container's, not the room's. Liquid that leaves the container is spilled for good. Tasks:
:mod:`taigym.envs.transport3d_tasks` (robot frame: z up, the arm's base at the origin on a table
top at z = 0).

## Action space

``Box(-1, 1, (7,), float32)``: the joint velocities at the end of the 0.05 s control step, as
fractions of :data:`MAX_JOINT_SPEED` (2 rad/s; the Panda allows 2.2-2.6). Over the step the
velocities change linearly from the previous ones, so the joint angles follow the trapezoid
rule and the liquid feels the container's acceleration. A step that would leave the joint
limits stops the joints at them (``info["action_clipped"]``).
Components outside [-1, 1] are clipped; a nan or an infinity, or an action of another shape,
raises ``ValueError``.

## Observation space

A float32 vector of 61 entries, every one bounded:

| index | observation | unit |
|-------|-------------|------|
| 0-6 | joint angles | rad |
| 7-13 | joint velocities | rad/s |
| 14-16 | container origin (centre of the inner bottom) | m |
| 17-19 | container orientation, rotation vector (0: upright) | rad |
| 20-25 | container velocity (origin; angular) | m/s, rad/s |
| 26-28 | goal position | m |
| 29-31 | goal minus position | m |
| 32 | tilt of the container's axis from vertical | rad |
| 33-36 | container: bottom radius, top radius, height, fill height (the SFRRT* paper's r_b, r_u, h_c, h_w) | m |
| 37 | the SFRRT* paper's maximum tilt at this fill (3D, equal volume) | rad |
| 38 | spilled fraction so far | - |
| 39 | time / horizon | - |
| 40-60 | 3 obstacle slots: present (0/1), centre x, y, z, half extents x, y, z (zeros if empty) | m |

## Rewards

``reward_mode`` chooses the reward, as Transport-v0's; ``info["reward_<term>"]`` holds each term
of the mode (0 at reset), and they sum to the reward.

| mode | term | value |
|------|------|-------|
| ``"progress"`` (default), ``"dense"`` | progress | ``(d_prev - d) / d_0``, ``d`` the distance from the container's origin to the goal (m, plus 0.05 m per rad of tilt), ``d_0`` at the start |
| ``"progress"``, ``"dense"`` | spill | ``-spill_penalty * 100 *`` (increase of the spilled fraction): default -1 per percent spilled |
| ``"progress"``, ``"dense"`` | time | ``-time_penalty`` (default 0.01) |
| ``"progress"``, ``"dense"`` | collision | -1 on the step that collides (it ends the episode) |
| all | success | +1 on the step that ends the episode with ``success`` |
| ``"dense"`` | distance | ``shaping_gamma`` Phi_d(s') - Phi_d(s), Phi_d = -1 * r / r_0: ``r`` the straight distance from the container's origin to the goal (m), ``r_0`` at the start |
| ``"dense"`` | upright | ``shaping_gamma`` Phi_u(s') - Phi_u(s), Phi_u = -0.5 min(1, tilt / theta_max), ``theta_max`` the SFRRT* paper's maximum tilt at this fill (observation 37) |

``"dense"`` adds potential-based shaping (Ng, Harada & Russell 1999) to ``"progress"``, as
Transport-v0's ``"dense"`` but with the straight distance for the route (no 3D route planner in
the env): the distance potential pulls toward the goal within the discount, the upright
potential charges for tilt, the spill risk. Phi is 0 on the step that ends an episode
(termination or truncation: the time is in the observation), so the shaping adds -Phi(s_0) = 1
(the container starts upright) to the ``shaping_gamma``-discounted return whatever the agent
does: for a learner with that discount (default 0.99) the optimal policies of ``"dense"`` and
``"progress"`` are the same. ``"sparse"`` rewards success only.

## Episode end

* Termination: delivered (container origin within 2 cm of the goal, tilt under 0.05 rad, nearly
  still (< 0.05 m/s, < 0.2 rad/s)), a success with at most 0.1 % spilled, else a failure; a
  collision of the arm or the container with a box or the table.
* Truncation: at ``horizon`` (default 10 s), or when the solver blows up (``info["sim_unstable"]``).

## Arguments

``task_split`` (None: sampled tasks; "train" or "eval": drawn from the fixed split; or pass
``options={"task": ...}`` to ``reset``), ``horizon`` (s), ``dx`` (liquid grid spacing, m,
:data:`DEFAULT_DX`; 3.25 mm-1 cm), ``spill_penalty``, ``time_penalty``, ``viscosity`` (Pa s),
``arch`` (Taichi arch, "cpu"), ``reward_mode`` ("progress", "dense" or "sparse"; Rewards),
``shaping_gamma`` ([0, 1], default 0.99). A closed env hands its liquid solver to the next env made with
the same ``dx``, ``viscosity`` and ``arch`` (``taigym.sim.pool``): making envs again costs no
Taichi compilation and no new memory.

## Info

``spilled``, ``in_source``, ``in_target`` (= in_source once delivered), ``in_flight`` (0),
``reached`` (delivered: at the goal and still), ``path_time`` (s from the start to delivery; inf before),
``success``, ``collided``, ``action_clipped``, ``sim_unstable``, ``time`` (s), ``position``,
``rotation``, ``tilt``, ``distance``, ``reward_<term>`` (Rewards).

## Version history

* v0 (2026-11-22): initial version.
* v0 (2026-11-27): info gains ``reached`` and ``path_time``; ``metadata["episode_metrics"]``
  declares what evaluations report.
* v0 (2026-11-28): the liquid solver changed (ghost-fluid free surface, implicit no-slip
  viscosity, rest-density correction; see the validation page): the same task and actions
  give a different liquid, so results from before are not comparable.
  ``dx`` accepts 3.25 mm.
* v0 (2026-11-28): info gains ``reward_<term>``; ``metadata["episode_metrics"]`` gains ``collided``.
* v0 (2026-11-28): ``reward_mode`` ("progress", the reward so far, the default; "dense";
  "sparse") and ``shaping_gamma``.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from gymnasium import spaces
from scipy.spatial.transform import Rotation

from ..sim import pool
from ..sim.constants import CONTROL_DT
from .checks import check_action
from .panda import CONTAINER_WALL, TO_SIM, joint_step
from .transport import (EPISODE_METRICS, GOAL_TOLERANCE, REWARD_TERMS, ROUTE_WEIGHT, STILL, TILT_WEIGHT,
                        UPRIGHT_WEIGHT, TransportBase, check_reward_arguments)
from .transport3d_tasks import (JOINT_HIGH, JOINT_LOW, MAX_HEIGHT, MAX_OBSTACLES, MAX_TOP_RADIUS,
                                PandaCarrier, Transport3DTask, as_task, sample_feasible_task,
                                transport3d_tasks)

MAX_JOINT_SPEED = 2.0                             # rad/s
OBS_SIZE = 40 + 7 * MAX_OBSTACLES
# m, the liquid grid: at 1 cm (7 cells across a cup) the slosh of a 0.5 m/s carry never spills;
# 6.5 mm agrees with 5 mm on spill or not in 20 of 24 carries (the other 4 spill less), at 40 %
# of its cost per step
DEFAULT_DX = 0.0065
#: Transport-v0's terms, the straight distance in place of the route
REWARD_TERMS_3D = {**REWARD_TERMS, "dense": (*REWARD_TERMS["progress"], "distance", "upright")}


def observation_bounds() -> tuple[np.ndarray, np.ndarray]:
    """Finite (low, high) of every observation entry (the table in the module docstring)."""
    reach, v, w = 1.2, 2.0, 8.0
    lo = [*JOINT_LOW, *[-MAX_JOINT_SPEED] * 7, -reach, -reach, -0.2, *[-math.pi] * 3, -v, -v, -v,
          -w, -w, -w, -reach, -reach, -0.2, *[-2 * reach] * 3, *[0.0] * 8]
    hi = [*JOINT_HIGH, *[MAX_JOINT_SPEED] * 7, reach, reach, 1.4, *[math.pi] * 3, v, v, v, w, w, w,
          reach, reach, 1.4, *[2 * reach] * 3, math.pi, MAX_TOP_RADIUS, MAX_TOP_RADIUS, MAX_HEIGHT,
          MAX_HEIGHT, math.pi, 1.0, 1.0]
    slot_lo, slot_hi = [0.0, -reach, -reach, 0.0, 0.0, 0.0, 0.0], [1.0, reach, reach, 1.4, 1.0, 1.0, 1.0]
    return (np.array(lo + slot_lo * MAX_OBSTACLES, np.float32),
            np.array(hi + slot_hi * MAX_OBSTACLES, np.float32))


class Transport3DEnv(TransportBase):
    reward_terms = REWARD_TERMS_3D
    metadata = {"render_modes": [], "render_fps": int(round(1 / CONTROL_DT)), "episode_metrics": EPISODE_METRICS}

    def __init__(self, task_split: str | None = None, horizon: float = 10.0, dx: float = DEFAULT_DX,
                 spill_penalty: float = 1.0, time_penalty: float = 0.01, viscosity: float = 1e-3,
                 arch: str = "cpu", reward_mode: str = "progress", shaping_gamma: float = 0.99):
        check_reward_arguments(reward_mode, shaping_gamma)
        if task_split not in (None, "train", "eval"):
            raise ValueError(f"task_split must be None, 'train' or 'eval', got {task_split!r}")
        if not (isinstance(horizon, (int, float)) and 0.5 <= horizon <= 120):
            raise ValueError(f"horizon must be in [0.5, 120] s, got {horizon!r}")
        if not (isinstance(dx, (int, float)) and 0.00325 <= dx <= 0.01):
            raise ValueError(f"dx must be in [0.00325, 0.01] m (the container's walls are 2 cm, two "
                             f"cells at least), got {dx!r}")
        if not (isinstance(viscosity, (int, float)) and 0 <= viscosity <= 0.5):
            raise ValueError(f"viscosity must be in [0, 0.5] Pa s, got {viscosity!r}")
        self.task_split, self.horizon, self.dx = task_split, float(horizon), float(dx)
        self.viscosity, self.arch = float(viscosity), arch
        self.reward_mode, self.shaping_gamma = reward_mode, float(shaping_gamma)
        self.spill_penalty, self.time_penalty = float(spill_penalty), float(time_penalty)
        self.action_space = spaces.Box(-1.0, 1.0, (7,), dtype=np.float32)
        self.observation_space = spaces.Box(*observation_bounds(), dtype=np.float32)
        self.max_steps = int(round(self.horizon / CONTROL_DT))
        self.task: Transport3DTask | None = None
        self.arm: PandaCarrier | None = None
        self.carried = None
        self._pool_key = ("Transport3D-v0", self.dx, self.viscosity, self.arch)

    # ------------------------------------------------------------------ episode
    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        if self.arm is None:
            self.arm = PandaCarrier()
        if options and options.get("task") is not None:
            task = as_task(options["task"])
        elif self.task_split is not None:
            split = transport3d_tasks(self.task_split)
            task = split[int(self.np_random.integers(len(split)))]
        else:
            task = None
        # feasible() also sets the arm's scene (the task's boxes) for the collision checks
        if task is None:
            task = sample_feasible_task(self.np_random, self.arm)
        elif not self.arm.feasible(task):
            raise ValueError(f"task not feasible: its start configuration collides, the goal "
                             f"{task.goal} is out of the arm's reach holding the container upright, "
                             f"or the container does not fit there")
        self.task = task
        from taigym.models.max_tilt import max_tilt_3d
        from taigym.sim.carried import CarriedContainer3D

        self.theta_max = max_tilt_3d(task.bottom_radius, task.top_radius, task.height, task.fill_height)
        if self.carried is None:    # a closed env's, if one had the same grid (sim.pool)
            self.carried = pool.take(self._pool_key, lambda: CarriedContainer3D(
                MAX_TOP_RADIUS, MAX_HEIGHT, dx=self.dx, viscosity=self.viscosity, arch=self.arch))
        self.carried.load(task.container(CONTAINER_WALL), task.fill,
                          seed=int(self.np_random.integers(2 ** 31)))
        self.q = np.array(task.start)
        self.qd = np.zeros(7)
        self.position, self.R = self.arm.container_pose(self.q)
        self.velocity = np.zeros(6)
        self.steps, self.collided, self.unstable, self.spilled, self.clipped = 0, False, False, 0.0, False
        self.d0 = max(self._distance(), 1e-6)
        self.r0 = max(self._straight(), 1e-6)
        return self._obs(), {**self._info(success=False), **self._start_reward()}

    def _potentials(self) -> dict[str, float]:
        """The dense mode's shaping potentials of the current state (module docstring)."""
        return {"distance": -ROUTE_WEIGHT * self._straight() / self.r0,
                "upright": -UPRIGHT_WEIGHT * min(1.0, self._tilt() / self.theta_max)}

    def _straight(self) -> float:
        return float(np.linalg.norm(np.asarray(self.task.goal) - self.position))

    def _tilt(self) -> float:
        return float(math.acos(np.clip(self.R[2, 1], -1.0, 1.0)))   # container y vs robot z

    def _distance(self) -> float:
        return self._straight() + TILT_WEIGHT * self._tilt()

    def step(self, action):
        if self.task is None:
            raise RuntimeError("call reset() before step()")
        a = check_action(action, self.action_space)
        _, q1, qd1, self.clipped = joint_step(self.q, self.qd, a, MAX_JOINT_SPEED, CONTROL_DT)
        d_prev = self._distance()
        spilled_prev = self.spilled
        if self.arm.collides(0.5 * (self.q + q1)) or self.arm.collides(q1):
            self.collided = True
            self.qd, self.velocity = np.zeros(7), np.zeros(6)    # stopped where it was
        else:
            v0 = self.velocity
            v1 = self.arm.container_velocity(q1, qd1)
            # the liquid's frame in simulator axes (y up)
            rot = Rotation.from_matrix(TO_SIM @ self.R).as_rotvec()
            self.carried.step(rot, np.concatenate([TO_SIM @ v0[:3], TO_SIM @ v0[3:]]),
                              np.concatenate([TO_SIM @ v1[:3], TO_SIM @ v1[3:]]), CONTROL_DT)
            self.unstable = self.carried.unstable
            self.q, self.qd, self.velocity = q1, qd1, v1
            self.position, self.R = self.arm.container_pose(q1)
            self.spilled = self.carried.spilled
        return self._end_step(d_prev, spilled_prev)

    def _at_goal(self) -> bool:
        d = np.linalg.norm(np.asarray(self.task.goal) - self.position)
        return bool(d <= GOAL_TOLERANCE[0] and self._tilt() <= GOAL_TOLERANCE[1])

    def _still(self) -> bool:
        return bool(np.linalg.norm(self.velocity[:3]) < STILL[0] and np.linalg.norm(self.velocity[3:]) < STILL[1])

    # ------------------------------------------------------------------ features
    def _obs(self) -> np.ndarray:
        t = self.task
        g = np.asarray(t.goal)
        rotvec = Rotation.from_matrix(self.R @ TO_SIM).as_rotvec()   # 0 when upright
        head = [*self.q, *self.qd, *self.position, *rotvec, *self.velocity, *g, *(g - self.position),
                self._tilt(), t.bottom_radius, t.top_radius, t.height, t.fill_height, self.theta_max,
                self.spilled, self.steps * CONTROL_DT / self.horizon]
        slots = np.zeros((MAX_OBSTACLES, 7))
        if t.obstacles:
            boxes = np.asarray(t.obstacles)
            order = np.argsort(np.linalg.norm(boxes[:, :3] - self.position, axis=1), kind="stable")
            slots[:len(boxes), 0] = 1.0
            slots[:len(boxes), 1:] = boxes[order]
        obs = np.concatenate([np.asarray(head), slots.ravel()])
        return np.clip(obs, self.observation_space.low, self.observation_space.high).astype(np.float32)

    def _info(self, success: bool) -> dict[str, Any]:
        reached = bool(self._at_goal() and self._still())
        return {"spilled": self.spilled, "in_source": 1.0 - self.spilled,
                "in_target": (1.0 - self.spilled) if self._at_goal() else 0.0, "in_flight": 0.0,
                "reached": reached, "path_time": self.steps * CONTROL_DT if reached else math.inf,
                "success": bool(success), "is_success": bool(success), "collided": bool(self.collided),
                "action_clipped": self.clipped, "sim_unstable": bool(self.unstable),
                "time": self.steps * CONTROL_DT, "position": self.position.copy(),
                "rotation": self.R.copy(), "tilt": self._tilt(), "distance": self._distance()}

    def close(self):
        """Disconnect the arm's pybullet client; hand the liquid's solver to the next env with
        the same grid (``taigym.sim.pool``)."""
        if self.arm is not None:
            self.arm.close()
            self.arm = None
        if self.carried is not None:
            pool.give(self._pool_key, self.carried)
            self.carried, self.task = None, None
