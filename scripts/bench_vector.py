"""Env steps per second of the batched simplified Pour-v0 against a loop of single envs, in one run.

* vector: ``gym.make_vec("taigym/Pour-v0", num_envs=B, vectorization_mode="vector_entry_point",
  fidelity="simplified")`` stepped ``--steps`` times with uniform random actions, finished
  members reset by the env (next-step autoreset, a new task from the default distribution);
* single: ``--singles`` envs from ``gym.make`` stepped in a Python loop with the same kind of
  actions, each reset when its episode ends (what SB3's ``DummyVecEnv`` does).

Both count env steps (a vector step is B of them, resets included) over the wall time, and the
same over the time outside resets ("stepping": a reset builds a task's geometry and S's lookup
tables, milliseconds each, once per episode), and per second of the process's CPU time ("cpu":
on a shared machine the wall time also counts the other processes' turns on the core). The
ratio vector / single comes from the same run. ``--baseline REF`` measures the same in a subprocess on ``git archive REF`` of this
repository (e.g. ``main``: the figures before this branch), in the same run. Pin it to one core::

    taskset -c 0 python scripts/bench_vector.py --num-envs 256 --baseline main

Ends with one JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("TI_SKIP_VERSION_CHECK", "ON")

import gymnasium as gym  # noqa: E402
import numpy as np  # noqa: E402

import taigym  # noqa: E402,F401

ID = "taigym/Pour-v0"


class ResetClock:
    """Times the resets of ``obj``'s method ``name`` (a member's task drawn and set up)."""

    def __init__(self, obj, name: str):
        self.seconds, self.cpu, self.count = 0.0, 0.0, 0
        inner = getattr(obj, name)

        def timed(*args, **kwargs):
            t0, c0 = time.perf_counter(), time.process_time()
            out = inner(*args, **kwargs)
            self.seconds += time.perf_counter() - t0
            self.cpu += time.process_time() - c0
            self.count += 1
            return out

        setattr(obj, name, timed)


def env_kwargs(args) -> dict:
    return dict(fidelity="simplified", **({"task_split": args.task_split} if args.task_split else {}))


def vector(args) -> dict:
    num_envs, steps, seed = args.num_envs, args.steps, args.seed
    env = gym.make_vec(ID, num_envs=num_envs, vectorization_mode="vector_entry_point", **env_kwargs(args))
    env.reset(seed=seed)
    actions = np.random.default_rng(seed).uniform(-1, 1, (steps + args.warmup, num_envs, 3)).astype(np.float32)
    for a in actions[:args.warmup]:                 # warm-up (first calls, allocations, a split's tasks)
        env.step(a)
    clock = ResetClock(env.unwrapped, "_reset_member")   # instrumented, not used otherwise
    t0, c0 = time.perf_counter(), time.process_time()
    for a in actions[args.warmup:]:
        env.step(a)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    n = num_envs * steps
    return {"steps_per_s": n / wall, "stepping_steps_per_s": n / (wall - clock.seconds),
            "cpu_steps_per_s": n / cpu, "cpu_stepping_steps_per_s": n / (cpu - clock.cpu), "resets": clock.count,
            "ms_per_reset": 1e3 * clock.seconds / max(clock.count, 1), "seconds": wall}


def singles(args) -> dict:
    count, steps, seed = args.singles, args.single_steps, args.seed
    envs = [gym.make(ID, **env_kwargs(args)) for _ in range(count)]
    for i, e in enumerate(envs):
        e.reset(seed=seed + i)
    rng = np.random.default_rng(seed)
    actions = rng.uniform(-1, 1, (steps // count + 10, count, 3)).astype(np.float32)
    clocks = [ResetClock(e, "reset") for e in envs]
    t0, c0, n = time.perf_counter(), time.process_time(), 0
    for row in actions[: steps // count]:
        for e, a in zip(envs, row):
            _, _, term, trunc, _ = e.step(a)
            n += 1
            if term or trunc:
                e.reset()                           # (the clock's wrapper)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    reset_s, reset_cpu = sum(c.seconds for c in clocks), sum(c.cpu for c in clocks)
    resets = sum(c.count for c in clocks)
    return {"steps_per_s": n / wall, "stepping_steps_per_s": n / (wall - reset_s), "cpu_steps_per_s": n / cpu,
            "cpu_stepping_steps_per_s": n / (cpu - reset_cpu),
            "resets": resets, "ms_per_reset": 1e3 * reset_s / max(resets, 1), "seconds": wall}


def measure(args) -> dict:
    v = vector(args)
    s = singles(args)
    return {"num_envs": args.num_envs, "vector": v, "single": s,
            "ratio": v["steps_per_s"] / s["steps_per_s"],
            "ratio_stepping": v["stepping_steps_per_s"] / s["stepping_steps_per_s"],
            "ratio_cpu": v["cpu_steps_per_s"] / s["cpu_steps_per_s"],
            "ratio_cpu_stepping": v["cpu_stepping_steps_per_s"] / s["cpu_stepping_steps_per_s"]}


def baseline(ref: str, args) -> dict:
    """``measure`` on ``git archive ref`` of this repository, in a subprocess."""
    root = subprocess.run(["git", "rev-parse", "--show-toplevel"], capture_output=True, text=True,
                          check=True, cwd=os.path.dirname(os.path.abspath(__file__))).stdout.strip()
    with tempfile.TemporaryDirectory() as src:
        archive = subprocess.run(["git", "archive", ref], capture_output=True, check=True, cwd=root).stdout
        subprocess.run(["tar", "-x", "-C", src], input=archive, check=True)
        cmd = [sys.executable, os.path.abspath(__file__), "--measure-only", "--num-envs", str(args.num_envs),
               "--steps", str(args.steps), "--singles", str(args.singles), "--single-steps",
               str(args.single_steps), "--seed", str(args.seed), "--warmup", str(args.warmup)]
        out = subprocess.run(cmd, capture_output=True, text=True, check=True,
                             env={**os.environ, "PYTHONPATH": src}).stdout
    return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--num-envs", type=int, default=256)
    p.add_argument("--steps", type=int, default=200, help="vector steps")
    p.add_argument("--singles", type=int, default=8, help="single envs in the loop")
    p.add_argument("--single-steps", type=int, default=4000, help="single-env steps in all")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--task-split", default=None, choices=(None, "train", "eval"),
                   help="draw tasks from this fixed split (resets to seen tasks reuse their geometry)")
    p.add_argument("--warmup", type=int, default=10, help="vector steps before timing")
    p.add_argument("--baseline", default=None, help="a git ref to measure too (e.g. main)")
    p.add_argument("--measure-only", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.measure_only:
        print(json.dumps(measure(args)))
        return
    load0 = os.getloadavg()
    base = baseline(args.baseline, args) if args.baseline else None
    res = measure(args)
    load1 = os.getloadavg()
    rows = [("this tree", res)] + ([(args.baseline, base)] if base else [])
    print("env steps per second; total: resets included, stepping: without them; wall: wall time, cpu: "
          "this process's CPU time")
    print(f"{'source':>10} {'env':>14} | {'wall total':>10} {'stepping':>9} | {'cpu total':>10} {'stepping':>9} | "
          f"{'resets':>6} {'ms/reset':>8}")
    for name, r in rows:
        for kind in ("vector", "single"):
            e = r[kind]
            label = f"{kind} x{args.num_envs if kind == 'vector' else args.singles}"
            print(f"{name:>10} {label:>14} | {e['steps_per_s']:10.0f} {e['stepping_steps_per_s']:9.0f} | "
                  f"{e['cpu_steps_per_s']:10.0f} {e['cpu_stepping_steps_per_s']:9.0f} | {e['resets']:6d} "
                  f"{e['ms_per_reset']:8.2f}")
        print(f"{name:>10} {'vector/single':>14} | {r['ratio']:10.2f} {r['ratio_stepping']:9.2f} | "
              f"{r['ratio_cpu']:10.2f} {r['ratio_cpu_stepping']:9.2f} |")
    print(f"{args.steps} vector steps, {args.single_steps} single steps, task_split={args.task_split}; "
          f"load average {load0[0]:.2f} -> {load1[0]:.2f}")
    out = {"num_envs": args.num_envs,
           "vector_steps_per_s": round(res["vector"]["steps_per_s"]),
           "vector_stepping_steps_per_s": round(res["vector"]["stepping_steps_per_s"]),
           "vector_cpu_steps_per_s": round(res["vector"]["cpu_steps_per_s"]),
           "vector_cpu_stepping_steps_per_s": round(res["vector"]["cpu_stepping_steps_per_s"]),
           "single_steps_per_s": round(res["single"]["steps_per_s"]),
           "single_stepping_steps_per_s": round(res["single"]["stepping_steps_per_s"]),
           "single_cpu_steps_per_s": round(res["single"]["cpu_steps_per_s"]),
           "single_cpu_stepping_steps_per_s": round(res["single"]["cpu_stepping_steps_per_s"]),
           "ratio": round(res["ratio"], 2), "ratio_stepping": round(res["ratio_stepping"], 2),
           "ratio_cpu": round(res["ratio_cpu"], 2), "ratio_cpu_stepping": round(res["ratio_cpu_stepping"], 2),
           "task_split": args.task_split,
           "ms_per_reset": round(res["vector"]["ms_per_reset"], 3), "load": [round(load0[0], 2), round(load1[0], 2)]}
    if base:
        out["baseline"] = {"ref": args.baseline, "vector_steps_per_s": round(base["vector"]["steps_per_s"]),
                           "vector_stepping_steps_per_s": round(base["vector"]["stepping_steps_per_s"]),
                           "vector_cpu_steps_per_s": round(base["vector"]["cpu_steps_per_s"]),
                           "single_steps_per_s": round(base["single"]["steps_per_s"]),
                           "single_cpu_steps_per_s": round(base["single"]["cpu_steps_per_s"])}
        out["speedup_vs_baseline_vector"] = round(res["vector"]["steps_per_s"] / base["vector"]["steps_per_s"], 2)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
