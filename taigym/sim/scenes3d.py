"""Standard 3D scenes for validation (DESIGN.md §6), shared by tests and scripts/sim3d_check.py."""

from __future__ import annotations

import time

import numpy as np

from .geometry3d import Box3, container3d
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


def torricelli_tank(depth: float = 0.06, orifice: float = 0.025, cells: int = 72,
                    **world_kw) -> tuple[World3D, dict]:
    """A tank on a raised floor with a slot orifice at the bottom of its right wall, across the
    domain's whole (thin, 4-cell) depth in z: the 3D solver on a jet that is uniform in z.

    Returns the unbuilt world and the geometry: orifice centre (x, y), the liquid surface height
    at the start, and the tank's inner x-range (m). The slot spans five cells at the default
    grid (``flip2d``'s tank found that a jet through 3 or 4 cells loses ~10 % of its speed)."""
    W, H = 0.36, 0.2
    dx = W / cells
    D = 4 * dx
    floor_top, wall_x, wall_w = 0.04, 0.16, 2.4 * dx  # a wide tank drains slowly
    world = World3D(size=(W, H, D), cells=cells, **world_kw)
    world.add_body(Box3(wall_x + wall_w, floor_top, 2 * D),
                   pose=((wall_x + wall_w) / 2, floor_top / 2, D / 2, 0, 0, 0))
    wall_bottom = floor_top + orifice
    world.add_body(Box3(wall_w, H - wall_bottom, 2 * D),
                   pose=(wall_x + wall_w / 2, (H + wall_bottom) / 2, D / 2, 0, 0, 0))
    surface = floor_top + orifice / 2 + depth
    world.add_liquid_box((0.0, floor_top, 0.0), (wall_x, surface, D))
    return world, {"orifice": (wall_x + wall_w, floor_top + orifice / 2), "surface": surface,
                   "tank": (0.0, wall_x), "floor": floor_top}
