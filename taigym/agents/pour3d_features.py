"""Input features of the MLP policies (``bc``, ``dagger``) on Pour3D-v0's observation: sqp's plan
in the pour plane, as a function of the task.

The expert (``sqp`` in joint space, :mod:`taigym.agents.sqp3d`) plans S's pose in the vertical
plane through S and T at the episode's first decision, from the task as the first observation
shows it, maps it to joint angles by inverse kinematics and tracks it: its action at any later
state is the plan's at that time. Regressing the action from the current observation, an MLP
copied the observed joint velocities (the last action) and under-tilted S (43-51 % of the
liquid left in S); regressing the joint angles from the task, it erred by 5 cm and 0.2 rad at S
(the joint trajectories depend on the start configuration through the inverse kinematics).

``"plan"`` (kind of :mod:`taigym.agents.features`): the network sees the episode's first
observation (kept by the policy from its first decision), S's distance to T and height under T's
opening there, the time (obs 35, time / horizon), S's lean (obs 32) and the liquid's fractions
in S and in T (obs 36-37); it does not see the rest of the current observation (hidden:
:func:`hidden_entries`), the joint velocities (the last action) above all. It predicts where S
should be in the pour plane relative to its start: along the horizontal direction from S's start to T (``u``, m), up (m), and its lean
towards T (rad): the 2D plan, with the pour side built in. The action steers S there within a
control step, through the arm's Jacobian at the observed joint angles (the Panda's kinematics,
:class:`taigym.envs.panda.PandaArm`): the joint velocities of least norm that move S's origin
by the offset and turn its axis by the lean's error over ``dt`` (the turn about S's own axis
free, as sqp's inverse kinematics), over the joints' top speeds. S's pose observed at every step
closes the loop: an offset from the plan decays, where a policy regressing velocities keeps
every error it made.

Why the lean and the liquid: sqp's lean over time differs from task to task in ways the task
does not predict well (from the first observation and the time, BC's lean erred by 0.23-0.26 rad
while S poured, the lean's whole spread across tasks); given the lean and how much liquid has
left S, the next lean is predicted to 0.05-0.08 rad. BC from 235 sqp pours, train tasks 994-999:
first observation and time 4 / 6 successes, with the liquid 2 / 6, with the lean and the liquid
5 / 6.

The Jacobian terms are computed when the observation is featurized (:func:`featurize`), so the
action is linear in the network's output: ``a = B + A @ out`` (``A`` (7, 3), ``B`` (7,), hidden
inputs).
"""

from __future__ import annotations

import numpy as np

JOINTS = 7                 # Pour3D-v0's observation: 0-6 joint angles (rad)
ORIGIN, AXIS = 14, 17      # S's origin (m), S's axis (unit vector)
T_OPENING = 26             # T's opening centre (m)
TIME = 35                  # time / horizon
SEEN = (32, TIME, 36, 37)  # the current observation's entries the network sees: lean, time, in S, in T
OUT = 3                    # along u (m), up (m), lean towards T (rad)
PLANE_DIM = 2              # S's start: horizontal distance to T's opening, height under it (m)
DAMPING = 1e-2             # of the least-norm joint velocities (damped least squares)
_ARM = None


def extra_dim(obs_dim: int) -> int:
    """Entries ``"plan"`` appends to an observation: the first observation and S's start in the
    plane, then ``A`` and ``B`` (hidden)."""
    return obs_dim + PLANE_DIM + JOINTS * OUT + JOINTS


def hidden_entries(obs_dim: int) -> list[int]:
    """Entries of the featurized input the network does not see: the current observation but
    :data:`SEEN`, and the Jacobian terms."""
    start = obs_dim + obs_dim + PLANE_DIM
    return [i for i in range(obs_dim) if i not in SEEN] + list(range(start, start + JOINTS * OUT + JOINTS))


def _plane(start: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(n, 3) unit horizontal direction from S's start to T's opening, (n, 2) its distance and T's
    opening height over S's origin (m), from first observations (n, d)."""
    d = start[:, T_OPENING:T_OPENING + 3] - start[:, ORIGIN:ORIGIN + 3]
    dist = np.maximum(np.hypot(d[:, 0], d[:, 1]), 1e-6)
    u = np.column_stack([d[:, 0] / dist, d[:, 1] / dist, np.zeros(len(d))])
    return u, np.column_stack([dist, d[:, 2]])


def start_features(start: np.ndarray) -> np.ndarray:
    """(n, d + 2): the episodes' first observations (n, d) or (d,) and S's start in the plane."""
    s0 = np.atleast_2d(np.asarray(start, np.float64))
    return np.hstack([s0, _plane(s0)[1]]).astype(np.float32)


def arm():
    """The Panda's kinematics (a private pybullet client, made at the first call)."""
    global _ARM
    if _ARM is None:
        from taigym.envs.panda import PandaArm
        from taigym.envs.transport3d_tasks import HOME

        _ARM = PandaArm(HOME)
    return _ARM


def steering(x: np.ndarray, start_obs: np.ndarray, dt: float, max_speed) -> tuple[np.ndarray, np.ndarray]:
    """``A`` (n, 7, 3), ``B`` (n, 7): the action (joint velocities over ``max_speed``) that moves
    S from its observed pose in ``x`` (n, d) to the target ``out`` = (along u, up, lean) relative
    to its start in ``start_obs`` (n, d) within ``dt`` s is ``B + A @ out``."""
    u, _ = _plane(start_obs)
    up = np.array([0.0, 0.0, 1.0])
    normal = np.cross(up, u)                       # turning about it leans S's axis towards u
    p, a = x[:, ORIGIN:ORIGIN + 3], x[:, AXIS:AXIS + 3]
    lean = np.arctan2(np.einsum("ij,ij->i", a, u), a[:, 2])
    off_plane = np.einsum("ij,ij->i", a, normal)
    A = np.empty((len(x), JOINTS, OUT))
    B = np.empty((len(x), JOINTS))
    inv_speed = 1.0 / (dt * np.asarray(max_speed, np.float64))
    for i in range(len(x)):
        J = arm().jacobian(x[i, :JOINTS])
        perp = np.eye(3) - np.outer(a[i], a[i])    # S's turn about its own axis is free
        Jt = np.vstack([J[:3], perp @ J[3:]])
        P = Jt.T @ np.linalg.inv(Jt @ Jt.T + DAMPING ** 2 * np.eye(6))        # (7, 6)
        turn = perp @ normal[i]
        A[i] = np.column_stack([P[:, :3] @ u[i], P[:, :3] @ up, P[:, 3:] @ turn]) * inv_speed[:, None]
        # the start's origin minus S's origin, the lean back to upright, S's axis back into the plane
        back_in = -off_plane[i] * perp @ np.cross(a[i], normal[i])
        B[i] = (P[:, :3] @ (start_obs[i, ORIGIN:ORIGIN + 3] - p[i]) - lean[i] * (P[:, 3:] @ turn)
                + P[:, 3:] @ back_in) * inv_speed
    return A, B


def featurize(x: np.ndarray, start_part: np.ndarray, spec: dict) -> np.ndarray:
    """(n, extra_dim) for observations ``x`` (n, d) and their episodes' :func:`start_features`."""
    x = np.atleast_2d(np.asarray(x, np.float64))
    sp = np.broadcast_to(np.asarray(start_part, np.float64), (len(x), start_part.shape[-1]))
    A, B = steering(x, sp[:, :x.shape[1]], spec["dt"], spec["max_speed"])
    return np.hstack([sp, A.reshape(len(x), -1), B]).astype(np.float32)


def _terms(inputs, obs_dim: int):
    k = obs_dim + obs_dim + PLANE_DIM
    x = np.asarray(inputs, np.float64)
    return x[..., k:k + JOINTS * OUT].reshape(*x.shape[:-1], JOINTS, OUT), x[..., k + JOINTS * OUT:k + JOINTS * OUT + JOINTS]


def output(inputs: np.ndarray, obs_dim: int, net_out, spec: dict):
    """The action (n, 7) for the network's output ``net_out`` (n, 3, or (members, n, 3); numpy or
    torch, returned as it): ``B + A @ (out * action_scale)``."""
    A, B = _terms(inputs, obs_dim)
    scale = np.broadcast_to(np.asarray(spec.get("action_scale", 1.0), np.float64), (OUT,))
    if isinstance(net_out, np.ndarray):
        return B + np.einsum("...jk,...k->...j", A, net_out * scale)
    import torch

    At, Bt, st = (torch.as_tensor(v, dtype=net_out.dtype) for v in (A, B, scale.copy()))
    return Bt + torch.einsum("...jk,...k->...j", At, net_out * st)


def targets(inputs: np.ndarray, obs_dim: int, actions: np.ndarray) -> np.ndarray:
    """(n, 3): the network's targets (before ``action_scale``) that give ``actions`` most nearly
    (least squares over the joints)."""
    A, B = _terms(inputs, obs_dim)
    return np.einsum("nkj,nj->nk", np.linalg.pinv(A), np.asarray(actions, np.float64) - B)


__all__ = ["OUT", "SEEN", "TIME", "arm", "extra_dim", "featurize", "hidden_entries", "output", "start_features", "steering",
           "targets"]
