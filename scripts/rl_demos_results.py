"""RL from demonstrations against RL from scratch, from the train app's run directories.

Each arm is a list of run directories of ``python -m taigym.apps.train agent=ppo ...`` (one per
seed; the from-demonstrations arm with ``agent.init_from=<dataset>``), trained for the same env
steps. Reads each run's ``result.json`` (final evaluation with 95 % intervals, train seconds,
load), ``train_config.json`` and ``curve.csv`` (success on the eval tasks every ``eval_every``
env steps; a run with ``agent.total_timesteps=0`` of the demonstrations arm gives the clone's
point at step 0). Writes ``<out>/results/<name>.csv`` (a row per run), ``<name>.json`` (where it
comes from) and ``<out>/results/<name>.png`` (success against env steps, both arms). Ends with
one JSON line (the rows)::

    python scripts/rl_demos_results.py --name rl_demos_pour \\
        --scratch 'runs/train/ppo/pour_simplified/seed*/agent.eval_every=100000,agent.policy_env_kwargs.pivot=frame' \\
        --demos 'runs/train/ppo/pour_simplified/seed*/*init_from*' --step0 <run with total_timesteps=0>
"""

from __future__ import annotations

import argparse
import csv
import glob
import json
from pathlib import Path

from taigym.apps.common import save_figure, write_csv, write_result_meta

ROOT = Path(__file__).resolve().parent.parent
FIELDS = ("arm", "seed", "env_steps", "train_seconds", "load_1min", "success", "success_ci95", "eval_episodes",
          "init_from", "command_overrides")


def _overrides(run: Path) -> str:
    """The run directory below ``seed<k>/`` (the command's overrides, which may hold slashes)."""
    parts = run.parts
    k = max(i for i, p in enumerate(parts) if p.startswith("seed"))
    return "/".join(parts[k + 1:])


def run_row(run: Path, arm: str) -> tuple[dict, list[tuple[int, float]]]:
    result = json.loads((run / "result.json").read_text())
    config = json.loads((run / "train_config.json").read_text())
    ev = result["eval"]
    lo, hi = ev["success_ci95"]
    row = {"arm": arm, "seed": config["seed"], "env_steps": config["agent"]["total_timesteps"],
           "train_seconds": round(result["train_seconds"]), "load_1min": result["load"][0],
           "success": ev["success_rate"], "success_ci95": f"[{lo:.2f}, {hi:.2f}]", "eval_episodes": ev["episodes"],
           "init_from": config["agent"].get("init_from") or "", "command_overrides": _overrides(run)}
    curve = []
    if (run / "curve.csv").exists():
        with (run / "curve.csv").open(newline="") as f:
            curve = [(int(r["steps"]), float(r["eval_success"])) for r in csv.DictReader(f)]
    return row, curve


def plot(curves: dict[str, dict[int, list]], step0: float | None, title: str, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.6))
    for (arm, runs), colour in zip(curves.items(), ("tab:blue", "tab:orange")):
        for i, (seed, pts) in enumerate(sorted(runs.items())):
            if arm == "demos" and step0 is not None:
                pts = [(0, step0)] + pts
            ax.plot([s / 1e6 for s, _ in pts], [v for _, v in pts], marker="o", ms=3, color=colour, alpha=0.8,
                    label=f"{arm}" if i == 0 else None)
    ax.set_xlim(0, None)
    ax.set_xlabel("env steps (millions)")
    ax.set_ylabel("success on the eval tasks")
    ax.set_ylim(-0.02, 1.02)
    ax.grid(alpha=0.3)
    ax.set_title(title, fontsize=9)
    ax.legend(loc="lower right")
    fig.tight_layout()
    save_figure(fig, path)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--name", required=True, help="file stem under <out>/results")
    p.add_argument("--scratch", required=True, help="glob of the from-scratch run directories")
    p.add_argument("--demos", required=True, help="glob of the from-demonstrations run directories")
    p.add_argument("--step0", default=None, help="a from-demonstrations run with total_timesteps=0 (the clone)")
    p.add_argument("--title", default="PPO from demonstrations (orange) and from scratch (blue)")
    p.add_argument("--command", default="see docs/agents/rl.md")
    p.add_argument("--out", type=Path, default=ROOT / "docs")
    args = p.parse_args()
    rows, curves = [], {"scratch": {}, "demos": {}}
    for arm, pattern in (("scratch", args.scratch), ("demos", args.demos)):
        for run in sorted(Path(r) for r in glob.glob(pattern)):
            if not (run / "result.json").exists():
                continue
            row, curve = run_row(run, arm)
            if row["env_steps"] == 0:
                continue
            rows.append(row)
            curves[arm][row["seed"]] = curve
    step0 = None
    if args.step0:
        row, _ = run_row(Path(args.step0), "clone")
        rows.append(row)
        step0 = row["success"]
    write_csv(args.out / f"results/{args.name}.csv", rows, FIELDS)
    write_result_meta(args.out / f"results/{args.name}.json", args.title, args.command,
                      "final success on the eval tasks, each run once with the deterministic policy, with its "
                      "Wilson 95 % interval; train_seconds is wall time on a shared 2-core machine "
                      "(load_1min: the 1-minute load average at the end); arm clone: the from-demonstrations "
                      "policy before any RL (total_timesteps 0).")
    plot(curves, step0, args.title, args.out / f"results/{args.name}.png")
    print(json.dumps(rows))


if __name__ == "__main__":
    main()
