"""RL from demonstrations (taigym.training.sb3_demos): the SB3 actor starts as behaviour cloning."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

import taigym  # noqa: F401
from taigym.training.loggers import NullLogger

ID = "taigym/Pour-v0"


@pytest.fixture(autouse=True)
def one_torch_thread():
    """As the trainers run (torch_threads: 1): torch's threads spin against each other on a
    loaded 2-core machine."""
    import torch

    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def _model(algo: str = "PPO", **kw):
    import stable_baselines3
    from stable_baselines3.common.vec_env import DummyVecEnv, VecNormalize

    venv = VecNormalize(DummyVecEnv([lambda: gym.make(ID, fidelity="simplified")]), norm_reward=False)
    model = getattr(stable_baselines3, algo)("MlpPolicy", venv, seed=0, device="cpu",
                                            policy_kwargs=dict(net_arch=[64, 64]), **kw)
    return model, venv


def _demos(n: int = 4000, seed: int = 0):
    """Observations in the observation box and actions a smooth function of a few entries."""
    rng = np.random.default_rng(seed)
    space = gym.make(ID, fidelity="simplified").observation_space
    lo, hi = np.maximum(space.low, -2.0), np.minimum(space.high, 2.0)
    obs = rng.uniform(lo, hi, (n, space.shape[0])).astype(np.float32)
    z = (obs - 0.5 * (lo + hi)) / (0.5 * (hi - lo))
    act = np.tanh(np.stack([z[:, 0] - z[:, 1], 0.5 * z[:, 6], 0.5 * z[:, 2]], axis=1)).astype(np.float32)
    return obs, act


@pytest.mark.parametrize("algo", ["PPO", "SAC"])
def test_clone_into_fits_the_actor_and_leaves_ignored_inputs_out(algo):
    """After the fit the deterministic action is the demonstrations' (MSE < 0.02 on held-out
    states, > 0.1 before), and the ignored entries do not change it."""
    from taigym.training.sb3_demos import clone_into

    model, venv = _model(algo, **({"buffer_size": 1000} if algo == "SAC" else {}))
    obs, act = _demos()
    held_obs, held_act = _demos(500, seed=1)

    def held_out_mse() -> float:
        pred, _ = model.predict(venv.normalize_obs(held_obs), deterministic=True)
        return float(((pred - held_act) ** 2).mean())

    before = held_out_mse()
    hp = {"seed": 0, "init_epochs": 20, "init_lr": 1e-3, "init_ignore_obs": [3, 4, 5]}
    stats = clone_into(model, obs, act, hp, venv)
    assert before > 0.1 and held_out_mse() < 0.02 and stats["init/mse"] < 0.02
    np.testing.assert_allclose(venv.obs_rms.mean, obs.mean(0), rtol=1e-6)     # the normaliser starts there
    x = venv.normalize_obs(held_obs[:50])
    y = x.copy()
    y[:, 3:6] += 3.0
    a, _ = model.predict(x, deterministic=True)
    b, _ = model.predict(y, deterministic=True)
    np.testing.assert_array_equal(a, b)


def test_clone_into_refuses_demonstrations_of_another_env():
    from taigym.training.sb3_demos import clone_into

    model, venv = _model()
    obs, act = _demos(10)
    with pytest.raises(ValueError, match="observations have shape"):
        clone_into(model, obs[:, :50], act, {"seed": 0, "init_epochs": 1, "init_lr": 1e-3,
                                             "init_ignore_obs": None}, venv)
    with pytest.raises(ValueError, match="init_ignore_obs"):
        clone_into(model, obs, act, {"seed": 0, "init_epochs": 1, "init_lr": 1e-3, "init_ignore_obs": [500]}, venv)


def test_critic_warmup_freezes_the_actor_only_until_its_step():
    """During the warm-up PPO's updates change the critic and not the actor; after it, both."""
    import torch

    from taigym.training.sb3_demos import actor_parameters, critic_warmup

    model, _ = _model(n_steps=64, batch_size=64, n_epochs=2)
    actor = lambda: torch.cat([p.detach().flatten().clone() for p in actor_parameters(model.policy)])  # noqa: E731
    critic = lambda: torch.cat([p.detach().flatten().clone() for p in model.policy.value_net.parameters()])  # noqa
    a0, c0 = actor(), critic()
    model.learn(128, callback=critic_warmup(128))
    a1, c1 = actor(), critic()
    assert torch.equal(a0, a1) and not torch.equal(c0, c1)
    assert all(p.requires_grad for p in actor_parameters(model.policy))
    model.learn(64, reset_num_timesteps=False, callback=critic_warmup(128))
    assert not torch.equal(a1, actor())


def test_demo_options_are_checked_before_any_work(tmp_path):
    from taigym.training.sb3 import train_ppo, train_sac

    make = lambda: gym.make(ID, fidelity="simplified")  # noqa: E731
    for bad, match in (({"init_epochs": -1}, "init_epochs"), ({"init_lr": 0.0}, "init_lr"),
                       ({"init_ignore_obs": [-1]}, "init_ignore_obs")):
        with pytest.raises(ValueError, match=match):
            train_ppo(make, bad, tmp_path, NullLogger())
    with pytest.raises(ValueError, match="PPO only"):
        train_sac(make, {"init_critic_steps": 10}, tmp_path, NullLogger())


def test_demos_recipe_is_the_pour_recipe_with_the_clone_in_the_experts_action():
    """recipe=ppo_pour_simplified_demos: the PPO recipe's env and network, the actor cloned from
    sqp's dataset with the env's hidden learner inputs, in the frame pivot the expert acts with;
    the run directory's name stays short (the hidden inputs come from the env config)."""
    from hydra import compose, initialize_config_module
    from omegaconf import OmegaConf

    from taigym.agents.ppo import PPOAgent
    from taigym.agents.sb3 import check_cfg

    with initialize_config_module("taigym.conf", version_base="1.3"):
        cfg = compose("train", ["agent=ppo", "env=pour_simplified", "recipe=ppo_pour_simplified_demos"])
        base = compose("train", ["agent=ppo", "env=pour_simplified"])
    plain = OmegaConf.to_container(cfg, resolve=True)
    hp = check_cfg({k: v for k, v in plain["agent"].items() if k != "name"}, PPOAgent.DEFAULTS, "ppo")
    assert hp["init_from"] == "taigym/pour_simplified/sqp-v0" and hp["policy_env_kwargs"] == {"pivot": "frame"}
    assert hp["init_ignore_obs"] == plain["env"]["learner"]["ignore_obs"] and hp["init_critic_steps"] > 0
    assert hp["train_env_kwargs"] == OmegaConf.to_container(base.agent.train_env_kwargs)
    assert hp["n_envs"] == base.agent.n_envs and hp["policy_kwargs"]["net_arch"] == [128, 128]


@pytest.mark.integration
def test_train_app_starts_ppo_from_an_expert_dataset(tmp_path):
    """The train app with recipe=ppo_pour_simplified_demos on a 3-episode sqp dataset: the clone
    is fitted (its MSE logged, far below the untrained actor's), PPO then trains and the agent
    saved acts with the frame pivot; a rerun resumes without cloning again."""
    from hydra import compose, initialize_config_module

    from taigym.apps.datasets import record
    from taigym.apps.train import run_training

    with initialize_config_module("taigym.conf", version_base="1.3"):
        record(compose("datasets", ["env=pour_simplified", "agent=expert", "episodes=3", f"out={tmp_path}",
                                    "progress=false"]))
        over = ["agent=ppo", "env=pour_simplified", "recipe=ppo_pour_simplified_demos", "logger=none",
                f"agent.init_dataset_root={tmp_path}", "agent.n_envs=16", "agent.n_steps=32",
                "agent.batch_size=256", "agent.init_critic_steps=512", "agent.eval_every=0",
                "agent.checkpoint_every=512", "eval_episodes=2", "transfer_eval=false"]
        cfg = compose("train", [*over, "agent.total_timesteps=1024"])
        run = tmp_path / "run"
        logged = []

        class Log(NullLogger):
            def log(self, metrics, step=None):
                logged.append(dict(metrics))

        result = run_training(cfg, run, logger=Log())
    init = next(m for m in logged if "init/mse" in m)
    assert init["init/pairs"] > 100 and init["init/mse"] < 0.5 * init["init/mse_before"]
    from taigym.agents.ppo import PPOAgent

    agent = PPOAgent.load(result["checkpoint"], gym.make(ID, fidelity="simplified", pivot="frame"))
    assert agent.env_kwargs == {"pivot": "frame"} and agent.num_timesteps == 1024
    logged.clear()
    with initialize_config_module("taigym.conf", version_base="1.3"):
        run_training(compose("train", [*over, "agent.total_timesteps=1536"]), run, logger=Log())
    assert not any("init/mse" in m for m in logged)
