"""The Hydra apps (evaluate, benchmark, train, sweep), the loggers and the SB3 agents.

Everything runs on the simplified Pour-v0 with tiny budgets, in tmp dirs, with W&B offline (or
disabled) and Ray's usage reporting off: nothing touches the network.
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

from taigym.apps import _common
from taigym.apps.logging import ConsoleLogger, NullLogger, make_logger

REPO = Path(__file__).resolve().parents[1]
CONF = REPO / "taigym" / "conf"
# a PPO small enough to train in seconds on the one-task problem (env=pour_simplified_tilt)
TINY_PPO = ["agent.n_envs=4", "agent.n_steps=128", "agent.batch_size=128", "agent.progress_bar=false"]


def compose(config: str, overrides: list[str]):
    from hydra import compose as hydra_compose
    from hydra import initialize_config_module

    with initialize_config_module("taigym.conf", version_base="1.3"):
        return hydra_compose(config_name=config, overrides=overrides)


def run_app(app: str, *args: str, timeout: float = 240) -> subprocess.CompletedProcess:
    env = {**os.environ, "WANDB_MODE": "offline", "TI_SKIP_VERSION_CHECK": "ON", "TAIGYM_FAST_COMPILE": "1",
           "HYDRA_FULL_ERROR": "1"}
    proc = subprocess.run([sys.executable, "-m", f"taigym.apps.{app}", *args], capture_output=True,
                          text=True, timeout=timeout, env=env, cwd=REPO)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc


def last_json(text: str) -> dict:
    return json.loads(text.strip().splitlines()[-1])


# ---------------------------------------------------------------------- configs
def test_config_groups_are_shipped_and_match_the_code():
    for group, names in {"env": ["pour", "pour_simplified", "pour_simplified_tilt"],
                         "agent": ["sqp", "scripted", "random", "ppo", "sac"],
                         "planner": ["sqp"], "logger": ["none", "console", "wandb"],
                         "sweep": ["ppo_optuna"]}.items():
        for name in names:
            assert (CONF / group / f"{name}.yaml").exists(), f"{group}/{name}.yaml"
    from taigym.agents import ppo, sac, scripted
    from taigym.planners.sqp import SQPConfig

    planner = yaml.safe_load((CONF / "planner" / "sqp.yaml").read_text())
    assert set(planner) - {"name"} == {f.name for f in dataclasses.fields(SQPConfig)}
    assert set(yaml.safe_load((CONF / "agent" / "scripted.yaml").read_text())) - {"name"} == set(scripted.DEFAULTS)
    for mod in (ppo, sac):
        keys = set(yaml.safe_load((CONF / "agent" / f"{mod.__name__.split('.')[-1]}.yaml").read_text()))
        assert keys - {"name"} <= set(mod.DEFAULTS), keys - set(mod.DEFAULTS)
    # package data: the wheel ships the YAMLs
    text = (REPO / "pyproject.toml").read_text()
    assert '"taigym.conf" = ["*.yaml", "**/*.yaml"]' in text


def test_agent_options_from_configs():
    cfg = compose("evaluate", ["agent=sqp", "planner.final_lean=2.2"])
    opts = _common.agent_options(cfg.agent, cfg.planner)
    assert opts["final_lean"] == 2.2 and "nodes" not in opts and "name" not in opts
    cfg = compose("train", ["agent=ppo", "agent.learning_rate=1e-3", "seed=3"])
    opts = _common.agent_options(cfg.agent)
    assert opts["learning_rate"] == 1e-3 and opts["seed"] == 3 and "name" not in opts
    spec = _common.expert_spec({"name": "x", "expert": "sqp", "expert_options": {"replan_every": 5}},
                               {"final_lean": 2.0, "nodes": None})
    assert spec == ("sqp", {"final_lean": 2.0, "replan_every": 5})


def test_agents_that_need_no_checkpoint_build_from_their_configs():
    """``evaluate agent=<name>`` builds each agent from its whole config (rh's holds its
    training options too) and it acts."""
    import gymnasium as gym
    import numpy as np

    env = gym.make("taigym/Pour-v0", fidelity="simplified")
    for name in ("scripted", "random", "rh", "cmaes", "sqp"):
        cfg = compose("evaluate", [f"agent={name}"])
        agent = _common.build_agent(name, env, _common.agent_options(cfg.agent, cfg.planner))
        if name == "rh":
            obs, info = env.reset(seed=0)
            agent.reset(seed=0)
            a = agent.act(obs, info)
            assert env.action_space.contains(np.asarray(a, np.float32)), name


def test_statistics():
    lo, hi = _common.wilson(3, 3)
    assert 0.43 < lo < 0.44 and hi == 1.0                       # Wilson, not the degenerate Wald [1, 1]
    m, lo, hi = _common.mean_ci([1.0, 2.0, 3.0])
    assert m == 2.0 and lo == pytest.approx(2 - 4.303 / 3 ** 0.5, abs=1e-3)   # t(0.975, 2) = 4.303
    agg = _common.aggregate([{"success": True, "in_target": 0.9, "spilled": 0.0, "in_source": 0.1,
                              "return_": 1.0, "steps": 10, "act_seconds": 1e-3}] * 2)
    assert agg["success_rate"] == 1.0 and agg["latency_ms"] == pytest.approx(1.0)
    assert agg["mean_spilled_ci95"] == [0.0, 0.0]


# ---------------------------------------------------------------------- evaluate
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
    assert agg["success_rate"] == k / 3 and agg["success_ci95"] == pytest.approx(list(_common.wilson(k, 3)))
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
    for name in ("episodes.csv", "summary.csv", "table.md", "plots.png"):
        assert (tmp_path / name).stat().st_size > 0, name
    rows = list(csv.DictReader((tmp_path / "episodes.csv").open()))
    assert len(rows) == 8 and {r["agent"] for r in rows} == {"scripted", "random"}
    summary = {r["agent"]: r for r in csv.DictReader((tmp_path / "summary.csv").open())}
    assert float(summary["scripted"]["success_rate"]) > float(summary["random"]["success_rate"])
    assert float(summary["scripted"]["success_ci95_lo"]) <= float(summary["scripted"]["success_rate"])
    table = (tmp_path / "table.md").read_text()
    assert "| scripted | pour_simplified | 4 |" in table and "latency" in table
    assert (tmp_path / "plots.png").read_bytes()[:4] == b"\x89PNG"

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
    rows, _ = run_agent(cfg.env, {"name": "random"}, None, episodes=3, seed=0)
    rnd = _common.aggregate(rows)
    assert ppo["mean_spilled"] < rnd["mean_spilled"] - 0.2, (ppo, rnd)
    assert ppo["mean_return"] > rnd["mean_return"] + 0.5, (ppo, rnd)
    assert ppo["latency_ms"] < 5.0
    # the saved agent loads through the registry class and acts like the trained one
    from taigym.apps._common import build_agent, make_env

    env = make_env(cfg.env)
    agent = build_agent("ppo", env, checkpoint=tmp_path)
    rows, _ = run_agent(cfg.env, cfg.agent, None, episodes=1, seed=0, agent=agent)
    assert rows[0]["in_target"] == pytest.approx(json.loads((tmp_path / "metrics.json").read_text())["episodes"][0]["in_target"])


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


def test_sac_checkpoints_its_replay_buffer_and_resumes(tmp_path):
    from taigym.agents import sac

    make = _common.env_factory(compose("train", ["env=pour_simplified_tilt"]).env)
    cfg = dict(total_timesteps=200, n_envs=1, learning_starts=50, batch_size=32, buffer_size=1000,
               checkpoint_every=100, policy_kwargs={"net_arch": [32, 32]})
    agent = sac.train(make, cfg, tmp_path, NullLogger())
    assert (tmp_path / "checkpoints" / "replay_buffer.pkl").exists()
    assert agent.model.replay_buffer.size() == 200
    agent = sac.train(make, {**cfg, "total_timesteps": 300}, tmp_path, NullLogger())
    # the buffer came back (without it: the 100 new transitions only)
    assert agent.num_timesteps == 300 and agent.model.replay_buffer.size() >= 299
    with pytest.raises(ValueError, match="bogus"):
        sac.train(make, {**cfg, "bogus": 1}, tmp_path / "x", NullLogger())


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
    from taigym.apps.train import NotTrainableError, run_training

    with pytest.raises(NotTrainableError, match="not trainable.*trainable agents: .*ppo"):
        run_training(compose("train", ["agent=scripted", "logger=none"]), "/tmp/never-written")
    with pytest.raises(ValueError, match="unknown ppo option.*bogus"):
        from taigym.agents import ppo

        ppo.train(lambda: None, {"bogus": 1}, "/tmp/never-written", NullLogger())


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
def test_multirun_over_a_hyperparameter(tmp_path):
    proc = run_app("train", "-m", "agent=ppo", "env=pour_simplified_tilt", "logger=none", "eval_episodes=0",
                   "agent.n_envs=2", "agent.n_steps=64", "agent.batch_size=64", "agent.progress_bar=false",
                   "agent.total_timesteps=256", "agent.learning_rate=1e-4,1e-3", f"hydra.sweep.dir={tmp_path}")
    dirs = sorted(p.name for p in tmp_path.iterdir() if p.is_dir())
    assert len(dirs) == 2 and dirs[0].startswith("0-") and dirs[1].startswith("1-"), (dirs, proc.stdout[-2000:])
    assert "agent.learning_rate=0.0001" in dirs[0] and "agent.learning_rate=0.001," in dirs[1]
    assert all((tmp_path / d / "agent.zip").exists() for d in dirs)


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
