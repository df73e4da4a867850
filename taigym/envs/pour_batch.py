"""The engine of ``taigym/Pour-v0``: B pouring scenes stepped together (:class:`PourBatch`), on one
batched FLIP ``World2D``; the simplified fidelity (``pour_simplified``) reuses its moves,
clipping, observations, rewards and info. Not a Gymnasium object itself."""

from __future__ import annotations

import math

import numpy as np

from taigym.sim import pool
from taigym.sim.constants import CONTROL_DT, GRAVITY

from . import render
from .pour_config import (ACTION_SCALE, EMPTY_FRACTION, HISTORY, N_STATE, SETTLE_SPEED,
                          SETTLED_FRACTION, SUCCESS_IN_TARGET, SUCCESS_MAX_SPILLED, TILT_LIMIT,
                          PourConfig, observation_space, state_bounds)
from .pour_geometry import (TaskGeometry, box_distance, box_sdf, pivot_on_lip, task_geometry,
                            to_local, to_world)
from .pour_reward import POTENTIALS, REWARD_TERMS, potentials
from .pour_tasks import DOMAIN, MAX_OBSTACLES, PourTask

SOURCE, TARGET = 0, 1                             # body handles in the world
OBSTACLE_HANDLES = tuple(range(2, 2 + MAX_OBSTACLES))  # static boxes, after S and T, always there
N_BODIES = 2 + MAX_OBSTACLES
# An unused obstacle slot holds this tiny box below the floor, out of the domain: further from
# every grid node than its bounding radius plus two cells, so the solver never evaluates it.
PARKED_BOX_SIZE = 0.005                           # m
PARKED_POSE = (-0.1, -0.1, 0.0)
PENETRATION_EPS = 1e-6   # m: a move may deepen S's contact with T or an obstacle by this much


class Member:
    """Host-side state of one scene of the batch."""

    def __init__(self) -> None:
        self.task: PourTask | None = None
        self.source = self.target = None
        self.s_region = None
        self.t_walls = None
        self.s_box = self.t_box = (0.0, 0.0, 0.0, 0.0)  # solids' bounding boxes, own frames (m)
        self.s_bound = 0.0
        self.t_oc = self.s_oc = (0.0, 0.0)   # opening centres, own frames (m)
        self.solid_pts = None          # S's wall centreline, densified (S frame)
        self.obst: list[tuple] = []    # the task's obstacles as (cx, cy, hx, hy), m
        self.obst_step = math.inf      # longest sub-move that cannot jump through one (m)
        self.obst_poses = np.tile(PARKED_POSE, (MAX_OBSTACLES, 1))  # every slot's pose (parked too)
        self.s_pose = np.zeros(3)
        self.s_vel = np.zeros(3)
        self.t_pose = np.zeros(3)
        self.t_vel = np.zeros(3)
        self.time = 0.0
        self.steps = 0
        self.prev_action = np.zeros(3)
        self.n = 0
        self.x = None                  # positions (m) and velocities (m/s) after the last step,
        self.v = None                  # read lazily (render, particles obs): PourBatch.positions
        self.spilled = 0.0
        self.hist = None
        self.state_buf = None          # state vector; its per-task part is filled at reset
        self.obs_buf = None            # state vector + history (features, lip obs), same
        self.max_tilt = 0.0
        self.info: dict = {}
        self.unstable = False
        self.s_lips = ((0.0, 0.0), (0.0, 0.0))   # S's lips (left, right), S frame (m)
        self.t_half = 0.0              # half T's opening width (m)
        self.phi = (0.0, 0.0)          # shaping potentials of the current state (reward_mode dense)
        self.outcome = (0.0, False, False)   # reward, terminated, truncated of the last step


class PourBatch:
    """B pouring scenes on one batched ``World2D`` (built lazily, kept across resets).

    Shared by :class:`PourEnv` (B = 1) and ``PourVectorEnv`` so that both give identical
    transitions. Not a Gymnasium object itself.
    """

    def __init__(self, cfg: PourConfig, batch_size: int = 1):
        self.cfg = cfg
        self.B = int(batch_size)
        self.world = None
        self._key = None
        self._slots: list[list] = []   # (shape, pose) in each member's obstacle slots of the world
        self.members = [Member() for _ in range(self.B)]
        self.state_lo, self.state_hi = state_bounds()
        self.obs_space = observation_space(cfg)
        if cfg.obs_mode in ("features", "lip"):
            self.obs_lo = self.obs_space.low.astype(np.float64)
            self.obs_hi = self.obs_space.high.astype(np.float64)

    # ------------------------------------------------------------------ world
    def _ensure_world(self, task: PourTask) -> None:
        if self.world is not None:
            return
        cfg = self.cfg
        # built worlds are kept by what is fixed at construction (sim.pool): Taichi compiles the
        # solver's kernels anew for every solver instance, which costs seconds
        self._key = ("PourBatch", cfg.resolution, self.B, cfg.capacity, cfg.arch)
        # unknown contents (a pooled world's slots hold its last tasks' obstacles): reset_member
        # sets every slot the first time
        self._slots = [[None] * MAX_OBSTACLES for _ in range(self.B)]

        def build():
            from taigym import sim

            w = sim.World2D(size=DOMAIN, cells=cfg.resolution, viscosity=task.viscosity,
                            arch=cfg.arch, seed=0, batch_size=self.B, max_particles=cfg.capacity,
                            settle_speed=SETTLE_SPEED)
            w.add_body(task.source_shape(cfg.wall_thickness), pose=task.source_pose)
            w.add_body(task.target_shape(cfg.wall_thickness), pose=task.target_pose_at(0.0))
            # the obstacle slots exist in every world, so that its layout (and the pool) does
            # not depend on the task
            for _ in OBSTACLE_HANDLES:
                w.add_body(sim.Box(PARKED_BOX_SIZE, PARKED_BOX_SIZE), pose=PARKED_POSE)
            w.build()
            return w

        self.world = pool.take(self._key, build)

    def release(self) -> None:
        """Hand the world back to the pool, for the next env with the same grid and batch size.

        Every ``reset_member`` sets all of a member's state (liquid, shapes, poses, viscosity,
        jitter seed), so a pooled world gives the same transitions as a new one; reusing it
        saves the solver's allocation and kernel compilation.
        """
        if self.world is not None:
            pool.give(self._key, self.world)
            self.world = None
            for m in self.members:
                m.task = None

    def positions(self, b: int) -> np.ndarray:
        """Member b's particle positions after the last step (read on demand)."""
        m = self.members[b]
        if m.x is None:
            m.x = np.nan_to_num(self.world.positions(b))
        return m.x

    def velocities(self, b: int) -> np.ndarray:
        """Member b's particle velocities after the last step (read on demand)."""
        m = self.members[b]
        if m.v is None:
            m.v = np.nan_to_num(self.world.velocities(b))
        return m.v

    # ------------------------------------------------------------------ reset
    def _prepare(self, task: PourTask, particles: bool = True, fresh: bool = False):
        """(the task's geometry, S's liquid lattice, obstacles as (x, y, half width, half
        height)) of a task, checked before anything changes, so that a failed reset leaves the
        member as it was (any fidelity; the lattice only with ``particles`` or obstacles). A
        ``fresh`` task (drawn from the continuous distribution: never seen again) skips the
        geometry and table caches."""
        cfg = self.cfg
        geo = TaskGeometry(task, cfg.wall_thickness, cache_tables=False) if fresh else \
            task_geometry(task, cfg.wall_thickness)
        obst = [(x, y, 0.5 * wd, 0.5 * ht) for x, y, wd, ht in task.obstacles]
        fill_pts = geo.source.fill_points(task.fill, 0.5 * cfg.dx) if (obst or particles) else None
        if obst:
            self._check_obstacles(task, geo.source, geo.target, geo.solid_pts, fill_pts, obst)
        return geo, fill_pts, obst

    def reset_member(self, b: int, task: PourTask, jitter_seed: int, fresh: bool = False) -> None:
        """Member b starts ``task`` (``fresh``: drawn from the continuous distribution, see
        ``_prepare``); ``jitter_seed`` seeds its particles' jitter."""
        from taigym.sim import Box

        cfg = self.cfg
        geo, fill_pts, obst = self._prepare(task, fresh=fresh)
        source, target = geo.source, geo.target
        if len(fill_pts) > cfg.capacity:
            raise ValueError(f"the task needs {len(fill_pts)} particles but max_particles="
                             f"{cfg.capacity}; pass a larger max_particles to gym.make")
        self._ensure_world(task)
        w, m = self.world, self.members[b]
        s_vel = np.array([task.source_velocity[0], task.source_velocity[1], 0.0])
        w.clear_liquid(member=b)
        w.set_body(SOURCE, source, task.source_pose, s_vel, member=b)
        w.set_body(TARGET, target, task.target_pose_at(0.0), task.target_velocity_at(0.0), member=b)
        m.obst_poses = np.tile(PARKED_POSE, (MAX_OBSTACLES, 1))
        for i, handle in enumerate(OBSTACLE_HANDLES):
            if i < len(obst):
                shape, pose = Box(task.obstacles[i][2], task.obstacles[i][3]), obst[i][:2] + (0.0,)
            else:
                shape, pose = Box(PARKED_BOX_SIZE, PARKED_BOX_SIZE), PARKED_POSE
            m.obst_poses[i] = pose
            if self._slots[b][i] != (shape, pose):  # each set_body uploads every body: skip if set
                w.set_body(handle, shape, pose, (0.0, 0.0, 0.0), member=b)
                self._slots[b][i] = (shape, pose)
        w.set_viscosity(task.viscosity, member=b)
        columns = self._probe_columns(source)
        w.set_height_probe(None if columns is None else SOURCE, columns,
                           (-source.radius, 1.5 * source.height), member=b)
        lip_l, lip_r = target.lips     # Pan & Manocha 2017's R_p and the spill level: T's opening
        w.set_target_opening(TARGET, target.opening_centre, 0.5 * float(np.linalg.norm(lip_r - lip_l)),
                             member=b)
        w.reseed(jitter_seed, member=b)
        w.fill_body(SOURCE, task.fill, member=b, liquid_follows=task.liquid_velocity == "follow")
        m = self._init_member(b, task, geo, obst)
        m.n, m.x, m.v = w.particle_count(b), None, None
        frames = self._frames([b], [m])
        self._finish_reset(b, w.fractions(b), np.zeros(0) if frames is None else frames[0])

    def _init_member(self, b: int, task: PourTask, geo: TaskGeometry,
                     obst: list[tuple]) -> Member:
        """Member b's geometry, poses, clock and per-task state vector (any fidelity)."""
        return self._fill_member(self.members[b], task, geo, obst)

    def _fill_member(self, m: Member, task: PourTask, geo: TaskGeometry, obst: list[tuple]) -> Member:
        """``m`` set to the start of ``task`` (``_init_member``)."""
        source, target = geo.source, geo.target
        m.task, m.source, m.target = task, source, target
        m.s_region = geo.s_region
        m.solid_pts = geo.solid_pts
        m.obst = obst
        # sub-moves no longer than half the thinnest obstacle plus S's wall cannot cross it
        # unseen (see _clip_move)
        m.obst_step = min((source.radius + min(hx, hy) for _, _, hx, hy in obst), default=math.inf)
        m.t_walls = geo.t_walls
        m.s_bound = source.bounding_radius
        m.s_box, m.t_box = geo.s_box, geo.t_box
        m.t_oc, m.s_oc = tuple(target.opening_centre.tolist()), tuple(source.opening_centre.tolist())
        m.s_lips = tuple(tuple(lip) for lip in np.asarray(source.lips, np.float64).tolist())
        lip_l, lip_r = target.lips
        m.t_half = 0.5 * float(np.linalg.norm(lip_r - lip_l))
        m.s_pose = np.array(task.source_pose, dtype=np.float64)
        m.s_vel = np.array([task.source_velocity[0], task.source_velocity[1], 0.0])
        m.t_pose = task.target_pose_at(0.0)
        m.t_vel = task.target_velocity_at(0.0)
        m.time, m.steps, m.unstable = 0.0, 0, False
        m.prev_action = np.clip(m.s_vel * CONTROL_DT / ACTION_SCALE, -1, 1)
        m.max_tilt = geo.max_tilt
        m.state_buf = geo.state.copy()
        # the history of frames lives in the observation buffer (newest first): ``hist`` is a
        # view, so the observation needs no copy of it
        m.obs_buf = np.concatenate([geo.state, np.zeros(HISTORY * self._frame_size())])
        m.hist = m.obs_buf[N_STATE:].reshape(HISTORY, self._frame_size())
        return m

    def _frame_size(self) -> int:
        return {"features": self.cfg.heightfield_bins, "lip": 2}.get(self.cfg.obs_mode, 0)

    def _finish_reset(self, b: int, fr: dict, frame: np.ndarray) -> None:
        m = self.members[b]
        m.spilled = fr["spilled"]
        m.hist[:] = frame
        m.phi = self._potentials(m) if self.cfg.reward_mode == "dense" else (0.0, 0.0)
        m.outcome = (0.0, False, False)
        m.info = self._info(b, fr, dict.fromkeys(REWARD_TERMS[self.cfg.reward_mode], 0.0),
                            clipped=False, collision=False)

    @staticmethod
    def _potentials(m: Member) -> tuple[float, float]:
        """The shaping potentials (``pour_reward.potentials``) of member m's current state."""
        approach, lean = potentials(m.s_pose.tolist(), m.t_pose.tolist(), float(m.t_vel[0]),
                                    m.s_lips, m.t_oc, m.t_half)
        return float(approach), float(lean)

    def _check_obstacles(self, task: PourTask, source, target, solid_pts: np.ndarray,
                         fill_pts: np.ndarray, obst: list[tuple]) -> None:
        """Raise ValueError if an obstacle overlaps S (its solid or its liquid) at the start or T
        anywhere on its path over the horizon: both are moved kinematically and would carry
        their walls and liquid through the box."""
        s_pts = to_world(solid_pts, np.asarray(task.source_pose))
        liquid = to_world(fill_pts, np.asarray(task.source_pose))
        # T is never rotated and the solver moves it linearly between control steps, so its
        # path is covered by the bounding box of its solid at the control steps' poses
        times = np.arange(self.cfg.max_steps + 1) * CONTROL_DT
        path = np.array([task.target_pose_at(t)[:2] for t in times])
        walls = np.asarray(target.walls)
        t_lo = path.min(0) + walls.min(0) - target.radius
        t_hi = path.max(0) + walls.max(0) + target.radius
        for i, box in enumerate(obst):
            cx, cy, hx, hy = box
            if float(box_sdf(s_pts, box).min()) < source.radius - 1e-9 or \
                    (len(liquid) and float(box_sdf(liquid, box).min()) < 0.0):
                raise ValueError(f"obstacles[{i}] {task.obstacles[i]} overlaps the source container "
                                 f"at its start pose {task.source_pose}")
            if (cx + hx > t_lo[0] + 1e-9 and cx - hx < t_hi[0] - 1e-9 and
                    cy + hy > t_lo[1] + 1e-9 and cy - hy < t_hi[1] - 1e-9):
                raise ValueError(f"obstacles[{i}] {task.obstacles[i]} overlaps the target container's "
                                 f"path (its bounding box over the {self.cfg.horizon:g} s horizon: "
                                 f"x in [{t_lo[0]:.3f}, {t_hi[0]:.3f}], y in [{t_lo[1]:.3f}, "
                                 f"{t_hi[1]:.3f}] m)")

    # ------------------------------------------------------------------ geometry
    @staticmethod
    def _near(m: Member, x: float, y: float, theta: float, t_pose) -> tuple[bool, bool]:
        """(S's solid may touch T's, S's solid may cross the scene's edges) at pose (x, y,
        theta): a broad phase on bounding boxes (S's local one rotated, so conservative)."""
        c, s = math.cos(theta), math.sin(theta)
        x0, y0, x1, y1 = m.s_box
        # the rotated corners' extremes, c x - s y and s x + c y over x in {x0, x1}, y in {y0,
        # y1}: rounding is monotone, so each is the sum of the terms' extremes (exactly the min
        # and max over the four corners)
        cx, cX, cy, cY = (c * x0, c * x1, c * y0, c * y1) if c >= 0.0 else \
            (c * x1, c * x0, c * y1, c * y0)
        sx, sX, sy, sY = (s * x0, s * x1, s * y0, s * y1) if s >= 0.0 else \
            (s * x1, s * x0, s * y1, s * y0)
        sx0, sx1, sy0, sy1 = x + (cx - sY), x + (cX - sy), y + (sx + cy), y + (sX + cY)
        tx, ty = float(t_pose[0]), float(t_pose[1])
        a0, b0, a1, b1 = m.t_box
        near_t = sx0 < tx + a1 and tx + a0 < sx1 and sy0 < ty + b1 and ty + b0 < sy1
        W, H = DOMAIN
        return near_t, (sx0 < 0.0 or sy0 < 0.0 or sx1 > W or sy1 > H)

    def _penetration(self, m: Member, pose: np.ndarray,
                     t_pose: np.ndarray) -> tuple[float, float, float]:
        """(penetration of S's solid into T's, into the floor or scene edges, into the deepest
        obstacle), m. S's solid is sampled every 3/4 wall radius along its centreline (error <
        0.08 radius)."""
        r = m.source.radius
        near_t, near_edge = self._near(m, float(pose[0]), float(pose[1]), float(pose[2]), t_pose)
        R = m.s_bound
        W, H = DOMAIN
        near_o = bool(m.obst) and any(box_distance(pose[0], pose[1], o) < R for o in m.obst)
        if not (near_t or near_edge or near_o):
            return 0.0, 0.0, 0.0
        pts = to_world(m.solid_pts, pose)
        pen_e = 0.0
        if near_edge:
            lo, hi = pts.min(0), pts.max(0)
            pen_e = max(0.0, r - min(lo[0], lo[1], W - hi[0], H - hi[1]))
        pen_t = 0.0
        if near_t:
            loc = pts - t_pose[:2]                          # T is never rotated
            # only points within r of T's solid's bounding box can reach T's solid (exact cut)
            a0, b0, a1, b1 = m.t_box
            x, y = loc[:, 0], loc[:, 1]
            close = (x > a0 - r) & (x < a1 + r) & (y > b0 - r) & (y < b1 + r)
            if close.any():
                pen_t = max(0.0, r - m.t_walls.min_distance(loc[close]))
        pen_o = self._obstacle_penetration(m, pose, pts) if near_o else 0.0
        return pen_t, pen_e, pen_o

    def _obstacle_penetration(self, m: Member, pose: np.ndarray,
                              pts: np.ndarray | None = None) -> float:
        """Penetration (m) of S's solid at ``pose`` into the deepest obstacle (``pts``: S's
        sampled solid at that pose, if already computed)."""
        # S's solid lies within s_bound of its frame origin: a box further away cannot touch it
        near = [o for o in m.obst if box_distance(pose[0], pose[1], o) < m.s_bound]
        if not near:
            return 0.0
        if pts is None:
            pts = to_world(m.solid_pts, pose)
        return max(0.0, max(m.source.radius - float(box_sdf(pts, o).min()) for o in near))

    def _swept_obstacle_penetration(self, m: Member, cur: np.ndarray, p: np.ndarray) -> float:
        """Deepest penetration (m) of S's solid into an obstacle at the poses between ``cur`` and
        ``p``, sampled so that no solid point moves further than ``m.obst_step`` between two of
        them (a move of up to 2.5 cm could otherwise jump over a thin box)."""
        d = p - cur
        travel = math.hypot(d[0], d[1]) + m.s_bound * abs(d[2])  # of any point of S's solid, m
        n = math.ceil(travel / m.obst_step)
        pen = 0.0
        for k in range(1, n):
            pen = max(pen, self._obstacle_penetration(m, cur + (k / n) * d))
        return pen

    def _clip_move(self, m: Member, delta, t_next: np.ndarray):
        """S's next pose under the displacement ``delta`` (dx, dy, dtheta; m, m, rad); components
        that would push S's solid deeper into T's, an obstacle (at the new pose or on the way),
        the floor or the scene's edges are dropped.

        Returns (pose, clipped, penetration of S into T or an obstacle at that pose)."""
        cur = m.s_pose
        # fast path in Python floats (same arithmetic as the arrays): S far from T, the edges and
        # the obstacles (from every pose on the way: the margin is the move's length)
        c0, c1, c2 = cur.tolist()
        d0, d1, d2 = map(float, delta)
        px, py, th_raw = c0 + d0, c1 + d1, c2 + d2
        th = min(max(th_raw, -TILT_LIMIT), TILT_LIMIT)
        R = m.s_bound
        near_t, near_edge = self._near(m, px, py, th, t_next)
        if not (near_t or near_edge) and not (m.obst and any(
                box_distance(px, py, o) < R + abs(d0) + abs(d1) for o in m.obst)):
            return np.array([px, py, th]), th != th_raw, 0.0
        sweep = bool(m.obst)
        delta = np.array([d0, d1, d2])

        def depth(p: np.ndarray) -> tuple[float, float, float]:
            pen_t, pen_e, pen_o = self._penetration(m, p, t_next)
            if sweep:
                pen_o = max(pen_o, self._swept_obstacle_penetration(m, cur, p))
            return pen_t, pen_e, pen_o

        p = cur + delta
        p[2] = min(max(p[2], -TILT_LIMIT), TILT_LIMIT)
        pen_t, pen_e, pen_o = depth(p)
        if pen_t == 0.0 and pen_e == 0.0 and pen_o == 0.0:
            return p, bool(p[2] != cur[2] + delta[2]), 0.0
        p0_t, p0_e, p0_o = self._penetration(m, cur, t_next)

        def allowed(pen_t: float, pen_e: float, pen_o: float) -> bool:
            return pen_t <= p0_t + PENETRATION_EPS and pen_e <= p0_e and pen_o <= p0_o + PENETRATION_EPS

        if allowed(pen_t, pen_e, pen_o):
            return p, True, max(pen_t, pen_o)
        for mask in ((1, 0, 1), (1, 1, 0), (0, 1, 1), (1, 0, 0), (0, 0, 1), (0, 1, 0)):
            mk = np.array(mask, float)
            if not np.any(mk * delta):
                continue
            p = cur + mk * delta
            p[2] = min(max(p[2], -TILT_LIMIT), TILT_LIMIT)
            pen_t, pen_e, pen_o = depth(p)
            if allowed(pen_t, pen_e, pen_o):
                return p, True, max(pen_t, pen_o)
        return cur.copy(), bool(np.any(delta != 0)), max(p0_t, p0_o)

    # ------------------------------------------------------------------ features
    def _probe_columns(self, source) -> np.ndarray | None:
        """The columns in S's frame (m) over which the solver measures the liquid's height for the
        observation: ``heightfield_bins`` equal columns across S's interior (features), or a band
        around each lip, within the interior's span (lip); None in the other obs modes."""
        poly = np.asarray(source.interior)
        lo, hi = poly[:, 0].min(), poly[:, 0].max()
        if self.cfg.obs_mode == "features":
            edges = np.linspace(lo, hi, self.cfg.heightfield_bins + 1)
            return np.stack([edges[:-1], edges[1:]], axis=1)
        if self.cfg.obs_mode == "lip":
            band = max(0.2 * source.width, 1.5 * 0.5 * self.cfg.dx)   # 1.5 particle spacings at least
            (lx, _), (rx, _) = source.lips
            return np.array([[max(lo, x - band), min(hi, x + band)] for x in (lx, rx)])
        return None

    def _frames(self, rows, ms: list) -> np.ndarray | None:
        """(k, bins) heightfields or (k, 2) lip heights of members ``ms`` (``rows`` of the batch):
        the height of the liquid in S's frame over each probe column, / S's height, in [0, 1.5]
        (0: no liquid; the probe counts liquid from a wall radius below S's inner bottom up to
        1.5 S's heights); None in the other obs modes."""
        if self.cfg.obs_mode not in ("features", "lip"):
            return None
        heights = self.world.heights_all()[rows, :self._frame_size()]
        inv_h = np.array([1.0 / m.source.height for m in ms])[:, None]
        return np.minimum(np.maximum(heights * inv_h, 0.0), 1.5)

    def _fill_state(self, m: Member, st: np.ndarray) -> bool:
        """Write the per-step entries of the state vector (``st[:N_STATE]``, unclipped); returns
        False if they are surely free of nan (the per-task entries are finite: validated)."""
        x, y, th = m.s_pose.tolist()
        tx, ty, _ = m.t_pose.tolist()
        tvx, tvy, _ = m.t_vel.tolist()
        ox, oy = m.s_oc
        c, s_ = math.cos(th), math.sin(th)
        per_step = (x, y, th, *m.s_vel.tolist(), tx, ty, tvx, tvy,
                    tx + m.t_oc[0] - (x + c * ox - s_ * oy), ty + m.t_oc[1] - (y + s_ * ox + c * oy))
        st[0:12] = per_step
        st[14] = t = m.time / self.cfg.horizon
        return math.isnan(sum(per_step) + t)             # (inf - inf too: a harmless false alarm)

    def _state(self, m: Member) -> np.ndarray:
        st = m.state_buf
        self._fill_state(m, st)
        out = np.minimum(np.maximum(st, self.state_lo), self.state_hi).astype(np.float32)
        if not np.all(np.isfinite(out)):
            out = np.clip(np.nan_to_num(out), self.state_lo, self.state_hi)
        return out

    def observation(self, b: int):
        cfg, m = self.cfg, self.members[b]
        if cfg.obs_mode in ("features", "lip"):
            # state and history in one buffer (``m.hist`` is a view of its tail), clipped in one
            # go: the same values as clipping the state to its bounds and the history to [0, 1.5]
            # separately
            buf = m.obs_buf
            maybe_nan = self._fill_state(m, buf)
            obs = np.minimum(np.maximum(buf, self.obs_lo), self.obs_hi).astype(np.float32)
            if maybe_nan:                               # clipping leaves only nan to fix
                st = obs[:N_STATE]
                obs[:N_STATE] = np.clip(np.nan_to_num(st), self.state_lo, self.state_hi)
            return obs
        if cfg.obs_mode == "particles":
            x, v = self.positions(b), self.velocities(b)
            idx = np.linspace(0, max(m.n - 1, 0), cfg.n_particles).round().astype(np.int64)
            p = np.concatenate([x[idx], v[idx]], axis=1) if m.n else np.zeros((cfg.n_particles, 4))
            sp = self.obs_space["particles"]
            p = np.clip(np.nan_to_num(p), sp.low, sp.high).astype(np.float32)
            return {"state": self._state(m), "particles": p}
        return self.render(b, cfg.image_size, parabola=False)

    # ------------------------------------------------------------------ step
    def _moves(self, actions: np.ndarray, active: np.ndarray) -> list[tuple]:
        """The active members' moves (all if ``active`` is None) under actions in [-1, 1]^3:
        (member, action, S's next pose, S's velocity, T's next pose, T's next velocity,
        clipped, S's penetration into T) each."""
        dt, members = CONTROL_DT, self.members
        sx, sy, sth = ACTION_SCALE.tolist()
        on_lip = self.cfg.pivot == "lip"
        rows = np.asarray(actions, np.float64).tolist()
        plans = []
        # per member in Python floats: the numbers of np.clip(np.nan_to_num(a), -1, 1) * scale
        # and (s_next - s_pose) / dt without a NumPy call each
        for b in (range(self.B) if active is None else np.flatnonzero(active).tolist()):
            m = members[b]
            a = [min(max(v, -1.0), 1.0) if v == v else 0.0 for v in rows[b]]   # nan -> 0
            (tx, ty), (tvx, tvy) = m.task.target_state_at(m.time + dt)
            t_next = np.array([tx, ty, 0.0])
            delta = (a[0] * sx, a[1] * sy, a[2] * sth)
            if on_lip:
                delta = pivot_on_lip(m.s_pose.tolist(), delta, m.s_lips, TILT_LIMIT)
            s_next, clipped, pen = self._clip_move(m, delta, t_next)
            (x0, y0, th0), (x1, y1, th1) = m.s_pose.tolist(), s_next.tolist()
            s_vel = np.array([(x1 - x0) / dt, (y1 - y0) / dt, (th1 - th0) / dt])
            plans.append((b, np.array(a), s_next, s_vel, t_next, np.array([tvx, tvy, 0.0]),
                          clipped, pen))
        return plans

    def step(self, actions: np.ndarray, active: np.ndarray | None) -> None:
        """Advance the active members (all if ``active`` is None) by one control step under their
        actions in [-1, 1]^3."""
        w, dt = self.world, CONTROL_DT
        B, members = self.B, self.members
        poses = np.empty((B, N_BODIES, 3))   # (member, body: SOURCE, TARGET, obstacles, x y theta)
        vels = np.zeros((B, N_BODIES, 3))    # obstacles are static
        for b, m in enumerate(members):
            poses[b, SOURCE] = m.s_pose
            poses[b, TARGET] = m.t_pose
            poses[b, OBSTACLE_HANDLES[0]:] = m.obst_poses
        plans = self._moves(actions, active)
        for b, _, _, s_vel, t_next, _, _, _ in plans:
            vels[b, SOURCE] = s_vel
            vels[b, TARGET] = (t_next - members[b].t_pose) / dt
        w.set_poses(poses, vels)
        w.advance(dt)
        self._after_step(plans, w.unstable_members())

    def _advance_clock(self, m: Member, s_next, s_vel, t_next, t_vel) -> None:
        """Move member m's poses, velocities and clock on by one control step."""
        m.s_vel, m.t_vel = s_vel, t_vel
        m.s_pose, m.t_pose = s_next, t_next
        m.time += CONTROL_DT
        m.steps += 1

    def _after_step(self, plans: list[tuple], unstable: np.ndarray) -> None:
        """The stepped members' rewards, fractions and features, from what the solver measured
        in its step (Pan & Manocha 2017's R_p as the world's target score, fractions, heightfields);
        ``plans`` as ``_moves`` gives them."""
        if not plans:
            return
        rows = [p[0] for p in plans]
        ms = [self.members[b] for b in rows]
        w = self.world
        scores = w.target_scores()
        frames = self._frames(rows, ms)
        for i, (m, (b, a, s_next, s_vel, t_next, t_vel, clipped, pen)) in enumerate(zip(ms, plans)):
            self._advance_clock(m, s_next, s_vel, t_next, t_vel)
            m.unstable, m.x, m.v = bool(unstable[b]), None, None
            self._finish_step(b, a, w.fractions(b), scores[b] / max(m.n, 1),
                              None if frames is None else frames[i], clipped, pen)

    def _finish_step(self, b: int, a, fr: dict, r_target: float, frame, clipped: bool,
                     pen: float) -> None:
        """Rewards, episode end, observation history and info of member b's step (any
        fidelity)."""
        cfg, m = self.cfg, self.members[b]
        in_s, flight = float(fr["in"][SOURCE]), float(fr["in_flight"])
        terminated = not m.unstable and in_s <= EMPTY_FRACTION and flight <= SETTLED_FRACTION
        truncated = m.unstable or (not terminated and m.steps >= cfg.max_steps)
        mode = cfg.reward_mode
        if mode == "sparse":
            in_t, spilled = float(fr["in"][TARGET]), float(fr["spilled"])
            won = (terminated or truncated) and in_t >= SUCCESS_IN_TARGET and spilled <= SUCCESS_MAX_SPILLED
            terms = {"success": 1.0 if won else 0.0}
        else:
            da = a - m.prev_action
            terms = {"target": float(r_target),
                     "spill": -cfg.spill_penalty * (fr["spilled"] - m.spilled),
                     "smooth": -cfg.smoothness_penalty * float(da.dot(da))}   # (half the cost of @)
            if mode == "dense":
                # F = gamma Phi(s') - Phi(s), Phi = 0 once the episode has ended
                phi = (0.0, 0.0) if terminated or truncated else self._potentials(m)
                for name, new, old in zip(POTENTIALS, phi, m.phi):
                    terms[name] = cfg.shaping_gamma * new - old
                m.phi = phi
        m.spilled = fr["spilled"]
        m.prev_action = a
        if frame is not None:
            hist = m.hist
            hist[1:] = hist[:-1]                    # newest first (overlapping copy is safe)
            hist[0] = frame
        m.outcome = (float(sum(terms.values())), bool(terminated), bool(truncated))
        m.info = self._info(b, fr, terms, clipped=clipped, collision=pen > 1e-4)

    def _info(self, b: int, fr: dict, terms: dict, *, clipped, collision) -> dict:
        m = self.members[b]
        in_s, in_t = float(fr["in"][SOURCE]), float(fr["in"][TARGET])
        spilled, flight = float(fr["spilled"]), float(fr["in_flight"])
        success = bool(in_t >= SUCCESS_IN_TARGET and spilled <= SUCCESS_MAX_SPILLED)
        info = {"in_source": in_s, "in_target": in_t, "spilled": spilled, "in_flight": flight,
                "success": success, "is_success": success, "sim_unstable": bool(m.unstable),
                "time": float(m.time), "source_pose": m.s_pose.copy(),
                "source_velocity": m.s_vel.copy(), "target_pose": m.t_pose.copy(),
                "target_velocity": m.t_vel.copy(), "action_clipped": bool(clipped),
                "collision": bool(collision), "n_particles": int(m.n)}
        for name, value in terms.items():
            info["reward_" + name] = float(value)
        return info

    def outcome(self, b: int) -> tuple[float, bool, bool]:
        """(reward, terminated, truncated) of member b's last step."""
        return self.members[b].outcome

    # ------------------------------------------------------------------ the whole batch
    def observations(self) -> list:
        """Every member's observation (for the vector env)."""
        return [self.observation(b) for b in range(self.B)]

    def outcomes(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Every member's (reward, terminated, truncated) of its last step as arrays (a member
        reset since gives 0, False, False)."""
        r, term, trunc = zip(*(m.outcome for m in self.members))
        return np.array(r, np.float64), np.array(term, bool), np.array(trunc, bool)

    def infos(self) -> dict:
        """The members' infos in Gymnasium's vector form: each key's values as an array over the
        members and ``"_" + key`` a mask of the members that have it (all)."""
        members = self.members
        B, first = self.B, members[0].info
        infos: dict = {}
        for key, v0 in first.items():
            vals = [m.info[key] for m in members]
            if isinstance(v0, np.ndarray):
                arr = np.zeros((B, *v0.shape), dtype=v0.dtype)
                for b, v in enumerate(vals):
                    arr[b] = v
            else:
                arr = np.array(vals, dtype=type(v0))
            infos[key], infos["_" + key] = arr, np.ones(B, dtype=np.bool_)
        return infos

    # ------------------------------------------------------------------ rendering
    def outflow(self, b: int):
        """Estimated outflow (start point c, velocity u) of liquid leaving S's lower lip, or None."""
        m = self.members[b]
        if abs(m.s_pose[2]) < 0.2 or m.n == 0:
            return None
        x, v = self.positions(b), self.velocities(b)
        lips = to_world(np.array(m.source.lips), m.s_pose)
        lip = lips[np.argmin(lips[:, 1])]
        outside_s = ~m.s_region.inside(to_local(x, m.s_pose))
        in_t = self.world.containing_body_all()[b] == TARGET
        near = outside_s & ~in_t & (np.linalg.norm(x - lip, axis=1) < 0.03)
        if near.sum() < 3:
            return None
        return x[near].mean(0), v[near].mean(0)

    def render(self, b: int, size_hw, parabola: bool = True) -> np.ndarray:
        m, w = self.members[b], self.world
        x, v = self.positions(b), self.velocities(b)
        bodies = [(m.target, m.t_pose, render.TARGET_COLOUR),
                  (m.source, m.s_pose, render.SOURCE_COLOUR)]
        lines = self._parabola(b) if parabola else []
        return render.render_scene(size_hw, DOMAIN, bodies, x, v,
                                    particle_size=1.2 * w.spacing, polylines=lines,
                                    boxes=m.task.obstacles)

    def _parabola(self, b: int) -> list:
        """The outflow parabola of member b as a polyline to draw (0.6 s of flight), if any."""
        est = self.outflow(b)
        if est is None:
            return []
        c, u = est
        tau = np.linspace(0.0, 0.6, 40)[:, None]
        pts = c + u * tau + 0.5 * np.array([0.0, -GRAVITY]) * tau ** 2
        pts = pts[pts[:, 1] >= 0.0]
        return [(pts, render.PARABOLA_COLOUR)] if len(pts) > 1 else []

