"""Expert datasets (Minari), behaviour cloning and DAgger on the simplified Pour-v0 with the cheap
``scripted`` expert. No network, no W&B: the logger collects what it is given in a list."""

from __future__ import annotations

import functools

import gymnasium as gym
import numpy as np
import pytest
import torch

import taigym
from taigym.agents import Agent, evaluate, make, planning, summarise
from taigym.agents.bc import BCAgent
from taigym.agents.policy import PolicyAgent
from taigym.data import collect as collect_mod
from taigym.training import bc, dagger

SMALL = dict(hidden=[64, 64], progress=False, eval_episodes=0)


def make_env():
    return gym.make("taigym/Pour-v0", fidelity="simplified")


class ListLogger:
    def __init__(self):
        self.metrics, self.videos, self.artifacts, self.finished = [], [], [], False

    def log(self, metrics, step):
        assert all(isinstance(v, (int, float)) for v in metrics.values()), metrics
        self.metrics.append((int(step), dict(metrics)))

    def log_video(self, frames, step, name="video"):
        self.videos.append((step, name, len(frames)))

    def log_artifact(self, path, name, kind="checkpoint"):
        self.artifacts.append((str(path), name, kind))

    def finish(self):
        self.finished = True


@pytest.fixture(scope="module")
def eval_tasks():
    return taigym.envs.tasks("pour", split="eval")[:6]


@pytest.fixture(scope="module")
def bc_agent(tmp_path_factory):
    run = tmp_path_factory.mktemp("bc")
    log = ListLogger()
    agent = bc.train(make_env, dict(SMALL, expert="scripted", episodes=60, hidden=[256, 256], patience=15),
                     run, log)
    return agent, run, log


@pytest.mark.integration
def test_bc_beats_random(bc_agent, eval_tasks):
    agent, run, log = bc_agent
    assert agent.meta["demo_kept"] + agent.meta["demo_filtered"] == 60
    assert agent.meta["labels"] > 1000 and agent.meta["stopped"] in ("patience", "max_epochs")
    assert (run / "agent.pt").is_file() and log.artifacts[-1][1:] == ("bc", "checkpoint")
    assert [s for s, _ in log.metrics] == list(range(1, agent.meta["epochs"] + 1))
    env = make_env()
    s_bc = summarise(evaluate(env, agent, eval_tasks, seed=0))
    s_rand = summarise(evaluate(env, make("random", env), eval_tasks, seed=0))
    assert s_bc["mean_in_target"] > s_rand["mean_in_target"] + 0.2, (s_bc, s_rand)
    assert s_bc["mean_in_target"] > 0.3


@pytest.mark.integration
def test_policy_save_load_roundtrip(bc_agent, tmp_path):
    agent, run, _ = bc_agent
    env = make_env()
    obs = []
    o, info = env.reset(seed=3, options={"task": taigym.envs.tasks("pour", "eval")[3]})
    agent.reset(seed=3)
    for _ in range(30):
        obs.append(o)
        o, *_ , info = env.step(agent.act(o, info))
    path = tmp_path / "policy.pt"
    agent.save(path)

    def actions(a):
        a.reset(seed=3)                  # the policy keeps the episode's first observation (S's start)
        return np.stack([a.act(x, {}) for x in obs])

    for loaded in (BCAgent.load(path, env), make("bc", env, checkpoint=path),
                   BCAgent.load(run / "agent.pt", env)):
        assert isinstance(loaded, BCAgent)
        np.testing.assert_array_equal(actions(loaded), actions(agent))
    # the NumPy forward pass used by act() is the torch module's
    np.testing.assert_allclose(agent.act_batch(np.stack(obs), start=obs[0]), actions(agent), atol=1e-5)
    # the policy refuses an env whose observation does not match
    with pytest.raises(ValueError, match="observation"):
        BCAgent.load(path, gym.make("taigym/Pour-v0", fidelity="simplified", obs_mode="lip"))


def test_unknown_options_raise(tmp_path):
    with pytest.raises(ValueError, match="bogus"):
        bc.train(make_env, {"bogus": 1}, tmp_path / "a", ListLogger())
    with pytest.raises(ValueError, match="beta_zero"):
        dagger.train(make_env, {"beta_zero": 1}, tmp_path / "b", ListLogger())
    with pytest.raises(ValueError, match="relabel_every"):
        dagger.train(make_env, {"relabel_every": 0}, tmp_path / "c", ListLogger())
    with pytest.raises(ValueError, match="features"):
        bc.train(make_env, {"features": "lip_only"}, tmp_path / "d", ListLogger())
    # fit options outside their range are named before any demonstration is collected
    for bad, name in ((dict(lr=0.0), "lr"), (dict(input_noise=-0.1), "input_noise"),
                      (dict(batch_size=0), "batch_size"), (dict(val_fraction=1.0), "val_fraction"),
                      (dict(max_epochs=2.5), "max_epochs")):
        with pytest.raises(ValueError, match=rf"{name} must be .* got"):
            bc.train(make_env, bad, tmp_path / "e", ListLogger())
        with pytest.raises(ValueError, match=rf"{name} must be .* got"):
            dagger.train(make_env, bad, tmp_path / "f", ListLogger())


def test_bc_resumes_from_checkpoint(tmp_path):
    cfg = dict(SMALL, expert="scripted", episodes=6, patience=1000, checkpoint_every=1)
    log1, log2 = ListLogger(), ListLogger()
    first = bc.train(make_env, dict(cfg, max_epochs=3), tmp_path / "run", log1)
    assert first.meta["epochs"] == 3 and first.meta["resumed_from_epoch"] == 0
    demos = sorted(p.name for p in (tmp_path / "run" / "demos").iterdir())
    second = bc.train(make_env, dict(cfg, max_epochs=6), tmp_path / "run", log2)
    assert second.meta["resumed_from_epoch"] == 3 and second.meta["epochs"] == 6
    assert [s for s, _ in log2.metrics if "train/loss" in _] == [4, 5, 6]      # continued, not redone
    assert sorted(p.name for p in (tmp_path / "run" / "demos").iterdir()) == demos
    # ... and ends exactly where an uninterrupted run does
    whole = bc.train(make_env, dict(cfg, max_epochs=6), tmp_path / "whole", ListLogger())
    for a, b in zip(second.policy.state_dict().values(), whole.policy.state_dict().values()):
        assert torch.equal(a, b)


@pytest.mark.integration
def test_dagger_improves_over_round_zero(tmp_path):
    log = ListLogger()
    # 12 demonstrations: a weak round 0 (in T 0.30; with 20 and S's start velocity as an input
    # round 0 already reaches 0.89, leaving the rounds nothing to show)
    agent = dagger.train(make_env, dict(SMALL, expert="scripted", demo_episodes=12, rounds=2,
                                        episodes_per_round=20, eval_episodes=10, select="best"),
                         tmp_path / "dagger", log)
    hist = agent.meta["history"]
    assert [h["round"] for h in hist] == [0, 1, 2] and [s for s, _ in log.metrics] == [0, 1, 2]
    for key in ("success", "in_target", "dataset_size", "labels_queried", "beta"):
        assert key in log.metrics[-1][1]
    assert [h["beta"] for h in hist] == [1.0, 0.5, 0.25]
    sizes = [h["dataset_size"] for h in hist]
    assert sizes[0] < sizes[1] < sizes[2]                   # aggregation
    # rounds >= 1 label every visited state (the whole episode, successful or not)
    from taigym.data import load_episode

    eps = [load_episode(f) for f in sorted((tmp_path / "dagger" / "rounds" / "r002").glob("*.npz"))]
    assert len(eps) == 20 and sizes[2] - sizes[1] == sum(len(e) for e in eps)
    assert all(e.expert_labels == len(e) for e in eps)
    assert hist[1]["learner_steps"] > 0
    best_later = max(h["in_target"] for h in hist[1:])
    assert best_later > hist[0]["in_target"] + 0.1, hist
    assert agent.meta["selected_round"] >= 1


def test_dagger_resumes_per_round(tmp_path):
    cfg = dict(SMALL, expert="scripted", demo_episodes=4, episodes_per_round=2, max_epochs=5, select="last")
    log1, log2 = ListLogger(), ListLogger()
    first = dagger.train(make_env, dict(cfg, rounds=1), tmp_path / "run", log1)
    assert first.meta["round"] == 1 and first.meta["resumed_from_round"] is None
    second = dagger.train(make_env, dict(cfg, rounds=2), tmp_path / "run", log2)
    assert second.meta["resumed_from_round"] == 1
    assert [s for s, _ in log2.metrics] == [2]                # only the new round ran
    assert [h["round"] for h in second.meta["history"]] == [0, 1, 2]
    whole = dagger.train(make_env, dict(cfg, rounds=2), tmp_path / "whole", ListLogger())
    assert second.meta["labels"] == whole.meta["labels"]
    for a, b in zip(second.policy.state_dict().values(), whole.policy.state_dict().values()):
        assert torch.equal(a, b)


class StubPlanner(Agent):
    """An expert that records its replans (its planning is timed and counted by the base class)."""

    name = "stub"
    replans_from_info = True

    def __init__(self, every: int = 1):
        super().__init__(None)
        self.replans, self.every = [], every
        self.plan = None

    def reset(self, *, seed=None):
        super().reset(seed=seed)
        self.plan = None

    @planning
    def replan(self, info):
        self.replans.append(float(info["time"]))
        self.plan = object()

    def act(self, obs, info):
        # labels from the last replan, made at most every - 1 steps (of 0.05 s) before
        assert self.plan is not None and 0 <= float(info["time"]) - self.replans[-1] < 0.05 * self.every - 1e-9
        return np.array([0.0, 0.0, -1.0], np.float32)


def test_rollout_relabels_every_visited_state():
    env = make_env()
    task = taigym.envs.tasks("pour", "train")[0]
    expert = StubPlanner()
    learner = lambda obs: np.array([0.0, 0.5, 0.0], np.float32)    # noqa: E731
    ep = collect_mod.rollout(env, expert, task=task, seed=0, policy=learner, beta=0.0, relabel="auto")
    assert len(expert.replans) == len(ep) == ep.expert_plans == ep.expert_labels
    assert ep.learner_steps == len(ep)
    np.testing.assert_array_equal(ep.actions, np.tile([0.0, 0.5, 0.0], (len(ep), 1)))
    np.testing.assert_array_equal(ep.labels, np.tile([0.0, 0.0, -1.0], (len(ep), 1)))
    assert ep.obs.shape == (len(ep) + 1,) + env.observation_space.shape
    # beta = 1: the expert's actions are applied
    ep1 = collect_mod.rollout(env, StubPlanner(), task=task, seed=0, policy=learner, beta=1.0)
    assert ep1.learner_steps == 0
    np.testing.assert_array_equal(ep1.actions, ep1.labels)
    # replanning every 4th visited state (DAgger's relabel_every): a quarter of the plans
    sparse = StubPlanner(every=4)
    ep4 = collect_mod.rollout(env, sparse, task=task, seed=0, policy=learner, beta=0.0, relabel="replan",
                              replan_every=4)
    assert len(sparse.replans) == ep4.expert_plans == -(-len(ep4) // 4) and ep4.expert_labels == len(ep4)
    with pytest.raises(ValueError, match="replan_every"):
        collect_mod.rollout(env, sparse, task=task, seed=0, relabel="replan", replan_every=0)


def test_outflow_relabel_replans_once_when_liquid_first_leaves_the_source(tmp_path):
    """relabel='outflow': the expert tracks its first plan, replans once from the state reached
    when 1 % of the liquid has left S, and tracks that plan to the end; an expert that cannot
    replan is refused up front."""

    class FirstPlanThenReplan(StubPlanner):
        def act(self, obs, info):
            if self.plan is None:                         # the episode's first plan, as sqp's act makes it
                self.first_plan()
            return np.array([0.0, 0.0, -1.0], np.float32)

        @planning
        def first_plan(self):
            self.plan = object()

        @planning
        def replan(self, info):
            self.replans.append(float(info["in_source"]))
            self.plan = object()

    env = make_env()
    task = taigym.envs.tasks("pour", "train")[0]
    expert = FirstPlanThenReplan()
    tilt = lambda obs: np.array([0.0, 0.0, -1.0], np.float32)    # noqa: E731
    ep = collect_mod.rollout(env, expert, task=task, seed=0, policy=tilt, beta=0.0, relabel="outflow")
    in_source = ep.infos["in_source"]
    first = int(np.argmax(in_source < 1.0 - collect_mod.OUTFLOW_FRACTION))
    assert 0 < first < len(ep) and expert.replans == [pytest.approx(in_source[first])]
    assert ep.expert_plans == 2 and ep.expert_labels == len(ep)
    with pytest.raises(ValueError, match="relabel='outflow'"):
        collect_mod.rollout(env, make("scripted", env), task=task, seed=0, relabel="outflow")
    with pytest.raises(ValueError, match="relabel='outflow'"):
        dagger.train(make_env, dict(SMALL, expert="scripted", relabel="outflow"), tmp_path, ListLogger())
    assert not (tmp_path / "demos").exists()                       # refused before collecting anything


@pytest.mark.integration
def test_model_selection_on_the_val_split(tmp_path):
    """select_episodes ranks candidate policies on the val split (disjoint from the tasks learned
    from and from the eval split): BC returns the best of its lowest-loss weights and its last
    checkpoints' (select_candidates), DAgger its best round, both by success then in_target."""
    from taigym.training.common import rollout_metrics, selection_tasks
    from taigym.envs.pour_tasks import extra_train_task, fingerprint

    env = make_env()
    val = taigym.envs.tasks("pour", "val")
    assert len(val) == 400 and selection_tasks(env, 5) == list(val[:5])
    learned = taigym.envs.tasks("pour", "train") + taigym.envs.tasks("pour", "eval") + tuple(
        extra_train_task(j) for j in range(500))
    assert not {fingerprint([t]) for t in learned} & {fingerprint([t]) for t in val}
    with pytest.raises(ValueError, match="select_episodes"):
        selection_tasks(env, 401)
    with pytest.raises(ValueError, match="select_episodes"):
        bc.train(make_env, dict(SMALL, expert="scripted", select_candidates=2), tmp_path / "x", ListLogger())

    cfg = dict(SMALL, expert="scripted", episodes=10, max_epochs=12, checkpoint_every=4, patience=1000,
               select_episodes=12, select_candidates=3)
    agent = bc.train(make_env, cfg, tmp_path / "bc", ListLogger())
    scores = agent.meta["candidate_success"]
    assert agent.meta["candidates"] == 3 and len(scores) == 3
    assert scores[agent.meta["selected_candidate"]] == max(scores)
    assert rollout_metrics(env, agent, selection_tasks(env, 12))["success"] == max(scores)

    dag = dagger.train(make_env, dict(SMALL, expert="scripted", demo_episodes=6, rounds=2, episodes_per_round=3,
                                      max_epochs=8, select_episodes=12), tmp_path / "dagger", ListLogger())
    hist = dag.meta["history"]
    ranks = [(h["select_success"], h["select_in_target"], h["round"]) for h in hist]
    assert dag.meta["selected_round"] == max(ranks)[2]


@pytest.mark.integration
def test_collect_with_two_workers_matches_serial(tmp_path):
    from taigym.data.collect import collect, make_job

    env = make_env()
    expert = make("scripted", env)
    tasks = taigym.envs.tasks("pour", "train")
    jobs = [make_job(i, tasks[i], seed=i) for i in range(2)]
    serial = collect(make_env, expert, jobs, env=env, progress=False)
    parallel = collect(make_env, expert, jobs, out_dir=tmp_path, workers=2, progress=False,
                       backend="multiprocessing")
    for a, b in zip(serial, parallel):
        np.testing.assert_array_equal(a.obs, b.obs)
        np.testing.assert_array_equal(a.labels, b.labels)
    assert len(list(tmp_path.glob("*.npz"))) == 2


@pytest.mark.integration
def test_collect_on_a_local_ray_cluster(tmp_path):
    pytest.importorskip("ray")
    from taigym.data.collect import collect, make_job

    env = make_env()
    expert = make("scripted", env)
    tasks = taigym.envs.tasks("pour", "train")
    jobs = [make_job(i, tasks[i], seed=i) for i in range(2)]
    serial = collect(make_env, expert, jobs, env=env, progress=False)
    # Ray workers import what they run: an env constructor from an importable module
    make_fn = functools.partial(gym.make, "taigym/Pour-v0", fidelity="simplified")
    remote = collect(make_fn, expert, jobs, out_dir=tmp_path, workers=2, progress=False, backend="ray")
    for a, b in zip(serial, remote):
        np.testing.assert_array_equal(a.labels, b.labels)


def test_ignored_observation_entries_do_not_move_the_policy(tmp_path):
    """ignore_obs (e.g. S's velocity, against the copycat shortcut): the action does not depend
    on those entries, in training (torch) and when acting (NumPy), also after save/load."""
    from taigym.agents.policy import MLPPolicy

    env = make_env()
    torch.manual_seed(0)
    policy = MLPPolicy(env.observation_space.shape[0], 3, [16], ignore_obs=[3, 4, 5])
    policy.set_normalisation(np.stack([env.observation_space.sample() for _ in range(64)]))
    path = tmp_path / "p.pt"
    PolicyAgent(env, policy=policy).save(path)
    agent = PolicyAgent.load(path, env)
    obs = env.observation_space.sample()
    moved = obs.copy()
    moved[3:6] = env.observation_space.high[3:6]
    other = obs.copy()
    other[0] = env.observation_space.high[0]
    assert np.allclose(agent.act(obs, {}), agent.act(moved, {}), atol=1e-6)
    assert np.allclose(agent.act_batch(obs[None]), agent.act_batch(moved[None]), atol=1e-6)
    assert not np.allclose(policy(torch.as_tensor(obs[None])).detach(), policy(torch.as_tensor(other[None])).detach())
    with pytest.raises(ValueError, match="ignore_obs"):
        MLPPolicy(env.observation_space.shape[0], 3, [16], ignore_obs=[10_000])


def test_target_path_features_predict_where_t_will_be(tmp_path):
    """features='target_path' (auto on Pour-v0): from one observation, T's opening relative to
    S's opening after each relative lookahead time is where the env puts it while S holds still,
    across T's bounce off its box; S's pose and velocity at the start follow; the policy's inputs
    carry them, also after save/load."""
    from taigym.agents import features
    from taigym.agents.policy import MLPPolicy

    env = make_env()
    spec = features.resolve("auto", env)
    assert spec["kind"] == "target_path"
    task = taigym.envs.tasks("pour", split="train")[1]          # T bounces off x_hi after ~0.45 s
    obs, _ = env.reset(seed=0, options={"task": task})
    first = obs.copy()
    extra = features.featurize(obs, spec, start=first)[len(obs):]
    n = len(features.RELATIVE_LOOKAHEAD) + len(features.ABSOLUTE_LOOKAHEAD)
    rel_x, rel_y, vx = extra[:n], extra[n:2 * n], extra[2 * n:3 * n]
    assert spec["outflow_landing"] and np.all(np.abs(extra[3 * n:3 * n + 2]) <= features.LANDING_CLIP)
    start = 3 * n + 2                                                       # after the two landing entries
    np.testing.assert_array_equal(extra[start:start + 3], first[:3])        # S's pose at the start
    np.testing.assert_array_equal(extra[start + 3:start + 6], first[3:6])   # and its velocity (FOLLOW)
    assert task.liquid_velocity == "follow" and extra[start + 3] == pytest.approx(task.source_velocity[0])
    assert np.ptp(np.sign(vx[:len(features.RELATIVE_LOOKAHEAD)])) == 2     # the lookaheads span a bounce
    steps = 0
    for k, tau in enumerate(features.RELATIVE_LOOKAHEAD):
        while steps * 0.05 < tau - 1e-9:
            obs, *_ = env.step(np.zeros(3, np.float32))
            steps += 1
        np.testing.assert_allclose(obs[10:12], [rel_x[k], rel_y[k]], atol=1e-5)
        assert vx[k] == pytest.approx(obs[8], abs=1e-6)
    policy = MLPPolicy(len(obs), 3, [8], features=spec)
    assert policy.in_dim == len(obs) + features.extra_dim(spec)
    policy.set_normalisation(policy.featurize(np.stack([obs, obs + 0.01]), start=first))
    agent = PolicyAgent(env, policy=policy)
    agent.save(tmp_path / "p.pt")
    again = PolicyAgent.load(tmp_path / "p.pt", env)
    assert again.policy.features == spec
    again.reset()
    again.act(first, {})                                                       # remembers the start
    np.testing.assert_allclose(again.act(obs, {}), agent.act_batch(obs[None], start=first)[0], atol=1e-5)
    with pytest.raises(ValueError, match="start"):
        features.featurize(obs, spec)


def test_pour_side_is_the_side_sqp_pours_towards():
    """The pour_side input (in 'auto' on Pour-v0): from the episode's first observation, +1 / -1 as
    sqp's plan pours towards T's right / left (T's side of S half way through sqp's plan), on both
    sides and across T's bounces; it stays that of the start while S and T move."""
    from taigym.agents import features
    from taigym.planners.sqp import PourProblem

    env = make_env()
    spec = features.resolve("auto", env)
    assert spec["pour_side"]
    dt, horizon, drain = 0.05, spec["horizon"], 1.0              # sqp's plan: (5 - 1) s of 0.05 s nodes
    nodes = int(round((horizon - drain) / dt))
    sides = []
    for i, task in enumerate(taigym.envs.tasks("pour", split="val")[:60]):
        obs, _ = env.reset(seed=i, options={"task": task})
        side = features.pour_side(obs, spec["bounds"], spec["horizon"])
        assert side == PourProblem.from_task(task).pour_side(nodes, dt), i
        sides.append(side)
    assert set(sides) == {-1.0, 1.0}
    first = obs.copy()
    for _ in range(20):
        obs, *_ = env.step(np.array([0.5, 0.0, 0.5], np.float32))
    assert features.featurize(obs, spec, start=first)[-1] == side
    assert features.featurize(obs, spec, start=obs)[-1] in (-1.0, 1.0)


def test_outflow_landing_predicts_where_the_first_outflow_lands():
    """The outflow_landing features (in 'auto' on Pour-v0): when S, holding its place, tilts until
    liquid first leaves it, the lower lip's entry is where the simplified env lands that first
    packet relative to T's opening centre (in T's opening half-widths), to 0.3 half-width (the
    feature assumes liquid leaving at rest; the jet's own ~0.05-0.1 m/s is the rest), and it
    tells a packet landing in T from one landing beside it."""
    from taigym.agents import features
    from taigym.models.simplified import landing

    env = make_env()
    spec = features.resolve("auto", env)
    n = 3 * (len(features.RELATIVE_LOOKAHEAD) + len(features.ABSOLUTE_LOOKAHEAD))
    tasks = [t for t in taigym.envs.tasks("pour", split="train") if t.liquid_velocity == "zero"][:30]
    checked = inside = 0
    for i, task in enumerate(tasks):
        for tilt in (-0.3, 0.3):                    # towards either side
            obs, _ = env.reset(seed=i, options={"task": task})
            liquid = env.unwrapped._batch.members[0].liq
            for _ in range(100):
                obs, *_ = env.step(np.array([0.0, 0.0, tilt], np.float32))
                if liquid.packets:
                    break
            if not liquid.packets:                  # the tilt was blocked (S against T or a wall) first
                continue
            _, _, _, _, start, velocity, t_emit, carried, drag = liquid.packets[0]
            rim = task.target_state_at(t_emit)[0][1] + liquid.t_oc[1]
            hit = landing(start, velocity, rim, drag, carried)
            if hit is None:
                continue
            t_x = task.target_state_at(t_emit + hit[1])[0][0] + liquid.t_oc[0]
            actual = (hit[0] - t_x) / liquid.t_half
            if abs(actual) > 3.0:                   # far misses: the feature clips, and all look alike
                continue
            entry = features.featurize(obs, spec, start=obs)[len(obs) + n:len(obs) + n + 2]
            lower = 1 if obs[2] < 0 else 0          # the lip that pours (S's frame: left, right)
            assert entry[lower] == pytest.approx(actual, abs=0.3), (i, tilt)
            assert (abs(entry[lower]) < 1.0) == (abs(actual) < 1.0) or abs(abs(actual) - 1.0) < 0.3
            checked += 1
            inside += abs(actual) < 1.0
    assert checked >= 15 and inside >= 2


def test_ensemble_acts_with_the_mean_of_its_members(tmp_path):
    """members=K: K independently initialised MLPs whose mean action the agent applies (NumPy
    and torch agree), saved and loaded whole; a policy saved before ensembles still loads."""
    from taigym.agents.policy import MLPPolicy

    env = make_env()
    torch.manual_seed(0)
    dim = env.observation_space.shape[0]
    obs = np.stack([env.observation_space.sample() for _ in range(32)])
    policy = MLPPolicy(dim, 3, [16, 16], members=3)
    policy.set_normalisation(obs)
    each = policy.forward_members(torch.as_tensor(obs)).detach().numpy()
    assert each.shape == (3, 32, 3) and np.ptp(each, axis=0).max() > 0.05     # the members differ
    agent = PolicyAgent(env, policy=policy)
    np.testing.assert_allclose(agent.act(obs[0], {}), np.clip(each[:, 0].mean(0), -1, 1), atol=1e-5)
    np.testing.assert_allclose(agent.act_batch(obs), np.clip(each.mean(0), -1, 1), atol=1e-5)
    agent.save(tmp_path / "p.pt")
    again = PolicyAgent.load(tmp_path / "p.pt", env)
    assert again.policy.members == 3
    np.testing.assert_array_equal(again.act_batch(obs), agent.act_batch(obs))
    # the format before members: one MLP whose layers were named net.*
    single = MLPPolicy(dim, 3, [16], members=1)
    single.set_normalisation(obs)
    d = torch.load(tmp_path / "p.pt", weights_only=False)
    d.pop("members")
    d["hidden"] = [16]
    d["state_dict"] = {k.replace("nets.0.", "net."): v for k, v in single.state_dict().items()}
    torch.save(d, tmp_path / "old.pt")
    old = PolicyAgent.load(tmp_path / "old.pt", env)
    np.testing.assert_array_equal(old.act_batch(obs), PolicyAgent(env, policy=single).act_batch(obs))
    with pytest.raises(ValueError, match="members"):
        MLPPolicy(dim, 3, [16], members=0)


def test_learning_tasks_continue_past_the_train_split():
    """Demonstrations and DAgger rollouts take the train split's tasks but the validation ones,
    then further tasks of the same distribution, new to both splits and the same on every call."""
    from taigym.training.common import learning_task
    from taigym.envs.pour_tasks import fingerprint

    env = make_env()
    train = taigym.envs.tasks("pour", "train")
    assert learning_task(env, 949, 50) == (949, train[949])
    more = [learning_task(env, i, 50) for i in range(950, 960)]
    assert [i for i, _ in more] == list(range(1000, 1010))
    known = {fingerprint([t]) for t in train + taigym.envs.tasks("pour", "eval")}
    assert not known & {fingerprint([t]) for _, t in more}
    assert learning_task(env, 1000, 0) == (1000, more[0][1])
    xs = [t.target_position[0] for _, t in more]
    assert np.std(xs) > 0.05                                  # drawn, not one task repeated


def test_dagger_validation_episodes_stay_put_as_data_grows():
    from taigym.training.fit import stable_split_by_group

    def val_episodes(n_episodes):
        groups = np.repeat(np.arange(n_episodes), 7)             # 7 states an episode
        train, val = stable_split_by_group(groups, 0.1, seed=3)
        assert len(np.intersect1d(train, val)) == 0 and len(train) + len(val) == len(groups)
        assert set(groups[train]).isdisjoint(groups[val])       # whole episodes, never split
        return set(groups[val].tolist())

    before, after = val_episodes(200), val_episodes(300)        # a DAgger round added 100 episodes
    assert before == {g for g in after if g < 200}              # none moved between train and val
    assert 0.05 < len(after) / 300 < 0.15


def test_fit_moving_average_damps_weight_noise_and_resumes():
    """``ema_epochs``: the fit validates and returns a moving average of its weights, which carries
    less of the minibatch noise than the last weights (noisy labels, a large step), and a fit
    resumed from its state ends with the same average as an uninterrupted one."""
    from taigym.agents.policy import MLPPolicy
    from taigym.training.fit import TRAIN_DEFAULTS, Fit, check_cfg

    rng = np.random.default_rng(0)
    w = rng.normal(size=(6, 2))
    obs = rng.normal(size=(3000, 6)).astype(np.float32)
    act = np.tanh(obs @ w) + 0.3 * rng.normal(size=(3000, 2))                # label noise
    groups = np.arange(3000) // 30
    test = rng.normal(size=(2000, 6)).astype(np.float32)

    def error(policy):                        # against the noiseless function, on new inputs
        with torch.no_grad():
            return float(((policy(torch.as_tensor(test)).numpy() - np.tanh(test @ w)) ** 2).mean())

    def fit(ema_epochs, stop_after=None, state=None):
        torch.manual_seed(0)
        policy = MLPPolicy(6, 2, [32])
        cfg = check_cfg(dict(lr=3e-2, batch_size=16, max_epochs=6, patience=100, ema_epochs=ema_epochs),
                        TRAIN_DEFAULTS, "fit")
        f = Fit(policy, obs, act, groups, cfg, seed=1, split_seed=2)
        if state is not None:
            f.load_state_dict(state)
        f.run(stop_after=stop_after)
        return f

    raw, avg = fit(0.0), fit(1.0)
    last = {k: v.clone() for k, v in avg.policy.state_dict().items()}
    returned = avg.finalise().state_dict()
    assert any(not torch.equal(last[k], returned[k]) for k in last)    # the average, not the last weights
    assert avg.best_val < raw.best_val
    assert error(avg.policy) < 0.5 * error(raw.finalise())             # measured 0.003 against 0.026
    with pytest.raises(ValueError, match="ema_epochs"):
        fit(-1.0)
    half = fit(1.0, stop_after=3)
    resumed = fit(1.0, state=half.state_dict())
    for a, b in zip(resumed.finalise().state_dict().values(), avg.policy.state_dict().values()):
        assert torch.equal(a, b)
