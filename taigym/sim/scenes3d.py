"""Standard 3D scenes for validation (DESIGN.md §6), shared by tests and scripts/sim3d_check.py."""

from __future__ import annotations

import time

import numpy as np

from .geometry3d import container3d
from .world3d import World3D

TOP, BOTTOM, HEIGHT = 0.06, 0.04, 0.06        # m, interior diameters at the opening / bottom, height
SIZE = (0.14, 0.12, 0.10)                       # m, room for the cup tilted past 50 degrees
ORIGIN = (0.085, 0.035, 0.05)                   # m, the cup's inner bottom centre


def quasi_static_tilt(targets, fill: float, cells: int = 20, omega: float = 0.3,
                      hold: float = 1.0) -> dict:
    """Tilt a filled frustum (TOP, BOTTOM, HEIGHT) about its inner bottom centre (about z, the
    left lip going down) at ``omega`` rad/s up to each of ``targets`` (rad; one batch member
    each, one launch per step), hold ``hold`` s, and report per member the fraction of the
    liquid that left the cup ("left") and the volume drift. The walls are 2.2 cells thick."""
    targets = np.asarray(targets, dtype=np.float64)
    dx = SIZE[0] / cells
    w = World3D(size=SIZE, cells=cells, batch_size=len(targets), seed=0)
    cup = container3d("frustum", width=TOP, height=HEIGHT, bottom_width=BOTTOM, wall_thickness=2.2 * dx)
    h = w.add_body(cup, pose=(*ORIGIN, 0.0, 0.0, 0.0), fill=fill)
    w.build()
    step, t, theta = 0.05, 0.0, np.zeros(len(targets))
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
    return {"fill": fill, "cells": cells, "particles": w.particle_count(), "unstable": w.unstable,
            "tilt_deg": np.degrees(targets).tolist(),
            "left": [1.0 - w.diagnostics(b)["in"][h] for b in range(len(targets))],
            "volume_drift": [w.diagnostics(b)["volume_drift"] for b in range(len(targets))],
            "step_s": float(np.median(times[1:]))}
