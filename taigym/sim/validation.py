"""Checks of the liquid solver against references no one here wrote (DESIGN.md §6): closed-form
viscous flows, linear sloshing theory, Martin & Moyce's (1952) column collapse, and the
liquid's volume at rest and in motion, in 2D and 3D. Each function runs one check and returns
a dict of figures and the series to plot; tests/ assert on them and scripts/validate.py plots
and summarises them. Dimension-generic: ``dim`` 2 builds a ``World2D``, 3 a ``World3D``.

The viscous flows are set at a Reynolds number, not a size: the liquid's scale follows from
its viscosity (``poiseuille``), or the check's time step is chosen from it (``shear_decay``),
so that water's viscosity (1e-3 Pa s) is checked on a sub-millimetre slot as honey's on a
centimetre one. At the envs' scale water's viscosity is far below the scheme's own numerical
viscosity and the solver skips it (``constants.VISCOSITY_SKIP``).
"""

from __future__ import annotations

import math

import numpy as np
from scipy.optimize import curve_fit

from .constants import DENSITY, GRAVITY


def new_world(dim: int, size, cells: int, **kw):
    """An unbuilt World2D (size (x, y)) or World3D (size (x, y, z)), y up."""
    if dim == 2:
        from .world2d import World2D

        return World2D(size=size[:2], cells=cells, **kw)
    from .world3d import World3D

    return World3D(size=size, cells=cells, **kw)


def add_block(world, lo, hi, velocity=None) -> int:
    """Fill the box [lo, hi] (2 or 3 coordinates, m) with liquid; returns the particle count."""
    if world.DIM == 2:
        return world.add_liquid_rect(lo[0], lo[1], hi[0], hi[1],
                                     **({} if velocity is None else {"velocity": velocity}))
    return world.add_liquid_box(lo, hi, **({} if velocity is None else {"velocity": velocity}))


# ---------------------------------------------------------------- volume
def rest_drift(dim: int, viscosities, seconds: float = 10.0, dx: float = 0.005,
               fill: float = 0.8) -> dict:
    """A 10 cm container (2D: rect, 3D: round cup) filled to ``fill``, at rest for ``seconds``,
    one batch member per viscosity (Pa s). Returns the time series of each member's volume
    drift (against the particles' rest volume) and of its surface level (the median over the
    interior's columns of the highest particle, relative to its value at t = 0)."""
    from .geometry import container
    from .geometry3d import container3d

    width, height, wall = 0.1, 0.1, max(0.01, 2.2 * dx)
    size = (0.2, 0.16, 0.2)
    w = new_world(dim, size, round(size[0] / dx), batch_size=len(viscosities), seed=0)
    shape = (container("rect", width, height, wall) if dim == 2
             else container3d("cup", width, height, wall))
    origin = (0.1, wall + 0.005, 0.1)[:dim]
    h = w.add_body(shape, pose=(*origin, *(0.0,) * (w.POSE_SIZE - dim)), fill=fill)
    for b, mu in enumerate(viscosities):
        w.set_viscosity(float(mu), member=b)
    w.build()

    def level(b):
        x = w.positions(b) - origin
        r = np.abs(x[:, 0]) if dim == 2 else np.hypot(x[:, 0], x[:, 2])
        inner = r < 0.35 * width
        cells = np.floor(x[inner][:, [0] + ([2] if dim == 3 else [])] / dx).astype(np.int64)
        keys, inv = np.unique(cells, axis=0, return_inverse=True)
        top = np.full(len(keys), -np.inf)
        np.maximum.at(top, inv.ravel(), x[inner, 1])
        return float(np.median(top))

    n = round(seconds / 0.05)
    t = np.arange(n + 1) * 0.05
    drift = np.zeros((len(viscosities), n + 1))
    lvl = np.zeros((len(viscosities), n + 1))
    name = f"{w.LIQUID_MEASURE}_drift"
    for k in range(n + 1):
        if k:
            w.advance(0.05)
        for b in range(len(viscosities)):
            drift[b, k] = w.diagnostics(b)[name]
            lvl[b, k] = level(b)
    lvl = lvl / lvl[:, :1] - 1.0
    return {"dim": dim, "dx": w.dx, "viscosities": list(map(float, viscosities)), "t": t,
            "drift": drift, "level": lvl, "unstable": w.unstable,
            "kept": [w.fractions(b)["in"][h] for b in range(len(viscosities))],
            "max_abs_drift": np.abs(drift).max(axis=1).tolist(),
            "max_abs_level": np.abs(lvl).max(axis=1).tolist()}


def pour_drift(steps: int = 60, cells: int = 128) -> dict:
    """The benchmark pour scene (scenes.pour_scene: a cup tilted over a target at 1 rad/s to
    2 rad) for ``steps`` control steps: the area drift after each."""
    from . import scenes

    world, source, target = scenes.pour_scene(cells=cells)
    world.build()
    drift = [world.diagnostics()["area_drift"]]
    for k in range(steps):
        pose, vel = scenes.pour_motion(k, 0.05)
        world.set_pose(source, pose, velocity=vel)
        world.advance(0.05)
        drift.append(world.diagnostics()["area_drift"])
    return {"steps": np.arange(steps + 1), "drift": np.array(drift), "final_drift": drift[-1],
            "in_target": world.fractions()["in"][target], "cells": cells}


# ---------------------------------------------------------------- closed-form viscous flows
def duct_poiseuille(dim: int, x: np.ndarray, width: float, nu: float, terms: int = 99):
    """Fully developed gravity-driven flow down a vertical slot (2D) or square duct (3D) of
    ``width`` (m): the velocity (m/s, negative = down) at positions across it, x (m) along one
    side's normal and, in 3D, at mid-depth; and the section's mean velocity. 2D: the plane
    Poiseuille parabola v = -g x (W - x) / (2 nu), mean -g W^2 / (12 nu). 3D: the double sine
    series of lap v = g / nu with v = 0 on the walls (terms: odd orders per axis)."""
    g = GRAVITY
    if dim == 2:
        return -g * x * (width - x) / (2 * nu), -g * width ** 2 / (12 * nu)
    m = np.arange(1, 2 * terms, 2)[:, None]
    n = np.arange(1, 2 * terms, 2)[None, :]
    c = 16 * g * width ** 2 / (nu * math.pi ** 4) / (m * n * (m ** 2 + n ** 2))
    sz = np.sin(n * math.pi / 2)
    v = -np.array([np.sum(c * np.sin(m * math.pi * xi / width) * sz) for xi in np.atleast_1d(x)])
    mean = -64 * g * width ** 2 / (nu * math.pi ** 6) * np.sum(
        1.0 / (m ** 2 * n ** 2 * (m ** 2 + n ** 2)))
    return v, float(mean)


def poiseuille(dim: int, viscosity: float, cells: int = 8, reynolds: float = 2.0,
               slug: float = 12.0, tau: float = 5.0) -> dict:
    """A slug of liquid ``slug`` slot widths long falling between two no-slip walls (the domain's
    edges; 3D: a square duct), from rest for ``tau`` times the slowest viscous time W^2 /
    (pi^2 nu) (3D: twice that): the velocity across the slot in the middle fifth of the slug
    against ``duct_poiseuille``. The width W = (12 Re nu^2 / g)^(1/3) gives the flow the
    Reynolds number ``reynolds`` (mean speed x W / nu) at any viscosity.

    The flow is the liquid's transport: each particle's displacement over the last of 40
    intervals (the grid's velocity it was advected with). The particles' carried FLIP
    velocities lag it near the walls (the FLIP update adds grid increments to them, the 5 %
    PIC part relaxes them only slowly): their mean is returned as ``carried_error``."""
    nu = viscosity / DENSITY
    width = (12 * reynolds * nu ** 2 / GRAVITY) ** (1 / 3)
    dx = width / cells
    height = (slug + 4) * width
    w = new_world(dim, (width, height, width), cells, viscosity=viscosity, seed=0)
    add_block(w, (0.0, 3 * width, 0.0)[:dim], (width, (3 + slug) * width, width)[:dim])
    w.build()
    t_end = tau * width ** 2 / (math.pi ** 2 * nu) * (2 if dim == 3 else 1)
    for _ in range(39):
        w.advance(t_end / 40)
    before = w.positions().copy()
    w.advance(t_end / 40)
    x = w.positions()
    v = (x[:, 1] - before[:, 1]) / (t_end / 40)
    lo, hi = np.percentile(x[:, 1], [10, 90])
    section = np.abs(x[:, 1] - 0.5 * (lo + hi)) < 0.1 * (hi - lo)
    mid = section.copy()
    if dim == 3:  # the central row of cells in z
        mid &= np.abs(x[:, 2] - width / 2) < 0.5 * dx
    col = np.clip((x[mid, 0] / dx).astype(np.int64), 0, cells - 1)
    profile = np.array([v[mid][col == k].mean() for k in range(cells)])
    centres = (np.arange(cells) + 0.5) * dx
    theory, mean_theory = duct_poiseuille(dim, centres, width, nu)
    mean = float(v[section].mean())
    carried = float(w.velocities()[section, 1].mean())
    return {"dim": dim, "viscosity": viscosity, "cells": cells, "width": width, "x": centres,
            "profile": profile, "theory": theory, "mean": mean, "mean_theory": mean_theory,
            "mean_error": mean / mean_theory - 1.0, "carried_error": carried / mean_theory - 1.0,
            "profile_error": float(np.max(np.abs(profile - theory)) / np.abs(theory).max()),
            "unstable": w.unstable}


# Cells per wavelength of the shear checks. Each substep's PIC part (5 %) smooths the mode by
# the transfers' ~(k dx)^2 / 6 per direction across it (3D: two, 2D: one): an excess decay of
# second order in dx, twice 2D's in 3D (docs/validation.md has the figures per resolution).
SHEAR_CELLS = {2: 16, 3: 24}


def shear_decay(dim: int, viscosity: float, cells: int = 16, width: float | None = None,
                decay_per_step: float = 0.02) -> dict:
    """The shear mode v_y = V sin(k x) (3D: V sin(k x) sin(k z)), k = 2 pi / W, in a column of
    liquid between no-slip walls (the domain's edges), gravity off: it keeps its shape and
    decays at nu k^2 (3D: 2 nu k^2), the viscous damping rate of a standing shear wave. The
    substep is capped (dt_max) at ``decay_per_step`` / rate so that the implicit (backward
    Euler) step's own error (rate x dt / 2) stays at 1 %. Returns the fitted rate over one
    decay time against theory. ``width`` (m) defaults to one giving the decay time 0.2 s."""
    nu = viscosity / DENSITY
    factor = 2 if dim == 3 else 1
    if width is None:
        width = 2 * math.pi * math.sqrt(factor * nu * 0.2)
    k = 2 * math.pi / width
    rate = factor * nu * k * k
    height = 4 * width
    w = new_world(dim, (width, height + width, width), cells, viscosity=viscosity, seed=0,
                  gravity=(0.0,) * dim, dt_max=min(0.01, decay_per_step / rate))

    def shape(x):
        s = np.sin(k * x[:, 0])
        return s * np.sin(k * x[:, 2]) if dim == 3 else s

    # one column of particles per slab, each slab at the mode's velocity at its centre
    # (1 cm/s: the free surface barely moves)
    h = w.spacing
    n = round(width / h)
    edges = np.minimum(np.arange(n + 1) * h, width)
    for i in range(n):
        for j in range(n if dim == 3 else 1):
            lo = np.array([edges[i], 0.0, edges[j]])
            hi = np.array([edges[i + 1], height, edges[j + 1]])
            vy = 0.01 * float(shape(0.5 * (lo + hi)[None])[0])
            add_block(w, lo[:dim], hi[:dim], velocity=(0.0, vy, 0.0)[:dim])
    w.build()
    t = np.linspace(0.0, 1.0 / rate, 21)
    amp = []
    for i in range(len(t)):
        if i:
            w.advance(t[i] - t[i - 1])
        x, v = w.positions(), w.velocities()
        mid = (x[:, 1] > 1.5 * width) & (x[:, 1] < height - 1.5 * width)
        s = shape(x[mid])
        amp.append(float(np.sum(v[mid, 1] * s) / np.sum(s * s)))
    fitted = -np.polyfit(t, np.log(amp), 1)[0]
    return {"dim": dim, "viscosity": viscosity, "cells": cells, "width": width, "t": t,
            "amplitude": np.array(amp), "rate": float(fitted), "rate_theory": rate,
            "rate_error": float(fitted / rate - 1.0), "unstable": w.unstable}


# ---------------------------------------------------------------- sloshing
def sloshing(dim: int, dx: float, length: float = 0.1, depth: float = 0.05,
             seconds: float = 3.0) -> dict:
    """A rectangular tank (the domain: ``length`` along x, 3D: as wide in z) of water ``depth``
    deep, nudged sideways (a 2 m/s^2 frame acceleration for 0.05 s), then ringing in its first
    mode: the liquid's centre of mass x(t) fitted by a damped cosine against linear theory,
    omega^2 = g k tanh(k h), k = pi / L. Returns the frequency's error and the amplitude lost
    per period."""
    size = (length, 2 * depth, length)
    w = new_world(dim, size, round(length / dx), seed=0)
    add_block(w, (0.0,) * dim, (length, depth, length)[:dim])
    w.build()
    origin = tuple(0.5 * s for s in size[:dim])
    push = (-2.0,) + (0.0,) * (dim - 1)
    dt, n = 0.01, round(seconds / 0.01)
    t, xc = np.arange(1, n + 1) * dt, np.zeros(n)
    for i in range(n):
        if i < 5:
            if dim == 2:
                w.set_frame_motion(origin, 0.0, accel=push)
            else:
                w.set_frame_motion(origin, accel=push)
        elif i == 5:
            w.clear_frame_motion()
        w.advance(dt)
        xc[i] = w.positions()[:, 0].mean() - length / 2
    k = math.pi / length
    omega_th = math.sqrt(GRAVITY * k * math.tanh(k * depth))
    sel = t > 0.1

    def ring(tt, a, g, om, ph, c):
        return a * np.exp(-g * tt) * np.cos(om * tt + ph) + c

    p, _ = curve_fit(ring, t[sel], xc[sel], p0=[1.4 * xc[sel].std(), 0.3, omega_th, 0.0, 0.0],
                     maxfev=20000)
    omega, gamma = abs(p[2]), p[1]
    return {"dim": dim, "dx": w.dx, "t": t, "x": xc, "omega": omega, "omega_theory": omega_th,
            "frequency_error": omega / omega_th - 1.0, "decay_rate": gamma,
            "decay_per_period": 1.0 - math.exp(-gamma * 2 * math.pi / omega),
            "unstable": w.unstable}


# ---------------------------------------------------------------- column collapse
def column_collapse(dim: int, cells: int, a: float = 0.1, t_end_scaled: float = 3.0,
                    dt: float = 0.01) -> dict:
    """Martin & Moyce's (1952) collapse of a column a wide and 2a tall against the back wall
    of a 6a x 3a tank (3D: spanning the tank's width, a in z, as their column spanned theirs):
    the surge front (scenes.surge_front) Z = x / a against T = t sqrt(2 g / a), with the
    release delay aligned as in scenes.align_time_origin. Returns the series and the largest
    relative front errors over 0.5 <= T <= 2.5, raw and aligned."""
    from .scenes import MARTIN_MOYCE_N2_A225, align_time_origin, front_series

    w = new_world(dim, (6 * a, 3 * a, a), cells, seed=0)
    add_block(w, (0.0,) * dim, (a, 2 * a, a)[:dim])
    w.build()
    T, Z = front_series(w, a, t_end_scaled, dt)
    ref = MARTIN_MOYCE_N2_A225[(MARTIN_MOYCE_N2_A225[:, 0] >= 0.5) & (MARTIN_MOYCE_N2_A225[:, 0] <= 2.6)]
    raw = np.interp(ref[:, 0], T, Z) / ref[:, 1] - 1.0
    shift, aligned = align_time_origin(T, Z, ref)
    return {"dim": dim, "cells": cells, "dx": w.dx, "T": T, "Z": Z, "time_shift": shift,
            "max_error_raw": float(np.abs(raw).max()), "max_error_aligned": float(np.abs(aligned).max()),
            "unstable": w.unstable}


# ---------------------------------------------------------------- walls
def viscous_spread(viscosities=(1e-3, 0.5), seconds: float = 0.5, cells: int = 96) -> dict:
    """A 10 cm x 10 cm column released on a floor: the domain's floor, and a solid box standing
    in for it (the same height of liquid above a body instead of the domain's edge). Returns
    the front (99.9th percentile of x) after ``seconds`` per viscosity and floor: a viscous
    liquid must feel the floor's drag (no-slip) and both floors must agree."""
    from .geometry import Box

    out = {"viscosities": list(viscosities), "domain_floor": [], "body_floor": []}
    for floor in ("domain_floor", "body_floor"):
        base = 0.0 if floor == "domain_floor" else 0.05
        w = new_world(2, (0.8, 0.2 + base), cells, batch_size=len(viscosities), seed=0)
        if base:
            w.add_body(Box(0.9, 2 * base), pose=(0.4, 0.0, 0.0))
        add_block(w, (0.0, base), (0.1, base + 0.1))
        for b, mu in enumerate(viscosities):
            w.set_viscosity(float(mu), member=b)
        w.build()
        for _ in range(round(seconds / 0.05)):
            w.advance(0.05)
        out[floor] = [float(np.percentile(w.positions(b)[:, 0], 99.9)) for b in range(len(viscosities))]
    return out
