"""Pour3D-v0's learner features (``features: plan``, taigym/agents/pour3d_features.py): the
network's output is S's target pose in the pour plane, and the action steers S there."""

import numpy as np
import pytest
import torch

from taigym.agents import pour3d_features as pf
from taigym.agents.features import featurize, net_dim, output, replaced_inputs, start_features
from taigym.agents.policy import MLPPolicy
from taigym.envs.transport3d_tasks import upright_configuration

MAX_SPEED = [2.175] * 4 + [2.61] * 3
SPEC = {"kind": "plan", "obs_dim": 66, "dt": 0.05, "max_speed": MAX_SPEED}
Q0 = upright_configuration(0.3, -0.3, -2.0)


def observe(q, target=(0.0, 0.25, 0.0)) -> np.ndarray:
    """A Pour3D-v0 observation at joints ``q`` (the entries the features read): T's opening
    ``target`` (m) from S's origin at Q0, so S pours along +y."""
    x = np.zeros(66, np.float32)
    origin, R = pf.arm().container_pose(q)
    origin0, _ = pf.arm().container_pose(Q0)
    x[:7], x[pf.ORIGIN:pf.ORIGIN + 3], x[pf.AXIS:pf.AXIS + 3] = q, origin, R[:, 1]
    x[pf.T_OPENING:pf.T_OPENING + 3] = origin0 + np.asarray(target) + [0.0, 0.0, 0.1]
    return x


def plane_pose(q, start) -> np.ndarray:
    """S's pose at joints ``q`` as the network's output: along u, up (m, from the start), lean (rad)."""
    origin, R = pf.arm().container_pose(q)
    d = origin - start[pf.ORIGIN:pf.ORIGIN + 3]
    u = np.array([0.0, 1.0, 0.0])
    return np.array([d @ u, d[2], np.arctan2(R[:, 1] @ u, R[2, 1])])


def act(x, start, out) -> np.ndarray:
    inputs = featurize(x, SPEC, start)
    return output(SPEC, inputs, np.asarray(out, np.float64))


def step(q, qd, a):
    """Pour3D-v0's joint integration (trapezoid rule over a control step), no limits."""
    v = np.asarray(a) * MAX_SPEED
    return q + 0.5 * (qd + v) * SPEC["dt"], v


def test_action_reaches_the_target_pose_in_one_step():
    start = observe(Q0)
    target = np.array([0.02, 0.01, 0.15])                 # 2 cm towards T, 1 cm up, leaning 0.15 rad
    a = act(start, start, target)
    q1 = Q0 + a * MAX_SPEED * SPEC["dt"]                  # the step at the new velocity
    np.testing.assert_allclose(plane_pose(q1, start), target, atol=2e-3)


def test_an_offset_from_the_plan_decays_in_closed_loop():
    start = observe(Q0)
    target = np.array([0.05, 0.02, 0.6])
    q, qd = Q0.copy(), np.zeros(7)
    err0 = np.abs(plane_pose(q, start) - target)
    for _ in range(15):
        q, qd = step(q, qd, np.clip(act(observe(q), start, target), -1, 1))
    err = np.abs(plane_pose(q, start) - target)
    assert np.all(err < 0.05 * err0 + 1e-3), (err0, err)


def test_targets_invert_the_output():
    start = observe(Q0)
    x = observe(Q0 + 0.05)
    inputs = featurize(x, SPEC, start)[None]
    out = np.array([[0.03, -0.01, 0.4]])
    a = output(SPEC, inputs, out)
    np.testing.assert_allclose(pf.targets(inputs, 66, a), out, atol=1e-6)


def test_the_network_sees_the_start_time_lean_and_liquid_only():
    """The current joint angles and velocities (the last action: the copycat shortcut) are
    hidden; the first observation, the time, S's lean and the liquid's fractions are seen."""
    policy = MLPPolicy(66, 7, [8], features=dict(SPEC))
    assert net_dim(SPEC, 7) == 3 and policy.nets[0][-1].out_features == 3
    start = observe(Q0)
    a, b = observe(Q0 + 0.05), observe(Q0 + 0.05)
    b[7:14] = 1.0
    b[pf.TIME] = a[pf.TIME] = 0.3
    xa, xb = (torch.as_tensor(featurize(o, SPEC, start))[None] for o in (a, b))
    seen = policy.obs_mask.bool()
    assert torch.equal(xa[:, seen], xb[:, seen])
    assert seen[[32, pf.TIME, 36, 37]].all() and seen[66:132].all() and not seen[:32].any()
    assert set(replaced_inputs(SPEC)) == set(range(policy.in_dim)) - set(torch.nonzero(seen).ravel().tolist())


def test_plan_features_need_the_start():
    with pytest.raises(ValueError, match="first observation"):
        start_features(None, SPEC)
