"""Bouyarmane & Kheddar's expert (``taigym.agents.make("stance", env)``: stance planner + FSM + QP controller)
on ``taigym/MultiContact-v0`` eval tasks: per-family success (goal reached without a fall) and
planning time, and a video of the first successful climb.

    python scripts/stance_expert.py [--per-family N] [--first I] [--video out.mp4] [--check] [--max-nodes N]

``--check`` also verifies every stance of each plan with ``taigym.planners.stance.check_step``
(the planner's must-show figure, "found and checked", from the same plans). Each task's line gives
its planning time, the stances the search expanded and its IK calls (the node count does not
depend on the machine's load, the wall time does) and the 1-min load average.

The env runs with torque control at a 1/60 s control step (the QP controller's torques; the
default PD mode is not what these figures measure) and its default horizon (60 s); the table also
counts the successes reached within 40 s (the horizon before 2026-11-24). Ends with one JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import time

import gymnasium as gym
import imageio
import numpy as np

import taigym
from taigym.envs.multicontact_tasks import FAMILIES
from taigym.planners.stance import check_step


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--per-family", type=int, default=25, help="eval tasks per family (25 = all 100)")
    ap.add_argument("--first", type=int, default=0,
                    help="index of each family's first task (split a run over processes)")
    ap.add_argument("--time-limit", type=float, default=60.0, help="planning budget per task, s")
    ap.add_argument("--max-nodes", type=int, default=400, help="planning budget per task, expanded stances")
    ap.add_argument("--video", default="stance_climb.mp4", help="where to write the climb video")
    ap.add_argument("--families", default=",".join(FAMILIES))
    ap.add_argument("--check", action="store_true", help="check every planned stance independently")
    args = ap.parse_args()
    env = gym.make("taigym/MultiContact-v0", control="torque", control_dt=1.0 / 60.0, render_mode="rgb_array",
                   render_size=(240, 320))
    agent = taigym.agents.make("stance", env, time_limit=args.time_limit, max_nodes=args.max_nodes)
    tasks = taigym.envs.tasks("multicontact", "eval")
    rows, video_written = [], False
    for fam in args.families.split(","):
        family_tasks = [t for t in tasks if t.family == fam]
        for i in range(args.first, min(args.first + args.per_family, len(family_tasks))):
            task = family_tasks[i]
            t0 = time.perf_counter()
            obs, info = env.reset(seed=i, options={"task": task})
            agent.reset(seed=i)
            plan_s = time.perf_counter() - t0
            checked = agent.plan.solved and (not args.check or not any(check_step(task, s) for s in agent.plan.steps))
            frames = [env.render()] if not video_written else None
            done, steps = False, 0
            while not done:
                obs, _, term, trunc, info = env.step(agent.act(obs, info))
                done, steps = term or trunc, steps + 1
                if frames is not None and steps % 6 == 0:
                    frames.append(env.render())
            if frames is not None and info["success"]:
                tmp = args.video + ".tmp.mp4"
                imageio.mimwrite(tmp, frames, fps=10)
                os.replace(tmp, args.video)
                video_written = True
            rows.append(dict(family=fam, index=i, plan=agent.plan.status, plan_seconds=plan_s,
                             plan_nodes=agent.plan.nodes, ik_calls=agent.plan.ik_calls, checked=checked,
                             success=bool(info["success"]),
                             success_40s=bool(info["success"]) and info["time"] <= 40.0 + 1e-9,
                             fell=bool(info["fell"]), sim_seconds=info["time"],
                             wall_seconds=time.perf_counter() - t0, goal_distance=info["goal_distance"],
                             events=[e for _, e in agent.events]))
            r = rows[-1]
            print(f"{fam:7s} #{i:2d} plan={r['plan']:9s} {plan_s:5.1f} s {r['plan_nodes']:3d} nodes "
                  f"{r['ik_calls']:4d} IK  checked={r['checked']} "
                  f"success={r['success']} fell={r['fell']} t={r['sim_seconds']:5.1f} s  "
                  f"goal distance {r['goal_distance']:.2f} m  load {os.getloadavg()[0]:.1f}  {', '.join(r['events'])}",
                  flush=True)
    print(f"\n| family | tasks | planned | planned and checked | success ({env.unwrapped.horizon:g} s horizon) "
          "| of which within 40 s | mean planning time, s | nodes expanded, mean (max) |")
    print("|---|---|---|---|---|---|---|---|")
    summary = {}
    for fam in args.families.split(","):
        rs = [r for r in rows if r["family"] == fam]
        summary[fam] = {"tasks": len(rs), "planned": sum(r["plan"] == "solved" for r in rs),
                        "checked": sum(r["checked"] for r in rs) if args.check else None,
                        "success": sum(r["success"] for r in rs),
                        "success_40s": sum(r["success_40s"] for r in rs),
                        "mean_plan_seconds": float(np.mean([r["plan_seconds"] for r in rs])) if rs else 0.0,
                        "mean_plan_nodes": float(np.mean([r["plan_nodes"] for r in rs])) if rs else 0.0,
                        "max_plan_nodes": max((r["plan_nodes"] for r in rs), default=0)}
        s = summary[fam]
        print(f"| {fam} | {s['tasks']} | {s['planned']} | {s['checked']} | {s['success']} | {s['success_40s']} "
              f"| {s['mean_plan_seconds']:.1f} | {s['mean_plan_nodes']:.0f} ({s['max_plan_nodes']}) |")
    n = len(rows)
    print(f"load average (1, 5, 15 min) at the end: {os.getloadavg()}")
    print(json.dumps({"tasks": n, "success_rate": sum(r["success"] for r in rows) / max(n, 1),
                      "planned_rate": sum(r["plan"] == "solved" for r in rows) / max(n, 1),
                      "checked_rate": sum(r["checked"] for r in rows) / max(n, 1) if args.check else None,
                      "video": args.video if video_written else None, "per_family": summary}))


if __name__ == "__main__":
    main()
