"""``cmaes``: Pan & Manocha 2017's CMA-ES pour search as an expert agent for ``taigym/Pour-v0``.

At the first ``act`` of an episode it searches S's trajectory for ``env.unwrapped.task`` with
:func:`taigym.planners.cmaes.search` (6 spline control points in the monotone coordinates
(alpha, beta, gamma), Pan & Manocha 2017's reward R_p), every candidate rolled out in a private
``fidelity="simplified"`` Pour-v0 (Pan & Manocha 2016's reduced model, thousands of steps/s), then tracks
the best trajectory: each action is the displacement from S's current pose (``info``) to the
plan's next pose, in action units, clipped to [-1, 1].

:func:`rollout` is the evaluation used by the search and by the dataset generator
(``taigym.data.cmaes_dataset``): it runs a trajectory in an env, returns R / N from the env's
metrics (``reward_target`` summed over the episode: sum of R_p over the liquid entering T,
divided by the amount of liquid; every fraction not in T at the end counts -100, see
:func:`not_in_target`) and can record each visited state's observation with the labels of
Pan & Manocha 2017's network (``LABELS``).

Options: any field of :class:`taigym.planners.cmaes.CMAESConfig` (``popsize``,
``max_iterations``, ``lean``, ``spline_time``, ``seed``, ...).
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from taigym.planners.cmaes import SPILL_REWARD, CMAESConfig, CMAESResult, Reference, search
from taigym.sim.constants import CONTROL_DT

from .base import Agent, planning

EMPTY_ALLOWANCE = 0.025     #: fraction left in S and in flight that still counts as poured out
#: per-state labels recorded by :func:`rollout` (S frame: rotated into S's axes, from its origin)
LABELS = ("p_x", "p_y", "v_x", "v_y", "rho", "alpha", "beta", "gamma")


def env_constants(env) -> tuple[float, float, np.ndarray]:
    """(control step s, wall thickness m, action scale) of a Pour-v0 env."""
    u = env.unwrapped
    dt = float(getattr(u, "dt", CONTROL_DT))
    wall = float(getattr(getattr(u, "cfg", None), "wall_thickness", 0.01))
    scale = np.asarray(getattr(u, "action_scale", (0.025, 0.025, 0.1)), np.float64)
    return dt, wall, scale


def track(pose_next, current, scale) -> np.ndarray:
    """The action moving S from ``current`` towards ``pose_next`` (clipped to [-1, 1])."""
    return np.clip((np.asarray(pose_next) - np.asarray(current)) / scale, -1.0, 1.0)


def rigid_velocity(info: dict, wx: float, wy: float) -> tuple[float, float]:
    """Velocity (m/s) of S's rigid motion (``info["source_velocity"]``) at the world point
    (wx, wy)."""
    x, y, _ = (float(v) for v in info["source_pose"])
    vx, vy, om = (float(v) for v in info["source_velocity"])
    return vx - om * (wy - y), vy + om * (wx - x)


def outflow_labels(env, info: dict, prev_in_source: float, dt: float) -> np.ndarray:
    """(p_x, p_y, v_x, v_y, rho) of the outflow of the last step: the parabola's start p and the
    jet's own velocity v (S's rigid motion removed) in S's frame (m, m/s), and the flux rho
    (fraction of the liquid leaving S per second). Zeros when nothing flows."""
    rho = max(prev_in_source - float(info["in_source"]), 0.0) / dt
    est = env.unwrapped.outflow()
    if est is None or rho <= 0.0:
        return np.zeros(5)
    (wx, wy), (jx, jy) = est
    x, y, th = (float(v) for v in info["source_pose"])
    rx, ry = rigid_velocity(info, wx, wy)
    jx, jy = jx - rx, jy - ry                                           # the jet's own velocity
    c, s = math.cos(th), math.sin(th)
    dx, dy = wx - x, wy - y
    return np.array([c * dx + s * dy, -s * dx + c * dy, c * jx + s * jy, -s * jx + c * jy, rho])


def not_in_target(info: dict) -> float:
    """The fraction that counts -100 at an episode's end: spilled, plus what is still in S or
    in flight beyond what the env itself treats as poured out (it ends an episode with up to
    2 % left in S and 0.5 % in flight)."""
    rest = float(info["in_source"]) + float(info["in_flight"])
    return float(info["spilled"]) + max(rest - EMPTY_ALLOWANCE, 0.0)


def dribble_reward(env, task, info: dict, fraction: float, half_width: float, t_oc,
                   free_jet: bool = False) -> float:
    """R_p of the slowest liquid of the last step's outflow, times the fraction that left: it
    leaves the lip with S's rigid velocity only (the jet's own speed spreads it from there to
    the full jet, Pan & Manocha 2016's fan), and lands where that parabola comes down through T's rim.
    With ``free_jet``, of the fan's fast end instead: the full jet without drag (a surge of a
    fast tilt is thick and keeps its speed; the drag was identified on thin jets)."""
    from taigym.models.simplified import landing

    est = env.unwrapped.outflow()
    if est is None or fraction <= 0.0:
        return 0.0
    (wx, wy), jet = est
    t = float(info["time"])
    rim = float(info["target_pose"][1]) + float(t_oc[1])
    hit = landing((wx, wy), tuple(jet) if free_jet else rigid_velocity(info, wx, wy), rim)
    if hit is None:
        return SPILL_REWARD * fraction
    dist = abs(hit[0] - (task.target_pose_at(t + hit[1])[0] + float(t_oc[0])))
    return fraction * ((half_width - dist) / half_width if dist < half_width else SPILL_REWARD)


def rollout(env, task, poses: np.ndarray, *, record: bool = False, prior_steps: int = 25,
            lean: float = 2.3, seed: int = 0, dribble_weight: float = 0.0, free_jet_weight: float = 0.0):
    """Run the trajectory ``poses`` (nodes + 1, 3) on ``task`` in ``env`` (tracking, closed
    loop); returns (R / N, details) and, with ``record``, (observations (T, D), labels
    (T, len(LABELS))) of every visited state before the episode's end.

    With ``dribble_weight`` > 0 the reward adds that weight times the R_p of the outflow's
    slowest part (:func:`dribble_reward`): the whole fan, not only its mean jet, must land in T,
    which keeps pours planned with the simplified model inside T in the particle simulator;
    ``free_jet_weight`` likewise adds the R_p of its fast end, the jet without drag.

    The mean-trajectory prior's labels (alpha, beta, gamma) at step k are the ratios of S's
    gaps to the references (:class:`~taigym.planners.cmaes.Reference`) ``prior_steps`` steps
    later (held at the episode's end) to those at k: Pan & Manocha 2017's network predicts them through a
    sigmoid."""
    u = env.unwrapped
    dt, wall, scale = env_constants(env)
    obs, info = u.reset(seed=seed, options={"task": task})
    obs_list, out_list, pose_list = [obs], [np.zeros(5)], [info["source_pose"].copy()]
    earned, dribble, k = 0.0, 0.0, 0
    done = False
    if dribble_weight > 0.0 or free_jet_weight > 0.0:
        tshape = task.target_shape(wall)
        half, t_oc = 0.5 * tshape.width, tshape.opening_centre
    while not done:
        k += 1
        prev = float(info["in_source"])
        a = track(poses[min(k, len(poses) - 1)], info["source_pose"], scale)
        obs, _, terminated, truncated, info = u.step(a)
        earned += float(info["reward_target"])
        done = terminated or truncated
        left = max(prev - float(info["in_source"]), 0.0)
        if dribble_weight > 0.0:
            dribble += dribble_weight * dribble_reward(env, task, info, left, half, t_oc)
        if free_jet_weight > 0.0:
            dribble += free_jet_weight * dribble_reward(env, task, info, left, half, t_oc, free_jet=True)
        if record:
            out_list.append(outflow_labels(env, info, prev, dt))
            pose_list.append(info["source_pose"].copy())
            if not done:
                obs_list.append(obs)
    reward = earned + SPILL_REWARD * not_in_target(info) + dribble
    details = {k_: float(info[k_]) for k_ in ("in_target", "spilled", "in_source", "in_flight")}
    details["steps"] = k
    if not record:
        return reward, details
    ref = Reference(task, wall, lean)
    n = len(obs_list)
    # labels of state j: the outflow of the step j -> j + 1 (what the state leads to)
    outs = np.array(out_list[1:n + 1])
    times = dt * np.arange(len(pose_list))
    gaps = np.array([ref.gaps(p, t) for p, t in zip(pose_list, times)])
    later = gaps[np.minimum(np.arange(n) + prior_steps, len(gaps) - 1)]
    ratios = np.clip(later / np.maximum(gaps[:n], 1e-9), 1e-3, 1.0)
    return reward, details, (np.array(obs_list, np.float32), np.hstack([outs, ratios]).astype(np.float32))


def simplified_twin(env):
    """A ``fidelity="simplified"`` Pour-v0 with ``env``'s resolution (wall thickness) and
    observation mode, for planning."""
    import gymnasium as gym

    cfg = getattr(env.unwrapped, "cfg", None)
    return gym.make("taigym/Pour-v0", fidelity="simplified",
                    obs_mode=getattr(cfg, "obs_mode", "features") if getattr(cfg, "obs_mode", "features")
                    in ("features", "lip") else "features",
                    resolution=int(getattr(cfg, "resolution", 128)),
                    horizon=float(getattr(cfg, "horizon", 5.0)))


def plan_task(task, planning_env, cfg: CMAESConfig) -> CMAESResult:
    """CMA-ES for ``task``, every candidate rolled out in ``planning_env`` (simplified)."""
    _, wall, _ = env_constants(planning_env)
    ref = Reference(task, wall, cfg.lean)
    return search(ref, lambda poses: rollout(planning_env, task, poses, lean=cfg.lean,
                                             dribble_weight=cfg.dribble_weight,
                                             free_jet_weight=cfg.free_jet_weight), cfg)


class CMAESAgent(Agent):
    name = "cmaes"
    families = ("pour",)

    def __init__(self, env, **cfg):
        fields = {f.name for f in dataclasses.fields(CMAESConfig)}
        unknown = set(cfg) - fields
        if unknown:
            raise ValueError(f"unknown cmaes-agent option(s): {', '.join(sorted(unknown))}; accepted: "
                             f"{', '.join(sorted(fields))}")
        super().__init__(env, **cfg)
        self._planning_env = None
        self.result: CMAESResult | None = None
        self._task = None
        self._step = 0

    def reset(self, *, seed: int | None = None) -> None:
        super().reset(seed=seed)
        self.result, self._task, self._step = None, None, 0

    def _config(self) -> CMAESConfig:
        u = self.env.unwrapped
        dt, _, _ = env_constants(self.env)
        horizon = float(getattr(getattr(u, "cfg", None), "horizon", 5.0))
        return CMAESConfig(**{"dt": dt, "horizon": horizon,
                              "spline_time": min(3.5, horizon), **self.cfg})

    @planning
    def make_plan(self, task) -> CMAESResult:
        """The CMA-ES search for ``task`` in the simplified twin of the env."""
        if self._planning_env is None:
            self._planning_env = simplified_twin(self.env)
        self.result = plan_task(task, self._planning_env, self._config())
        self._task, self._step = task, 0
        return self.result

    def act(self, obs, info: dict) -> np.ndarray:
        task = self.env.unwrapped.task
        if self.result is None or task is not self._task:
            self.make_plan(task)
        _, _, scale = env_constants(self.env)
        poses = self.result.poses
        self._step += 1
        return track(poses[min(self._step, len(poses) - 1)], info["source_pose"], scale).astype(np.float32)
