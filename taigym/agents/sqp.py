"""``sqp``: Pan & Manocha 2016's pouring planner as an expert agent for ``taigym/Pour-v0``.

At the first ``act`` of an episode it plans S's whole trajectory from ``env.unwrapped.task``
(:func:`taigym.planners.sqp.plan_pour`, the simplified liquid model), then tracks it: each
step's action is the displacement to the plan's next pose, scaled by the env's action scale and
clipped to [-1, 1]. ``replan(info)`` plans again from the state in ``info`` (S's pose and
velocity, the time, the fraction still in S) for the remaining horizon: DAgger queries the
expert at the states the learner visits this way; ``replan_every=k`` does it every k steps.
A replan is MPC-consistent: warm-started from the rest of the current plan, continuing S's
velocity, with the liquid's outflow speed, pouring over the same lip (``PourProblem.side``),
and holding S still past the plan's end, so that from
a state on the plan it keeps about the plan's action (DAgger's labels agree with the demos).

``track_gain`` sets how a step returns to the plan from a state off it (a DAgger learner's): the
plan's own step plus ``track_gain`` times the offset from the plan's pose at this time (1, the
default: straight to the plan's next pose, clipped). From a learner's state 2 s into the pour
(train tasks 700-739, simplified env) sqp took over with success 0.53 at gain 1, 0.65 at 0.5,
0.75 at 0.25, 0.82 at 0.1 (``scripts/expert_takeover.py``): pulling hard back to where the
plan is at that time sloshes and leans early. On its own plan every gain acts the same.

Options: ``replan_every`` (0 = never), ``min_nodes`` (shortest replanning horizon, nodes),
``drain_time`` (s, default 1: the plan ends this long before the episode, and S then holds its
final lean so that the last liquid drains), ``warm_start`` (default True: a replan starts from
the rest of the current plan), ``track_gain`` (default 1, in [0, 1]) and
any field of :class:`taigym.planners.sqp.SQPConfig` (``final_lean``, ``time_limit``, ...).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from taigym.planners.sqp import PourPlan, PourProblem, SQPConfig, plan_pour
from taigym.sim.constants import CONTROL_DT

from .base import Agent, planning

AGENT_OPTIONS = {"replan_every": 0, "min_nodes": 10, "drain_time": 1.0, "warm_start": True, "track_gain": 1.0}


def split_options(cfg: dict, agent_options: dict) -> dict:
    """The fields of :class:`SQPConfig` in ``cfg``; ValueError naming any option that is neither
    one nor in ``agent_options``."""
    planner_fields = {f.name for f in dataclasses.fields(SQPConfig)}
    unknown = set(cfg) - planner_fields - set(agent_options)
    if unknown:
        raise ValueError(f"unknown sqp-agent option(s): {', '.join(sorted(unknown))}; accepted: "
                         f"{', '.join(sorted(planner_fields | set(agent_options)))}")
    return {k: v for k, v in cfg.items() if k in planner_fields}


class SQPAgent(Agent):
    """``taigym.agents.make("sqp", env)`` on Pour-v0 (on Pour3D-v0:
    :class:`taigym.agents.sqp3d.SQP3DAgent`)."""

    name = "sqp"
    families = ("pour",)
    replans_from_info = True          # replan(info): DAgger's relabelling (taigym.data.collect)

    def __init__(self, env, **cfg):
        self.planner_cfg = split_options(cfg, AGENT_OPTIONS)
        super().__init__(env, **{**AGENT_OPTIONS, **cfg})
        if not 0.0 <= float(self.cfg["track_gain"]) <= 1.0:
            raise ValueError(f"track_gain must be in [0, 1], got {self.cfg['track_gain']!r}")
        self.plan: PourPlan | None = None
        self._task = None
        self._step = 0

    def reset(self, *, seed: int | None = None) -> None:
        super().reset(seed=seed)
        self.plan, self._task, self._step = None, None, 0

    def _env_constants(self):
        u = self.env.unwrapped
        dt = float(getattr(u, "dt", CONTROL_DT))
        horizon = float(getattr(getattr(u, "cfg", None), "horizon", 5.0))
        wall = float(getattr(getattr(u, "cfg", None), "wall_thickness", 0.01))
        scale = np.asarray(getattr(u, "action_scale", (0.025, 0.025, 0.1)), np.float64)
        return dt, horizon, wall, scale

    @planning
    def replan(self, info: dict) -> PourPlan:
        """Plan from the env state in ``info`` (as every Pour-v0 step reports it)."""
        task = self.env.unwrapped.task
        if task is None:
            raise RuntimeError("reset the env before planning")
        dt, horizon, wall, scale = self._env_constants()
        t = float(info.get("time", 0.0))
        pose = np.asarray(info.get("source_pose", task.source_pose), np.float64)
        if horizon - t - self.cfg["drain_time"] < 0.5 * dt and self.plan is not None:
            # past the plan's end the expert holds S still while the last liquid drains: a replan
            # there does the same (a new plan's guide term would tilt S further)
            self.plan = PourPlan(np.array([pose, pose]), np.array([t, t + dt]), {}, 0, 0.0, "hold", 0.0,
                                 side=self.plan.side)
            self._task, self._step = task, 0
            return self.plan
        # the plan ends ``drain_time`` before the episode does; S then holds its last pose
        # a replan pours over the same lip as the plan it replaces (PourProblem.side)
        side = self.plan.side if self.plan is not None and task is self._task else 0.0
        nodes = max(int(round((horizon - t - self.cfg["drain_time"]) / dt)), int(self.cfg["min_nodes"]))
        cfg = SQPConfig(**{"nodes": nodes, "dt": dt, "max_step": tuple(scale), **self.planner_cfg})
        prob = PourProblem.from_task(
            task, wall_thickness=wall, pose=info.get("source_pose"),
            velocity=info.get("source_velocity"), time=t,
            in_source=min(max(float(info.get("in_source", 1.0)), 0.0), 1.0), side=side,
            **self._liquid_state())
        plan = plan_pour(prob, cfg, init=self._warm_start(task, t, nodes, prob.start_pose))
        self.plan, self._task, self._step = plan, task, 0
        return plan

    def _liquid_state(self) -> dict:
        """S's outflow speed u (m/s) and slosh state now: besides the volume, the state of the
        planner's liquid model. Read from the env's simplified liquid when it has one; else u = 0
        and a flat surface (liquid at rest in S). Without it a replan in mid-pour assumes the
        outflow restarts from rest and tilts S further than the plan it replaces (inconsistent
        DAgger labels)."""
        members = getattr(getattr(self.env.unwrapped, "_batch", None), "members", None)
        liq = getattr(members[0], "liq", None) if members else None
        if liq is None:
            return {"speed": 0.0}
        return {"speed": float(liq.liquid.speed), "surface": liq.liquid.surface}

    def _warm_start(self, task, t: float, nodes: int, pose) -> np.ndarray | None:
        """The rest of the current plan from time t (held at its end), starting at ``pose``: a
        replan from a nearby state then converges in a few iterations."""
        plan = self.plan
        if plan is None or task is not self._task or not self.cfg["warm_start"]:
            return None
        k = int(round((t - plan.times[0]) / (plan.times[1] - plan.times[0])))
        if not 0 <= k < len(plan.poses):
            return None
        init = plan.poses[k:k + nodes + 1]
        init = np.vstack([init, np.repeat(init[-1:], nodes + 1 - len(init), axis=0)])
        init[0] = pose
        return init

    def act(self, obs, info: dict) -> np.ndarray:
        task = self.env.unwrapped.task
        every = int(self.cfg["replan_every"])
        if self.plan is None or task is not self._task or (every and self._step >= every):
            self.replan(info)
        _, _, _, scale = self._env_constants()
        poses = self.plan.poses
        k = min(self._step + 1, len(poses) - 1)
        self._step += 1
        current = np.asarray(info.get("source_pose", poses[k - 1]), np.float64)
        # the plan's step plus gain x the way back to the plan (gain 1: straight to the next pose)
        move = poses[k] - poses[k - 1] + float(self.cfg["track_gain"]) * (poses[k - 1] - current)
        return np.clip(move / scale, -1.0, 1.0).astype(np.float32)
