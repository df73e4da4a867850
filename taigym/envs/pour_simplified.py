"""The liquid of ``taigym/Pour-v0`` with ``fidelity="simplified"``: Pan & Manocha 2016's reduced model.

Instead of particles, the liquid in S is its volume V and outflow speed u
(:class:`taigym.models.simplified.SimplifiedLiquid`). What leaves S in a step is a packet that
follows the outflow path (Pan & Manocha 2016's parabola with the jet's identified horizontal drag); it
lands where that path comes down through T's rim height:
inside T's opening it counts as in T (earning Pan & Manocha 2017's R_p for its distance from the opening
centre), anywhere else, or if it hits an obstacle on the way, as spilled. Until it lands it is in
flight. The free surface in S is flat at the level that holds V (the lookup tables), which gives
the heightfield and lip observations. Liquid in T stays there (Pan & Manocha 2016 ignore T's dynamics).
"""

from __future__ import annotations

import functools
import math

import numpy as np

from taigym.models.simplified import SimplifiedLiquid, fit_for, jet_drag, landing, path_x
from taigym.sim.constants import CONTROL_DT, GRAVITY

from . import render
from .pour_batch import Member, PourBatch
from .pour_tasks import DOMAIN

_FLIGHT_SAMPLES = 8             # points per outflow path checked against the obstacles


def _columns(poly: np.ndarray, xs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Lowest and highest y (m) of the polygon's boundary on each vertical line x = xs (nan if
    the line misses it)."""
    a, b = poly, np.roll(poly, -1, axis=0)
    x = xs[:, None]
    cross = ((a[:, 0] <= x) & (x <= b[:, 0])) | ((b[:, 0] <= x) & (x <= a[:, 0]))
    dx = np.where(b[:, 0] != a[:, 0], b[:, 0] - a[:, 0], 1.0)
    t = np.clip((x - a[:, 0]) / dx, 0.0, 1.0)
    y = a[:, 1] + t * (b[:, 1] - a[:, 1])
    lo = np.where(cross, y, np.inf).min(axis=1)
    hi = np.where(cross, y, -np.inf).max(axis=1)
    bad = ~np.isfinite(lo)
    lo[bad], hi[bad] = np.nan, np.nan
    return lo, hi


@functools.lru_cache(maxsize=256)
def column_lines(source, obs_mode: str, bins: int, dx: float) -> tuple[tuple, float, bool]:
    """S-frame vertical lines where the heightfield (bin centres) or the lip heights (three lines
    in a band beside each lip) are read, as (x, lo, hi): the line and the interior's span on
    it (m); the heights' scale 1 / S's height (1/m) and whether they need the clip to [0, 1.5]
    (cached per container, which is immutable)."""
    poly = np.asarray(source.interior)
    lo, hi = poly[:, 0].min(), poly[:, 0].max()
    if obs_mode == "features":
        xs = lo + (np.arange(bins) + 0.5) * (hi - lo) / bins
    elif obs_mode == "lip":
        band = max(0.2 * source.width, 1.5 * 0.5 * dx)
        (lx, _), (rx, _) = source.lips
        xs = np.concatenate([lx + band * np.array([0.0, 0.5, 1.0]),
                             rx - band * np.array([0.0, 0.5, 1.0])])
    else:
        return (), 1.0 / source.height, True
    # a hair inside, so that the lines at the lips cut the side walls
    xs = np.clip(xs, lo + 1e-9, hi - 1e-9)
    y_lo, y_hi = _columns(poly, xs)
    scale = 1.0 / source.height
    # S's interior lies above its inner bottom and below its height (every built-in shape): the
    # heights need no clip to [0, 1.5]
    clip = not (y_lo.min() >= 0.0 and y_hi.max() * scale <= 1.5)
    return tuple(zip(xs.tolist(), y_lo.tolist(), y_hi.tolist())), scale, clip


class SimplifiedMember:
    """The reduced liquid state of one scene and its accounting (fractions of the initial
    volume V0)."""

    def __init__(self, task, source, target, obstacles: tuple = (), v0: float | None = None,
                 tables=None):
        """``v0``: the liquid's area at the task's fill (m^2) and ``tables`` S's lookup tables,
        if known (else computed or read from the cache)."""
        self.task, self.source, self.target = task, source, target
        self.v0 = source.liquid_area(task.fill) if v0 is None else v0
        # the liquid starts at rest, or moving with S (Pan & Manocha 2017's TRANSFER+FOLLOW)
        follow = task.liquid_velocity == "follow"
        self.liquid = SimplifiedLiquid(source, self.v0, fit_for(task.source_container, task.viscosity),
                                       tables, velocity=tuple(task.source_velocity) if follow else (0.0, 0.0))
        self.obstacles = tuple(tuple(map(float, o)) for o in obstacles)
        self.lips = tuple(tuple(float(v) for v in lip) for lip in source.lips)   # S frame, m
        self.t_oc = tuple(float(v) for v in target.opening_centre)
        self.t_half = 0.5 * target.width
        # [land_time, fraction, in_target, R_p, start, velocity, emit_time, carried v_x, drag 1/s]
        self.packets: list[list] = []
        self.in_target = self.spilled = 0.0
        self.last = None                   # the last step's Outflow

    # ------------------------------------------------------------------ dynamics
    def step(self, pose, velocity, theta_prev: float, t_end: float, dt: float, t_pose) -> float:
        """Advance the liquid by one control step that ends at ``t_end`` with S at ``pose`` and
        T at ``t_pose``; returns the R_p earned (fraction-weighted) by packets landing in T
        during the step."""
        out = self.liquid.step(pose, velocity, theta_prev, dt)
        self.last = out
        if out.volume > 0.0:
            self._emit(out, t_end, float(t_pose[1]))
        earned = 0.0
        if self.packets:
            keep = []
            for p in self.packets:
                if p[0] <= t_end + 1e-12:
                    if p[2]:
                        self.in_target += p[1]
                        earned += p[3] * p[1]
                    else:
                        self.spilled += p[1]
                else:
                    keep.append(p)
            self.packets = keep
        return earned

    def _emit(self, out, t_emit: float, t_y: float) -> None:
        task = self.task
        frac = out.volume / self.v0
        rim = t_y + self.t_oc[1]
        drag = jet_drag(self.liquid.fit, out.section)     # a thick surge is slowed less
        carried = out.carried[0]
        hit = landing(out.start, out.velocity, rim, drag, carried)
        in_t, rp = False, 0.0
        if hit is None:                                   # never comes down to T's rim: floor
            hit_floor = landing(out.start, out.velocity, 0.0, drag, carried)
            tau = hit_floor[1] if hit_floor is not None else 0.0
        else:
            x_land, tau = hit
            tx = task.target_state_at(t_emit + tau)[0][0] + self.t_oc[0]
            dist = abs(x_land - tx)
            in_t = dist < self.t_half
            rp = max(0.0, 1.0 - dist / self.t_half)
        if in_t and self.obstacles and self._blocked(out.start, out.velocity, carried, tau, drag):
            in_t, rp = False, 0.0
        self.packets.append([t_emit + tau, frac, in_t, rp, out.start, out.velocity, t_emit, carried, drag])

    def _blocked(self, start, velocity, carried: float, tau: float, drag: float) -> bool:
        """Does the outflow path (jet drag ``drag``, 1/s) hit an obstacle box within its flight
        time ``tau``?"""
        ts = np.linspace(0.0, tau, _FLIGHT_SAMPLES)
        px = path_x(start[0], velocity[0], ts, drag, carried)
        py = start[1] + velocity[1] * ts - 0.5 * GRAVITY * ts * ts
        for cx, cy, w, h in self.obstacles:
            if np.any((np.abs(px - cx) < 0.5 * w) & (np.abs(py - cy) < 0.5 * h)):
                return True
        return False

    # ------------------------------------------------------------------ read-outs
    @property
    def in_source(self) -> float:
        return self.liquid.volume / self.v0

    @property
    def in_flight(self) -> float:
        return max(0.0, 1.0 - self.in_source - self.in_target - self.spilled)

    def level(self, pose) -> float:
        """World height (m) of S's free surface: the pouring lip's height plus the head."""
        x, y, th = pose
        lip = self.lips[1] if th <= 0.0 else self.lips[0]
        c, s = math.cos(th), math.sin(th)
        return y + s * lip[0] + c * lip[1] + self.liquid.head(th)

    def column_heights(self, pose, columns: tuple, scale: float, clip: bool = True) -> list[float]:
        """Height of the top of the liquid on S-frame vertical lines ``columns`` = [(x, lo, hi)]
        (the line x whose interior spans [lo, hi], m), times ``scale`` and clipped to [0, 1.5];
        0 where there is no liquid. ``clip=False`` skips the clip, for spans with 0 <= lo and
        hi * scale <= 1.5 (the liquid's top lies in [lo, hi]: the clip would change nothing).
        A loop in Python floats: on the 16 lines of the heightfield it takes a third of the time
        of the same arithmetic in NumPy (whose per-call cost dominates at that size)."""
        if self.liquid.volume <= 0.0:
            return [0.0] * len(columns)
        x, y, th = pose = tuple(map(float, pose))       # Python floats: NumPy scalars are slower
        level = self.level(pose)
        c, s = math.cos(th), math.sin(th)
        a = level - y                                   # liquid where c * y_local <= a - s * x
        out = []
        for xc, lo, hi in columns:
            rhs = a - s * xc
            if c > 1e-9:
                top = rhs / c
                if top > hi:                            # (a nan stays nan, as np.minimum's)
                    top = hi
            else:                                       # upside down: liquid from the top down
                top = hi if c * hi <= rhs else -math.inf
            if top >= lo:
                v = top * scale
                out.append(min(max(v, 0.0), 1.5) if clip else v)
            else:
                out.append(0.0)
        return out

    def render_points(self, pose, t_pose, time: float, spacing: float):
        """Points standing for the liquid (world, m) and their velocities, for drawing
        (:func:`liquid_points`)."""
        packets = [(start, v, t0, land, carried, drag)
                   for land, _, _, _, start, v, t0, carried, drag in self.packets]
        return liquid_points(self.source, self.target, self.liquid.volume, self.level(pose),
                             self.in_target * self.v0, packets, pose, t_pose, time, spacing)


def liquid_points(source, target, volume: float, level: float, area_in_target: float,
                  packets, pose, t_pose, time: float, spacing: float):
    """Points standing for the liquid (world, m) and their velocities, for drawing: a lattice in
    S (at ``pose``) below the free surface ``level`` (world y, m) if S holds ``volume`` > 0, in T
    up to the level that ``area_in_target`` (m^2) fills, and each in-flight packet's position
    on its path; ``packets`` = [(start, velocity, emit time, land time, carried v_x, drag)]."""
    pts, vel = [], []
    if volume > 0:
        loc = source.fill_points(1.0, spacing)
        x, y, th = pose
        c, s = math.cos(th), math.sin(th)
        w = np.column_stack((x + c * loc[:, 0] - s * loc[:, 1], y + s * loc[:, 0] + c * loc[:, 1]))
        pts.append(w[w[:, 1] <= level])
    if area_in_target > 0:
        area = min(area_in_target, target.interior_area)
        lvl = target.free_surface_level(area, 0.0)
        pts.append(target.fill_points(min(max(lvl / target.height, 1e-6), 1.0), spacing)
                   + np.asarray(t_pose[:2]))
    vel.append(np.zeros((sum(len(p) for p in pts), 2)))
    for start, v, t0, land, carried, drag in packets:
        tau = time - t0
        if 0.0 <= tau <= land - t0:
            for d in np.linspace(0.0, min(0.05, tau), 3):   # a short streak per packet
                tt = tau - d
                pts.append(np.array([[path_x(start[0], v[0], tt, drag, carried),
                                      start[1] + v[1] * tt - 0.5 * GRAVITY * tt * tt]]))
                vel.append(np.array([[carried + (v[0] - carried) * math.exp(-drag * tt),
                                      v[1] - GRAVITY * tt]]))
    if not pts:
        return np.zeros((0, 2)), np.zeros((0, 2))
    return np.concatenate(pts), np.concatenate(vel)


# ---------------------------------------------------------------------- the batch

class SimplifiedPourBatch(PourBatch):
    """``PourBatch`` with the reduced liquid: same moves, clipping, observations, rewards and
    info; no solver (``world`` stays None)."""

    def _ensure_world(self, task) -> None:
        return None

    def release(self) -> None:
        for m in self.members:
            m.task = None

    def reset_member(self, b: int, task, jitter_seed: int, fresh: bool = False) -> None:
        geo, _, obst = self._prepare(task, particles=False, fresh=fresh)
        m = self._init_member(b, task, geo, obst)
        m.liq = SimplifiedMember(task, geo.source, geo.target, task.obstacles, geo.fill_area,
                                 geo.tables)
        m.n = 0
        m.x = np.zeros((0, 2))
        m.v = np.zeros((0, 2))
        self._prepare_columns(m)
        self._finish_reset(b, self._liquid_fractions(m), self._frame(m, None))

    def _prepare_columns(self, m: Member) -> None:
        cfg = self.cfg
        m.columns, m.col_scale, m.col_clip = column_lines(m.source, cfg.obs_mode,
                                                          cfg.heightfield_bins, cfg.dx)

    def _liquid_fractions(self, m: Member) -> dict:
        q = m.liq
        in_s, in_t, spilled = q.in_source, q.in_target, q.spilled
        # in_flight as SimplifiedMember.in_flight, without reading in_source twice
        return {"in": {0: in_s, 1: in_t}, "spilled": spilled,
                "in_flight": max(0.0, 1.0 - in_s - in_t - spilled)}

    def _frame(self, m: Member, loc) -> list | np.ndarray:
        if self.cfg.obs_mode not in ("features", "lip"):
            return np.zeros(0)
        y = m.liq.column_heights(m.s_pose.tolist(), m.columns, m.col_scale, m.col_clip)
        if self.cfg.obs_mode == "features":
            return y
        return [max(y[:3]), max(y[3:])]

    def step(self, actions: np.ndarray, active: np.ndarray | None) -> None:
        frames = self.cfg.obs_mode in ("features", "lip")
        for b, a, s_next, s_vel, t_next, t_vel, clipped, pen in self._moves(actions, active):
            m = self.members[b]
            theta_prev = m.s_pose[2].item()
            self._advance_clock(m, s_next, s_vel, t_next, t_vel)
            earned = m.liq.step(s_next.tolist(), s_vel.tolist(), theta_prev, m.time, CONTROL_DT,
                                t_next)
            frame = self._frame(m, None) if frames else None
            self._finish_step(b, a, self._liquid_fractions(m), earned, frame, clipped, pen)

    def velocities(self, b: int) -> np.ndarray:
        return np.zeros((0, 2))

    def outflow(self, b: int):
        out = self.members[b].liq.last
        if out is None or out.volume <= 0.0:
            return None
        return np.array(out.start), np.array(out.velocity)

    def render(self, b: int, size_hw, parabola: bool = True) -> np.ndarray:
        m = self.members[b]
        spacing = 0.5 * self.cfg.dx
        x, v = m.liq.render_points(m.s_pose, m.t_pose, m.time, spacing)
        bodies = [(m.target, m.t_pose, render.TARGET_COLOUR),
                  (m.source, m.s_pose, render.SOURCE_COLOUR)]
        lines = self._parabola(b) if parabola else []
        return render.render_scene(size_hw, DOMAIN, bodies, x, v, particle_size=2.4 * spacing,
                                    polylines=lines, boxes=m.task.obstacles)
