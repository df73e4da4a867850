"""Pan & Manocha 2016's simplified liquid dynamics: the liquid in the source S is two numbers.

State: the volume V (m^2 in 2D) left in S's bounding volume and the mean outflow speed u (m/s).
Per control step of dt seconds, with S leaning by ``lean`` towards its pouring lip:

    h, A, c = tables(lean, V)                           (taigym.models.outflow_tables)
    u  = max(0, w . phi)          if A > 0, else 0      (system identification, taigym.models.sysid)
    V' = V - dt * k * A * u                             (k: discharge coefficient, fitted too)

with the regressors phi (Pan & Manocha 2016 Eq. 3; chosen by held-out prediction error, see
``scripts/sysid_pour.py``):

| term | value | why |
|------|-------|-----|
| ``bernoulli`` | sqrt(2 g h+) | Bernoulli from the free surface to the lip |
| ``wall_slide`` | sqrt(2 g l cos) | a particle sliding the lip-side wall (l cos: its drop, m) |
| ``previous`` | u of the last step | the jet's inertia |
| ``lean_rate`` | abs(d lean / dt) | a turning container pushes liquid over its lip |
| ``constant`` | 1 | |

k is a discharge coefficient (the jet contracts, its speed is not normal to the section): u is
the speed of the liquid leaving S, k A u the flux. Liquid leaves at the outflow section's
centroid c with velocity v = u d plus S's own velocity there; d is horizontal while the lip-side
wall still rises towards the lip, else along that wall (Pan & Manocha 2016 Fig. 9), turned by an identified
offset a + b lean (the jet also falls as it leaves). It then follows

    x(t) = c_x + r_x t + (v_x - r_x) (1 - exp(-lambda t)) / lambda,    y(t) = c_y + v_y t - g t^2 / 2,

Pan & Manocha 2016's outflow parabola (lambda = 0) with the jet's own horizontal speed (beyond S's rigid
velocity r at c, which the liquid shares with S) relaxing at an identified rate lambda (1/s).
Measured in the particle simulator: a jet a few grid cells thick
keeps falling freely but loses its horizontal speed within a few substeps (it moves with the
grid's velocity, averaged over cells as wide as the jet), so it drops nearly vertically off the
lip; at the Pour env's 6.25 mm cells lambda is 14-29 1/s (the horizontal speed halves in
25-50 ms; a 0.5 m/s jet travels at most v_x / lambda = 2-4 cm sideways), at 3 mm cells less.
a, b and lambda are fitted to where the simulated particles cross levels 2-8 cm below the lip
(Pan, Park & Manocha 2016 fits its jet to the particles' streamlines), not to their speed at the lip. A thick
jet keeps more of its speed (the grid slows it at its edges; its core flies on): for sections A
wider than A_ref the drag is lambda A_ref / A (:func:`jet_drag`; A_ref = 15 mm, identified on
fast-tilt FLIP pours by ``scripts/sysid_jet_drag.py``).

S's acceleration a sloshes the free surface (Pan & Manocha 2017's surges: a container braking towards its
lip throws liquid over it): the head h and the section A are read at the lean theta + phi, phi
the fundamental slosh mode's tilt, a damped oscillator driven towards atan(a_x / (g + a_y))
(``SimplifiedLiquid.surface_tilt``). Tilting alone does not surge more than the regression says:
on the sysid pours (tilt rates up to 2.8 rad/s) neither a lead nor a lag of the lean improves the
held-out V(t) error.

Coefficients are fitted per container shape and viscosity (a few viscosities, interpolated in
log10 viscosity) and shipped in ``data/outflow_coefficients.json``; regenerate them with
``python scripts/sysid_pour.py``.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import NamedTuple

import numpy as np

from taigym.sim.constants import GRAVITY
from taigym.sim.geometry import Container

from .outflow_tables import N_LEAN, N_VOLUME, OutflowTables, outflow_tables

TERMS = ("bernoulli", "wall_slide", "previous", "lean_rate", "constant")
COEFFICIENTS_FILE = "outflow_coefficients.json"
# damping ratio of the free surface's slosh: in FLIP at the Pour env's cells a velocity step's
# slosh loses 35-65 % of its amplitude per period (rect and oval S)
SLOSH_DAMPING = 0.1


def _all_regressors(head: float, wall_drop: float, u_prev: float,
                    lean_rate: float) -> tuple[float, float, float, float, float]:
    """Every regressor of one step, in the order of TERMS."""
    return (math.sqrt(2.0 * GRAVITY * max(head, 0.0)), math.sqrt(2.0 * GRAVITY * max(wall_drop, 0.0)),
            u_prev, abs(lean_rate), 1.0)


def regressors(head: float, wall_drop: float, u_prev: float, lean_rate: float,
               terms: tuple[str, ...] = TERMS) -> list[float]:
    """The regressors phi of one step (module docstring), in the order of ``terms``."""
    phi = _all_regressors(head, wall_drop, u_prev, lean_rate)
    return [phi[TERMS.index(t)] for t in terms]


def regressors_array(head, wall_drop, u_prev, lean_rate, terms: tuple[str, ...] = TERMS) -> list:
    """:func:`regressors` on arrays of steps (for batched rollouts)."""
    values = {"bernoulli": np.sqrt(2.0 * GRAVITY * np.maximum(head, 0.0)),
              "wall_slide": np.sqrt(2.0 * GRAVITY * np.maximum(wall_drop, 0.0)),
              "previous": u_prev, "lean_rate": np.abs(lean_rate), "constant": np.ones_like(head)}
    return [values[t] for t in terms]


def jet_directions(tables: OutflowTables, fit: "OutflowFit", leans: np.ndarray):
    """:meth:`SimplifiedLiquid.lookup`'s wall drop and jet direction on arrays of leans, for a
    pour to the right (for batched rollouts): (drop (m), d_x, d_y)."""
    li = np.clip(leans, 0.0, tables.leans[-1]) / (tables.leans[1] - tables.leans[0])
    k = np.minimum(li.astype(np.int64), len(tables.leans) - 2)
    f = li - k
    drop = tables.wall_drop[k] * (1 - f) + tables.wall_drop[k + 1] * f
    wdir = tables.wall_direction[k] * (1 - f)[:, None] + tables.wall_direction[k + 1] * f[:, None]
    wdir /= np.linalg.norm(wdir, axis=1, keepdims=True)
    rising = wdir[:, 1] > 0.0
    dx = np.where(rising, 1.0, wdir[:, 0])
    dy = np.where(rising, 0.0, wdir[:, 1])
    if fit.direction != (0.0, 0.0):
        off = fit.direction[0] + fit.direction[1] * np.clip(leans, 0.0, tables.leans[-1])
        co, so = np.cos(off), np.sin(off)
        dx, dy = co * dx - so * dy, so * dx + co * dy
    return drop, dx, dy


@dataclass(frozen=True)
class OutflowFit:
    """Identified coefficients for one container shape and viscosity."""

    shape: str
    viscosity: float                    # Pa s
    terms: tuple[str, ...]
    weights: tuple[float, ...]
    discharge: float                    # k, dimensionless
    direction: tuple[float, float] = (0.0, 0.0)   # jet direction offset a + b * lean (rad)
    drag: float = 0.0                   # lambda, 1/s: relaxation rate of the thin jet's horizontal speed
    drag_section: float = 0.0           # A_ref, m: jets thicker than this are slowed less (0: never)

    def to_dict(self) -> dict:
        return {"shape": self.shape, "viscosity": self.viscosity, "terms": list(self.terms),
                "weights": list(self.weights), "discharge": self.discharge,
                "direction": list(self.direction), "drag": self.drag,
                "drag_section": self.drag_section}

    @classmethod
    def from_dict(cls, d: dict) -> "OutflowFit":
        return cls(d["shape"], float(d["viscosity"]), tuple(d["terms"]),
                   tuple(float(w) for w in d["weights"]), float(d["discharge"]),
                   tuple(float(x) for x in d.get("direction", (0.0, 0.0))),
                   float(d.get("drag", 0.0)), float(d.get("drag_section", 0.0)))


def interpolate_fits(fits: list[OutflowFit], viscosity: float) -> OutflowFit:
    """The fit at ``viscosity``: linear in log10 viscosity between the two nearest fitted
    viscosities (of the same shape and terms), clamped outside the fitted range."""
    fits = sorted(fits, key=lambda f: f.viscosity)
    if not fits:
        raise ValueError("no fitted outflow coefficients to interpolate")
    x = math.log10(max(viscosity, 1e-6))
    xs = [math.log10(f.viscosity) for f in fits]
    if x <= xs[0] or len(fits) == 1:
        return fits[0]
    if x >= xs[-1]:
        return fits[-1]
    k = next(i for i in range(1, len(xs)) if x <= xs[i])
    a, b = fits[k - 1], fits[k]
    t = (x - xs[k - 1]) / (xs[k] - xs[k - 1])
    w = tuple((1 - t) * wa + t * wb for wa, wb in zip(a.weights, b.weights))
    direction = tuple((1 - t) * da + t * db for da, db in zip(a.direction, b.direction))
    return OutflowFit(a.shape, float(viscosity), a.terms, w,
                      (1 - t) * a.discharge + t * b.discharge, direction,
                      (1 - t) * a.drag + t * b.drag, (1 - t) * a.drag_section + t * b.drag_section)


def default_path() -> Path:
    return Path(str(resources.files("taigym.models").joinpath("data", COEFFICIENTS_FILE)))


@lru_cache(maxsize=8)
def load_fits(path: str | None = None) -> dict[str, list[OutflowFit]]:
    """Fitted coefficients by shape, from ``path`` or the shipped file."""
    p = Path(path) if path else default_path()
    if not p.exists():
        raise FileNotFoundError(f"no outflow coefficients at {p}; run `python scripts/sysid_pour.py`")
    data = json.loads(p.read_text())
    out: dict[str, list[OutflowFit]] = {}
    for d in data["fits"]:
        f = OutflowFit.from_dict(d)
        out.setdefault(f.shape, []).append(f)
    return out


@lru_cache(maxsize=1024)
def fit_for(shape: str, viscosity: float, path: str | None = None) -> OutflowFit:
    """The fit for a container shape at a viscosity (Pa s), from ``path`` or the shipped file
    (interpolated, :func:`interpolate_fits`; cached: a fit is immutable)."""
    fits = load_fits(path)
    if shape not in fits:
        raise ValueError(f"no outflow coefficients for container shape {shape!r}; fitted: "
                         f"{', '.join(sorted(fits))}")
    return interpolate_fits(fits[shape], viscosity)


class Outflow(NamedTuple):
    """What left S in one step: ``volume`` (m^2), ``speed`` u (m/s), the section's centroid
    ``start`` (world, m), the jet's velocity ``velocity`` (world, m/s, S's motion included) and
    of it ``carried``, S's rigid velocity at the start (m/s)."""

    volume: float
    speed: float
    section: float
    start: tuple[float, float]
    velocity: tuple[float, float]
    carried: tuple[float, float] = (0.0, 0.0)


class SimplifiedLiquid:
    """The (V, u) state of the liquid in one source container, stepped per control step."""

    def __init__(self, shape: Container, volume: float, fit: OutflowFit,
                 tables: OutflowTables | None = None, slosh: bool = True,
                 velocity: tuple[float, float] = (0.0, 0.0)):
        if volume < 0 or not math.isfinite(volume):
            raise ValueError(f"volume must be >= 0 m^2, got {volume!r}")
        self.shape = shape
        self.tables = t = tables if tables is not None else outflow_tables(shape)
        # the grid's size and scales for the pure-Python bilinear lookups (per step, per env)
        self._n_l, self._n_v = len(t.leans), len(t.volumes)
        self._lean_scale = (self._n_l - 1) / float(t.leans[-1])
        self._vol_scale = (self._n_v - 1) / float(t.volumes[-1])
        self.fit = fit
        self.volume = float(min(volume, self.tables.capacity))
        self.speed = 0.0
        self.slosh = slosh                              # False: the free surface ignores S's acceleration
        # the velocity (m/s) the liquid last moved with S: S's in the last step; at the start the
        # liquid's own (S may start moving under liquid at rest: a velocity step, a slosh)
        self._velocity = (float(velocity[0]), float(velocity[1]))
        self._tilt = (0.0, 0.0)                         # surface tilt from S's acceleration (rad), its rate (rad/s)

    @property
    def fit(self) -> OutflowFit | None:
        """The identified coefficients (None: lookups only, as in the system identification)."""
        return self._fit

    @fit.setter
    def fit(self, fit: OutflowFit | None) -> None:
        self._fit = fit
        # per-step constants of the fit: (weight, index in step's regressor tuple) in the fit's
        # term order, and the jet direction offset (None if zero)
        self._weighted = () if fit is None else tuple(
            (w, TERMS.index(term)) for w, term in zip(fit.weights, fit.terms))
        self._offset = None if fit is None or fit.direction == (0.0, 0.0) else fit.direction

    @property
    def surface(self) -> tuple[float, float, float, float]:
        """The slosh state: the free surface's tilt (rad), its rate (rad/s) and the velocity
        (m/s, x and y) of S it last saw (for a planner starting from this state)."""
        return (*self._tilt, *self._velocity)

    def slosh_frequency(self) -> float:
        """omega (rad/s) of the liquid's fundamental slosh mode across S's width W at the
        current depth H: omega^2 = (pi g / W) tanh(pi H / W) (linear water waves; FLIP at the
        Pour env's cells, rect S, 6 cm deep: period 0.35 s, this formula 0.31 s)."""
        w = self.shape.width
        depth = max(self.volume / w, 1e-4)
        return math.sqrt(math.pi * GRAVITY / w * math.tanh(math.pi * depth / w))

    def surface_tilt(self, vx: float, vy: float, dt: float) -> float:
        """The free surface's tilt (rad, counter-clockwise) from S's acceleration a: the gravity
        the liquid feels, g - a, would tilt it by atan(a_x / (g + a_y)); it sloshes towards that
        as the fundamental mode, a damped oscillator (omega: :meth:`slosh_frequency`, damping
        ratio SLOSH_DAMPING), so a velocity step dv tilts it by up to about omega dv / g and it
        rebounds. ``(vx, vy)`` (m/s) is S's velocity over the last ``dt`` s; the state is the
        tilt, its rate and the previous velocity."""
        (px, py), self._velocity = self._velocity, (vx, vy)
        phi, rate = self._tilt
        if dt <= 0.0 or (vx == px and vy == py and abs(phi) < 1e-4 and abs(rate) < 1e-3):
            self._tilt = (0.0, 0.0)
            return 0.0
        target = math.atan2((vx - px) / dt, max(GRAVITY + (vy - py) / dt, 0.1 * GRAVITY))
        om = self.slosh_frequency()
        n = max(1, int(math.ceil(dt * om / 0.1)))       # semi-implicit Euler, omega h <= 0.1
        h = dt / n
        stiff, damp = -om * om, 2.0 * SLOSH_DAMPING * om
        for _ in range(n):
            rate += h * (stiff * (phi - target) - damp * rate)
            phi += h * rate
        self._tilt = (phi, rate)
        return phi

    def _cell(self, lean: float) -> tuple[int, int, float, float, float]:
        """The table cell of ``lean`` (rad, >= 0 towards the pouring lip) and the current volume:
        the flat index of node (i, j) (its (i, j + 1) is 4 further, (i + 1, j) ``4 n_v``
        further), i (for the wall table), the lean in grid units (clamped) and the fractions
        along the lean and the volume."""
        n_l, n_v = self._n_l, self._n_v
        li = min(max(lean, 0.0) * self._lean_scale, n_l - 1.0)
        vj = min(max(self.volume, 0.0) * self._vol_scale, n_v - 1.0)
        i, j = int(li), int(vj)
        if i > n_l - 2:
            i = n_l - 2
        if j > n_v - 2:
            j = n_v - 2
        return (i * n_v + j) * 4, i, li, li - i, vj - j

    def lookup(self, theta: float) -> tuple[float, float, float, float, float, float, float]:
        """(h, A, c_x, c_y in S's frame, wall drop, d_x, d_y world) at pose angle ``theta`` for
        the current volume; the pouring lip is the right one for theta <= 0, else the left.
        Bilinear in pure Python on flat copies of the tables (no NumPy calls): this is the
        simplified env's inner loop."""
        sign = 1.0 if theta <= 0.0 else -1.0            # mirror a lean to the left
        k0, i, li, fi, fj = self._cell(-theta * sign)
        f, k1, gi = self.tables.flat, k0 + 4 * self._n_v, 1.0 - fi
        a, b = f[k0], f[k1]
        h = (a + (f[k0 + 4] - a) * fj) * gi + (b + (f[k1 + 4] - b) * fj) * fi
        a, b = f[k0 + 1], f[k1 + 1]
        sec = (a + (f[k0 + 5] - a) * fj) * gi + (b + (f[k1 + 5] - b) * fj) * fi
        a, b = f[k0 + 2], f[k1 + 2]
        cx = (a + (f[k0 + 6] - a) * fj) * gi + (b + (f[k1 + 6] - b) * fj) * fi
        a, b = f[k0 + 3], f[k1 + 3]
        cy = (a + (f[k0 + 7] - a) * fj) * gi + (b + (f[k1 + 7] - b) * fj) * fi
        if h <= 0.0:
            sec = 0.0                                   # surface below the lip: no section
        w, k = self.tables.flat_wall, 3 * i
        drop = w[k] + (w[k + 3] - w[k]) * fi
        wx = w[k + 1] + (w[k + 4] - w[k + 1]) * fi
        wy = w[k + 2] + (w[k + 5] - w[k + 2]) * fi
        # jet direction: horizontal while the lip-side wall rises towards the lip, else along it,
        # turned by the identified offset (a pour to the right; mirrored below)
        if wy > 0.0:
            dx, dy = 1.0, 0.0
        else:
            n = math.hypot(wx, wy) or 1.0
            dx, dy = wx / n, wy / n
        if self._offset is not None:
            off = self._offset[0] + self._offset[1] * (li / self._lean_scale)
            co, so = math.cos(off), math.sin(off)
            dx, dy = co * dx - so * dy, so * dx + co * dy
        return h, sec, sign * cx, cy, drop, sign * dx, dy

    def head(self, theta: float) -> float:
        """h alone (m): the free surface's height over the pouring lip at pose angle ``theta``."""
        return self.head_section(theta)[0]

    def head_section(self, theta: float) -> tuple[float, float]:
        """(h, A) of :meth:`lookup` alone, at pose angle ``theta`` for the current volume."""
        k0, _, _, fi, fj = self._cell(abs(theta))
        f, k1, gi = self.tables.flat, k0 + 4 * self._n_v, 1.0 - fi
        a, b = f[k0], f[k1]
        h = (a + (f[k0 + 4] - a) * fj) * gi + (b + (f[k1 + 4] - b) * fj) * fi
        if h <= 0.0:
            return h, 0.0
        a, b = f[k0 + 1], f[k1 + 1]
        return h, (a + (f[k0 + 5] - a) * fj) * gi + (b + (f[k1 + 5] - b) * fj) * fi

    def step(self, pose, velocity, theta_prev: float, dt: float) -> Outflow:
        """Advance by ``dt`` s with S at ``pose`` = (x, y, theta) moving at ``velocity`` =
        (vx, vy, omega); ``theta_prev`` is the angle one step earlier (for the lean rate).

        S's acceleration tilts the free surface (:meth:`surface_tilt`): the head h and the
        section A are those at the lean theta + tilt (a container braking towards its lip
        surges over it)."""
        x, y, th = map(float, pose)                     # Python floats: NumPy scalars are slower
        vx, vy, om = map(float, velocity)
        tilt = self.surface_tilt(vx, vy, dt) if self.slosh else 0.0
        if (th + tilt) * th > 0.0 or tilt == 0.0:
            h, a, cx, cy, drop, dx, dy = self.lookup(th)
            if tilt != 0.0:
                h, a = self.head_section(th + tilt)
        else:                                           # sloshed past upright: over the other lip
            h, a, cx, cy, drop, dx, dy = self.lookup(th + tilt)
        c, s = math.cos(th), math.sin(th)
        wx, wy = x + c * cx - s * cy, y + s * cx + c * cy
        if a <= 0.0 or self.volume <= 0.0:
            self.speed = 0.0
            return Outflow(0.0, 0.0, 0.0, (wx, wy), (0.0, 0.0))
        # w . phi, summed in the fit's term order (as ``regressors`` lists them)
        phi = _all_regressors(h, drop, self.speed, (th - theta_prev) / dt)
        u = 0.0
        for w, k in self._weighted:
            u += w * phi[k]
        u = max(0.0, u)
        out = min(self.volume, dt * self._fit.discharge * a * u)
        self.volume -= out
        self.speed = u
        # S's rigid velocity at the section's centroid plus the jet's own
        rx, ry = vx - om * (wy - y), vy + om * (wx - x)
        return Outflow(out, u, a, (wx, wy), (rx + u * dx, ry + u * dy), (rx, ry))


class SimplifiedLiquidBatch:
    """:class:`SimplifiedLiquid` for B source containers at once, for vectorised envs: the state
    (V, u, the slosh tilt and rate, the last velocity) is arrays over the batch, each member has
    its own container, tables and fit (:meth:`set`), and :meth:`step` advances any subset of the
    members in array operations. Step for step the numbers of B ``SimplifiedLiquid`` objects,
    up to the last bit where NumPy's exp, tanh, atan2 and hypot round differently from libm's."""

    _TAB = N_LEAN * N_VOLUME * 4                        # (h, A, c_x, c_y) per table node
    _GATHER = np.arange(8)                              # node (i, j) and (i, j + 1), 4 values each

    def __init__(self, batch_size: int):
        B = self.B = int(batch_size)
        self.volume = np.zeros(B)                       # V (m^2)
        self.speed = np.zeros(B)                        # u (m/s)
        self.tilt = np.zeros(B)                         # the free surface's slosh tilt (rad)
        self.tilt_rate = np.zeros(B)                    # and its rate (rad/s)
        self.last_velocity = np.zeros((B, 2))           # S's velocity the liquid last moved with (m/s)
        self.width = np.ones(B)                         # S's opening width (m): the slosh mode
        self.capacity = np.ones(B)                      # S's interior area (m^2)
        self._tab = np.zeros((B, self._TAB))            # each member's OutflowTables.flat
        self._wall = np.zeros((B, N_LEAN * 3))          # and .flat_wall
        self._lean_scale = np.ones(B)
        self._vol_scale = np.ones(B)
        self._weights = np.zeros((B, len(TERMS)))       # the fit's weights in TERMS order (0: unused)
        self._discharge = np.zeros(B)
        self._offset = np.zeros((B, 2))                 # jet direction offset a + b lean (rad)
        self._has_offset = np.zeros(B, bool)
        self.drag = np.zeros(B)                         # lambda (1/s) and A_ref (m): jet_drag's
        self.drag_section = np.zeros(B)

    @staticmethod
    def member_row(shape: Container, volume: float, fit: OutflowFit, tables: OutflowTables | None = None,
                   velocity: tuple[float, float] = (0.0, 0.0)) -> dict:
        """The row of one member holding ``volume`` m^2 in ``shape``, as ``SimplifiedLiquid(shape,
        volume, fit, tables, velocity=velocity)`` starts (for :meth:`load`; keep it to reset a
        member to the same start without the tables)."""
        if volume < 0 or not math.isfinite(volume):
            raise ValueError(f"volume must be >= 0 m^2, got {volume!r}")
        t = tables if tables is not None else outflow_tables(shape)
        if (len(t.leans), len(t.volumes)) != (N_LEAN, N_VOLUME):
            raise ValueError(f"tables must be {N_LEAN} x {N_VOLUME} (leans x volumes), got "
                             f"{len(t.leans)} x {len(t.volumes)}")
        weights = np.zeros(len(TERMS))
        for w, term in zip(fit.weights, fit.terms):
            weights[TERMS.index(term)] = w
        return {"tab": np.frombuffer(t.flat), "wall": np.frombuffer(t.flat_wall),
                "lean_scale": (N_LEAN - 1) / float(t.leans[-1]),
                "vol_scale": (N_VOLUME - 1) / float(t.volumes[-1]),
                "volume": float(min(volume, t.capacity)), "capacity": t.capacity,
                "velocity": (float(velocity[0]), float(velocity[1])), "width": shape.width,
                "weights": weights, "discharge": fit.discharge, "offset": fit.direction,
                "has_offset": fit.direction != (0.0, 0.0), "drag": fit.drag,
                "drag_section": fit.drag_section}

    def load(self, b: int, row: dict) -> None:
        """Member b starts as ``row`` (:meth:`member_row`) says."""
        self._tab[b], self._wall[b] = row["tab"], row["wall"]
        self._lean_scale[b], self._vol_scale[b] = row["lean_scale"], row["vol_scale"]
        self.volume[b], self.capacity[b] = row["volume"], row["capacity"]
        self.speed[b] = self.tilt[b] = self.tilt_rate[b] = 0.0
        self.last_velocity[b] = row["velocity"]
        self.width[b] = row["width"]
        self._weights[b], self._discharge[b] = row["weights"], row["discharge"]
        self._offset[b], self._has_offset[b] = row["offset"], row["has_offset"]
        self.drag[b], self.drag_section[b] = row["drag"], row["drag_section"]

    def set(self, b: int, shape: Container, volume: float, fit: OutflowFit,
            tables: OutflowTables | None = None, velocity: tuple[float, float] = (0.0, 0.0)) -> None:
        """Member b holds ``volume`` m^2 in ``shape`` (as ``SimplifiedLiquid(shape, volume, fit,
        tables, velocity=velocity)``)."""
        self.load(b, self.member_row(shape, volume, fit, tables, velocity))

    def _nodes(self, lean: np.ndarray, idx: np.ndarray):
        """``SimplifiedLiquid._cell`` on arrays: the 8 values of nodes (i, j), (i, j + 1) and of
        (i + 1, j), (i + 1, j + 1), i, the lean in grid units and the fractions along both axes."""
        li = np.minimum(np.maximum(lean, 0.0) * self._lean_scale[idx], N_LEAN - 1.0)
        vj = np.minimum(np.maximum(self.volume[idx], 0.0) * self._vol_scale[idx], N_VOLUME - 1.0)
        i = np.minimum(li.astype(np.int64), N_LEAN - 2)
        j = np.minimum(vj.astype(np.int64), N_VOLUME - 2)
        k0 = idx * self._TAB + (i * N_VOLUME + j) * 4
        tab = self._tab.reshape(-1)
        lo = tab[k0[:, None] + self._GATHER]
        hi = tab[(k0 + 4 * N_VOLUME)[:, None] + self._GATHER]
        return lo, hi, i, li, li - i, vj - j

    @staticmethod
    def _bilinear(lo, hi, fi, fj, channels: int):
        """The bilinear interpolant of the first ``channels`` values, in ``lookup``'s order of
        operations."""
        a, b = lo[:, :channels], hi[:, :channels]
        fj, fi = fj[:, None], fi[:, None]
        a2, b2 = lo[:, 4:4 + channels], hi[:, 4:4 + channels]
        return (a + (a2 - a) * fj) * (1.0 - fi) + (b + (b2 - b) * fj) * fi

    def lookup(self, theta: np.ndarray, idx: np.ndarray):
        """:meth:`SimplifiedLiquid.lookup` of members ``idx`` at pose angles ``theta``: arrays
        h, A, c_x, c_y (S frame), wall drop, d_x, d_y."""
        sign = np.where(theta <= 0.0, 1.0, -1.0)
        lo, hi, i, li, fi, fj = self._nodes(-theta * sign, idx)
        h, sec, cx, cy = self._bilinear(lo, hi, fi, fj, 4).T
        sec = np.where(h <= 0.0, 0.0, sec)
        w = self._wall.reshape(-1)[(idx * (N_LEAN * 3) + 3 * i)[:, None] + np.arange(6)]
        drop = w[:, 0] + (w[:, 3] - w[:, 0]) * fi
        wx = w[:, 1] + (w[:, 4] - w[:, 1]) * fi
        wy = w[:, 2] + (w[:, 5] - w[:, 2]) * fi
        n = np.hypot(wx, wy)
        n = np.where(n == 0.0, 1.0, n)
        rising = wy > 0.0
        dx, dy = np.where(rising, 1.0, wx / n), np.where(rising, 0.0, wy / n)
        if self._has_offset[idx].any():
            a, b = self._offset[idx].T
            off = np.where(self._has_offset[idx], a + b * (li / self._lean_scale[idx]), 0.0)
            co, so = np.cos(off), np.sin(off)
            dx, dy = (np.where(self._has_offset[idx], co * dx - so * dy, dx),
                      np.where(self._has_offset[idx], so * dx + co * dy, dy))
        return h, sec, sign * cx, cy, drop, sign * dx, dy

    def head_section(self, theta: np.ndarray, idx: np.ndarray):
        """:meth:`SimplifiedLiquid.head_section` of members ``idx``: arrays h (m) and A (m)."""
        lo, hi, _, _, fi, fj = self._nodes(np.abs(theta), idx)
        h, sec = self._bilinear(lo, hi, fi, fj, 2).T
        return h, np.where(h <= 0.0, 0.0, sec)

    def step(self, pose: np.ndarray, velocity: np.ndarray, theta_prev: np.ndarray, dt: float,
             idx: np.ndarray) -> dict[str, np.ndarray]:
        """:meth:`SimplifiedLiquid.step` of members ``idx`` with S at ``pose`` (n, 3) moving at
        ``velocity`` (n, 3): the outflow as arrays, keyed as :class:`Outflow`'s fields
        (``start``, ``velocity`` and ``carried`` (n, 2))."""
        x, y, th = pose.T
        vx, vy, om = velocity.T
        tilt, rate = slosh_array(self.tilt[idx], self.tilt_rate[idx], (vx, vy), self.last_velocity[idx].T,
                                 self.volume[idx], self.width[idx], dt)
        self.tilt[idx], self.tilt_rate[idx] = tilt, rate
        self.last_velocity[idx] = velocity[:, :2]
        # the surface tilted past upright reads the tables at the other lip
        same = ((th + tilt) * th > 0.0) | (tilt == 0.0)
        h, a, cx, cy, drop, dx, dy = self.lookup(np.where(same, th, th + tilt), idx)
        sloshed = same & (tilt != 0.0)
        if sloshed.any():
            h2, a2 = self.head_section(th + tilt, idx)
            h, a = np.where(sloshed, h2, h), np.where(sloshed, a2, a)
        c, s = np.cos(th), np.sin(th)
        wx, wy = x + c * cx - s * cy, y + s * cx + c * cy
        vol = self.volume[idx]
        flowing = (a > 0.0) & (vol > 0.0)
        phi = regressors_array(h, drop, self.speed[idx], (th - theta_prev) / dt)
        u = np.zeros(len(idx))
        for k, term in enumerate(phi):                  # in TERMS order, as SimplifiedLiquid sums
            u = u + self._weights[idx, k] * term
        u = np.where(flowing, np.maximum(0.0, u), 0.0)
        out = np.where(flowing, np.minimum(vol, dt * self._discharge[idx] * a * u), 0.0)
        self.volume[idx] = vol - out
        self.speed[idx] = u
        rx, ry = vx - om * (wy - y), vy + om * (wx - x)
        rx, ry = np.where(flowing, rx, 0.0), np.where(flowing, ry, 0.0)
        return {"volume": out, "speed": u, "section": np.where(flowing, a, 0.0),
                "start": np.column_stack((wx, wy)),
                "velocity": np.column_stack((rx + u * dx, ry + u * dy)),
                "carried": np.column_stack((rx, ry))}


def slosh_array(tilt, rate, velocity, previous, volume, width: float, dt: float):
    """:meth:`SimplifiedLiquid.surface_tilt` on arrays of trajectories (for batched rollouts),
    step for step the same numbers (the same substeps per trajectory): tilt, rate (rad, rad/s)
    after ``dt`` s with S at ``velocity`` (2, M) having moved at ``previous`` (2, M) the step
    before, holding ``volume`` (M,) in a container ``width`` m wide."""
    vx, vy = velocity
    px, py = previous
    at_rest = (vx == px) & (vy == py) & (np.abs(tilt) < 1e-4) & (np.abs(rate) < 1e-3)
    target = np.arctan2((vx - px) / dt, np.maximum(GRAVITY + (vy - py) / dt, 0.1 * GRAVITY))
    depth = np.maximum(volume / width, 1e-4)
    om = np.sqrt(math.pi * GRAVITY / width * np.tanh(math.pi * depth / width))
    n = np.maximum(1, np.ceil(dt * om / 0.1))
    h = dt / n
    phi, r = np.array(tilt, np.float64), np.array(rate, np.float64)
    for k in range(int(n.max())):
        live = k < n
        r = np.where(live, r + h * (-om * om * (phi - target) - 2.0 * SLOSH_DAMPING * om * r), r)
        phi = np.where(live, phi + h * r, phi)
    return np.where(at_rest, 0.0, phi), np.where(at_rest, 0.0, r)


def jet_drag(fit: OutflowFit, section):
    """lambda (1/s) of a jet leaving through an outflow section ``section`` (m, float or array):
    the identified thin-jet drag, scaled by A_ref / A for sections wider than A_ref
    (``fit.drag_section``; ``scripts/sysid_jet_drag.py``): FLIP slows a jet at its edges, where
    the grid averages it with the air around it, and a thick jet's core keeps its speed."""
    a_ref = fit.drag_section
    if isinstance(section, np.ndarray):
        return fit.drag * np.minimum(1.0, a_ref / np.maximum(section, 1e-12)) if a_ref > 0.0 else \
            np.full(section.shape, fit.drag)
    return fit.drag * a_ref / section if section > a_ref > 0.0 else fit.drag


def horizontal_travel(t, drag):
    """The factor of v_x in the jet's horizontal travel after t s (s; t itself without drag):
    (1 - exp(-drag t)) / drag. Works on floats and arrays (of t, and of drag)."""
    if isinstance(drag, np.ndarray):
        d = np.maximum(drag, 1e-9)
        return -np.expm1(-d * t) / d
    if drag <= 1e-9:
        return t
    return -np.expm1(-drag * t) / drag if isinstance(t, np.ndarray) else -math.expm1(-drag * t) / drag


def path_x(x0: float, vx: float, t, drag, carried: float = 0.0):
    """x (m) of the outflow path t s after leaving x0 with horizontal velocity vx, of which
    ``carried`` is S's rigid motion: the drag relaxes only the jet's own speed vx - carried
    (module docstring); the liquid keeps what it shared with S."""
    return x0 + carried * t + (vx - carried) * horizontal_travel(t, drag)


def landing(start, velocity, height: float, drag: float = 0.0,
            carried: float = 0.0) -> tuple[float, float] | None:
    """Where and when the outflow path (module docstring; ``drag`` = lambda, 1/s, on the
    horizontal velocity beyond S's ``carried`` one, :func:`path_x`) from ``start`` with
    ``velocity`` comes down through the altitude ``height`` (m): (x, flight time s), or None if
    it never reaches it."""
    x0, y0 = start
    vx, vy = velocity
    disc = vy * vy + 2.0 * GRAVITY * (y0 - height)
    if disc < 0.0:
        return None
    t = (vy + math.sqrt(disc)) / GRAVITY               # the descending crossing
    if t < 0.0:
        return None
    return path_x(x0, vx, t, drag, carried), t
