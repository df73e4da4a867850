"""Task-metric convergence: each env's expert on the first eval tasks at the default resolution
and at ``--scale`` times it (twice as many cells along each axis by default). Reports, over the
tasks, the mean |delta in_target|, the mean |delta spilled|, the success agreement, and each
resolution's means (issue 33's task-metric convergence).

Episodes run one at a time and every finished one is written to ``<out>/<env>.json`` at once
(atomically), so an interrupted run resumes where it stopped. The resolution is set through
each env's own argument: Pour-v0 ``resolution`` (cells across 0.8 m), the others ``dx`` (m).

    python scripts/task_convergence.py --env pour transport --n 20
    python scripts/task_convergence.py --report            # tables from the files only
    python scripts/task_convergence.py --default-only --n 5 --out out/a   # one solver's metrics

Ends with one JSON line holding the table's figures.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

os.environ.setdefault("TI_SKIP_VERSION_CHECK", "ON")
os.environ.setdefault("WANDB_MODE", "offline")

import gymnasium as gym  # noqa: E402
import numpy as np  # noqa: E402

import taigym  # noqa: E402,F401  (registers the envs)
import taigym.agents as agents  # noqa: E402
from taigym.envs import tasks  # noqa: E402

# env name -> (env id, task family, expert, resolution argument, its default, finer = default * f)
ENVS = {
    "pour": ("taigym/Pour-v0", "pour", "sqp", "resolution", 128, lambda v, f: int(round(v * f))),
    "pour3d": ("taigym/Pour3D-v0", "pour3d", "sqp", "dx", 0.007, lambda v, f: v / f),
    "transport": ("taigym/Transport-v0", "transport", "sfrrt", "dx", 0.0035, lambda v, f: v / f),
    "transport3d": ("taigym/Transport3D-v0", "transport3d", "sfrrt", "dx", 0.0065, lambda v, f: v / f),
}


# the compared fractions (an env reports those it has: Transport-v0 and Transport3D-v0 no in_target)
METRICS = ("in_target", "spilled")


def write_atomic(path: Path, data) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(data, indent=1))
    os.replace(tmp, path)


def run(name: str, n: int, scale: float | None, out: Path) -> dict:
    """Run (or resume) env ``name``'s expert on eval tasks 0..n-1 at both resolutions (at the
    default only if ``scale`` is None)."""
    env_id, family, expert, arg, default, finer = ENVS[name]
    path = out / f"{name}.json"
    data = json.loads(path.read_text()) if path.exists() else {}
    task_list = tasks(family, split="eval")[:n]
    runs = [("default", default)] + ([] if scale is None else [("fine", finer(default, scale))])
    for label, value in runs:
        rows = data.setdefault(label, {"resolution": {arg: value}, "episodes": []})["episodes"]
        if len(rows) >= n:
            continue
        env = gym.make(env_id, **{arg: value})
        agent = agents.make(expert, env)
        for k in range(len(rows), n):
            t0 = time.perf_counter()
            row = agents.run_episode(env, agent, seed=k, task=task_list[k])
            row.update(task=k, wall_s=time.perf_counter() - t0)
            rows.append(row)
            write_atomic(path, data)
            print(f"{name} {label} ({arg}={value}) task {k}: "
                  + "".join(f"{m} {row[m]:.3f} " for m in METRICS if m in row)
                  + f"success {row['success']} ({row['wall_s']:.0f} s)", flush=True)
        env.close()
    return data


def compare(data: dict) -> dict:
    """The table's row from one env's file: tasks run at both resolutions."""
    a, b = data.get("default", {}).get("episodes", []), data.get("fine", {}).get("episodes", [])
    k = min(len(a), len(b))
    if k == 0:
        return {"tasks": 0}
    a, b = a[:k], b[:k]
    row = {"tasks": k, "resolution": data["default"]["resolution"],
           "fine_resolution": data["fine"]["resolution"]}
    for m in METRICS:
        if m in a[0]:
            row[f"mean_abs_delta_{m}"] = float(np.mean([abs(x[m] - y[m]) for x, y in zip(a, b)]))
            row[m] = [float(np.mean([x[m] for x in r])) for r in (a, b)]
    row["success_agreement"] = float(np.mean([x["success"] == y["success"] for x, y in zip(a, b)]))
    row["success"] = [float(np.mean([x["success"] for x in r])) for r in (a, b)]
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--env", nargs="+", default=list(ENVS), choices=list(ENVS))
    ap.add_argument("--n", type=int, default=20, help="eval tasks (from the split's start)")
    ap.add_argument("--scale", type=float, default=2.0, help="finer resolution / default")
    ap.add_argument("--out", type=Path, default=Path("runs/task_convergence"))
    ap.add_argument("--report", action="store_true", help="only tabulate the files")
    ap.add_argument("--default-only", action="store_true",
                    help="run the default resolution only (to compare two solvers' files)")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    table = {}
    for name in args.env:
        path = args.out / f"{name}.json"
        scale = None if args.default_only else args.scale
        data = run(name, args.n, scale, args.out) if not args.report else (
            json.loads(path.read_text()) if path.exists() else {})
        table[name] = compare(data)
    print("| env | expert | tasks | resolution -> finer | mean abs d in_target | mean abs d spilled | "
          "success agreement | in_target | spilled | success |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name, r in table.items():
        if not r["tasks"]:
            continue
        (arg, value), = r["resolution"].items()
        res = f"{arg} {value} -> {r['fine_resolution'][arg]}"
        cells = [f"{r[f'mean_abs_delta_{m}']:.3f}" if m in r else "-" for m in METRICS]
        cells.append(f"{r['success_agreement']:.2f}")
        cells += [f"{r[m][0]:.3f} -> {r[m][1]:.3f}" if m in r else "-" for m in METRICS]
        cells.append(f"{r['success'][0]:.2f} -> {r['success'][1]:.2f}")
        print(f"| {ENVS[name][0]} | {ENVS[name][2]} | {r['tasks']} | {res} | " + " | ".join(cells) + " |")
    print(json.dumps(table))


if __name__ == "__main__":
    main()
