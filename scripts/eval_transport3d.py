"""SFRRT* (the SFRRT* paper, 2024, 3D) with the slosh-model spill-free classifier and with the learned one,
the same path at one conservative jerk, OMPL's InformedRRT* path timed as SFRRT*'s (if OMPL is
installed), and the ``carry`` reference (resolved-rate control, no planner) on Transport3D-v0
eval tasks, run in the particle simulator; and the env's speed: env steps per second (the
env's own time, agents excluded).

Prints one row per task and agent, a table (success, spill, collisions, trajectory duration,
planning time, env steps/s), success per layout, and one JSON line.
Usage: python scripts/eval_transport3d.py [--tasks 50] [--baseline-jerk 5] [--dx 0.0065]
"""

from __future__ import annotations

import argparse
import json
import os
import time

os.environ.setdefault("TI_SKIP_VERSION_CHECK", "ON")

import gymnasium as gym  # noqa: E402
import numpy as np  # noqa: E402

import taigym  # noqa: E402
import taigym.agents as agents  # noqa: E402
from taigym.envs.transport3d import DEFAULT_DX  # noqa: E402


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tasks", type=int, default=50, help="first N tasks of the eval split")
    ap.add_argument("--baseline-jerk", type=float, default=5.0, help="the baseline's jerk, m/s^3")
    ap.add_argument("--dx", type=float, default=DEFAULT_DX, help="liquid grid spacing, m")
    args = ap.parse_args(argv)
    env = gym.make("taigym/Transport3D-v0", dx=args.dx)
    runs = {"sfrrt": agents.make("sfrrt", env),
            "sfrrt_learned": agents.make("sfrrt", env, classifier="learned"),
            "baseline": agents.make("sfrrt", env, fixed_jerk=(args.baseline_jerk,) * 3),
            "carry": agents.make("carry", env)}
    try:
        import ompl  # noqa: F401

        runs["ompl"] = agents.make("sfrrt", env, path_planner="ompl")
    except ImportError:
        print("OMPL is not installed (pip install taigym[ompl]): no InformedRRT* row")
    rows = []
    for name, agent in runs.items():
        for i, task in enumerate(taigym.envs.tasks("transport3d", "eval")[:args.tasks]):
            rows.append(run(env, name, agent, i, task, first=not rows))
    env.close()
    figures = {"tasks": args.tasks, "dx": args.dx, "baseline_jerk": args.baseline_jerk}
    print(f"\n{args.tasks} Transport3D-v0 eval tasks, particle simulator at dx = {args.dx} m")
    print("| agent | success | max spilled | collisions | mean duration (s) | max planning (s) | env steps/s (median) |")
    print("|---|---|---|---|---|---|---|")
    for name in runs:
        rs = [r for r in rows if r["agent"] == name]
        f = {"success": sum(r["success"] for r in rs) / len(rs), "max_spilled": max(r["spilled"] for r in rs),
             "collisions": sum(r["collided"] for r in rs),
             "mean_duration_s": float(np.mean([r["duration"] for r in rs])),
             "max_planning_s": max(r["planning_s"] for r in rs),
             "env_steps_per_s": float(np.nanmedian([r["steps_per_s"] for r in rs]))}
        figures[name] = f
        print(f"| {name} | {f['success']:.2f} | {100 * f['max_spilled']:.2f} % | {f['collisions']} | "
              f"{f['mean_duration_s']:.2f} | {f['max_planning_s']:.2f} | {f['env_steps_per_s']:.1f} |")
    layouts = sorted({r["layout"] for r in rows})
    print("\n| agent | " + " | ".join(layouts) + " |\n|---|" + "---|" * len(layouts))
    for name in runs:
        cells = [f"{sum(r['success'] for r in rows if r['agent'] == name and r['layout'] == lay)}/"
                 f"{sum(r['agent'] == name and r['layout'] == lay for r in rows)}" for lay in layouts]
        figures[name]["success_by_layout"] = dict(zip(layouts, cells))
        print(f"| {name} | " + " | ".join(cells) + " |")
    parts = [r["particles"] for r in rows]
    figures.update(particles_min=min(parts), particles_max=max(parts))
    print(json.dumps(figures))
    return figures


def run(env, name: str, agent, i: int, task, first: bool) -> dict:
    """One episode; the env's own time per step (the first step of the run compiles the solver)."""
    obs, info = env.reset(seed=i, options={"task": task})
    t0 = time.perf_counter()
    agent.reset(seed=i)
    planning = time.perf_counter() - t0
    steps, env_s, done = 0, 0.0, False
    while not done:
        a = agent.act(obs, info)
        t0 = time.perf_counter()
        obs, _, term, trunc, info = env.step(a)
        if not (first and steps == 0):
            env_s += time.perf_counter() - t0
        steps, done = steps + 1, term or trunc
    timed = steps - (1 if first else 0)
    r = dict(agent=name, task=i, layout=task.layout, boxes=len(task.obstacles), particles=env.unwrapped.carried.n,
             success=bool(info["success"]), spilled=float(info["spilled"]), collided=bool(info["collided"]),
             duration=steps * 0.05, planning_s=planning if name != "carry" else 0.0,
             steps_per_s=timed / env_s if env_s > 0 else float("nan"))
    print(f"{name:8s} task {i:3d}: {task.layout}, {r['particles']} particles, success {r['success']}, "
          f"spilled {100 * r['spilled']:.2f} %, {r['duration']:.2f} s, planning {r['planning_s']:.2f} s, "
          f"{r['steps_per_s']:.1f} env steps/s", flush=True)
    return r


if __name__ == "__main__":
    main()
