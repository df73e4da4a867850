"""Pan & Manocha 2017's online test: the ``rh`` agent on new pouring problems, in the particle env.

    python scripts/rh_eval.py [--checkpoint runs/train/rh/.../agent.pt] [--problems 30] [--shapes rect frustum]
                              [--only 8 19] [--seed 20260417 --start 160] [--set flow_gain=0]
    python scripts/rh_eval.py --agent cmaes --shapes rect    # the CMA-ES teacher on the same problems

Runs ``rh`` (or, with ``--agent cmaes``, its CMA-ES teacher, which plans each problem once in
the simplified env; ``--set key=value`` sets its options, CMAESConfig fields; no per-step latency) on
``--problems`` problems drawn like the training problems but from another seed
(``taigym.data.cmaes_dataset.problem(i, TEST_SEED)``: rect S, even i TRANSFER+ZERO, odd i
TRANSFER+FOLLOW), once per source shape in ``--shapes`` (``frustum``: the conic container, held
out of training; the problems are otherwise identical), in Pour-v0 with ``--fidelity``
(default ``particles``, the FLIP solver). Prints the spilled fraction per problem, the count
under 5 % (Pan & Manocha 2017: 28 of 30) and the per-step planning latency (median, p95; Pan & Manocha 2017:
< 10 ms) as wall time and as this process's CPU time (the wall time on a shared machine includes
the time other processes hold the core), and ends with one JSON line. Without ``--checkpoint``
the network shipped with taigym. ``--only`` runs the listed problems; ``--seed 20260417 --start
160`` draws validation problems (the dataset's seed, past the 160 problems the shipped network
was trained on); ``--set`` overrides planner options (``taigym.agents.rh.PLANNER_DEFAULTS``); ``--jitter`` reruns
the same problems with other particle jitter (the FLIP outcome of a pour is sensitive to it).
"""

from __future__ import annotations

import argparse
import json
import os
import time

os.environ.setdefault("TI_SKIP_VERSION_CHECK", "ON")

import gymnasium as gym  # noqa: E402
import numpy as np  # noqa: E402

import taigym  # noqa: E402,F401
from taigym.agents.base import run_episode  # noqa: E402
from taigym.agents.cmaes import CMAESAgent  # noqa: E402
from taigym.agents.rh import SHIPPED_CHECKPOINT, RHAgent, latency_summary  # noqa: E402
from taigym.data.cmaes_dataset import TEST_SEED, problem  # noqa: E402


def _value(text: str):
    """A --set value: JSON (numbers, lists), else the text itself (solver=numpy)."""
    try:
        return json.loads(text)
    except ValueError:
        return text


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--agent", default="rh", choices=("rh", "cmaes"))
    ap.add_argument("--checkpoint", default=str(SHIPPED_CHECKPOINT), help="the rh agent's checkpoint")
    ap.add_argument("--problems", type=int, default=30)
    ap.add_argument("--start", type=int, default=0, help="first problem index")
    ap.add_argument("--only", type=int, nargs="+", help="run only these problem indices")
    ap.add_argument("--seed", type=int, default=TEST_SEED, help="problem set (default: the test set)")
    ap.add_argument("--jitter", type=int, default=0,
                    help="added to each problem's reset seed (the particles' jitter; same tasks)")
    ap.add_argument("--set", nargs="+", default=[], metavar="KEY=VALUE",
                    help="agent options, e.g. flow_gain=0 or solver=numpy for rh, free_jet_weight=0 for cmaes "
                         "(JSON values, else text)")
    ap.add_argument("--shapes", nargs="+", default=["rect", "frustum"])
    ap.add_argument("--fidelity", default="particles", choices=("particles", "simplified"))
    ap.add_argument("--resolution", type=int, default=128)
    args = ap.parse_args()
    opts = {k: _value(v) for k, v in (a.split("=", 1) for a in args.set)}
    ids = args.only if args.only else list(range(args.start, args.start + args.problems))
    out: dict = {"agent": args.agent, "fidelity": args.fidelity, "seed": args.seed, "jitter": args.jitter,
                 "problems": ids, "options": opts}
    t_all = time.perf_counter()
    for shape in args.shapes:
        env = gym.make("taigym/Pour-v0", fidelity=args.fidelity, resolution=args.resolution)
        agent = RHAgent.load(args.checkpoint, env, **opts) if args.agent == "rh" else CMAESAgent(env, **opts)
        spills, in_t, lat, cpu = [], [], [], []
        for i in ids:
            task = problem(i, args.seed, source_container=shape)
            t0 = time.perf_counter()
            row = run_episode(env, agent, seed=i + args.jitter, task=task)
            spills.append(row["spilled"])
            in_t.append(row["in_target"])
            lat += getattr(agent, "solve_seconds", [])
            cpu += getattr(agent, "solve_cpu_seconds", [])
            print(f"{shape} problem {i:2d} ({task.liquid_velocity:6s}): spilled {row['spilled']:.3f} "
                  f"in T {row['in_target']:.3f} left in S {row['in_source']:.3f} steps {row['steps']} "
                  f"unstable {row['sim_unstable']} ({time.perf_counter() - t0:.0f} s)", flush=True)
        env.close()
        sp = np.array(spills)
        lat_s, cpu_s = latency_summary(lat), latency_summary(cpu)
        under = int(np.sum(sp < 0.05))
        print(f"{shape}: spill < 5 % on {under}/{len(sp)}; mean spilled {sp.mean():.3f}, mean in T "
              f"{np.mean(in_t):.3f}; per-step latency median {lat_s['median_ms']:.2f} ms, "
              f"p95 {lat_s['p95_ms']:.2f} ms (CPU time: median {cpu_s['median_ms']:.2f} ms, p95 "
              f"{cpu_s['p95_ms']:.2f} ms)", flush=True)
        out[shape] = {"under_5pct": under, "n": int(len(sp)), "mean_spilled": round(float(sp.mean()), 4),
                      "max_spilled": round(float(sp.max()), 4), "mean_in_target": round(float(np.mean(in_t)), 4),
                      "spilled": [round(float(s), 4) for s in sp],
                      "latency_median_ms": round(lat_s["median_ms"], 3), "latency_p95_ms": round(lat_s["p95_ms"], 3),
                      "cpu_median_ms": round(cpu_s["median_ms"], 3), "cpu_p95_ms": round(cpu_s["p95_ms"], 3)}
    out["seconds"] = round(time.perf_counter() - t_all, 1)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
