"""Generate Pan & Manocha 2017's CMA-ES dataset (TRANSFER+ZERO and TRANSFER+FOLLOW) resumably.

    python scripts/cmaes_dataset.py                       # 40 problems into runs/datasets/cmaes_rect (minutes)
    python scripts/cmaes_dataset.py --labels simplified   # states and labels from the simplified env
    python scripts/cmaes_dataset.py --problems 2000 --popsize 30 --iterations 200   # paper size
    python scripts/cmaes_dataset.py --onpolicy agent.pt --out runs/datasets/rh_round1 --problems 160

``--onpolicy CHECKPOINT`` rolls out ``rh`` with that network on the same problems in the particle
env instead and records its states with the outflow labels (data aggregation for the model,
``taigym.data.cmaes_dataset.generate_onpolicy``); train on both with ``python -m taigym.apps.train
agent=rh env=pour_simplified agent.dataset=<CMA-ES dataset> agent.problems=160
'agent.onpolicy=[<rollouts>, ...]'``.

Rerunning completes an interrupted run (finished problems are skipped). Prints progress and ends
with one JSON line (problems, states, mean R/N before and after CMA-ES, seconds).
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

from taigym.data.cmaes_dataset import generate, generate_onpolicy, load


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="runs/datasets/cmaes_rect")
    ap.add_argument("--problems", type=int, default=40)
    ap.add_argument("--obs-mode", default="features", choices=("features", "lip"))
    ap.add_argument("--popsize", type=int, default=8)
    ap.add_argument("--iterations", type=int, default=15)
    ap.add_argument("--labels", default="particles", choices=("simplified", "particles"),
                    help="env in which the best trajectory is replayed and its states recorded")
    ap.add_argument("--onpolicy", metavar="CHECKPOINT",
                    help="record rh's own rollouts with this network instead of CMA-ES pours")
    args = ap.parse_args()
    t0 = time.perf_counter()
    if args.onpolicy:
        generate_onpolicy(args.out, args.onpolicy, args.problems)
        d = load(args.out, args.problems)
        print(json.dumps({"problems": int(len(d["reward"])), "states": int(len(d["obs"])),
                          "mean_reward": round(float(np.mean(d["reward"])), 3),
                          "seconds": round(time.perf_counter() - t0, 1)}))
        return
    generate(args.out, args.problems, obs_mode=args.obs_mode,
             cmaes={"popsize": args.popsize, "max_iterations": args.iterations}, label_fidelity=args.labels)
    d = load(args.out, args.problems)
    print(json.dumps({"problems": int(len(d["reward"])), "states": int(len(d["obs"])),
                      "mean_initial_reward": round(float(np.mean(d["initial_reward"])), 3),
                      "mean_reward": round(float(np.mean(d["reward"])), 3),
                      "min_reward": round(float(np.min(d["reward"])), 3),
                      "seconds": round(time.perf_counter() - t0, 1)}))


if __name__ == "__main__":
    main()
