"""The bc / dagger policies' inputs and outputs on Transport-v0 (features="obstacles",
taigym/agents/transport_features.py): a carry and its mirror image are one problem, the policy
sees how its velocity changed over the last step, and its network predicts that change."""

from __future__ import annotations

import numpy as np
import torch

from taigym.agents import transport_features as tf
from taigym.agents.policy import MLPPolicy, NumpyPolicy
from taigym.training.fit import previous_rows

SPEC = {"kind": "obstacles", "slots": 6}
OBS_DIM = 19 + 5 * 6
W = 1.2   # m, the room's width


def carry_obs(rng, n=1) -> np.ndarray:
    """Transport-v0 observations (n, 49) of a left-to-right carry past two boxes."""
    o = np.zeros((n, OBS_DIM), np.float32)
    o[:, 0:3] = np.c_[0.2 + 0.3 * rng.random(n), 0.1 + 0.2 * rng.random(n), 0.2 * rng.standard_normal(n)]
    o[:, 3:6] = 0.3 * rng.standard_normal((n, 3))
    o[:, 6:9] = [1.0, 0.3, 0.0]
    o[:, 9:12] = o[:, 6:9] - o[:, 0:3]
    o[:, 12:17] = [0.03, 0.04, 0.1, 0.05, 0.6]
    for k, box in enumerate([(0.6, 0.1, 0.1, 0.2), (0.8, 0.15, 0.12, 0.3)]):
        o[:, 19 + 5 * k:24 + 5 * k] = (1.0, *box)
    return o


def mirror(o: np.ndarray) -> np.ndarray:
    """The same carry mirrored about the room's vertical mid-line."""
    m = o.copy()
    for i in (0, 6):                                  # x positions
        m[:, i] = W - o[:, i]
    for i in (2, 3, 5, 8, 9, 11):                      # tilts, vx, tilt rates, goal-minus-pose x and tilt
        m[:, i] = -o[:, i]
    present = o[:, 19::5] > 0.5
    m[:, 20::5] = np.where(present, W - o[:, 20::5], 0.0)
    return m


def policy(rng) -> MLPPolicy:
    torch.manual_seed(0)
    p = MLPPolicy(OBS_DIM, 3, [32, 32], features=dict(SPEC))
    x = p.featurize(carry_obs(rng, 64), carry_obs(rng, 1), carry_obs(rng, 64))
    p.set_normalisation(x)
    p.set_action_scale(x, rng.uniform(-1, 1, (64, 3)).astype(np.float32))
    return p


def test_a_mirrored_carry_gets_the_mirrored_action():
    rng = np.random.default_rng(0)
    p = policy(rng)
    start, prev, now = carry_obs(rng), carry_obs(rng), carry_obs(rng)
    a = p(torch.as_tensor(p.featurize(now, start, prev))).detach().numpy()
    b = p(torch.as_tensor(p.featurize(mirror(now), mirror(start), mirror(prev)))).detach().numpy()
    np.testing.assert_allclose(b, a * [-1.0, 1.0, -1.0], atol=1e-5)


def test_the_policy_sees_its_last_velocity_change():
    """Two states alike but for the velocity a step before (braking vs speeding up) get
    different actions; at an episode's start the change is zero."""
    rng = np.random.default_rng(1)
    p = policy(rng)
    now = carry_obs(rng)
    slower, faster = now.copy(), now.copy()
    slower[:, 3] -= 0.1
    faster[:, 3] += 0.1
    x = [p.featurize(now, now, prev) for prev in (slower, faster, None)]
    change = tf.extra_dim(OBS_DIM) - tf.START_DIM - 5      # the velocity change's x entry in the extras
    extras = [xi[:, OBS_DIM + change] for xi in x]
    np.testing.assert_allclose([e[0] for e in extras], [0.1, -0.1, 0.0], atol=1e-6)
    acts = [p(torch.as_tensor(xi)).detach().numpy() for xi in x[:2]]
    assert np.abs(acts[0] - acts[1]).max() > 1e-3


def test_the_network_predicts_the_velocity_change():
    """The action is the held velocity plus the output (in the frame of travel, scaled); the
    fit's targets are that output's inverse."""
    rng = np.random.default_rng(2)
    p = policy(rng)
    x = p.featurize(carry_obs(rng, 8), carry_obs(rng, 1), carry_obs(rng, 8))
    net = rng.standard_normal((8, 3))
    in_dim = p.in_dim
    acts = tf.output(x, in_dim, net, p.features["action_scale"])
    np.testing.assert_allclose(tf.targets(x, in_dim, acts) / p.features["action_scale"], net, atol=1e-9)
    np.testing.assert_allclose(tf.output(x, in_dim, np.zeros((8, 3)), 1.0), x[:, 3:6] / [0.8, 0.8, 2.0], atol=1e-6)


def test_numpy_policy_keeps_the_previous_observation_as_training_does():
    rng = np.random.default_rng(3)
    p = policy(rng)
    episode = carry_obs(rng, 6)
    fast = NumpyPolicy(p.numpy_params())
    fast.reset()
    stepped = np.array([fast(o) for o in episode])
    x = p.featurize(episode, episode[:1], previous_rows(episode, np.zeros(6, int)))
    batch = np.clip(p(torch.as_tensor(x)).detach().numpy(), -1, 1)
    np.testing.assert_allclose(stepped, batch, atol=1e-5)


def test_previous_rows_restart_at_each_episode():
    obs = np.arange(5.0)[:, None]
    np.testing.assert_array_equal(previous_rows(obs, np.array([0, 0, 0, 1, 1]))[:, 0], [0, 0, 1, 3, 3])


def test_boxes_at_the_same_x_keep_their_inputs_as_the_observation_reorders_them():
    """A wall with a window is two boxes at the same x; the observation lists them nearest the
    container first, so their order flips as the carry rises past the height between their
    centres. The policy's inputs must not flip with it."""
    rng = np.random.default_rng(4)
    o = carry_obs(rng, 1)
    below, above = (1.0, 0.6, 0.1, 0.06, 0.2), (1.0, 0.6, 0.45, 0.06, 0.3)   # present, x, z, width, height
    o[:, 19:24], o[:, 24:29] = below, above
    flipped = o.copy()
    flipped[:, 19:24], flipped[:, 24:29] = above, below
    start = tf.start_features(carry_obs(rng, 1))
    np.testing.assert_array_equal(tf.featurize(o, start), tf.featurize(flipped, start))


def test_a_label_asking_for_a_velocity_jump_turns_the_velocity_at_the_demonstrations_rate():
    """DAgger's expert labels a learner's state off its plan with the plan's velocity there, a
    jump its own carries never make; the fit regresses it limited to the largest velocity change
    of the demonstrations, in the label's direction. Demonstrated labels are kept as they are."""
    rng = np.random.default_rng(5)
    p = MLPPolicy(OBS_DIM, 3, [32, 32], features=dict(SPEC))
    x = p.featurize(carry_obs(rng, 64), carry_obs(rng, 1), carry_obs(rng, 64))
    held = tf.held_action(x)
    demos = (held + 0.02 * rng.standard_normal((64, 3))).astype(np.float32)
    p.set_normalisation(x)
    p.set_action_scale(x, demos)
    np.testing.assert_allclose(p.limit_labels(x, demos), demos, atol=1e-6)
    jump = (held + [0.5, -0.5, 0.5]).astype(np.float32)
    limited = p.limit_labels(x, jump)
    change = tf.targets(x, p.in_dim, limited)          # in the frame of travel
    np.testing.assert_allclose(np.abs(change), np.broadcast_to(p.features["label_limit"], change.shape), rtol=1e-4)
    assert (np.sign(limited - held) == np.sign(jump - held)).all()
