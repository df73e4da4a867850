"""``taigym/MultiContact-v1``: humanoid locomotion that needs hands as well as feet (Bouyarmane 2011,
"Multi-Contact Planning").

pybullet (DIRECT mode, headless) simulates pybullet_data's MuJoCo humanoid (40.8 kg, 21
revolute joints; see :mod:`taigym.sim.humanoid` for why this model and its torque limits) in a
scene sampled from four families (:mod:`taigym.envs.multicontact_tasks`): a high step with a
handrail, a gap crossed with a hand on a wall, a steep slope with a handrail and an inclined
ladder; a fifth, ``soft`` (``family="soft"``), is a step whose top is a linear-elastic pad (the
paper's extension to deformable supports): the pad's top face is a heightfield that a
finite-element model of the pad moves with the robot's contact forces every physics step
(:mod:`taigym.sim.soft_support`). The robot starts standing on the floor at x = 0 facing +x; the task's goal is a point
where the midpoint of its soles must end. Hands may grasp bars (handrails, rungs): a grasp is a
point-to-point constraint transmitting at most 600 N, made when the hand is commanded to grip
within 2 cm of the bar's surface, released when the command stops.

## Action space

``control="torque"`` (default): ``Box(-1, 1, (23,), float32)``:

| index | action | scale |
|-------|--------|-------|
| 0-20 | joint torques, ``taigym.sim.humanoid.JOINTS`` order | fractions of the joints' torque limits, held over the control step |
| 21, 22 | right, left hand grip command | > 0 grips (if near a bar), <= 0 releases |

``control="pd"``: the same with 0-20 joint position targets (-1 -> lower limit, 1 -> upper
limit) for pybullet's position motors (PD, gains ``kp``, ``kd``) with the joints' torque limits.
Components outside [-1, 1] are clipped; a nan or an infinity, or an action of another shape,
raises ``ValueError``.

## Observation space

A float32 vector of 64 entries, all bounded:

| index | observation | unit | range |
|-------|-------------|------|-------|
| 0-20 | joint positions | rad | [-pi, pi] |
| 21-41 | joint velocities | rad/s | [-30, 30] (clipped) |
| 42-44 | base (torso) position | m | [-5, 5] (clipped) |
| 45-48 | base orientation quaternion (x, y, z, w) | - | [-1, 1] |
| 49-51 | base linear velocity | m/s | [-10, 10] (clipped) |
| 52-54 | base angular velocity | rad/s | [-20, 20] (clipped) |
| 55-58 | contact flags: right foot, left foot, right hand, left hand touch the scene | - | {0, 1} |
| 59-60 | grasp flags: right, left hand holds a bar | - | {0, 1} |
| 61-63 | goal minus the soles' midpoint | m | [-5, 5] (clipped) |

## Rewards

``reward_mode`` chooses the reward; ``info["reward_<term>"]`` holds each term of the mode (0 at
reset), and they sum to the reward.

| mode | term | value |
|------|------|-------|
| ``"progress"`` (default) | progress | ``progress_weight`` (10) times the decrease of the distance from the soles' midpoint to the goal (m) |
| ``"progress"``, ``"dense"`` | alive | ``alive_bonus`` (0.05) on every step that does not fall |
| ``"progress"``, ``"dense"`` | effort | ``-effort_weight`` (0.01) times the mean of (torque / limit)^2 |
| ``"progress"``, ``"dense"`` | violation | ``-violation_penalty`` (0.1) if a link other than the feet, hands (lower arms) and shins touches the scene |
| ``"progress"``, ``"dense"`` | success | ``success_bonus`` (5) on success |
| ``"dense"`` | advance | ``shaping_gamma`` Phi(s') - Phi(s), Phi = ``progress_weight`` u (D_0 - D): ``D`` the distance (m) from the centre of mass to the point ``h_0`` above the goal, ``h_0`` the CoM's height above the soles at the start, ``D_0`` at the start; u in [0, 1] the torso's stance, the product of ramps from the fall thresholds (torso 0.45 m above the ground, 78 deg tilt: 0) to the start's height and upright (1) |
| ``"sparse"`` | success | 1 on success |

``"progress"`` pays for any decrease of the distance, a fall toward the goal included, and the
fall that ends the episode costs nothing: a learner finds diving forward before it finds
walking. ``"dense"`` replaces that term by potential-based shaping (Ng, Harada & Russell
1999): the potential grows with the CoM's advance only as much as the torso stays up, and it is
0 on the step that ends an episode (termination or truncation) and at the start (D = D_0), so
the ``shaping_gamma``-discounted sum of ``advance`` over any episode is 0: a fall gives back all
the advance it earned, and ``"dense"``'s optimal policies (for a learner with that discount,
default 0.99) are those of its other terms, the task's (alive, effort, violation, success).

## Episode end

* Termination: success (both feet touch the scene and the soles' midpoint is within
  ``task.goal_radius`` of the goal: 0.3 m, 0.15 m on the ladder) or a fall (the torso, waist or
  pelvis touches the scene, the torso is less than 0.45 m above the lowest ground within 0.3 m
  of it (over the gap: 0.45 m above the floor's level), or it tilts more than 78 deg from
  upright).
* Truncation: at ``horizon`` (default 60 s = 3600 steps of 1/60 s; a climb of 12-16 stances takes
  30-45 s at the ``stance`` expert's speeds) or on a blow-up (NaN state,
  ``info["sim_unstable"]``).

## Info (every step, including reset)

``success``, ``fell``, ``sim_unstable``, ``time`` (s), ``goal_distance`` (m), ``stances`` (stances
reached: changes of the set of limbs in contact that held for 0.25 s), ``contacts``
(dict limb -> bool), ``grasping`` (dict hand -> bool), ``contact_violation`` (bool),
``effort``, ``reward_<term>`` for each term of the reward mode (Rewards), ``family``, ``sink``
(dict foot -> the pad's simulated sink under the sole's centre, m, for the feet touching a soft
pad; empty on rigid scenes).

## Arguments

``gym.make("taigym/MultiContact-v1", family=None, task_split=None, control="torque", horizon=60.0,
render_mode=None, render_size=(240, 320), progress_weight=10, alive_bonus=0.05,
effort_weight=0.01, violation_penalty=0.1, success_bonus=5, kp=0.3, kd=1.0, control_dt=1/60,
reward_mode="progress", shaping_gamma=0.99)``: ``reward_mode`` is "progress", "dense" or
"sparse" (Rewards), ``shaping_gamma`` in [0, 1];
``family`` fixes the scene family of sampled tasks (default: one of the four rigid ones);
``task_split="train"|"eval"`` samples from a fixed split (``family="soft"``: the soft split);
``reset(options={"task": task})`` runs a given task (or its ``to_dict``). The control step is
``control_dt`` (default 1/60 s = 4 physics steps of 1/240 s; a multiple of 1/240 s up to
0.1 s); the progress, alive and effort terms are per control step.

Why torque control at 60 Hz by default: it is the mode of the env's expert (the ``stance``
agent's QP computes joint torques; pybullet's position motors are stiff velocity constraints
that cannot render them, and with them the expert falls within seconds), so expert
demonstrations are actions an imitation learner (``bc``, ``dagger``) can copy in the default
env; the QP needs the fine step (at 0.05 s it drops eval ladders 0 and 1 that it climbs at
1/60 s); and it is the convention RL users of simulated humanoids know (Gymnasium's MuJoCo
Humanoid: torques every 0.015 s). ``control="pd", control_dt=0.05`` remains available (and is
``MultiContact-v0``).

## Version history

* v1: the defaults are ``control="torque"`` and ``control_dt=1/60`` (v0: ``"pd"``, 0.05 s);
  everything else is v0's. A new id because the default action now means torques, not position
  targets: results and policies obtained with v0's defaults do not carry over. Added with it
  (both versions, nothing of the four rigid families changes): the ``soft`` family and
  ``info["sink"]``.
* v0 (2026-11-22): initial version.
* v0 (2026-11-27): info gains ``stances``; ``metadata["episode_metrics"]`` declares what
  evaluations report.
* v1, v0 (2026-11-28): ``reward_mode`` ("progress", the reward so far, the default; "dense";
  "sparse") and ``shaping_gamma``; info gains ``reward_alive`` and ``reward_success``.
* v1, v0 (2026-11-28): on ``slope`` tasks the floor's contact surface (``task.surfaces()``) ends
  0.12 m before the slope (0.05 m before, a sole at its end had its toe on the slope); the
  scenes, observations and rewards are unchanged.
"""

from __future__ import annotations

import math

import gymnasium as gym
import numpy as np
import pybullet as p
from gymnasium import spaces

from taigym.sim import humanoid as hum
from taigym.sim.constants import GRAVITY, TORQUE_CONTROL_DT
from taigym.sim.soft_support import SoftSupport

from .checks import bounded_float, check_action, choice
from .multicontact_tasks import (FAMILIES, FLOOR_FRICTION, SPLIT_SIZES, MultiContactTask, multicontact_tasks, sample_task,
                                 soft_tasks)
from .shaping import shaping_terms

STANCE_HOLD = 0.25          # s: a new set of limbs in contact counts in info["stances"] once held this long
PHYSICS_DT = 1.0 / 240.0
OBS_SIZE = 64
GRIP_DISTANCE = 0.02            # m between the hand sphere's and the bar's surfaces
FALL_HEIGHT = 0.45              # m, torso above the ground below it
FALL_TILT = math.radians(78)
CONTROLS = ("pd", "torque")
REWARD_MODES = ("progress", "dense", "sparse")
#: the terms of each mode, in the order they are summed; ``info["reward_<term>"]`` holds each
REWARD_TERMS = {"progress": ("progress", "effort", "violation", "alive", "success"),
                "dense": ("effort", "violation", "alive", "success", "advance"),
                "sparse": ("success",)}


class MultiContactEnv(gym.Env):
    """Humanoid multi-contact locomotion in pybullet (module docstring)."""

    metadata = {"render_modes": ["rgb_array"], "render_fps": 20,
                "episode_metrics": {"success": "rate", "fell": "rate", "goal_distance": "mean", "stances": "mean"}}

    def __init__(self, family: str | None = None, task_split: str | None = None, control: str = "torque",
                 horizon: float = 60.0, render_mode: str | None = None, render_size=(240, 320),
                 progress_weight: float = 10.0, alive_bonus: float = 0.05, effort_weight: float = 0.01,
                 violation_penalty: float = 0.1, success_bonus: float = 5.0, kp: float = 0.3,
                 kd: float = 1.0, control_dt: float = TORQUE_CONTROL_DT, reward_mode: str = "progress",
                 shaping_gamma: float = 0.99):
        self.reward_mode = choice("reward_mode", reward_mode, REWARD_MODES)
        self.shaping_gamma = bounded_float("shaping_gamma", shaping_gamma, 0.0, 1.0)
        if family is not None and family not in FAMILIES:
            raise ValueError(f"family must be None or one of {', '.join(FAMILIES)}; got {family!r}")
        if task_split is not None and task_split not in SPLIT_SIZES:
            raise ValueError(f"task_split must be None or one of {tuple(SPLIT_SIZES)}; got {task_split!r}")
        if control not in CONTROLS:
            raise ValueError(f"control must be one of {CONTROLS}; got {control!r}")
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(f"render_mode must be None or 'rgb_array'; got {render_mode!r}")
        try:
            h, w = (int(v) for v in render_size)
        except (TypeError, ValueError):
            h = w = -1
        if not (16 <= h <= 2048 and 16 <= w <= 2048):
            raise ValueError(f"render_size must be (height, width) in [16, 2048]; got {render_size!r}")
        self.family, self.task_split, self.control = family, task_split, control
        self.render_mode, self.render_size = render_mode, (h, w)
        self.progress_weight = bounded_float("progress_weight", progress_weight, 0.0, 1e3)
        self.alive_bonus = bounded_float("alive_bonus", alive_bonus, 0.0, 10.0)
        self.effort_weight = bounded_float("effort_weight", effort_weight, 0.0, 10.0)
        self.violation_penalty = bounded_float("violation_penalty", violation_penalty, 0.0, 10.0)
        self.success_bonus = bounded_float("success_bonus", success_bonus, 0.0, 1e3)
        self.kp = bounded_float("kp", kp, 0.0, 1.0)
        self.kd = bounded_float("kd", kd, 0.0, 10.0)
        dt = bounded_float("control_dt", control_dt, PHYSICS_DT, 0.1)
        self.substeps = round(dt / PHYSICS_DT)
        if abs(self.substeps * PHYSICS_DT - dt) > 1e-9:
            raise ValueError(f"control_dt must be a multiple of 1/240 s in [1/240, 0.1], got {control_dt!r}")
        self.control_dt = self.substeps * PHYSICS_DT
        self.horizon = bounded_float("horizon", horizon, self.control_dt, 600.0)
        self.action_space = spaces.Box(-1.0, 1.0, (hum.N_JOINTS + 2,), np.float32)
        lo = np.concatenate([np.full(21, -np.pi), np.full(21, -30.0), np.full(3, -5.0), np.full(4, -1.0),
                             np.full(3, -10.0), np.full(3, -20.0), np.zeros(6), np.full(3, -5.0)])
        self.observation_space = spaces.Box(lo.astype(np.float32), self._obs_high(lo), dtype=np.float32)
        self.client = p.connect(p.DIRECT)
        self.task: MultiContactTask | None = None
        self.robot: hum.Robot | None = None
        self._grasps: dict[str, int | None] = {}

    @staticmethod
    def _obs_high(lo: np.ndarray) -> np.ndarray:
        high = -lo
        high[55:61] = 1.0
        return high.astype(np.float32)

    # ------------------------------------------------------------------ reset
    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        task = (options or {}).get("task")
        if task is None:
            if self.task_split is not None:
                pool = soft_tasks(self.task_split) if self.family == "soft" else multicontact_tasks(self.task_split)
                if self.family is not None:
                    pool = tuple(t for t in pool if t.family == self.family)
                task = pool[int(self.np_random.integers(len(pool)))]
            else:
                task = sample_task(self.np_random, self.family)
        elif isinstance(task, dict):
            task = MultiContactTask.from_dict(task)
        elif not isinstance(task, MultiContactTask):
            raise ValueError(f"options['task'] must be a MultiContactTask or its dict, got {type(task).__name__}")
        self.task = task
        c = self.client
        p.resetSimulation(physicsClientId=c)
        p.setPhysicsEngineParameter(fixedTimeStep=PHYSICS_DT, numSolverIterations=50,
                                    deterministicOverlappingPairs=1, physicsClientId=c)
        p.setGravity(0, 0, -GRAVITY, physicsClientId=c)
        self.robot = hum.Robot.load(c)
        boxes, bars = task.scene()
        self.scene_ids = hum.build_scene(c, boxes, bars)
        self.bars = list(zip(self.scene_ids[len(boxes):], bars))
        self.soft = [SoftSupport(c, b, FLOOR_FRICTION) for b in task.soft_blocks()]
        self.scene_ids += [i for sup in self.soft for i in sup.body_ids]
        hum.place_standing(self.robot, x=0.0)
        self._grasps = {h: None for h in hum.HANDS}
        self.time = 0.0
        self._target = self.robot.get_state()[2]
        self._dist = self._goal_distance()
        self._torque = np.zeros(hum.N_JOINTS)
        self._stance, self._pending, self._held, self.stances = self._limbs_in_contact(), None, 0.0, 0
        if self.reward_mode == "dense":    # the stance and the CoM's aim point the potential is measured from
            pos, quat = self.robot.get_state()[:2]
            self._stand = (pos[2] - self._ground_below(pos[0]), self._up(quat))
            com = self.robot.com()
            self._aim = self.task.goal() + [0.0, 0.0, com[2] - self.sole_midpoint()[2]]
            self._d0 = float(np.linalg.norm(com - self._aim))
            self.phi = self._potentials()
        info = self._info(fell=False, violation=False, unstable=False)
        return self._obs(), info

    # ------------------------------------------------------------------ step
    def step(self, action):
        if self.robot is None:
            raise RuntimeError("call reset() before step()")
        a = np.clip(check_action(action, self.action_space), -1.0, 1.0)
        rob, c = self.robot, self.client
        joints = [int(j) for j in rob.joints]
        if self.control == "pd":
            target = rob.lower + (a[:21] + 1.0) * 0.5 * (rob.upper - rob.lower)
            p.setJointMotorControlArray(rob.body, joints, p.POSITION_CONTROL, targetPositions=list(target),
                                        forces=list(hum.TORQUE_LIMITS), positionGains=[self.kp] * 21,
                                        velocityGains=[self.kd] * 21, physicsClientId=c)
        for hand, cmd in zip(hum.HANDS, a[21:]):
            self._grip(hand, cmd > 0.0)
        torque = np.zeros(hum.N_JOINTS)
        for _ in range(self.substeps):
            if self.control == "torque":   # pybullet applies a torque command for one physics step
                p.setJointMotorControlArray(rob.body, joints, p.TORQUE_CONTROL,
                                            forces=list(a[:21] * hum.TORQUE_LIMITS), physicsClientId=c)
            p.stepSimulation(physicsClientId=c)
            if self.soft:      # the pads' top faces follow the contact forces (taigym.sim.soft_support)
                soles = {rob.link_index[hum.LIMB_LINK[f]]: rob.limb_points(f) for f in hum.FEET}
                for sup in self.soft:
                    sup.update(rob.body, PHYSICS_DT, soles)
            js = p.getJointStates(rob.body, joints, physicsClientId=c)
            torque += np.array([s[3] for s in js]) if self.control == "pd" else a[:21] * hum.TORQUE_LIMITS
        self._torque = torque / self.substeps
        self.time += self.control_dt
        state = rob.get_state()
        unstable = not all(np.all(np.isfinite(s)) for s in state) or np.abs(state[0]).max() > 50
        touching = self._touching_links()
        violation = bool(touching - set(hum.ALLOWED_LINKS) - set(hum.TRUNK_LINKS))
        fell = bool(unstable or self._fallen(touching))
        dist = self._goal_distance() if not unstable else self._dist
        progress = self._dist - dist
        self._dist = dist
        success = (not fell) and self._success()
        self._count_stance()
        effort = float(np.mean((self._torque / hum.TORQUE_LIMITS) ** 2))
        terminated = bool(success or (fell and not unstable))
        truncated = bool(unstable or self.time >= self.horizon - 1e-9)
        if self.reward_mode == "sparse":
            terms = {"success": float(success)}
        else:
            terms = {"progress": self.progress_weight * progress, "effort": -self.effort_weight * effort,
                     "violation": -self.violation_penalty * violation, "alive": 0.0 if fell else self.alive_bonus,
                     "success": self.success_bonus * success}
        if self.reward_mode == "dense":     # Phi = 0 on the step that ends the episode
            del terms["progress"]
            shaped, self.phi = shaping_terms(self.phi, self._potentials, self.shaping_gamma, terminated or truncated)
            terms.update(shaped)
        info = self._info(fell=fell, violation=violation, unstable=unstable)
        info.update({"reward_" + k: v for k, v in terms.items()}, effort=effort)
        return self._obs(), float(sum(terms.values())), terminated, truncated, info

    # ------------------------------------------------------------------ helpers
    def _grip(self, hand: str, grip: bool) -> None:
        c, rob = self.client, self.robot
        cid = self._grasps[hand]
        if not grip:
            if cid is not None:
                p.removeConstraint(cid, physicsClientId=c)
                self._grasps[hand] = None
            return
        if cid is not None:
            return
        x = rob.limb_points(hand)[0]
        for bid, (centre, axis, half, radius, _) in self.bars:
            ctr = np.asarray(centre)
            ax = np.asarray({"x": (1, 0, 0), "y": (0, 1, 0)}.get(axis, axis) if isinstance(axis, str) else axis, float)
            ax /= np.linalg.norm(ax)
            s = float(np.clip((x - ctr) @ ax, -half, half))
            if np.linalg.norm(x - ctr - s * ax) <= radius + hum.HAND_RADIUS + GRIP_DISTANCE:
                link = rob.link_index[hum.LIMB_LINK[hand]]
                st = p.getLinkState(rob.body, link, computeForwardKinematics=True, physicsClientId=c)
                Rl = np.array(p.getMatrixFromQuaternion(st[1])).reshape(3, 3)
                pos_b, orn_b = p.getBasePositionAndOrientation(bid, physicsClientId=c)
                Rb = np.array(p.getMatrixFromQuaternion(orn_b)).reshape(3, 3)
                cid = p.createConstraint(rob.body, link, bid, -1, p.JOINT_POINT2POINT, [0, 0, 0],
                                         list(Rl.T @ (x - np.asarray(st[0]))),
                                         list(Rb.T @ (x - np.asarray(pos_b))), physicsClientId=c)
                p.changeConstraint(cid, maxForce=hum.GRIP_FORCE, physicsClientId=c)
                self._grasps[hand] = cid
                return

    def _touching_links(self) -> set[str]:
        names = {v: k for k, v in self.robot.link_index.items()}
        out = set()
        for bid in self.scene_ids:
            for cp in p.getContactPoints(self.robot.body, bid, physicsClientId=self.client):
                out.add(names.get(cp[3], "?"))
        return out

    def _limbs_in_contact(self) -> frozenset:
        return frozenset(limb for limb, on in self.contacts().items() if on)

    def _count_stance(self) -> None:
        """``stances``: a new set of limbs in contact counts once it has held for STANCE_HOLD."""
        now = self._limbs_in_contact()
        if now == self._stance:
            self._pending = None
            return
        if now != self._pending:
            self._pending, self._held = now, 0.0
        self._held += self.control_dt
        if self._held >= STANCE_HOLD - 1e-9:
            self._stance, self._pending, self.stances = now, None, self.stances + 1

    def contacts(self) -> dict[str, bool]:
        touching = self._touching_links()
        return {limb: hum.LIMB_LINK[limb] in touching or (limb in hum.HANDS and self._grasps[limb] is not None)
                for limb in hum.LIMBS}

    def _ground_below(self, x: float) -> float:
        """The ground the torso's height is measured from (m): the lowest within 0.3 m of x
        (mid-way up a step the torso is low over it); over the gap, the floor's level."""
        if self.task.family == "gap":
            return 0.0
        return min(self.task.ground_height(x + d) for d in (-0.3, 0.0, 0.3))

    @staticmethod
    def _up(quat) -> float:
        """The vertical component of the torso's up axis (1: upright)."""
        return float(np.array(p.getMatrixFromQuaternion(quat)).reshape(3, 3)[2, 2])

    def _fallen(self, touching: set[str]) -> bool:
        pos, quat = self.robot.get_state()[:2]
        if touching & set(hum.TRUNK_LINKS):
            return True
        if pos[2] - self._ground_below(pos[0]) < FALL_HEIGHT:
            return True
        return bool(self._up(quat) < math.cos(FALL_TILT))

    def _potentials(self) -> dict[str, float]:
        """The dense mode's potential (module docstring), as ``taigym.envs.shaping`` takes it: the
        CoM's advance toward the goal, weighted by how far the torso is from falling (1 as at the
        start, 0 at a fall threshold)."""
        pos, quat = self.robot.get_state()[:2]
        (h0, up0), cos_fall = self._stand, math.cos(FALL_TILT)
        height = (pos[2] - self._ground_below(pos[0]) - FALL_HEIGHT) / max(h0 - FALL_HEIGHT, 1e-6)
        upright = (self._up(quat) - cos_fall) / max(up0 - cos_fall, 1e-6)
        u = float(np.clip(height, 0.0, 1.0) * np.clip(upright, 0.0, 1.0))
        return {"advance": self.progress_weight * u * (self._d0 - float(np.linalg.norm(self.robot.com() - self._aim)))}

    def sinks(self) -> dict[str, float]:
        """Per foot touching a soft pad: the pad's simulated sink under it, the depression of the
        pad's top face below the sole's centre (m, positive down; the finite-element model's
        state, not the sole's height, which pybullet's contact penetration blurs by a millimetre
        as the face moves)."""
        out = {}
        if not self.soft:
            return out
        touching = self._touching_links()
        for f in hum.FEET:
            mid = self.robot.limb_points(f).mean(axis=0)
            for sup in self.soft:
                if hum.LIMB_LINK[f] in touching and sup.block.contains(mid[0], mid[1]):
                    out[f] = sup.dent(mid[0], mid[1])
        return out

    def sole_midpoint(self) -> np.ndarray:
        pts = np.vstack([self.robot.limb_points(f) for f in hum.FEET])
        return pts.mean(axis=0)

    def _goal_distance(self) -> float:
        return float(np.linalg.norm(self.task.goal() - self.sole_midpoint()))

    def _success(self) -> bool:
        touching = self._touching_links()
        feet_down = all(hum.LIMB_LINK[f] in touching for f in hum.FEET)
        return bool(feet_down and self._goal_distance() <= self.task.goal_radius)

    def _obs(self) -> np.ndarray:
        pos, quat, q, vel, omega, qd = self.robot.get_state()
        flags = self.contacts()
        obs = np.concatenate([
            np.clip(q, -np.pi, np.pi), np.clip(qd, -30, 30), np.clip(pos, -5, 5), np.clip(quat, -1, 1),
            np.clip(vel, -10, 10), np.clip(omega, -20, 20), [float(flags[l]) for l in hum.LIMBS],
            [float(self._grasps[h] is not None) for h in hum.HANDS],
            np.clip(self.task.goal() - self.sole_midpoint(), -5, 5)])
        obs = np.nan_to_num(obs, nan=0.0)
        return np.clip(obs, self.observation_space.low, self.observation_space.high).astype(np.float32)

    def _info(self, *, fell: bool, violation: bool, unstable: bool) -> dict:
        return {"success": bool(not fell and self._success()), "fell": bool(fell), "sim_unstable": bool(unstable),
                "time": float(self.time), "goal_distance": float(self._dist), "stances": int(self.stances),
                "contacts": self.contacts(),
                "grasping": {h: self._grasps[h] is not None for h in hum.HANDS},
                "contact_violation": bool(violation), "family": self.task.family, "sink": self.sinks(),
                "effort": 0.0, **{"reward_" + k: 0.0 for k in REWARD_TERMS[self.reward_mode]}}

    # ------------------------------------------------------------------ render
    def render(self):
        if self.render_mode != "rgb_array" or self.robot is None:
            return None
        h, w = self.render_size
        pos = self.robot.get_state()[0]
        target = [float(pos[0]) + 0.3, 0.0, float(pos[2]) - 0.2]
        view = p.computeViewMatrixFromYawPitchRoll(target, 3.2, 0.0, -12.0, 0.0, 2, physicsClientId=self.client)
        proj = p.computeProjectionMatrixFOV(50.0, w / h, 0.05, 20.0, physicsClientId=self.client)
        img = p.getCameraImage(w, h, view, proj, renderer=p.ER_TINY_RENDERER, physicsClientId=self.client)
        return np.asarray(img[2], dtype=np.uint8).reshape(h, w, 4)[:, :, :3].copy()

    def close(self):
        if getattr(self, "client", None) is not None:
            try:
                p.disconnect(physicsClientId=self.client)
            except p.error:
                pass
            self.client = None
