"""scripts/rl_baselines_results.py on train run directories: a finished run gives a row with
the final evaluation's success and 95 % interval and the training seconds of all its sessions,
a run still training gives its curve and no row, and a run that evaluated as it trained gives
the eval tasks' curve."""

from __future__ import annotations

import csv
import importlib.util
import json
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "rl_baselines_results.py"


def _script():
    spec = importlib.util.spec_from_file_location("rl_baselines_results", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _run(root: Path, agent: str, env: str, steps: int) -> Path:
    run = root / agent / env
    (run / "checkpoints").mkdir(parents=True)
    (run / "train_config.json").write_text(json.dumps({"agent": {"name": agent}, "env": {"name": env}, "seed": 1}))
    (run / "checkpoints" / "state.json").write_text(json.dumps({"num_timesteps": steps}))
    return run


def _csv(path: Path, rows: list[dict]) -> None:
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, list(rows[0]))
        w.writeheader()
        w.writerows(rows)


def test_rows_come_from_finished_runs_and_curves_from_every_run(tmp_path):
    mod = _script()
    done = _run(tmp_path, "sac", "transport", 30000)
    _csv(done / "metrics.csv", [                 # resumed once: SB3's time_elapsed starts again
        {"step": 1000, "rollout/success": "", "rollout/ep_rew_mean": "-3.0", "time/time_elapsed": 50,
         "rollout/spilled": ""},
        {"step": 2000, "rollout/success": "0.25", "rollout/ep_rew_mean": "-2.0", "time/time_elapsed": 100,
         "rollout/spilled": "0.4"},
        {"step": 2500, "rollout/success": "", "rollout/ep_rew_mean": "", "time/time_elapsed": 20,
         "rollout/spilled": ""}])
    (done / "result.json").write_text(json.dumps({
        "train_seconds": 23.4, "load": [5.5, 5.0, 4.0],
        "eval": {"episodes": 20, "success_rate": 0.1, "success_ci95": [0.03, 0.3], "mean_spilled": 0.02,
                 "mean_spilled_ci95": [0.01, 0.03], "mean_return": -1.5}}))
    training = _run(tmp_path, "ppo", "pour_simplified", 50000)
    _csv(training / "curve.csv", [{"steps": 50000, "seconds": 10.0, "train_success": 0.1, "train_return": -0.5,
                                   "eval_success": 0.4}])
    rows = [r for r in map(mod.final_row, (done, training)) if r is not None]
    assert len(rows) == 1
    row = rows[0]
    assert (row["agent"], row["env"], row["seed"], row["env_steps"]) == ("sac", "transport", 1, 30000)
    assert row["success"] == 0.1 and row["success_ci95"] == "[0.03, 0.30]" and row["episodes"] == 20
    assert row["train_seconds"] == 120                # both sessions, not the last one's 23.4
    assert row["metrics"] == "spilled 0.02 [0.01, 0.03]" and row["return_ci95"] == "[nan, nan]"
    assert [(p["steps"], p["success"], p["return"], p["spilled"]) for p in mod.curve(done)] == [(2000, 0.25, -2.0, 0.4)]
    point = mod.curve(training)[0]
    assert point["source"] == "eval tasks" and point["success"] == 0.4 and point["return"] == -0.5


def test_an_evaluate_directory_gives_a_row_without_training_and_no_curve(tmp_path):
    """``agent=random`` through the evaluate app (metrics.json, no train_config.json): the floor
    row on the same eval tasks, 0 env steps, its metrics with their intervals."""
    mod = _script()
    run = tmp_path / "random-transport3d"
    run.mkdir()
    (run / "metrics.json").write_text(json.dumps({
        "agent": "random", "env": "transport3d", "metrics": {"success": "rate", "collided": "rate"},
        "aggregate": {"episodes": 10, "success_rate": 0.0, "success_ci95": [0.0, 0.2775], "collided_rate": 0.9,
                      "collided_rate_ci95": [0.596, 0.982], "mean_return": -1.2, "mean_return_ci95": [-1.5, -0.9]}}))
    row = mod.final_row(run)
    assert (row["agent"], row["env"], row["env_steps"], row["episodes"]) == ("random", "transport3d", 0, 10)
    assert row["success_ci95"] == "[0.00, 0.28]" and row["metrics"] == "collided 0.9 [0.596, 0.982]"
    assert row["mean_return"] == -1.2 and mod.curve(run) == []
