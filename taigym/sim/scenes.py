"""Standard scenes and measurements: validation against experiments (DESIGN.md §6) and the
benchmark pour scene. Shared by tests, scripts/dam_break.py and scripts/bench_sim.py.
"""

from __future__ import annotations

import math

import numpy as np

from .constants import GRAVITY
from .geometry import Box, container
from .world2d import World2D


# Martin & Moyce (1952), Phil. Trans. R. Soc. A 244, Fig. 3: surge front of a collapsing water
# column of width a = 2.25 in and height 2a (n^2 = 2), digitised (as in PySPH's examples).
# Columns: T = t sqrt(2 g / a), Z = x / a (x from the column's back wall).
MARTIN_MOYCE_N2_A225 = np.array([
    [0.832, 1.217], [1.219, 1.474], [1.997, 2.292], [2.547, 2.995], [3.345, 4.134],
    [4.034, 4.944], [4.418, 5.881], [5.091, 6.980]])


def dam_break(a: float = 0.1, cells: int = 128, **world_kw) -> World2D:
    """A column a wide and 2a tall against the left wall of a 6a x 3a tank (unbuilt)."""
    world = World2D(size=(6 * a, 3 * a), cells=cells, **world_kw)
    world.add_liquid_rect(0.0, 0.0, a, 2 * a)
    return world


def surge_front(world, member: int = 0) -> float:
    """Surge front position (m): the 99.9th percentile of x over the liquid touching the floor.

    The percentile ignores the odd droplet flung ahead; "touching the floor" is within two
    particle spacings of it, as the front is read off at the floor in the experiment.
    """
    x = world.positions(member)
    floor = x[:, 1] < 4 * world.spacing
    return float(np.percentile(x[floor, 0], 99.9))


def run_dam_break(a: float = 0.1, cells: int = 128, t_end_scaled: float = 3.0,
                  dt: float = 0.01, **world_kw) -> tuple[np.ndarray, np.ndarray]:
    """Returns (T, Z) of the simulated surge front, sampled every `dt` s until T = t_end_scaled."""
    return front_series(dam_break(a, cells, **world_kw).build(), a, t_end_scaled, dt)


def front_series(world, a: float, t_end_scaled: float = 3.0,
                 dt: float = 0.01) -> tuple[np.ndarray, np.ndarray]:
    """Advance a built column-collapse world (2D or 3D, y up, column a wide) by ``dt`` until
    T = t sqrt(2 g / a) reaches ``t_end_scaled``: (T, Z = surge front / a) at each sample."""
    scale = math.sqrt(2 * GRAVITY / a)
    ts, zs = [0.0], [surge_front(world) / a]
    while ts[-1] < t_end_scaled:
        world.advance(dt)
        ts.append(ts[-1] + dt * scale)
        zs.append(surge_front(world) / a)
    return np.array(ts), np.array(zs)


def free_surface_slope(points: np.ndarray, bins: int = 12) -> float:
    """Angle (rad) of the straight line fitted to the top of a liquid body (points in any frame
    whose y is up): the highest point in each of `bins` columns, least squares."""
    x, y = points[:, 0], points[:, 1]
    edges = np.linspace(x.min(), x.max(), bins + 1)
    idx = np.clip(np.digitize(x, edges) - 1, 0, bins - 1)
    cx, top = [], []
    for k in range(1, bins - 1):  # the end columns touch the walls' meniscus
        sel = idx == k
        if sel.any():
            cx.append(0.5 * (edges[k] + edges[k + 1]))
            top.append(y[sel].max())
    slope = np.polyfit(cx, top, 1)[0]
    return math.atan(slope)


def torricelli_tank(depth: float = 0.1, orifice: float = 0.02, cells: int = 160,
                    **world_kw) -> tuple[World2D, dict]:
    """A wide tank on a raised floor, with an orifice at the bottom of its right wall.

    Returns the unbuilt world and the geometry: orifice centre (x, y), the tank's liquid surface
    height at the start, and the tank's inner x-range. The orifice must span several cells (the
    default, 6.4 at 160 cells): a jet through 3 or 4 cells loses ~10 % of its speed to the grid.
    """
    W, H = 0.5, 0.3
    floor_top, wall_x, wall_w = 0.08, 0.2, 0.012
    world = World2D(size=(W, H), cells=cells, **world_kw)
    world.add_body(Box(width=wall_x + wall_w, height=floor_top),
                   pose=((wall_x + wall_w) / 2, floor_top / 2, 0.0))
    wall_bottom = floor_top + orifice
    world.add_body(Box(width=wall_w, height=H - wall_bottom),
                   pose=(wall_x + wall_w / 2, (H + wall_bottom) / 2, 0.0))
    surface = floor_top + orifice / 2 + depth
    world.add_liquid_rect(0.0, floor_top, wall_x, surface)
    return world, {"orifice": (wall_x + wall_w, floor_top + orifice / 2), "surface": surface,
                   "tank": (0.0, wall_x), "floor": floor_top}


def pour_scene(batch_size: int = 1, cells: int = 128, world_cls: type = World2D,
               **world_kw) -> tuple[World2D, int, int]:
    """The benchmark scene: a cup (about 8k particles at 128 cells) tilting over a wide rect
    target, on a 0.6 m square domain. Returns (world, source handle, target handle), unbuilt.
    ``world_cls`` may be the NumPy reference world."""
    world = world_cls(size=(0.6, 0.6), cells=cells, batch_size=batch_size, **world_kw)
    source = world.add_body(container("cup", width=0.2, height=0.22), pose=(0.2, 0.25, 0.0),
                            fill=0.9)
    target = world.add_body(container("rect", width=0.22, height=0.2), pose=(0.45, 0.02, 0.0))
    return world, source, target


def pour_motion(step: int, dt: float = 0.05) -> tuple[tuple[float, float, float], tuple[float, float, float]]:
    """The benchmark's source motion: tilt towards the target at 1 rad/s up to 2 rad, then hold.
    Returns (pose at the start of the step, velocity over it)."""
    omega = -1.0
    theta = max(omega * step * dt, -2.0)
    w = omega if theta > -2.0 else 0.0
    return (0.2, 0.25, theta), (0.0, 0.0, w)


def align_time_origin(T: np.ndarray, Z: np.ndarray, ref: np.ndarray,
                      max_shift: float = 0.5) -> tuple[float, np.ndarray]:
    """Least-squares time-origin offset dT >= 0 between a simulated front (T, Z) and reference
    points (T_ref, Z_ref), with the experiment's clock running dT ahead of the simulation's
    (its release was not instantaneous). Returns dT and the relative errors after alignment."""
    shifts = np.arange(0.0, max_shift + 1e-9, 0.005)
    errors = [np.interp(ref[:, 0] - s, T, Z) / ref[:, 1] - 1.0 for s in shifts]
    best = int(np.argmin([np.sum(e ** 2) for e in errors]))
    return float(shifts[best]), errors[best]


def quasi_static_spill_angles(cups: list, fills: list[float], *, start_angles: list[float],
                              rate: float = math.radians(3.0), span: float = math.radians(8.0),
                              threshold: float = 0.0, cells: int = 128, dt: float = 0.05,
                              **world_kw) -> np.ndarray:
    """The simulator's quasi-static spill angle (rad) of each (container, fill) pair, one batch
    member each: tilt counter-clockwise about the inner bottom's centre (smoothstep, 0.25 rad/s
    on average) to ``start_angles[i]``, hold there 1.5 s to let the sloshing die, then tilt on
    at the slow ``rate`` (rad/s) for ``span`` rad; the spill angle is the tilt at which more than
    ``threshold`` of the liquid (default: the first particle) has left the interior polygon (NaN
    if it never did). The protocol is short on purpose: the solver loses ~0.5 % of the liquid's
    area per second of tilting, which would bias the angle upwards."""
    n = len(cups)
    if not (len(fills) == len(start_angles) == n and n > 0):
        raise ValueError("cups, fills and start_angles must have the same non-zero length")
    world = World2D(size=(0.4, 0.3), cells=cells, batch_size=n, **world_kw)
    pivot = (0.24, 0.1)
    h = world.add_body(cups[0], pose=(*pivot, 0.0))
    for b, (cup, fill) in enumerate(zip(cups, fills)):
        world.set_shape(h, cup, member=b)
        world.fill_body(h, fill, member=b)
    world.build()
    start = np.asarray(start_angles, dtype=np.float64)
    # every member on its own clock: ramp, hold, slow tilt; then it holds still. (A common slow
    # phase would leave the small angles waiting for seconds, losing liquid area meanwhile.)
    ramp = np.maximum(np.ceil(start / (0.25 * dt)), 1).astype(int)
    slow_from = ramp + int(round(1.5 / dt))
    slow_steps = int(math.ceil(span / (rate * dt)))
    theta = np.zeros(n)
    spill_angle = np.full(n, np.nan)
    for k in range(int(slow_from.max()) + slow_steps):
        s = np.minimum((k + 1) / ramp, 1.0)
        slow = (k >= slow_from) & (k < slow_from + slow_steps)
        nxt = np.where(k < ramp, start * (3 * s * s - 2 * s ** 3), theta + slow * rate * dt)
        poses = np.column_stack([np.full(n, pivot[0]), np.full(n, pivot[1]), theta])
        vels = np.column_stack([np.zeros(n), np.zeros(n), (nxt - theta) / dt])
        world.set_poses(poses[:, None, :], vels[:, None, :])
        world.advance(dt)
        theta = nxt
        for b in range(n):
            if np.isnan(spill_angle[b]) and 1.0 - world.fractions(b)["in"][h] > threshold:
                # in the slow phase the crossing happened during this step: credit its middle
                spill_angle[b] = theta[b] - 0.5 * rate * dt * slow[b]
    return spill_angle
