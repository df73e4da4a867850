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


def run_vector_against_singles(B: int, steps: int, split: list, **kw) -> dict:
    """Step the vector env (the array engine) and B single envs (the reference engine) under the
    same actions: even members follow the scripted agent, odd ones random actions; finished
    members reset (the vector env's next-step autoreset, the singles' reset with the next seed).
    Asserts every observation, reward, end flag and info value equal; returns counts of what
    was exercised."""
    rng = np.random.default_rng(0)
    vec = gym.make_vec("taigym/Pour-v0", num_envs=B, vectorization_mode="vector_entry_point",
                       fidelity="simplified", **kw)
    singles = [make(**kw) for _ in range(B)]
    obs_v, info_v = vec.reset(seed=list(range(B)), options={"task": split})
    obs, infos = zip(*(e.reset(seed=i, options={"task": split[i]}) for i, e in enumerate(singles)))
    obs, infos = list(obs), list(infos)
    np.testing.assert_array_equal(obs_v, np.stack(obs))
    agents = [taigym.agents.make("scripted", e) for e in singles]
    for i, a in enumerate(agents):
        a.reset(seed=i)
    done = np.zeros(B, bool)
    seen = {"clipped": 0, "collision": 0, "ends": 0, "poured": 0}
    for _ in range(steps):
        actions = np.stack([agents[i].act(obs[i], infos[i]) if i % 2 == 0 else rng.uniform(-1, 1, 3)
                            for i in range(B)]).astype(np.float32)
        obs_v, rew_v, term_v, trunc_v, info_v = vec.step(actions)
        for i, e in enumerate(singles):
            if done[i]:
                (obs[i], infos[i]), r, term, trunc = e.reset(), 0.0, False, False
                agents[i].reset(seed=i)
            else:
                obs[i], r, term, trunc, infos[i] = e.step(actions[i])
            done[i] = term or trunc
            np.testing.assert_allclose(obs_v[i], obs[i], rtol=1e-6, atol=1e-7)
            assert rew_v[i] == pytest.approx(r, rel=1e-9, abs=1e-12)
            assert (term_v[i], trunc_v[i]) == (term, trunc)
            assert set(info_v) == set(infos[i]) | {"_" + k for k in infos[i]}
            for k, v in infos[i].items():
                np.testing.assert_allclose(info_v[k][i], v, rtol=1e-9, atol=1e-12, err_msg=k)
        seen["clipped"] += int(info_v["action_clipped"].sum())
        seen["collision"] += int(info_v["collision"].sum())
        seen["ends"] += int(done.sum())
        seen["poured"] += int((info_v["in_target"] > 0).sum())
    return seen


@pytest.mark.parametrize("reward_mode,obs_mode,pivot", [("rp", "features", "frame"),
                                                        ("dense", "features", "lip"),
                                                        ("sparse", "lip", "frame")])
def test_vector_env_matches_single_envs(reward_mode, obs_mode, pivot):
    """The vector env's array engine gives the single envs' transitions, member for member:
    observations, rewards, episode ends and infos, through pours, collisions and resets."""
    seen = run_vector_against_singles(12, 160, list(tasks("pour", split="eval")[:12]),
                                      reward_mode=reward_mode, obs_mode=obs_mode, pivot=pivot)
    assert seen["clipped"] > 0 and seen["ends"] > 0 and seen["poured"] > 0
    assert seen["collision"] > 0 or pivot == "lip"      # (the scripted agent's moves assume the frame pivot)


def test_vector_env_matches_single_envs_resetting_to_seen_tasks():
    """Resets to tasks seen before (a fixed split's) start from the kept start, not a rebuilt
    one: still the single envs' transitions."""
    split = list(tasks("pour", split="eval")[:6])
    seen = run_vector_against_singles(6, 300, split, task_split="eval", horizon=1.0)
    assert seen["ends"] >= 60


def test_vector_env_matches_single_envs_with_obstacles():
    """Moves near an obstacle (the reference's swept check) and packets blocked by one."""
    from taigym.envs.pour_tasks import pan_manocha_2016_scenes

    scenes = pan_manocha_2016_scenes()
    split = [scenes["block"], scenes["far"], scenes["block"], scenes["far"]]
    seen = run_vector_against_singles(4, 120, split, reward_mode="dense")
    assert seen["clipped"] > 0


def test_batched_liquid_steps_as_the_single_model():
    """``SimplifiedLiquidBatch`` steps B containers as B ``SimplifiedLiquid`` objects do,
    through tilts both ways, slosh and emptying."""
    from taigym.models.simplified import SimplifiedLiquid, SimplifiedLiquidBatch, fit_for

    split = tasks("pour", split="eval")[:24]
    batch, singles = SimplifiedLiquidBatch(len(split)), []
    for b, t in enumerate(split):
        shape = t.source_shape(0.0125)
        fit = fit_for(t.source_container, t.viscosity)
        vel = tuple(t.source_velocity) if t.liquid_velocity == "follow" else (0.0, 0.0)
        volume = shape.liquid_area(t.fill)
        singles.append(SimplifiedLiquid(shape, volume, fit, velocity=vel))
        batch.set(b, shape, volume, fit, velocity=vel)
    rng = np.random.default_rng(0)
    pose = np.tile([0.3, 0.3, 0.0], (len(split), 1))
    idx = np.arange(len(split))
    poured = 0.0
    for _ in range(60):
        move = rng.uniform(-1, 1, pose.shape) * [0.025, 0.025, 0.1] + [0.0, 0.0, -0.04]
        out = batch.step(pose + move, move / 0.05, pose[:, 2].copy(), 0.05, idx)
        for b, liquid in enumerate(singles):
            o = liquid.step((pose + move)[b].tolist(), (move / 0.05)[b].tolist(), float(pose[b, 2]), 0.05)
            assert out["volume"][b] == pytest.approx(o.volume, rel=1e-9, abs=1e-15)
            assert out["speed"][b] == pytest.approx(o.speed, rel=1e-9, abs=1e-12)
            if o.volume > 0.0:
                np.testing.assert_allclose(out["start"][b], o.start, rtol=1e-9)
                np.testing.assert_allclose(out["velocity"][b], o.velocity, rtol=1e-9, atol=1e-12)
                np.testing.assert_allclose(out["carried"][b], o.carried, rtol=1e-9, atol=1e-12)
            assert batch.volume[b] == pytest.approx(liquid.volume, rel=1e-9, abs=1e-15)
            poured += o.volume
        pose = pose + move
    assert poured > 0.0 and batch.volume.max() < batch.capacity.max()


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


# ---------------------------------------------------------------------- reward modes
def episode(env, task, policy, seed=0):
    """(rewards, infos) of one episode under ``policy(obs, info)``."""
    obs, info = env.reset(seed=seed, options={"task": task})
    rewards, infos, done = [], [info], False
    while not done:
        obs, r, term, trunc, info = env.step(policy(obs, info))
        rewards.append(r)
        infos.append(info)
        done = term or trunc
    return np.array(rewards), infos


@pytest.mark.parametrize("mode", ["rp", "dense", "sparse"])
def test_reward_is_the_sum_of_its_terms_in_info(mode):
    from taigym.envs.pour_reward import REWARD_TERMS

    env = make(reward_mode=mode)
    agent = taigym.agents.make("scripted", env)
    agent.reset(seed=0)
    rewards, infos = episode(env, tasks("pour", split="eval")[0], agent.act)
    for r, info in zip(rewards, infos[1:]):
        terms = {k[len("reward_"):]: v for k, v in info.items() if k.startswith("reward_")}
        assert tuple(terms) == REWARD_TERMS[mode]
        assert r == pytest.approx(sum(terms.values()), abs=1e-12)
    assert {k for k in infos[0] if k.startswith("reward_")} == {"reward_" + t for t in REWARD_TERMS[mode]}


def test_dense_shaping_adds_minus_phi0_whatever_the_policy():
    """Ng et al.'s invariance: with the learner's discount equal to ``shaping_gamma`` the shaped
    return is the rp return minus Phi(s_0), for a pour and for random actions alike, so the
    optimal policies are the same."""
    from taigym.envs.pour_reward import potentials

    gamma = 0.97
    task = tasks("pour", split="eval")[2]
    S, T = task.source_shape(), task.target_shape()
    phi0 = sum(potentials(task.source_pose, task.target_pose_at(0.0)[:2], task.target_velocity_at(0.0)[0],
                          S.lips, T.opening_centre, 0.5 * T.width))
    assert phi0 > 0.0
    random_actions = iter(np.random.default_rng(1).uniform(-1, 1, (200, 3)))
    for scripted in (True, False):
        env_rp, env_dense = make(reward_mode="rp"), make(reward_mode="dense", shaping_gamma=gamma)
        agent = taigym.agents.make("scripted", env_rp)
        agent.reset(seed=0)
        policy = agent.act if scripted else lambda o, i: next(random_actions)
        actions = []
        r_rp, _ = episode(env_rp, task, lambda o, i: actions.append(policy(o, i)) or actions[-1])
        it = iter(actions)
        r_dense, infos = episode(env_dense, task, lambda o, i: next(it))
        disc = gamma ** np.arange(len(r_rp))
        assert len(r_dense) == len(r_rp)
        assert float(disc @ (r_dense - r_rp)) == pytest.approx(-phi0, abs=1e-9)
        assert infos[-1]["reward_approach"] != 0.0 or infos[-1]["reward_lean"] != 0.0


def test_dense_lean_term_rewards_a_tilt_only_over_the_target():
    """Tilting S towards T before any liquid leaves earns the lean term when S's pouring lip is
    over T's opening, nothing when T is far away."""
    over = PourTask(source_pose=(0.45, 0.2, 0.0), target_position=(0.53, 0.05), target_width=0.2,
                    fill=0.3)
    far = dataclasses.replace(over, target_position=(0.66, 0.05), target_width=0.08)
    for task, expect in ((over, True), (far, False)):
        env = make(reward_mode="dense")
        env.reset(options={"task": task})
        _, _, _, _, info = env.step(np.array([0.0, 0.0, -0.5], np.float32))
        assert info["in_source"] == 1.0
        assert info["reward_lean"] > 0.005 if expect else info["reward_lean"] == 0.0


def test_sparse_reward_is_one_at_the_end_of_a_success_only():
    env = make(reward_mode="sparse")
    agent = taigym.agents.make("scripted", env)
    agent.reset(seed=0)
    rewards, infos = episode(env, tasks("pour", split="eval")[0], agent.act)
    assert infos[-1]["success"] and rewards[-1] == 1.0 and rewards[:-1].sum() == 0.0
    rng = np.random.default_rng(0)
    rewards, infos = episode(env, tasks("pour", split="eval")[0], lambda o, i: rng.uniform(-1, 1, 3))
    assert not infos[-1]["success"] and rewards.sum() == 0.0


@pytest.mark.parametrize("kw,name", [({"reward_mode": "shaped"}, "reward_mode"),
                                     ({"shaping_gamma": 1.5}, "shaping_gamma"),
                                     ({"shaping_gamma": float("nan")}, "shaping_gamma")])
def test_bad_reward_arguments_raise_value_error_naming_them(kw, name):
    with pytest.raises(ValueError, match=name):
        make(**kw)


def test_sampled_tasks_leave_no_tables_on_disk(tmp_path, monkeypatch):
    """A task drawn from the continuous distribution never comes again: its outflow tables are
    computed, not written to the disk cache (0.2 MB per episode otherwise); a given task's are."""
    monkeypatch.setenv("TAIGYM_CACHE_DIR", str(tmp_path))
    env = make()
    vec = gym.make_vec("taigym/Pour-v0", num_envs=3, vectorization_mode="vector_entry_point",
                       fidelity="simplified")
    for seed in range(3):
        env.reset(seed=seed)
    vec.reset(seed=0)
    assert not list(tmp_path.rglob("*.npz"))
    env.reset(seed=0, options={"task": upright_task(source_width=0.0812)})
    assert len(list(tmp_path.rglob("*.npz"))) == 1


# ---------------------------------------------------------------------- the lip pivot
def test_lip_pivot_tilts_about_the_pouring_lip():
    """With ``pivot="lip"`` a pure tilt keeps the pouring lip where it is (either way) and a
    translation moves the lip by the action's step; a steady tilt from over a static T pours
    it all into T. With the frame pivot the same tilt swings the lip back over S's body."""
    from taigym.envs.pour_tasks import over_target

    task = upright_task(fill=0.6)
    S = task.source_shape()
    for pivot, moves in (("lip", False), ("frame", True)):
        for sign, lip in ((-1.0, S.lips[1]), (1.0, S.lips[0])):
            env = make(pivot=pivot)
            _, info = env.reset(options={"task": task})
            start = None
            for _ in range(12):
                _, _, _, _, info = env.step(np.array([0.0, 0.0, 0.8 * sign], np.float32))
                x, y, th = info["source_pose"]
                world = (x + np.cos(th) * lip[0] - np.sin(th) * lip[1], y + np.sin(th) * lip[0] + np.cos(th) * lip[1])
                start = world if start is None else start
            assert abs(th) > 0.9
            assert (np.hypot(world[0] - start[0], world[1] - start[1]) > 0.02) == moves
    env = make(pivot="lip")
    _, info = env.reset(options={"task": upright_task(fill=0.6)})
    x0 = info["source_pose"][0] + S.lips[1][0]
    _, _, _, _, info = env.step(np.array([1.0, 0.0, -1.0], np.float32))
    x, y, th = info["source_pose"]
    assert x + np.cos(th) * S.lips[1][0] - np.sin(th) * S.lips[1][1] == pytest.approx(x0 + 0.025)
    still = dataclasses.replace(tasks("pour", split="eval")[1], target_velocity=(0.0, 0.0))
    env.reset(options={"task": over_target(still)})
    for _ in range(100):
        _, _, term, trunc, info = env.step(np.array([0.0, 0.0, -0.4], np.float32))
        if term or trunc:
            break
    assert info["in_target"] > 0.9 and info["success"]


def test_bad_pivot_raises_value_error_naming_it():
    with pytest.raises(ValueError, match="pivot"):
        make(pivot="bottom")


def test_over_target_starts_the_pouring_lip_over_t():
    from taigym.envs.pour_tasks import DOMAIN, over_target

    for task in tasks("pour", split="train")[:50]:
        moved = over_target(task)
        S, T = moved.source_shape(), moved.target_shape()
        lip_x = moved.source_pose[0] + S.lips[1][0]
        t_x = moved.target_position[0] + T.opening_centre[0]
        walls = np.asarray(S.walls)[:, 0] + moved.source_pose[0]
        assert walls.min() - S.radius > 0.0 and walls.max() + S.radius < DOMAIN[0]
        at_aim = abs(lip_x - (t_x - 0.125 * T.width)) < 1e-9
        at_edge = min(walls.min() - S.radius, DOMAIN[0] - walls.max() - S.radius) == pytest.approx(0.005)
        assert at_aim or at_edge
        assert moved.source_pose[1:] == task.source_pose[1:] and moved.fill == task.fill
    with pytest.raises(ValueError, match="aim"):
        over_target(tasks("pour", split="train")[0], aim=2.0)
