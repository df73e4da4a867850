"""taigym/Pour-v0 with fidelity="simplified" against the particle env: speed and agreement.

Speed: env steps per second of ``gym.make("taigym/Pour-v0", fidelity="simplified")`` (with
Gymnasium's default wrappers, as a user steps it) under random actions over the eval split,
resets included: the median and the best of ``--repeats`` runs of ``--speed-steps`` steps (the
machine is shared: the best is the least disturbed run), the median also with
``disable_env_checker=True`` (the user's choice, not the default); and the particle env's on a
few episodes, in the same process.

Agreement: action sequences are recorded in the simplified env (the scripted agent; the scripted
agent with its lip over T's near rim, whose jet then lands by T's far rim; the sqp expert) and
replayed open-loop in both envs, padded with zero actions (S held still) to the episode's length:
each env runs to its own end (the simplified env's episode ends once S is empty; the particle
env's S may hold liquid a while longer, which the held pose still pours). The script prints the
in-T fractions at the end and their difference in percentage points (``--cut``: the particle
env's replay stops where the simplified episode ended, as this script did before). The particle
env's outcome depends on its particles' initial jitter (the reset seed), the simplified env's
does not: ``--particle-seeds K`` replays each sequence in the particle env with K reset seeds and
also compares the simplified env with their mean (the outcome the model predicts), printing the
particle env's own spread. Ends with one JSON line.

    python scripts/bench_simplified.py [--tasks 20] [--split eval] [--speed-steps 20000] [--repeats 3] [--particle-seeds 3]

``--tasks 0`` measures the speed only.
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
from taigym.envs import tasks  # noqa: E402

SOURCES = {"scripted": ("scripted", {}), "scripted far rim": ("scripted", {"aim": 0.95}),
           "sqp": ("sqp", {})}


def steps_per_second(env, split, n_steps: int, seed: int = 0) -> float:
    rng = np.random.default_rng(seed)
    actions = rng.uniform(-1, 1, (n_steps, 3)).astype(np.float32)
    k = 0
    env.reset(seed=seed, options={"task": split[0]})
    for a in actions[:5]:                 # warm up (the particle env compiles its kernels here)
        env.step(a)
    env.reset(seed=seed, options={"task": split[0]})
    t0 = time.perf_counter()
    for a in actions:
        _, _, term, trunc, _ = env.step(a)
        if term or trunc:
            k += 1
            env.reset(options={"task": split[k % len(split)]})
    return n_steps / (time.perf_counter() - t0)


def record(env, agent_name: str, cfg: dict, task, seed: int) -> list:
    agent = agents.make(agent_name, env, **cfg)
    obs, info = env.reset(seed=seed, options={"task": task})
    agent.reset(seed=seed)
    actions, done = [], False
    while not done:
        a = agent.act(obs, info)
        obs, _, term, trunc, info = env.step(a)
        actions.append(a)
        done = term or trunc
    return actions


def replay(env, task, seed: int, actions, pad: bool = True) -> dict:
    env.reset(seed=seed, options={"task": task})
    info = {}
    if pad:
        hold = np.zeros((env.unwrapped.cfg.max_steps, 3), np.float32)
        actions = list(actions) + list(hold[len(actions):])
    for a in actions:
        _, _, term, trunc, info = env.step(a)
        if term or trunc:
            break
    return info


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tasks", type=int, default=20, help="tasks for the agreement check")
    ap.add_argument("--split", default="eval", choices=("eval", "train"),
                    help="their split (train: sequences the model's checks were not made on)")
    ap.add_argument("--speed-steps", type=int, default=20000)
    ap.add_argument("--repeats", type=int, default=3, help="speed runs of the simplified env")
    ap.add_argument("--resolution", type=int, default=128)
    ap.add_argument("--cut", action="store_true", help="stop the particle env's replay where the simplified episode ended")
    ap.add_argument("--only", nargs="+", choices=list(SOURCES), help="only these action sources")
    ap.add_argument("--particle-seeds", type=int, default=1,
                    help="particle-env replays per sequence, with reset seeds i, i + 1000, ...")
    args = ap.parse_args()
    split = tasks("pour", split=args.split)
    simple = gym.make("taigym/Pour-v0", fidelity="simplified")
    unchecked = gym.make("taigym/Pour-v0", fidelity="simplified", disable_env_checker=True)
    particles = gym.make("taigym/Pour-v0", resolution=args.resolution)

    for t in split[:100]:                 # the outflow tables of the speed runs' tasks, cached first
        simple.reset(options={"task": t})
    runs = [steps_per_second(simple, split[:100], args.speed_steps) for _ in range(args.repeats)]
    runs_unchecked = [steps_per_second(unchecked, split[:100], args.speed_steps) for _ in range(args.repeats)]
    sps_simple, sps_best = float(np.median(runs)), max(runs)
    sps_unchecked = float(np.median(runs_unchecked))
    sps_particles = steps_per_second(particles, split, 300)
    print(f"simplified env (gym.make defaults): {sps_simple:,.0f} steps/s (median of {len(runs)} "
          f"runs: {', '.join(f'{r:,.0f}' for r in runs)}; best {sps_best:,.0f}); with "
          f"disable_env_checker=True {sps_unchecked:,.0f}; particle env (resolution "
          f"{args.resolution}): {sps_particles:,.0f} steps/s; ratio {sps_simple / sps_particles:,.0f}x")
    speed = {"simplified_steps_per_second": round(sps_simple),
             "simplified_steps_per_second_best": round(sps_best),
             "simplified_steps_per_second_no_env_checker": round(sps_unchecked),
             "particle_steps_per_second": round(sps_particles, 1),
             "ratio": round(sps_simple / sps_particles, 1)}
    if args.tasks <= 0:
        print(json.dumps(speed))
        return

    rows = []
    seeds = args.particle_seeds
    print("| actions | task | in T simplified | in T particles (each seed) | difference (pp) |"
          + (" particles' spread (pp) | difference from their mean (pp) |" if seeds > 1 else ""))
    print("|---|---|---|---|---|" + ("---|---|" if seeds > 1 else ""))
    for name, (agent, cfg) in SOURCES.items():
        if args.only and name not in args.only:
            continue
        for i, task in enumerate(split[:args.tasks]):
            acts = record(simple, agent, cfg, task, seed=i)
            a = replay(simple, task, i, acts)["in_target"]
            b = [replay(particles, task, i + 1000 * k, acts, pad=not args.cut)["in_target"]
                 for k in range(seeds)]
            rows.append((name, i, a, b))
            extra = (f" {100 * (max(b) - min(b)):.1f} | {100 * (a - np.mean(b)):+.1f} |"
                     if seeds > 1 else "")
            print(f"| {name} | {i} | {a:.3f} | {', '.join(f'{x:.3f}' for x in b)} | "
                  f"{100 * (a - b[0]):+.1f} |{extra}", flush=True)
    # the first seed's replay is the comparison this script always made
    diff = np.array([100 * abs(a - b[0]) for _, _, a, b in rows])
    print(f"in-T difference over {len(rows)} action sequences: mean {diff.mean():.1f} pp, "
          f"median {np.median(diff):.1f} pp, max {diff.max():.1f} pp, "
          f"within 10 pp: {np.mean(diff <= 10):.0%}")
    per = {name: float(np.mean([100 * abs(a - b[0]) for n, _, a, b in rows if n == name]))
           for name in SOURCES if not args.only or name in args.only}
    figures = {"padded": not args.cut, **speed,
               "in_target_diff_pp_mean": round(float(diff.mean()), 2),
               "in_target_diff_pp_max": round(float(diff.max()), 2),
               "within_10pp": round(float(np.mean(diff <= 10)), 3),
               "diff_pp_mean_by_actions": {k: round(v, 2) for k, v in per.items()}}
    if seeds > 1:
        to_mean = np.array([100 * abs(a - np.mean(b)) for _, _, a, b in rows])
        spread = np.array([100 * (max(b) - min(b)) for _, _, _, b in rows])
        every = np.array([100 * abs(a - x) for _, _, a, b in rows for x in b])
        print(f"over {seeds} particle seeds: the particle env's own spread mean {spread.mean():.1f} "
              f"pp, max {spread.max():.1f} pp; simplified vs their mean: mean {to_mean.mean():.1f} "
              f"pp, max {to_mean.max():.1f} pp, within 10 pp: {np.mean(to_mean <= 10):.0%}; "
              f"vs every replay: within 10 pp {np.mean(every <= 10):.0%}")
        figures.update({"particle_seeds": seeds,
                        "particle_spread_pp_mean": round(float(spread.mean()), 2),
                        "particle_spread_pp_max": round(float(spread.max()), 2),
                        "diff_to_particle_mean_pp_mean": round(float(to_mean.mean()), 2),
                        "diff_to_particle_mean_pp_max": round(float(to_mean.max()), 2),
                        "within_10pp_of_particle_mean": round(float(np.mean(to_mean <= 10)), 3),
                        "within_10pp_every_replay": round(float(np.mean(every <= 10)), 3)})
    print(json.dumps(figures))

if __name__ == "__main__":
    main()
