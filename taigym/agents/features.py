"""Input features of the MLP policies (``bc``, ``dagger``) derived from Pour-v0's observation.

A pour succeeds when S leans over where T will be once the liquid gets there, and the expert
(``sqp``) chooses the side it pours towards from where T will be half way through the episode.
T moves at a constant velocity and bounces off the sides of a fixed box, so where T will be is
a triangle wave of its observed position and velocity: exact, but a function an MLP learns
poorly from a few hundred tasks (cloned policies poured on the wrong side of T or beside it).
``"target_path"`` hands it over: for each lookahead time, T's opening centre relative to S's
opening centre if S stayed where it is (m, x and y) and T's x velocity then (m/s, its sign flips
at a bounce). Lookahead times are relative (``RELATIVE_LOOKAHEAD``, s from now) and absolute
(``ABSOLUTE_LOOKAHEAD``, fractions of the episode's horizon, 0 once passed).

On 300 sqp demonstrations, BC on 90 held-out train-split tasks (simplified env): success 0.38
with the observation alone, 0.51 with the relative lookaheads, 0.60 with both.

``start_pose``: S's pose at the episode's first observation (m, m, rad), which the policy keeps
from its first decision (:class:`~taigym.agents.policy.NumpyPolicy` ``reset``). The expert's
plan, and so its label at any later state, depends on where S started; the observation shows
only where S is now. BC on 700 demonstrations, same 90 tasks: 0.67 without, 0.76 with (validation
MSE 0.0095 -> 0.0077).

``start_velocity``: S's velocity at the episode's first observation (m/s, m/s, rad/s: obs 3-5, which
the policy does not see later, as they would reveal its own last action). In TRANSFER+FOLLOW tasks
S starts moving (vx up to ~0.18 m/s) with the liquid; sqp's plan continues that motion, and the
liquid's carried velocity moves where the first outflow lands. Without it the cloned policies
failed 13 of 55 FOLLOW tasks against 4 of 45 ZERO tasks (DAgger, eval split; ``docs/agents/dagger.md``).

``outflow_landing``: for each of S's lips (left, right in S's frame), where liquid leaving it now
at rest would cross T's opening: the lip's height over T's opening gives the fall time
t = sqrt(2 h / g), and the entry is the lip's x minus T's opening centre's x at time t (T moves
on), over T's opening half-width (|entry| < 1: inside T's opening). Most cloned-policy spills
began 1-5 steps after the first outflow (``docs/agents/bc.md``): where the first liquid lands relative to T
is a product of pose, S's shape and T's motion that sqp models and the MLP must otherwise learn.
From the observation only (S's pose, opening width, T's relative opening centre, width, velocity).
With S tilting in place, the lower lip's entry is within 0.2 half-width of where the simplified
env lands the first packet when it lands within 3 half-widths of T's centre (the jet's own speed
is the rest; tests/test_learning.py); while S moves, S's velocity carries the liquid further.

``pour_side``: +1 / -1 as T's opening will be right / left of S's start half way through sqp's plan
(at 0.4 of the horizon, from the episode's first observation; sqp's ``PourProblem.pour_side``), the
side sqp pours towards. Where T passes close to S's start it flips between neighbouring tasks, a
step the MLP could not learn from the lookaheads: BC on 950 sqp demonstrations, 400 val-split tasks,
seeds 0 / 1: success 0.81 / 0.78 without, 0.91 / 0.91 with; on the 93 tasks with T within 8 cm of
S's start at 2 s it poured away from sqp's side in 20 / 26 % and failed 0.43 / 0.51 without (0.12 / 0.13
elsewhere), never and 0.13 / 0.14 with (tasks with T faster than 0.195 m/s: 0.33 / 0.38 -> 0.19 / 0.16).

A feature spec is a dict ``{"kind": "target_path", "bounds": (x_lo, x_hi, y_lo, y_hi),
"horizon": s, "start_pose": bool, "start_velocity": bool, "outflow_landing": bool, "pour_side": bool}`` saved with the policy (the bounds of T's box and the
episode's length are those of the env it was trained in; tasks with another box get wrong
lookaheads), or ``{"kind": "none"}``.

``"plan"`` (Pour3D-v0, :mod:`taigym.agents.pour3d_features`): the network sees the episode's
first observation, the time, S's lean and the liquid in S and T, and predicts S's pose in the pour
plane relative to its start (sqp's plan), which the action steers to through the arm's Jacobian;
spec ``{"kind": "plan", "obs_dim", "dt", "max_speed", "action_scale"}``.
"""

from __future__ import annotations

import math

import numpy as np

from taigym.sim.constants import GRAVITY

from . import pour3d_features, transport_features

KINDS = ("none", "target_path", "obstacles", "plan", "auto")
RELATIVE_LOOKAHEAD = np.array([0.25, 0.5, 1.0, 1.5, 2.0, 2.5, 3.0])      # s from now
ABSOLUTE_LOOKAHEAD = np.array([0.3, 0.4, 0.5, 0.6, 0.7])                 # fractions of the horizon
# Pour-v0's observation entries (both obs modes): 6-7 T's position (m), 8-9 its velocity (m/s),
# 10-11 T's opening centre minus S's (m), 14 time / horizon, 19 S's opening width (m), 28 T's (m)
TIME = 14
S_WIDTH, T_WIDTH = 19, 28
LANDING_CLIP = 10.0                      # |landing offset| in T half-widths: far misses all look alike
START_DIM = 3                            # S's pose x, y, theta at the episode's start (obs 0-2)
START_VELOCITY = slice(3, 6)             # S's velocity vx, vy, omega at the episode's start (obs 3-5)
# sqp pours towards T's side of S at the middle of its plan, which ends drain_time (1 s) before the
# 5 s horizon: (5 - 1) / 2 = 2 s, 0.4 of the horizon
POUR_SIDE_TIME = 0.4
ACTION_SCALE_FLOOR = 1e-3                # of an action in [-1, 1]: an output the demonstrations never vary
POUR_OBS_MIN = 40                        # entries 0-39 are shared by obs_mode features and lip


def resolve(kind: str, env) -> dict:
    """The feature spec for ``kind`` in ``env``; ``"auto"`` is ``"target_path"`` on Pour-v0
    (and envs with its observation layout), ``"obstacles"`` on Transport-v0, ``"plan"`` on
    Pour3D-v0, else ``"none"``."""
    if kind not in KINDS:
        raise ValueError(f"features must be one of {KINDS}, got {kind!r}")
    from taigym.envs import family_of

    u = env.unwrapped
    task = getattr(u, "task", None)
    pour = family_of(env) == "pour"
    if kind == "auto":
        kind = {"pour": "target_path", "transport": "obstacles", "pour3d": "plan"}.get(family_of(env), "none")
    if kind == "none":
        return {"kind": "none"}
    if kind == "obstacles":
        if family_of(env) != "transport":
            raise ValueError(f"features='obstacles' needs Transport-v0's observation, got {family_of(env)!r}")
        return {"kind": "obstacles", "slots": transport_features.n_slots(env.observation_space.shape[0])}
    if kind == "plan":
        if family_of(env) != "pour3d":
            raise ValueError(f"features='plan' needs Pour3D-v0's observation, got {family_of(env)!r}")
        from taigym.envs.pour3d import MAX_JOINT_SPEED

        return {"kind": "plan", "obs_dim": int(env.observation_space.shape[0]), "dt": float(u.dt),
                "max_speed": [float(v) for v in MAX_JOINT_SPEED]}
    if not pour:
        raise ValueError(f"features='target_path' needs Pour-v0's observation, got {family_of(env)!r}")
    from taigym.envs.pour_tasks import TARGET_BOUNDS

    bounds = tuple(float(b) for b in (task.target_bounds if task is not None else TARGET_BOUNDS))
    horizon = float(getattr(getattr(u, "cfg", None), "horizon", 5.0))
    return {"kind": "target_path", "bounds": bounds, "horizon": horizon, "start_pose": True, "start_velocity": True,
            "outflow_landing": True, "pour_side": True}


def extra_dim(spec: dict | None) -> int:
    """Entries the features add to the observation."""
    if not spec or spec["kind"] == "none":
        return 0
    if spec["kind"] == "obstacles":
        return transport_features.extra_dim(_transport_obs_dim(spec))
    if spec["kind"] == "plan":
        return pour3d_features.extra_dim(spec["obs_dim"])
    lookaheads = len(RELATIVE_LOOKAHEAD) + len(ABSOLUTE_LOOKAHEAD)
    return (3 * lookaheads + (START_DIM if spec.get("start_pose") else 0) + (2 if spec.get("outflow_landing") else 0)
            + (START_VELOCITY.stop - START_VELOCITY.start if spec.get("start_velocity") else 0)
            + (1 if spec.get("pour_side") else 0))


def _transport_obs_dim(spec: dict) -> int:
    return transport_features.SLOTS + transport_features.SLOT_SIZE * spec["slots"]


def net_dim(spec: dict | None, act_dim: int) -> int:
    """Outputs of the network: the action's, or on Pour3D-v0 (``"plan"``) S's target pose in the
    pour plane (:data:`taigym.agents.pour3d_features.OUT`)."""
    return pour3d_features.OUT if spec and spec["kind"] == "plan" else act_dim


def replaced_inputs(spec: dict | None) -> list[int]:
    """Indices of the featurized input the policy must not see: observation entries the
    features re-express (Transport's room frame) and the direction of travel, which the policy
    applies to its output instead (:func:`output`); on Pour3D-v0 (``"plan"``) the current
    observation but the time, S's lean and the liquid, and the Jacobian terms."""
    if spec and spec["kind"] == "plan":
        return pour3d_features.hidden_entries(spec["obs_dim"])
    if not spec or spec["kind"] != "obstacles":
        return []
    obs_dim = _transport_obs_dim(spec)
    return transport_features.hidden_entries(obs_dim) + [obs_dim + extra_dim(spec) - 1]


def output(spec: dict | None, inputs: np.ndarray, net_out):
    """The action (n, act_dim) from the network's output ``net_out`` (numpy or torch) for its
    featurized ``inputs`` (n, in_dim): as it is, or on Transport (``"obstacles"``) the observed
    velocity plus the output as a velocity change in the frame of travel, times the spec's
    ``action_scale`` (:mod:`taigym.agents.transport_features`); on Pour3D-v0 (``"plan"``) the
    joint velocities that steer S to the output, its pose in the pour plane
    (:mod:`taigym.agents.pour3d_features`)."""
    if spec and spec["kind"] == "plan":
        return pour3d_features.output(inputs, spec["obs_dim"], net_out, spec)
    if not spec or spec["kind"] != "obstacles":
        return net_out
    return transport_features.output(inputs, _transport_obs_dim(spec) + extra_dim(spec), net_out,
                                     spec.get("action_scale", 1.0))


def fit_action_scale(spec: dict | None, inputs: np.ndarray, actions: np.ndarray) -> None:
    """Set the spec's ``action_scale`` (Transport: each output's spread over the demonstrations
    ``actions`` for ``inputs``, so that every output is learned at the same scale) and
    ``label_limit`` (the largest velocity change the demonstrations make, per output: see
    :func:`limit_labels`); Pour3D-v0 (``"plan"``): the spread of each coordinate of S's target pose; a no-op
    for features whose network regresses the action itself."""
    if spec and spec["kind"] == "plan":
        t = pour3d_features.targets(inputs, spec["obs_dim"], actions)
        spec["action_scale"] = [float(v) for v in np.maximum(t.std(0), ACTION_SCALE_FLOOR)]
    if spec and spec["kind"] == "obstacles":
        t = transport_features.targets(inputs, _transport_obs_dim(spec) + extra_dim(spec), actions)
        spec["action_scale"] = [float(v) for v in np.maximum(t.std(0), ACTION_SCALE_FLOOR)]
        spec["label_limit"] = [float(v) for v in np.maximum(np.abs(t).max(0), ACTION_SCALE_FLOOR)]


def limit_labels(spec: dict | None, inputs: np.ndarray, actions: np.ndarray) -> np.ndarray:
    """``actions`` (n, act_dim) labelling featurized ``inputs``, with each velocity change limited
    to the spec's ``label_limit`` (Transport; other features: unchanged). The expert's label at a
    learner's state off its plan (DAgger) asks for the plan's velocity there at once, a jump the
    expert's own jerk-limited carries never make, up to tens of the demonstrations' spread of
    velocity changes: such labels dominated the squared loss of the refits. Limited, a label
    turns the velocity towards the expert's at the largest rate the demonstrations use."""
    if not spec or spec["kind"] != "obstacles" or "label_limit" not in spec:
        return actions
    in_dim = _transport_obs_dim(spec) + extra_dim(spec)
    lim = np.asarray(spec["label_limit"])
    change = np.clip(transport_features.targets(inputs, in_dim, actions), -lim, lim)
    return np.asarray(transport_features.output(inputs, in_dim, change, 1.0), np.float32)


def action_scale(spec: dict | None) -> np.ndarray | float:
    """The factor the network's output is multiplied by (its training loss is divided by it)."""
    return np.asarray(spec.get("action_scale", 1.0), np.float32) if spec else 1.0


def _row(x: np.ndarray, bounds, horizon: float) -> list[float]:
    """The features of one observation (Python floats: ~10 us, a policy's decision is ~30 us)."""
    from taigym.envs.pour_tasks import reflect

    x_lo, x_hi, y_lo, y_hi = bounds
    tx, ty, vx, vy, rx, ry, now = (float(x[i]) for i in (6, 7, 8, 9, 10, 11, TIME))
    now *= horizon
    taus = [*RELATIVE_LOOKAHEAD.tolist(), *(max(a * horizon - now, 0.0) for a in ABSOLUTE_LOOKAHEAD.tolist())]
    px = [reflect(tx, vx, tau, x_lo, x_hi) for tau in taus]
    return ([rx + p - tx for p, _ in px] + [ry + reflect(ty, vy, tau, y_lo, y_hi)[0] - ty for tau in taus]
            + [v for _, v in px])


def _landing(x: np.ndarray, bounds) -> list[float]:
    """Where liquid leaving S's left / right lip at rest now crosses T's opening (x offset from
    its centre at that time, in T's opening half-widths)."""
    from taigym.envs.pour_tasks import reflect

    th, tx, vx, rx, ry = (float(x[i]) for i in (2, 6, 8, 10, 11))
    half_s, half_t = 0.5 * float(x[S_WIDTH]), max(0.5 * float(x[T_WIDTH]), 1e-3)
    c, s = math.cos(th), math.sin(th)
    out = []
    for side in (-1.0, 1.0):                       # lip = S's opening centre + R(theta) (side w/2, 0)
        lx, ly = side * half_s * c - rx, side * half_s * s - ry      # relative to T's opening centre
        fall = math.sqrt(2.0 * max(ly, 0.0) / GRAVITY)               # s
        t_x = reflect(tx, vx, fall, bounds[0], bounds[1])[0] - tx     # T's x displacement meanwhile
        out.append(min(max((lx - t_x) / half_t, -LANDING_CLIP), LANDING_CLIP))
    return out


def pour_side(start: np.ndarray, bounds, horizon: float) -> float:
    """+1 if T's opening will be right of S's opening at ``POUR_SIDE_TIME`` x the horizon (T's path
    from the episode's first observation ``start``, S where it started), else -1: the side sqp pours
    towards (its ``PourProblem.pour_side``)."""
    from taigym.envs.pour_tasks import reflect

    tx, vx, rx = (float(start[i]) for i in (6, 8, 10))
    return 1.0 if rx + reflect(tx, vx, POUR_SIDE_TIME * horizon, bounds[0], bounds[1])[0] - tx >= 0.0 else -1.0


def start_features(start: np.ndarray, spec: dict | None) -> np.ndarray | None:
    """The spec's entries that depend on the episode's first observation only (S's start pose and
    velocity, the pour side), (n, k) for ``start`` (n, d) or (d,); None if it has none. Constant over
    an episode: a policy computes them once per episode (:class:`~taigym.agents.policy.NumpyPolicy`)."""
    if spec and spec["kind"] == "obstacles":
        return transport_features.start_features(start)
    if spec and spec["kind"] == "plan":
        if start is None:
            raise ValueError("features='plan' needs the episode's first observation (start)")
        return pour3d_features.start_features(start)
    if not spec or not (spec.get("start_pose") or spec.get("start_velocity") or spec.get("pour_side")):
        return None
    if start is None:
        raise ValueError("features with start_pose, start_velocity or pour_side need the episode's first "
                         "observation (start)")
    s0 = np.atleast_2d(np.asarray(start, np.float32))
    parts = [s0[:, cols] for key, cols in (("start_pose", slice(0, START_DIM)), ("start_velocity", START_VELOCITY))
             if spec.get(key)]
    if spec.get("pour_side"):
        parts.append(np.array([[pour_side(r, spec["bounds"], spec["horizon"])] for r in s0], np.float32))
    return np.hstack(parts)


def featurize(obs: np.ndarray, spec: dict | None, start: np.ndarray | None = None, *,
              start_part: np.ndarray | None = None, prev: np.ndarray | None = None) -> np.ndarray:
    """``obs`` (n, d) or (d,) with the spec's features appended (float32, same leading shape);
    ``start``: the episode's first observation(s) (rows as ``obs``, or one for all), needed
    with ``start_pose``, ``start_velocity`` or ``pour_side``, unless ``start_part`` gives
    :func:`start_features` of it; ``prev``: the observation(s) before ``obs`` in the episode
    (Transport's velocity change; None: at the episode's start)."""
    obs = np.asarray(obs, np.float32)
    if not spec or spec["kind"] == "none":
        return obs
    x = np.atleast_2d(obs)
    if spec["kind"] == "obstacles":
        if start_part is None:
            start_part = start_features(start, spec)
        out = np.hstack([x, transport_features.featurize(x, start_part, prev),
                         np.broadcast_to(start_part, (len(x), start_part.shape[-1]))])
        return out if obs.ndim == 2 else out[0]
    if spec["kind"] == "plan":
        if start_part is None:
            start_part = start_features(start, spec)
        out = np.hstack([x, pour3d_features.featurize(x, start_part, spec)])
        return out if obs.ndim == 2 else out[0]
    if x.shape[1] < POUR_OBS_MIN:
        raise ValueError(f"target_path features need Pour-v0's observation (>= {POUR_OBS_MIN} entries), "
                         f"got {x.shape[1]}")
    parts = [x, np.array([_row(r, spec["bounds"], spec["horizon"]) for r in x], np.float32)]
    if spec.get("outflow_landing"):
        parts.append(np.array([_landing(r, spec["bounds"]) for r in x], np.float32))
    if start_part is None:
        start_part = start_features(start, spec)
    if start_part is not None:
        parts.append(np.broadcast_to(start_part, (len(x), start_part.shape[-1])))
    out = np.hstack(parts)
    return out if obs.ndim == 2 else out[0]


__all__ = ["KINDS", "action_scale", "extra_dim", "featurize", "fit_action_scale", "limit_labels", "net_dim", "output",
           "pour_side", "replaced_inputs", "resolve", "start_features"]
