"""The simplified ``taigym/Pour-v0`` for a whole batch in array operations (the vector env's engine).

:class:`SimplifiedArrayBatch` steps B scenes of Pan & Manocha 2016's reduced liquid model
(``pour_simplified``) at once: the members' poses, clocks, liquid states (``taigym.models.
simplified.SimplifiedLiquidBatch``), in-flight packets, rewards, observations and infos are arrays
over the batch, and one step is a fixed number of NumPy calls whatever B is. It gives the
transitions of ``SimplifiedPourBatch`` (the single env's engine, the reference) member for
member, up to the last bit where NumPy's exp, tanh, atan2 and hypot round differently from
libm's (``tests/test_pour_simplified.py`` checks it).

Per-member Python is left only where it is rare or per episode: resets (a task's geometry and
lookup tables), moves near an obstacle (the reference's swept check), packets blocked by an
obstacle, and rendering.
"""

from __future__ import annotations

from collections import OrderedDict

import numpy as np

from taigym.models.simplified import SimplifiedLiquidBatch, fit_for
from taigym.sim.constants import CONTROL_DT, GRAVITY

from . import render
from .pour_batch import PENETRATION_EPS, Member
from .pour_config import (ACTION_SCALE, EMPTY_FRACTION, HISTORY, N_STATE, SETTLED_FRACTION,
                          SUCCESS_IN_TARGET, SUCCESS_MAX_SPILLED, TILT_LIMIT)
from .pour_geometry import pivot_on_lip
from .pour_reward import POTENTIALS, REWARD_TERMS, potentials
from .pour_simplified import SimplifiedPourBatch, column_lines, liquid_points
from .pour_tasks import DOMAIN, MAX_OBSTACLES

# Packet slots per member, used round-robin by step count: a packet flies at most ~1.1 s (from
# the top of the 0.5 m scene at the fastest outflow, < 5 m/s), 22 steps, so a slot is free again
# when its turn comes.
PACKET_SLOTS = 32
# A member's start, by task, for resets to tasks seen before (a fixed split's): ~0.2 MB each (S's
# lookup tables), so at most START_CACHE_SIZE (the train and eval splits' 1100 tasks fit).
START_CACHE_SIZE = 1200
_STARTS: OrderedDict = OrderedDict()
# the per-member arrays a start sets, by name (the rest are zeroed or derived)
_START_ROWS = ("s_pose", "s_vel", "t_pose", "t_vel", "prev_action", "s_box", "t_box", "s_bound", "s_radius",
               "s_oc", "t_oc", "t_half", "s_lips", "t_start", "t_speed", "t_bounds", "v0", "has_obstacles",
               "n_obstacles", "obstacles")
# the masks of the move's components tried, in order, when the whole move is refused
# (PourBatch._clip_move's)
_MASKS = np.array([(1, 0, 1), (1, 1, 0), (0, 1, 1), (1, 0, 0), (0, 0, 1), (0, 1, 0)], np.float64)


def _reflect(p0, v, t, lo, hi):
    """``pour_tasks.reflect`` on arrays: position and velocity at time t of points bouncing
    elastically between lo and hi."""
    span = hi - lo
    still = (span <= 0.0) | (v == 0.0)
    s = np.mod(p0 - lo + v * t, np.where(still, 1.0, 2.0 * span))
    up = s <= span
    pos = np.where(still, np.minimum(np.maximum(p0, lo), hi), np.where(up, lo + s, lo + 2.0 * span - s))
    vel = np.where(still, np.where(span <= 0.0, 0.0, v), np.where(up, v, -v))
    return pos, vel


def _pad_rows(a: np.ndarray, n: int) -> np.ndarray:
    """``a`` (B, k, ...) widened to (B, n, ...) by repeating each row's last entry (which changes
    no minimum or maximum over the row)."""
    if a.shape[1] >= n:
        return a
    return np.concatenate([a, np.repeat(a[:, -1:], n - a.shape[1], axis=1)], axis=1)


def _corners(source, solid_pts: np.ndarray) -> np.ndarray:
    """The points of ``solid_pts`` (S's wall chain densified by ``pour_geometry.densify`` at 3/4
    of the wall radius, as ``TaskGeometry`` does) that end the chain's straight runs."""
    chain = np.asarray(source.walls, np.float64)
    step = 0.75 * source.radius
    runs = [max(int(np.ceil(np.linalg.norm(b - a) / step)), 1) for a, b in zip(chain[:-1], chain[1:])]
    ends = np.concatenate([[0], np.cumsum(runs)])
    if ends[-1] != len(solid_pts) - 1:
        raise RuntimeError("solid_pts is not S's wall chain densified at 3/4 of its wall radius")
    return solid_pts[ends]


class SimplifiedArrayBatch(SimplifiedPourBatch):
    """B scenes of the simplified Pour-v0 in array operations (module docstring). ``members``
    keep each scene's task and geometry (and the reference's state for moves near obstacles)."""

    def __init__(self, cfg, batch_size: int = 1):
        super().__init__(cfg, batch_size)
        if cfg.obs_mode not in ("features", "lip", "rgb"):
            raise ValueError(f"obs_mode {cfg.obs_mode!r} has no simplified fidelity")
        B = self.B
        self.liquid = SimplifiedLiquidBatch(B)
        z3 = lambda: np.zeros((B, 3))  # noqa: E731
        self.s_pose, self.s_vel, self.t_pose, self.t_vel = z3(), z3(), z3(), z3()
        self.time = np.zeros(B)
        self.steps = np.zeros(B, np.int64)
        self.prev_action = z3()
        # per-task constants: solids' bounding boxes (own frames), S's bounding radius and wall
        # radius, opening centres (own frames), half T's opening, S's lips, T's trajectory
        self.s_box, self.t_box = np.zeros((B, 4)), np.zeros((B, 4))
        self.s_bound, self.s_radius = np.zeros(B), np.zeros(B)
        self.s_oc, self.t_oc, self.t_half = np.zeros((B, 2)), np.zeros((B, 2)), np.ones(B)
        self.s_lips = np.zeros((B, 2, 2))
        self.t_start, self.t_speed = np.zeros((B, 2)), np.zeros((B, 2))
        self.t_bounds = np.zeros((B, 4))
        self.v0 = np.ones(B)
        self.has_obstacles = np.zeros(B, bool)
        self.n_obstacles = np.zeros(B, np.int64)
        self.obstacles = np.zeros((B, MAX_OBSTACLES, 4))   # (x, y, half width, half height), m
        # collision geometry, rows padded by repeating their last entry: S's sampled solid (S
        # frame), T's wall segments (start, direction, 1 / length^2), T's wall radius
        self.solid = np.zeros((B, 1, 2))
        self.corners = np.zeros((B, 1, 2))
        self.t_a, self.t_ab, self.t_inv = np.zeros((B, 1, 2)), np.zeros((B, 1, 2)), np.zeros((B, 1))
        self.t_radius = np.zeros(B)
        # heightfield / lip lines: x, the interior's span on it (S frame, m), scale, clip
        n_lines = {"features": cfg.heightfield_bins, "lip": 6}.get(cfg.obs_mode, 0)
        self.lines = np.zeros((B, n_lines, 3))
        self.line_scale, self.line_clip = np.ones(B), np.zeros(B, bool)
        # packets in flight, PACKET_SLOTS per member: land time (inf: free slot), fraction of the
        # liquid, lands in T, R_p earned, start, velocity, emit time, carried v_x, drag
        K = PACKET_SLOTS
        self.p_land = np.full((B, K), np.inf)
        self.p_frac, self.p_rp = np.zeros((B, K)), np.zeros((B, K))
        self.p_in = np.zeros((B, K), bool)
        self.p_start, self.p_vel = np.zeros((B, K, 2)), np.zeros((B, K, 2))
        self.p_t0, self.p_carried, self.p_drag = np.zeros((B, K)), np.zeros((B, K)), np.zeros((B, K))
        self.in_target, self.spilled = np.zeros(B), np.zeros(B)
        self.spilled_before = np.zeros(B)              # spilled at the step before (the spill term)
        self.last_out = np.zeros(B)                    # volume that left S in the last step (m^2)
        self.last_start, self.last_velocity = np.zeros((B, 2)), np.zeros((B, 2))
        # observation: state and history in one buffer (history newest first), per-task part set
        # at reset
        self.frame_size = self._frame_size()
        self.obs = np.zeros((B, N_STATE + HISTORY * self.frame_size))
        # the last step's outcome
        self.terms = {name: np.zeros(B) for name in REWARD_TERMS[cfg.reward_mode]}
        self.phi = np.zeros((B, len(POTENTIALS)))
        self.reward = np.zeros(B)
        self.terminated, self.truncated = np.zeros(B, bool), np.zeros(B, bool)
        self.clipped, self.collision = np.zeros(B, bool), np.zeros(B, bool)

    # ------------------------------------------------------------------ reset
    def reset_member(self, b: int, task, jitter_seed: int, fresh: bool = False) -> None:
        """Member b starts ``task``. What the start needs of the task (its geometry, S's lookup
        tables, ...) is kept for the next reset to the same task (a fixed split's) unless the
        task is ``fresh`` (drawn from the continuous distribution: never seen again)."""
        cfg = self.cfg
        key = (task, cfg.wall_thickness, cfg.obs_mode, cfg.heightfield_bins, cfg.max_steps)
        start = None if fresh else _STARTS.get(key)
        if start is None:
            start = self._start(task, fresh)
            if not fresh:
                _STARTS[key] = start
                while len(_STARTS) > START_CACHE_SIZE:
                    _STARTS.popitem(last=False)
        else:
            _STARTS.move_to_end(key)
        m = self.members[b]
        if start["geo"] is not None:            # obstacles: the reference's moves need the member
            self._init_member(b, task, start["geo"], start["obst"])
        m.task, m.source, m.target = task, start["source"], start["target"]
        self.liquid.load(b, start["liquid"])
        for name in _START_ROWS:
            getattr(self, name)[b] = start[name]
        self._set_solids(b, start["solid"], start["corners"], start["t_walls"])
        self.obs[b, :N_STATE] = start["state"]
        if self.frame_size:
            self.lines[b], self.line_scale[b], self.line_clip[b] = (start["lines"], start["line_scale"],
                                                                    start["line_clip"])
        self.time[b], self.steps[b] = 0.0, 0
        self.p_land[b] = np.inf
        self.in_target[b] = self.spilled[b] = self.spilled_before[b] = self.last_out[b] = 0.0
        rows = np.array([b])
        if "hist" not in start:                 # the first frame and potentials, once per start
            start["hist"] = np.tile(self._frames(rows)[0], HISTORY) if self.frame_size else None
            start["phi"] = np.column_stack(self._potentials_of(rows))[0]
        if self.frame_size:
            self.obs[b, N_STATE:] = start["hist"]
        if cfg.reward_mode == "dense":
            self.phi[b] = start["phi"]
        for name in self.terms:
            self.terms[name][b] = 0.0
        self.reward[b] = 0.0
        self.terminated[b] = self.truncated[b] = self.clipped[b] = self.collision[b] = False

    def _start(self, task, fresh: bool) -> dict:
        """What a member starting ``task`` is set to (validated first: a bad task raises before
        anything changes)."""
        geo, _, obst = self._prepare(task, particles=False, fresh=fresh)
        source, target = geo.source, geo.target
        m = self._fill_member(Member(), task, geo, obst)
        follow = task.liquid_velocity == "follow"
        start = {"source": source, "target": target, "obst": obst, "geo": geo if obst else None,
                 "liquid": self.liquid.member_row(
                     source, geo.fill_area, fit_for(task.source_container, task.viscosity), geo.tables,
                     velocity=tuple(task.source_velocity) if follow else (0.0, 0.0)),
                 "s_pose": m.s_pose, "s_vel": m.s_vel, "t_pose": m.t_pose, "t_vel": m.t_vel,
                 "prev_action": m.prev_action, "s_box": m.s_box, "t_box": m.t_box, "s_bound": m.s_bound,
                 "s_radius": source.radius, "s_oc": m.s_oc, "t_oc": m.t_oc, "t_half": 0.5 * target.width,
                 "s_lips": m.s_lips, "t_start": task.target_position, "t_speed": task.target_velocity,
                 "t_bounds": task.target_bounds, "v0": geo.fill_area, "has_obstacles": bool(obst),
                 "n_obstacles": len(obst),
                 "obstacles": np.array(list(obst) + [(0.0,) * 4] * (MAX_OBSTACLES - len(obst))),
                 "solid": geo.solid_pts, "corners": _corners(source, geo.solid_pts), "t_walls": geo.t_walls,
                 "state": geo.state}
        if self.frame_size:
            start["lines"], start["line_scale"], start["line_clip"] = column_lines(
                source, self.cfg.obs_mode, self.cfg.heightfield_bins, self.cfg.dx)
        return start

    def _set_solids(self, b: int, solid_pts: np.ndarray, corners: np.ndarray, t_walls) -> None:
        """Member b's S solid samples and their corners and T's wall segments, widening the
        padded arrays if needed (a row's tail repeats its last entry, which changes no minimum or
        maximum)."""
        n_pts, n_seg, n_cor = len(solid_pts), len(t_walls.a), len(corners)
        if n_pts > self.solid.shape[1]:
            self.solid = _pad_rows(self.solid, n_pts)
        if n_cor > self.corners.shape[1]:
            self.corners = _pad_rows(self.corners, n_cor)
        self.corners[b, :n_cor], self.corners[b, n_cor:] = corners, corners[-1]
        if n_seg > self.t_a.shape[1]:
            self.t_a, self.t_ab = _pad_rows(self.t_a, n_seg), _pad_rows(self.t_ab, n_seg)
            self.t_inv = _pad_rows(self.t_inv, n_seg)
        self.solid[b, :n_pts], self.solid[b, n_pts:] = solid_pts, solid_pts[-1]
        for dst, src in ((self.t_a, t_walls.a), (self.t_ab, t_walls.ab), (self.t_inv, t_walls.inv)):
            dst[b, :n_seg], dst[b, n_seg:] = src, src[-1]
        self.t_radius[b] = t_walls.radius

    # ------------------------------------------------------------------ geometry
    def _near_all(self, idx, x, y, th, tx, ty):
        """``PourBatch._near`` on arrays: (S's solid may touch T's, may cross the scene's edges)."""
        c, s = np.cos(th), np.sin(th)
        x0, y0, x1, y1 = self.s_box[idx].T
        pos_c, pos_s = c >= 0.0, s >= 0.0
        cx, cX = np.where(pos_c, c * x0, c * x1), np.where(pos_c, c * x1, c * x0)
        cy, cY = np.where(pos_c, c * y0, c * y1), np.where(pos_c, c * y1, c * y0)
        sx, sX = np.where(pos_s, s * x0, s * x1), np.where(pos_s, s * x1, s * x0)
        sy, sY = np.where(pos_s, s * y0, s * y1), np.where(pos_s, s * y1, s * y0)
        sx0, sx1, sy0, sy1 = x + (cx - sY), x + (cX - sy), y + (sx + cy), y + (sX + cY)
        a0, b0, a1, b1 = self.t_box[idx].T
        near_t = (sx0 < tx + a1) & (tx + a0 < sx1) & (sy0 < ty + b1) & (ty + b0 < sy1)
        W, H = DOMAIN
        return near_t, (sx0 < 0.0) | (sy0 < 0.0) | (sx1 > W) | (sy1 > H)

    def _penetration_all(self, idx, pose, t_pose):
        """``PourBatch._penetration`` on arrays, for members without obstacles: (into T's solid,
        into the floor or the scene's edges), m. The edges are checked against the sampled
        solid's corners (the ends of its straight runs, where its extremes lie)."""
        n = len(idx)
        x, y, th = pose.T
        near_t, near_edge = self._near_all(idx, x, y, th, t_pose[:, 0], t_pose[:, 1])
        pen_t, pen_e = np.zeros(n), np.zeros(n)
        c, s = np.cos(th), np.sin(th)
        sub = np.flatnonzero(near_edge)
        if len(sub):
            loc, cc, ss = self.corners[idx[sub]], c[sub, None], s[sub, None]
            px = x[sub, None] + (loc[..., 0] * cc - loc[..., 1] * ss)
            py = y[sub, None] + (loc[..., 0] * ss + loc[..., 1] * cc)
            W, H = DOMAIN
            pen_e[sub] = np.maximum(0.0, self.s_radius[idx[sub]] - np.minimum(
                np.minimum(px.min(1), py.min(1)), np.minimum(W - px.max(1), H - py.max(1))))
        sub = np.flatnonzero(near_t)
        if len(sub) == 0:
            return pen_t, pen_e
        # T (never rotated): its wall distance from the points within r of T's solid's box
        ids, r = idx[sub], self.s_radius[idx[sub]]
        loc, cc, ss = self.solid[ids], c[sub, None], s[sub, None]
        qx = x[sub, None] + (loc[..., 0] * cc - loc[..., 1] * ss) - t_pose[sub, 0, None]
        qy = y[sub, None] + (loc[..., 0] * ss + loc[..., 1] * cc) - t_pose[sub, 1, None]
        a0, b0, a1, b1 = (v[:, None] for v in self.t_box[ids].T)
        rr = r[:, None]
        rows, cols = np.nonzero((qx > a0 - rr) & (qx < a1 + rr) & (qy > b0 - rr) & (qy < b1 + rr))
        if len(rows):
            mem = ids[rows]
            apx = qx[rows, cols][:, None] - self.t_a[mem, :, 0]
            apy = qy[rows, cols][:, None] - self.t_a[mem, :, 1]
            abx, aby = self.t_ab[mem, :, 0], self.t_ab[mem, :, 1]
            t = np.minimum(np.maximum((apx * abx + apy * aby) * self.t_inv[mem], 0.0), 1.0)
            dx, dy = apx - t * abx, apy - t * aby
            d2 = np.full(len(sub), np.inf)
            np.minimum.at(d2, rows, (dx * dx + dy * dy).min(1))
            hit = np.isfinite(d2)
            pen_t[sub[hit]] = np.maximum(0.0, r[hit] - (np.sqrt(d2[hit]) - self.t_radius[ids[hit]]))
        return pen_t, pen_e

    def _moves(self, idx, delta, t_next):
        """``PourBatch._clip_move`` for members ``idx`` under displacements ``delta`` (n, 3):
        (S's next poses, clipped, S's penetration into T or an obstacle)."""
        cur = self.s_pose[idx]
        p = cur + delta
        th_raw = p[:, 2].copy()
        p[:, 2] = np.minimum(np.maximum(th_raw, -TILT_LIMIT), TILT_LIMIT)
        clipped = p[:, 2] != th_raw
        pen = np.zeros(len(idx))
        near_t, near_edge = self._near_all(idx, p[:, 0], p[:, 1], p[:, 2], t_next[:, 0], t_next[:, 1])
        slow = near_t | near_edge
        obst = self.has_obstacles[idx]
        if obst.any():                                  # the reference's own margin and sweep
            reach = self.s_bound[idx] + np.abs(delta[:, 0]) + np.abs(delta[:, 1])
            box = self.obstacles[idx]
            qx = np.abs(p[:, 0, None] - box[..., 0]) - box[..., 2]
            qy = np.abs(p[:, 1, None] - box[..., 1]) - box[..., 3]
            dist = np.hypot(np.maximum(qx, 0.0), np.maximum(qy, 0.0)) + np.minimum(np.maximum(qx, qy), 0.0)
            used = np.arange(MAX_OBSTACLES) < self.n_obstacles[idx, None]
            slow |= np.any(used & (dist < reach[:, None]), axis=1)
            for k in np.flatnonzero(slow & obst):
                m = self.members[idx[k]]
                m.s_pose = cur[k].copy()
                p[k], clipped[k], pen[k] = self._clip_move(m, delta[k], t_next[k])
            slow &= ~obst
        rest = np.flatnonzero(slow)
        if len(rest) == 0:
            return p, clipped, pen
        ids, c0, d, tn = idx[rest], cur[rest], delta[rest], t_next[rest]
        pen_t, pen_e = self._penetration_all(ids, p[rest], tn)
        todo = np.flatnonzero((pen_t != 0.0) | (pen_e != 0.0))
        if len(todo) == 0:
            return p, clipped, pen
        # S's penetration now and at the partial moves, all in one evaluation: rows [now, mask 0,
        # ..., mask 5] per member
        n_try = 1 + len(_MASKS)
        steps = np.concatenate([np.zeros((1, 3)), _MASKS])[None] * d[todo, None]
        cand = (c0[todo, None] + steps).reshape(-1, 3)
        cand[:, 2] = np.minimum(np.maximum(cand[:, 2], -TILT_LIMIT), TILT_LIMIT)
        ct, ce = self._penetration_all(np.repeat(ids[todo], n_try), cand,
                                       np.repeat(tn[todo], n_try, axis=0))
        ct, ce = ct.reshape(-1, n_try), ce.reshape(-1, n_try)
        p0_t, p0_e = ct[:, 0], ce[:, 0]
        ok = (pen_t[todo] <= p0_t + PENETRATION_EPS) & (pen_e[todo] <= p0_e)
        # else the first allowed partial move (one that moves at all), else none
        good = (ct[:, 1:] <= p0_t[:, None] + PENETRATION_EPS) & (ce[:, 1:] <= p0_e[:, None]) & \
            np.any(steps[:, 1:] != 0.0, axis=2)
        first = np.argmax(good, axis=1)
        some = good[np.arange(len(todo)), first]
        k = rest[todo]
        cand = cand.reshape(-1, n_try, 3)
        rows = np.arange(len(todo))
        part = np.where(some[:, None], cand[rows, 1 + first], c0[todo])
        p[k] = np.where(ok[:, None], p[k], part)
        clipped[k] = ok | some | np.any(d[todo] != 0.0, axis=1)
        pen[k] = np.where(ok, pen_t[todo], np.where(some, ct[rows, 1 + first], p0_t))
        return p, clipped, pen

    # ------------------------------------------------------------------ step
    def step(self, actions: np.ndarray, active: np.ndarray | None) -> None:
        idx = np.arange(self.B) if active is None else np.flatnonzero(active)
        if len(idx) == 0:
            return
        dt = CONTROL_DT
        a = np.asarray(actions, np.float64)[idx]
        a = np.where(a == a, np.minimum(np.maximum(a, -1.0), 1.0), 0.0)     # nan -> 0
        t_end = self.time[idx] + dt
        tx, tvx = _reflect(self.t_start[idx, 0], self.t_speed[idx, 0], t_end, self.t_bounds[idx, 0],
                           self.t_bounds[idx, 1])
        ty, tvy = _reflect(self.t_start[idx, 1], self.t_speed[idx, 1], t_end, self.t_bounds[idx, 2],
                           self.t_bounds[idx, 3])
        zero = np.zeros(len(idx))
        t_next = np.column_stack((tx, ty, zero))
        delta = a * ACTION_SCALE
        if self.cfg.pivot == "lip":
            lips = self.s_lips[idx].transpose(1, 2, 0)
            delta = np.column_stack(pivot_on_lip(self.s_pose[idx].T, delta.T, lips, TILT_LIMIT))
        s_next, clipped, pen = self._moves(idx, delta, t_next)
        theta_prev = self.s_pose[idx, 2]
        s_vel = (s_next - self.s_pose[idx]) / dt
        self.s_pose[idx], self.s_vel[idx] = s_next, s_vel
        self.t_pose[idx], self.t_vel[idx] = t_next, np.column_stack((tvx, tvy, zero))
        self.time[idx] = t_end
        self.steps[idx] += 1
        out = self.liquid.step(s_next, s_vel, theta_prev, dt, idx)
        self.last_out[idx] = out["volume"]
        self.last_start[idx], self.last_velocity[idx] = out["start"], out["velocity"]
        self._emit(idx, out, t_end, ty)
        earned = self._land(idx, t_end)
        self._finish(idx, a, earned, clipped, pen > 1e-4)

    def _emit(self, idx, out, t_emit, t_y) -> None:
        """``SimplifiedMember._emit`` for the members whose outflow is > 0: a packet that lands
        where its path comes down through T's rim (in T if within its opening, earning R_p), or
        on the floor."""
        k = np.flatnonzero(out["volume"] > 0.0)
        if len(k) == 0:
            return
        ids = idx[k]
        (x0, y0), (vx, vy) = out["start"][k].T, out["velocity"][k].T
        carried, section = out["carried"][k, 0], out["section"][k]
        lam, a_ref = self.liquid.drag[ids], self.liquid.drag_section[ids]
        drag = np.where((section > a_ref) & (a_ref > 0.0), lam * a_ref / np.maximum(section, 1e-300), lam)
        rim = t_y[k] + self.t_oc[ids, 1]
        disc = vy * vy + 2.0 * GRAVITY * (y0 - rim)
        tau = (vy + np.sqrt(np.maximum(disc, 0.0))) / GRAVITY
        hit = (disc >= 0.0) & (tau >= 0.0)
        disc0 = vy * vy + 2.0 * GRAVITY * y0               # the floor, if it never reaches the rim
        tau0 = (vy + np.sqrt(np.maximum(disc0, 0.0))) / GRAVITY
        tau = np.where(hit, tau, np.where((disc0 >= 0.0) & (tau0 >= 0.0), tau0, 0.0))
        travel = np.where(drag <= 1e-9, tau, -np.expm1(-drag * tau) / np.maximum(drag, 1e-300))
        x_land = x0 + carried * tau + (vx - carried) * travel
        t_land = t_emit[k] + tau
        t_x, _ = _reflect(self.t_start[ids, 0], self.t_speed[ids, 0], t_land, self.t_bounds[ids, 0],
                          self.t_bounds[ids, 1])
        dist = np.abs(x_land - (t_x + self.t_oc[ids, 0]))
        half = self.t_half[ids]
        in_t = hit & (dist < half)
        rp = np.where(hit, np.maximum(0.0, 1.0 - dist / half), 0.0)
        for j in np.flatnonzero(in_t & self.has_obstacles[ids]):    # the path through a box: spilled
            liq = self.members[ids[j]]
            if self._blocked(liq.obst, x0[j], y0[j], vx[j], vy[j], carried[j], tau[j], drag[j]):
                in_t[j] = False
        rp = np.where(in_t, rp, 0.0)
        slot = self.steps[ids] % PACKET_SLOTS
        if np.any(np.isfinite(self.p_land[ids, slot])):
            raise RuntimeError("a liquid packet flew longer than PACKET_SLOTS control steps")
        self.p_land[ids, slot] = t_land
        self.p_frac[ids, slot] = out["volume"][k] / self.v0[ids]
        self.p_in[ids, slot], self.p_rp[ids, slot] = in_t, rp
        self.p_start[ids, slot], self.p_vel[ids, slot] = out["start"][k], out["velocity"][k]
        self.p_t0[ids, slot], self.p_carried[ids, slot], self.p_drag[ids, slot] = t_emit[k], carried, drag

    @staticmethod
    def _blocked(obst, x0, y0, vx, vy, carried, tau, drag) -> bool:
        """``SimplifiedMember._blocked``: does the path hit one of the boxes ``obst`` = [(x, y,
        half width, half height)] within its flight time ``tau``?"""
        ts = np.linspace(0.0, tau, 8)
        travel = ts if drag <= 1e-9 else -np.expm1(-drag * ts) / drag
        px = x0 + carried * ts + (vx - carried) * travel
        py = y0 + vy * ts - 0.5 * GRAVITY * ts * ts
        return any(np.any((np.abs(px - cx) < hx) & (np.abs(py - cy) < hy)) for cx, cy, hx, hy in obst)

    def _land(self, idx, t_end) -> np.ndarray:
        """Packets of members ``idx`` that land by ``t_end``: in T or spilled; returns the R_p
        they earn (fraction-weighted)."""
        land = self.p_land[idx] <= t_end[:, None] + 1e-12
        earned = np.zeros(len(idx))
        rows = np.flatnonzero(land.any(axis=1))
        if len(rows) == 0:
            return earned
        ids, hit = idx[rows], land[rows]
        frac, into = self.p_frac[ids], self.p_in[ids]
        self.in_target[ids] += np.where(hit & into, frac, 0.0).sum(axis=1)
        self.spilled[ids] += np.where(hit & ~into, frac, 0.0).sum(axis=1)
        earned[rows] = np.where(hit & into, self.p_rp[ids] * frac, 0.0).sum(axis=1)
        self.p_land[ids] = np.where(hit, np.inf, self.p_land[ids])
        return earned

    def _frames(self, idx) -> np.ndarray:
        """``SimplifiedMember.column_heights`` of members ``idx`` (n, lines), reduced to the two
        lips' heights in ``lip`` mode."""
        x, y, th = self.s_pose[idx].T
        c, s = np.cos(th), np.sin(th)
        right = th <= 0.0
        lip = np.where(right[:, None], self.s_lips[idx, 1], self.s_lips[idx, 0])
        head, _ = self.liquid.head_section(th, idx)
        level = y + s * lip[:, 0] + c * lip[:, 1] + head
        xc, lo, hi = self.lines[idx].transpose(2, 0, 1)
        rhs = (level - y)[:, None] - s[:, None] * xc
        cc = c[:, None]
        with np.errstate(divide="ignore", invalid="ignore"):
            top = np.where(cc > 1e-9, rhs / cc, np.where(cc * hi <= rhs, hi, -np.inf))
        top = np.where((cc > 1e-9) & (top > hi), hi, top)
        v = top * self.line_scale[idx, None]
        v = np.where(self.line_clip[idx, None], np.minimum(np.maximum(v, 0.0), 1.5), v)
        out = np.where((top >= lo) & (self.liquid.volume[idx, None] > 0.0), v, 0.0)
        if self.cfg.obs_mode == "lip":
            return np.column_stack((out[:, :3].max(1), out[:, 3:].max(1)))
        return out

    def _potentials_of(self, idx):
        return potentials(self.s_pose[idx].T, self.t_pose[idx, :2].T, self.t_vel[idx, 0],
                          self.s_lips[idx].transpose(1, 2, 0), self.t_oc[idx].T, self.t_half[idx])

    def _finish(self, idx, a, earned, clipped, collision) -> None:
        """Rewards, episode end, observation history of members ``idx``'s step
        (``PourBatch._finish_step`` on arrays)."""
        cfg = self.cfg
        in_s = self.liquid.volume[idx] / self.v0[idx]
        in_t, spilled = self.in_target[idx], self.spilled[idx]
        flight = np.maximum(0.0, 1.0 - in_s - in_t - spilled)
        term = (in_s <= EMPTY_FRACTION) & (flight <= SETTLED_FRACTION)
        trunc = ~term & (self.steps[idx] >= cfg.max_steps)
        mode = cfg.reward_mode
        if mode == "sparse":
            won = (term | trunc) & (in_t >= SUCCESS_IN_TARGET) & (spilled <= SUCCESS_MAX_SPILLED)
            terms = {"success": won.astype(np.float64)}
        else:
            da = a - self.prev_action[idx]
            terms = {"target": earned,
                     "spill": -cfg.spill_penalty * (spilled - self.spilled_before[idx]),
                     "smooth": -cfg.smoothness_penalty * (da * da).sum(axis=1)}
            if mode == "dense":
                phi = np.column_stack(self._potentials_of(idx))
                phi[term | trunc] = 0.0
                for j, name in enumerate(POTENTIALS):
                    terms[name] = cfg.shaping_gamma * phi[:, j] - self.phi[idx, j]
                self.phi[idx] = phi
        reward = np.zeros(len(idx))
        for name, value in terms.items():
            self.terms[name][idx] = value
            reward = reward + value
        self.reward[idx] = reward
        self.terminated[idx], self.truncated[idx] = term, trunc
        self.clipped[idx], self.collision[idx] = clipped, collision
        self.spilled_before[idx] = spilled
        self.prev_action[idx] = a
        if self.frame_size:
            hist = self.obs[idx, N_STATE:]
            f = self.frame_size
            hist[:, f:] = hist[:, :-f]
            hist[:, :f] = self._frames(idx)
            self.obs[idx, N_STATE:] = hist

    # ------------------------------------------------------------------ read-outs
    def observations(self) -> np.ndarray:
        if self.cfg.obs_mode == "rgb":
            return np.stack([self.render(b, self.cfg.image_size, parabola=False) for b in range(self.B)])
        obs = self.obs
        x, y, th = self.s_pose.T
        c, s = np.cos(th), np.sin(th)
        ox, oy = self.s_oc.T
        obs[:, 0:3], obs[:, 3:6] = self.s_pose, self.s_vel
        obs[:, 6:8], obs[:, 8:10] = self.t_pose[:, :2], self.t_vel[:, :2]
        obs[:, 10] = self.t_pose[:, 0] + self.t_oc[:, 0] - (x + c * ox - s * oy)
        obs[:, 11] = self.t_pose[:, 1] + self.t_oc[:, 1] - (y + s * ox + c * oy)
        obs[:, 14] = self.time / self.cfg.horizon
        out = np.minimum(np.maximum(obs, self.obs_lo), self.obs_hi).astype(np.float32)
        if np.isnan(out).any():
            out = np.clip(np.nan_to_num(out), self.obs_lo, self.obs_hi).astype(np.float32)
        return out

    def observation(self, b: int):
        return self.observations()[b]

    def outcomes(self):
        return self.reward.copy(), self.terminated.copy(), self.truncated.copy()

    def outcome(self, b: int) -> tuple[float, bool, bool]:
        return float(self.reward[b]), bool(self.terminated[b]), bool(self.truncated[b])

    def infos(self) -> dict:
        B = self.B
        in_s = self.liquid.volume / self.v0
        in_t, spilled = self.in_target.copy(), self.spilled.copy()
        success = (in_t >= SUCCESS_IN_TARGET) & (spilled <= SUCCESS_MAX_SPILLED)
        info = {"in_source": in_s, "in_target": in_t, "spilled": spilled,
                "in_flight": np.maximum(0.0, 1.0 - in_s - in_t - spilled), "success": success,
                "is_success": success.copy(), "sim_unstable": np.zeros(B, bool), "time": self.time.copy(),
                "source_pose": self.s_pose.copy(), "source_velocity": self.s_vel.copy(),
                "target_pose": self.t_pose.copy(), "target_velocity": self.t_vel.copy(),
                "action_clipped": self.clipped.copy(), "collision": self.collision.copy(),
                "n_particles": np.zeros(B, np.int64)}
        for name, value in self.terms.items():
            info["reward_" + name] = value.copy()
        mask = np.ones(B, np.bool_)
        return {k: v for key, val in info.items() for k, v in ((key, val), ("_" + key, mask))}

    # ------------------------------------------------------------------ rendering
    def outflow(self, b: int):
        if self.last_out[b] <= 0.0:
            return None
        return self.last_start[b].copy(), self.last_velocity[b].copy()

    def render(self, b: int, size_hw, parabola: bool = True) -> np.ndarray:
        m = self.members[b]
        spacing = 0.5 * self.cfg.dx
        x, y, th = self.s_pose[b].tolist()
        right = th <= 0.0
        lip = self.s_lips[b, 1 if right else 0]
        head, _ = self.liquid.head_section(np.array([th]), np.array([b]))
        level = y + np.sin(th) * lip[0] + np.cos(th) * lip[1] + head[0]
        flying = np.flatnonzero(np.isfinite(self.p_land[b]))
        flying = flying[np.argsort(self.p_t0[b, flying])]
        packets = [(self.p_start[b, k], self.p_vel[b, k], self.p_t0[b, k], self.p_land[b, k],
                    self.p_carried[b, k], self.p_drag[b, k]) for k in flying]
        pts, vel = liquid_points(m.source, m.target, self.liquid.volume[b], level,
                                 self.in_target[b] * self.v0[b], packets, self.s_pose[b],
                                 self.t_pose[b], self.time[b], spacing)
        m.s_pose, m.t_pose = self.s_pose[b].copy(), self.t_pose[b].copy()
        bodies = [(m.target, m.t_pose, render.TARGET_COLOUR), (m.source, m.s_pose, render.SOURCE_COLOUR)]
        lines = self._parabola(b) if parabola else []
        return render.render_scene(size_hw, DOMAIN, bodies, pts, vel, particle_size=2.4 * spacing,
                                   polylines=lines, boxes=m.task.obstacles)
