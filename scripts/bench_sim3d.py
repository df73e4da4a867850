"""Cost of the 3D liquid solver against the liquid's amount, its spread and the room.

The 3D solver works on a region around the liquid (``taigym.sim.flip3d``: the active tiles of
4^3 cells within a tile of a particle, or the liquid's padded box when that is smaller), so a
control step should cost what the liquid needs, whatever the box around it. The scenes are cups of water (6 cm wide, 7 cm deep, filled to 0.8) rocked about
their bottom's axis (+-1 rad/s, reversing every 0.2 s: the liquid sloshes, none spills), on
one grid spacing (``--dx``):

- room: one cup in rooms 1x, 2x, 4x and 8x the volume: the cost should stay flat;
- spread: two cups apart by a growing gap (the liquid's bounding box grows, its particle
  count does not): the cost should stay flat, where a bounding-box solver's grows with the box;
- amount: one to four cups side by side: the cost should grow with the particles.

For each run: particles, the grid, the liquid's bounding box and the active region (cells), and
the median wall time of a 0.05 s control step over ``--steps`` steps after one compiling step.
Then the 3D envs' speed: env steps per second of ``taigym/Pour3D-v0`` and
``taigym/Transport3D-v0`` over their experts' episodes on eval tasks (``sqp``, ``sfrrt``; only
the env's ``step`` is timed, after a first compiling episode). Prints tables and ends with one
JSON line.

    python scripts/bench_sim3d.py [--dx 0.008] [--steps 16] [--env-tasks 2]
"""

import argparse
import json
import os
import time

os.environ.setdefault("TI_SKIP_VERSION_CHECK", "ON")

import gymnasium as gym  # noqa: E402
import numpy as np  # noqa: E402

import taigym.agents as agents  # noqa: E402
from taigym.envs import tasks  # noqa: E402
from taigym.sim.flip3d import TILE  # noqa: E402
from taigym.sim.geometry3d import container3d  # noqa: E402
from taigym.sim.world3d import World3D  # noqa: E402

CUP = dict(width=0.06, height=0.07)  # m, interior
FILL = 0.8


def active_cells(solver) -> int:
    """Cells in the region of the solver's last substep: its active tiles or its box."""
    if solver.use_tiles.to_numpy()[0]:
        return int(solver.ntiles.to_numpy()[0]) * TILE ** 3
    b = solver.box.to_numpy()[0]
    return int((b[1] - b[0]) * (b[3] - b[2]) * (b[5] - b[4]))


def run(room, cups_x, dx: float, steps: int) -> dict:
    """Cups at x = cups_x (m; their bottoms 3 cm up, mid-depth), rocked; ``steps`` control
    steps timed after one that compiles for this grid."""
    w = World3D(size=room, cells=round(room[0] / dx), seed=0)
    wall = 2.2 * dx
    cups = [w.add_body(container3d("cup", wall_thickness=wall, **CUP),
                       pose=(x, 0.03, 0.08, 0, 0, 0), fill=FILL) for x in cups_x]
    w.build()
    times = []
    for k in range(steps + 1):
        omega = 1.0 if (k // 4) % 2 == 0 else -1.0         # 0.2 rad back and forth
        for h, x in zip(cups, cups_x):
            tilt = 0.05 * (k % 4 if omega > 0 else 4 - k % 4)
            w.set_pose(h, (x, 0.03, 0.08, 0, 0, tilt), velocity=(0, 0, 0, 0, 0, omega))
        t0 = time.perf_counter()
        w.advance(0.05)
        if k > 0:                                     # the first step compiles
            times.append(time.perf_counter() - t0)
    x = w.positions()
    box = np.prod(np.floor(x.max(0) / w.dx) - np.floor(x.min(0) / w.dx) + 1)
    return {"particles": w.particle_count(), "grid": list(w.shape), "bbox_cells": int(box),
            "active_cells": active_cells(w._solver),
            "step_ms": 1e3 * float(np.median(times)), "substeps": w.diagnostics()["substeps"],
            "kept": sum(w.fractions()["in"].values())}


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
    ap.add_argument("--steps", type=int, default=16, help="timed control steps per run")
    ap.add_argument("--env-tasks", type=int, default=2, help="timed expert episodes per 3D env (0: none)")
    args = ap.parse_args()
    load = os.getloadavg()[0]

    def cells(m: float) -> float:  # every room a whole number of cells: the same particle lattice
        return args.dx * round(m / args.dx)

    side = [cells(0.16 * f ** (1 / 3)) for f in (1, 2, 4, 8)]
    sweeps = {
        "room": [((s, s, s), [0.08]) for s in side],
        "spread": [((cells(0.24 + gap), side[0], side[0]), [0.08, 0.16 + gap])
                   for gap in (0.0, 0.2, 0.4, 0.6)],
        "amount": [((cells(0.48), side[0], side[0]), [0.08 + 0.1 * k for k in range(n)])
                   for n in (1, 2, 3, 4)],
    }
    figures: dict = {"load_average": round(load, 2), "dx": args.dx}
    print("| sweep | room (m) | grid | particles | liquid's box (cells) | active (cells) | step (ms) | substeps | in the cups |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name, runs in sweeps.items():
        rows = []
        for room, xs in runs:
            r = run(tuple(float(v) for v in room), xs, args.dx, args.steps)
            rows.append(r)
            print(f"| {name} | {' x '.join(f'{v:.2f}' for v in room)} | {'x'.join(map(str, r['grid']))} "
                  f"| {r['particles']} | {r['bbox_cells']} | {r['active_cells']} | {r['step_ms']:.1f} "
                  f"| {r['substeps']} | {r['kept']:.3f} |", flush=True)
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
