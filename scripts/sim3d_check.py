"""Checks of the 3D liquid backend (World3D) on small grids: the quasi-static tilt of a filled
frustum just below and just above the SFRRT* paper's 3D maximum tilt (taigym.models.max_tilt.max_tilt_3d),
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
from taigym.sim.scenes3d import BOTTOM, HEIGHT, TOP, quasi_static_tilt
from taigym.sim.world3d import World3D


def step_time(cells: int, seconds: float = 1.0) -> dict:
    """Median wall time of a 0.05 s control step of a cup at rest (then being tilted)."""
    size = (0.15, 0.15, 0.15)
    dx = size[0] / cells
    w = World3D(size=size, cells=cells, seed=0)
    h = w.add_body(container3d("cup", width=0.08, height=0.08, wall_thickness=2.2 * dx),
                   pose=(0.075, 0.035, 0.075, 0, 0, 0), fill=0.6)
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
    model = max_tilt_3d(BOTTOM / 2, TOP / 2, HEIGHT, args.fill * HEIGHT)
    r = quasi_static_tilt([model - math.radians(args.margin), model + math.radians(args.margin)],
                          args.fill, args.cells, args.omega, args.hold)
    r["model_deg"] = math.degrees(model)
    print(f"frustum top {TOP} m, bottom {BOTTOM} m, height {HEIGHT} m, fill {args.fill}: "
          f"max_tilt_3d = {r['model_deg']:.1f} deg; {r['particles']} particles, {args.cells} cells, "
          f"{1e3 * r['step_s']:.0f} ms per step for the batch of 2")
    for deg, left, drift in zip(r["tilt_deg"], r["left"], r["volume_drift"]):
        print(f"  tilted to {deg:5.1f} deg: {100 * left:6.2f} % left the cup, volume drift {100 * drift:+.2f} %")
    timings = [step_time(c) for c in args.timing_cells]
    for tm in timings:
        print(f"  control step (0.05 s) at {tm['grid']} cells, {tm['particles']} particles: "
              f"{1e3 * tm['step_s']:.0f} ms ({tm['substeps']} substeps)")
    print(f"  load average at start: {load:.2f} (2 cores shared)")
    print(json.dumps({"tilt": r, "timings": timings, "load_average": load}))


if __name__ == "__main__":
    main()
