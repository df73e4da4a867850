"""Agents on the Pour eval split: success rates and a metrics table.

    python scripts/eval_pour.py                      # all 100 eval tasks, scripted and random
    python scripts/eval_pour.py --agents sqp         # the SQP expert (plans with Pan & Manocha 2016's model)
    python scripts/eval_pour.py --fidelity simplified --agents sqp scripted random
    python scripts/eval_pour.py --n 5 --video out/pour_scripted.mp4

Prints one line per episode with --progress, a Markdown table, and ends with one JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

os.environ.setdefault("TI_SKIP_VERSION_CHECK", "ON")

import gymnasium as gym  # noqa: E402

import taigym.agents as agents  # noqa: E402
from taigym.envs import tasks  # noqa: E402


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--n", type=int, default=100, help="number of eval tasks (from the start of the split)")
    p.add_argument("--split", default="eval", choices=("train", "eval"))
    p.add_argument("--agents", nargs="+", default=["scripted", "random"])
    p.add_argument("--resolution", type=int, default=128)
    p.add_argument("--fidelity", default="particles", choices=("particles", "simplified"))
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--video", default=None, help="write the first episodes of the first agent here (.mp4)")
    p.add_argument("--video-episodes", type=int, default=2)
    p.add_argument("--progress", action="store_true")
    args = p.parse_args(argv)

    task_list = tasks("pour", args.split)[:args.n]
    env = gym.make("taigym/Pour-v0", resolution=args.resolution, fidelity=args.fidelity,
                   render_mode="rgb_array" if args.video else None)
    summaries, figures = {}, {"episodes": len(task_list), "split": args.split,
                              "resolution": args.resolution, "fidelity": args.fidelity}
    for k, name in enumerate(args.agents):
        agent = agents.make(name, env)
        frames = [] if (args.video and k == 0) else None
        t0 = time.perf_counter()
        if args.progress:
            print(f"{name}:", flush=True)
        rows = agents.evaluate(env, agent, task_list, seed=args.seed, progress=args.progress,
                               video_frames=frames, video_episodes=args.video_episodes)
        wall = time.perf_counter() - t0
        s = agents.summarise(rows, agents.episode_metrics(env))
        summaries[name] = s
        steps = sum(r["steps"] for r in rows)
        figures.update({f"{name}_success": s["success_rate"], f"{name}_in_target": s["mean_in_target"],
                        f"{name}_spilled": s["mean_spilled"], f"{name}_return": s["mean_return"],
                        f"{name}_env_steps_per_s": steps / wall,
                        f"{name}_act_ms": 1e3 * sum(r["act_seconds"] * r["steps"] for r in rows) / max(steps, 1)})
        print(f"{name}: success {sum(r['success'] for r in rows)}/{len(rows)} "
              f"({s['success_rate']:.0%}), {wall:.0f} s", flush=True)
        if frames:
            import imageio

            os.makedirs(os.path.dirname(os.path.abspath(args.video)), exist_ok=True)
            imageio.mimsave(args.video, frames, fps=env.metadata["render_fps"])
            print(f"video: {args.video} ({len(frames)} frames)")
    env.close()
    print()
    print("| agent | episodes | success [95 % CI] | in target | spilled | left in S | return |")
    print("|" + "---|" * 7)
    for name, s in summaries.items():
        lo, hi = s["success_ci95"]
        print(f"| {name} | {s['episodes']} | {s['success_rate']:.2f} [{lo:.2f}, {hi:.2f}] | {s['mean_in_target']:.3f} | "
              f"{s['mean_spilled']:.3f} | {s['mean_in_source']:.3f} | {s['mean_return']:.3f} |")
    print()
    print(json.dumps(figures))
    return figures


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
