"""Speed of the 2D liquid backend on the standard pour scene (a cup tilting over a target,
~7k particles, 128 x 128 grid), measured in one run on this machine.

Prints, for B = 1 and B = 8 scenes per launch: simulated seconds per wall second (aggregate over
the batch), control steps per second, particle-substeps per second; the first call's time
(compile, or load from Taichi's offline cache); peak memory; and the ratio to the NumPy
reference of the same step. Ends with one line of JSON holding the figures.

The rates are wall-clock figures of a program whose B = 8 scenes are shared between the cores,
so another process's CPU use costs them more than its share: each timed line also prints this
process's CPU per scene-substep and per scene-control-step (unaffected by contention) and, on
Linux, how many cores' worth of CPU other processes used in the same window (from /proc/stat;
near 0 on a quiet machine).

``--against REF`` compares this tree's solver with the one at git revision REF in the same run:
REF's ``taigym`` package is exported to a temporary directory (``git archive``), and this
script's measurement runs ``--rounds`` times for each, alternating (this, REF, REF, this, ...),
each in a fresh process (Taichi initialises once per process). It prints each run's figures,
the medians, and this tree's ratio to REF of each (speed: > 1 is faster; CPU: < 1 is cheaper).

    python scripts/bench_sim.py [--steps 40] [--numpy-steps 6]
    python scripts/bench_sim.py --against 6cb4a09 [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("TI_SKIP_VERSION_CHECK", "ON")

ROOT = Path(__file__).resolve().parents[1]
CONTROL_DT = 0.05
# figures compared by --against: name -> True where larger is better
COMPARED = {"sim_seconds_per_wall_second": True, "cpu_ms_per_scene_step": False,
            "cpu_ms_per_scene_substep": False, "substeps_per_scene_step": False}


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
    return time.process_time()  # every thread's, at the clock's resolution (os.times: 10 ms)


def run(world, source, steps: int, start: int = 0) -> tuple[float, int, int]:
    """Step the pour motion; returns (wall seconds, particle-substeps and scene-substeps summed
    over the batch)."""
    from taigym.sim import scenes

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


def measure(steps: int, numpy_steps: int) -> dict:
    """This process's solver (whichever ``taigym`` it imports) on the pour scene."""
    from taigym.sim import scenes
    from taigym.sim.reference import ReferenceWorld2D

    figures: dict[str, float] = {}
    for batch in (1, 8):
        world, source, _ = scenes.pour_scene(batch_size=batch)
        t0 = time.perf_counter()
        world.build()
        world.advance(CONTROL_DT)
        first = time.perf_counter() - t0
        busy0, own0 = machine_busy_seconds(), own_cpu_seconds()
        wall, work, substeps = run(world, source, steps, start=1)
        own = own_cpu_seconds() - own0
        busy1 = machine_busy_seconds()
        others = None if busy0 is None else max(busy1 - busy0 - own, 0.0) / wall  # cores
        sim_rate = steps * CONTROL_DT * batch / wall
        figures.update({
            f"B{batch}_first_call_s": round(first, 2),
            f"B{batch}_sim_seconds_per_wall_second": round(sim_rate, 3),
            f"B{batch}_control_steps_per_second": round(sim_rate / CONTROL_DT, 1),
            f"B{batch}_particle_substeps_per_second": round(work / wall),
            f"B{batch}_cpu_ms_per_scene_substep": round(own / substeps * 1e3, 3),
            f"B{batch}_cpu_ms_per_scene_step": round(own / (steps * batch) * 1e3, 2),
            f"B{batch}_substeps_per_scene_step": round(substeps / (steps * batch), 2),
            f"B{batch}_other_processes_cores": None if others is None else round(others, 2),
        })
        d = world.diagnostics(0)
        print(f"B={batch}: {world.particle_count()} particles/scene, first call {first:.1f} s, "
              f"{sim_rate:.2f} sim s per wall s ({sim_rate / CONTROL_DT:.0f} control steps/s), "
              f"{work / wall:.3g} particle-substeps/s, {substeps / (steps * batch):.2f} substeps "
              f"per step, in target {d['in'][1]:.1%}; CPU {own / substeps * 1e3:.2f} ms per "
              f"scene-substep, {own / (steps * batch) * 1e3:.1f} ms per scene-step"
              + ("" if others is None else f"; other processes used {others:.2f} cores"),
              flush=True)

    if numpy_steps > 0:
        ref, source, _ = scenes.pour_scene(world_cls=ReferenceWorld2D)
        ref.build()
        run(ref, source, 1)
        wall, work, _ = run(ref, source, numpy_steps, start=1)
        numpy_rate = work / wall
        figures["numpy_particle_substeps_per_second"] = round(numpy_rate)
        for batch in (1, 8):
            figures[f"B{batch}_numpy_ratio"] = round(
                figures[f"B{batch}_particle_substeps_per_second"] / numpy_rate, 1)
        print(f"NumPy reference: {numpy_rate:.3g} particle-substeps/s; Taichi is "
              f"{figures['B1_numpy_ratio']}x (B=1) and {figures['B8_numpy_ratio']}x (B=8) faster")
    figures["peak_memory_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
    print(f"peak memory {figures['peak_memory_mb']} MB")
    return figures


def measure_in_subprocess(package_root: Path, steps: int) -> dict:
    """measure() in a fresh process importing ``taigym`` from ``package_root``."""
    env = dict(os.environ, PYTHONPATH=str(package_root))
    out = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--steps", str(steps), "--numpy-steps", "0"],
                         env=env, cwd=package_root, check=True, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def compare(ref: str, rounds: int, steps: int) -> dict:
    """This tree against git revision ``ref``, ``rounds`` runs each, alternating."""
    rev = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", ref], check=True,
                         capture_output=True, text=True).stdout.strip()
    runs: dict[str, list[dict]] = {"this": [], rev: []}
    with tempfile.TemporaryDirectory(prefix="bench_sim_ref_") as tmp:
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", rev, "taigym"], check=True,
                                 capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", tmp], input=archive, check=True)
        roots = {"this": ROOT, rev: Path(tmp)}
        for k in range(rounds):
            order = ["this", rev] if k % 2 == 0 else [rev, "this"]  # ABBA: drift cancels
            for label in order:
                fig = measure_in_subprocess(roots[label], steps)
                runs[label].append(fig)
                print(f"round {k + 1} {label}: " + ", ".join(
                    f"B{b} {fig[f'B{b}_sim_seconds_per_wall_second']} sim s/s, "
                    f"{fig[f'B{b}_cpu_ms_per_scene_step']} CPU ms/step, "
                    f"{fig[f'B{b}_cpu_ms_per_scene_substep']} CPU ms/substep, "
                    f"{fig[f'B{b}_substeps_per_scene_step']} substeps/step, "
                    f"others {fig[f'B{b}_other_processes_cores']} cores" for b in (1, 8)),
                    flush=True)
    result: dict = {"against": rev, "rounds": rounds, "steps": steps}
    for b in (1, 8):
        for name, higher_better in COMPARED.items():
            key = f"B{b}_{name}"
            med = {label: round(statistics.median(r[key] for r in rs), 3)
                   for label, rs in runs.items()}
            result[key] = {"this": med["this"], rev: med[rev],
                           "ratio": round(med["this"] / med[rev], 3)}
        sp, cpu = result[f"B{b}_sim_seconds_per_wall_second"], result[f"B{b}_cpu_ms_per_scene_step"]
        print(f"B={b} medians over {rounds} runs: {sp['this']} vs {sp[rev]} sim s per wall s "
              f"(x{sp['ratio']}); CPU per scene-step {cpu['this']} vs {cpu[rev]} ms "
              f"(x{cpu['ratio']}); CPU per scene-substep "
              f"{result[f'B{b}_cpu_ms_per_scene_substep']['this']} vs "
              f"{result[f'B{b}_cpu_ms_per_scene_substep'][rev]} ms")
    result["runs"] = runs
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=40, help="timed control steps per batch size")
    ap.add_argument("--numpy-steps", type=int, default=6,
                    help="timed steps of the NumPy reference (0: skip it)")
    ap.add_argument("--against", metavar="REF", help="also time the solver at git revision REF")
    ap.add_argument("--rounds", type=int, default=3, help="runs of each solver with --against")
    args = ap.parse_args()
    for name in ("steps", "rounds"):
        if getattr(args, name) < 1:
            raise ValueError(f"--{name} must be at least 1, got {getattr(args, name)}")
    if args.numpy_steps < 0:
        raise ValueError(f"--numpy-steps must be at least 0, got {args.numpy_steps}")
    if args.against:
        print(json.dumps(compare(args.against, args.rounds, args.steps)))
    else:
        print(json.dumps(measure(args.steps, args.numpy_steps)))


if __name__ == "__main__":
    main()
