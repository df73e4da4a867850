"""Speed of the 2D liquid backend on the standard pour scene (a cup tilting over a target,
~8k particles, 128 x 128 grid), measured in one run on this machine.

Prints, for B = 1 and B = 8 scenes per launch: simulated seconds per wall second (aggregate over
the batch), control steps per second, particle-substeps per second; the first call's time
(compile, or load from Taichi's offline cache); peak memory; and the ratio to the NumPy
reference of the same step. Ends with one line of JSON holding the figures.

The rates are wall-clock figures of a program whose B = 8 scenes are shared between the cores,
so another process's CPU use costs them more than its share: each timed line also prints this
process's CPU per scene-substep (unaffected by contention) and, on Linux, how many cores' worth
of CPU other processes used in the same window (from /proc/stat; near 0 on a quiet machine).

    python scripts/bench_sim.py [--steps 40] [--numpy-steps 6]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import time

os.environ.setdefault("TI_SKIP_VERSION_CHECK", "ON")

from taigym.sim import scenes  # noqa: E402
from taigym.sim.reference import ReferenceWorld2D  # noqa: E402

CONTROL_DT = 0.05


def machine_busy_seconds() -> float | None:
    """CPU seconds spent busy by every process on the machine since boot (Linux), else None."""
    try:
        with open("/proc/stat") as f:
            ticks = [int(t) for t in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    idle = ticks[3] + ticks[4]  # idle, iowait
    return (sum(ticks[:8]) - idle) / os.sysconf("SC_CLK_TCK")  # user .. steal; not guest


def own_cpu_seconds() -> float:
    t = os.times()
    return t.user + t.system


def run(world, source, steps: int, start: int = 0) -> tuple[float, int, int]:
    """Step the pour motion; returns (wall seconds, particle-substeps and scene-substeps summed
    over the batch)."""
    work = substeps = 0
    t0 = time.perf_counter()
    for k in range(start, start + steps):
        pose, vel = scenes.pour_motion(k, CONTROL_DT)
        world.set_pose(source, pose, velocity=vel)
        world.advance(CONTROL_DT)
        for b in range(world.batch_size):
            n = world.diagnostics(b)["substeps"]
            work += world.particle_count(b) * n
            substeps += n
    return time.perf_counter() - t0, work, substeps


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=40, help="timed control steps per batch size")
    ap.add_argument("--numpy-steps", type=int, default=6, help="timed steps of the NumPy reference")
    args = ap.parse_args()

    figures: dict[str, float] = {}
    for batch in (1, 8):
        world, source, _ = scenes.pour_scene(batch_size=batch)
        t0 = time.perf_counter()
        world.build()
        world.advance(CONTROL_DT)
        first = time.perf_counter() - t0
        busy0, own0 = machine_busy_seconds(), own_cpu_seconds()
        wall, work, substeps = run(world, source, args.steps, start=1)
        own = own_cpu_seconds() - own0
        busy1 = machine_busy_seconds()
        others = None if busy0 is None else max(busy1 - busy0 - own, 0.0) / wall  # cores
        sim_rate = args.steps * CONTROL_DT * batch / wall
        figures.update({
            f"B{batch}_first_call_s": round(first, 2),
            f"B{batch}_sim_seconds_per_wall_second": round(sim_rate, 3),
            f"B{batch}_control_steps_per_second": round(sim_rate / CONTROL_DT, 1),
            f"B{batch}_particle_substeps_per_second": round(work / wall),
            f"B{batch}_cpu_ms_per_scene_substep": round(own / substeps * 1e3, 3),
            f"B{batch}_other_processes_cores": None if others is None else round(others, 2),
        })
        d = world.diagnostics(0)
        print(f"B={batch}: {world.particle_count()} particles/scene, first call {first:.1f} s, "
              f"{sim_rate:.2f} sim s per wall s ({sim_rate / CONTROL_DT:.0f} control steps/s), "
              f"{work / wall:.3g} particle-substeps/s, last step {d['substeps']} substeps, "
              f"in target {d['in'][1]:.1%}; CPU {own / substeps * 1e3:.2f} ms per scene-substep"
              + ("" if others is None else f"; other processes used {others:.2f} cores"))

    ref, source, _ = scenes.pour_scene(world_cls=ReferenceWorld2D)
    ref.build()
    run(ref, source, 1)
    wall, work, _ = run(ref, source, args.numpy_steps, start=1)
    numpy_rate = work / wall
    figures["numpy_particle_substeps_per_second"] = round(numpy_rate)
    for batch in (1, 8):
        figures[f"B{batch}_numpy_ratio"] = round(figures[f"B{batch}_particle_substeps_per_second"]
                                                 / numpy_rate, 1)
    figures["peak_memory_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
    print(f"NumPy reference: {numpy_rate:.3g} particle-substeps/s; Taichi is "
          f"{figures['B1_numpy_ratio']}x (B=1) and {figures['B8_numpy_ratio']}x (B=8) faster; "
          f"peak memory {figures['peak_memory_mb']} MB")
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
