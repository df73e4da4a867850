"""PPO from sfrrt's demonstrations against PPO from scratch on Transport-v0: curves and evaluations.

Reads the from-demonstrations run's ``metrics.csv`` (the train app's log: after each PPO update,
the training episodes that ended in it), the from-scratch recipe's curve as
``docs/results/rl_transport_curve.csv`` keeps it (run ``std 0.2, collision 5 (recipe)``), and the
``metrics.json`` of ``python -m taigym.apps.evaluate agent=ppo env=transport episodes=N
checkpoint=...`` for each arm (and random). Writes ``docs/results/rl_demos_transport.csv`` (a
row per evaluation: success, reached, collided, spilled with their 95 % intervals),
``rl_demos_transport.json`` (where it comes from) and ``rl_demos_transport.png`` (the training
episodes' reached and collided rates against env steps, both arms, 20-update running means).
Ends with one JSON line (the rows)::

    python scripts/rl_demos_transport_results.py --demos-run <run dir> \\
        --eval demos=<metrics.json> --eval scratch=<metrics.json> --eval random=<metrics.json>
"""

from __future__ import annotations

import argparse
import csv
import json
from pathlib import Path

import numpy as np

from taigym.apps.common import save_figure, write_csv, write_result_meta

ROOT = Path(__file__).resolve().parent.parent
SCRATCH = "std 0.2, collision 5 (recipe)"
FIELDS = ("agent", "episodes", "success", "success_ci95", "reached", "reached_ci95", "collided", "collided_ci95",
          "spilled", "checkpoint")


def curves(demos_run: Path, scratch_csv: Path) -> dict[str, dict[str, np.ndarray]]:
    """{arm: {steps, reached, collided, success}} of the training episodes after each update."""
    out = {}
    with (demos_run / "metrics.csv").open(newline="") as f:
        rows = [r for r in csv.DictReader(f) if r.get("rollout/reached")]
    out["from demonstrations"] = {k: np.array([float(r[f"rollout/{k}"]) for r in rows]) for k in
                                  ("reached", "collided", "success")}
    out["from demonstrations"]["steps"] = np.array([float(r["time/total_timesteps"]) for r in rows])
    with scratch_csv.open(newline="") as f:
        rows = [r for r in csv.DictReader(f) if r["run"] == SCRATCH]
    out["from scratch"] = {k: np.array([float(r[k]) for r in rows]) for k in ("reached", "collided", "success")}
    out["from scratch"]["steps"] = np.array([float(r["steps"]) for r in rows])
    return out


def eval_row(name: str, path: Path) -> dict:
    data = json.loads(path.read_text())
    agg = data["aggregate"]

    def ci(key: str) -> str:
        lo, hi = agg[f"{key}_ci95"]
        return f"[{lo:.2f}, {hi:.2f}]"

    return {"agent": name, "episodes": agg["episodes"], "success": agg["success_rate"], "success_ci95": ci("success"),
            "reached": agg["reached_rate"], "reached_ci95": ci("reached_rate"), "collided": agg["collided_rate"],
            "collided_ci95": ci("collided_rate"), "spilled": round(agg["mean_spilled"], 4),
            "checkpoint": data.get("checkpoint") or ""}


def plot(data: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(8, 3.2), sharex=True)
    for (arm, d), colour in zip(data.items(), ("tab:orange", "tab:blue")):
        k = 20
        for ax, key in zip(axes, ("reached", "collided")):
            y = np.convolve(d[key], np.ones(k) / k, mode="valid")
            ax.plot(d["steps"][k - 1:] / 1e3, y, color=colour, label=arm)
    for ax, key in zip(axes, ("reached the goal (training episodes)", "collided (training episodes)")):
        ax.set_xlabel("env steps (thousands)")
        ax.set_ylabel(key, fontsize=8)
        ax.set_ylim(-0.02, 1.02)
        ax.grid(alpha=0.3)
    axes[0].legend(loc="upper left", fontsize=8)
    fig.suptitle("PPO on Transport-v0, seed 0: from sfrrt's demonstrations and from scratch (20-update means)",
                 fontsize=9)
    fig.tight_layout()
    save_figure(fig, path)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--demos-run", type=Path, required=True)
    p.add_argument("--scratch-curve", type=Path, default=ROOT / "docs/results/rl_transport_curve.csv")
    p.add_argument("--eval", action="append", default=[], help="name=metrics.json (repeatable)")
    p.add_argument("--out", type=Path, default=ROOT / "docs")
    args = p.parse_args()
    rows = [eval_row(*spec.split("=", 1)[:1], Path(spec.split("=", 1)[1])) for spec in args.eval]
    write_csv(args.out / "results/rl_demos_transport.csv", rows, FIELDS)
    write_result_meta(
        args.out / "results/rl_demos_transport.json",
        "PPO from sfrrt's demonstrations against PPO from scratch on Transport-v0",
        "python -m taigym.apps.train agent=ppo env=transport agent.init_from=taigym/transport/sfrrt-v0 "
        "'agent.init_ignore_obs=[3,4,5]' agent.init_critic_steps=5120 agent.policy_kwargs.log_std_init=-2.0 "
        "agent.total_timesteps=150000 seed=0; python -m taigym.apps.evaluate agent=ppo env=transport episodes=100 "
        "checkpoint=<agent.zip>; python scripts/rl_demos_transport_results.py",
        "the first 100 eval tasks, each run once with the deterministic policy (random: its own seeds), with "
        "Wilson 95 % intervals; from scratch is the PPO recipe's run at 250k env steps, from demonstrations at "
        "150k; the figure's curves are the training episodes.")
    plot(curves(args.demos_run, args.scratch_curve), args.out / "results/rl_demos_transport.png")
    print(json.dumps(rows))


if __name__ == "__main__":
    main()
