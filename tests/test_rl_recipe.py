"""RL through the train app: the per-env recipe (``conf/recipe``), the batched training env, the
observation normaliser and env arguments a policy carries in its checkpoint, the start-state
curriculum (``over_target``) and the task evaluations of the learning curve. Fast tests build
untrained models only; the one that trains is in the integration tier."""

from __future__ import annotations

import csv
import json
import os
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

import taigym  # noqa: F401
from taigym.apps import common
from taigym.envs import tasks
from taigym.envs.pour_tasks import over_target
from taigym.training.loggers import NullLogger

ID = "taigym/Pour-v0"


def compose(config: str, overrides: list[str]):
    from hydra import compose as hydra_compose
    from hydra import initialize_config_module

    with initialize_config_module("taigym.conf", version_base="1.3"):
        return hydra_compose(config_name=config, overrides=overrides)


# ---------------------------------------------------------------------- the recipe
def test_recipe_applies_to_its_agent_and_env_only_and_the_command_line_wins():
    cfg = compose("train", ["agent=ppo", "env=pour_simplified"])
    assert cfg.agent.n_envs == 128 and cfg.agent.vec_env == "batched" and cfg.agent.normalize_obs
    assert cfg.agent.policy_env_kwargs == {"pivot": "lip"} and cfg.agent.train_env_kwargs.over_target == 0.5
    assert cfg.eval_episodes == 100 and cfg.env.transfer_eval == "pour"
    assert compose("train", ["agent=ppo", "env=pour_simplified", "agent.n_envs=4", "eval_episodes=3"]).agent.n_envs == 4
    other = compose("train", ["agent=ppo", "env=pour_simplified_tilt"])
    assert other.agent.n_envs == 8 and other.agent.vec_env == "auto" and other.eval_episodes == 20


@pytest.mark.parametrize("agent", ["ppo", "sac"])
@pytest.mark.parametrize("env", ["transport", "pour3d", "transport3d"])
def test_liquid_env_recipes_compose_to_valid_options_and_env_arguments(agent, env):
    """recipe/<agent>_<env>.yaml on the envs that step a FLIP liquid per control step: accepted
    by the agent's option check, one training env (a second copy would build and compile its own
    solver), and its training env arguments are the env's (the dense reward with the learner's
    discount)."""
    from omegaconf import OmegaConf

    from taigym.agents.ppo import PPOAgent
    from taigym.agents.sac import SACAgent
    from taigym.agents.sb3 import check_cfg

    cls = {"ppo": PPOAgent, "sac": SACAgent}[agent]
    full = compose("train", [f"agent={agent}", f"env={env}"])
    cfg = OmegaConf.to_container(full.agent, resolve=True)
    hp = check_cfg({k: v for k, v in cfg.items() if k != "name"}, cls.DEFAULTS, agent)
    kw = hp["train_env_kwargs"]
    assert kw["reward_mode"] == "dense" and kw["shaping_gamma"] <= hp["gamma"]
    assert hp["normalize_obs"] and hp["vec_env"] == "dummy"
    if env != "transport":
        assert hp["n_envs"] == 1
    gym.make(full.env.id, **kw).close()                    # the env accepts every argument


def test_sac_pour_recipe_composes_to_valid_options_and_the_batched_env_accepts_its_arguments():
    """recipe/sac_pour_simplified.yaml: accepted by SAC's option check; its policy and training
    env arguments (the PPO recipe's) build the batched simplified env it trains on."""
    from omegaconf import OmegaConf

    from taigym.agents.sac import SACAgent
    from taigym.agents.sb3 import check_cfg
    from taigym.training.vec_env import make_batched_vec_env

    cfg = OmegaConf.to_container(compose("train", ["agent=sac", "env=pour_simplified"]).agent, resolve=True)
    hp = check_cfg({k: v for k, v in cfg.items() if k != "name"}, SACAgent.DEFAULTS, "sac")
    ppo = compose("train", ["agent=ppo", "env=pour_simplified"]).agent
    assert hp["vec_env"] == "batched" and hp["buffer_size"] >= hp["total_timesteps"]
    assert hp["policy_env_kwargs"] == OmegaConf.to_container(ppo.policy_env_kwargs)
    assert hp["train_env_kwargs"] == OmegaConf.to_container(ppo.train_env_kwargs)
    assert hp["train_env_kwargs"]["shaping_gamma"] == hp["gamma"]
    venv = make_batched_vec_env(ID, 2, seed=0, fidelity="simplified", **hp["policy_env_kwargs"],
                                **hp["train_env_kwargs"])
    assert venv.reset().shape[0] == 2
    venv.close()


# ---------------------------------------------------------------------- the curriculum
def test_over_target_moves_only_the_tasks_the_env_draws():
    """Training resets start with S's lip over T (over_target=1); an evaluation's given task is
    run as given, so the eval split stays the fixed one."""
    env = gym.make(ID, fidelity="simplified", task_split="train", over_target=1.0)
    split = tasks("pour", "train")
    for seed in range(5):
        env.reset(seed=seed)
        drawn = env.unwrapped.task
        assert any(drawn == over_target(t) for t in split)
        assert not any(drawn == t for t in split if over_target(t) != t)
    given = tasks("pour", "eval")[0]
    env.reset(seed=0, options={"task": given})
    assert env.unwrapped.task == given
    env.close()
    # the vector env draws the same way
    venv = gym.make_vec(ID, num_envs=3, vectorization_mode="vector_entry_point", fidelity="simplified",
                        task_split="train", over_target=1.0)
    venv.reset(seed=[0, 1, 2])
    assert all(any(t == over_target(s) for s in split) for t in venv.unwrapped.tasks)
    venv.close()
    with pytest.raises(ValueError, match="over_target"):
        gym.make(ID, fidelity="simplified", over_target=1.5)


def test_over_target_zero_leaves_the_task_stream_unchanged():
    a = gym.make(ID, fidelity="simplified", task_split="train")
    b = gym.make(ID, fidelity="simplified", task_split="train", over_target=0.0)
    for seed in range(3):
        a.reset(seed=seed)
        b.reset(seed=seed)
        assert a.unwrapped.task == b.unwrapped.task


# ---------------------------------------------------------------------- the checkpoint
def test_checkpoint_carries_the_normaliser_and_the_policys_env_arguments(tmp_path):
    """The saved agent acts on normalised observations (as trained) and names the pivot it was
    trained for; loaded, it acts exactly as before."""
    from stable_baselines3.common.vec_env import VecNormalize

    from taigym.agents.ppo import PPOAgent
    from taigym.agents.sb3 import ENV_KWARGS_ATTR, attach_obs_norm, single_vec

    env = gym.make(ID, fidelity="simplified", pivot="lip")
    agent = PPOAgent(env, policy_kwargs={"net_arch": [16]})
    norm = VecNormalize(single_vec(lambda: gym.make(ID, fidelity="simplified")))
    norm.obs_rms.mean[:] = 0.3
    norm.obs_rms.var[:] = 4.0
    attach_obs_norm(agent.model, norm)
    setattr(agent.model, ENV_KWARGS_ATTR, {"pivot": "lip"})
    obs, info = env.reset(seed=0)
    action = agent.act(obs, info)
    raw, _ = agent.model.predict(obs, deterministic=True)
    expected, _ = agent.model.predict(norm.normalize_obs(obs), deterministic=True)
    np.testing.assert_allclose(action, expected, rtol=1e-5, atol=1e-6)
    assert not np.allclose(action, raw)
    path = agent.save(tmp_path / "agent.zip")
    loaded = PPOAgent.load(path, env)
    np.testing.assert_allclose(loaded.act(obs, info), action, rtol=1e-6)
    assert loaded.env_kwargs == {"pivot": "lip"}
    env.close()


def test_evaluate_builds_the_env_with_the_checkpoints_env_arguments(tmp_path, monkeypatch):
    from taigym.agents.ppo import PPOAgent
    from taigym.agents.sb3 import ENV_KWARGS_ATTR
    from taigym.apps import evaluate

    env = gym.make(ID, fidelity="simplified")
    agent = PPOAgent(env, policy_kwargs={"net_arch": [16]})
    setattr(agent.model, ENV_KWARGS_ATTR, {"pivot": "lip"})
    agent.save(tmp_path / "agent.zip")
    env.close()
    built = []
    real = evaluate.make_env

    def spy(env_cfg, **kw):
        e = real(env_cfg, **kw)
        built.append(e.unwrapped.cfg.pivot)
        return e

    monkeypatch.setattr(evaluate, "make_env", spy)
    env_cfg = compose("evaluate", ["env=pour_simplified"]).env
    rows, _, _ = evaluate.run_agent(env_cfg, {"name": "ppo"}, None, episodes=1, checkpoint=str(tmp_path))
    assert built[-1] == "lip" and len(rows) == 1


# ---------------------------------------------------------------------- batched training and evaluation
def test_batched_spec_only_for_envs_with_a_native_vector_version():
    from taigym.training.task_eval import batched_spec

    spec = batched_spec(lambda: gym.make(ID, fidelity="simplified", pivot="lip"))
    assert spec == (ID, {"fidelity": "simplified", "pivot": "lip"})
    env_cfg = compose("train", ["env=pour_simplified"]).env
    fixed = {**common.to_plain(env_cfg), "task": tasks("pour", "eval")[0].to_dict()}
    assert batched_spec(common.env_factory(fixed)) is None          # FixedTask: not Gymnasium's wrapper
    assert batched_spec(lambda: gym.make("taigym/Transport-v0")) is None


class OneByOne(gym.Wrapper):
    """A wrapper of another package than Gymnasium: no batched evaluation through it."""


def test_task_evaluation_is_the_same_batched_or_one_by_one():
    """The deterministic policy's outcome on each task does not depend on the engine's batching."""
    from taigym.agents.ppo import PPOAgent
    from taigym.training.task_eval import evaluate_tasks

    make = lambda: gym.make(ID, fidelity="simplified", pivot="lip")  # noqa: E731
    agent = PPOAgent(make(), policy_kwargs={"net_arch": [16]}, seed=3)
    chosen = tasks("pour", "eval")[:4]
    batched = evaluate_tasks(agent, make, chosen, batch=3)
    single = evaluate_tasks(agent, lambda: OneByOne(make()), chosen)
    assert batched["episodes"] == single["episodes"] == 4
    for key in ("success", "in_target", "spilled"):
        assert batched[key] == pytest.approx(single[key], abs=1e-6), key


def test_training_options_are_checked_before_any_work(tmp_path):
    from taigym.training.sb3 import train_ppo

    make = lambda: gym.make(ID, fidelity="simplified")  # noqa: E731
    for bad, match in (({"vec_env": "threads"}, "vec_env"), ({"eval_every": -1}, "eval_every"),
                       ({"policy_env_kwargs": "lip"}, "policy_env_kwargs")):
        with pytest.raises(ValueError, match=match):
            train_ppo(make, bad, tmp_path, NullLogger())
    with pytest.raises(ValueError, match="batched engine"):
        train_ppo(lambda: gym.make("taigym/Transport-v0"), {"vec_env": "batched"}, tmp_path, NullLogger())


@pytest.mark.integration
def test_recipe_trains_batched_with_normalised_obs_curve_and_resumes(tmp_path):
    """The recipe at a tiny budget through the app: batched env, curve rows on the eval split,
    the normaliser in the checkpoint; a rerun resumes from it and keeps the curve's rows."""
    from taigym.apps.train import run_training

    over = ["agent=ppo", "env=pour_simplified", "logger=none", "eval_episodes=2", "transfer_eval=false",
            "agent.n_envs=16", "agent.n_steps=32", "agent.batch_size=256", "agent.checkpoint_every=512",
            "agent.eval_every=512", "agent.eval_episodes=5"]
    result = run_training(compose("train", [*over, "agent.total_timesteps=1024"]), tmp_path)
    assert (tmp_path / "checkpoints" / "vecnormalize.pkl").exists()
    assert json.loads((tmp_path / "result.json").read_text())["eval"]["episodes"] == 2
    rows = list(csv.DictReader((tmp_path / "curve.csv").open()))
    assert [int(r["steps"]) for r in rows] == [512, 1024] and rows[0]["eval_success"] != ""
    from taigym.agents.ppo import PPOAgent

    agent = PPOAgent.load(Path(result["checkpoint"]), gym.make(ID, fidelity="simplified", pivot="lip"))
    assert agent.env_kwargs == {"pivot": "lip"} and agent.model.taigym_obs_norm["var"] != [1.0] * 104
    run_training(compose("train", [*over, "agent.total_timesteps=1536"]), tmp_path)
    rows = list(csv.DictReader((tmp_path / "curve.csv").open()))
    assert [int(r["steps"]) for r in rows] == [512, 1024, 1536]
    assert json.loads((tmp_path / "checkpoints" / "state.json").read_text())["num_timesteps"] == 1536
    assert os.path.exists(tmp_path / "agent.zip")
