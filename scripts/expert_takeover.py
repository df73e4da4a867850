"""How good are an expert's labels at the states a learner visits? (DAgger needs them good there.)

    python scripts/expert_takeover.py --policy out/dagger_vs_bc/sqp/dagger/agent.pt
    python scripts/expert_takeover.py --policy ... --takeover 40 --replan-every 5 --tasks 700 730

On the simplified Pour-v0, for each task: the learner (a saved bc/dagger policy) pours alone;
and the learner drives the first ``--takeover`` steps, then ``sqp`` takes over, either tracking
the plan it made at the episode's start (``track``: what DAgger's default labels say at the
learner's states) or replanning from the state the learner left and every ``--replan-every``
steps after (``replan``: DAgger with ``relabel=replan, relabel_every=k``). Prints the success
of the three and ends with one JSON line. Tasks default to train-split tasks 700-729 (after the
700 demonstrations of ``scripts/dagger_vs_bc.py``; not eval tasks).
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
from taigym.agents import make  # noqa: E402
from taigym.agents.policy import PolicyAgent  # noqa: E402

def episode(env, learner, expert, task, mode: str, takeover: int) -> tuple[bool, float]:
    """One pour; returns (success, seconds spent in the expert)."""
    obs, info = env.reset(seed=0, options={"task": task})
    expert.reset(seed=0)
    learner.reset(seed=0)
    spent, step, done = 0.0, 0, False
    while not done:
        t0 = time.perf_counter()
        label = None
        if mode.startswith("track"):
            label = expert.act(obs, info)        # plans at step 0 and its clock runs while the learner drives
        elif mode == "replan" and step >= takeover:
            if step == takeover:
                expert.replan(info)
            label = expert.act(obs, info)
        spent += time.perf_counter() - t0
        action = learner.act(obs, info) if mode == "learner" or step < takeover else label
        obs, _, terminated, truncated, info = env.step(action)
        done = terminated or truncated
        step += 1
    return bool(info["success"]), spent


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--policy", required=True, help="a saved bc or dagger policy (agent.pt)")
    p.add_argument("--takeover", type=int, default=40, help="steps the learner drives first (0.05 s each)")
    p.add_argument("--replan-every", type=int, default=5)
    p.add_argument("--tasks", type=int, nargs=2, default=[700, 730], help="train-split task range")
    p.add_argument("--gain", type=float, nargs="+", default=[1.0],
                   help="sqp tracking gains to compare (track_<gain>: the plan's step + gain x the way back)")
    p.add_argument("--no-replan", action="store_true", help="skip the replanning expert")
    args = p.parse_args(argv)

    env = gym.make("taigym/Pour-v0", fidelity="simplified")
    learner = PolicyAgent.load(args.policy, env)
    experts = {"learner": make("sqp", env)} | {f"track_{g:g}": make("sqp", env, track_gain=g) for g in args.gain}
    if not args.no_replan:
        experts["replan"] = make("sqp", env, replan_every=args.replan_every)
    modes = list(experts)
    tasks = taigym.envs.tasks("pour", split="train")[args.tasks[0]:args.tasks[1]]
    success = {m: [] for m in modes}
    seconds = {m: 0.0 for m in modes}
    for i, task in enumerate(tasks):
        for m in modes:
            ok, spent = episode(env, learner, experts[m], task, m, args.takeover)
            success[m].append(ok)
            seconds[m] += spent
        print(args.tasks[0] + i, {m: success[m][-1] for m in modes}, flush=True)
    figures = {"takeover_step": args.takeover, "replan_every": args.replan_every, "tasks": list(args.tasks),
               **{f"{m}_success": float(np.mean(success[m])) for m in modes},
               "expert_seconds": {m: round(seconds[m], 1) for m in modes if m != "learner"}}
    for m in modes:
        print(f"{m:8s} success {figures[f'{m}_success']:.2f}")
    print(json.dumps(figures))
    return figures


if __name__ == "__main__":
    main()
