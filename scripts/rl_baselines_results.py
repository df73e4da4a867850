"""RL baselines (PPO, SAC) on the suite's envs, from the train app's run directories: final rows
with 95 % intervals and learning curves.

Each ``--runs`` directory is one ``python -m taigym.apps.train agent=<ppo|sac> env=<env>
seed=<k> ...`` run. From it:

* the final row: ``result.json`` (the train app's evaluation of the final policy on the first
  ``eval_episodes`` eval tasks: every metric of the env with its 95 % interval, Wilson for
  rates and Student t for means; the load average at the end), the training seconds summed
  over the sessions of a resumed run (``metrics.csv``), the env steps trained
  (``checkpoints/state.json``) and ``train_config.json``'s agent, env and seed;
* the curve: ``curve.csv`` when the run evaluated on the eval tasks as it trained
  (``agent.eval_every``: success and spilled fraction on the eval tasks, the mean return of the
  training episodes since the previous point), else the training episodes' metrics that the
  console logger wrote (``metrics.csv``: ``rollout/success``, ``rollout/spilled`` where the env
  has it, and SB3's ``rollout/ep_rew_mean``, the mean return of the last 100 training episodes
  under the training reward).

A directory of ``python -m taigym.apps.evaluate`` (a ``metrics.json`` and no
``train_config.json``: ``agent=random`` on the same eval tasks, the floor to beat) gives a row
without training and no curve. A run still training (no ``result.json`` yet) gives its curve so
far and no row. Writes
``docs/results/<name>.csv`` (rows), ``<name>_curve.csv`` and ``<name>.png`` (success, return and
spilled fraction against env steps, a column per env), ``<name>.json`` (title, command, notes). Ends with
one JSON line (the rows)::

    python scripts/rl_baselines_results.py runs/train/sac/pour_simplified/seed0 runs/train/sac/transport/seed0
"""

from __future__ import annotations

import argparse
import csv
import json
import math
from pathlib import Path

from taigym.apps.common import save_figure, write_csv, write_result_meta

ROOT = Path(__file__).resolve().parent.parent
ROW_FIELDS = ("agent", "env", "reward", "seed", "env_steps", "train_seconds", "load_1min", "episodes", "success",
              "success_ci95", "mean_return", "return_ci95", "metrics")
CURVE_FIELDS = ("agent", "env", "reward", "seed", "steps", "seconds", "source", "success", "return", "spilled")


def _fmt_ci(ci) -> str:
    return f"[{ci[0]:.2f}, {ci[1]:.2f}]"


def _num(value) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan


def run_info(run: Path) -> dict:
    config = json.loads((run / "train_config.json").read_text())
    state = run / "checkpoints" / "state.json"
    steps = json.loads(state.read_text())["num_timesteps"] if state.exists() else None
    # the training envs' reward mode (agent.train_env_kwargs, else the env config's kwargs), "default"
    # when neither sets it; the final rows evaluate under the env's default reward either way
    kwargs = {**(config["env"].get("kwargs") or {}), **(config["agent"].get("train_env_kwargs") or {})}
    return {"agent": config["agent"]["name"], "env": config["env"]["name"],
            "reward": kwargs.get("reward_mode", "default"), "seed": config["seed"], "env_steps": steps}


def logged_seconds(run: Path) -> float:
    """Training seconds over every session of a resumed run: the sum of each session's last
    ``time/time_elapsed`` (SB3's, counted from the start of each ``learn``) in ``metrics.csv``."""
    path, total, last = run / "metrics.csv", 0.0, 0.0
    if not path.exists():
        return 0.0
    with path.open(newline="") as f:
        for r in csv.DictReader(f):
            t = _num(r.get("time/time_elapsed"))
            if math.isnan(t):
                continue
            if t < last:                          # a new session
                total += last
            last = t
    return total + last


def is_train_run(run: Path) -> bool:
    return (run / "train_config.json").exists()


def eval_columns(head: dict) -> dict:
    """An evaluation's headline (``taigym.apps.evaluate.headline``) as the row's columns."""
    others = []                                   # every other metric with its interval, in one cell
    for key, value in head.items():
        name = key[:-len("_ci95")]
        if key.endswith("_ci95") and key not in ("success_ci95", "mean_return_ci95") and math.isfinite(head[name]):
            short = name.removeprefix("mean_").removesuffix("_rate")
            others.append(f"{short} {head[name]:.3g} [{value[0]:.3g}, {value[1]:.3g}]")
    return {"episodes": head["episodes"], "success": head["success_rate"],
            "success_ci95": _fmt_ci(head["success_ci95"]),
            "mean_return": round(head.get("mean_return", math.nan), 3),
            "return_ci95": "[{:.3g}, {:.3g}]".format(*head.get("mean_return_ci95", (math.nan, math.nan))),
            "metrics": "; ".join(others)}


def final_row(run: Path) -> dict | None:
    """The run's final evaluation (``result.json``; an evaluate directory's ``metrics.json``), or
    None while it trains."""
    if not is_train_run(run):
        from taigym.apps.evaluate import headline

        out = json.loads((run / "metrics.json").read_text())
        return {"agent": out["agent"], "env": out["env"], "reward": "", "seed": "", "env_steps": 0, "train_seconds": 0,
                "load_1min": "", **eval_columns(headline(out))}
    path = run / "result.json"
    if not path.exists():
        return None
    result, info = json.loads(path.read_text()), run_info(run)
    seconds = max(result["train_seconds"], logged_seconds(run))   # result.json: the last session's
    return {**info, "train_seconds": round(seconds), "load_1min": result["load"][0], **eval_columns(result["eval"])}


def curve(run: Path) -> list[dict]:
    """The run's learning curve (module docstring); none for an evaluate directory."""
    if not is_train_run(run):
        return []
    info = run_info(run)
    base = {k: info[k] for k in ("agent", "env", "reward", "seed")}
    if (run / "curve.csv").exists():
        with (run / "curve.csv").open(newline="") as f:
            return [{**base, "steps": int(r["steps"]), "seconds": r["seconds"], "source": "eval tasks",
                     "success": _num(r["eval_success"]), "return": _num(r["train_return"]),
                     "spilled": _num(r.get("eval_spilled"))}
                    for r in csv.DictReader(f)]
    with (run / "metrics.csv").open(newline="") as f:
        rows = [r for r in csv.DictReader(f) if r.get("rollout/ep_rew_mean") and r.get("rollout/success")]
    return [{**base, "steps": int(r["step"]), "seconds": r.get("time/time_elapsed", ""), "source": "training episodes",
             "success": _num(r.get("rollout/success")), "return": _num(r["rollout/ep_rew_mean"]),
             "spilled": _num(r.get("rollout/spilled"))} for r in rows]


def plot(rows: list[dict], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    envs = list(dict.fromkeys(r["env"] for r in rows))
    fig, axes = plt.subplots(3, len(envs), figsize=(3.6 * len(envs), 7.8), squeeze=False)
    for j, env in enumerate(envs):
        mine = [r for r in rows if r["env"] == env]
        for key in dict.fromkeys((r["agent"], r["seed"], r["reward"], r["source"]) for r in mine):
            line = [r for r in mine if (r["agent"], r["seed"], r["reward"], r["source"]) == key]
            label = f"{key[0]} seed {key[1]}, {key[2]} reward ({key[3]})"
            steps = [r["steps"] / 1e3 for r in line]
            axes[0, j].plot(steps, [r["success"] for r in line], marker="o", ms=2, label=label)
            axes[1, j].plot(steps, [r["return"] for r in line], marker="o", ms=2, label=label)
            axes[2, j].plot(steps, [r["spilled"] for r in line], marker="o", ms=2, label=label)
        budgets = [max(r["steps"] for r in mine if r["agent"] == a) for a in {r["agent"] for r in mine}]
        if max(budgets) > 5 * min(budgets):           # agents' budgets of different scales (PPO 2M, SAC 150k)
            for ax in axes[:, j]:
                ax.set_xscale("log")
        axes[0, j].set_title(env)
        axes[0, j].set_ylim(-0.02, 1.02)
        axes[0, j].set_ylabel("success")
        axes[1, j].set_ylabel("return of training episodes", fontsize=8)
        if not any(math.isfinite(r["spilled"]) for r in mine):   # an env without liquid (MultiContact)
            axes[2, j].set_axis_off()
        axes[2, j].set_ylim(-0.02, 1.02)
        axes[2, j].set_ylabel("spilled fraction", fontsize=8)
        axes[2, j].set_xlabel("env steps (thousands)")
        axes[0, j].legend(fontsize=6, loc="best")
        for ax in axes[:, j]:
            ax.grid(alpha=0.3)
    fig.suptitle(title)
    fig.tight_layout()
    save_figure(fig, path)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("runs", type=Path, nargs="+", help="train run directories")
    p.add_argument("--name", default="rl_baselines", help="file stem under docs/results")
    p.add_argument("--title", default="PPO and SAC from scratch on the suite's envs")
    p.add_argument("--out", type=Path, default=ROOT / "docs" / "results")
    args = p.parse_args()
    rows = [row for row in map(final_row, args.runs) if row is not None]
    curves = [point for run in args.runs for point in curve(run)]
    write_csv(args.out / f"{args.name}.csv", rows, ROW_FIELDS)
    write_csv(args.out / f"{args.name}_curve.csv", curves, CURVE_FIELDS)
    write_result_meta(
        args.out / f"{args.name}.json", args.title,
        "python -m taigym.apps.train agent=<ppo|sac> env=<env> seed=<k> [overrides]; "
        "python scripts/rl_baselines_results.py <run directories>",
        "rows: the final deterministic policy once on each of the first `episodes` eval tasks (the "
        "env's default reward), success with its Wilson 95 % interval and every other metric with "
        "its interval (Wilson for rates, Student t for means); train_seconds is wall time on the "
        "shared 2-core machine, load_1min the 1-minute load average at the end; rows with 0 env "
        "steps are `python -m taigym.apps.evaluate agent=random` on the same eval tasks. Curves: "
        "success (and spilled) on the eval tasks during training when the run evaluated (source "
        "'eval tasks'; its return is the mean of the training episodes since the previous point), else the "
        "training episodes' (source 'training episodes': success and spilled fraction of the episodes "
        "that ended in the logging interval, return the mean of the last 100 under the training reward).")
    plot(curves, args.out / f"{args.name}.png", args.title)
    print(json.dumps(rows))


if __name__ == "__main__":
    main()
