"""Bouyarmane & Kheddar's expert (``taigym.agents.make("stance", env)``: stance planner + FSM + QP
controller) on ``taigym/MultiContact-v1`` eval tasks, as a user runs it (the env's and the
agent's defaults): per-family success (goal reached without a fall), falls, planning time and
expanded stances, and a video of the first successful climb.

    python scripts/stance_expert.py [--per-family N] [--first I] [--families step,gap,...]
        [--out results.json] [--video out.mp4] [--check] [--max-nodes N]

Each task's row is saved as soon as it ends (``--out``, rewritten atomically); a rerun with the
same ``--out`` skips the tasks it holds, so a long run can be split over processes or resumed.
``--check`` also verifies every stance of each plan with ``taigym.planners.stance.check_step``.
The planning budget is a number of expanded stances (``--max-nodes``, the agent's default), so
which tasks are planned does not depend on the machine's load; the planning time does, and is
printed with the 1-min load average. A row's ``plan_nodes`` counts the stances of every search
the planner ran (``searches``: the name, status and stances of each). On ``soft`` tasks the rows
also hold the planner's predicted sink of each sole on the pad (m) against the simulated one at
the end of each shift (the next support alone loaded).
Ends with one JSON line.
"""

from __future__ import annotations

import argparse
import json
import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")   # small matrices: BLAS threads only contend on a shared machine
import time

import gymnasium as gym
import imageio
import numpy as np

import taigym
from taigym.envs.multicontact_tasks import FAMILIES
from taigym.planners.stance import check_step


def _save(path: str, rows: list[dict]) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(rows, f)
    os.replace(tmp, path)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--per-family", type=int, default=40, help="eval tasks per family (25 rigid, 40 soft)")
    ap.add_argument("--first", type=int, default=0, help="index of each family's first task")
    ap.add_argument("--families", default=",".join(FAMILIES))
    ap.add_argument("--indices", default="", help="comma-separated task indices within each family (instead of --first/--per-family)")
    ap.add_argument("--max-nodes", type=int, default=None, help="planning budget, expanded stances (agent default)")
    ap.add_argument("--out", default="out/stance_expert.json", help="per-task rows (resumed if present)")
    ap.add_argument("--video", default="", help="where to write the first successful climb's video (mp4)")
    ap.add_argument("--check", action="store_true", help="check every planned stance independently")
    args = ap.parse_args()
    env = gym.make("taigym/MultiContact-v1", render_mode="rgb_array" if args.video else None, render_size=(240, 320))
    cfg = {} if args.max_nodes is None else {"max_nodes": args.max_nodes}
    agent = taigym.agents.make("stance", env, **cfg)
    tasks = taigym.envs.tasks("multicontact", "eval") + taigym.envs.tasks("multicontact_soft", "eval")
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    rows = json.load(open(args.out)) if os.path.exists(args.out) else []
    done_keys = {(r["family"], r["index"]) for r in rows}
    families = args.families.split(",")
    video_written = not args.video
    for fam in families:
        family_tasks = [t for t in tasks if t.family == fam]
        indices = ([int(v) for v in args.indices.split(",")] if args.indices
                   else range(args.first, min(args.first + args.per_family, len(family_tasks))))
        for i in indices:
            if (fam, i) in done_keys:
                continue
            task = family_tasks[i]
            t0 = time.perf_counter()
            obs, info = env.reset(seed=i, options={"task": task})
            agent.reset(seed=i)
            plan = agent.plan
            checked = plan.solved and (not args.check or not any(check_step(task, s) for s in plan.steps))
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
            row = dict(family=fam, index=i, plan=plan.status, plan_seconds=plan.seconds, plan_nodes=plan.nodes,
                       ik_calls=plan.ik_calls, searches=[list(x) for x in plan.searches], stances=len(plan.stances),
                       checked=checked if args.check else None,
                       success=bool(info["success"]), fell=bool(info["fell"]), sim_seconds=info["time"],
                       wall_seconds=time.perf_counter() - t0, goal_distance=info["goal_distance"],
                       events=[e for _, e in agent.events], load=os.getloadavg()[0])
            if agent.sink_log:      # soft supports: (limb, planned and simulated sink (m), planned and QP force (N))
                row["sinks"] = [list(e) for e in agent.sink_log]
            rows.append(row)
            _save(args.out, rows)
            r = row
            print(f"{fam:7s} #{i:2d} plan={r['plan']:9s} {r['plan_seconds']:5.1f} s {r['plan_nodes']:3d} nodes "
                  f"{r['ik_calls']:4d} IK ({', '.join(f'{n} {s} {k}' for n, s, k in r['searches'])}) "
                  f"checked={r['checked']} success={r['success']} fell={r['fell']} "
                  f"t={r['sim_seconds']:5.1f} s goal distance {r['goal_distance']:.2f} m load {r['load']:.1f}  "
                  f"{', '.join(r['events'])}" + "".join(f"  {l} sink planned {a * 1e3:.3f} simulated {b * 1e3:.3f} mm ({fa:.0f}, {fb:.0f} N)"
                                                         for l, a, b, fa, fb in r.get("sinks", [])), flush=True)
    print("\n| family | tasks | planned | success (no fall) | falls | planning time mean / max, s "
          "| nodes mean / max |")
    print("|---|---|---|---|---|---|---|")
    summary = {}
    for fam in families:
        rs = [r for r in rows if r["family"] == fam]
        if not rs:
            continue
        ps = [r["plan_seconds"] for r in rs]
        ns = [r["plan_nodes"] for r in rs]
        summary[fam] = {"tasks": len(rs), "planned": sum(r["plan"] == "solved" for r in rs),
                        "checked": sum(bool(r["checked"]) for r in rs) if args.check else None,
                        "success": sum(r["success"] for r in rs), "falls": sum(r["fell"] for r in rs),
                        "mean_plan_seconds": float(np.mean(ps)), "max_plan_seconds": float(np.max(ps)),
                        "mean_plan_nodes": float(np.mean(ns)), "max_plan_nodes": int(np.max(ns)),
                        "failed": [r["index"] for r in rs if not r["success"]]}
        errs = [[b / a - 1 for _, a, b, *_ in r["sinks"]] for r in rs if r.get("sinks")]
        if errs:        # planned against simulated sinks: tasks whose every measured sink is within 20 %
            flat = np.abs(np.concatenate(errs))
            summary[fam].update(sink_tasks=len(errs), sink_within_20=sum(bool(np.all(np.abs(e) <= 0.2)) for e in errs),
                                sink_error_median=float(np.median(flat)), sink_error_max=float(flat.max()))
        s = summary[fam]
        print(f"| {fam} | {s['tasks']} | {s['planned']} | {s['success']} | {s['falls']} "
              f"| {s['mean_plan_seconds']:.1f} / {s['max_plan_seconds']:.1f} "
              f"| {s['mean_plan_nodes']:.0f} / {s['max_plan_nodes']} |")
    n = sum(s["tasks"] for s in summary.values())
    for fam, s in summary.items():
        if "sink_tasks" in s:
            print(f"{fam}: sinks within 20 % on {s['sink_within_20']} of {s['sink_tasks']} tasks with a measured sink "
                  f"(|simulated / planned - 1|: median {s['sink_error_median']:.3f}, max {s['sink_error_max']:.3f})")
    print(f"load average (1, 5, 15 min) at the end: {os.getloadavg()}")
    print(json.dumps({"tasks": n, "success": sum(s["success"] for s in summary.values()),
                      "falls": sum(s["falls"] for s in summary.values()), "max_nodes": agent.max_nodes,
                      "video": args.video if args.video and video_written else None, "per_family": summary}))


if __name__ == "__main__":
    main()
