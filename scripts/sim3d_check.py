"""Checks of the 3D liquid backend (World3D) on small grids: the quasi-static tilt of a filled
frustum just below and just above seed 002's 3D maximum tilt (taigym.models.max_tilt.max_tilt_3d),
and the wall time of a 0.05 s control step.

The frustum is tilted about its inner bottom centre (about z, the left lip going down) at
``--omega`` rad/s to ``max_tilt_3d -/+ --margin`` degrees, held there ``--hold`` s, and the
fraction of the liquid that left it is reported; both scenes run as one batch (one launch per
step). Prints a table and ends with one JSON line.
Usage: PYTHONPATH=. python scripts/sim3d_check.py [--cells 20] [--margin 6]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import time

import numpy as np

from taigym.models.max_tilt import max_tilt_3d
from taigym.sim.geometry3d import container3d
from taigym.sim.world3d import World3D

TOP, BOTTOM, HEIGHT = 0.06, 0.04, 0.06        # m, interior diameters at the opening / bottom, height
SIZE = (0.14, 0.12, 0.10)                       # m, room for the cup tilted past 50 degrees
ORIGIN = (0.085, 0.035, 0.05)                   # m, the cup's inner bottom centre


def tilt(cells: int, fill: float, margin_deg: float, omega: float, hold: float) -> dict:
    model = max_tilt_3d(BOTTOM / 2, TOP / 2, HEIGHT, fill * HEIGHT)
    targets = np.array([model - math.radians(margin_deg), model + math.radians(margin_deg)])
    dx = SIZE[0] / cells
    w = World3D(size=SIZE, cells=cells, batch_size=2, seed=0)
    cup = container3d("frustum", width=TOP, height=HEIGHT, bottom_width=BOTTOM, wall_thickness=2.2 * dx)
    h = w.add_body(cup, pose=(*ORIGIN, 0.0, 0.0, 0.0), fill=fill)
    w.build()
    step, t, theta = 0.05, 0.0, np.zeros(2)
    t_end = targets.max() / omega + hold
    times = []
    while t < t_end - 1e-9:
        nxt = np.minimum(omega * (t + step), targets)
        pose = np.array([[*ORIGIN, 0.0, 0.0, th] for th in theta])
        vel = np.array([[0.0] * 5 + [(n - th) / step] for n, th in zip(nxt, theta)])
        w.set_pose(h, pose, vel)
        t0 = time.perf_counter()
        w.advance(step)
        times.append(time.perf_counter() - t0)
        theta, t = nxt, t + step
    out = {"fill": fill, "model_deg": math.degrees(model), "cells": cells,
           "particles": w.particle_count(), "unstable": w.unstable}
    for b, name in enumerate(("below", "above")):
        d = w.diagnostics(b)
        out[f"{name}_deg"] = math.degrees(targets[b])
        out[f"{name}_left"] = 1.0 - d["in"][h]
        out[f"{name}_volume_drift"] = d["volume_drift"]
    out["step_s_batch2"] = float(np.median(times[1:]))
    return out


def step_time(cells: int, seconds: float = 1.0) -> dict:
    """Median wall time of a 0.05 s control step of a cup at rest (then being tilted)."""
    size = (0.15, 0.15, 0.15)
    dx = size[0] / cells
    w = World3D(size=size, cells=cells, seed=0)
    h = w.add_body(container3d("cup", width=0.08, height=0.08, wall_thickness=2.2 * dx),
                   pose=(0.075, 0.02, 0.075, 0, 0, 0), fill=0.6)
    w.build()
    w.advance(0.05)  # compiles
    times = []
    for s in range(round(seconds / 0.05)):
        if s == round(seconds / 0.1):
            w.set_pose(h, w.pose(h), velocity=(0, 0, 0, 0, 0, 0.5))
        t0 = time.perf_counter()
        w.advance(0.05)
        times.append(time.perf_counter() - t0)
    return {"cells": cells, "grid": list(w.shape), "particles": w.particle_count(),
            "step_s": float(np.median(times)), "substeps": w.diagnostics()["substeps"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cells", type=int, default=20)
    ap.add_argument("--fill", type=float, default=0.5)
    ap.add_argument("--margin", type=float, default=6.0, help="degrees either side of the model")
    ap.add_argument("--omega", type=float, default=0.3, help="tilt rate, rad/s")
    ap.add_argument("--hold", type=float, default=1.0, help="s held at the final tilt")
    ap.add_argument("--timing-cells", type=int, nargs="*", default=[16, 24])
    args = ap.parse_args()
    load = os.getloadavg()[0]
    r = tilt(args.cells, args.fill, args.margin, args.omega, args.hold)
    print(f"frustum top {TOP} m, bottom {BOTTOM} m, height {HEIGHT} m, fill {r['fill']}: "
          f"max_tilt_3d = {r['model_deg']:.1f} deg; {r['particles']} particles, {args.cells} cells")
    for name in ("below", "above"):
        print(f"  tilted to {r[name + '_deg']:5.1f} deg: {100 * r[name + '_left']:6.2f} % left the cup, "
              f"volume drift {100 * r[name + '_volume_drift']:+.2f} %")
    timings = [step_time(c) for c in args.timing_cells]
    for tm in timings:
        print(f"  control step (0.05 s) at {tm['grid']} cells, {tm['particles']} particles: "
              f"{1e3 * tm['step_s']:.0f} ms ({tm['substeps']} substeps)")
    print(f"  load average at start: {load:.2f} (2 cores shared)")
    print(json.dumps({"tilt": r, "timings": timings, "load_average": load}))


if __name__ == "__main__":
    main()
