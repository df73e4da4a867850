"""Pan & Manocha 2017: the CMA-ES pour search, its dataset, the liquid-parameter network and the
receding-horizon agent ``rh``, on the simplified Pour-v0 (no particles, no network, no W&B)."""

from __future__ import annotations

import math

import gymnasium as gym
import numpy as np
import pytest
import torch

import taigym  # noqa: F401  (registers the envs)
from taigym.agents import make
from taigym.agents.base import run_episode
from taigym.agents.cmaes import plan_task, rollout
from taigym.training.rh import train
from taigym.data.cmaes_dataset import TEST_SEED, generate, generate_onpolicy, load, problem
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
    agent._v_liquid = np.array([0.3, -0.1])                # the liquid lags S (slosh term)
    hc = agent.cost(obs, info)
    rng = np.random.default_rng(1)
    S = hc.prior + rng.normal(0, 0.01, hc.prior.shape)
    S[:, 1] -= np.linspace(0, 0.08, len(S))                 # down towards T: collisions active
    S[5:8, 0] += [0.01, 0.03, 0.0]                          # a jerk: the surge term
    _, g = hc(S)
    assert len(hc._active) > 0
    full = np.vstack([hc.Sm1, hc.S0, S])
    rho, _, _ = hc._flux(S, full[2:] - 2 * full[1:-1] + full[:-2])
    assert np.any(rho > hc.rho) and np.any(rho == hc.rho)   # past the max tilt at some steps only
    eps = 1e-6
    far = S - [0.25, 0.0, 0.0]                              # the lip behind T: the drip term
    for P in (S, far):
        _, g = hc(P)
        for k in rng.choice(len(P), 6, replace=False):
            for j in range(3):
                dS = np.zeros_like(P)
                dS[k, j] = eps
                fd = (hc(P + dS)[0] - hc(P - dS)[0]) / (2 * eps)
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
    # the tiny network's spill hinges on rounding (problem 1: 3.7 or 43 % along two builds' paths,
    # 29 % of all three problems' liquid on one CPU where random spills 55 %), so the spill bound
    # is asserted for the network shipped with taigym below, not for this 8-problem one
    # save / load: the same actions
    loaded = make("rh", env, checkpoint=run / "agent.pt")
    obs, info = env.reset(seed=0, options={"task": problem(5, TEST_SEED)})
    agent.reset(seed=0)
    loaded.reset(seed=0)
    np.testing.assert_allclose(agent.act(obs, info), loaded.act(obs, info), rtol=1e-5, atol=1e-6)
    shipped = make("rh", env)                       # the network shipped with taigym pours, spilling little
    pours = [run_episode(env, shipped, seed=i, task=problem(i, TEST_SEED)) for i in range(3)]
    assert min(r["in_target"] for r in pours) > 0.6, pours
    spilled = {"rh": np.mean([r["spilled"] for r in pours]),
               "random": np.mean([r["spilled"] for r in rows["random"]])}
    assert spilled["rh"] < 0.2 * spilled["random"], spilled
    with pytest.raises(ValueError, match="inputs"):
        make("rh", gym.make("taigym/Pour-v0", fidelity="simplified", obs_mode="lip"), checkpoint=run / "agent.pt")


def test_onpolicy_rollouts_aggregate_with_the_teacher_data(trained, tiny_dataset, tmp_path):
    _, run = trained
    out = generate_onpolicy(tmp_path / "rh1", run / "agent.pt", 2, fidelity="simplified", progress=False)
    e = load(out)
    assert list(e["index"]) == [0, 1] and len(e["obs"]) == len(e["labels"]) > 10
    assert np.all(np.isfinite(e["labels"][:, :5])) and np.all(np.isnan(e["labels"][:, 5:]))
    assert (e["labels"][:, 4] > 0).any()                 # rh poured: the outflow is labelled
    first = (out / "problem_00000.npz").stat().st_mtime_ns
    generate_onpolicy(out, run / "agent.pt", 2, fidelity="simplified", progress=False)
    assert (out / "problem_00000.npz").stat().st_mtime_ns == first     # resumed, not redone
    other = tmp_path / "other.pt"
    other.write_bytes((run / "agent.pt").read_bytes() + b"x")
    with pytest.raises(ValueError, match="another network"):
        generate_onpolicy(out, other, 2, fidelity="simplified", progress=False)
    # the prior's NaN labels stay out of the fit; every rollout state is added
    agent = train(make_env, {"dataset": str(tiny_dataset), "problems": 8, "epochs": 20, "progress": False,
                             "popsize": TINY["popsize"], "iterations": TINY["max_iterations"],
                             "labels": "simplified", "onpolicy": [str(out)]}, tmp_path / "run2")
    assert agent.meta["onpolicy_states"] == len(e["obs"])
    assert all(np.isfinite(v) for v in agent.meta["val_errors"].values())
    assert all(torch.isfinite(t).all() for t in agent.net.state_dict().values())


def _pour_state(env, agent, steps: int):
    obs, info = env.reset(seed=0, options={"task": problem(0, TEST_SEED)})
    agent.reset(seed=0)
    for _ in range(steps):
        obs, _, _, _, info = env.step(np.array([0.6, 0.0, -0.5]))
    return agent.cost(obs, info), info


def test_flux_grows_past_the_max_tilt_and_when_braking_towards_T():
    """The horizon's flux model (C_l's weight): the network's rho below S's max tilt; past it,
    more flux the further S leans, and braking while moving towards T tips the liquid towards
    the lip (surge) as leaning further would."""
    env = make_env()
    agent = make("rh", env)
    hc, info = _pour_state(env, agent, 4)
    assert 0.3 < hc.max_tilt < 1.5                          # rad, the task's fill, S holding it all
    assert hc.max_tilt == pytest.approx(agent.max_tilt(info))
    K = len(hc.prior)
    side = hc.side
    S = np.tile(hc.S0, (K, 1))
    still = np.zeros((K, 3))

    def flux(lean, lap=still):
        S[:, 2] = -side * lean
        return hc._flux(S, lap)[0]

    np.testing.assert_allclose(flux(hc.max_tilt - 0.05), hc.rho)
    assert np.all(flux(hc.max_tilt + 0.3) > flux(hc.max_tilt + 0.1)) and np.all(flux(hc.max_tilt + 0.1) > hc.rho)
    brake = still.copy()
    brake[:, 0] = -side * 4.0 * hc.dt ** 2                  # 4 m/s^2 against the motion towards T
    surge = math.atan(4.0 / 9.81)
    np.testing.assert_allclose(flux(hc.max_tilt + 0.1, brake), flux(hc.max_tilt + 0.1 + surge), rtol=1e-9)
    speed_up = -brake
    np.testing.assert_allclose(flux(hc.max_tilt + 0.1, speed_up), hc.rho)   # the liquid moves back
    # without flow_gain the network's rho alone, as in Pan & Manocha 2017
    plain = make("rh", env, flow_gain=0.0)
    hc0, _ = _pour_state(env, plain, 4)
    S[:, 2] = -side * (hc0.max_tilt + 0.3)
    np.testing.assert_allclose(hc0._flux(S, brake)[0], hc0.rho)


def test_drip_costs_liquid_over_the_lip_only_when_it_falls_outside_T():
    """The drip term: leaning past (max tilt - drip_margin) costs where the lip is not above T's
    opening, the more the further behind it; nothing above the opening or below the margin."""
    env = make_env()
    agent = make("rh", env)
    hc, _ = _pour_state(env, agent, 4)
    K, side = len(hc.prior), hc.side
    assert hc.drip_margin > 0.0 and hc.w_drip > 0.0

    def drip(dx, lean):
        S = np.tile(hc.S0, (K, 1))
        S[:, 2] = -side * lean
        th = S[:, 2]
        lip_x = S[:, 0] + np.cos(th) * hc.px - np.sin(th) * hc.py
        S[:, 0] += hc.tx - lip_x + dx                         # the lip dx from T's centre
        step = S[1] - S[0]                                     # S moving with T: no surge
        hc.S0, hc.Sm1 = S[0] - step, S[0] - 2.0 * step
        w = hc.w_drip
        with_drip = hc(S)[0]
        hc.w_drip = 0.0
        without = hc(S)[0]
        hc.w_drip = w
        return with_drip - without

    with pytest.raises(ValueError, match="drip_weight"):
        make("rh", env, drip_weight=-1.0)
    for bad in (dict(drip_margin=2.0), dict(slosh_time=-0.1), dict(horizon_steps=2.5), dict(lean=4.0),
                dict(flow_gain=-1.0), dict(prior_scale=(0.02, 0.0, 0.2)), dict(max_speed=0.0),
                dict(solver="cuda")):
        with pytest.raises(ValueError, match=next(iter(bad))):
            make("rh", env, **bad)
    lean = hc.max_tilt - 0.5 * hc.drip_margin                 # past the margin, below the max tilt
    assert drip(0.0, lean) == 0.0                              # above T's opening
    assert drip(-side * 0.3, hc.max_tilt - 1.5 * hc.drip_margin) == 0.0   # not leaning far enough
    assert 0.0 < drip(-side * 0.2, lean) < drip(-side * 0.3, lean)


def test_jet_spread_costs_the_mean_miss_of_a_jet_faster_or_slower_by_it():
    """jet_spread sigma (m/s): the jet's pour term is its expected squared miss when its
    horizontal velocity is off by N(0, sigma^2), e^2 + (sigma tau)^2 (tau its flight time), the
    mean of the spread-free term over the jet sigma faster and sigma slower (T moving sigma
    slower or faster); so of two pours landing alike, the longer fall costs more. (The spread is
    weighted by the network's flux now: exact where the planned flux is that too, flow_gain=0.)"""
    env = make_env()
    agent = make("rh", env, drip_weight=0.0, flow_gain=0.0)   # the drip is not quadratic in the miss
    hc, _ = _pour_state(env, agent, 14)
    S = hc.prior.copy()
    full = np.vstack([hc.Sm1, hc.S0, S])
    lap = full[2:] - 2 * full[1:-1] + full[:-2]
    sigma = agent.cfg["jet_spread"]
    assert sigma > 0.0
    spread_cost, _ = hc._pour(S, lap)
    w_spread, tvx = hc.w_spread, hc.tvx.copy()
    hc.w_spread = 0.0

    def miss(dv):                                    # the jet dv faster (the dribble too)
        hc.tvx = tvx - dv
        jet_and_dribble = hc._pour(S, lap)[0]
        pw, hc.pour_w = hc.pour_w.copy(), hc.pour_w * [[0.0], [1.0]]
        dribble = hc._pour(S, lap)[0]
        hc.pour_w, hc.tvx = pw, tvx
        return jet_and_dribble, dribble

    (f_all, f_dr), (s_all, s_dr), (all0, dr0) = miss(sigma), miss(-sigma), miss(0.0)
    assert spread_cost == pytest.approx(0.5 * (f_all - f_dr + s_all - s_dr) + dr0, rel=1e-12)
    assert spread_cost > all0 > 0.0
    hc.w_spread = w_spread
    with pytest.raises(ValueError, match="jet_spread"):
        make("rh", env, jet_spread=-0.1)


def test_liquid_keeps_its_momentum_when_S_stops():
    """slosh_time: the liquid's velocity follows S's with a first-order lag, so the outflow of
    a S that stops still flies on; slosh_time=0 is S's rigid velocity."""
    env = make_env()
    for tau in (0.0, 0.1):
        agent = make("rh", env, slosh_time=tau)
        hc, info = _pour_state(env, agent, 6)
        v_s = np.asarray(info["source_velocity"][:2])
        assert np.linalg.norm(v_s) > 0.1
        K = len(hc.prior)
        stop = np.tile(hc.S0, (K, 1))                      # S stops at once
        vl = hc.lag_inv @ np.diff(stop[:, :2], axis=0, prepend=hc.S0[None, :2]) + hc.lag0
        if tau == 0.0:
            np.testing.assert_allclose(vl, 0.0, atol=1e-12)
        else:
            b = hc.dt / (tau + hc.dt)
            np.testing.assert_allclose(vl[0], (1 - b) * v_s, rtol=1e-9)   # the liquid had S's velocity
            assert np.all(np.diff(np.linalg.norm(vl, axis=1)) < 0) and np.linalg.norm(vl[0]) > 0.05


def test_lbfgs_warm_started_scale_saves_the_first_steps_backtracking():
    """An ill-scaled quadratic (curvatures 1e2..1e4, like the horizon cost's): solved again from
    a nearby start with the first solve's inverse-Hessian scale, L-BFGS reaches the same minimum
    with fewer evaluations than from a unit max-norm first step (rh's every control step)."""
    from taigym.agents.rh import lbfgs

    rng = np.random.default_rng(0)
    h = np.logspace(2, 4, 75)
    target = rng.normal(size=75)

    def counted(counter):
        def f(x):
            counter.append(1)
            d = x - target
            return 0.5 * float(d @ (h * d)), h * d
        return f

    _, _, scale = lbfgs(counted([]), np.zeros(75), 30)
    x0 = target + 0.01 * rng.normal(size=75)
    cold, warm = [], []
    x_cold, _, _ = lbfgs(counted(cold), x0, 100)
    x_warm, _, _ = lbfgs(counted(warm), x0, 100, scale0=scale)
    assert np.max(np.abs(x_cold - target)) < 1e-4 and np.max(np.abs(x_warm - target)) < 1e-4
    assert len(warm) < len(cold)


def test_taichi_solve_equals_the_numpy_reference():
    """solver=taichi (one kernel a control step) computes what the NumPy HorizonCost and lbfgs
    compute: the same cost and gradient where every term is active (pour past the max tilt,
    surge, drip, collision), and the same plan, iterations and inverse-Hessian scale."""
    from taigym.agents import rh_kernel
    from taigym.agents.rh import lbfgs

    env = make_env()
    agent = make("rh", env)
    hc, _ = _pour_state(env, agent, 14)
    agent._v_liquid = np.array([0.3, -0.1])
    rng = np.random.default_rng(1)
    S = hc.prior + rng.normal(0, 0.01, hc.prior.shape)
    S[:, 1] -= np.linspace(0, 0.08, len(S))                 # down towards T: collisions active
    S[5:8, 0] += [0.01, 0.03, 0.0]                          # a jerk: the surge term
    for P in (S, S - [0.25, 0.0, 0.0]):                     # the second: the lip behind T (drip)
        c, g = hc(P)
        c_ti, g_ti = rh_kernel.horizon_cost(hc, P)
        assert c_ti == pytest.approx(c, rel=1e-12)
        np.testing.assert_allclose(g_ti, g, rtol=0, atol=1e-10 * np.max(np.abs(g)))
    assert len(hc._active) > 0 and hc.w_drip > 0.0

    u0 = np.clip(np.diff(np.vstack([hc.S0, hc.prior]), axis=0) / agent.scale, -0.95, 0.95)
    K = len(u0)

    def f(z):
        u = np.tanh(z.reshape(K, 3))
        c, gS = hc(hc.S0 + np.cumsum(u * agent.scale, axis=0))
        return c, ((np.cumsum(gS[::-1], axis=0)[::-1] * agent.scale) * (1.0 - u * u)).ravel()

    for scale0 in (None, 3e-4):
        hc._active = None
        z, it, scale = lbfgs(f, np.arctanh(u0).ravel(), 12, scale0=scale0)
        u_ti, it_ti, scale_ti = rh_kernel.solve(hc, u0, agent.scale, 12, scale0)
        assert it_ti == it and scale_ti == pytest.approx(scale, rel=1e-9)
        np.testing.assert_allclose(u_ti, np.tanh(z.reshape(K, 3)), atol=1e-9)
        assert np.max(np.abs(u_ti - u0)) > 0.05                # the solve moved the plan


def test_max_speed_caps_the_translation_only():
    """max_speed (m/s) bounds S's planned translation per axis, unless T moves faster along it
    (S must keep up with T); the env's limit stays the bound of the rotation, and S moves at the
    cap while it closes in on T."""
    env = make_env()
    agent = make("rh", env, max_speed=0.1)
    task = problem(0, TEST_SEED)
    assert abs(task.target_velocity[0]) > 0.1 > abs(task.target_velocity[1])
    obs, info = env.reset(seed=0, options={"task": task})
    agent.reset(seed=0)
    speed = np.maximum(0.1, np.abs(task.target_velocity))                    # m/s
    cap = speed * env.unwrapped.dt / np.asarray(env.unwrapped.action_scale)[:2]   # of the action range
    actions = []
    for _ in range(15):
        a = agent.act(obs, info)
        actions.append(a)
        obs, _, terminated, truncated, info = env.step(a)
        assert not (terminated or truncated)
    a = np.abs(np.array(actions))
    assert np.all(a[:, :2] <= cap + 1e-6)
    assert np.max(a[:, 0]) > 0.9 * cap[0]                   # S approaches T at the cap
    assert np.max(a[:, 2]) > cap[0] + 0.1                   # the lean is not capped
