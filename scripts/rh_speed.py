"""``rh``'s per-step planning time: the solve as one Taichi kernel against the NumPy reference.

    python scripts/rh_speed.py [--problems 4] [--shape rect]

Runs ``rh`` with ``solver=taichi`` on the first ``--problems`` test problems in the simplified
Pour-v0 and, at every state it visits, plans once more with ``solver=numpy`` from the same
warm start. Prints each solver's per-step CPU time (median, p95; this process's CPU time, so
other jobs on the machine count less), their ratio, and the largest difference between the two
plans (the kernel computes the reference's arithmetic; only the order of a few sums differs).
The agent's first reset compiles the kernel (a few seconds, cached on disk by Taichi).
"""

import argparse
import copy
import os
import time

os.environ.setdefault("TI_SKIP_VERSION_CHECK", "ON")

import gymnasium as gym  # noqa: E402
import numpy as np  # noqa: E402

import taigym  # noqa: E402,F401
from taigym.agents.rh import RHAgent, latency_summary  # noqa: E402
from taigym.data.cmaes_dataset import TEST_SEED, problem  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--problems", type=int, default=4)
    ap.add_argument("--shape", default="rect", choices=("rect", "frustum"))
    args = ap.parse_args()
    env = gym.make("taigym/Pour-v0", fidelity="simplified")
    agent = RHAgent(env, solver="taichi")
    seconds = {"taichi": [], "numpy": []}
    worst = 0.0
    for i in range(args.problems):
        obs, info = env.reset(seed=i, options={"task": problem(i, TEST_SEED, source_container=args.shape)})
        agent.reset(seed=i)
        for step in range(400):
            agent._track_liquid(info)
            before = copy.copy(agent.__dict__)
            plans = {}
            for solver in ("numpy", "taichi"):       # taichi last: its plan is the one applied
                agent.__dict__.update(before)
                agent.cfg = {**before["cfg"], "solver": solver}
                c0 = time.process_time()
                plans[solver] = agent.plan(obs, info).copy()
                seconds[solver].append(time.process_time() - c0)
            worst = max(worst, float(np.max(np.abs(plans["taichi"] - plans["numpy"]))))
            obs, _, terminated, truncated, info = env.step(plans["taichi"][0].astype(np.float32))
            if terminated or truncated:
                break
    s = {k: latency_summary(v) for k, v in seconds.items()}
    for k in ("numpy", "taichi"):
        print(f"{k:6s}: {len(seconds[k])} steps, CPU median {s[k]['median_ms']:.2f} ms, p95 {s[k]['p95_ms']:.2f} ms")
    print(f"ratio numpy / taichi: median {s['numpy']['median_ms'] / s['taichi']['median_ms']:.1f}x, "
          f"p95 {s['numpy']['p95_ms'] / s['taichi']['p95_ms']:.1f}x; largest plan difference {worst:.1e} "
          f"(actions in [-1, 1])")


if __name__ == "__main__":
    main()
