"""``taigym/Transport-v0``: carry a filled container to a goal through clutter without spilling
(the SFRRT* paper (2024), planar).

The container is the SFRRT* paper's frustum (bottom radius, top radius, height; 2D: its trapezoidal
cross-section) filled to ``fill`` of its height, carried in a 1.2 m x 0.8 m room (x across, z
up) past static boxes (shelves, boxes, walls with a narrow gap; see
:mod:`taigym.envs.transport_tasks`). The liquid is simulated in the container's own frame with
the fictitious forces of that accelerating, rotating frame (:class:`taigym.sim.carried.
CarriedContainer2D`): the cost is the container's, not the room's. Liquid that leaves the
container is spilled for good.

## Action space

``Box(-1, 1, (3,), float32)``: the container's velocity at the end of the 0.05 s control step,
as a fraction of :data:`MAX_VELOCITY` = (0.8 m/s, 0.8 m/s, 2 rad/s) for (vx, vz, tilt rate).
Over the step the velocity changes linearly from the previous one (constant acceleration), so
the pose follows the trapezoid rule and the liquid feels that acceleration.
Components outside [-1, 1] are clipped; a nan or an infinity, or an action of another shape,
raises ``ValueError``.

## Observation space

A float32 vector of 49 entries:

| index | observation | unit |
|-------|-------------|------|
| 0-2 | pose x, z, tilt | m, m, rad |
| 3-5 | velocity vx, vz, tilt rate | m/s, rad/s |
| 6-8 | goal pose x, z, tilt | m, m, rad |
| 9-11 | goal minus pose | m, m, rad |
| 12-15 | container: bottom radius, top radius, height, fill height (the SFRRT* paper's r_b, r_u, h_c, h_w) | m |
| 16 | the SFRRT* paper's maximum tilt at this fill | rad |
| 17 | spilled fraction so far | - |
| 18 | time / horizon | - |
| 19-48 | 6 obstacle slots: present (0/1), x_centre, z_centre, width, height (m; zeros if empty), nearest to the container first | - |

## Rewards

``reward_mode`` chooses the reward; ``info["reward_<term>"]`` holds each term of the mode (0 at
reset), and they sum to the reward.

| mode | term | value |
|------|------|-------|
| ``"progress"`` (default), ``"dense"`` | progress | ``(d_prev - d) / d_0``, ``d`` the straight distance to the goal (m, plus 0.05 m per rad of tilt), ``d_0`` at the start |
| ``"progress"``, ``"dense"`` | spill | ``-spill_penalty * 100 *`` (increase of the spilled fraction): default -1 per percent spilled |
| ``"progress"``, ``"dense"`` | time | ``-time_penalty`` (default 0.01) |
| ``"progress"``, ``"dense"`` | collision | ``-collision_penalty`` (default 1) on the step that collides (it ends the episode) |
| all | success | +1 on the step that ends the episode with ``success`` |
| ``"dense"`` | route | ``shaping_gamma`` Phi_r(s') - Phi_r(s), Phi_r = -1 * r / r_0: ``r`` the length of the shortest collision-free route of the upright container from its position to the goal (``transport_tasks.route_distance``: Dijkstra on a 1 cm grid), ``r_0`` at the start |
| ``"dense"`` | upright | ``shaping_gamma`` Phi_u(s') - Phi_u(s), Phi_u = -0.5 min(1, abs(tilt) / theta_max), ``theta_max`` the SFRRT* paper's maximum tilt at this fill (observation 16) |

``"dense"`` adds potential-based shaping (Ng, Harada & Russell 1999) to ``"progress"``: the
route potential leads around the boxes and through the gaps, where the straight distance of
``progress`` leads into them; the upright potential charges for tilt, the spill risk. Phi is 0
on the step that ends an episode (termination or truncation: the time is in the observation),
so the shaping adds -Phi(s_0) = 1 to the ``shaping_gamma``-discounted return whatever the agent
does: for a learner with that discount (default 0.99) the optimal policies of ``"dense"`` and
``"progress"`` are the same. ``"sparse"`` rewards success only.

## Episode end

* Termination: success (the container is within ``goal_tolerance`` (2 cm, 0.05 rad) of the goal
  and nearly still (< 0.05 m/s, < 0.2 rad/s), with at most 0.1 % spilled); a collision with an
  obstacle or the room's walls; the container at rest at the goal having spilled more (failure).
* Truncation: at ``horizon`` (default 10 s = 200 steps), or when the solver blows up
  (``info["sim_unstable"]``).

## Info (every step, including reset)

``spilled``, ``in_source`` (fraction still in the container), ``in_target`` (= in_source once
delivered at the goal, else 0), ``in_flight`` (0: spill is final), ``reached`` (delivered: at
the goal and still), ``path_time`` (s from the start to delivery; inf before), ``success``, ``collided``,
``sim_unstable``, ``time`` (s), ``pose``, ``velocity``, ``distance`` (to the goal, m),
``reward_<term>`` for each term of the reward mode (Rewards).

## Arguments

``gym.make("taigym/Transport-v0", task_split=None, fill=None, horizon=10.0, dx=0.0035,
spill_penalty=1.0, time_penalty=0.01, collision_penalty=1.0, viscosity=1e-3, reward_mode="progress",
shaping_gamma=0.99, near_goal=0.0, render_mode=None)``: ``reward_mode`` is "progress", "dense" or "sparse"
(Rewards), ``shaping_gamma`` in [0, 1], ``collision_penalty`` >= 0; ``near_goal`` in [0, 1] is
the fraction of the tasks the env draws itself (not those given to ``reset``) that start,
upright, 2-30 cm of collision-free route from the goal (``transport_tasks.near_goal_start``): a
start-state curriculum for RL, which learns the arrival and the stop first; tasks are sampled
(``transport_tasks.sample_task``) or drawn from a fixed split; ``fill`` fixes the fill of sampled
tasks; ``reset(options={"task": task})`` runs a given task (or its ``to_dict``). ``dx`` is the
liquid grid's spacing (m; one fixed grid for every container, compiled once per process). A
task whose fill is above the brim, or whose goal is inside an obstacle or unreachable, raises
ValueError.
A closed env hands its liquid solver to the next env made with the same ``dx`` and ``viscosity``
(``taigym.sim.pool``): making envs again costs no Taichi compilation and no new memory.

## Version history

* v0 (2026-11-22): initial version.
* v0 (2026-11-27): info gains ``reached`` and ``path_time``; ``metadata["episode_metrics"]``
  declares what evaluations report.
* v0 (2026-11-28): the liquid solver changed (ghost-fluid free surface, implicit no-slip
  viscosity, rest-density correction; see the validation page): the same task and actions
  give a different liquid, so results from before are not comparable.
* v0 (2026-11-28): ``reward_mode`` ("progress", the reward so far, the default; "dense";
  "sparse"), ``shaping_gamma`` and ``collision_penalty``; info gains ``reward_<term>``; ``metadata["episode_metrics"]``
  gains ``collided``.
* v0 (2026-11-28): ``near_goal`` (default 0: the tasks drawn as before).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from ..sim import pool
from ..sim.carried import CarriedContainer2D
from ..sim.constants import CONTROL_DT
from ..sim.geometry import rotate
from . import render as _render
from .checks import bounded_float, check_action, choice
from .shaping import shaping_terms
from .transport_tasks import (MAX_HEIGHT, MAX_OBSTACLES, MAX_TOP_RADIUS, ROOM, TransportTask, as_task, check_feasible,
                              near_goal_start, route_distance, sample_task, transport_tasks)

MAX_VELOCITY = np.array([0.8, 0.8, 2.0])          # m/s, m/s, rad/s
GOAL_TOLERANCE = (0.02, 0.05)                     # m, rad
STILL = (0.05, 0.2)                               # m/s, rad/s
SPILL_LIMIT = 1e-3                                # success: at most 0.1 % spilled
TILT_WEIGHT = 0.05                                # m per rad in the goal distance
OBS_SIZE = 19 + 5 * MAX_OBSTACLES
REWARD_MODES = ("progress", "dense", "sparse")
#: the terms of each mode, summed into the reward; ``info["reward_<term>"]`` holds each
REWARD_TERMS = {"progress": ("progress", "spill", "time", "collision", "success"),
                "dense": ("progress", "spill", "time", "collision", "success", "route", "upright"),
                "sparse": ("success",)}
ROUTE_WEIGHT = 1.0      # the whole route to the goal is worth as much as the success
UPRIGHT_WEIGHT = 0.5    # tilted to the SFRRT* paper's maximum tilt (or more) costs half of that


def observation_bounds() -> tuple[np.ndarray, np.ndarray]:
    """Finite (low, high) of every observation entry (the table in the module docstring)."""
    W, H = ROOM
    pose_lo, pose_hi = [0.0, 0.0, -math.pi], [W, H, math.pi]
    lo = [*pose_lo, *-MAX_VELOCITY, *pose_lo, -W, -H, -2 * math.pi, 0, 0, 0, 0, 0, 0, 0]
    hi = [*pose_hi, *MAX_VELOCITY, *pose_hi, W, H, 2 * math.pi, MAX_TOP_RADIUS, MAX_TOP_RADIUS,
          MAX_HEIGHT, MAX_HEIGHT, math.pi, 1, 1]
    slot_lo, slot_hi = [0, 0, 0, 0, 0], [1, W, H, W, H]
    return (np.array(lo + slot_lo * MAX_OBSTACLES, np.float32),
            np.array(hi + slot_hi * MAX_OBSTACLES, np.float32))


#: what an episode is judged by (evaluation, benchmarks): info key -> kind (taigym.agents.metrics)
EPISODE_METRICS = {"success": "rate", "spilled": "fraction", "reached": "rate", "collided": "rate",
                   "path_time": "mean"}


def max_tilt_of(task: TransportTask) -> float:
    """The SFRRT* paper's maximum tilt for the task's container and fill (rad), from the cross-section
    polygon (equal to ``taigym.models.max_tilt.max_tilt``'s Eqs. 1-2, which envs may not import)."""
    return task.container().max_tilt_angle(task.fill)


class TransportBase(gym.Env):
    """What both transport envs share: the reward and the end of a step. A subclass provides
    ``_distance``, ``_at_goal``, ``_still``, ``_obs``, ``_info``, the counters used here and, for
    ``reward_mode="dense"``, ``_potentials``."""

    reward_mode = "progress"
    shaping_gamma = 0.99
    collision_penalty = 1.0
    reward_terms = REWARD_TERMS     # mode -> its terms, in the order they are summed

    def _potentials(self) -> dict[str, float]:
        raise NotImplementedError(f"{type(self).__name__} has no dense reward")

    def _start_reward(self) -> dict[str, float]:
        """At reset: the shaping potentials of the first state; the reset's ``info["reward_<term>"]``
        (zeros)."""
        self.phi = self._potentials() if self.reward_mode == "dense" else {}
        return {"reward_" + k: 0.0 for k in self.reward_terms[self.reward_mode]}

    def _end_step(self, d_prev: float, spilled_prev: float) -> tuple:
        """The step's return: the terms of ``reward_mode`` (module docstring) from the distance
        to the goal and the spilled fraction before the step; terminated on a collision or once
        delivered (at the goal, still), truncated at the horizon or when the solver blew up."""
        self.steps += 1
        delivered = self._at_goal() and self._still()
        success = delivered and self.spilled <= SPILL_LIMIT and not self.collided
        terminated = bool(self.collided or delivered)
        truncated = bool(not terminated and (self.unstable or self.steps >= self.max_steps))
        if self.reward_mode == "sparse":
            terms = {"success": float(success)}
        else:
            terms = {"progress": (d_prev - self._distance()) / self.d0,
                     "spill": -self.spill_penalty * 100.0 * (self.spilled - spilled_prev),
                     "time": -self.time_penalty, "collision": -self.collision_penalty * self.collided,
                     "success": float(success)}
        if self.reward_mode == "dense":
            shaped, self.phi = shaping_terms(self.phi, self._potentials, self.shaping_gamma, terminated or truncated)
            terms.update(shaped)
        info = self._info(success)
        info.update({"reward_" + k: v for k, v in terms.items()})
        return self._obs(), float(sum(terms.values())), terminated, truncated, info


def check_reward_arguments(reward_mode: Any, shaping_gamma: Any) -> None:
    """ValueError unless ``reward_mode`` is one of :data:`REWARD_MODES` and ``shaping_gamma`` in [0, 1]."""
    choice("reward_mode", reward_mode, REWARD_MODES)
    bounded_float("shaping_gamma", shaping_gamma, 0.0, 1.0)


class TransportEnv(TransportBase):
    metadata = {"render_modes": ["rgb_array"], "render_fps": int(round(1 / CONTROL_DT)),
                "episode_metrics": EPISODE_METRICS}

    def __init__(self, task_split: str | None = None, fill: float | None = None,
                 horizon: float = 10.0, dx: float = 0.0035, spill_penalty: float = 1.0,
                 time_penalty: float = 0.01, viscosity: float = 1e-3,
                 reward_mode: str = "progress", shaping_gamma: float = 0.99, collision_penalty: float = 1.0,
                 near_goal: float = 0.0,
                 render_mode: str | None = None, render_size: tuple[int, int] = (320, 480)):
        check_reward_arguments(reward_mode, shaping_gamma)
        if not (isinstance(collision_penalty, (int, float)) and 0 <= collision_penalty < math.inf):
            raise ValueError(f"collision_penalty must be a finite number >= 0, got {collision_penalty!r}")
        if task_split not in (None, "train", "eval"):
            raise ValueError(f"task_split must be None, 'train' or 'eval', got {task_split!r}")
        if isinstance(near_goal, bool) or not (isinstance(near_goal, (int, float)) and 0 <= near_goal <= 1):
            raise ValueError(f"near_goal must be in [0, 1] (a fraction of the drawn tasks), got {near_goal!r}")
        if fill is not None and not (isinstance(fill, (int, float)) and 0 < fill <= 1):
            raise ValueError(f"fill must be in (0, 1] (above 1 the liquid would rise above the "
                             f"brim), got {fill!r}")
        if not (isinstance(horizon, (int, float)) and 0.5 <= horizon <= 120):
            raise ValueError(f"horizon must be in [0.5, 120] s, got {horizon!r}")
        if not (isinstance(dx, (int, float)) and 0.001 <= dx <= 0.004):
            raise ValueError(f"dx must be in [0.001, 0.004] m (walls are 8 mm, two cells at least), "
                             f"got {dx!r}")
        if not (isinstance(viscosity, (int, float)) and 0 <= viscosity <= 0.5):
            raise ValueError(f"viscosity must be in [0, 0.5] Pa s, got {viscosity!r}")
        if render_mode not in (None, "rgb_array"):
            raise ValueError(f"render_mode must be None or 'rgb_array', got {render_mode!r}")
        self.task_split, self.fill, self.horizon = task_split, fill, float(horizon)
        self.dx, self.viscosity = float(dx), float(viscosity)
        self.spill_penalty, self.time_penalty = float(spill_penalty), float(time_penalty)
        self.reward_mode, self.shaping_gamma = reward_mode, float(shaping_gamma)
        self.collision_penalty = float(collision_penalty)
        self.near_goal = float(near_goal)
        self.render_mode, self.render_size = render_mode, tuple(render_size)
        self.action_space = spaces.Box(-1.0, 1.0, (3,), dtype=np.float32)
        self.observation_space = spaces.Box(*observation_bounds(), dtype=np.float32)
        self.task: TransportTask | None = None
        self.carried: CarriedContainer2D | None = None
        self.max_steps = int(round(self.horizon / CONTROL_DT))
        self._pool_key = ("Transport-v0", self.dx, self.viscosity)

    # ------------------------------------------------------------------ episode
    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        if options and options.get("task") is not None:
            task = as_task(options["task"])
        elif self.task_split is not None:
            split = transport_tasks(self.task_split)
            task = split[int(self.np_random.integers(len(split)))]
        else:
            task = sample_task(self.np_random)
        drawn = not (options and options.get("task") is not None)
        if self.fill is not None and drawn:
            task = dataclasses.replace(task, fill=self.fill)
        if self.near_goal > 0.0 and drawn and self.np_random.random() < self.near_goal:
            task = near_goal_start(task, self.np_random)   # (no draw at all when near_goal is 0)
        check_feasible(task)
        self.task = task
        self.theta_max = max_tilt_of(task)
        if self.carried is None:    # a closed env's, if one had the same grid (sim.pool)
            self.carried = pool.take(self._pool_key, lambda: CarriedContainer2D(
                2 * MAX_TOP_RADIUS, MAX_HEIGHT, dx=self.dx, viscosity=self.viscosity))
        self.carried.load(task.container(), task.fill, seed=int(self.np_random.integers(2 ** 31)))
        self.pose = np.array(task.start, dtype=np.float64)
        self.vel = np.zeros(3)
        self.steps, self.collided, self.unstable, self.spilled = 0, False, False, 0.0
        self.d0 = max(self._distance(), 1e-6)
        if self.reward_mode == "dense":   # the route's Dijkstra costs ~0.05 s a new task
            self.route0 = max(route_distance(task, *task.start[:2]), 1e-6)
        return self._obs(), {**self._info(success=False), **self._start_reward()}

    def _potentials(self) -> dict[str, float]:
        """The dense mode's shaping potentials of the current state (module docstring)."""
        route = route_distance(self.task, self.pose[0], self.pose[1]) / self.route0
        return {"route": -ROUTE_WEIGHT * route,
                "upright": -UPRIGHT_WEIGHT * min(1.0, abs(self.pose[2]) / self.theta_max)}

    def _distance(self) -> float:
        d = np.asarray(self.task.goal) - self.pose
        return float(np.hypot(d[0], d[1]) + TILT_WEIGHT * abs(d[2]))

    def _at_goal(self) -> bool:
        d = np.asarray(self.task.goal) - self.pose
        return bool(np.hypot(d[0], d[1]) <= GOAL_TOLERANCE[0] and abs(d[2]) <= GOAL_TOLERANCE[1])

    def _still(self) -> bool:
        return bool(np.hypot(self.vel[0], self.vel[1]) < STILL[0] and abs(self.vel[2]) < STILL[1])

    def step(self, action):
        if self.task is None:
            raise RuntimeError("call reset() before step()")
        v1 = np.clip(check_action(action, self.action_space), -1.0, 1.0) * MAX_VELOCITY
        d_prev = self._distance()
        nxt = self.pose + 0.5 * (self.vel + v1) * CONTROL_DT
        mid = self.pose + 0.5 * CONTROL_DT * (0.75 * self.vel + 0.25 * v1)
        spilled_prev = self.spilled
        if self.task.collides(np.stack([mid, nxt])).any():
            self.collided = True
            self.vel = np.zeros(3)
        else:
            self.carried.step(self.pose, self.vel, v1, CONTROL_DT)
            self.unstable = self.carried.unstable
            self.pose, self.vel = nxt, v1
            self.spilled = self.carried.spilled
        return self._end_step(d_prev, spilled_prev)

    # ------------------------------------------------------------------ features
    def _obs(self) -> np.ndarray:
        t = self.task
        g = np.asarray(t.goal)
        head = [*self.pose, *self.vel, *g, *(g - self.pose), t.bottom_radius, t.top_radius,
                t.height, t.fill_height, self.theta_max, self.spilled,
                self.steps * CONTROL_DT / self.horizon]
        slots = np.zeros((MAX_OBSTACLES, 5))
        if t.obstacles:
            obs = np.asarray(t.obstacles)
            order = np.argsort(np.hypot(obs[:, 0] - self.pose[0], obs[:, 1] - self.pose[1]), kind="stable")
            slots[:len(obs), 0] = 1.0
            slots[:len(obs), 1:] = obs[order]
        obs = np.concatenate([np.asarray(head), slots.ravel()])
        return np.clip(obs, self.observation_space.low, self.observation_space.high).astype(np.float32)

    def _info(self, success: bool) -> dict[str, Any]:
        at_goal = self._at_goal()
        reached = bool(at_goal and self._still())
        return {"spilled": self.spilled, "in_source": 1.0 - self.spilled,
                "in_target": (1.0 - self.spilled) if at_goal else 0.0, "in_flight": 0.0,
                "reached": reached, "path_time": self.steps * CONTROL_DT if reached else math.inf,
                "success": bool(success), "collided": bool(self.collided),
                "sim_unstable": bool(self.unstable), "time": self.steps * CONTROL_DT,
                "pose": self.pose.copy(), "velocity": self.vel.copy(),
                "distance": self._distance()}

    def render(self):
        if self.render_mode != "rgb_array" or self.task is None:
            return None
        cv = _render.Canvas(self.render_size, ROOM)
        for x, z, w, h in self.task.obstacles:
            cv.rect((x - w / 2, z - h / 2), (x + w / 2, z + h / 2), _render.OBSTACLE_COLOUR)
        cup = self.carried.container
        for pose, colour in ((np.asarray(self.task.goal), _render.TARGET_COLOUR),
                             (self.pose, _render.SOURCE_COLOUR)):
            cv.polyline(rotate(cup.walls, pose[2]) + pose[:2], cup.radius, colour)
        pts = self.carried.world_positions(self.pose)
        cv.particles(pts, _render.speed_colours(np.zeros(len(pts))), self.carried.world.spacing)
        return cv.img

    def close(self):
        """Hand the liquid's solver to the next env with the same grid (``taigym.sim.pool``)."""
        if self.carried is not None:
            pool.give(self._pool_key, self.carried)
            self.carried, self.task = None, None
