"""The ``carry`` reference (resolved-rate control) on Transport3D-v0 eval tasks, and the env's
speed: env steps per second (the env's own time, agent excluded) against the particle count.

Prints one row per task, a summary and one JSON line.
Usage: python scripts/eval_transport3d.py [--tasks 20] [--dx 0.01]
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


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tasks", type=int, default=20, help="first N tasks of the eval split")
    ap.add_argument("--dx", type=float, default=0.01, help="liquid grid spacing, m")
    args = ap.parse_args(argv)
    env = gym.make("taigym/Transport3D-v0", dx=args.dx)
    agent = agents.make("carry", env)
    rows = []
    for i, task in enumerate(taigym.envs.tasks("transport3d", "eval")[:args.tasks]):
        obs, info = env.reset(seed=i, options={"task": task})
        agent.reset(seed=i)
        steps, env_s, done = 0, 0.0, False
        while not done:
            a = agent.act(obs, info)
            t0 = time.perf_counter()
            obs, _, term, trunc, info = env.step(a)
            if i > 0 or steps > 0:             # the first step of the run compiles the solver
                env_s += time.perf_counter() - t0
            steps, done = steps + 1, term or trunc
        timed = steps - (1 if i == 0 else 0)
        rows.append(dict(task=i, boxes=len(task.obstacles), particles=env.unwrapped.carried.n,
                         success=bool(info["success"]), spilled=float(info["spilled"]),
                         collided=bool(info["collided"]), duration=steps * 0.05,
                         steps_per_s=timed / env_s if env_s > 0 else float("nan")))
        r = rows[-1]
        print(f"task {i:3d}: {r['boxes']} box(es), {r['particles']} particles, success {r['success']}, "
              f"spilled {100 * r['spilled']:.2f} %, {r['duration']:.2f} s, {r['steps_per_s']:.1f} env steps/s",
              flush=True)
    env.close()
    n, ok = len(rows), [r for r in rows if r["success"]]
    rate = np.array([r["steps_per_s"] for r in rows])
    parts = np.array([r["particles"] for r in rows])
    figures = {"tasks": n, "dx": args.dx, "success": len(ok) / n,
               "max_spilled": max(r["spilled"] for r in rows),
               "collisions": sum(r["collided"] for r in rows),
               "mean_duration_s": float(np.mean([r["duration"] for r in rows])),
               "env_steps_per_s_median": float(np.median(rate)), "env_steps_per_s_min": float(rate.min()),
               "particles_min": int(parts.min()), "particles_max": int(parts.max())}
    print(f"carry on {n} eval tasks: success {len(ok)}/{n}, max spilled {100 * figures['max_spilled']:.2f} %, "
          f"{figures['collisions']} collisions, mean duration {figures['mean_duration_s']:.2f} s; env "
          f"{figures['env_steps_per_s_median']:.1f} steps/s median (min {figures['env_steps_per_s_min']:.1f}) "
          f"at {figures['particles_min']}-{figures['particles_max']} particles")
    print(json.dumps(figures))
    return figures


if __name__ == "__main__":
    main()
