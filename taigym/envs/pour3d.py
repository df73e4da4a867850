"""``taigym/Pour3D-v0``: a Franka Panda pours liquid from an axisymmetric source container S into
a fixed target T on a counter, past box obstacles (Pan & Manocha 2016 and Pan, Park & Manocha
2016, in 3D).

The arm (``franka_panda/panda.urdf`` from pybullet_data, in a private pybullet DIRECT client,
:class:`taigym.envs.panda.PandaArm`) holds S from the side, its hand's approach axis horizontal,
so that rolling the wrist tilts S. The liquid is simulated by ``taigym.sim.World3D`` (FLIP) in a
box around the vertical plane through S's start and T (``task.plane()``: 0.8 m along the
plane, 0.5 m up from the counter, 0.18 m across; the box's edges are solid walls, the bottom
one the counter): S moves kinematically with the hand, T and the boxes are static. Tasks:
:mod:`taigym.envs.pour3d_tasks` (robot frame: z up, the arm's base at the origin, the counter
top at z = 0.5 m).

## Action space

``Box(-1, 1, (7,), float32)``: the joint velocities at the end of the 0.05 s control step, as
fractions of :data:`MAX_JOINT_SPEED` (the Panda's limits: 2.175 rad/s for joints 1-4, 2.61 for
5-7). Over the step the velocities change linearly from the previous ones (joint angles by the
trapezoid rule), as in Transport3D-v0. A step that would leave the joint limits stops the
joints at them; a step that would bring the arm into a box, T or the counter, S's wall into
T's wall, a box or the counter (deeper than it already is), or S out of the liquid's box is
not taken: the arm stops where it was (``info["action_clipped"]``, ``info["collision"]``).
Components outside [-1, 1] are clipped; a nan or an infinity, or an action of another shape,
raises ``ValueError``.

## Observation space

A float32 vector of 66 entries, every one bounded:

| index | observation | unit |
|-------|-------------|------|
| 0-6 | joint angles | rad |
| 7-13 | joint velocities | rad/s |
| 14-16 | S's origin (centre of its inner bottom) | m |
| 17-19 | S's axis (unit vector; (0, 0, 1) upright) | - |
| 20-25 | S's velocity (origin; angular) | m/s, rad/s |
| 26-28 | T's opening centre | m |
| 29-31 | T's opening centre minus S's | m |
| 32 | S's lean (its axis from vertical) | rad |
| 33 | fill | - |
| 34 | log10 viscosity (Pa s) | - |
| 35 | time / horizon | - |
| 36-37 | in_source, in_target (fractions of the liquid, as info) | - |
| 38-44 | S: one-hot (oval, cup, frustum), width, height, 2 shape parameters (as Pour-v0) | m, - |
| 45-51 | T: one-hot (rect, frustum, cup), width, height, 2 shape parameters | m, - |
| 52-65 | 2 obstacle slots: present (0/1), centre x, y, z, half extents x, y, z (zeros if empty) | m |

## Rewards

``reward_mode`` chooses the reward; ``info["reward_<term>"]`` holds each term of the mode (0 at
reset), and they sum to the reward.

| mode | term | value |
|------|------|-------|
| ``"increase"`` (default), ``"dense"`` | target | the increase of ``in_target`` |
| ``"increase"``, ``"dense"`` | spill | ``-spill_penalty`` (default 2) times the increase of ``spilled`` |
| ``"increase"``, ``"dense"`` | smooth | ``-smoothness_penalty`` (1e-3) times ``||a_t - a_{t-1}||^2`` |
| ``"dense"`` | approach | ``shaping_gamma`` Phi_a(s') - Phi_a(s), Pour-v0's approach potential in the pour plane (S's and T's cross-sections, ``plane_pose``): 0.2 max(0, 1 - miss / 0.4 m), miss the horizontal distance from the nearer of S's lips to T's opening centre |
| ``"dense"`` | lean | ``shaping_gamma`` Phi_l(s') - Phi_l(s), Pour-v0's lean potential in the pour plane: 0.5 aim min(1, abs(theta) / 2 rad), aim = max(0, 1 - miss / W) on the pouring lip (W: half T's opening), fading to 0 as that lip sinks 1 cm below T's rim |
| ``"sparse"`` | success | 1 on the step that ends an episode with ``success``, else 0 |

``"dense"`` adds Pour-v0's potential-based shaping (Ng, Harada & Russell 1999;
``taigym.envs.pour_reward``) to ``"increase"``: the approach potential brings a lip over T
before any tilt, the lean potential rewards tilting only while the liquid would land in T. Both
are measured in the pour plane: S's offset across it does not count (the liquid's box is 0.18 m
across, and a step that would take S out of it is not taken). Phi
is 0 on the step that ends an episode (termination or truncation: the time is in the
observation), so the shaping adds -Phi(s_0) to the ``shaping_gamma``-discounted return whatever
the agent does: for a learner with that discount (default 0.99) the optimal policies of
``"dense"`` and ``"increase"`` are the same.

## Episode end

* Termination: S is empty (``in_source <= 0.02``) and the liquid has settled (``in_flight <=
  0.005``), as Pour-v0.
* Truncation: at ``horizon`` (default 5 s), or when the solver blows up
  (``info["sim_unstable"]``).

## Info (every step, including reset)

``in_source``, ``in_target``, ``spilled``, ``in_flight`` (fractions of the initial liquid:
outside both containers, liquid that moved slower than 5 cm/s over the step is spilled, else in
flight), ``success`` (= ``is_success``: in_target >= 0.9 and spilled <= 0.05, as Pour-v0),
``sim_unstable``, ``time`` (s), ``action_clipped``, ``collision``, ``source_position``,
``source_axis``, ``lean``, ``plane_pose`` (S's pose (x, y, theta) in the pour plane's frame,
the 2D Pour convention: theta counter-clockwise, pouring towards T is theta < 0),
``n_particles``, ``reward_<term>`` for each term of the reward mode (Rewards).

## Arguments

``task_split`` (None: sampled tasks; "train" or "eval": drawn from the fixed split; or
``reset(options={"task": ...})``, which runs a given task exactly); ``container`` (S's shape, one
of ``oval``, ``cup``, ``frustum``), ``fill`` ((0, 1]) and ``viscosity`` (Pa s, [0, 0.5]): each,
unless None, fixes that field of every sampled task, as Pour-v0's arguments of the same names
(the other fields are drawn as before; T is still deepened to hold 1.5x S's liquid; not with
``task_split``); ``horizon`` (s, [0.5, 60]), ``dx`` (liquid grid spacing, m,
[0.0035, 0.012], default :data:`DEFAULT_DX`; walls are max(1 cm, 2 dx) thick),
``render_mode`` (None or "rgb_array": the pour plane, S's and T's cross-sections, the boxes,
the liquid projected onto the plane and the arm's links), ``render_size`` ((320, 512)),
``spill_penalty``, ``smoothness_penalty``, ``reward_mode`` ("increase", "dense" or "sparse";
Rewards), ``shaping_gamma`` ([0, 1], default 0.99), ``arch`` ("cpu"), ``fidelity`` ("particles", the
only one: no reduced 3D model yet). A closed env hands its liquid solver to the next env made
with the same ``dx`` and ``arch`` (``taigym.sim.pool``): making envs again costs no Taichi
compilation and no new memory.

## Version history

* v0 (2026-11-24): initial version.
* v0 (2026-11-27): ``metadata["episode_metrics"]`` declares what evaluations report (no change to
  the dynamics).
* v0 (2026-11-28): the liquid solver changed (ghost-fluid free surface, implicit no-slip
  viscosity, rest-density correction; see the validation page): the same task and actions
  give a different liquid, so results from before are not comparable.
  ``dx`` accepts 3.5 mm.
* v0 (2026-11-28): ``reward_mode`` ("increase", the reward so far, the default; "dense";
  "sparse") and ``shaping_gamma``; info gains ``reward_<term>``.
"""

from __future__ import annotations

import math
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from scipy.spatial.transform import Rotation

from ..sim import pool
from ..sim.constants import CONTROL_DT
from ..sim.geometry import densify
from .checks import bounded_float, check_action, choice, reset_options
from .panda import HAND_LINK, JOINT_HIGH, JOINT_LOW, PandaArm, container_ik, joint_step
from .pour_config import (EMPTY_FRACTION, EPISODE_METRICS, SETTLE_SPEED, SETTLED_FRACTION,
                          SUCCESS_IN_TARGET, SUCCESS_MAX_SPILLED)
from .pour_geometry import shape_features
from .pour_reward import potentials
from .pour3d_tasks import (COUNTER, COUNTER_HEIGHT, MAX_OBSTACLES, SOURCE_SHAPES, TARGET_SHAPES,
                           Pour3DTask, as_task, pour3d_tasks, sample_task)
from .pour_tasks import MAX_VISCOSITY
from .shaping import shaping_terms
from .transport3d_tasks import HOME

MAX_JOINT_SPEED = np.array([2.175, 2.175, 2.175, 2.175, 2.61, 2.61, 2.61])   # rad/s, the Panda's
DEFAULT_DX = 0.007                   # m: a 4 cm bottle neck is 5.7 cells wide
OBS_SIZE = 52 + 7 * MAX_OBSTACLES
SOURCE, TARGET = 0, 1                # body handles in the world; boxes after them
PARKED = (-0.2, -0.2, -0.2, 0.0, 0.0, 0.0)    # an unused box slot: outside the domain
REWARD_MODES = ("increase", "dense", "sparse")
#: the terms of each mode, in the order they are summed; ``info["reward_<term>"]`` holds each
REWARD_TERMS = {"increase": ("target", "spill", "smooth"),
                "dense": ("target", "spill", "smooth", "approach", "lean"),
                "sparse": ("success",)}
MIN_CAPACITY = 16000                 # particles: more than S's liquid in any sampled task at DEFAULT_DX


def wall_thickness(dx: float) -> float:
    """Walls two cells thick at least (m), so liquid cannot cross them; 1 cm otherwise."""
    return max(0.01, 2.0 * dx)


def start_configuration(arm: PandaArm, task: Pour3DTask) -> tuple[np.ndarray, float]:
    """Joint angles holding S upright at its start, the hand's approach across the pour plane
    and pointing away from the arm's base (so that rolling the wrist tilts S in the plane);
    returns (q, error) as :func:`taigym.envs.panda.container_ik`."""
    _, R, _ = task.plane()
    p = np.asarray(task.source_position)
    across = R[:, 2] if R[:, 2] @ [p[0], p[1], 0.0] >= 0 else -R[:, 2]
    seed = HOME.copy()
    seed[0] = math.atan2(p[1], p[0])
    return container_ik(arm, p, (0.0, 0.0, 1.0), seed, approach=across, posture=seed, iterations=300)


class PlaneScene:
    """A task's geometry in the plane's frame (the simulator's): S's wall as points (revolved
    chain points, radius ``r``) for the collision checks, T's pose and the boxes."""

    def __init__(self, task: Pour3DTask, wall: float):
        self.origin, self.R, self.size = task.plane()
        self.source, self.target = task.source_shape(wall), task.target_shape(wall)
        sec = task.section(wall)
        self.section = sec
        self.t_pose = np.array([sec.target_position[0], sec.target_position[1], 0.5 * self.size[2]])
        self.boxes = task.obstacles_in_plane()
        r = self.source.radius
        rz = densify(self.source.walls, r)
        phi = np.linspace(0.0, 2 * math.pi, 24, endpoint=False)
        self.wall_points = np.stack([np.outer(rz[:, 0], np.cos(phi)), np.repeat(rz[:, 1:], 24, 1),
                                     np.outer(rz[:, 0], np.sin(phi))], -1).reshape(-1, 3)
        self.r = r

    def target_cylinder(self) -> tuple[float, ...]:
        """T's solid as an upright cylinder (centre x, y, z (robot frame), outer radius, height), m."""
        t = self.target
        lo, hi = np.asarray(t.walls).min(0) - t.radius, np.asarray(t.walls).max(0) + t.radius
        centre = self.origin + self.R @ (self.t_pose + [0.0, 0.5 * (lo[1] + hi[1]), 0.0])
        return (*map(float, centre), float(hi[0]), float(hi[1] - lo[1]))

    def to_plane(self, p: np.ndarray) -> np.ndarray:
        return (np.asarray(p) - self.origin) @ self.R

    def sim_pose(self, origin: np.ndarray, R_container: np.ndarray) -> np.ndarray:
        """S's pose (x, y, z, rotation vector) in the simulator from its robot-frame pose."""
        return np.concatenate([self.to_plane(origin), Rotation.from_matrix(self.R.T @ R_container).as_rotvec()])

    def penetration(self, pose: np.ndarray) -> float:
        """How deep (m) S's wall at simulator ``pose`` reaches into T's wall, a box or the counter."""
        p = self.wall_points @ Rotation.from_rotvec(pose[3:]).as_matrix().T + pose[:3]
        d = [self.target.sdf(p - self.t_pose).min(), p[:, 1].min()]
        for c, half, rot in self.boxes:
            e = np.abs((p - c) @ rot) - half
            d.append((np.linalg.norm(np.maximum(e, 0.0), axis=1) + np.minimum(e.max(1), 0.0)).min())
        return max(0.0, self.r - min(d))


def observation_bounds() -> tuple[np.ndarray, np.ndarray]:
    reach, v, w = 1.2, 3.0, 10.0
    lo = [*JOINT_LOW, *-MAX_JOINT_SPEED, -reach, -reach, 0.0, -1, -1, -1, *[-v] * 3, *[-w] * 3,
          -reach, -reach, 0.0, *[-2 * reach] * 3, 0.0, 0.0, -4.0, 0.0, 0.0, 0.0, *[0.0] * 14]
    hi = [*JOINT_HIGH, *MAX_JOINT_SPEED, reach, reach, 1.6, 1, 1, 1, *[v] * 3, *[w] * 3,
          reach, reach, 1.6, *[2 * reach] * 3, math.pi, 1.0, 0.0, 1.0, 1.0, 1.0,
          *[1.0] * 3, 0.4, 0.4, 5.0, 5.0, *[1.0] * 3, 0.4, 0.4, 5.0, 5.0]
    slot_lo, slot_hi = [0.0, -reach, -reach, 0.0, 0.0, 0.0, 0.0], [1.0, reach, reach, 1.6, 1.0, 1.0, 1.0]
    return (np.array(lo + slot_lo * MAX_OBSTACLES, np.float32),
            np.array(hi + slot_hi * MAX_OBSTACLES, np.float32))


class Pour3DEnv(gym.Env):
    __doc__ = __doc__
    metadata = {"render_modes": ["rgb_array"], "render_fps": int(round(1 / CONTROL_DT)),
                "episode_metrics": EPISODE_METRICS}

    def __init__(self, task_split: str | None = None, container: str | None = None,
                 fill: float | None = None, viscosity: float | None = None, horizon: float = 5.0,
                 dx: float = DEFAULT_DX, render_mode: str | None = None, render_size=(320, 512),
                 spill_penalty: float = 2.0, smoothness_penalty: float = 1e-3, arch: str = "cpu",
                 fidelity: str = "particles", reward_mode: str = "increase", shaping_gamma: float = 0.99):
        self.reward_mode = choice("reward_mode", reward_mode, REWARD_MODES)
        self.shaping_gamma = bounded_float("shaping_gamma", shaping_gamma, 0.0, 1.0)
        if task_split not in (None, "train", "eval"):
            raise ValueError(f"task_split must be None, 'train' or 'eval', got {task_split!r}")
        if container is not None and container not in SOURCE_SHAPES:
            raise ValueError(f"container must be None (sampled) or one of {', '.join(SOURCE_SHAPES)}; "
                             f"got {container!r}")
        # the task fields they fix, as Pour-v0's arguments of the same names
        self._fixed = {"source_container": container,
                       "fill": None if fill is None else bounded_float("fill", fill, 0.0, 1.0, lo_open=True),
                       "viscosity": None if viscosity is None else
                       bounded_float("viscosity", viscosity, 0.0, MAX_VISCOSITY)}
        fixed = [k for k, v in (("container", container), ("fill", fill), ("viscosity", viscosity)) if v is not None]
        if task_split is not None and fixed:
            raise ValueError(f"task_split={task_split!r} draws whole tasks from the split; it cannot "
                             f"be combined with {', '.join(fixed)}")
        if not (isinstance(horizon, (int, float)) and 0.5 <= horizon <= 60):
            raise ValueError(f"horizon must be in [0.5, 60] s, got {horizon!r}")
        if not (isinstance(dx, (int, float)) and 0.0035 <= dx <= 0.012):
            raise ValueError(f"dx must be in [0.0035, 0.012] m, got {dx!r}")
        if fidelity != "particles":
            raise ValueError(f"fidelity must be 'particles' (Pour3D-v0 has no reduced model yet), "
                             f"got {fidelity!r}")
        if render_mode not in (None, "rgb_array"):
            raise ValueError(f"render_mode must be None or 'rgb_array', got {render_mode!r}")
        size = tuple(render_size) if isinstance(render_size, (tuple, list)) else ()
        if len(size) != 2 or not all(isinstance(s, int) and 16 <= s <= 2048 for s in size):
            raise ValueError(f"render_size must be (height, width) in pixels, 16-2048, got {render_size!r}")
        for name, v in (("spill_penalty", spill_penalty), ("smoothness_penalty", smoothness_penalty)):
            if not (isinstance(v, (int, float)) and 0 <= v < math.inf):
                raise ValueError(f"{name} must be a finite number >= 0, got {v!r}")
        self.task_split, self.horizon, self.dx = task_split, float(horizon), float(dx)
        self.render_mode, self.render_size, self.arch = render_mode, size, arch
        self.spill_penalty, self.smoothness_penalty = float(spill_penalty), float(smoothness_penalty)
        self.wall = wall_thickness(self.dx)
        self.action_space = spaces.Box(-1.0, 1.0, (7,), dtype=np.float32)
        self.observation_space = spaces.Box(*observation_bounds(), dtype=np.float32)
        self.max_steps = int(round(self.horizon / CONTROL_DT))
        self.task: Pour3DTask | None = None
        self.arm: PandaArm | None = None
        self.world, self._capacity = None, 0
        self.scene: PlaneScene | None = None

    @property
    def dt(self) -> float:
        return CONTROL_DT

    # ------------------------------------------------------------------ episode
    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        options = reset_options(options)
        if options.get("task") is not None:
            task = as_task(options["task"])
        elif self.task_split is not None:
            split = pour3d_tasks(self.task_split)
            task = split[int(self.np_random.integers(len(split)))]
        else:
            task = sample_task(self.np_random, **self._fixed)
        if self.arm is None:
            self.arm = PandaArm(HOME)         # S upright in the hand at HOME
        scene = PlaneScene(task, self.wall)
        self.arm.set_obstacles([COUNTER, *task.obstacles], [scene.target_cylinder()])
        q, err = start_configuration(self.arm, task)
        if err > 1e-3 or self.arm.collides(q):
            raise ValueError(f"task not feasible: the arm cannot hold the source upright at "
                             f"source_position {task.source_position} (out of its reach or in "
                             f"collision; IK error {err:.3g})")
        self.task, self.scene = task, scene
        self.q, self.qd = q, np.zeros(7)
        self._load_world(task, scene, int(self.np_random.integers(2 ** 31)))
        self.steps, self.unstable, self.clipped, self.collision = 0, False, False, False
        self.prev_action = np.zeros(7)
        self.velocity = np.zeros(6)
        self._read()
        self.info = self._info()
        if self.reward_mode == "dense":    # the cross-sections' lips and T's opening (m), fixed in an episode
            source, target = scene.section.source_shape(self.wall), scene.section.target_shape(self.wall)
            (lx, _), (rx, _) = target.lips
            self._openings = (source.lips, target.opening_centre, 0.5 * abs(rx - lx))
        self.phi = self._potentials() if self.reward_mode == "dense" else {}
        return self._obs(), {**self.info, **{"reward_" + k: 0.0 for k in REWARD_TERMS[self.reward_mode]}}

    def _potentials(self) -> dict[str, float]:
        """The dense mode's potentials (Pour-v0's, ``taigym.envs.pour_reward``) in the pour plane
        (T is static: its speed is 0)."""
        lips, t_oc, t_half = self._openings
        approach, lean = potentials(self.plane_pose(), self.scene.t_pose[:2], 0.0, lips, t_oc, t_half)
        return {"approach": float(approach), "lean": float(lean)}

    def _load_world(self, task: Pour3DTask, scene: PlaneScene, jitter: int) -> None:
        from taigym.sim import Box3, World3D

        need = int(1.1 * task.source_shape(self.wall).liquid_volume(task.fill) / (0.5 * self.dx) ** 3) + 64
        pose = scene.sim_pose(*self.arm.container_pose(self.q))
        t_pose = (*scene.t_pose, 0.0, 0.0, 0.0)
        if self.world is not None and self._capacity < need:
            self._release_world()
        if self.world is None:
            # MIN_CAPACITY times a power of 2: few distinct worlds in the pool (sim.pool)
            self._capacity = MIN_CAPACITY << max(0, math.ceil(math.log2(need / MIN_CAPACITY)))

            def build():
                # ceil: the grid's cells are at most dx, so that walls of 2 dx are two cells thick
                w = World3D(size=scene.size, cells=math.ceil(scene.size[0] / self.dx),
                            viscosity=task.viscosity, arch=self.arch, max_particles=self._capacity,
                            settle_speed=SETTLE_SPEED)
                w.add_body(scene.source, pose)
                w.add_body(scene.target, t_pose)
                for _ in range(MAX_OBSTACLES):
                    w.add_body(Box3(0.01, 0.01, 0.01), PARKED)
                return w.build()

            self.world = pool.take(self._pool_key(), build)
        w = self.world
        w.clear_liquid()
        w.set_body(SOURCE, scene.source, pose)
        w.set_body(TARGET, scene.target, t_pose)
        for k in range(MAX_OBSTACLES):
            if k < len(scene.boxes):
                c, half, rot = scene.boxes[k]
                w.set_body(2 + k, Box3(*(2 * half)), (*c, *Rotation.from_matrix(rot).as_rotvec()))
            else:
                w.set_body(2 + k, Box3(0.01, 0.01, 0.01), PARKED)
        w.set_viscosity(task.viscosity)
        w.reseed(jitter)
        w.fill_body(SOURCE, task.fill)

    def step(self, action):
        if self.task is None:
            raise RuntimeError("call reset() before step()")
        a = check_action(action, self.action_space)
        a, q1, qd1, self.clipped = joint_step(self.q, self.qd, a, MAX_JOINT_SPEED, CONTROL_DT)
        pose0 = self.pose
        pose1 = self.scene.sim_pose(*self.arm.container_pose(q1))
        self.collision = self._blocked(q1, pose0, pose1)
        if self.collision:
            q1, qd1, pose1 = self.q, np.zeros(7), pose0
            self.clipped = True
        R0 = Rotation.from_rotvec(pose0[3:])
        vel = np.concatenate([(pose1[:3] - pose0[:3]) / CONTROL_DT,
                              (Rotation.from_rotvec(pose1[3:]) * R0.inv()).as_rotvec() / CONTROL_DT])
        prev = dict(self.info)
        self.world.set_pose(SOURCE, pose0, vel)
        self.world.advance(CONTROL_DT)
        self.unstable = self.world.unstable
        self.q, self.qd = q1, qd1
        self.velocity = self.arm.container_velocity(q1, qd1)
        self.steps += 1
        self._read()
        self.info = self._info()
        da = a - self.prev_action
        self.prev_action = a
        terminated = (not self.unstable and self.info["in_source"] <= EMPTY_FRACTION
                      and self.info["in_flight"] <= SETTLED_FRACTION)
        truncated = self.unstable or (not terminated and self.steps >= self.max_steps)
        if self.reward_mode == "sparse":
            terms = {"success": float(self.info["success"] and (terminated or truncated))}
        else:
            terms = {"target": self.info["in_target"] - prev["in_target"],
                     "spill": -self.spill_penalty * (self.info["spilled"] - prev["spilled"]),
                     "smooth": -self.smoothness_penalty * float(da @ da)}
        if self.reward_mode == "dense":
            shaped, self.phi = shaping_terms(self.phi, self._potentials, self.shaping_gamma, terminated or truncated)
            terms.update(shaped)
        info = {**self.info, **{"reward_" + k: v for k, v in terms.items()}}
        return self._obs(), float(sum(terms.values())), bool(terminated), bool(truncated), info

    def _blocked(self, q1, pose0, pose1) -> bool:
        """The move to q1 brings the arm into a solid (at mid-step or at its end), S's wall
        deeper into a solid than it is, or S out of the liquid's box."""
        if self.arm.collides(0.5 * (self.q + q1)) or self.arm.collides(q1):
            return True
        if self.scene.penetration(pose1) > self.scene.penetration(pose0) + 1e-4:
            return True
        try:                                   # the world checks that S stays in its box
            self.world.set_pose(SOURCE, pose1)
        except ValueError:
            return True
        return False

    # ------------------------------------------------------------------ features
    def _read(self) -> None:
        origin, R = self.arm.container_pose(self.q)
        self.position, self.axis = origin, R[:, 1]
        self.pose = self.scene.sim_pose(origin, R)
        self.fractions = self.world.fractions()

    def plane_pose(self) -> np.ndarray:
        """S's (x, y, theta) in the pour plane (2D Pour convention)."""
        a = self.scene.R.T @ self.axis
        return np.array([self.pose[0], self.pose[1], math.atan2(-a[0], a[1])])

    def _info(self) -> dict[str, Any]:
        fr = self.fractions
        in_s, in_t = float(fr["in"][SOURCE]), float(fr["in"][TARGET])
        spilled, flight = float(fr["spilled"]), float(fr["in_flight"])
        success = bool(in_t >= SUCCESS_IN_TARGET and spilled <= SUCCESS_MAX_SPILLED)
        return {"in_source": in_s, "in_target": in_t, "spilled": spilled, "in_flight": flight,
                "success": success, "is_success": success, "sim_unstable": bool(self.unstable),
                "time": self.steps * CONTROL_DT, "action_clipped": self.clipped,
                "collision": bool(self.collision), "source_position": self.position.copy(),
                "source_axis": self.axis.copy(), "lean": self._lean(),
                "plane_pose": self.plane_pose(), "n_particles": self.world.particle_count()}

    def _lean(self) -> float:
        return float(math.acos(np.clip(self.axis[2], -1.0, 1.0)))

    def _obs(self) -> np.ndarray:
        t, sc = self.task, self.scene
        t_open = sc.origin + sc.R @ (sc.t_pose + [0.0, t.target_height, 0.0])
        s_open = self.position + self.axis * t.source_height
        s_feat = shape_features(sc.section.source_shape(self.wall))
        t_feat = shape_features(sc.section.target_shape(self.wall))
        s_hot = [float(t.source_container == s) for s in SOURCE_SHAPES]
        t_hot = [float(t.target_container == s) for s in TARGET_SHAPES]
        head = [*self.q, *self.qd, *self.position, *self.axis, *self.velocity, *t_open, *(t_open - s_open),
                self._lean(), t.fill, math.log10(max(t.viscosity, 1e-4)), self.steps * CONTROL_DT / self.horizon,
                float(self.fractions["in"][SOURCE]), float(self.fractions["in"][TARGET]),
                *s_hot, *s_feat[4:], *t_hot, *t_feat[4:]]
        slots = np.zeros((MAX_OBSTACLES, 7))
        for k, b in enumerate(t.obstacles):
            slots[k] = (1.0, *b)
        obs = np.concatenate([np.asarray(head), slots.ravel()])
        return np.clip(obs, self.observation_space.low, self.observation_space.high).astype(np.float32)

    # ------------------------------------------------------------------ rendering
    def render(self):
        if self.render_mode != "rgb_array" or self.task is None:
            return None
        from .render import SOURCE_COLOUR, TARGET_COLOUR, render_scene

        sc = self.scene
        links = sc.to_plane(self.arm.link_positions(self.q, range(HAND_LINK + 1)))[:, :2]
        w = self.world
        return render_scene(self.render_size, sc.size[:2],
                            [(sc.section.source_shape(self.wall), self.plane_pose(), SOURCE_COLOUR),
                             (sc.section.target_shape(self.wall), (*sc.t_pose[:2], 0.0), TARGET_COLOUR)],
                            w.positions()[:, :2], w.velocities()[:, :2], particle_size=0.5 * self.dx,
                            polylines=[(links, (120, 120, 120))], boxes=sc.section.obstacles)

    def _pool_key(self) -> tuple:
        return ("Pour3D-v0", self.dx, self._capacity, self.arch)

    def _release_world(self) -> None:
        pool.give(self._pool_key(), self.world)
        self.world = None

    def close(self):
        """Disconnect the arm's pybullet client; hand the liquid's solver to the next env with
        the same grid and capacity (``taigym.sim.pool``)."""
        if self.arm is not None:
            self.arm.close()
            self.arm = None
        if self.world is not None:
            self._release_world()
            self.task = None
