"""taigym.training.vec_env: Stable-Baselines3's VecEnv contract over taigym's batched vector envs."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from stable_baselines3.common.vec_env import DummyVecEnv

import taigym  # noqa: F401
from taigym.envs import tasks
from taigym.training.vec_env import BatchedVecEnv, make_batched_vec_env

ID = "taigym/Pour-v0"
KW = dict(fidelity="simplified", horizon=1.0)       # 20-step episodes: truncations come soon


def dummy(n: int, **kw) -> DummyVecEnv:
    """SB3's own vectorisation of n single envs, the reference for the adapter."""
    return DummyVecEnv([lambda: gym.make(ID, **kw) for _ in range(n)])


def test_steps_as_sb3_dummy_vec_env_over_single_envs():
    """Same seeds, same actions: the adapter over the vector env returns what SB3's
    DummyVecEnv over single envs does: observations (the reset one after an episode's end),
    rewards, dones, terminal observations and TimeLimit.truncated."""
    n = 6
    ours, ref = make_batched_vec_env(ID, n, **KW), dummy(n, **KW)
    ours.seed(3)
    ref.seed(3)
    np.testing.assert_array_equal(ours.reset(), ref.reset())
    rng = np.random.default_rng(0)
    ends = {"terminated": 0, "truncated": 0}
    for _ in range(70):
        actions = rng.uniform(-1, 1, (n, 3)).astype(np.float32)
        actions[::2, 2] = -1.0                          # a fast tilt empties S: some episodes terminate
        obs, rew, done, infos = ours.step(actions)
        obs_r, rew_r, done_r, infos_r = ref.step(actions)
        np.testing.assert_allclose(obs, obs_r, rtol=1e-6, atol=1e-7)
        np.testing.assert_allclose(rew, rew_r, rtol=1e-6, atol=1e-9)
        np.testing.assert_array_equal(done, done_r)
        assert rew.dtype == np.float32 and done.dtype == bool and len(infos) == n
        for i in np.flatnonzero(done):
            np.testing.assert_allclose(infos[i]["terminal_observation"],
                                       infos_r[i]["terminal_observation"], rtol=1e-6, atol=1e-7)
            assert infos[i]["TimeLimit.truncated"] == infos_r[i]["TimeLimit.truncated"]
            ends["truncated" if infos[i]["TimeLimit.truncated"] else "terminated"] += 1
            assert obs[i][14] == 0.0 < infos[i]["terminal_observation"][14]   # time: a new episode
        for k in ("in_target", "spilled", "success", "time"):
            assert [info[k] for info in infos] == pytest.approx([info[k] for info in infos_r])
    assert ends["terminated"] > 0 and ends["truncated"] > 0


def test_seeding_and_options():
    """seed(s) seeds member i with s + i at the next reset (the same tasks twice); set_options
    passes a task list on; get_attr("task") gives each member's task."""
    a, b = make_batched_vec_env(ID, 4, seed=7, **KW), make_batched_vec_env(ID, 4, seed=7, **KW)
    np.testing.assert_array_equal(a.reset(), b.reset())
    assert a.get_attr("task") == b.get_attr("task")
    a.seed(8)
    assert a.reset()[0].tolist() != b.reset()[0].tolist()
    split = list(tasks("pour", "eval")[:4])
    a.set_options({"task": split})
    a.reset()
    assert a.get_attr("task") == split and a.get_attr("task", [1, 2]) == split[1:3]
    assert a.get_attr("render_mode") == [None] * 4
    assert a.env_is_wrapped(gym.Wrapper) == [False] * 4
    with pytest.raises(ValueError, match="indices=None"):
        a.set_attr("render_mode", None, indices=[0])
    a.set_options([{"task": split[0]}, {}, {}, {}])
    with pytest.raises(ValueError, match="options"):
        a.reset()


def test_reset_options_hook_chooses_the_next_tasks():
    """The hook is asked at every reset with the members being reset; its tasks start them (a
    start-state curriculum): at reset() all members, at an episode's end that member only."""
    split = list(tasks("pour", "eval")[:8])
    asked = []

    def hook(mask):
        asked.append(mask.copy())
        return {"task": [split[4 + i] if m else None for i, m in enumerate(mask)]}

    venv = make_batched_vec_env(ID, 3, seed=0, reset_options=hook, **KW)
    venv.reset()
    assert venv.get_attr("task") == split[4:7] and asked[-1].all()
    venv.set_options({"task": split[:3]})
    venv.reset()                                        # the hook's tasks win over set_options'
    assert venv.get_attr("task") == split[4:7]
    for _ in range(20):
        _, _, done, _ = venv.step(np.zeros((3, 3), np.float32))
    assert done.all() and asked[-1].all() and len(asked) == 3
    assert venv.get_attr("task") == split[4:7]


def test_step_infos_false_keeps_the_finished_members_infos():
    venv = make_batched_vec_env(ID, 3, seed=0, step_infos=False, **KW)
    venv.reset()
    for _ in range(20):                                 # the 20-step horizon
        _, _, done, infos = venv.step(np.zeros((3, 3), np.float32))
        for i, info in enumerate(infos):
            assert bool(info) == bool(done[i])
    assert done.all() and infos[0]["TimeLimit.truncated"] and "in_target" in infos[0]


def test_rejects_what_is_not_a_vector_env():
    with pytest.raises(ValueError, match="VectorEnv"):
        BatchedVecEnv(gym.make(ID, fidelity="simplified"))


@pytest.mark.integration
def test_sb3_ppo_trains_on_it_and_on_the_particle_fidelity():
    """PPO's rollouts, auto-resets and update run on both fidelities' batched envs."""
    from stable_baselines3 import PPO
    from stable_baselines3.common.vec_env import VecMonitor

    for kw in (dict(fidelity="simplified", reward_mode="dense"),
               dict(fidelity="particles", resolution=64, horizon=0.5)):
        venv = VecMonitor(make_batched_vec_env(ID, 2, seed=0, **kw))
        model = PPO("MlpPolicy", venv, n_steps=32, batch_size=32, n_epochs=1, seed=0, device="cpu")
        model.learn(96)
        assert model.num_timesteps >= 64
        venv.close()
