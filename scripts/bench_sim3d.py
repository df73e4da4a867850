"""Cost of the 3D liquid solver against the liquid's amount, its spread and the room.

The 3D solver works on the active tiles only (``taigym.sim.flip3d``: tiles of 4^3 cells within
a tile of a particle), so a control step should cost what the liquid needs, whatever the box
around it. Three sweeps, each with the same grid spacing (``--dx``), water falling freely in a
closed room (a column of liquid released from rest: it splashes and spreads, as a pour does):

- room: the same column in rooms 1x, 2x, 4x, 8x its volume; the step's cost should stay flat;
- spread: two columns apart by a growing gap (the liquid's bounding box grows, its particle
  count does not): the cost should stay flat, where a bounding-box solver's grows with the box;
- amount: one to four columns side by side: the cost should grow with the particles.

For each run: particles, the grid, the liquid's bounding box and the active region (cells), and
the median wall time of a 0.05 s control step over ``--steps`` steps after one compiling step.
Then the 3D envs' speed: env steps per second of ``taigym/Pour3D-v0`` and
``taigym/Transport3D-v0`` over their experts' episodes on eval tasks (``sqp``, ``sfrrt``; only
the env's ``step`` is timed, after a first compiling episode). Prints tables and ends with one
JSON line.

    python scripts/bench_sim3d.py [--dx 0.008] [--steps 10] [--env-tasks 2]
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
from taigym.sim.world3d import World3D  # noqa: E402

COLUMN = np.array([0.06, 0.08, 0.06])     # m, the liquid column's extent (x, y, z)


def run(room, columns_x, dx: float, steps: int) -> dict:
    """Release the columns (lower corners at x in columns_x, y = z = 1 cm) in a room of size
    ``room`` (m) and time ``steps`` control steps."""
    w = World3D(size=room, cells=round(room[0] / dx), seed=0)
    for x in columns_x:
        lo = np.array([x, 0.01, 0.01])
        w.add_liquid_box(lo, lo + COLUMN)
    w.build()
    w.advance(0.05)                                   # compiles for this grid
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        w.advance(0.05)
        times.append(time.perf_counter() - t0)
    s = w._solver
    x = w.positions()
    box = np.prod(np.ceil((x.max(0) - x.min(0)) / w.dx) + 1)
    return {"particles": w.particle_count(), "grid": list(w.shape), "bbox_cells": int(box),
            "active_cells": int(s.ntiles.to_numpy()[0]) * 64,
            "step_ms": 1e3 * float(np.median(times)), "substeps": w.diagnostics()["substeps"]}


def env_speed(env_id: str, family: str, expert: str, n_tasks: int) -> dict:
    """Env steps per second (env.step only) over the expert's episodes on eval tasks 1..n_tasks,
    after a first episode on eval task 0 that compiles the solver."""
    env = gym.make(env_id)
    agent = agents.make(expert, env)
    steps, wall, particles = 0, 0.0, []
    for k, task in enumerate(tasks(family, split="eval")[:n_tasks + 1]):
        obs, info = env.reset(seed=k, options={"task": task})
        agent.reset(seed=k)
        done = False
        while not done:
            action = agent.act(obs, info)
            t0 = time.perf_counter()
            obs, _, term, trunc, info = env.step(action)
            if k > 0:
                wall += time.perf_counter() - t0
                steps += 1
            done = term or trunc
        u = env.unwrapped
        world = u.world if hasattr(u, "world") else u.carried.world   # Pour3D; Transport3D
        particles.append(world.particle_count())
    env.close()
    return {"steps_per_second": steps / wall, "steps": steps, "particles": particles[1:]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dx", type=float, default=0.008, help="grid spacing, m")
    ap.add_argument("--steps", type=int, default=10, help="timed control steps per run")
    ap.add_argument("--env-tasks", type=int, default=2, help="timed expert episodes per 3D env (0: none)")
    args = ap.parse_args()
    load = os.getloadavg()[0]
    def cells(m: float) -> float:  # every room a whole number of cells: the same particle lattice
        return args.dx * round(m / args.dx)

    side = [cells(0.16 * f ** (1 / 3)) for f in (1, 2, 4, 8)]
    sweeps = {
        "room": [((s, s, s), [0.01]) for s in side],
        "spread": [((cells(0.18 + gap), side[0], side[0]), [0.01, 0.09 + gap])
                   for gap in (0.0, 0.2, 0.4, 0.6)],
        "amount": [((cells(0.5), side[0], side[0]), [0.01 + 0.08 * k for k in range(n)])
                   for n in (1, 2, 3, 4)],
    }
    figures: dict = {"load_average": round(load, 2), "dx": args.dx}
    print("| sweep | room (m) | grid | particles | liquid's box (cells) | active (cells) | step (ms) | substeps |")
    print("|---|---|---|---|---|---|---|---|")
    for name, runs in sweeps.items():
        rows = []
        for room, xs in runs:
            r = run(tuple(float(v) for v in room), xs, args.dx, args.steps)
            rows.append(r)
            print(f"| {name} | {' x '.join(f'{v:.2f}' for v in room)} | {'x'.join(map(str, r['grid']))} "
                  f"| {r['particles']} | {r['bbox_cells']} | {r['active_cells']} | {r['step_ms']:.1f} "
                  f"| {r['substeps']} |", flush=True)
        ms = [r["step_ms"] for r in rows]
        figures[f"{name}_step_ms"] = [round(v, 1) for v in ms]
        figures[f"{name}_particles"] = [r["particles"] for r in rows]
        figures[f"{name}_bbox_cells"] = [r["bbox_cells"] for r in rows]
        figures[f"{name}_cost_ratio_last_to_first"] = round(ms[-1] / ms[0], 2)
    print(f"room 8x: cost x{figures['room_cost_ratio_last_to_first']}; liquid's box "
          f"x{figures['spread_bbox_cells'][-1] / figures['spread_bbox_cells'][0]:.1f} at the same "
          f"particles: cost x{figures['spread_cost_ratio_last_to_first']}; particles "
          f"x{figures['amount_particles'][-1] / figures['amount_particles'][0]:.1f}: cost "
          f"x{figures['amount_cost_ratio_last_to_first']} (load average {load:.1f})")
    if args.env_tasks > 0:
        print("| env | expert | timed steps | particles | env steps/s |")
        print("|---|---|---|---|---|")
        for env_id, family, expert in (("taigym/Pour3D-v0", "pour3d", "sqp"),
                                       ("taigym/Transport3D-v0", "transport3d", "sfrrt")):
            r = env_speed(env_id, family, expert, args.env_tasks)
            print(f"| {env_id} | {expert} | {r['steps']} | {r['particles']} | "
                  f"{r['steps_per_second']:.1f} |", flush=True)
            figures[f"{family}_env_steps_per_second"] = round(r["steps_per_second"], 1)
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
