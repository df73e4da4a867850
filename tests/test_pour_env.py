"""taigym/Pour-v0: API, tasks, determinism, vector env, rendering and agents (small grids)."""

import dataclasses
import json
import subprocess
import sys

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import taigym.agents
from taigym.envs import tasks
from taigym.sim.geometry import densify
from taigym.envs.pour import (ACTION_SCALE, N_STATE, OBSTACLE_HANDLES, PARKED_POSE, SETTLE_SPEED,
                               PourEnv, to_world)
from taigym.envs.pour_tasks import DOMAIN, MAX_OBSTACLES, PourTask, fingerprint, reflect, sample_task
from taigym.envs.render import OBSTACLE_COLOUR, render_scene
from taigym.sim import Box

RES = 64  # 12.5 mm cells: coarse but fast; the physics is checked elsewhere
KW = dict(resolution=RES)


def make(**kw):
    return gym.make("taigym/Pour-v0", **{**KW, **kw})


@pytest.fixture(scope="module")
def env():
    e = make()
    yield e
    e.close()


def easy_task(**kw):
    """S right above a static T: the scripted agent should pour it cleanly."""
    base = dict(source_container="rect", source_width=0.08, source_height=0.10,
                target_container="rect", target_width=0.12, target_height=0.10,
                source_pose=(0.3, 0.25, 0.0), target_position=(0.42, 0.05),
                target_velocity=(0.0, 0.0), fill=0.5, viscosity=1e-3)
    base.update(kw)
    return PourTask(**base)


def rollout(e, seed, actions, task=None):
    obs, info = e.reset(seed=seed, options={"task": task} if task else None)
    out = [(obs, 0.0, False, False, info)]
    for a in actions:
        out.append(e.step(a))
    return out


# ---------------------------------------------------------------------- registration, args
def test_registration_does_not_initialise_taichi():
    code = ("import sys, gymnasium as gym, taigym; "
            "e = gym.make('taigym/Pour-v0'); "
            "assert 'taichi' not in sys.modules, 'taichi imported'; "
            "print(gym.spec('taigym/Pour-v0').vector_entry_point)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "PourVectorEnv" in out.stdout


@pytest.mark.parametrize("kw, name", [
    (dict(container="teapot"), "container"), (dict(target_container=3), "target_container"),
    (dict(fill=0.0), "fill"), (dict(fill=1.5), "fill"), (dict(viscosity=-1e-3), "viscosity"),
    (dict(viscosity=2.0), "viscosity"), (dict(target_velocity=(5.0, 0.0)), "target_velocity"),
    (dict(target_velocity="fast"), "target_velocity"), (dict(liquid_velocity="warm"), "liquid_velocity"),
    (dict(obs_mode="pixels"), "obs_mode"), (dict(resolution=16), "resolution"),
    (dict(resolution=100.5), "resolution"), (dict(render_mode="ansi"), "render_mode"),
    (dict(horizon=0.0), "horizon"), (dict(max_particles=0), "max_particles"),
    (dict(n_particles=0), "n_particles"), (dict(heightfield_bins=1), "heightfield_bins"),
    (dict(image_size=(4, 4)), "image_size"), (dict(spill_penalty=-1), "spill_penalty"),
    (dict(task_split="test"), "task_split"), (dict(arch="tpu"), "arch"), (dict(colour="red"), "colour"),
    (dict(fidelity="coarse"), "fidelity"), (dict(task_split="eval", fill=0.5), "task_split"),
])
@pytest.mark.filterwarnings("ignore:.*render_mode")
def test_invalid_arguments_raise_value_error_naming_them(kw, name):
    with pytest.raises(ValueError, match=name):
        gym.make("taigym/Pour-v0", **kw)


def test_too_small_capacity_fails_at_reset_naming_max_particles():
    e = make(max_particles=10)
    try:
        with pytest.raises(ValueError, match="max_particles"):
            e.reset(seed=0)
        assert e.unwrapped.world is None  # checked before a solver is built
    finally:
        e.close()


# ---------------------------------------------------------------------- tasks
def test_task_round_trips_and_validates():
    t = tasks("pour", "eval")[3]
    d = t.to_dict()
    assert PourTask.from_dict(json.loads(json.dumps(d))) == t
    v = dataclasses.replace(t, viscosity=0.1)
    assert v.viscosity == 0.1 and v.fill == t.fill
    with pytest.raises(ValueError, match="fill"):
        dataclasses.replace(t, fill=0.0)
    with pytest.raises(ValueError, match="viscosity"):
        dataclasses.replace(t, viscosity=-1.0)
    with pytest.raises(ValueError, match="source_container"):
        dataclasses.replace(t, source_container="mug")
    with pytest.raises(ValueError, match="unknown"):
        PourTask.from_dict({**d, "colour": 1})
    for name in ("source_container", "fill", "viscosity", "target_velocity"):
        assert hasattr(t, name)


def test_splits_are_fixed_disjoint_and_in_range():
    train, ev = tasks("pour", "train"), tasks("pour", "eval")
    assert len(train) == 1000 and len(ev) == 100
    assert not set(train) & set(ev)
    assert len(set(train)) == 1000
    # identical on every machine: a fingerprint of the eval split (update only on purpose)
    assert fingerprint(ev) == EVAL_DIGEST, fingerprint(ev)
    assert fingerprint(train) == TRAIN_DIGEST, fingerprint(train)
    for t in train[:200]:
        assert 0.3 <= t.fill <= 0.8 and 1e-3 <= t.viscosity <= 0.1
        assert np.hypot(*t.target_velocity) <= 0.3 + 1e-9
        assert 0.05 - 1e-9 <= t.target_position[0] - t.source_pose[0] <= 0.40 + 1e-9
        s = t.source_shape(0.025)
        assert 0.06 - 1e-9 <= max(s.interior[:, 0].max() * 2, s.width) <= 0.10 + 1e-9
        assert t.target_shape().interior_area >= 1.5 * s.liquid_area(t.fill) * 0.999 or \
            t.target_height == pytest.approx(0.12)
    with pytest.raises(ValueError, match="split"):
        tasks("pour", "test")
    with pytest.raises(ValueError, match="family"):
        tasks("juggle")


EVAL_DIGEST = "bbcdf3f6359fa4ae4d3fb3b965a4c35d7ba88f1e21047eda344696f0c218a1a6"
TRAIN_DIGEST = "c70abce4ed1b54e420d123ece66fbb727a4667d8ad5a3de29d13d26a60aa9316"


def test_sampler_fixed_variables_keep_the_others():
    a = sample_task(np.random.default_rng(5))
    b = sample_task(np.random.default_rng(5), fill=0.42, viscosity=0.2, target_velocity=(0.0, 0.0))
    assert b.fill == 0.42 and b.viscosity == 0.2 and b.target_velocity == (0.0, 0.0)
    assert b.source_pose[0] == a.source_pose[0] and b.source_container == a.source_container


def test_target_trajectory_bounces_inside_its_box():
    t = tasks("pour", "train")[0]
    x_lo, x_hi, y_lo, y_hi = t.target_bounds
    for s in np.linspace(0, 5, 101):
        x, y, th = t.target_pose_at(s)
        assert x_lo - 1e-12 <= x <= x_hi + 1e-12 and y_lo - 1e-12 <= y <= y_hi + 1e-12 and th == 0
    assert reflect(0.9, 1.0, 0.3, 0.0, 1.0) == pytest.approx((0.8, -1.0))


# ---------------------------------------------------------------------- Gymnasium API
@pytest.mark.parametrize("obs_mode", ["features", "lip", "particles", "rgb"])
def test_check_env_passes(obs_mode):
    e = make(obs_mode=obs_mode, render_mode="rgb_array")
    try:
        check_env(e.unwrapped)
    finally:
        e.close()


def test_spaces_and_info_every_step(env):
    assert env.action_space.shape == (3,) and env.action_space.dtype == np.float32
    assert np.all(np.isfinite(env.observation_space.low)) and np.all(np.isfinite(env.observation_space.high))
    obs, info = env.reset(seed=1)
    keys = {"in_source", "in_target", "spilled", "in_flight", "success", "sim_unstable"}
    assert keys <= set(info)
    assert info["in_source"] == pytest.approx(1.0) and not info["success"]
    for _ in range(3):
        obs, r, term, trunc, info = env.step(env.action_space.sample())
        assert env.observation_space.contains(obs)
        assert keys <= set(info) and np.isfinite(r)
        total = info["in_source"] + info["in_target"] + info["spilled"] + info["in_flight"]
        assert total == pytest.approx(1.0, abs=1e-9)


def test_seeded_resets_and_steps_are_reproducible(env):
    actions = [np.array([0.5, -0.2, -0.8], np.float32)] * 6
    a = rollout(env, 7, actions)
    b = rollout(env, 7, actions)
    e2 = make()  # a second env (its own world) gives the same transitions too
    try:
        c = rollout(e2, 7, actions)
    finally:
        e2.close()
    for x, y, z in zip(a, b, c):
        np.testing.assert_array_equal(x[0], y[0])
        np.testing.assert_array_equal(x[0], z[0])
        assert x[1] == y[1] == z[1]
    assert not np.array_equal(rollout(env, 8, [])[0][0], a[0][0])


def test_given_task_runs_exactly_and_kwargs_fix_variables(env):
    t = easy_task(liquid_velocity="follow", source_velocity=(0.1, 0.0))
    obs, info = env.reset(seed=0, options={"task": t.to_dict()})
    assert env.unwrapped.task == t
    np.testing.assert_allclose(info["source_pose"], t.source_pose)
    e = make(fill=0.35, container="frustum", target_velocity=(0.0, 0.0), liquid_velocity="zero")
    try:
        for s in range(3):
            e.reset(seed=s)
            task = e.unwrapped.task
            assert task.fill == 0.35 and task.source_container == "frustum"
            assert task.target_velocity == (0.0, 0.0) and task.liquid_velocity == "zero"
    finally:
        e.close()
    e = make(task_split="eval")
    try:
        e.reset(seed=0)
        assert e.unwrapped.task in tasks("pour", "eval")
    finally:
        e.close()


def test_moves_into_the_target_or_the_floor_are_clipped(env):
    env.reset(seed=0, options={"task": easy_task(source_pose=(0.42, 0.20, 0.0))})
    u = env.unwrapped
    for _ in range(12):  # S is right above T: pushing down must stop on T's rim
        _, _, _, _, info = env.step(np.array([0.0, -1.0, 0.0], np.float32))
        assert not info["collision"]
    assert info["action_clipped"]
    pen_t, pen_e, pen_o = u._batch._penetration(u._batch.members[0], info["source_pose"],
                                                info["target_pose"])
    assert pen_t == 0.0 and pen_e == 0.0 and pen_o == 0.0
    env.reset(seed=0, options={"task": easy_task(source_pose=(0.15, 0.15, 0.0))})
    for _ in range(12):  # beside T: down to the floor and no further
        _, _, _, _, info = env.step(np.array([0.0, -1.0, 0.0], np.float32))
    y = info["source_pose"][1]
    assert y - u.source_shape.radius > -1e-9 and info["action_clipped"]
    _, _, _, _, info2 = env.step(np.array([1.0, -1.0, 0.0], np.float32))  # x still moves
    assert info2["source_pose"][0] == pytest.approx(info["source_pose"][0] + ACTION_SCALE[0])


def test_reward_terms_and_truncation():
    e = make(horizon=0.25)
    try:
        obs, info = e.reset(seed=3)
        a0 = np.zeros(3, np.float32)
        prev = e.unwrapped._batch.members[0].prev_action.copy()
        _, r, term, trunc, info = e.step(np.ones(3, np.float32))
        assert info["reward_smooth"] == pytest.approx(-1e-3 * np.sum((1.0 - prev) ** 2))
        assert r == pytest.approx(info["reward_target"] + info["reward_spill"] + info["reward_smooth"])
        n = 1
        while not (term or trunc):
            _, r, term, trunc, info = e.step(a0)
            n += 1
        assert trunc and not term and n == 5 and info["time"] == pytest.approx(0.25)
    finally:
        e.close()


def test_dense_and_sparse_rewards_on_the_particle_fidelity():
    """The particle env's reward modes: each step's reward is the sum of its info terms; dense
    adds F = gamma Phi(s') - Phi(s) per potential, Phi = 0 at the end (here a truncation), so the
    shaping's discounted sum is -Phi(s_0); sparse gives 0 for an episode that is no success."""
    from taigym.envs.pour_reward import potentials

    gamma = 0.9
    task = tasks("pour", split="eval")[0]
    S, T = task.source_shape(), task.target_shape()
    phi0 = sum(potentials(task.source_pose, task.target_pose_at(0.0)[:2], task.target_velocity_at(0.0)[0],
                          S.lips, T.opening_centre, 0.5 * T.width))
    for mode, terms in (("dense", ("target", "spill", "smooth", "approach", "lean")), ("sparse", ("success",))):
        e = make(horizon=0.4, reward_mode=mode, shaping_gamma=gamma, pivot="lip")
        try:
            e.reset(seed=0, options={"task": task})
            done, shaped, k = False, 0.0, 0
            while not done:
                _, r, term, trunc, info = e.step(np.array([0.6, -0.2, -0.8], np.float32))
                assert tuple(key[7:] for key in info if key.startswith("reward_")) == terms
                assert r == pytest.approx(sum(info["reward_" + t] for t in terms), abs=1e-12)
                if mode == "dense":
                    shaped += gamma ** k * (info["reward_approach"] + info["reward_lean"])
                else:
                    assert r == 0.0
                done, k = term or trunc, k + 1
            assert trunc and k == 8
            if mode == "dense":
                assert shaped == pytest.approx(-phi0, abs=1e-9)
        finally:
            e.close()


def test_solver_blow_up_truncates_with_flag(env, monkeypatch):
    env.reset(seed=0)
    world = env.unwrapped.world
    monkeypatch.setattr(world, "unstable_members", lambda: np.array([True]))
    obs, r, term, trunc, info = env.step(np.zeros(3, np.float32))
    assert trunc and not term and info["sim_unstable"]
    assert env.observation_space.contains(obs) and np.isfinite(r)
    monkeypatch.undo()
    _, info = env.reset(seed=0)
    assert not info["sim_unstable"]


# ---------------------------------------------------------------------- rendering
def test_renderer_draws_walls_and_particles():
    from taigym.sim import container

    c = container("rect", 0.1, 0.1, wall_thickness=0.02)
    pos = np.array([[0.4, 0.25]])
    img = render_scene((100, 160), DOMAIN, [(c, (0.2, 0.1, 0.0), (0, 0, 0))], pos,
                       np.zeros((1, 2)), particle_size=0.02)
    assert img.shape == (100, 160, 3) and img.dtype == np.uint8
    # left wall centre at x = 0.2 - 0.06 m, y = 0.15 m -> column 28, row 70
    assert tuple(img[70, 28]) == (0, 0, 0)
    assert tuple(img[50, 80]) != tuple(img[5, 5])  # the particle
    assert tuple(img[40, 40]) == tuple(img[5, 5])  # inside the container: background


def test_render_rgb_array_and_record_video(tmp_path):
    pytest.importorskip("moviepy")
    e = make(render_mode="rgb_array", horizon=0.2)
    try:
        from gymnasium.wrappers import RecordVideo

        v = RecordVideo(e, str(tmp_path / "videos"), episode_trigger=lambda i: True, disable_logger=True)
        v.reset(seed=0)
        frame = e.render()
        assert frame.shape == (320, 512, 3) and frame.dtype == np.uint8
        done = False
        while not done:
            _, _, term, trunc, _ = v.step(v.action_space.sample())
            done = term or trunc
        v.close()
        assert list((tmp_path / "videos").glob("*.mp4"))
    finally:
        e.close()


# ---------------------------------------------------------------------- vector env
def test_vector_env_matches_single_envs():
    B, steps, horizon = 8, 5, 0.1  # horizon 2 steps: every member truncates and autoresets
    rng = np.random.default_rng(0)
    actions = rng.uniform(-1, 1, (steps, B, 3)).astype(np.float32)
    venv = gym.make_vec("taigym/Pour-v0", num_envs=B, vectorization_mode="vector_entry_point",
                        horizon=horizon, **KW)
    try:
        vobs, vinfo = venv.reset(seed=100)
        v_out = [venv.step(actions[k]) for k in range(steps)]
    finally:
        venv.close()
    e = make(horizon=horizon)
    try:
        for b in range(B):
            obs, info = e.reset(seed=100 + b)
            np.testing.assert_array_equal(obs, vobs[b])
            done = False
            for k in range(steps):
                vo, vr, vterm, vtrunc, vi = v_out[k]
                if done:  # NEXT_STEP autoreset: this step returns the reset
                    obs, info = e.reset()
                    r, term, trunc = 0.0, False, False
                else:
                    obs, r, term, trunc, info = e.step(actions[k, b])
                np.testing.assert_array_equal(obs, vo[b])
                assert r == vr[b] and term == vterm[b] and trunc == vtrunc[b]
                assert info["in_target"] == vi["in_target"][b]
                done = term or trunc
    finally:
        e.close()


# ---------------------------------------------------------------------- obstacles
BLOCK = (0.36, 0.15, 0.04, 0.30)  # Pan & Manocha 2016's tall block: 4 cm wide, 30 cm tall, on the floor


def block_task(block=BLOCK, **kw):
    """S beside the floor, left of a tall block; a static T right of it."""
    base = dict(source_container="rect", source_width=0.08, source_height=0.10,
                target_container="rect", target_width=0.12, target_height=0.10,
                source_pose=(0.2, 0.15, 0.0), target_position=(0.65, 0.05),
                target_velocity=(0.0, 0.0), fill=0.5, viscosity=1e-3, obstacles=(block,))
    base.update(kw)
    return PourTask(**base)


def test_obstacle_task_round_trips_and_obstacle_free_tasks_are_unchanged():
    t = block_task(obstacles=(BLOCK, (0.7, 0.4, 0.05, 0.02)))
    d = json.loads(json.dumps(t.to_dict()))
    assert d["obstacles"] == [list(BLOCK), [0.7, 0.4, 0.05, 0.02]]
    assert PourTask.from_dict(d) == t and hash(PourTask.from_dict(d)) == hash(t)
    (box, pose), _ = t.obstacle_boxes()
    assert box == Box(0.04, 0.30) and pose.tolist() == [0.36, 0.15, 0.0]
    # dicts written before obstacles existed still load; sampled tasks have none (the splits'
    # fingerprints are checked above)
    old = easy_task().to_dict()
    del old["obstacles"]
    assert PourTask.from_dict(old) == easy_task() and easy_task().obstacles == ()
    assert sample_task(np.random.default_rng(5)).obstacles == ()
    assert fingerprint([t]) != fingerprint([dataclasses.replace(t, obstacles=())])


@pytest.mark.parametrize("obstacles", [
    [(0.3, 0.1, 0.04)], [BLOCK] * (MAX_OBSTACLES + 1), [(0.3, float("nan"), 0.04, 0.2)],
    [(0.3, 0.1, 0.001, 0.2)], [(0.3, 0.3, 0.04, 0.6)], [(0.79, 0.1, 0.04, 0.2)],
    [(0.3, 0.05, 0.04, 0.2)], BLOCK, "block", 3.0,
])
def test_bad_obstacles_raise_value_error_naming_them(obstacles):
    with pytest.raises(ValueError, match="obstacles"):
        block_task(obstacles=obstacles)


def test_obstacles_through_s_or_t_path_are_refused_at_reset(env):
    with pytest.raises(ValueError, match=r"obstacles\[0\].*source"):  # S starts inside it
        env.reset(options={"task": block_task((0.2, 0.15, 0.04, 0.3))})
    with pytest.raises(ValueError, match=r"obstacles\[0\].*target"):  # T drives through it
        env.reset(options={"task": block_task(target_velocity=(0.2, 0.0))})
    with pytest.raises(ValueError, match=r"width and height must be in \[0.005, 0.5\]"):
        block_task((0.3, 0.1, 0.001, 0.2))


@pytest.mark.parametrize("width", [0.04, 0.005])
def test_moves_into_an_obstacle_are_clipped(env, width):
    block = (0.36, 0.15, width, 0.30)
    env.reset(seed=0, options={"task": block_task(block)})
    u = env.unwrapped
    S, box = u.source_shape, Box(width, 0.30)
    wall = densify(S.walls, 5e-4)  # S's wall centreline every 0.5 mm
    clipped, poses = [], []
    for k in range(12):  # at full speed towards the block, bobbing and rocking
        a = np.array([1.0, 0.3 * (-1) ** k, -1.0 if k % 4 < 2 else 1.0], np.float32)
        _, _, _, _, info = env.step(a)
        gap = box.sdf(to_world(wall, info["source_pose"]) - block[:2]).min() - S.radius
        assert gap > -0.08 * S.radius, (k, gap)  # the clip's sampling tolerance (docstring)
        assert not info["collision"]
        clipped.append(info["action_clipped"])
        poses.append(info["source_pose"])
    assert all(clipped[-6:]) and poses[-1][0] < block[0]
    assert poses[-1][1] != poses[-2][1]  # the blocked x does not stop y
    # a displacement longer than any action's, to a pose clear of the block on its far side,
    # must not jump through it either
    b, m = u._batch, u._batch.members[0]
    far = m.s_pose + (0.175, 0.0, 0.0)
    assert b._penetration(m, far, m.t_pose) == (0.0, 0.0, 0.0)
    pose, was_clipped, _ = b._clip_move(m, np.array([0.175, 0.0, 0.0]), m.t_pose)
    assert was_clipped and pose[0] == m.s_pose[0]


def test_liquid_poured_onto_a_block_stays_out_of_it_and_out_of_t(env):
    block = (0.36, 0.10, 0.20, 0.20)  # 20 cm wide and tall, between S and T: T is shielded
    task = block_task(block, source_pose=(0.25, 0.33, 0.0), target_position=(0.68, 0.05))
    env.reset(seed=0, options={"task": task})
    batch, box = env.unwrapped._batch, Box(block[2], block[3])
    deepest = np.inf
    # tilt to -1.5 rad (S's lip ends up above the block) and hold 2.5 s: single drops that land
    # on the block's top slide along it at up to 0.1 m/s for over a second
    for k in range(65):
        prev = batch.positions(0)
        _, _, _, _, info = env.step(np.array([0.0, 0.0, -1.0 if k < 15 else 0.0], np.float32))
        deepest = min(deepest, box.sdf(batch.positions(0) - block[:2]).min())
        assert info["in_target"] == 0.0
    assert info["in_source"] < 0.5 and deepest > -1e-3  # poured; no particle inside the block
    # liquid resting on the block's top (above T's rim) is slow, hence spilled, not in flight
    x = batch.positions(0)
    on_top = (np.abs(x[:, 0] - block[0]) <= 0.5 * block[2]) & (x[:, 1] >= block[1] + 0.5 * block[3])
    speed = np.linalg.norm(x - prev, axis=1) / env.unwrapped.dt
    assert on_top.sum() >= 5 and np.mean(speed[on_top] < SETTLE_SPEED) >= 0.8
    assert info["spilled"] > 0.5 and info["in_flight"] < 0.05


def test_obstacles_in_observation_and_render(env):
    obs, _ = env.reset(seed=0, options={"task": block_task()})
    assert env.observation_space.contains(obs) and N_STATE == 32 + 4 * MAX_OBSTACLES
    np.testing.assert_allclose(obs[32:36], BLOCK, rtol=1e-6)
    assert not obs[36:N_STATE].any()
    img = env.unwrapped._batch.render(0, (320, 512))
    col, row = int(BLOCK[0] / DOMAIN[0] * 512), int((1 - 0.2 / DOMAIN[1]) * 320)  # (0.36, 0.2) m
    assert tuple(img[row, col]) == OBSTACLE_COLOUR
    obs, _ = env.reset(seed=0, options={"task": easy_task()})
    assert not obs[32:N_STATE].any()
    # unused slots are parked out of the domain
    for h in OBSTACLE_HANDLES:
        assert env.unwrapped.world.pose(h).tolist() == list(PARKED_POSE)
    assert tuple(render_scene((50, 80), DOMAIN, [], np.zeros((0, 2)), boxes=[(0.4, 0.25, 0.1, 0.1)])
                 [25, 40]) == OBSTACLE_COLOUR


def test_vector_env_with_obstacles_matches_single_envs_and_clears_unused_slots():
    B, steps = 8, 3
    acts = np.random.default_rng(1).uniform(-1, 1, (steps, B // 2, 3)).astype(np.float32)
    seeds = [10 + b // 2 for b in range(B)]  # members 2j and 2j + 1 share seed and actions
    # a small box right where easy_task's liquid sits: it must be gone when easy_task follows
    stray = block_task(obstacles=((0.30, 0.27, 0.04, 0.04), BLOCK))
    rounds = [[easy_task() if b % 2 == 0 else stray for b in range(B)],
              [block_task() if b % 2 == 0 else easy_task() for b in range(B)]]
    venv = gym.make_vec("taigym/Pour-v0", num_envs=B, vectorization_mode="vector_entry_point", **KW)
    try:
        v_out = []
        for ts in rounds:
            v_out.append([venv.reset(seed=seeds, options={"task": ts})[0]])
            w = venv.unwrapped.world
            for b, t in enumerate(ts):  # slots the task does not use are parked out of the domain
                for i, h in enumerate(OBSTACLE_HANDLES):
                    want = (*t.obstacles[i][:2], 0.0) if i < len(t.obstacles) else PARKED_POSE
                    assert w.pose(h, member=b).tolist() == list(want)
            v_out[-1] += [venv.step(acts[k, np.arange(B) // 2])[0] for k in range(steps)]
    finally:
        venv.close()
    for k in range(steps + 1):  # easy_task after the stray box = easy_task in a fresh slot
        np.testing.assert_array_equal(v_out[1][k][1::2], v_out[0][k][0::2])
    e = make()
    try:
        for b in range(B):
            for i, ts in enumerate(rounds):
                obs, _ = e.reset(seed=seeds[b], options={"task": ts[b]})
                np.testing.assert_array_equal(obs, v_out[i][0][b])
                for k in range(steps):
                    np.testing.assert_array_equal(e.step(acts[k, b // 2])[0], v_out[i][k + 1][b])
    finally:
        e.close()

# ---------------------------------------------------------------------- agents
def test_agents_make_and_act(env):
    with pytest.raises(ValueError, match="available"):
        taigym.agents.make("oracle", env)
    with pytest.raises(ValueError, match="acts in transport, transport3d envs, not pour"):
        taigym.agents.make("sfrrt", env)  # plans transport, not pouring
    with pytest.raises(ValueError, match="accepted"):
        taigym.agents.make("scripted", env, speed=3)
    obs, info = env.reset(seed=0)
    for name in ("random", "scripted"):
        agent = taigym.agents.make(name, env)
        agent.reset(seed=0)
        a = agent.act(obs, info)
        assert env.action_space.contains(a)
    r1, r2 = taigym.agents.make("random", env), taigym.agents.make("random", env)
    r1.reset(seed=4), r2.reset(seed=4)
    np.testing.assert_array_equal(r1.act(obs, info), r2.act(obs, info))


def test_scripted_agent_pours_an_easy_task(env):
    agent = taigym.agents.make("scripted", env)
    row = taigym.agents.run_episode(env, agent, seed=0, task=easy_task())
    assert row["in_target"] > 0.7 and row["in_source"] < 0.1, row


@pytest.mark.slow
def test_scripted_beats_random_on_eval_tasks():
    e = gym.make("taigym/Pour-v0")
    try:
        ev = tasks("pour", "eval")[:10]
        s = taigym.agents.summarise(taigym.agents.evaluate(e, taigym.agents.make("scripted", e), ev))
        r = taigym.agents.summarise(taigym.agents.evaluate(e, taigym.agents.make("random", e), ev))
        assert s["success_rate"] >= 0.5 and r["success_rate"] <= 0.1
    finally:
        e.close()


def test_pour_env_class_docstring_has_tables():
    doc = PourEnv.__doc__
    for head in ("## Action space", "## Observation space", "## Rewards", "## Episode end"):
        assert head in doc


def test_every_pose_the_env_lets_s_reach_at_the_scene_edges_the_solver_accepts(env):
    """S's moves are clipped by the env's own edge check; the solver checks the container
    again when it receives the pose. A pose the first lets through must pass the second (a
    learner's action once crashed the env: with S's opening facing an edge, the interior's
    opening corners were given the wall's margin). Poses: the opening towards the left, top
    or right edge, the wall solid 0-2 mm from it."""
    rng = np.random.default_rng(0)
    u = env.unwrapped
    W, H = DOMAIN
    checked = 0
    for task in tasks("pour", "eval")[:8]:
        env.reset(seed=0, options={"task": task})
        b, m, w = u._batch, u._batch.members[0], u._batch.world
        r = m.source.radius
        for _ in range(60):
            edge = rng.integers(3)                       # left, top, right
            th = (0.5 * np.pi, 0.0, -0.5 * np.pi)[edge] + rng.uniform(-0.4, 0.4)
            pts = to_world(m.solid_pts, np.array([0.0, 0.0, th]))
            gap = r + rng.uniform(0.0, 0.002)
            x, y = rng.uniform(0.2, W - 0.2), rng.uniform(0.15, 0.3)
            if edge == 0:
                x = gap - pts[:, 0].min()
            elif edge == 1:
                y = H - gap - pts[:, 1].max()
            else:
                x = W - gap - pts[:, 0].max()
            pose = np.array([x, y, th])
            pen_t, pen_e, _ = b._penetration(m, pose, m.t_pose)
            if pen_e > 0.0 or pen_t > 0.0:
                continue
            w.set_pose(0, pose, member=0)                # raises if the solver disagrees
            checked += 1
        w.set_pose(0, m.s_pose, member=0)
    assert checked > 300
