"""The SFRRT* expert (the SFRRT* paper, 2024) for ``taigym/Transport-v0``: plans on reset, then tracks the plan.

``taigym.agents.make("sfrrt", env, fixed_jerk=None, classifier="learned", **planner_cfg)``. On
``reset`` it reads ``env.unwrapped.task`` and plans (RRT* with the tilt-informed sampler,
shortcutting, SFTP: Ruckig timing whose jerk is lowered until the spill-free classifier accepts).
``act`` commands the planned velocity at the end of the next control step, plus a small
correction of the position error. ``replan(obs)`` plans again from the current pose (at rest).
With ``fixed_jerk=(jx, jz, jtilt)`` it is the baseline: the same path, one fixed jerk. With
``path_planner="ompl"`` the path comes from OMPL's InformedRRT* (the optional extra ``ompl``)
instead of SFRRT*'s RRT*, timed the same way.

``classifier``: ``"learned"`` (the SFRRT* paper's transformer SFC, trained on simulator-labelled
trajectories by ``scripts/train_sfc.py``; the shipped checkpoint ``taigym/models/data/sfc.pt``
or ``classifier_path``), ``"quasi_static"`` (the physics placeholder of
:class:`~taigym.planners.sfrrt.QuasiStaticClassifier`), or any callable ``(traj, props) -> bool``.
"""

from __future__ import annotations

import numpy as np

from ..envs.transport import MAX_VELOCITY  # the env's action scale (m/s, m/s, rad/s)
from ..envs.transport_tasks import ROOM
from ..planners.sfrrt import Plan, Problem, QuasiStaticClassifier, SFRRTConfig, plan_path, sfrrt
from ..sim.constants import CONTROL_DT
from .base import Agent, check_ranges, planning

TRACK_GAIN = 0.3          # fraction of the predicted position error corrected per step
TRACKING = ("time", "path")
# track="path": samples of the plan (0.05 s each) searched ahead of the last match for the
# nearest; 10 = 0.5 s of the plan per control step, more than a carry can get ahead in one step
PATH_WINDOW = 10


def tracking_action(plan_pos, plan_vel, pose, vel, gain: float) -> np.ndarray:
    """The tracking law of :meth:`SFRRTAgent.act` (rows or single states): the action (in [-1, 1])
    for the plan's pose and velocity one step later (``plan_pos``, ``plan_vel``) from the state
    (``pose``, ``vel``): the plan's velocity plus ``gain`` of the predicted position error, per step."""
    predicted = pose + 0.5 * (vel + plan_vel) * CONTROL_DT
    v = plan_vel + gain * (plan_pos - predicted) / CONTROL_DT
    return np.clip(v / MAX_VELOCITY, -1.0, 1.0)


def check_planner_options(cfg: dict) -> dict:
    """``cfg``, or ValueError naming the options that are not fields of :class:`SFRRTConfig`."""
    unknown = set(cfg) - set(SFRRTConfig.__dataclass_fields__)
    if unknown:
        raise ValueError(f"unknown sfrrt-agent option(s): {', '.join(sorted(unknown))}; accepted: fixed_jerk, "
                         f"classifier, classifier_path, path_planner and the fields of SFRRTConfig "
                         f"({', '.join(SFRRTConfig.__dataclass_fields__)})")
    return cfg


def path_planners(name: str) -> tuple:
    """(planar, 3D) path planners by name: "sfrrt" (RRT* with the informed sampler) or "ompl"
    (OMPL's InformedRRT*)."""
    if name == "sfrrt":
        from ..planners.sfrrt3d import plan_path3d

        return plan_path, plan_path3d
    if name == "ompl":
        from ..planners.ompl_paths import plan_path3d_ompl, plan_path_ompl

        return plan_path_ompl, plan_path3d_ompl
    raise ValueError(f"path_planner must be 'sfrrt' or 'ompl', got {name!r}")


def spill_free_classifier(classifier, path: str | None, kind: str):
    """SFTP's classifier: ``"learned"`` (the transformer SFC of ``kind``, from ``path`` or the
    shipped checkpoint), ``"quasi_static"`` (planar) or ``"slosh"`` (3D), the physics
    classifiers, or a callable ``(traj, props) -> bool`` as it is."""
    if classifier == "learned":
        from ..models.sfc import DEFAULT_PATH, DEFAULT_PATH_3D, SpillFreeClassifier

        clf = SpillFreeClassifier.load(path or (DEFAULT_PATH if kind == "planar" else DEFAULT_PATH_3D))
        if clf.kind != kind:
            raise ValueError(f"classifier_path holds a {clf.kind!r} classifier, this agent needs {kind!r}")
        return clf
    if classifier == "quasi_static" and kind == "planar":
        return QuasiStaticClassifier()
    if classifier == "slosh" and kind == "3d":
        from ..planners.sfrrt3d import SloshClassifier3D

        return SloshClassifier3D()
    if not callable(classifier):
        physics = "quasi_static" if kind == "planar" else "slosh"
        raise ValueError(f"classifier must be 'learned', {physics!r} or a callable (traj, props) -> bool, "
                         f"got {classifier!r}")
    return classifier


class SFRRTAgent(Agent):
    """``taigym.agents.make("sfrrt", env)`` on Transport-v0 (on Transport3D-v0:
    :class:`taigym.agents.sfrrt3d.SFRRT3DAgent`)."""

    name = "sfrrt"
    families = ("transport",)

    def __init__(self, env, fixed_jerk=None, classifier="learned", classifier_path=None,
                 path_planner: str = "sfrrt", track: str = "time", track_gain: float = TRACK_GAIN, **cfg):
        if track not in TRACKING:
            raise ValueError(f"track must be one of {TRACKING}, got {track!r}")
        check_ranges({"track_gain": track_gain}, {"track_gain": (0.0, 1.0, "(fraction of the error per step)")})
        super().__init__(env, fixed_jerk=fixed_jerk, classifier=classifier, path_planner=path_planner, track=track,
                         track_gain=track_gain, **cfg)
        self.track, self.track_gain = track, float(track_gain)
        self.path_planner = path_planners(path_planner)[0]
        self.fixed_jerk = None if fixed_jerk is None else np.asarray(fixed_jerk, dtype=np.float64)
        self.classifier = spill_free_classifier(classifier, classifier_path, "planar")
        self.planner_cfg = SFRRTConfig(**check_planner_options(cfg))
        self.plan: Plan | None = None

    def _problem(self, start) -> Problem:
        task = self.env.unwrapped.task
        # the planning clearance, unless the start or the goal sits closer than that to something
        # (a goal just above a shelf board): then as much as they allow
        c = self.planner_cfg.clearance
        for clearance in (c, c / 2, c / 5, 0.0):
            if not task.collides([start, task.goal], clearance).any():
                break
        return Problem(start=tuple(float(v) for v in start), goal=task.goal, obstacles=task.obstacles,
                       hull=task.hull(clearance),
                       props=(task.bottom_radius, task.top_radius, task.height, task.fill_height),
                       room=ROOM)

    def reset(self, *, seed: int | None = None) -> None:
        super().reset(seed=seed)
        self.replan(self.env.unwrapped.task.start)

    @planning
    def replan(self, start) -> Plan:
        """Plan from ``start`` (x, z, tilt) at rest to the task's goal (a second RRT* draw if
        the first finds no path in its budget; RuntimeError if neither does)."""
        problem = self._problem(start)
        for attempt in range(2):    # RRT* is random: a narrow gap may take a second draw
            try:
                self.plan = sfrrt(problem, self.classifier, self.planner_cfg, self.rng,
                                  fixed_jerk=self.fixed_jerk, planner=self.path_planner)
                break
            except RuntimeError:
                if attempt:
                    raise
        self.k = 0
        return self.plan

    def act(self, obs, info) -> np.ndarray:
        """The plan's velocity at the end of the next step plus ``track_gain`` of the predicted
        error to the plan's pose then: the plan's sample one step after the current one, by
        time (``track="time"``) or after the sample nearest the container (``track="path"``,
        searched up to :data:`PATH_WINDOW` samples ahead of the last: from a state off the
        plan, e.g. a learner's behind it, the label continues along the path from there instead
        of hurrying to where the plan is by now)."""
        tr = self.plan.trajectory
        pose, vel = np.asarray(obs[0:3], np.float64), np.asarray(obs[3:6], np.float64)
        if self.track == "path":
            self.k = self._nearest(pose)     # the sample matched (it stays put if the carry does)
        k = min(self.k + 1, len(tr.t) - 1)
        v_ref = tr.vel[k] if self.k + 1 < len(tr.t) else np.zeros(3)
        if self.track == "time":
            self.k += 1
        return tracking_action(tr.pos[k], v_ref, pose, vel, self.track_gain).astype(np.float32)

    def _nearest(self, pose: np.ndarray) -> int:
        """Index of the plan's sample nearest ``pose`` (m, tilt weighted by the planner's
        ``tilt_weight``) among the last match and the :data:`PATH_WINDOW` samples after it."""
        pos = self.plan.trajectory.pos
        lo = min(self.k, len(pos) - 1)
        d = pos[lo:lo + PATH_WINDOW + 1] - pose
        d[:, 2] *= self.planner_cfg.tilt_weight
        return lo + int(np.argmin(np.einsum("ij,ij->i", d, d)))
