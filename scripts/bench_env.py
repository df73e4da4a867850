"""Env steps per second of taigym/Pour-v0 at B = 1 and B = 8, and the env's overhead over the
raw solver step.

The scripted agent pours eval task 0 once at B = 1, recording its actions and S's and T's poses;
the timed runs replay those actions (B = 1: one env; B = 8: the vector env with the same task in
every member). The raw-solver figure replays the same poses straight into ``World2D.set_pose`` /
``advance`` from the same initial state, so both do the same physics; the overhead is
env time / raw time - 1 (clipping, reward, features, observation, info). Ends with one JSON line.

    python scripts/bench_env.py [--resolution 128] [--repeats 3]
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
import taigym.envs  # noqa: E402,F401
from taigym.envs import tasks  # noqa: E402
from taigym.envs.pour import CONTROL_DT, SOURCE, TARGET  # noqa: E402


def record(env, task, seed):
    agent = agents.make("scripted", env)
    obs, info = env.reset(seed=seed, options={"task": task})
    agent.reset(seed=seed)
    actions, poses = [], [(info["source_pose"], info["target_pose"])]
    done = False
    while not done:
        a = agent.act(obs, info)
        obs, _, term, trunc, info = env.step(a)
        actions.append(a)
        poses.append((info["source_pose"], info["target_pose"]))
        done = term or trunc
    return np.array(actions[:-1]), poses[:-1]  # drop the last step: no autoreset in the timed runs


def time_env(env, task, seed, actions, batch):
    opts = {"task": task if batch == 1 else [task] * batch}
    env.reset(seed=seed, options=opts)
    t0 = time.perf_counter()
    for a in actions:
        env.step(a if batch == 1 else np.tile(a, (batch, 1)))
    return time.perf_counter() - t0


def time_raw(env, task, seed, poses, batch):
    """Replay the recorded poses into the env's own world (same initial state)."""
    env.reset(seed=seed, options={"task": task if batch == 1 else [task] * batch})
    world = env.unwrapped.world
    t0 = time.perf_counter()
    for (s0, t0_), (s1, t1) in zip(poses[:-1], poses[1:]):
        sv, tv = (s1 - s0) / CONTROL_DT, (t1 - t0_) / CONTROL_DT
        if batch == 1:
            world.set_pose(SOURCE, s0, sv)
            world.set_pose(TARGET, t0_, tv)
        else:
            world.set_pose(SOURCE, np.tile(s0, (batch, 1)), np.tile(sv, (batch, 1)))
            world.set_pose(TARGET, np.tile(t0_, (batch, 1)), np.tile(tv, (batch, 1)))
        world.advance(CONTROL_DT)
    return time.perf_counter() - t0


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--resolution", type=int, default=128)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--task", type=int, default=0, help="index in the eval split")
    p.add_argument("--obs-mode", default="features")
    args = p.parse_args(argv)
    task, seed = tasks("pour", "eval")[args.task], 0

    env = gym.make("taigym/Pour-v0", resolution=args.resolution, obs_mode=args.obs_mode)
    actions, poses = record(env, task, seed)
    n = len(actions)
    venv = gym.make_vec("taigym/Pour-v0", num_envs=args.batch, vectorization_mode="vector_entry_point",
                        resolution=args.resolution, obs_mode=args.obs_mode)
    time_env(venv, task, seed, actions[:2], args.batch)  # warm-up (kernel load)
    res = {1: {"env": [], "raw": []}, args.batch: {"env": [], "raw": []}}
    for _ in range(args.repeats):  # interleaved, best of: the machine is shared
        res[1]["env"].append(time_env(env, task, seed, actions, 1))
        res[1]["raw"].append(time_raw(env.unwrapped, task, seed, poses, 1))
        res[args.batch]["env"].append(time_env(venv, task, seed, actions, args.batch))
        res[args.batch]["raw"].append(time_raw(venv.unwrapped, task, seed, poses, args.batch))
    env.close()
    venv.close()

    B = args.batch
    t1e, t1r = min(res[1]["env"]), min(res[1]["raw"])
    tbe, tbr = min(res[B]["env"]), min(res[B]["raw"])
    figures = {
        "resolution": args.resolution, "steps": n,
        "env_steps_per_s_b1": n / t1e, f"env_steps_per_s_b{B}": B * n / tbe,
        "raw_steps_per_s_b1": n / t1r, f"raw_steps_per_s_b{B}": B * n / tbr,
        "overhead_b1": t1e / t1r - 1.0, f"overhead_b{B}": tbe / tbr - 1.0,
        f"speedup_b{B}_over_b1": (B * n / tbe) / (n / t1e),
    }
    print(f"{n} control steps of eval task {args.task} at {args.resolution} cells, best of {args.repeats}")
    print("| B | env steps/s | raw solver steps/s | env overhead |")
    print("|---|---|---|---|")
    print(f"| 1 | {figures['env_steps_per_s_b1']:.1f} | {figures['raw_steps_per_s_b1']:.1f} | "
          f"{100 * figures['overhead_b1']:.1f} % |")
    print(f"| {B} | {figures[f'env_steps_per_s_b{B}']:.1f} | {figures[f'raw_steps_per_s_b{B}']:.1f} | "
          f"{100 * figures[f'overhead_b{B}']:.1f} % |")
    print(json.dumps(figures))
    return figures


if __name__ == "__main__":
    main()
