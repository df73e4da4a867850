"""System identification of Pan & Manocha 2016's simplified model from particle simulations.

A container filled to ``fill`` is tilted about its frame origin along a random monotone curve
(Pan & Manocha 2016 §V: "leaning it from 0 to theta_max using a random monotonically increasing curve")
in a ``taigym.sim.World2D``; each control step records the volume V left in the container's
interior and the mean speed u, relative to the container's rigid motion, of the particles that
left the interior during the step (each one's velocity at the step's end with the free fall of
half a step taken back: on average it crossed that long ago). The coefficients of u = w . phi
(see :mod:`taigym.models.simplified`) are the least-squares fit over the steps with an outflow
section (A > 0); the discharge coefficient k is the least-squares fit of the measured volume
loss to dt A u. The particles that left in each step are followed while they fall: where they
cross FLIGHT_DROPS below the lip (their streamlines, Pan, Park & Manocha 2016) fixes the jet's direction offset
and horizontal drag (:func:`jet_path`). Pours are simulated at the Pour env's cell size by
``scripts/sysid_pour.py``: the thin jets' drag depends on it.
"""

from __future__ import annotations

import math
import os
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from scipy.interpolate import PchipInterpolator

from taigym.sim.constants import CONTROL_DT, GRAVITY
from taigym.sim.geometry import Container, points_in_polygon

from .outflow_tables import OutflowTables, outflow_tables
from .simplified import TERMS, OutflowFit, SimplifiedLiquid, jet_drag, landing, path_x, regressors

DT = CONTROL_DT                     # s, the envs' control step
WORLD_SIZE = (0.4, 0.4)            # m; S's frame origin at its centre
PIVOT = (0.2, 0.2)


@dataclass
class PourRecord:
    """One simulated pour. ``lean`` (n + 1,) rad at the step boundaries, ``volume`` (n + 1,) m^2
    in S, ``speed`` (n,) m/s mean outflow speed in each step (0 where nothing left S),
    ``crossed`` (n,) the number of particles that left, ``velocity`` (n, 2) their mean velocity
    relative to S (world axes, m/s; the pours lean to the right), ``flight`` (n, drops, 3) where
    they crossed FLIGHT_DROPS below the lip: mean world x (m), mean time after the step (s),
    count."""

    shape: Container
    fill: float
    viscosity: float
    lean: np.ndarray
    volume: np.ndarray
    speed: np.ndarray
    crossed: np.ndarray
    velocity: np.ndarray | None = None
    flight: np.ndarray | None = None


# Altitudes below the pouring lip (m) at which the streamlines of each step's outflow are read
# (Pan, Park & Manocha 2016 fits the jet to particle streamlines): T's rim is typically 2-10 cm below S's lip.
FLIGHT_DROPS = (0.02, 0.05, 0.08)
FLIGHT_STEPS = 12                  # control steps a leaving particle is followed (0.6 s)
FLOOR_MARGIN = 0.02                # m; levels closer to the world's floor are not read


def monotone_tilt_curve(rng: np.random.Generator, n_steps: int, dt: float = DT,
                        lean_range=(1.6, 2.4), duration_range=(2.0, 4.0)) -> np.ndarray:
    """A random monotone lean curve from 0 (n_steps + 1 samples, rad): six random positive
    increments joined by a monotone (PCHIP) spline, reaching a random final lean at a random
    time and holding it."""
    lean_max = rng.uniform(*lean_range)
    duration = rng.uniform(*duration_range)
    knots_t = np.linspace(0.0, duration, 7)
    knots = np.concatenate([[0.0], np.cumsum(rng.uniform(0.05, 1.0, 6))])
    knots *= lean_max / knots[-1]
    t = np.minimum(np.arange(n_steps + 1) * dt, duration)
    return PchipInterpolator(knots_t, knots)(t)


def simulate_pours(containers: Sequence[Container], fills: Sequence[float], viscosity: float,
                   curves: Sequence[np.ndarray], *, cells: int = 128, batch_size: int = 8,
                   arch: str = "cpu", seed: int = 0,
                   progress: Callable[[int, int], None] | None = None) -> list[PourRecord]:
    """Simulate one pour per (container, fill, curve), ``batch_size`` at a time."""
    from taigym.sim import World2D

    n = len(containers)
    if not (len(fills) == len(curves) == n):
        raise ValueError("containers, fills and curves must have the same length")
    records: list[PourRecord] = []
    cap = max(int(1.1 * c.liquid_area(f) / (0.5 * WORLD_SIZE[0] / cells) ** 2) + 16
              for c, f in zip(containers, fills))
    world = World2D(size=WORLD_SIZE, cells=cells, viscosity=viscosity, arch=arch, seed=seed,
                    batch_size=batch_size, max_particles=cap)
    world.add_body(containers[0], pose=(*PIVOT, 0.0))
    world.build()
    for start in range(0, n, batch_size):
        # a short last batch repeats its last pour in the spare members
        idx = [min(start + b, n - 1) for b in range(batch_size)]
        for b, k in enumerate(idx):
            world.clear_liquid(member=b)
            world.set_body(0, containers[k], (*PIVOT, 0.0), member=b)
            world.reseed(seed + k, member=b)
            world.fill_body(0, fills[k], member=b)
        steps = max(len(curves[k]) for k in idx) - 1
        leans = np.array([np.pad(curves[k], (0, steps + 1 - len(curves[k])), mode="edge")
                          for k in idx])
        inside = [_inside(containers[k], world.positions(b), 0.0) for b, k in enumerate(idx)]
        counts = [np.zeros(steps + 1) for _ in range(batch_size)]
        speed = [np.zeros(steps) for _ in range(batch_size)]
        mean_vel = [np.zeros((steps, 2)) for _ in range(batch_size)]
        crossed = [np.zeros(steps, np.int64) for _ in range(batch_size)]
        nd = len(FLIGHT_DROPS)
        flight = [np.zeros((steps, nd, 3)) for _ in range(batch_size)]
        exit_step = [np.full(len(inside[b]), -1) for b in range(batch_size)]
        levels = [np.full((len(inside[b]), nd), -np.inf) for b in range(batch_size)]
        prev_x = [x.copy() for x in world.positions_all()]
        for b in range(batch_size):
            counts[b][0] = inside[b].sum()
        for i in range(steps):
            theta0, theta1 = -leans[:, i], -leans[:, i + 1]   # pour to the right: theta < 0
            omega = (theta1 - theta0) / DT
            poses = np.zeros((batch_size, 1, 3))
            vels = np.zeros((batch_size, 1, 3))
            poses[:, 0, :2] = PIVOT
            poses[:, 0, 2] = theta0
            vels[:, 0, 2] = omega
            world.set_poses(poses, vels)
            world.advance(DT)
            xs, vs = world.positions_all(), world.velocities_all()
            for b, k in enumerate(idx):
                now = _inside(containers[k], xs[b], theta1[b])
                left = inside[b] & ~now
                if left.any():
                    r = xs[b][left] - PIVOT
                    rel = vs[b][left] - omega[b] * np.column_stack((-r[:, 1], r[:, 0]))
                    # read at the step's end, a particle has fallen since it crossed, on average
                    # for half a step: take back the vertical speed gravity gave it meanwhile
                    rel[:, 1] += 0.5 * GRAVITY * DT
                    speed[b][i] = float(np.linalg.norm(rel, axis=1).mean())
                    mean_vel[b][i] = rel.mean(axis=0)
                    crossed[b][i] = int(left.sum())
                inside[b] = now
                counts[b][i + 1] = now.sum()
                _follow(flight[b], exit_step[b], levels[b], left, containers[k].lips[1], theta1[b],
                        prev_x[b], xs[b], i)
                prev_x[b] = xs[b]
        for b, k in enumerate(idx[:min(batch_size, n - start)]):
            n_total = max(world.particle_count(b), 1)
            v0 = containers[k].liquid_area(fills[k])
            m = len(curves[k])
            records.append(PourRecord(containers[k], float(fills[k]), float(viscosity),
                                      np.asarray(curves[k], np.float64),
                                      counts[b][:m] * (v0 / n_total), speed[b][:m - 1],
                                      crossed[b][:m - 1], mean_vel[b][:m - 1],
                                      _flight_means(flight[b][:m - 1])))
        if progress is not None:
            progress(len(records), n)
    return records


def cached_pours(path, containers: Sequence[Container], fills: Sequence[float], viscosity: float,
                 curves: Sequence[np.ndarray], **simulate) -> list[PourRecord]:
    """:func:`simulate_pours`, or its records read from ``path`` (an ``.npz`` written here, atomically,
    after simulating): identification scripts rerun in seconds once their pours exist."""
    path = Path(path)
    keys = ("lean", "volume", "speed", "crossed", "velocity", "flight")
    if path.exists():
        z = np.load(path)
        return [PourRecord(c, f, viscosity, *(z[k][i] for k in keys))
                for i, (c, f) in enumerate(zip(containers, fills))]
    recs = simulate_pours(containers, fills, viscosity, curves, **simulate)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".npz")
    with os.fdopen(fd, "wb") as f:
        np.savez(f, **{k: np.stack([getattr(r, k) for r in recs]) for k in keys})
    os.replace(tmp, path)
    return recs


def _follow(flight: np.ndarray, exit_step: np.ndarray, levels: np.ndarray, left: np.ndarray,
            lip: np.ndarray, theta: float, x0: np.ndarray, x1: np.ndarray, i: int) -> None:
    """Accumulate in ``flight`` (steps, drops, [sum x, sum t, count]) where the particles that
    left S read their altitudes ``levels`` (the pouring lip's altitude at their exit step less
    FLIGHT_DROPS) while moving from ``x0`` to ``x1`` in step i: world x, and the time since the
    end of their exit step (s)."""
    new = left & (exit_step < 0)
    if new.any():
        exit_step[new] = i
        lip_y = PIVOT[1] + math.sin(theta) * lip[0] + math.cos(theta) * lip[1]
        lv = lip_y - np.asarray(FLIGHT_DROPS)
        levels[new] = np.where(lv > FLOOR_MARGIN, lv, -np.inf)    # -inf: never read
    live = np.flatnonzero((exit_step >= 0) & (exit_step >= i - FLIGHT_STEPS))
    if len(live) == 0:
        return
    y0, y1 = x0[live, 1:2], x1[live, 1:2]
    lv = levels[live]
    cross = (y0 >= lv) & (y1 < lv)
    if not cross.any():
        return
    f = np.clip((y0 - lv) / np.maximum(y0 - y1, 1e-12), 0.0, 1.0)
    xc = x0[live, 0:1] + f * (x1[live, 0:1] - x0[live, 0:1])
    tc = (i - exit_step[live, None] - 1 + f) * DT
    p, j = np.nonzero(cross)
    np.add.at(flight, (exit_step[live[p]], j, 0), xc[p, j])
    np.add.at(flight, (exit_step[live[p]], j, 1), tc[p, j])
    np.add.at(flight, (exit_step[live[p]], j, 2), 1.0)
    levels[live[p], j] = -np.inf                                  # read once


def _flight_means(flight: np.ndarray) -> np.ndarray:
    """(steps, drops, [mean x (m), mean t (s), count]) from the sums of :func:`_follow`."""
    out = flight.copy()
    n = np.maximum(out[..., 2], 1.0)
    out[..., 0] /= n
    out[..., 1] /= n
    return out


def _inside(shape: Container, x: np.ndarray, theta: float) -> np.ndarray:
    """Particles (world) inside the container's interior when posed at PIVOT with angle theta."""
    c, s = math.cos(theta), math.sin(theta)
    d = x - PIVOT
    local = np.column_stack((c * d[:, 0] + s * d[:, 1], -s * d[:, 0] + c * d[:, 1]))
    return points_in_polygon(shape.interior, local)


def regression_rows(rec: PourRecord, tables: OutflowTables | None = None,
                    terms: tuple[str, ...] = TERMS):
    """(phi (m, terms), u (m,), dt A (m,), volume lost (m,)) for the steps with A > 0. Step i's
    regressors use the lean at its end, the volume at its start and u of step i - 1, as the
    model does."""
    t = tables if tables is not None else outflow_tables(rec.shape)
    phi, u, da, lost = [], [], [], []
    for i in range(len(rec.speed)):
        lean = rec.lean[i + 1]
        h, a, _, _ = t.lookup(lean, rec.volume[i])
        if a <= 0.0:
            continue
        drop, _, _ = t.wall(lean)
        u_prev = rec.speed[i - 1] if i > 0 else 0.0
        phi.append(regressors(h, drop, u_prev, (rec.lean[i + 1] - rec.lean[i]) / DT, terms))
        u.append(rec.speed[i])
        da.append(DT * a)
        lost.append(rec.volume[i] - rec.volume[i + 1])
    return np.array(phi).reshape(-1, len(terms)), np.array(u), np.array(da), np.array(lost)


def fit(records: Sequence[PourRecord], terms: tuple[str, ...] = TERMS,
        drag_section: float = 0.0) -> OutflowFit:
    """Least-squares coefficients (and discharge coefficient) over the records' steps; the jet
    drag for sections up to ``drag_section`` (m; identified by ``scripts/sysid_jet_drag.py``),
    falling as 1 / A beyond (:func:`taigym.models.simplified.jet_drag`)."""
    rows = [regression_rows(r, terms=terms) for r in records]
    phi = np.concatenate([r[0] for r in rows])
    u = np.concatenate([r[1] for r in rows])
    da = np.concatenate([r[2] for r in rows])
    lost = np.concatenate([r[3] for r in rows])
    if len(u) < len(terms):
        raise ValueError(f"only {len(u)} samples with an outflow section; need >= {len(terms)}")
    w, *_ = np.linalg.lstsq(phi, u, rcond=None)
    q = da * u
    k = float(q @ lost / max(q @ q, 1e-30))
    r0 = records[0]
    a, b, lam = jet_path(records, w, terms, drag_section)
    return OutflowFit(r0.shape.shape, r0.viscosity, tuple(terms), tuple(float(x) for x in w), k,
                      (a, b), lam, drag_section)


def jet_path(records: Sequence[PourRecord], weights: Sequence[float],
             terms: tuple[str, ...] = TERMS, drag_section: float = 0.0) -> tuple[float, float, float]:
    """(a, b, lambda): the jet's direction offset a + b * lean (rad, counter-clockwise from the
    model's direction d) and the relaxation rate of its horizontal speed (1/s) that put the
    model's outflow path, from the section's centroid with the model's u (``weights``, one step
    ahead from the recorded state), where the simulated particles of each step crossed the
    levels FLIGHT_DROPS below the lip: nonlinear least squares weighted by the particles read.
    lambda is the thin jet's: sections A wider than ``drag_section`` (m) get lambda A_ref / A.
    (0, 0, 0) without streamline data."""
    from scipy.optimize import least_squares

    rows = []
    for rec in records:
        if rec.flight is None:
            continue
        t = outflow_tables(rec.shape)
        liquid = SimplifiedLiquid(rec.shape, rec.volume[0], None, t)
        lip = rec.shape.lips[1]
        for i in np.flatnonzero(rec.flight[:, :, 2].sum(axis=1) > 0):
            liquid.volume = rec.volume[i]
            th0, th1 = -rec.lean[i], -rec.lean[i + 1]
            h, a, cx, cy, drop, dx, dy = liquid.lookup(th1)
            if a <= 0.0:
                continue
            u_prev = rec.speed[i - 1] if i > 0 else 0.0
            u = max(0.0, float(np.dot(weights, regressors(h, drop, u_prev, (th1 - th0) / DT, terms))))
            c, s = math.cos(th1), math.sin(th1)
            rx, ry = c * cx - s * cy, s * cx + c * cy
            om = (th1 - th0) / DT
            lip_y = PIVOT[1] + s * lip[0] + c * lip[1]
            for j, d in enumerate(FLIGHT_DROPS):
                x, _, n = rec.flight[i, j]
                if n > 0:
                    rows.append((PIVOT[0] + rx, PIVOT[1] + ry, -om * ry, om * rx, u, dx, dy,
                                 rec.lean[i + 1], lip_y - d, x, n, a))
    if len(rows) < 3:
        return 0.0, 0.0, 0.0
    x0, y0, rvx, rvy, u, dx, dy, lean, level, x_sim, n, sec = np.array(rows).T
    sw = np.sqrt(n)
    scale = np.minimum(1.0, drag_section / sec) if drag_section > 0.0 else 1.0

    def residual(p):
        off = p[0] + p[1] * lean
        co, so = np.cos(off), np.sin(off)
        vx, vy = rvx + u * (co * dx - so * dy), rvy + u * (so * dx + co * dy)
        tau = (vy + np.sqrt(np.maximum(vy * vy + 2.0 * GRAVITY * (y0 - level), 0.0))) / GRAVITY
        return (path_x(x0, vx, tau, p[2] * scale, rvx) - x_sim) * sw

    best = least_squares(residual, [0.0, 0.0, 10.0], bounds=([-np.pi, -np.pi, 0.0], [np.pi, np.pi, 500.0]))
    a, b, lam = best.x
    return float(a), float(b), float(lam)


def flight_samples(records: Sequence[PourRecord], model: OutflowFit, max_head: float = math.inf):
    """(the model's Outflow, level (m), simulated mean x (m), particles) for each step and level
    FLIGHT_DROPS below the lip where the step's particles were read: the model one step ahead
    from each recorded state, as :func:`jet_path` fits it; over the steps whose head h is at most
    ``max_head`` (m)."""
    out_rows = []
    for rec in records:
        if rec.flight is None:
            continue
        liquid = SimplifiedLiquid(rec.shape, rec.volume[0], model)
        lip = rec.shape.lips[1]
        for i in np.flatnonzero(rec.flight[:, :, 2].sum(axis=1) > 0):
            liquid.volume = rec.volume[i]
            liquid.speed = rec.speed[i - 1] if i > 0 else 0.0
            th0, th1 = -rec.lean[i], -rec.lean[i + 1]
            if liquid.head(th1) > max_head:
                continue
            out = liquid.step((PIVOT[0], PIVOT[1], th1), (0.0, 0.0, (th1 - th0) / DT), th0, DT)
            if out.volume <= 0.0:
                continue
            lip_y = PIVOT[1] + math.sin(th1) * lip[0] + math.cos(th1) * lip[1]
            for j, d in enumerate(FLIGHT_DROPS):
                x, _, n = rec.flight[i, j]
                if n > 0:
                    out_rows.append((out, lip_y - d, float(x), float(n)))
    return out_rows


def streamline_errors(records: Sequence[PourRecord], model: OutflowFit, max_head: float = math.inf,
                      min_section: float = 0.0) -> tuple[float, float]:
    """(RMS, mean) horizontal error (m) of the model's outflow path where the simulated
    particles crossed the levels FLIGHT_DROPS below the lip, weighted by particles
    (:func:`flight_samples`), over the steps whose outflow section is at least ``min_section`` (m)."""
    err, wt = [], []
    for out, level, x, n in flight_samples(records, model, max_head):
        if out.section < min_section:
            continue
        hit = landing(out.start, out.velocity, level, jet_drag(model, out.section), out.carried[0])
        if hit is not None:
            err.append(hit[0] - x)
            wt.append(n)
    if not err:
        return 0.0, 0.0
    e, w = np.array(err), np.array(wt)
    return float(np.sqrt(np.average(e * e, weights=w))), float(np.average(e, weights=w))


def predict(rec: PourRecord, model: OutflowFit) -> tuple[np.ndarray, np.ndarray]:
    """Closed-loop prediction along the record's tilt curve from its initial volume alone:
    (u (n,), V (n + 1,)) - Pan & Manocha 2016 Fig. 8."""
    liquid = SimplifiedLiquid(rec.shape, rec.volume[0], model)
    u, vol = np.zeros(len(rec.speed)), np.zeros(len(rec.volume))
    vol[0] = liquid.volume
    for i in range(len(rec.speed)):
        th0, th1 = -rec.lean[i], -rec.lean[i + 1]
        liquid.step((PIVOT[0], PIVOT[1], th1), (0.0, 0.0, (th1 - th0) / DT), th0, DT)
        u[i], vol[i + 1] = liquid.speed, liquid.volume
    return u, vol


def prediction_errors(rec: PourRecord, model: OutflowFit) -> dict[str, float]:
    """Errors of the closed-loop prediction: ``volume`` = RMS of V(t) error / V0; ``speed`` =
    mean |u error| / mean u over the steps where liquid left (in the simulation or the model)."""
    u_hat, v_hat = predict(rec, model)
    v0 = max(rec.volume[0], 1e-12)
    active = (rec.crossed > 0) | (u_hat > 0)
    mean_u = rec.speed[active].mean() if active.any() else 0.0
    speed_err = (np.abs(u_hat - rec.speed)[active].mean() / mean_u) if mean_u > 0 else 0.0
    return {"volume": float(np.sqrt(np.mean((v_hat - rec.volume) ** 2)) / v0),
            "speed": float(speed_err)}
