"""Corrective labels on Transport-v0 from recorded expert carries, without planning: perturbed
replays of the demonstrations (``bc``, DAgger's round 0: ``perturb``) and a tracker that labels a
learner's states along the recorded carry of their task (DAgger's rounds: ``relabel="recorded"``).

Why: ``sfrrt``'s carries pass the boxes at its planning clearance (a wall's window leaves 1.5-3.5
cm a side), and a cloned policy drifts 1-2 cm off them in closed loop, where the demonstrations
never were: it collides or stops short. ``sfrrt`` replans only from rest, so DAgger's labels at a
moving learner's state were "stop" or "jump back to the plan" (of a new RRT* draw, another route
than the demonstration's). Here every label is ``sfrrt``'s own tracking law
(:func:`taigym.agents.sfrrt.tracking_action`, what :meth:`~taigym.agents.sfrrt.SFRRTAgent.act` does) with the recorded carry as the plan: the recorded
velocity one sample later plus ``gain`` times the predicted position error then. On the recorded
states it gives the recorded actions.

**Perturbed replays** (:func:`perturbed_demos`): a state ``(p + d, v + d')`` near the recorded
state ``(p, v)`` at step ``k`` is labelled against the recorded step ``k + 1`` (DART, Laskey et al.
CoRL 2017, teaches the same recovery by injecting noise while recording; here the noise is added
afterwards, so any existing dataset serves). The offset ``d(t)`` starts at zero (the learner starts
exactly at the task's start), ramps in over about ``RAMP`` s and then wanders slowly: ``(1 -
exp(-(t / RAMP)^2)) (a + b sin(w t + phi))`` per axis, ``a`` and ``b`` normal with standard deviation
``pose_std`` (x and z, m) and ``tilt_std`` (rad), ``w`` uniform in :data:`WANDER` rad/s; its
velocity ``d'`` is the analytic derivative (zero at the start, where the learner is at rest). Each
replay continues :data:`HOLD_STEPS` steps at rest at the goal after the recorded end, so that the
labels near the goal lead there and stop (a failure of the clones: stopping short of it).

**Tracking the recorded carry** (:class:`RecordedCarry`, an expert for
:func:`taigym.data.collect.rollout`): from the learner's state, the law against the recorded
sample after the one nearest the container, searched ahead of the last match as ``sfrrt``'s
``track="path"`` does, so that a learner behind the carry is led along it from where it is.
"""

from __future__ import annotations

import dataclasses
import json

import numpy as np

from taigym.agents.base import check_ranges
from taigym.agents.sfrrt import PATH_WINDOW, tracking_action
from taigym.agents.transport_features import GOAL, POSE, SLOT_SIZE, SLOTS, TO_GOAL, VEL, n_slots
from taigym.envs.transport import observation_bounds
from taigym.planners.sfrrt import SFRRTConfig
from taigym.sim.constants import CONTROL_DT

RAMP = 0.5                      # s, the offset's ramp-in from the start (63 % of it by then)
WANDER = (1.0, 4.0)             # rad/s, angular frequencies of the offset's slow wander
HOLD_STEPS = 10                 # steps at rest at the goal appended to each recorded carry
TILT_WEIGHT = SFRRTConfig.tilt_weight   # m per rad: sfrrt's metric for the nearest recorded sample
#: accepted ranges: (low, high, unit) as in taigym.agents.base.check_ranges
RANGES = dict(copies=(0, 100, "perturbed replays per demonstration"), pose_std=(0.0, 0.1, "m"),
              tilt_std=(0.0, 1.0, "rad"), gain=(0.0, 1.0, "(fraction of the error per step)"))


def offsets(n: int, std: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """(offset, its velocity), each (n, 3), at the steps 0..n-1 (module docstring)."""
    t = np.arange(n)[:, None] * CONTROL_DT
    a, b = rng.normal(0.0, std, (2, 3))
    w = rng.uniform(*WANDER, 3)
    phi = rng.uniform(0.0, 2 * np.pi, 3)
    g = np.exp(-(t / RAMP) ** 2)
    ramp, dramp = 1.0 - g, 2.0 * t / RAMP ** 2 * g
    wave, dwave = a + b * np.sin(w * t + phi), b * w * np.cos(w * t + phi)
    return ramp * wave, dramp * wave + ramp * dwave


def perturbed_obs(obs: np.ndarray, d: np.ndarray, dv: np.ndarray) -> np.ndarray:
    """Transport-v0 observations (n, obs_dim) with the pose moved by ``d`` and the velocity by
    ``dv`` (n, 3): the goal offset follows, the obstacle slots re-sorted by distance to the new
    pose, as the env lists them; clipped to the observation's bounds."""
    out = np.array(obs, np.float64)
    out[:, POSE:POSE + 3] += d
    out[:, VEL:VEL + 3] += dv
    out[:, TO_GOAL:TO_GOAL + 3] = out[:, GOAL:GOAL + 3] - out[:, POSE:POSE + 3]
    k = n_slots(obs.shape[1])
    slots = out[:, SLOTS:SLOTS + SLOT_SIZE * k].reshape(len(out), k, SLOT_SIZE)
    dist = np.hypot(slots[..., 1] - out[:, None, POSE], slots[..., 2] - out[:, None, POSE + 1])
    dist = np.where(slots[..., 0] > 0.5, dist, np.inf)           # empty slots stay last
    order = np.argsort(dist, axis=1, kind="stable")
    out[:, SLOTS:SLOTS + SLOT_SIZE * k] = np.take_along_axis(slots, order[..., None], axis=1).reshape(len(out), -1)
    lo, hi = observation_bounds()
    return np.clip(out, lo, hi).astype(np.float32)


def perturbed_episode(ep, pose_std: float, tilt_std: float, gain: float, rng: np.random.Generator):
    """One perturbed replay of the Transport-v0 episode ``ep`` (a :class:`taigym.data.Episode`),
    labelled by the tracking law (module docstring); a new Episode (``labels`` = ``actions``)."""
    plan = _recorded_plan(ep)                         # T + 1 + HOLD_STEPS recorded states
    d, dv = offsets(len(plan) - 1, np.array([pose_std, pose_std, tilt_std]), rng)
    states = plan[:-1]
    new_obs = perturbed_obs(states, d, dv)
    labels = tracking_action(plan[1:, POSE:POSE + 3], plan[1:, VEL:VEL + 3],
                             new_obs[:, POSE:POSE + 3].astype(np.float64), new_obs[:, VEL:VEL + 3].astype(np.float64),
                             gain).astype(np.float32)
    last = perturbed_obs(plan[-1:], d[-1:], dv[-1:])  # the state after the last label (not labelled)
    n = len(labels)
    return dataclasses.replace(ep, obs=np.concatenate([new_obs, last]), labels=labels, actions=labels,
                               rewards=np.zeros(n), terminations=np.zeros(n, bool), truncations=np.zeros(n, bool),
                               infos={}, expert_labels=0, expert_seconds=0.0, expert_plans=0, extra={})


def perturbed_demos(episodes, copies: int, pose_std: float, tilt_std: float, gain: float, seed: int) -> list:
    """``copies`` perturbed replays of each episode, in order (episode 0's copies first); each
    episode's draws from its own stream of ``seed``, so the replays of an episode do not depend on
    how many episodes come before it."""
    out = []
    for i, ep in enumerate(episodes):
        rng = np.random.default_rng([int(seed), i])
        for _ in range(int(copies)):
            rep = perturbed_episode(ep, pose_std, tilt_std, gain, rng)
            rep.extra["replay_of"] = i
            out.append(rep)
    return out


def check_options(options, family: str) -> dict | None:
    """The ``perturb`` option of bc / dagger checked: None or ``{copies, pose_std, tilt_std,
    gain}`` (:data:`RANGES`), on Transport-v0 only; ValueError naming what is wrong."""
    if not options:
        return None
    options = dict(options)
    unknown = set(options) - set(RANGES)
    if unknown:
        raise ValueError(f"unknown perturb option(s): {', '.join(sorted(unknown))}; accepted: {', '.join(RANGES)}")
    missing = set(RANGES) - set(options)
    if missing:
        raise ValueError(f"perturb needs {', '.join(sorted(missing))} too ({', '.join(RANGES)})")
    check_ranges(options, RANGES)
    if options["copies"] and family != "transport":
        raise ValueError(f"perturb replays Transport-v0's carries (the observation's layout), not {family!r}: "
                         "set perturb to null")
    return options if options["copies"] else None


def with_replays(episodes, options: dict | None, seed: int) -> list:
    """``episodes`` followed by their perturbed replays (``options`` from :func:`check_options`;
    None: ``episodes`` as they are)."""
    if not options:
        return list(episodes)
    return list(episodes) + perturbed_demos(episodes, options["copies"], options["pose_std"], options["tilt_std"],
                                            options["gain"], seed)


def split_ids(episodes) -> np.ndarray:
    """Per episode, the episode whose train / validation side it takes: a replay its
    demonstration's (index in ``episodes``, which :func:`with_replays` keeps first), so that no
    carry validates on its own replays; any other episode its own index."""
    return np.array([e.extra.get("replay_of", i) if e.extra else i for i, e in enumerate(episodes)], np.int64)


class RecordedCarry:
    """The expert that labels DAgger's rollouts on Transport-v0 with ``relabel="recorded"``: on
    ``reset`` it takes the recorded carry of ``env.unwrapped.task`` from ``episodes`` (ValueError
    if none was recorded), then ``act`` labels a state by the tracking law (module docstring)."""

    name = "recorded"
    plans = 0

    def __init__(self, env, episodes, gain: float):
        check_ranges({"gain": gain}, {"gain": RANGES["gain"]})
        self.env, self.gain, self.cfg = env, float(gain), {"gain": float(gain)}
        self.carries = {}
        for ep in episodes:
            if ep.task is not None and ep.extra.get("replay_of") is None:
                self.carries.setdefault(_task_key(ep.task), ep)
        if not self.carries:
            raise ValueError("relabel='recorded' needs demonstrations that hold their tasks (recorded with them)")
        self.pos = self.vel = None
        self.k = 0

    def reset(self, *, seed: int | None = None) -> None:
        ep = self.carries.get(_task_key(self.env.unwrapped.task.to_dict()))
        if ep is None:
            raise ValueError("relabel='recorded' rolls out on the demonstrations' tasks only; this task has none")
        plan = _recorded_plan(ep)
        self.pos, self.vel = plan[:, POSE:POSE + 3], plan[:, VEL:VEL + 3]
        self.k = 0

    def act(self, obs, info) -> np.ndarray:
        pose, vel = np.asarray(obs[POSE:POSE + 3], np.float64), np.asarray(obs[VEL:VEL + 3], np.float64)
        d = self.pos[self.k:self.k + PATH_WINDOW + 1] - pose
        d[:, 2] *= TILT_WEIGHT
        self.k += int(np.argmin(np.einsum("ij,ij->i", d, d)))
        k = min(self.k + 1, len(self.pos) - 1)
        return tracking_action(self.pos[k], self.vel[k], pose, vel, self.gain).astype(np.float32)


def _task_key(task: dict) -> str:
    return json.dumps(task, sort_keys=True)


def _recorded_plan(ep) -> np.ndarray:
    """The recorded observations of ``ep`` followed by :data:`HOLD_STEPS` at rest at its end."""
    obs = np.asarray(ep.obs, np.float64)
    hold = np.repeat(obs[-1:], HOLD_STEPS, axis=0)
    hold[:, VEL:VEL + 3] = 0.0
    return np.concatenate([obs, hold])


__all__ = ["HOLD_STEPS", "RANGES", "RecordedCarry", "check_options", "offsets", "perturbed_demos", "perturbed_episode",
           "perturbed_obs", "split_ids", "with_replays"]
