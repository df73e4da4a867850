"""Corrective demonstrations on Transport-v0 (taigym/training/carry_labels.py): a recorded carry
replayed with its pose offset is what the env would observe there, starts where the carry did,
and is labelled with sfrrt's tracking law, which leads back onto the recorded carry."""

from __future__ import annotations

import numpy as np

from taigym.data import Episode
from taigym.envs.transport import MAX_VELOCITY, TransportEnv, max_tilt_of
from taigym.envs.transport_tasks import transport_tasks
from taigym.sim.constants import CONTROL_DT
from taigym.training import carry_labels as perturb


def observer(task) -> TransportEnv:
    """An env at ``task`` whose observation we read at poses we set (no liquid: it never steps)."""
    env = TransportEnv()
    env.task, env.theta_max, env.spilled = task, max_tilt_of(task), 0.0
    return env


def observe(env, pose, vel, step) -> np.ndarray:
    env.pose, env.vel, env.steps = np.asarray(pose, float), np.asarray(vel, float), step
    return env._obs()


def recorded_carry(task, steps=80) -> Episode:
    """A carry as the env records it: a smooth velocity profile towards the goal, the pose by the
    env's trapezoid rule, ending at rest."""
    env = observer(task)
    s = np.sin(np.pi * np.arange(1, steps + 1) / steps) ** 2          # 0 at both ends
    direction = np.asarray(task.goal) - np.asarray(task.start)
    vel = np.outer(s, direction) / (s.sum() * CONTROL_DT)             # covers start -> goal
    pose, v = np.asarray(task.start, float), np.zeros(3)
    obs, actions = [observe(env, pose, v, 0)], []
    for k, v1 in enumerate(vel):
        actions.append(v1 / MAX_VELOCITY)
        pose, v = pose + 0.5 * (v + v1) * CONTROL_DT, v1
        obs.append(observe(env, pose, v, k + 1))
    a = np.asarray(actions, np.float32)
    n = len(a)
    return Episode(obs=np.asarray(obs), labels=a, actions=a, rewards=np.zeros(n), terminations=np.zeros(n, bool),
                   truncations=np.zeros(n, bool), infos={}, success=True)


def gap_task():
    return next(t for t in transport_tasks("eval") if t.layout == "gap")


def test_a_replay_without_offset_is_the_recorded_carry():
    ep = recorded_carry(gap_task())
    rep = perturb.perturbed_episode(ep, 0.0, 0.0, 0.3, np.random.default_rng(0))
    n = len(ep)
    np.testing.assert_allclose(rep.obs[:n + 1], ep.obs, atol=1e-6)
    np.testing.assert_allclose(rep.labels[:n], ep.labels, atol=1e-5)
    # then it stays at rest at the recorded end
    assert len(rep) == n + perturb.HOLD_STEPS
    np.testing.assert_allclose(rep.labels[n:], 0.0, atol=1e-5)


def test_a_perturbed_state_is_what_the_env_observes_there():
    task = gap_task()
    ep = recorded_carry(task)
    rep = perturb.perturbed_episode(ep, 0.02, 0.05, 0.3, np.random.default_rng(1))
    env = observer(task)
    for k in (0, 7, 20, len(ep) - 1):
        o = rep.obs[k]
        np.testing.assert_allclose(o, observe(env, o[0:3], o[3:6], k), atol=1e-5)
    # the learner starts where the carry did, at rest; later the offset is there
    np.testing.assert_allclose(rep.obs[0], ep.obs[0], atol=1e-7)
    assert np.abs(rep.obs[20, 0:2] - ep.obs[20, 0:2]).max() > 1e-3


def test_the_labels_lead_back_onto_the_recorded_carry():
    """From an offset state, stepping with the label (the env's trapezoid rule) shrinks the
    distance to the recorded carry's next pose by the gain, per step."""
    ep = recorded_carry(gap_task())
    gain = 0.3
    rep = perturb.perturbed_episode(ep, 0.02, 0.05, gain, np.random.default_rng(2))
    for k in (10, 40, 70):
        pose, vel = rep.obs[k, 0:3].astype(float), rep.obs[k, 3:6].astype(float)
        v1 = rep.labels[k] * MAX_VELOCITY
        after = pose + 0.5 * (vel + v1) * CONTROL_DT
        coasting = pose + 0.5 * (vel + ep.obs[k + 1, 3:6]) * CONTROL_DT     # the recorded velocity instead
        target = ep.obs[k + 1, 0:3]
        np.testing.assert_allclose(target - after, (1 - 0.5 * gain) * (target - coasting), atol=1e-5)


def test_replays_of_an_episode_do_not_depend_on_the_others():
    a, b = recorded_carry(gap_task()), recorded_carry(transport_tasks("eval")[0])
    alone = perturb.perturbed_demos([a], 2, 0.02, 0.05, 0.3, seed=3)
    both = perturb.perturbed_demos([a, b], 2, 0.02, 0.05, 0.3, seed=3)
    assert len(both) == 4
    for x, y in zip(alone, both[:2]):
        np.testing.assert_array_equal(x.obs, y.obs)


class TaskEnv:
    """What the tracker reads of an env: ``unwrapped.task``."""

    def __init__(self, task):
        self.task = task
        self.unwrapped = self


def test_the_recorded_carry_tracker_labels_the_carry_with_its_actions_and_leads_a_laggard_along_it():
    task = gap_task()
    ep = recorded_carry(task)
    ep.task = task.to_dict()
    tracker = perturb.RecordedCarry(TaskEnv(task), [ep], gain=0.3)
    tracker.reset(seed=0)
    labels = np.array([tracker.act(o, {}) for o in ep.obs[:-1]])
    np.testing.assert_allclose(labels, ep.labels, atol=1e-5)
    # a learner that stalled at the carry's pose of step 20 for 20 steps is led on along the carry
    # from where it is (the velocity of step 21, no catching up with where the carry is by now)
    tracker.reset(seed=0)
    for o in ep.obs[:20]:
        tracker.act(o, {})
    stalled = ep.obs[20].copy()
    stalled[3:6] = 0.0
    for _ in range(20):
        label = tracker.act(stalled, {}) * MAX_VELOCITY
    np.testing.assert_allclose(label[:2], ep.obs[21, 3:5] + 0.3 * (ep.obs[21, 0:2] - ep.obs[20, 0:2]
                               - 0.5 * ep.obs[21, 3:5] * CONTROL_DT) / CONTROL_DT, atol=1e-4)


def test_the_tracker_refuses_a_task_without_a_recorded_carry():
    ep = recorded_carry(gap_task())
    ep.task = gap_task().to_dict()
    other = transport_tasks("eval")[0]
    tracker = perturb.RecordedCarry(TaskEnv(other), [ep], gain=0.3)
    try:
        tracker.reset(seed=0)
    except ValueError as e:
        assert "recorded" in str(e)
    else:
        raise AssertionError("no ValueError")


def test_no_carry_validates_on_its_own_replays():
    """The fit's validation episodes take their replays with them (split by the demonstration)."""
    from taigym.agents.policy import MLPPolicy
    from taigym.data import transitions
    from taigym.training.fit import TRAIN_DEFAULTS, Fit

    task = gap_task()
    demos = [recorded_carry(task, steps=20 + k) for k in range(10)]
    episodes = perturb.with_replays(demos, {"copies": 2, "pose_std": 0.01, "tilt_std": 0.02, "gain": 0.3}, seed=0)
    assert len(episodes) == 30
    obs, labels, groups = transitions(episodes)
    sides = perturb.split_ids(episodes)[groups]
    fit = Fit(MLPPolicy(obs.shape[1], 3, [8]), obs, labels, groups, dict(TRAIN_DEFAULTS, val_fraction=0.3), seed=0,
              split_groups=sides)
    val_demos = set(sides[fit.val_idx])
    assert val_demos and not val_demos & set(sides[fit.train_idx])
    assert set(groups[fit.val_idx]) >= {i for i in range(30) if perturb.split_ids(episodes)[i] in val_demos}


def test_perturb_options_are_checked():
    ok = {"copies": 2, "pose_std": 0.01, "tilt_std": 0.02, "gain": 0.3}
    assert perturb.check_options(ok, "transport") == ok
    assert perturb.check_options(None, "pour") is None
    for bad, family, word in (({**ok, "std": 1}, "transport", "std"), ({**ok, "gain": 2.0}, "transport", "gain"),
                              ({"copies": 2}, "transport", "gain"), (ok, "pour", "Transport")):
        try:
            perturb.check_options(bad, family)
        except ValueError as e:
            assert word in str(e)
        else:
            raise AssertionError(f"no ValueError for {bad} on {family}")
