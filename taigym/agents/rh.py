r"""``rh``: Pan & Manocha 2017's receding-horizon feedback planner, guided by the liquid-parameter network.

Every control step (Pan & Manocha 2017, §V, Eq. 1) the agent solves

    argmin_{S(t + dt), ..., S(t + K dt)}  sum_{k=1..K} C(S(t + k dt)),   C = C_l + C_r + C_o

over K = 25 steps of dt = 0.05 s (1.25 s) and applies only the first step. The network
(:class:`taigym.models.liquid_net.LiquidNet`, trained on the CMA-ES dataset and on rh's own
rollouts) predicts, from the current observation only (no liquid simulation in the loop), the
outflow parabola's start p and jet velocity v in S's frame, the flux rho and the
mean-trajectory prior's ratios (alpha, beta, gamma) over the horizon. The terms (k = 1..K,
poses S_k = (x, y, theta)):

* C_l, pour (weight ``pour_weight``): rho_k (dist_k / W)^2, dist_k the distance from T's
  opening centre (where T is then, moving at its velocity) at which the parabola comes down
  through T's rim height; the parabola starts at p moved with S_k and leaves with R(theta_k) v
  plus the liquid's velocity: S's rotation about its origin plus S's translational velocity
  (S_{k-1} -> S_k) lagged by ``slosh_time`` (below); W is T's half opening.
* C_l, jet spread (``pour_weight``): rho (``jet_spread`` tau_k / W)^2, tau_k the jet's flight
  time to T's rim height: with it the jet's terms are its expected squared miss when its
  horizontal velocity is known to ``jet_spread`` (0.3 m/s, 1 sigma), so the planner prefers
  short falls, where an error in the network's jet or in the liquid's lag misses T by less.
  Weighted by the network's flux now (rho), not by the planned rho_k: with rho_k a pour aimed
  into T cost its spread too and rh hesitated (FLIP eval tasks: 2 of 60 never poured within the
  episode, one spilled 89 %). FLIP test runs under 5 % spill, jitters 0-11: 710 of 720 against
  687 without; validation 348 against 335 of 360; ``docs/experts/rh.md``.
* C_l, dribble (``pour_weight`` x ``dribble_weight``): the same for the outflow's slow end, which
  leaves p with the liquid's velocity only (Pan & Manocha 2016's fan, as in ``taigym.planners.sqp``).
* C_l, drip (``pour_weight`` x ``drip_weight``): rho'_k (relu(|e_k| - W) / W)^2, the liquid
  pushed over the lip leaving it at rest (running down S's outer wall, as logged in the particle
  env when S leans while still far from T), e_k the distance from T's opening centre at which it
  falls through T's rim height, rho'_k the flux model's excess (below) counted from
  ``drip_margin`` below the max tilt: nothing while the lip is above T's opening.
* C_l, prior (``prior_weight``, ``prior_scale`` sigma): |(S_k - S'_k) / sigma|^2, S'_k having S's
  gaps to T's opening (x, y) and to the final lean shrunk by (alpha, beta, gamma)^(k/K) (the
  monotone coordinates of ``taigym.planners.cmaes``).
* C_r (``smooth_weight``, ``smooth_scale`` sigma_r): the Laplacian
  |(S_{k+1} - 2 S_k + S_{k-1}) / sigma_r|^2 (S_{-1}, S_0: the last and current poses).
* C_o (``collision_weight``, ``clearance`` sigma_o): (D_k^2 + (D_k - D_{k-1})^2) / sigma_o^2, D the
  maximal penetration of S's walls (circles) into T's walls and the obstacles (segments).

The paper weights the pour term by max(rho, 0), rho the network's flux at the current state,
so that it acts only while liquid flows. The plan changes the state, so here the flux of step k
is predicted from the planned poses (:meth:`HorizonCost._flux`):

    rho_k = max(rho, rho_floor) + flow_gain relu(phi_k - phi_max)^(3/2),
    phi_k = lean_k + atan2(-side a_x, g + a_y)

phi_k being S's effective lean: its lean towards T plus the tilt of the free surface in S's
accelerated frame (a: S's acceleration at step k; braking while moving towards T tips the
liquid towards the pouring lip), phi_max S's quasi-static max tilt at the liquid it holds now
(Pan & Manocha 2016's tables, ``taigym.models.outflow_tables``), the power 3/2 a weir's. So the planner
does not lean or brake S past the max tilt unless the outflow then lands in T. ``rho_floor``
(default 0.1 s^-1) still aims the parabola a little before the flow starts. When S brakes, its
liquid keeps its momentum for a while: the liquid's translational velocity follows S's through
a first-order lag of ``slosh_time`` (0.1 s, about a quarter period of the first slosh mode of a
7 cm wide S half full, omega^2 = (pi g / L) tanh(pi h / L), omega ~ 20 s^-1; 0.2 s did no better
on validation problems), tracked over the episode by the agent. Without the two (``flow_gain=0, slosh_time=0``) the worst test problems, a T that
turns back at the end of its track while S pours, spilled 24-45 % (S leaned past the max tilt
while still far from T, then braked hard with T and surged the liquid over T's far rim); with
them 4-18 % (``scripts/rh_eval.py``, ``docs/experts/rh.md``). The dribble term's weight 1 was chosen on 30
validation problems in the particle env (27 of them under 5 % spill; 24 at weight 0.5, 25 at 2).
The drip term (weight 1, margin 0.2 rad; chosen on the validation problems, three particle
jitters, 180 runs: 167 under 5 % spill, mean spilled 1.2 %, worst 10 %; without it 166, 1.4 %,
12 %; at margin 0 165, 1.4 %, 17 %; at weight 0.3 and margin 0 168, 1.5 %, 16 %) keeps S from
leaning its liquid over the lip while the lip is not yet above T; the network's jet at such
states leaves upwards in S's frame where the particle env's runs down the wall.
The paper names the pour and prior terms C_o and the collision term C_o too (a typo); here C_l
is the liquid term. The decision variables are the K actions in [-1, 1]^3 (S_k = S_0 + the
scaled sum of the first k), bounded through a change of variables (actions = tanh(z)), solved by
L-BFGS (:func:`lbfgs`) with the analytic gradient, warm-started from the last step's solution
shifted by one and from its last inverse-Hessian scale. S translates at most ``max_speed`` m/s
along each axis, or as fast as T where T is faster (:meth:`RHAgent.speed_cap`; default 0.25, half
the env's limit): at full speed S reached T with its liquid sloshing and, where T turned back at
its track's end, reversed at up to 18 m/s^2 to follow it; the surge flew over T's far rim
(``docs/experts/rh.md``: FLIP test runs under 5 % spill 347 of 360 with the cap, 335 without; validation 171
against 164 of 180).
The network's forward pass is NumPy. The solve runs as one Taichi kernel per control step
(``solver="taichi"``, :mod:`taigym.agents.rh_kernel`: the same arithmetic compiled, 1.2-1.6 ms
a step on a 2-core machine where this NumPy reference, ``solver="numpy"``, takes 7-11 ms;
``scripts/rh_speed.py``).

The objective and its NumPy solver are :mod:`taigym.agents.rh_cost`. The network is trained by
:mod:`taigym.training.rh` (``python -m taigym.apps.train agent=rh env=pour_simplified``);
``make("rh", env, checkpoint=path)`` or ``RHAgent.load(path, env)`` loads it, and without a
checkpoint the agent loads the network shipped with taigym.
"""

from __future__ import annotations

import math
import time
from pathlib import Path

import numpy as np

from taigym.models.liquid_net import LiquidNet
from taigym.models.outflow_tables import outflow_tables
from taigym.planners.cmaes import Reference, target_path

from .base import Agent, check_ranges
from .cmaes import env_constants
from .policy import torch_load, torch_save_atomic
from .rh_cost import HorizonCost, lbfgs

PLANNER_DEFAULTS = dict(horizon_steps=25, pour_weight=10.0, prior_weight=1.0,
                        prior_scale=(0.02, 0.02, 0.2), smooth_weight=0.05,
                        smooth_scale=(0.004, 0.004, 0.02), collision_weight=1.0, clearance=0.003,
                        max_iterations=12, lean=2.3, rho_floor=0.1,
                        dribble_weight=1.0, flow_gain=2.0, slosh_time=0.1,
                        drip_weight=1.0, drip_margin=0.2, max_speed=0.25, jet_spread=0.3, solver="taichi")
SOLVERS = ("taichi", "numpy")   # the solve as one Taichi kernel (rh_kernel), or the NumPy reference
#: accepted range (closed) of each numeric planner option, with its unit; horizon_steps and
#: max_iterations are integers, prior_scale and smooth_scale three positive scales (m, m, rad)
PLANNER_RANGES = dict(horizon_steps=(1, 200, "steps"), pour_weight=(0.0, math.inf, ""),
                      prior_weight=(0.0, math.inf, ""), smooth_weight=(0.0, math.inf, ""),
                      collision_weight=(0.0, math.inf, ""), clearance=(0.0, 0.1, "m"),
                      max_iterations=(1, 1000, "iterations"), lean=(0.1, math.pi, "rad"),
                      rho_floor=(1e-6, math.inf, ""), dribble_weight=(0.0, math.inf, ""),
                      flow_gain=(0.0, math.inf, ""), slosh_time=(0.0, 10.0, "s"),
                      drip_weight=(0.0, math.inf, "(0: off)"), drip_margin=(0.0, math.pi / 2, "rad"),
                      max_speed=(0.01, 10.0, "m/s"), jet_spread=(0.0, 10.0, "m/s"))


# ---------------------------------------------------------------------- geometry helpers
def _resample(poly: np.ndarray, max_segments: int) -> np.ndarray:
    """At most ``max_segments`` segments along a polyline (every n-th vertex, ends kept)."""
    if len(poly) - 1 <= max_segments:
        return poly
    idx = np.unique(np.linspace(0, len(poly) - 1, max_segments + 1).round().astype(int))
    return poly[idx]


def _source_points(shape, per_edge: int = 2) -> np.ndarray:
    """S's wall centreline vertices plus ``per_edge - 1`` points on each edge (S frame, m)."""
    w = np.asarray(shape.walls, np.float64)
    w = _resample(w, 8)
    pts = [w[:1]]
    for a, b in zip(w[:-1], w[1:]):
        pts.append(a + (np.arange(1, per_edge + 1)[:, None] / per_edge) * (b - a))
    return np.concatenate(pts)


# ---------------------------------------------------------------------- the agent
#: the network ``make("rh", env)`` loads without a checkpoint: the CMA-ES dataset plus three
#: rounds of rh's own rollouts on its 160 problems (data aggregation for the model; rectangular S):
#: ``D=scripts/cmaes_dataset.py --problems 160`` (CMA-ES pours, particle labels), then for
#: n = 1, 2, 3: ``scripts/cmaes_dataset.py --onpolicy <net n-1> --out R<n> --problems 160`` and
#: ``python -m taigym.apps.train agent=rh env=pour_simplified agent.dataset=D agent.problems=160
#: 'agent.onpolicy=[R1, .., R<n>]'`` -> net n; net 0 is the network shipped before (git 49aae5e,
#: CMA-ES pours only). Validation problems, three particle jitters, both shapes: 166 of 180 runs
#: under 5 % spill (net 0: 149; nets 1, 2: 156, 164); test: 170 of 180 (net 0: 144).
SHIPPED_CHECKPOINT = Path(__file__).resolve().parent.parent / "models" / "data" / "rh_liquid_net.pt"


def _check_ranges(cfg: dict) -> None:
    """ValueError naming the first planner option outside its PLANNER_RANGES range."""
    check_ranges(cfg, PLANNER_RANGES)
    if cfg["solver"] not in SOLVERS:
        raise ValueError(f"solver must be one of {SOLVERS}, got {cfg['solver']!r}")
    for k in ("prior_scale", "smooth_scale"):
        if len(cfg[k]) != 3 or min(cfg[k]) <= 0.0:
            raise ValueError(f"{k} must be three positive scales (m, m, rad), got {cfg[k]!r}")


class RHAgent(Agent):
    """Receding-horizon planner over the network's predictions (module docstring)."""

    name = "rh"
    families = ("pour",)

    def __init__(self, env, checkpoint: str | Path | None = None, net: LiquidNet | None = None,
                 meta: dict | None = None, **cfg):
        unknown = set(cfg) - set(PLANNER_DEFAULTS)
        if unknown:
            raise ValueError(f"unknown rh option(s): {', '.join(sorted(unknown))}; accepted: "
                             f"checkpoint, {', '.join(sorted(PLANNER_DEFAULTS))}")
        if checkpoint is None and net is None:
            checkpoint = SHIPPED_CHECKPOINT
        if checkpoint is not None:
            net, saved_meta, saved_cfg = _read(checkpoint)
            meta = {**saved_meta, **(meta or {})}
            cfg = {**saved_cfg, **cfg}
        super().__init__(env, **{**PLANNER_DEFAULTS, **cfg})
        for k in ("prior_scale", "smooth_scale"):
            self.cfg[k] = tuple(float(v) for v in self.cfg[k])
        _check_ranges(self.cfg)
        self.net, self.meta = net, dict(meta or {})
        obs_dim = int(np.prod(env.observation_space.shape or (0,)))
        if obs_dim != net.in_dim:
            raise ValueError(f"the network takes {net.in_dim} inputs but the env's observations have "
                             f"{obs_dim} (obs_mode {self.meta.get('obs_mode', '?')!r}: build the env with it)")
        self.predict = net.numpy_predictor()
        self.dt, _, self.scale = env_constants(env)
        self._task = None
        self.solve_seconds: list[float] = []        # wall time of each step's plan (s)
        self.solve_cpu_seconds: list[float] = []    # CPU time of this process (s): without the
        # time other processes hold the core, the latency an unloaded core would see

    # ------------------------------------------------------------------ episode state
    def reset(self, *, seed: int | None = None) -> None:
        super().reset(seed=seed)
        self._task, self._u, self._v_liquid, self._hessian_scale = None, None, None, None
        self.solve_seconds, self.solve_cpu_seconds = [], []
        if self.cfg["solver"] == "taichi":
            from .rh_kernel import warm_up

            warm_up()                   # the kernel's compilation is not a decision's latency

    def _prepare(self, task) -> None:
        dt, wall, scale = env_constants(self.env)
        self.dt, self.scale = dt, scale
        self.ref = Reference(task, wall, self.cfg["lean"])
        source, target = task.source_shape(wall), task.target_shape(wall)
        self.s_points = _source_points(source)
        self.outflow_tables = outflow_tables(source)
        self.liquid_area = source.liquid_area(task.fill)          # m^2 (2D) at the start
        self.s_radius = source.radius
        tw = _resample(np.asarray(target.walls, np.float64), 8)
        self.t_a, self.t_b = tw[:-1], tw[1:]
        boxes_a, boxes_b = [], []
        for ox, oy, w, h in task.obstacles:
            cs = np.array([[ox - w / 2, oy - h / 2], [ox + w / 2, oy - h / 2], [ox + w / 2, oy + h / 2],
                           [ox - w / 2, oy + h / 2]])
            boxes_a.append(cs)
            boxes_b.append(np.roll(cs, -1, axis=0))
        self.o_a = np.concatenate(boxes_a) if boxes_a else np.zeros((0, 2))
        self.o_b = np.concatenate(boxes_b) if boxes_b else np.zeros((0, 2))
        self.seg_ab = np.concatenate([self.t_b - self.t_a, self.o_b - self.o_a])
        self.seg_radius = np.concatenate([np.full(len(self.t_a), target.radius), np.zeros(len(self.o_a))])
        self.half_width = 0.5 * target.width
        self.t_oc = np.asarray(target.opening_centre, np.float64)
        self._task, self._u = task, None

    def cost(self, obs, info: dict) -> HorizonCost:
        """The horizon objective at the state (obs, info)."""
        task = self.env.unwrapped.task
        if task is not self._task:
            self._prepare(task)
        K, dt = int(self.cfg["horizon_steps"]), self.dt
        outflow, ratios = self.predict(np.asarray(obs, np.float64).ravel())
        pose = np.asarray(info["source_pose"], np.float64)
        vel = np.asarray(info.get("source_velocity", np.zeros(3)), np.float64)
        t = float(info.get("time", 0.0))
        times = t + dt * np.arange(1, K + 1)
        tpos, tvel = target_path(task, times)
        tvx = tvel[:, 0]
        ref = self.ref
        gaps0, signs = ref.gaps(pose, t), ref.signs(pose, t)
        frac = (np.arange(1, K + 1) / K)[:, None]
        prior = ref.pose(gaps0 * np.clip(ratios, 1e-3, 1.0) ** frac, signs, times)
        seg_a = np.concatenate([tpos[:, None] + self.t_a, np.broadcast_to(self.o_a, (K,) + self.o_a.shape)], 1)
        return HorizonCost(pose0=pose, pose_prev=pose - vel * dt, params=outflow, prior_poses=prior,
                           rims=tpos[:, 1] + self.t_oc[1], tx=tpos[:, 0] + self.t_oc[0], tvx=tvx,
                           half_width=self.half_width, s_points=self.s_points, s_radius=self.s_radius,
                           segments=(seg_a, self.seg_ab), seg_radius=self.seg_radius, cfg=self.cfg, dt=dt,
                           side=ref.side, max_tilt=self.max_tilt(info),
                           liquid_velocity=vel[:2] if self._v_liquid is None else self._v_liquid)

    def max_tilt(self, info: dict) -> float:
        """S's quasi-static max tilt (rad) at the liquid it holds now (``info["in_source"]``)."""
        return self.outflow_tables.max_lean(float(info.get("in_source", 1.0)) * self.liquid_area)

    def speed_cap(self) -> np.ndarray:
        """The fraction (x, y, theta) of the env's action range the planner uses: S translates at
        most ``max_speed`` m/s along each axis, or as fast as T moves along it if T is faster (S
        must keep up with T while it pours); the env allows ``action_scale / dt``."""
        v_env = self.scale[:2] / self.dt
        v_t = np.abs(np.asarray(self._task.target_velocity, np.float64))
        return np.array([*np.minimum(1.0, np.maximum(self.cfg["max_speed"], v_t) / v_env), 1.0])

    def plan(self, obs, info: dict) -> np.ndarray:
        """The K actions (K, 3) minimising the horizon objective (L-BFGS, warm-started)."""
        hc = self.cost(obs, info)
        cap = self.speed_cap()
        # the solver's actions u in [-1, 1]^3 move S by u * scale per step; the env's are u * cap
        K, scale = int(self.cfg["horizon_steps"]), self.scale * cap
        S0 = hc.S0
        if self._u is None:
            # start from the prior: the actions that follow it, within the limits
            u0 = np.clip(np.diff(np.vstack([S0, hc.prior]), axis=0) / scale, -0.95, 0.95)
        else:
            u0 = np.clip(np.vstack([self._u[1:], self._u[-1:]]), -0.95, 0.95)
        scale0 = self._hessian_scale if self._u is not None else None
        if self.cfg["solver"] == "taichi":
            from .rh_kernel import solve

            self._u, self.last_iterations, self._hessian_scale = solve(
                hc, u0, scale, int(self.cfg["max_iterations"]), scale0)
            return self._u * cap

        def f(z):
            u = np.tanh(z.reshape(K, 3))
            S = S0 + np.cumsum(u * scale, axis=0)
            c, gS = hc(S)
            gu = np.cumsum(gS[::-1], axis=0)[::-1] * scale     # d S_k / d u_j = scale for j <= k
            return c, (gu * (1.0 - u * u)).ravel()

        z, self.last_iterations, self._hessian_scale = lbfgs(
            f, np.arctanh(u0).ravel(), int(self.cfg["max_iterations"]), scale0=scale0)
        self._u = np.tanh(z.reshape(K, 3))
        return self._u * cap

    def act(self, obs, info: dict) -> np.ndarray:
        t0, c0 = time.perf_counter(), time.process_time()
        self._track_liquid(info)
        u = self.plan(obs, info)
        self.solve_seconds.append(time.perf_counter() - t0)
        self.solve_cpu_seconds.append(time.process_time() - c0)
        return u[0].astype(np.float32)

    def _track_liquid(self, info: dict) -> None:
        """The liquid's translational velocity (m/s): S's, lagged by ``slosh_time`` (as in
        :class:`HorizonCost`); S's own at the episode's start (the liquid at rest with a resting
        S, or moving with S: TRANSFER+FOLLOW)."""
        v = np.asarray(info.get("source_velocity", np.zeros(3)), np.float64)[:2]
        if self._v_liquid is None:
            self._v_liquid = v.copy()
            return
        b = self.dt / (self.cfg["slosh_time"] + self.dt)
        self._v_liquid = (1.0 - b) * self._v_liquid + b * v

    # ------------------------------------------------------------------ persistence
    def save(self, path: str | Path) -> None:
        torch_save_atomic({"format": "taigym-rh/1", "agent": "rh", "net": self.net.config(),
                           "state_dict": self.net.state_dict(), "meta": self.meta,
                           "planner": {k: self.cfg[k] for k in PLANNER_DEFAULTS}}, path)

    @classmethod
    def load(cls, path: str | Path, env, **cfg) -> "RHAgent":
        return cls(env, checkpoint=path, **cfg)


def _read(path: str | Path) -> tuple[LiquidNet, dict, dict]:
    d = torch_load(path)
    if not isinstance(d, dict) or d.get("format") != "taigym-rh/1":
        raise ValueError(f"{path} is not an rh checkpoint (format taigym-rh/1)")
    net = LiquidNet(**d["net"])
    net.load_state_dict(d["state_dict"])
    net.eval()
    return net, d.get("meta", {}), d.get("planner", {})


def latency_summary(seconds: list[float]) -> dict:
    """Median and 95th percentile (ms) of per-step solve times."""
    if not seconds:
        return {"median_ms": math.nan, "p95_ms": math.nan}
    a = np.asarray(seconds) * 1e3
    return {"median_ms": float(np.median(a)), "p95_ms": float(np.percentile(a, 95))}
