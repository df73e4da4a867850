"""The results of PPO on Transport-v0, from train and evaluate run directories.

Reads the training episodes' metrics that the train app's console logger writes every PPO
update (``<run>/metrics.csv``: ``rollout/success``, ``reached``, ``spilled``, ``collided``: means
over the episodes that ended in that update's 1024 steps; ``ep_rew_mean``, ``ep_len_mean``: SB3's
means over the last 100 episodes) of each ``--runs
label=dir``, and the evaluate app's ``metrics.json`` of each ``--evals label=dir``. Writes:

* ``docs/results/rl_transport.csv``: a row per evaluation (success, spilled, reached, collided
  with their 95 % intervals: Wilson for rates, Student t for means);
* ``docs/results/rl_transport.json``: where the table comes from (title, commands, machine);
* ``docs/results/rl_transport_curve.{csv,png,md}``: the learning curves, a row per run and PPO
  update, plotted (reached, collided, spilled, episode length); the page links the CSV.

Ends with one JSON line (the evaluation rows)::

    python scripts/rl_transport_results.py --runs dense=runs/train/ppo/transport/seed0 \\
        --evals ppo=runs/evaluate/ppo-transport-rltr random=runs/evaluate/random-transport-rltr
"""

from __future__ import annotations

import argparse
import csv
import json
from pathlib import Path

from taigym.apps.common import save_figure, write_atomic, write_csv, write_result_meta

ROOT = Path(__file__).resolve().parent.parent
CURVE = {"success": "rollout/success", "reached": "rollout/reached", "spilled": "rollout/spilled",
         "collided": "rollout/collided", "ep_return": "rollout/ep_rew_mean", "ep_len": "rollout/ep_len_mean"}
CURVE_FIELDS = ("run", "steps", "seconds", *CURVE)
EVAL_FIELDS = ("agent", "episodes", "success", "success_ci95", "spilled", "spilled_ci95", "reached",
               "reached_ci95", "collided", "collided_ci95", "progress", "mean_steps", "wall_seconds")


def _pairs(items: list[str]) -> dict[str, Path]:
    out = {}
    for item in items:
        label, sep, path = item.partition("=")
        if not sep:
            raise ValueError(f"expected label=directory, got {item!r}")
        out[label] = Path(path)
    return out


def curve_rows(label: str, run: Path) -> list[dict]:
    with (run / "metrics.csv").open(newline="") as f:
        rows = [r for r in csv.DictReader(f) if r.get(CURVE["ep_len"])]
    return [{"run": label, "steps": int(r["step"]), "seconds": r.get("time/time_elapsed", ""),
             **{k: round(float(r[v]), 4) for k, v in CURVE.items()}} for r in rows]


def progress(episode: dict) -> float:
    """The fraction of the straight distance to the goal an episode covered, (d_0 - d_end) / d_0,
    from its return under Transport-v0's default reward (the evaluations': progress mode, spill
    1 per percent, time 0.01 per step, collision 1, success 1)."""
    return (episode["return_"] + 0.01 * episode["steps"] + float(episode["collided"])
            + 100.0 * episode["spilled"] - float(episode["success"]))


def eval_row(label: str, run: Path) -> dict:
    data = json.loads((run / "metrics.json").read_text())
    agg = data["aggregate"]

    def ci(key):
        lo, hi = agg[f"{key}_ci95"]
        return f"[{lo:.2f}, {hi:.2f}]"

    return {"agent": label, "episodes": agg["episodes"], "success": agg["success_rate"], "success_ci95": ci("success"),
            "spilled": round(agg["mean_spilled"], 4), "spilled_ci95": ci("mean_spilled"),
            "reached": agg["reached_rate"], "reached_ci95": ci("reached_rate"),
            "collided": agg["collided_rate"], "collided_ci95": ci("collided_rate"),
            "progress": round(sum(map(progress, data["episodes"])) / len(data["episodes"]), 3),
            "mean_steps": agg["mean_steps"], "wall_seconds": round(agg["wall_seconds"])}


def plot(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 2, figsize=(8, 5.2), sharex=True)
    for ax, key, label in zip(axes.ravel(), ("reached", "collided", "spilled", "ep_len"),
                              ("reached (rate)", "collided (rate)", "spilled (fraction)", "episode length (steps)")):
        for run in dict.fromkeys(r["run"] for r in rows):
            mine = [r for r in rows if r["run"] == run]
            ax.plot([r["steps"] / 1e3 for r in mine], [r[key] for r in mine], label=run)
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
    for ax in axes[1]:
        ax.set_xlabel("env steps (thousands)")
    axes[0, 0].legend(loc="best", fontsize=8)
    fig.suptitle("PPO on Transport-v0: training episodes of each update (length: last 100)")
    fig.tight_layout()
    save_figure(fig, path)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--runs", nargs="+", default=[f"dense=runs/train/ppo/transport/seed0"])
    p.add_argument("--evals", nargs="*", default=[])
    p.add_argument("--out", type=Path, default=ROOT / "docs")
    args = p.parse_args()
    curves = [row for label, run in _pairs(args.runs).items() for row in curve_rows(label, run)]
    evals = [eval_row(label, run) for label, run in _pairs(args.evals).items()]
    write_csv(args.out / "results/rl_transport_curve.csv", curves, CURVE_FIELDS)
    write_atomic(args.out / "results/rl_transport_curve.md",
                 "# PPO on Transport-v0: learning curves\n\nAfter each PPO update (1024 env steps): the "
                 "success, reached, spilled and collided of the training episodes that ended in it, and "
                 "the return and length of the last 100 (SB3's); written by "
                 "`scripts/rl_transport_results.py`.\n")
    write_csv(args.out / "results/rl_transport.csv", evals, EVAL_FIELDS)
    write_result_meta(
        args.out / "results/rl_transport.json",
        "PPO on Transport-v0 from scratch (train split), evaluated on the first 20 eval tasks",
        "nice python -m taigym.apps.train agent=ppo env=transport seed=0 eval_episodes=0; "
        "python -m taigym.apps.evaluate agent=ppo env=transport episodes=20 "
        "checkpoint=runs/train/ppo/transport/seed0 (agent=random: the floor); "
        "python scripts/rl_transport_results.py --runs ... --evals ...",
        "curves: SB3's rollout means over the last 100 training episodes (train split, the recipe's "
        "dense reward); evaluations: the deterministic policy once on each of the first 20 eval "
        "tasks, the env's default reward.")
    plot(curves, args.out / "results/rl_transport_curve.png")
    print(json.dumps(evals))


if __name__ == "__main__":
    main()
