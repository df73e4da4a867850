"""Seed 001: the CMA-ES pour search, its dataset, the liquid-parameter network and the
receding-horizon agent ``rh``, on the simplified Pour-v0 (no particles, no network, no W&B)."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

import taigym  # noqa: F401  (registers the envs)
from taigym.agents import make
from taigym.agents.base import run_episode
from taigym.agents.cmaes import plan_task, rollout
from taigym.agents.rh import train
from taigym.data.cmaes_dataset import TEST_SEED, generate, load, problem
from taigym.models.liquid_net import FitConfig, constant_errors, errors, fit
from taigym.planners.cmaes import CMAESConfig, Reference, trajectory

TINY = {"popsize": 6, "max_iterations": 4}


def make_env():
    return gym.make("taigym/Pour-v0", fidelity="simplified")


@pytest.fixture(scope="module")
def tiny_dataset(tmp_path_factory):
    """8 CMA-ES problems (4 TRANSFER+ZERO, 4 TRANSFER+FOLLOW) with a small search."""
    torch.set_num_threads(1)
    return generate(tmp_path_factory.mktemp("cmaes") / "ds", 8, cmaes=TINY, progress=False,
                    label_fidelity="simplified")


def test_monotone_coordinates_map_to_shrinking_gaps():
    task = problem(3)
    cfg = CMAESConfig()
    ref = Reference(task, 0.0125, cfg.lean)
    rng = np.random.default_rng(0)
    ratios = rng.uniform(0.05, 1.0, (5, 3))
    poses = trajectory(ratios, ref, cfg)
    assert poses.shape == (cfg.nodes + 1, 3)
    np.testing.assert_allclose(poses[0], task.source_pose)
    times = cfg.dt * np.arange(cfg.nodes + 1)
    gaps = np.array([ref.gaps(p, t) for p, t in zip(poses, times)])
    assert np.all(np.diff(gaps, axis=0) <= 1e-9)            # S only closes in and leans further
    k_ctrl = np.round(np.linspace(0, cfg.spline_time, 6) / cfg.dt).astype(int)
    np.testing.assert_allclose(gaps[k_ctrl[1:]], gaps[0] * np.cumprod(ratios, axis=0), rtol=1e-9, atol=1e-12)
    still = trajectory(np.ones((5, 3)), ref, cfg)            # ratios 1: the gaps stay as they are
    np.testing.assert_allclose([ref.gaps(p, t) for p, t in zip(still, times)], np.tile(gaps[0], (len(times), 1)),
                               atol=1e-12)


def test_cmaes_improves_reward_over_its_initial_mean():
    env = make_env()
    task = problem(2)
    res = plan_task(task, env, CMAESConfig())
    cfg = CMAESConfig()
    r0, _ = rollout(env, task, trajectory(np.full((5, 3), 0.5), Reference(task, 0.0125), cfg),
                    dribble_weight=cfg.dribble_weight, free_jet_weight=cfg.free_jet_weight)
    assert res.initial_reward == pytest.approx(r0)           # z = 0: every gap halves
    assert np.all(np.diff(res.history) >= 0.0)
    assert res.reward > res.initial_reward + 1.0, (res.initial_reward, res.reward)
    assert res.details["spilled"] < 0.05


def test_cmaes_agent_pours(tiny_dataset):
    env = make_env()
    agent = make("cmaes", env, **TINY)
    row = run_episode(env, agent, seed=0, task=problem(4))
    assert row["in_target"] > 0.8 and row["spilled"] < 0.1
    with pytest.raises(ValueError, match="unknown cmaes-agent option"):
        make("cmaes", env, horizon_steps=3)


def test_dataset_is_resumable_and_labelled(tiny_dataset, tmp_path):
    d = load(tiny_dataset)
    assert d["obs"].shape[0] == d["labels"].shape[0] == d["problem"].shape[0]
    assert d["labels"].shape[1] == 8 and np.all(np.isfinite(d["labels"]))
    ratios = d["labels"][:, 5:]
    assert np.all((ratios > 0) & (ratios <= 1))
    flowing = d["labels"][:, 4] > 0
    assert flowing.any() and (~flowing).any()
    assert np.all(d["planned_reward"] >= d["initial_reward"])
    # resuming: finished problems are kept, not recomputed
    out = generate(tmp_path / "ds", 1, cmaes=TINY, progress=False, label_fidelity="simplified")
    first = (out / "problem_00000.npz").stat().st_mtime_ns
    generate(out, 2, cmaes=TINY, progress=False, label_fidelity="simplified")
    assert (out / "problem_00000.npz").stat().st_mtime_ns == first
    assert sorted(p.name for p in out.iterdir()) == ["meta.json", "problem_00000.npz", "problem_00001.npz"]
    with pytest.raises(ValueError, match="other options"):
        generate(out, 2, cmaes={"popsize": 5, "max_iterations": 4}, progress=False, label_fidelity="simplified")


def test_liquid_net_beats_a_constant_predictor(tiny_dataset):
    d = load(tiny_dataset)
    net, _ = fit(d["obs"], d["labels"], d["problem"], FitConfig(epochs=150, val_fraction=0.0))
    ours, const = errors(net, d["obs"], d["labels"]), constant_errors(d["obs"], d["labels"], d["labels"])
    for k in ("outflow", "rho", "prior"):
        assert ours[k] < 0.8 * const[k], (k, ours, const)
    # the NumPy forward pass the agent uses is the network's
    pred = net.numpy_predictor()
    with torch.no_grad():
        lin, prior = net(torch.as_tensor(d["obs"][:5]))
    for i in range(5):
        a, b = pred(d["obs"][i])
        np.testing.assert_allclose(a, lin[i].numpy(), rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(b, prior[i].numpy(), rtol=1e-4, atol=1e-5)


@pytest.fixture(scope="module")
def trained(tiny_dataset, tmp_path_factory):
    run = tmp_path_factory.mktemp("rh_run")
    agent = train(make_env, {"dataset": str(tiny_dataset), "problems": 8, "epochs": 150, "progress": False,
                             "popsize": TINY["popsize"], "iterations": TINY["max_iterations"],
                             "labels": "simplified"}, run)
    return agent, run


def test_horizon_cost_gradient_is_exact(trained):
    agent, _ = trained
    env = agent.env
    obs, info = env.reset(seed=0, options={"task": problem(0, TEST_SEED)})
    agent.reset(seed=0)
    for _ in range(14):                                    # leaning and pouring
        obs, _, _, _, info = env.step(np.array([0.6, -0.3, -0.9]))
    hc = agent.cost(obs, info)
    rng = np.random.default_rng(1)
    S = hc.prior + rng.normal(0, 0.01, hc.prior.shape)
    S[:, 1] -= np.linspace(0, 0.08, len(S))                 # down towards T: collisions active
    _, g = hc(S)
    assert len(hc._active) > 0
    eps = 1e-6
    for k in rng.choice(len(S), 6, replace=False):
        for j in range(3):
            dS = np.zeros_like(S)
            dS[k, j] = eps
            fd = (hc(S + dS)[0] - hc(S - dS)[0]) / (2 * eps)
            assert g[k, j] == pytest.approx(fd, rel=1e-3, abs=1e-3 * (1 + abs(fd)))


def test_rh_beats_random_and_round_trips(trained):
    agent, run = trained
    env = agent.env
    rand = make("random", env)
    rows = {"rh": [], "random": []}
    for i in range(3):
        task = problem(i, TEST_SEED)
        rows["rh"].append(run_episode(env, agent, seed=i, task=task))
        rows["random"].append(run_episode(env, rand, seed=i, task=task))
    mean = {k: np.mean([r["in_target"] for r in v]) for k, v in rows.items()}
    assert mean["rh"] > 0.6 and mean["rh"] > mean["random"] + 0.4, mean
    assert np.mean([r["spilled"] for r in rows["rh"]]) < 0.1
    # save / load: the same actions
    loaded = make("rh", env, checkpoint=run / "agent.pt")
    obs, info = env.reset(seed=0, options={"task": problem(5, TEST_SEED)})
    agent.reset(seed=0)
    loaded.reset(seed=0)
    np.testing.assert_allclose(agent.act(obs, info), loaded.act(obs, info), rtol=1e-5, atol=1e-6)
    shipped = make("rh", env)                       # the network shipped with taigym pours too
    pours = [run_episode(env, shipped, seed=i, task=problem(i, TEST_SEED)) for i in range(2)]
    assert min(r["in_target"] for r in pours) > 0.6, pours
    with pytest.raises(ValueError, match="inputs"):
        make("rh", gym.make("taigym/Pour-v0", fidelity="simplified", obs_mode="lip"), checkpoint=run / "agent.pt")
