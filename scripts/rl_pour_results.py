"""The results of the train app's PPO recipe on the simplified Pour-v0, from its run directories.

Reads, for each seed, ``<runs>/seed<k>/`` of ``python -m taigym.apps.train agent=ppo
env=pour_simplified seed=<k>``: ``result.json`` (train seconds, the load average at the end,
the headline metrics on the simplified env's and on the particle env's 100 eval tasks),
``curve.csv`` (eval success every ``eval_every`` env steps) and ``train_config.json``. Writes:

* ``docs/results/rl_pour.csv``: a row per seed (success with its Wilson 95 % interval on both
  fidelities, in T, spilled, train seconds, env steps, load);
* ``docs/results/rl_pour.json``: where the table comes from (title, command, date, machine, notes);
* ``docs/media/ppo_pour_simplified.png``: eval success against env steps, one line per seed.

Ends with one JSON line (the rows)::

    python scripts/rl_pour_results.py --runs runs/train/ppo/pour_simplified --seeds 0 1 2
"""

from __future__ import annotations

import argparse
import csv
import json
from pathlib import Path

from taigym.apps.common import save_figure, write_csv, write_result_meta

ROOT = Path(__file__).resolve().parent.parent
FIELDS = ("seed", "env_steps", "train_seconds", "load_1min", "simplified_success", "simplified_success_ci95",
          "simplified_in_target", "simplified_spilled", "particle_success", "particle_success_ci95",
          "particle_in_target", "particle_spilled")


def _ci(head: dict, key: str) -> str:
    lo, hi = head[f"{key}_ci95"]
    return f"[{lo:.2f}, {hi:.2f}]"


def seed_row(run: Path, seed: int) -> tuple[dict, list[dict]]:
    result = json.loads((run / "result.json").read_text())
    config = json.loads((run / "train_config.json").read_text())
    with (run / "curve.csv").open(newline="") as f:
        curve = list(csv.DictReader(f))
    sim, part = result["eval"], result["transfer_eval"]
    row = {"seed": seed, "env_steps": config["agent"]["total_timesteps"],
           "train_seconds": round(result["train_seconds"]), "load_1min": result["load"][0],
           "simplified_success": sim["success_rate"], "simplified_success_ci95": _ci(sim, "success"),
           "simplified_in_target": round(sim["mean_in_target"], 3), "simplified_spilled": round(sim["mean_spilled"], 3),
           "particle_success": part["success_rate"], "particle_success_ci95": _ci(part, "success"),
           "particle_in_target": round(part["mean_in_target"], 3), "particle_spilled": round(part["mean_spilled"], 3)}
    return row, curve


def plot(curves: dict[int, list[dict]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.6))
    for seed, rows in curves.items():
        steps = [int(r["steps"]) / 1e6 for r in rows]
        success = [float(r["eval_success"]) for r in rows]
        ax.plot(steps, success, marker="o", ms=3, label=f"seed {seed}")
    ax.set_xlim(0, None)
    ax.set_xlabel("env steps (millions)")
    ax.set_ylabel("success on the 100 eval tasks")
    ax.set_ylim(-0.02, 1.02)
    ax.grid(alpha=0.3)
    ax.set_title("PPO on the simplified Pour-v0 (train app recipe)")
    ax.legend(loc="lower right")
    fig.tight_layout()
    save_figure(fig, path)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--runs", type=Path, default=ROOT / "runs/train/ppo/pour_simplified")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--out", type=Path, default=ROOT / "docs")
    args = p.parse_args()
    rows, curves = [], {}
    for seed in args.seeds:
        row, curve = seed_row(args.runs / f"seed{seed}", seed)
        rows.append(row)
        curves[seed] = curve
    write_csv(args.out / "results/rl_pour.csv", rows, FIELDS)
    write_result_meta(
        args.out / "results/rl_pour.json",
        "PPO on Pour-v0: trained on the simplified env, evaluated on both fidelities",
        "python -m taigym.apps.train agent=ppo env=pour_simplified seed=<k> logger=wandb; "
        "python scripts/rl_pour_results.py",
        "100 eval tasks of each fidelity, each run once with the deterministic policy; success with "
        "its Wilson 95 % interval; train_seconds is wall time on the 2-core machine shared with other "
        "jobs (load_1min: the 1-minute load average at the end).")
    plot(curves, args.out / "media/ppo_pour_simplified.png")
    print(json.dumps(rows))


if __name__ == "__main__":
    main()
