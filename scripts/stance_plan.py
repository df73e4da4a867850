"""Bouyarmane & Kheddar's stance planner on the MultiContact eval split: per-family planning success and
time, every returned stance checked independently (``taigym.planners.stance.check_step``).

    python scripts/stance_plan.py [--per-family N] [--max-nodes N] [--time-limit S]

Prints one row per task, a per-family table, and ends with one JSON line.
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

import taigym
from taigym.envs.multicontact_tasks import FAMILIES
from taigym.planners import stance as st


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--per-family", type=int, default=25, help="eval tasks per family (25 = all 100)")
    ap.add_argument("--time-limit", type=float, default=None, help="optional wall-time budget per task, s")
    ap.add_argument("--max-nodes", type=int, default=400)
    ap.add_argument("--families", default=",".join(FAMILIES), help="comma-separated scene families")
    args = ap.parse_args()
    tasks = taigym.envs.tasks("multicontact", "eval")
    rows = []
    families = args.families.split(",")
    for fam in families:
        for i, task in enumerate([t for t in tasks if t.family == fam][:args.per_family]):
            t0 = time.perf_counter()
            plan = st.plan(task, time_limit=args.time_limit, max_nodes=args.max_nodes)
            violations = [v for s in plan.steps for v in st.check_step(task, s)]
            rows.append(dict(family=fam, index=i, status=plan.status, seconds=time.perf_counter() - t0,
                             stances=len(plan.stances), nodes=plan.nodes, ik_calls=plan.ik_calls,
                             checked=plan.solved and not violations, violations=violations[:3]))
            r = rows[-1]
            print(f"{fam:7s} #{i:2d} {r['status']:9s} {r['seconds']:6.1f} s  stances={r['stances']:2d} "
                  f"nodes={r['nodes']:3d} ik={r['ik_calls']:4d} checked={r['checked']} {r['violations']}",
                  flush=True)
    summary = {}
    print("\n| family | tasks | solved (checked) | mean planning time, s |")
    print("|---|---|---|---|")
    for fam in families:
        rs = [r for r in rows if r["family"] == fam]
        ok = sum(r["checked"] for r in rs)
        summary[fam] = {"tasks": len(rs), "solved_checked": ok, "rate": ok / max(len(rs), 1),
                        "mean_seconds": float(np.mean([r["seconds"] for r in rs])) if rs else 0.0}
        print(f"| {fam} | {len(rs)} | {ok} | {summary[fam]['mean_seconds']:.1f} |")
    n = len(rows)
    ok = sum(r["checked"] for r in rows)
    print(json.dumps({"tasks": n, "solved_checked": ok, "success_rate": ok / max(n, 1),
                      "unchecked_solved": sum(r["status"] == "solved" and not r["checked"] for r in rows),
                      "time_limit": args.time_limit,
                      "mean_seconds": float(np.mean([r["seconds"] for r in rows])) if rows else 0.0,
                      "per_family": summary}))


if __name__ == "__main__":
    main()
