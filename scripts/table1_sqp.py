"""Pan & Manocha 2016's Table I for the ``sqp`` expert: plan with the simplified model, validate in FLIP.

For each of Pan & Manocha 2016's two scenes (``taigym.envs.pour_tasks.pan_manocha_2016_scenes``: T far from S; a
tall block between them) and each viscosity, the ``sqp`` expert plans S's trajectory and runs it
in the particle env (Pour-v0, FLIP). Columns as in the paper: scene, viscosity, planning time,
validation (simulation) time, quality = fraction of the liquid in T at the end; plus spilled
and the model's own prediction. Ends with one JSON line.

    python scripts/table1_sqp.py [--viscosities 1e-3 0.1] [--resolution 128] [--video out/sqp.mp4]
    python scripts/table1_sqp.py --plan-split 100    # also: planning time over the eval split

``--plan-split N`` plans the first N eval tasks (no validation) and prints the planning time
(mean, median, max) and the planner's stopping reasons.
"""

from __future__ import annotations

import argparse
import json
import os
import time

os.environ.setdefault("TI_SKIP_VERSION_CHECK", "ON")

import gymnasium as gym  # noqa: E402
import numpy as np  # noqa: E402

import taigym.agents as agents  # noqa: E402
from taigym.envs.pour_tasks import pan_manocha_2016_scenes  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--viscosities", nargs="+", type=float, default=[1e-3, 0.1])
    ap.add_argument("--resolution", type=int, default=128)
    ap.add_argument("--video", default=None, help="write the block scene with water here (.mp4)")
    ap.add_argument("--plan-split", type=int, default=0, help="also plan this many eval tasks")
    args = ap.parse_args()
    env = gym.make("taigym/Pour-v0", resolution=args.resolution,
                   render_mode="rgb_array" if args.video else None)
    rows, figures = [], {}
    print("| scene | viscosity (Pa s) | planning (s) | validation (s) | quality (in T) | spilled | "
          "model's prediction |")
    print("|---|---|---|---|---|---|---|")
    for mu in args.viscosities:
        for name, task in pan_manocha_2016_scenes(mu).items():
            agent = agents.make("sqp", env)
            frames = [] if (args.video and name == "block" and mu == args.viscosities[0]) else None
            t0 = time.perf_counter()
            row = agents.run_episode(env, agent, seed=0, task=task, frames=frames)
            wall = time.perf_counter() - t0
            plan_s = agent.plan_seconds
            rows.append(row)
            print(f"| {name} | {mu:g} | {plan_s:.1f} | {wall - plan_s:.1f} | {row['in_target']:.1%} | "
                  f"{row['spilled']:.1%} | {agent.plan.predicted['in_target']:.1%} |", flush=True)
            figures[f"{name}_{mu:g}"] = {"planning_s": round(plan_s, 2),
                                         "validation_s": round(wall - plan_s, 2),
                                         "in_target": round(row["in_target"], 4),
                                         "spilled": round(row["spilled"], 4)}
            if frames:
                import imageio

                os.makedirs(os.path.dirname(os.path.abspath(args.video)), exist_ok=True)
                imageio.mimsave(args.video, frames, fps=env.metadata["render_fps"])
    env.close()
    figures["min_in_target"] = min(r["in_target"] for r in rows)
    if args.plan_split:
        from collections import Counter

        from taigym.envs import tasks
        from taigym.planners.sqp import PourProblem, plan_pour

        plans = [plan_pour(PourProblem.from_task(t)) for t in tasks("pour", "eval")[:args.plan_split]]
        times = np.array([p.wall_time for p in plans])
        status = Counter(p.status for p in plans)
        print(f"planning over {len(plans)} eval tasks: mean {times.mean():.2f} s, median "
              f"{np.median(times):.2f} s, max {times.max():.2f} s; stopped: {dict(status)}")
        figures["split_planning_s"] = {"mean": round(float(times.mean()), 2),
                                       "max": round(float(times.max()), 2), "status": dict(status)}
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
