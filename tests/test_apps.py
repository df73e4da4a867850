"""The Hydra apps (evaluate, benchmark, train, sweep), the loggers and the SB3 agents.

Everything runs on the simplified Pour-v0 with tiny budgets, in tmp dirs, with W&B offline (or
disabled) and Ray's usage reporting off: nothing touches the network. Tests that train, start Ray
or run an app in a subprocess are in the integration tier (``make test-integration``).
"""

from __future__ import annotations

import csv
import dataclasses
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")

from taigym.agents.metrics import mean_ci, summarise, wilson
from taigym.apps import common
from taigym.training.loggers import ConsoleLogger, NullLogger, make_logger

REPO = Path(__file__).resolve().parents[1]
CONF = REPO / "taigym" / "conf"
# a PPO small enough to train in seconds on the one-task problem (env=pour_simplified_tilt)
TINY_PPO = ["agent.n_envs=4", "agent.n_steps=128", "agent.batch_size=128", "agent.progress_bar=false"]


def compose(config: str, overrides: list[str], **kwargs):
    from hydra import compose as hydra_compose
    from hydra import initialize_config_module

    with initialize_config_module("taigym.conf", version_base="1.3"):
        return hydra_compose(config_name=config, overrides=overrides, **kwargs)


def run_app(app: str, *args: str, timeout: float = 240, ok: bool = True, cwd=REPO) -> subprocess.CompletedProcess:
    env = {**os.environ, "WANDB_MODE": "offline", "TI_SKIP_VERSION_CHECK": "ON", "TAIGYM_FAST_COMPILE": "1"}
    if ok:
        env["HYDRA_FULL_ERROR"] = "1"
    else:
        env.pop("HYDRA_FULL_ERROR", None)
    proc = subprocess.run([sys.executable, "-m", f"taigym.apps.{app}", *args], capture_output=True,
                          text=True, timeout=timeout, env=env, cwd=cwd)
    if ok:
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc


def last_json(text: str) -> dict:
    return json.loads(text.strip().splitlines()[-1])


# ---------------------------------------------------------------------- configs
ENVS = ("pour", "pour_simplified", "pour_simplified_tilt", "pour3d", "transport", "transport3d", "multicontact")
EXPERTS = {"pour": "sqp", "pour3d": "sqp", "transport": "sfrrt", "transport3d": "sfrrt", "multicontact": "stance"}
# the bc / dagger input features of the envs that have their own (taigym/agents/features.py)
LEARNER_FEATURES = {"transport": "obstacles", "pour3d": "plan"}


def test_config_groups_are_shipped_and_match_the_code():
    from taigym import agents

    for group, names in {"env": ENVS, "agent": [*agents.available(), "expert"],
                         "planner": ["sqp"], "logger": ["none", "console", "wandb"],
                         "sweep": ["ppo_optuna"], "suite": ["all"]}.items():
        for name in names:
            assert (CONF / group / f"{name}.yaml").exists(), f"{group}/{name}.yaml"
    from taigym.agents import carry, ppo, sac, scripted
    from taigym.planners.sqp import SQPConfig

    planner = yaml.safe_load((CONF / "planner" / "sqp.yaml").read_text())
    assert set(planner) - {"name"} == {f.name for f in dataclasses.fields(SQPConfig)}
    for mod in (scripted, carry):
        name = mod.__name__.split(".")[-1]
        assert set(yaml.safe_load((CONF / "agent" / f"{name}.yaml").read_text())) - {"name"} == set(mod.DEFAULTS)
    for mod in (ppo, sac):
        keys = set(yaml.safe_load((CONF / "agent" / f"{mod.__name__.split('.')[-1]}.yaml").read_text()))
        assert keys - {"name"} <= set(mod.DEFAULTS), keys - set(mod.DEFAULTS)
    # package data: the wheel ships the YAMLs
    text = (REPO / "pyproject.toml").read_text()
    assert '"taigym.conf" = ["*.yaml", "**/*.yaml"]' in text


@pytest.mark.parametrize("env", ENVS)
def test_agent_expert_is_the_envs_own_and_learners_take_the_envs_defaults(env):
    """``agent=expert`` runs each env's expert; bc and dagger learn from it with the env's input
    defaults: Pour-v0's hidden observation entries and features never reach another env."""
    cfg = compose("evaluate", [f"env={env}", "agent=expert"])
    family = cfg.env.family
    assert common.agent_name(cfg.agent, cfg.env) == EXPERTS[family]
    for learner in ("bc", "dagger"):
        c = to_container(compose("train", [f"env={env}", f"agent={learner}"]))
        assert common.expert_spec(c["agent"], c["planner"], c["env"])[0] == EXPERTS[family]
        if family == "pour":
            assert c["agent"]["features"] == "auto" and 3 in c["agent"]["ignore_obs"]
        else:   # the env's own features (Transport-v0: transport_features); none of Pour-v0's
            assert c["agent"]["features"] == LEARNER_FEATURES.get(env, "none")
            assert c["agent"]["ignore_obs"] == []


def to_container(cfg) -> dict:
    from omegaconf import OmegaConf

    return OmegaConf.to_container(cfg, resolve=True)


def test_a_datasets_root_does_not_name_the_train_run_directory(tmp_path):
    """Where a dataset's files are (``dataset_root``) is not part of what is trained: two roots give
    one run directory, and an absolute path does not nest the directory one level per '/'."""
    def run_dir(*overrides: str) -> str:
        return compose("train", list(overrides), return_hydra_config=True).hydra.job.override_dirname

    base = ["agent=bc", "env=transport", "agent.max_epochs=3"]
    a = run_dir(*base, f"agent.dataset_root={tmp_path / 'a'}")
    b = run_dir(*base, f"agent.dataset_root={tmp_path / 'b'}", "agent.progress=false")
    assert a == b == "agent.max_epochs=3"
    assert run_dir("agent=ppo", "env=pour_simplified", f"agent.init_dataset_root={tmp_path}") == ""


def test_a_dataset_id_names_one_train_run_directory(tmp_path):
    """A Minari id's '/' (``taigym/transport/sfrrt-v0``) does not nest the run directory: resuming
    finds the checkpoint one level below ``seed<k>/``, and runs with other ids sit beside it."""
    cfg = compose("train", ["agent=bc", "env=transport", "agent.dataset=taigym/transport/sfrrt-v0"],
                  return_hydra_config=True)
    run_dir = Path(cfg.hydra.run.dir)
    assert run_dir.parent == Path("runs/train/bc/transport/seed0")
    assert run_dir.name == "agent.dataset=taigym%2Ftransport%2Fsfrrt-v0"


def test_many_overrides_name_a_run_directory_the_file_system_accepts():
    """Ten overrides made a name over 255 bytes (OSError: File name too long); now the name is cut
    and ends with a hash of the whole: the same command gives the same directory, another command
    another one."""
    many = ["agent=ppo", "env=multicontact", "agent.n_envs=4", "agent.n_steps=512", "agent.batch_size=256",
            "agent.normalize_obs=true", "agent.normalize_reward=true", "agent.policy_kwargs.log_std_init=-1.0",
            "agent.policy_kwargs.net_arch=[128,128]", "agent.vec_env=dummy", "train_split=train",
            "agent.train_env_kwargs={reward_mode: dense}"]

    def name(*overrides: str) -> str:
        return Path(compose("train", list(overrides), return_hydra_config=True).hydra.run.dir).name

    a = name(*many)
    assert len(a.encode()) <= common.MAX_NAME_BYTES < 255
    assert a == name(*many) and a.startswith("agent.batch_size=256,")
    assert name(*many[:-1], "agent.train_env_kwargs={reward_mode: sparse}") != a


def test_agent_options_from_configs():
    cfg = compose("evaluate", ["agent=sqp", "planner.final_lean=2.2"])
    opts = common.agent_options(cfg.agent, cfg.planner)
    assert opts["final_lean"] == 2.2 and "nodes" not in opts and "name" not in opts
    cfg = compose("train", ["agent=ppo", "agent.learning_rate=1e-3", "seed=3"])
    opts = common.agent_options(cfg.agent)
    assert opts["learning_rate"] == 1e-3 and opts["seed"] == 3 and "name" not in opts
    spec = common.expert_spec({"name": "x", "expert": "sqp", "expert_options": {"replan_every": 5}},
                               {"final_lean": 2.0, "nodes": None})
    assert spec == ("sqp", {"final_lean": 2.0, "replan_every": 5})
    # agent=expert takes the env's expert options, then its own
    env = {"name": "e", "expert": {"name": "sfrrt", "options": {"path_planner": "sfrrt", "rate": 2.0}}}
    assert common.agent_options({"name": "expert", "rate": 3.0}, None, env) == {"path_planner": "sfrrt", "rate": 3.0}
    # acting options leave out the trainer's (rh's config holds both)
    rh = to_container(compose("evaluate", ["agent=rh", "env=pour_simplified"]).agent)
    acting = common.agent_options(rh, None, None, acting=True)
    assert "problems" not in acting and "epochs" not in acting and acting["horizon_steps"] == 25


def test_agents_that_need_no_checkpoint_build_from_their_configs():
    """``evaluate agent=<name>`` builds each agent from its config (rh's holds its training
    options too) and it acts."""
    import gymnasium as gym
    import numpy as np

    env = gym.make("taigym/Pour-v0", fidelity="simplified")
    for name in ("scripted", "random", "rh", "cmaes", "sqp", "expert"):
        cfg = compose("evaluate", [f"agent={name}", "env=pour_simplified"])
        agent = common.build_agent(common.agent_name(cfg.agent, cfg.env), env,
                                   common.agent_options(cfg.agent, cfg.planner, cfg.env, acting=True))
        if name == "rh":
            obs, info = env.reset(seed=0)
            agent.reset(seed=0)
            a = agent.act(obs, info)
            assert env.action_space.contains(np.asarray(a, np.float32)), name


def test_statistics():
    lo, hi = wilson(3, 3)
    assert 0.43 < lo < 0.44 and hi == 1.0                       # Wilson, not the degenerate Wald [1, 1]
    m, lo, hi = mean_ci([1.0, 2.0, 3.0])
    assert m == 2.0 and lo == pytest.approx(2 - 4.303 / 3 ** 0.5, abs=1e-3)   # t(0.975, 2) = 4.303
    rows = [{"success": True, "in_target": 0.9, "spilled": 0.0, "return_": 1.0, "steps": 10,
             "act_seconds": 1e-3, "plan_seconds": 2.0}] * 2
    agg = summarise(rows, {"success": "rate", "in_target": "fraction", "spilled": "fraction"})
    assert agg["success_rate"] == 1.0 and agg["latency_ms"] == pytest.approx(1.0) and agg["plan_seconds"] == 2.0
    assert agg["mean_spilled_ci95"] == [0.0, 0.0]
    # another env's metrics: a rate, a mean with NaN left out (a path time never reached)
    rows = [{"success": False, "fell": True, "path_time": float("inf")},
            {"success": True, "fell": False, "path_time": 3.0}, {"success": True, "fell": False, "path_time": 5.0}]
    agg = summarise(rows, {"success": "rate", "fell": "rate", "path_time": "mean"})
    assert agg["fell_rate"] == pytest.approx(1 / 3) and agg["fell_rate_ci95"] == pytest.approx(list(wilson(1, 3)))
    assert agg["mean_path_time"] == 4.0 and agg["mean_path_time_n"] == 2
    assert summarise([]) == {"episodes": 0}


# ---------------------------------------------------------------------- evaluate
@pytest.mark.integration
def test_evaluate_cli_writes_metrics_json_with_cis(tmp_path):
    proc = run_app("evaluate", "agent=scripted", "env=pour_simplified", "episodes=3", "progress=false",
                   f"hydra.run.dir={tmp_path}")
    data = json.loads((tmp_path / "metrics.json").read_text())
    assert not list(tmp_path.glob(".*.tmp"))                     # written atomically
    assert data["agent"] == "scripted" and data["env"] == "pour_simplified"
    assert len(data["episodes"]) == 3 and [r["task"] for r in data["episodes"]] == [0, 1, 2]
    agg = data["aggregate"]
    assert agg["episodes"] == 3
    k = sum(r["success"] for r in data["episodes"])
    assert agg["success_rate"] == k / 3 and agg["success_ci95"] == pytest.approx(list(wilson(k, 3)))
    assert data["metrics"] == {"success": "rate", "in_target": "fraction", "spilled": "fraction",
                               "in_source": "fraction"}
    for key in ("mean_in_target", "mean_spilled", "mean_return", "latency_ms"):
        lo, hi = agg[f"{key}_ci95"]
        assert lo <= agg[key] <= hi, key
    assert agg["mean_in_target"] > 0.8                           # the scripted expert pours
    assert last_json(proc.stdout)["episodes"] == 3
    assert data["config"]["env"]["kwargs"]["fidelity"] == "simplified"


# ---------------------------------------------------------------------- benchmark
def test_benchmark_writes_outputs_and_skips_done_cells(tmp_path):
    from taigym.apps.benchmark import run_benchmark

    cfg = compose("benchmark", ["agents=[scripted,random]", "envs=[pour_simplified]", "seeds=[0,1]",
                                "episodes=2", "progress=false"])
    out = run_benchmark(cfg, tmp_path)
    assert len(out["ran"]) == 4 and out["skipped"] == []
    for name in ("episodes.csv", "summary.csv", "table.md", "plots/pour_simplified.png"):
        assert (tmp_path / name).stat().st_size > 0, name
    rows = list(csv.DictReader((tmp_path / "episodes.csv").open()))
    assert len(rows) == 8 and {r["agent"] for r in rows} == {"scripted", "random"}
    summary = {r["agent"]: r for r in csv.DictReader((tmp_path / "summary.csv").open())}
    assert float(summary["scripted"]["success_rate"]) > float(summary["random"]["success_rate"])
    assert float(summary["scripted"]["success_ci95_lo"]) <= float(summary["scripted"]["success_rate"])
    table = (tmp_path / "table.md").read_text()
    assert "### pour_simplified" in table and "| scripted | 4 |" in table and "latency" in table
    assert "in_target [95 % CI]" in table and "plan s" in table
    assert (tmp_path / "plots" / "pour_simplified.png").read_bytes()[:4] == b"\x89PNG"

    # rerun: every cell is already done; a cell deleted (an interrupted run) is redone alone
    (tmp_path / "cells" / "random__pour_simplified__seed1.json").unlink()
    before = (tmp_path / "cells" / "scripted__pour_simplified__seed0.json").stat().st_mtime_ns
    out = run_benchmark(cfg, tmp_path)
    assert out["ran"] == ["random__pour_simplified__seed1"] and len(out["skipped"]) == 3
    assert (tmp_path / "cells" / "scripted__pour_simplified__seed0.json").stat().st_mtime_ns == before
    # other settings (more episodes) make the cells stale
    cfg3 = compose("benchmark", ["agents=[scripted]", "envs=[pour_simplified]", "seeds=[0]", "episodes=3",
                                 "progress=false"])
    assert run_benchmark(cfg3, tmp_path)["ran"] == ["scripted__pour_simplified__seed0"]


# ---------------------------------------------------------------------- training
def _train_cfg(run_overrides: list[str]):
    return compose("train", ["agent=ppo", "env=pour_simplified_tilt", "logger=none", "eval_episodes=0",
                             *TINY_PPO, *run_overrides])


@pytest.mark.integration
def test_ppo_improves_over_random_on_a_small_problem(tmp_path):
    """One fixed task (env=pour_simplified_tilt: S nearly full, its right lip over a wide static
    T): random actions, tilting either way, get ~40 % in and spill ~50 % (return about -1);
    8192 PPO steps (~6 s) learn not to spill (return about 0; pouring takes longer to learn)."""
    from taigym.apps.evaluate import run_agent
    from taigym.apps.train import run_training

    cfg = _train_cfg(["agent.total_timesteps=8192", "agent.checkpoint_every=100000", "eval_episodes=3"])
    result = run_training(cfg, tmp_path)
    assert Path(result["checkpoint"]).name == "agent.zip" and Path(result["checkpoint"]).exists()
    ppo = json.loads((tmp_path / "metrics.json").read_text())["aggregate"]
    rows, _, metrics = run_agent(cfg.env, {"name": "random"}, None, episodes=3, seed=0)
    rnd = common.aggregate(rows, metrics)
    assert ppo["mean_spilled"] < rnd["mean_spilled"] - 0.2, (ppo, rnd)
    assert ppo["mean_return"] > rnd["mean_return"] + 0.5, (ppo, rnd)
    # the saved agent loads through the registry class and acts like the trained one
    from taigym.apps.common import build_agent, make_env

    env = make_env(cfg.env)
    agent = build_agent("ppo", env, checkpoint=tmp_path)
    rows, _, _ = run_agent(cfg.env, cfg.agent, None, episodes=1, seed=0, agent=agent)
    assert rows[0]["in_target"] == pytest.approx(json.loads((tmp_path / "metrics.json").read_text())["episodes"][0]["in_target"])


@pytest.mark.integration
def test_training_resumes_from_checkpoint(tmp_path):
    """A step budget stands for the interruption: the rerun loads the checkpoint and trains only
    the remaining steps; a rerun with other hyperparameters is refused."""
    from taigym.apps.train import run_training

    run_training(_train_cfg(["agent.total_timesteps=1024", "agent.checkpoint_every=512", "logger=console"]), tmp_path)
    state = json.loads((tmp_path / "checkpoints" / "state.json").read_text())
    assert state["num_timesteps"] == 1024
    assert not list((tmp_path / "checkpoints").glob(".*tmp*"))
    run_training(_train_cfg(["agent.total_timesteps=2048", "agent.checkpoint_every=512", "logger=console"]), tmp_path)
    rows = list(csv.DictReader((tmp_path / "metrics.csv").open()))
    resumed = [r for r in rows if r.get("resumed_from_step")]
    assert [float(r["resumed_from_step"]) for r in resumed] == [1024.0]
    steps = [int(r["step"]) for r in rows if r.get("time/iterations")]
    assert steps == sorted(steps) and steps[0] == 512 and steps[-1] == 2048 and len(steps) == 4
    assert json.loads((tmp_path / "checkpoints" / "state.json").read_text())["num_timesteps"] == 2048
    with pytest.raises(ValueError, match="learning_rate"):
        run_training(_train_cfg(["agent.total_timesteps=4096", "agent.learning_rate=1e-3"]), tmp_path)


@pytest.mark.integration
@pytest.mark.parametrize("agent", ["ppo", "sac"])
def test_the_last_checkpoint_holds_the_trained_weights(tmp_path, agent):
    """The budget's last step checkpoints before the algorithm's last update; the checkpoint a run
    ends with (what a rerun with a larger budget resumes from) must still be the trained agent."""
    import stable_baselines3 as sb3
    import torch

    from taigym.apps.train import run_training

    budget = ["agent.total_timesteps=512", "agent.checkpoint_every=256"]
    if agent == "ppo":
        cfg = _train_cfg(budget)
    else:
        cfg = compose("train", ["agent=sac", "env=pour_simplified_tilt", "logger=none", "eval_episodes=0",
                                "agent.learning_starts=100", "agent.batch_size=32", "agent.progress_bar=false",
                                *budget])
    run_training(cfg, tmp_path)
    algo = getattr(sb3, agent.upper())
    final = algo.load(tmp_path / "agent.zip", device="cpu").policy.state_dict()
    ckpt = algo.load(tmp_path / "checkpoints" / "model.zip", device="cpu").policy.state_dict()
    assert final.keys() == ckpt.keys() and all(torch.equal(final[k], ckpt[k]) for k in final)


@pytest.mark.integration
def test_sac_checkpoints_its_replay_buffer_and_resumes(tmp_path):
    from taigym.training.sb3 import train_sac

    make = common.env_factory(compose("train", ["env=pour_simplified_tilt"]).env)
    cfg = dict(total_timesteps=200, n_envs=1, learning_starts=50, batch_size=32, buffer_size=1000,
               checkpoint_every=100, policy_kwargs={"net_arch": [32, 32]})
    agent = train_sac(make, cfg, tmp_path, NullLogger())
    assert (tmp_path / "checkpoints" / "replay_buffer.pkl").exists()
    assert agent.model.replay_buffer.size() == 200
    agent = train_sac(make, {**cfg, "total_timesteps": 300}, tmp_path, NullLogger())
    # the buffer came back (without it: the 100 new transitions only)
    assert agent.num_timesteps == 300 and agent.model.replay_buffer.size() >= 299
    with pytest.raises(ValueError, match="bogus"):
        train_sac(make, {**cfg, "bogus": 1}, tmp_path / "x", NullLogger())


@pytest.mark.integration
def test_killed_training_command_resumes_when_rerun(tmp_path):
    """The real thing: SIGKILL a training command once it has checkpointed, rerun the same
    command (the run directory depends only on it) and it resumes from the checkpoint."""
    args = ["agent=ppo", "env=pour_simplified_tilt", "logger=none", "eval_episodes=0", *TINY_PPO,
            "agent.checkpoint_every=512", f"hydra.run.dir={tmp_path}"]
    env = {**os.environ, "WANDB_MODE": "offline", "TI_SKIP_VERSION_CHECK": "ON"}
    proc = subprocess.Popen([sys.executable, "-m", "taigym.apps.train", *args, "agent.total_timesteps=1000000"],
                            cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    state = tmp_path / "checkpoints" / "state.json"
    try:
        deadline = time.time() + 120
        while not state.exists() and time.time() < deadline and proc.poll() is None:
            time.sleep(0.2)
        assert state.exists(), "no checkpoint written"
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    saved = json.loads(state.read_text())["num_timesteps"]
    assert 512 <= saved < 1_000_000
    out = run_app("train", *args, f"agent.total_timesteps={saved + 512}")
    # (the kill may have caught a newer checkpoint half-written: the model may be ahead of state.json)
    match = re.search(r"resuming from (\S+) at step (\d+)", out.stdout)
    assert match and match.group(1) == str(tmp_path / "checkpoints" / "model.zip"), out.stdout[-2000:]
    assert int(match.group(2)) >= saved
    assert json.loads(state.read_text())["num_timesteps"] >= saved + 512


def test_train_app_errors():
    from taigym.apps.train import run_training
    from taigym.training.sb3 import train_ppo

    with pytest.raises(ValueError, match="not trainable.*trainable agents: .*ppo"):
        run_training(compose("train", ["agent=scripted", "logger=none"]), "/tmp/never-written")
    with pytest.raises(ValueError, match="unknown ppo option.*bogus"):
        train_ppo(lambda: None, {"bogus": 1}, "/tmp/never-written", NullLogger())


# ---------------------------------------------------------------------- loggers
def test_console_logger_appends_csv_with_growing_header(tmp_path, capsys):
    log = make_logger({"name": "console"}, tmp_path)
    assert isinstance(log, ConsoleLogger)
    log.log({"a": 1.0}, step=1)
    log.log({"a": 2.0, "b": 3.0}, step=2)
    log.finish()
    rows = list(csv.DictReader((tmp_path / "metrics.csv").open()))
    assert rows == [{"step": "1", "a": "1.0", "b": ""}, {"step": "2", "a": "2.0", "b": "3.0"}]
    assert "[step 2] a=2  b=3" in capsys.readouterr().out
    with pytest.raises(ValueError, match="unknown logger"):
        make_logger({"name": "tensorboard"}, tmp_path)


@pytest.mark.integration
def test_wandb_logger_offline_writes_a_local_run_and_no_network(tmp_path, monkeypatch):
    """``logger=wandb`` with WANDB_MODE=offline: a training run logs metrics, the SB3 callback,
    an eval video and the checkpoint artifact to ``<run dir>/wandb/offline-run-*``; no socket of
    this process connects anywhere but this machine."""
    pytest.importorskip("wandb")
    from taigym.apps.train import run_training

    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_BASE_URL", "http://127.0.0.1:9")     # were it to try, it would fail here
    remote = []
    real_connect = socket.socket.connect

    def connect(self, address):
        if self.family in (socket.AF_INET, socket.AF_INET6) and address[0] not in ("127.0.0.1", "::1", "localhost"):
            remote.append(address)
            raise OSError(f"test: no network ({address})")
        return real_connect(self, address)

    monkeypatch.setattr(socket.socket, "connect", connect)
    cfg = compose("train", ["agent=ppo", "env=pour_simplified_tilt", "logger=wandb", "logger.print_to_console=false",
                            "agent.total_timesteps=256", "agent.n_envs=2", "agent.n_steps=64", "agent.batch_size=64",
                            "agent.progress_bar=false", "eval_episodes=1", "video_episodes=1"])
    run_training(cfg, tmp_path)
    runs = list((tmp_path / "wandb").glob("offline-run-*"))
    assert len(runs) == 1, list((tmp_path / "wandb").iterdir())
    assert list(runs[0].glob("*.wandb")), list(runs[0].iterdir())
    assert (tmp_path / "wandb_run_id").exists() and (tmp_path / "video.mp4").stat().st_size > 0
    assert remote == []


# ---------------------------------------------------------------------- sweeps
@pytest.mark.integration
def test_multirun_over_a_hyperparameter(tmp_path):
    proc = run_app("train", "-m", "agent=ppo", "env=pour_simplified_tilt", "logger=none", "eval_episodes=0",
                   "agent.n_envs=2", "agent.n_steps=64", "agent.batch_size=64", "agent.progress_bar=false",
                   "agent.total_timesteps=256", "agent.learning_rate=1e-4,1e-3", f"hydra.sweep.dir={tmp_path}")
    dirs = sorted(p.name for p in tmp_path.iterdir() if p.is_dir())
    assert len(dirs) == 2 and dirs[0].startswith("0-") and dirs[1].startswith("1-"), (dirs, proc.stdout[-2000:])
    assert "agent.learning_rate=0.0001" in dirs[0] and "agent.learning_rate=0.001," in dirs[1]
    assert all((tmp_path / d / "agent.zip").exists() for d in dirs)


@pytest.mark.integration
def test_optuna_sweep_runs_trials_resumes_and_writes_best(tmp_path):
    """Two tiny trials (on Ray with 2 workers if Ray is installed, else locally) after one local
    trial: the rerun goes on with the same study; the best config lands in best.yaml."""
    from taigym.apps.sweep import run_sweep

    base = ["env=pour_simplified_tilt", "sweep.eval_episodes=2", "sweep.fixed.total_timesteps=512",
            "agent.n_envs=2", "agent.n_steps=128", "sweep.params.n_steps.choices=[128]"]
    out = run_sweep(compose("sweep", [*base, "sweep.n_trials=1"]), tmp_path)
    assert out["trials"] == 1 and len(out["ran"]) == 1
    try:
        import ray  # noqa: F401
        backend = "ray"
    except ImportError:
        backend = "local"
    out = run_sweep(compose("sweep", [*base, "sweep.n_trials=3", f"sweep.backend={backend}", "sweep.workers=2"]),
                    tmp_path)
    assert out["trials"] == 3 and len(out["ran"]) == 2             # the first trial was not rerun
    rows = list(csv.DictReader((tmp_path / "trials.csv").open()))
    assert [r["state"] for r in rows] == ["COMPLETE"] * 3
    best = yaml.safe_load((tmp_path / "best.yaml").read_text())
    assert best["value"] == max(float(r["value"]) for r in rows)
    assert best["agent"]["name"] == "ppo" and best["agent"]["learning_rate"] == best["params"]["learning_rate"]
    agent_yaml = yaml.safe_load((tmp_path / "agent" / "best.yaml").read_text())
    assert agent_yaml == best["agent"]
    assert len({r["dir"] for r in rows}) == 3 and all(Path(r["dir"], "metrics.json").exists() for r in rows)


# ---------------------------------------------------------------------- defects a new user hit
@pytest.mark.parametrize("episodes", [0, -1])
def test_evaluate_refuses_a_count_of_episodes_below_one(tmp_path, episodes):
    """episodes=0 crashed (KeyError: 'success_ci95') and episodes=-1 ran 99 episodes (the split
    sliced [:-1]): both are a ValueError naming the option and its range, before any episode."""
    from taigym.apps.evaluate import evaluate_cfg

    cfg = compose("evaluate", ["env=pour_simplified_tilt", "agent=random", f"episodes={episodes}", "progress=false"])
    with pytest.raises(ValueError, match=rf"episodes must be an integer >= 1, got {episodes}"):
        evaluate_cfg(cfg, tmp_path / "run")
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("agent", ["ppo", "sac", "bc", "dagger"])
def test_evaluating_a_learned_agent_needs_its_checkpoint(tmp_path, agent):
    """evaluate agent=ppo without a checkpoint scored an untrained policy, and agent=bc failed
    with a misleading 'unknown option': both now ask for the checkpoint, before any episode."""
    from taigym.apps.evaluate import evaluate_cfg

    cfg = compose("evaluate", ["env=pour_simplified", f"agent={agent}", "episodes=2", "progress=false"])
    with pytest.raises(ValueError, match=rf"agent={agent} acts with trained weights: give checkpoint="):
        evaluate_cfg(cfg, tmp_path / "run")
    cfg = compose("evaluate", ["env=pour_simplified", f"agent={agent}", "episodes=2",
                               f"checkpoint={tmp_path / 'nothing'}"])
    with pytest.raises(FileNotFoundError, match="does not exist"):
        evaluate_cfg(cfg, tmp_path / "run")


def test_bad_learner_options_fail_before_any_expert_time(tmp_path):
    """On Transport-v0 (49 observation entries) Pour-v0's ignore_obs failed after 34 s of expert
    collection; it now fails at once, naming the option and the range, as do unknown features."""
    from taigym.apps.train import run_training

    for over, match in ((["agent.ignore_obs=[3,56]"], r"ignore_obs must hold observation indices in \[0, 48\]"),
                        (["agent.features=target_path"], "target_path.*needs Pour-v0"),
                        (["agent.features=bogus"], "features must be one of")):
        cfg = compose("train", ["env=transport", "agent=bc", "logger=none", "agent.progress=false", *over])
        with pytest.raises(ValueError, match=match):
            run_training(cfg, tmp_path / "run")
        assert not list((tmp_path / "run").glob("demos/*.npz"))      # no expert episode was run


@pytest.mark.integration
def test_sweep_refuses_a_rerun_with_another_budget(tmp_path):
    """A rerun with a changed budget silently resumed the old study, and best.yaml then reported
    a budget its best trial did not use: the study records its settings and refuses."""
    from taigym.apps.sweep import run_sweep

    base = ["env=pour_simplified_tilt", "sweep.eval_episodes=1", "agent.n_envs=2", "agent.n_steps=64",
            "agent.batch_size=64", "sweep.params.n_steps.choices=[64]", "sweep.n_trials=1"]
    run_sweep(compose("sweep", [*base, "sweep.fixed.total_timesteps=128"]), tmp_path)
    with pytest.raises(ValueError, match=r"sweep\.fixed\.total_timesteps: 128 -> 256"):
        run_sweep(compose("sweep", [*base, "sweep.fixed.total_timesteps=256"]), tmp_path)
    best = yaml.safe_load((tmp_path / "best.yaml").read_text())
    assert best["agent"]["total_timesteps"] == 128
    # more trials of the same study are fine (n_trials is not a setting of the trials)
    out = run_sweep(compose("sweep", [*base[:-1], "sweep.n_trials=2", "sweep.fixed.total_timesteps=128"]), tmp_path)
    assert out["trials"] == 2


@pytest.mark.integration
def test_app_errors_are_one_line_and_leave_no_empty_run_dir(tmp_path):
    """Bad arguments: one line naming the problem, exit status 1, no traceback (demos printed
    raw tracebacks), and no run directory left behind (benchmark left an empty one)."""
    for app, args, message in (
            ("datasets", ["env=pour_simplified", "episodes=0"], "episodes must be an integer >= 1"),
            ("evaluate", ["env=transport", "agent=scripted", "episodes=1"], "scripted agent acts in pour envs"),
            ("benchmark", ["agents=[expert,ppo]", "envs=[pour_simplified]"], "ppo acts with trained weights"),
            ("benchmark", ["agents=[nosuch]", "envs=[pour_simplified]"], "nosuch")):
        run = tmp_path / app / "run"
        proc = run_app(app, *args, f"hydra.run.dir={run}", ok=False)
        out = proc.stdout + proc.stderr
        assert proc.returncode == 1, out[-2000:]
        assert message in out and "Traceback" not in out, out[-2000:]
        assert not run.exists(), sorted(run.rglob("*"))


@pytest.mark.integration
def test_app_logs_reach_hydras_job_log(tmp_path):
    """evaluate.log and train.log stayed empty (the apps printed): they now hold the run's
    messages."""
    run_app("evaluate", "env=pour_simplified_tilt", "agent=random", "episodes=2", "progress=false",
            f"hydra.run.dir={tmp_path / 'ev'}")
    assert "random on pour_simplified_tilt (2 episodes): success" in (tmp_path / "ev" / "evaluate.log").read_text()
    run_app("train", "agent=ppo", "env=pour_simplified_tilt", "logger=none", "eval_episodes=1",
            "agent.total_timesteps=128", "agent.n_envs=2", "agent.n_steps=64", "agent.batch_size=64",
            "agent.progress_bar=false", f"hydra.run.dir={tmp_path / 'tr'}")
    assert "ppo: trained in" in (tmp_path / "tr" / "train.log").read_text()


@pytest.mark.integration
def test_benchmark_honours_the_users_config_search_path(tmp_path):
    """A user's own env config (hydra.searchpath) is found for every cell (the benchmark
    composed its cells from taigym's configs alone: "Could not find 'env/my_tilt'")."""
    (tmp_path / "conf" / "env").mkdir(parents=True)
    (tmp_path / "conf" / "env" / "my_tilt.yaml").write_text(
        (CONF / "env" / "pour_simplified_tilt.yaml").read_text().replace("name: pour_simplified_tilt", "name: my_tilt"))
    proc = run_app("benchmark", "agents=[random]", "envs=[my_tilt]", "episodes=1", "progress=false",
                   f"hydra.searchpath=[file://{tmp_path / 'conf'}]", f"hydra.run.dir={tmp_path / 'run'}")
    assert "random_my_tilt_success_rate" in last_json(proc.stdout)
    assert "### my_tilt" in (tmp_path / "run" / "table.md").read_text()


def test_benchmark_tables_per_env_and_skips_missing_checkpoints(tmp_path):
    from taigym.apps.benchmark import run_benchmark

    cfg = compose("benchmark", ["agents=[random,ppo]", "envs=[pour_simplified_tilt]", "episodes=1", "progress=false",
                                "missing_checkpoints=skip", f"checkpoints={{ppo: '{tmp_path}/none/{{env}}'}}"])
    out = run_benchmark(cfg, tmp_path / "run")
    assert [s["agent"] for s in out["summary"]] == ["random"] and len(out["missing"]) == 1
    table = (tmp_path / "run" / "table.md").read_text()
    assert "### pour_simplified_tilt" in table and "Not run: ppo (no checkpoint" in table
    with pytest.raises(FileNotFoundError, match="missing_checkpoints=skip"):
        run_benchmark(compose("benchmark", ["agents=[random,ppo]", "envs=[pour_simplified_tilt]", "episodes=1",
                                            f"checkpoints={{ppo: '{tmp_path}/none'}}"]), tmp_path / "run2")
    assert not (tmp_path / "run2").exists()


def test_a_suite_narrowed_to_some_agents_plans_their_cells_only():
    """``suite=all 'agents=[expert,random]'`` runs those two: the suite's checkpoint paths of the
    learned agents left out are not an error (they were: "checkpoints name agents not in
    agents: bc, dagger, ppo, sac"), while an override of an agent not run still is."""
    from taigym.apps.benchmark import plan_cells

    from omegaconf import OmegaConf

    plain = OmegaConf.to_container(compose("benchmark", ["suite=all", "agents=[expert,random]",
                                                         "envs=[transport]"]), resolve=True)
    cells, skipped = plan_cells(plain)
    assert {c[0] for c in cells} == {"expert", "random"} and not skipped
    plain["agent_overrides"] = {"sac": {"deterministic": True}}
    with pytest.raises(ValueError, match="agent_overrides name agents not in agents: sac"):
        plan_cells(plain)


@pytest.mark.integration
def test_suite_benchmark_smoke(tmp_path):
    """``benchmark suite=all`` on two cheap envs, one episode a cell: each env's own expert and
    metrics, a learned agent found by the train app's run directory, the others listed as
    without a checkpoint; rerunning skips every cell."""
    run_app("train", "agent=bc", "env=pour_simplified", "logger=none", "eval_episodes=0", "agent.expert=scripted",
            "agent.episodes=3", "agent.max_epochs=2", "agent.hidden=[16]", "agent.progress=false",
            "hydra.run.dir=runs/train/bc/pour_simplified/seed0", cwd=tmp_path)
    args = ["suite=all", "envs=[pour_simplified,transport]", "episodes=1", "progress=false", "hydra.run.dir=bench"]
    proc = run_app("benchmark", *args, cwd=tmp_path)
    figures = last_json(proc.stdout)
    assert set(figures) >= {"expert_pour_simplified_success_rate", "expert_transport_success_rate",
                            "bc_pour_simplified_success_rate", "random_transport_latency_ms"}
    table = (tmp_path / "bench" / "table.md").read_text()
    assert "| expert (sqp) |" in table and "| expert (sfrrt) |" in table
    assert "reached [95 % CI]" in table and "in_target [95 % CI]" in table
    assert "Not run: dagger (no checkpoint runs/train/dagger/pour_simplified/seed0); ppo (no checkpoint" in table
    assert "| bc | 1 |" in table and "Not run: bc (no checkpoint runs/train/bc/transport/seed0)" in table
    assert (tmp_path / "bench" / "plots" / "transport.png").exists()
    rerun = run_app("benchmark", *args, cwd=tmp_path)
    assert "ran 0 cell(s), skipped 5 already done, 7 without a checkpoint" in rerun.stdout + rerun.stderr


@pytest.mark.integration
@pytest.mark.parametrize("env,agent", [("transport", "bc"), ("transport", "dagger"), ("multicontact", "bc")])
def test_learners_train_from_the_envs_expert(tmp_path, env, agent):
    """bc and dagger train on the other envs from their own expert (sfrrt, stance), with the
    env's input defaults, and the trained agent loads and acts (tiny budgets: this checks the
    pipeline, not how well they learn)."""
    from taigym.apps.evaluate import run_agent
    from taigym.apps.train import run_training

    budget = (["agent.episodes=2"] if agent == "bc" else
              ["agent.demo_episodes=1", "agent.rounds=1", "agent.episodes_per_round=1"])
    cfg = compose("train", [f"env={env}", f"agent={agent}", "logger=none", "eval_episodes=0", "agent.max_epochs=2",
                            "agent.hidden=[16]", "agent.eval_episodes=0", "agent.progress=false",
                            "agent.success_only=false", *budget])
    result = run_training(cfg, tmp_path)
    meta = make_policy_meta(result["checkpoint"])
    assert meta["cfg"]["ignore_obs"] == [] and meta["cfg"]["features"] == LEARNER_FEATURES.get(env, "none")
    if agent == "bc":
        assert meta["source"] == f"expert:{EXPERTS[env]}"
    rows, _, metrics = run_agent(cfg.env, cfg.agent, None, episodes=1, checkpoint=result["checkpoint"])
    assert rows[0]["steps"] > 0 and set(metrics) <= set(rows[0])


def make_policy_meta(path) -> dict:
    import torch

    return torch.load(path, map_location="cpu", weights_only=False)["meta"]
