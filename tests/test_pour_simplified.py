"""taigym/Pour-v0 with fidelity="simplified" (Pan & Manocha 2016's reduced liquid)."""

from __future__ import annotations

import dataclasses

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import taigym.agents
from taigym.envs import tasks
from taigym.envs.pour import N_STATE
from taigym.envs.pour_tasks import PourTask


def make(**kw):
    return gym.make("taigym/Pour-v0", fidelity="simplified", **kw)


def upright_task(**kw) -> PourTask:
    base = dict(source_container="rect", source_width=0.08, source_height=0.10,
                target_container="rect", target_width=0.10, target_height=0.08,
                source_pose=(0.2, 0.3, 0.0), target_position=(0.45, 0.05), fill=0.5)
    return PourTask(**{**base, **kw})


@pytest.mark.parametrize("obs_mode", ["features", "lip", "rgb"])
def test_check_env(obs_mode):
    env = make(obs_mode=obs_mode, render_mode="rgb_array")
    check_env(env.unwrapped, skip_render_check=False)
    env.reset(seed=0)
    assert env.render().shape == (320, 512, 3)


def test_bad_arguments():
    with pytest.raises(ValueError, match="fidelity"):
        gym.make("taigym/Pour-v0", fidelity="coarse")
    with pytest.raises(ValueError, match="particles"):
        make(obs_mode="particles")


def test_same_spaces_and_info_keys_as_the_particle_env():
    a, b = make(), gym.make("taigym/Pour-v0")
    assert a.observation_space == b.observation_space and a.action_space == b.action_space
    task = upright_task()
    _, ia = a.reset(options={"task": task})
    _, ib = b.reset(options={"task": task})
    assert set(ia) == set(ib)
    b.close()


def test_liquid_at_rest_stays_and_heightfield_shows_the_fill():
    env = make()
    obs, info = env.reset(options={"task": upright_task(fill=0.5)})
    for _ in range(20):
        obs, _, term, trunc, info = env.step(np.zeros(3, np.float32))
    assert info["in_source"] == 1.0 and info["in_target"] == 0.0 and not term
    heights = obs[N_STATE:N_STATE + 16]                 # newest heightfield frame
    np.testing.assert_allclose(heights, 0.5, atol=1e-6)


def test_fractions_sum_to_one_and_a_pour_over_t_lands_in_t():
    env = make()
    task = upright_task()
    _, info = env.reset(options={"task": task})
    agent = taigym.agents.make("scripted", env)
    agent.reset(seed=0)
    obs, done, actions = None, False, []
    while not done:
        actions.append(agent.act(obs, info))
        obs, _, term, trunc, info = env.step(actions[-1])
        total = info["in_source"] + info["in_target"] + info["spilled"] + info["in_flight"]
        assert total == pytest.approx(1.0, abs=1e-9)
        done = term or trunc
    assert info["in_target"] > 0.9 and info["success"]
    # the same actions with T further away pour onto the table: spilled
    env.reset(options={"task": dataclasses.replace(task, target_position=(0.66, 0.05))})
    for a in actions:
        _, _, term, trunc, info = env.step(a)
        if term or trunc:
            break
    assert info["in_target"] < 0.05 and info["spilled"] > 0.9


def test_tilting_below_the_max_tilt_keeps_the_liquid():
    env = make()
    task = upright_task(fill=0.6)
    env.reset(options={"task": task})
    max_tilt = task.source_shape().max_tilt_angle(0.6)
    info = {}
    for _ in range(int((max_tilt - 0.05) / 0.05)):      # 0.05 rad per step, clockwise
        _, _, _, _, info = env.step(np.array([0, 0, -0.5], np.float32))
    assert info["in_source"] == 1.0
    for _ in range(20):
        _, _, _, _, info = env.step(np.array([0, 0, -0.5], np.float32))
    assert info["in_source"] < 0.9


def test_deterministic_and_vector_env_matches_single_envs():
    split = tasks("pour", split="eval")[:4]
    rng = np.random.default_rng(0)
    actions = rng.uniform(-1, 1, (30, 4, 3)).astype(np.float32)
    vec = gym.make_vec("taigym/Pour-v0", num_envs=4, vectorization_mode="vector_entry_point",
                       fidelity="simplified")
    obs_v, _ = vec.reset(seed=[0, 1, 2, 3], options={"task": list(split)})
    singles = [make() for _ in range(4)]
    obs_s = [e.reset(seed=i, options={"task": split[i]})[0] for i, e in enumerate(singles)]
    np.testing.assert_array_equal(obs_v, np.stack(obs_s))
    for t in range(30):
        obs_v, rew_v, *_ = vec.step(actions[t])
        for i, e in enumerate(singles):
            o, r, *_ = e.step(actions[t, i])
            np.testing.assert_array_equal(obs_v[i], o)
            assert rew_v[i] == r


def test_scripted_agent_succeeds_on_the_eval_split_start():
    env = make()
    agent = taigym.agents.make("scripted", env)
    rows = taigym.agents.evaluate(env, agent, tasks("pour", split="eval")[:10])
    assert sum(r["success"] for r in rows) >= 8


def test_returned_arrays_are_the_callers_own():
    """A caller that edits the returned observation and info arrays in place (a replay buffer
    normalising them) changes nothing in the env: the next transitions are the same."""
    task = tasks("pour", split="eval")[3]
    actions = np.random.default_rng(0).uniform(-1, 1, (40, 3)).astype(np.float32)
    arrays = ("source_pose", "source_velocity", "target_pose", "target_velocity")

    def run(scribble: bool) -> list:
        env = make()
        obs, info = env.reset(options={"task": task})
        seen = []
        for a in actions:
            if scribble:
                obs[:] = 7.0
                for k in arrays:
                    info[k][:] = 7.0
            obs, r, term, trunc, info = env.step(a)
            seen.append((obs.copy(), r, {k: info[k].copy() for k in arrays}))
            if term or trunc:
                break
        return seen

    for (oa, ra, ia), (ob, rb, ib) in zip(run(False), run(True), strict=True):
        np.testing.assert_array_equal(oa, ob)
        assert ra == rb
        for k in arrays:
            np.testing.assert_array_equal(ia[k], ib[k])
