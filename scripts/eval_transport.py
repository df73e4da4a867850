"""SFRRT* (the SFRRT* paper, 2024) against the conservative-jerk baseline (the same path, one fixed jerk) and
OMPL's InformedRRT* path timed as SFRRT*'s (if OMPL is installed) on Transport-v0 eval tasks,
executed in the particle simulator.

Prints one row per task and agent, a summary table (success, spill, trajectory duration,
planning time) and ends with one JSON line.
Usage: PYTHONPATH=. python scripts/eval_transport.py [--tasks 50] [--baseline-jerk 3 3 6]
       [--classifier learned|quasi_static]
"""

from __future__ import annotations

import argparse
import json
import time

import gymnasium as gym
import numpy as np

import taigym
from taigym.agents.base import run_episode


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tasks", type=int, default=50)
    ap.add_argument("--baseline-jerk", type=float, nargs=3, default=(3.0, 3.0, 6.0))
    ap.add_argument("--classifier", default="learned", choices=("learned", "quasi_static"))
    args = ap.parse_args()
    env = gym.make("taigym/Transport-v0")
    tasks = taigym.envs.tasks("transport", "eval")[:args.tasks]
    agents = {"sfrrt": taigym.agents.make("sfrrt", env, classifier=args.classifier),
              "baseline": taigym.agents.make("sfrrt", env, fixed_jerk=tuple(args.baseline_jerk),
                                             classifier="quasi_static")}  # (not used: fixed jerk)
    try:
        import ompl  # noqa: F401

        agents["ompl"] = taigym.agents.make("sfrrt", env, classifier=args.classifier, path_planner="ompl")
    except ImportError:
        print("OMPL is not installed (pip install taigym[ompl]): no InformedRRT* row")
    rows = {name: [] for name in agents}
    t_start = time.perf_counter()
    for i, task in enumerate(tasks):
        for name, agent in agents.items():
            try:
                r = run_episode(env, agent, seed=i, task=task)
                plan = agent.plan
                row = dict(success=r["success"], spilled=r["spilled"],
                           collided=bool(r.get("collided", False)), duration=plan.trajectory.duration,
                           planning=plan.planning_seconds, accepted=plan.accepted,
                           jerk=float(plan.trajectory.jerk[0]))
            except RuntimeError as e:  # no path within the planning budget
                row = dict(success=False, spilled=0.0, collided=False, duration=float("nan"),
                           planning=float("nan"), accepted=False, jerk=float("nan"), error=str(e))
            rows[name].append(row)
            print(f"[{i:3d}] {task.layout:5s} fill={task.fill:.2f} {name:8s} success={row['success']!s:5s} "
                  f"spill={row['spilled']:.4f} duration={row['duration']:.2f}s "
                  f"plan={row['planning']:.3f}s jerk={row['jerk']:.1f}", flush=True)
    summary = {}
    print("\n| agent | tasks | success | max spill | mean spill | tasks spill > 0.1 % | mean duration (s) | mean planning (s) | max planning (s) |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name, rs in rows.items():
        sp = np.array([r["spilled"] for r in rs])
        du = np.array([r["duration"] for r in rs])
        pl = np.array([r["planning"] for r in rs])
        s = dict(tasks=len(rs), success_rate=float(np.mean([r["success"] for r in rs])),
                 max_spill=float(sp.max()), mean_spill=float(sp.mean()),
                 over_limit=int((sp > 1e-3).sum()), mean_duration=float(np.nanmean(du)),
                 mean_planning=float(np.nanmean(pl)), max_planning=float(np.nanmax(pl)),
                 no_path=int(sum("error" in r for r in rs)))
        summary[name] = s
        print(f"| {name} | {s['tasks']} | {s['success_rate']:.2f} | {s['max_spill']:.4f} | "
              f"{s['mean_spill']:.5f} | {s['over_limit']} | {s['mean_duration']:.2f} | "
              f"{s['mean_planning']:.3f} | {s['max_planning']:.3f} |")
    summary["classifier"] = args.classifier
    summary["wall_seconds"] = round(time.perf_counter() - t_start, 1)
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
