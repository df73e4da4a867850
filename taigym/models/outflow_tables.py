"""Pan & Manocha 2016's per-container lookup tables over (lean angle, volume), computed from geometry.

The source container S leans by ``lean`` rad (>= 0) towards its RIGHT lip, the pouring lip
(a pose theta = -lean: the env pours to the right). Its liquid, ``volume`` m^2 (2D: an area per
unit depth), is taken to lie below a horizontal free surface, with the opening closed (the
container's "bounding volume"): when the liquid is more than S can hold at that lean, the free
surface stands above the lip and the excess flows out. For each (lean, volume) the tables give

| table | meaning | unit |
|-------|---------|------|
| ``head`` | h: height of the free surface above the pouring lip (< 0: below it, no outflow) | m |
| ``section`` | A: length of the opening chord below the free surface, the outflow cross-section (2D; 0 while h <= 0) | m |
| ``centroid`` | c: midpoint of that chord, in S's frame (x, y) | m |

and per lean angle ``wall_drop`` (how far the lip-side wall falls towards the lip: height of the
wall's inner end above the lip, >= 0; Pan & Manocha 2016's l cos(theta) for a particle sliding the wall)
and ``wall_direction`` (unit vector along that wall towards the lip, world axes). Lookup is
bilinear; partial derivatives are those of the bilinear interpolant (finite differences of the
table), as in Pan & Manocha 2016. The built-in containers are symmetric, so a lean to the left uses the
same tables mirrored in x (``taigym.models.simplified`` does that).

Computation: the interior's width at height y is piecewise linear between vertex heights, so the
area below a level is integrated exactly by the trapezoid rule on a level grid that contains the
vertex heights; the level that holds a volume is then found by interpolation. Tables are cached
in memory and on disk (``$TAIGYM_CACHE_DIR``, default ``~/.cache/taigym``), keyed by the
container's interior polygon and the table resolution.
"""

from __future__ import annotations

import hashlib
import math
import os
import tempfile
from array import array
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from taigym.sim.geometry import Container

TABLE_VERSION = 2                   #: 2: widths measured at vertex heights only (the same tables to 1e-12 m)
N_LEAN = 91                 #: lean angles from 0 to pi (2 degree steps)
N_VOLUME = 65               #: volumes from 0 to the interior area
N_LEVEL = 64                #: uniform levels added to the vertex heights (head error < 0.1 mm at 10 cm)


def cache_dir() -> Path:
    """Where tables are cached on disk: ``$TAIGYM_CACHE_DIR`` or ``~/.cache/taigym``."""
    root = os.environ.get("TAIGYM_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "taigym")
    return Path(root)


def _widths(polys: np.ndarray, levels: np.ndarray) -> np.ndarray:
    """Total width (m) of each CCW polygon's interior (polys (L, K, 2)) on each horizontal line
    y = levels (L, M): (L, M)."""
    a, b = polys[:, None, :, :], np.roll(polys, -1, axis=1)[:, None, :, :]
    ay, by = a[..., 1], b[..., 1]
    y = levels[:, :, None]
    up = (ay <= y) & (y < by)                     # edges going up bound the interior on the right
    down = (by <= y) & (y < ay)                   # edges going down bound it on the left
    dy = np.where(by != ay, by - ay, 1.0)
    x = a[..., 0] + (y - ay) * (b[..., 0] - a[..., 0]) / dy
    return np.sum(np.where(up, x, 0.0) - np.where(down, x, 0.0), axis=2)


def _volume_levels(polys: np.ndarray, volumes: np.ndarray) -> np.ndarray:
    """Free-surface level (m, world y) holding each volume (m^2) in each polygon (L, K, 2),
    opening closed: (L, len(volumes))."""
    ys = polys[..., 1]
    n_poly, n_vert = ys.shape
    lo, hi = ys.min(axis=1, keepdims=True), ys.max(axis=1, keepdims=True)
    levels = np.sort(np.concatenate([ys, lo + (hi - lo) * np.linspace(0, 1, N_LEVEL)], axis=1), axis=1)
    # the width is linear between consecutive vertex heights, so it is measured at those only
    # (just above each, and a hair under each: the one-sided limits) and interpolated on each
    # interval to the grid's levels; the area below each level is then the trapezoid rule, exact
    # on a grid that contains the vertex heights
    vert = np.sort(ys, axis=1)
    w_up = _widths(polys, vert)
    w_down = _widths(polys, vert - 1e-12 * (hi - lo))
    span = np.diff(vert, axis=1)
    slope = (w_down[:, 1:] - w_up[:, :-1]) / np.where(span > 0.0, span, 1.0)    # (L, K - 1)
    rows = np.arange(n_poly)[:, None]

    def width(strict: bool) -> np.ndarray:
        # the interval [vert_k, vert_k+1] holding each level: from above it (level >= vert_k)
        # or, strict, from below it (level > vert_k)
        below = vert[:, None, :] < levels[:, :, None] if strict else vert[:, None, :] <= levels[:, :, None]
        k = np.clip(np.count_nonzero(below, axis=2) - 1, 0, n_vert - 2)
        return w_up[rows, k] + slope[rows, k] * (levels - vert[rows, k])

    w_above, w_below = width(False), width(True)
    area = np.concatenate([np.zeros((n_poly, 1)), np.cumsum(
        0.5 * (w_above[:, :-1] + w_below[:, 1:]) * np.diff(levels, axis=1), axis=1)], axis=1)
    return np.stack([np.interp(volumes, area[k], levels[k]) for k in range(n_poly)])


@dataclass(frozen=True)
class OutflowTables:
    """Lookup tables of one container (module docstring). Arrays are (N_LEAN, N_VOLUME) unless
    per lean; ``leans`` and ``volumes`` are the grid axes (rad, m^2)."""

    leans: np.ndarray
    volumes: np.ndarray
    head: np.ndarray
    section: np.ndarray
    centroid: np.ndarray          # (N_LEAN, N_VOLUME, 2)
    wall_drop: np.ndarray         # (N_LEAN,)
    wall_direction: np.ndarray    # (N_LEAN, 2)
    width: float                  # opening width (m)
    capacity: float               # interior area (m^2)

    def __post_init__(self) -> None:
        # (h, A, c_x, c_y) stacked per node, for one slice per lookup
        stacked = np.stack([self.head, self.section, self.centroid[..., 0], self.centroid[..., 1]],
                           axis=-1)
        wall = np.column_stack([self.wall_drop, self.wall_direction])
        object.__setattr__(self, "_stacked", stacked)
        object.__setattr__(self, "_wall", wall)
        # the same as flat arrays of Python floats, for the env's per-step lookups
        # (SimplifiedLiquid.lookup: indexing them needs no NumPy call): node (i, j)'s (h, A, c_x,
        # c_y) at 4 (i N_VOLUME + j), lean i's (drop, direction x, y) at 3 i
        object.__setattr__(self, "flat", array("d", stacked.tobytes()))
        object.__setattr__(self, "flat_wall", array("d", wall.tobytes()))

    def lookup(self, lean: float, volume: float) -> tuple[float, float, float, float]:
        """(h, A, c_x, c_y) at one (lean, volume), bilinear; clamped to the grid."""
        i, fi = _cell(lean, self.leans[-1], len(self.leans))
        j, fj = _cell(volume, self.volumes[-1], len(self.volumes))
        q = self._stacked[i:i + 2, j:j + 2]                  # (2, 2, 4)
        row = q[:, 0] + (q[:, 1] - q[:, 0]) * fj               # (2, 4) along the volume
        h, a, cx, cy = (row[0] + (row[1] - row[0]) * fi).tolist()
        return h, (a if h > 0.0 else 0.0), cx, cy

    def wall(self, lean: float) -> tuple[float, float, float]:
        """(wall_drop, direction x, direction y) at a lean angle, linear in the lean."""
        i, f = _cell(lean, self.leans[-1], len(self.leans))
        q = self._wall[i:i + 2]
        d, vx, vy = (q[0] + (q[1] - q[0]) * f).tolist()
        n = math.hypot(vx, vy) or 1.0
        return d, vx / n, vy / n

    def max_lean(self, volume: float) -> float:
        """Smallest lean (rad) at which ``volume`` reaches the pouring lip (quasi-static max tilt,
        as ``Container.max_tilt_angle`` but from the tables: linear between 2 degree nodes)."""
        j, fj = _cell(volume, self.volumes[-1], len(self.volumes))
        head = self.head[:, j] + (self.head[:, j + 1] - self.head[:, j]) * fj
        k = int(np.argmax(head >= 0.0))
        if head[k] < 0.0:
            return float(self.leans[-1])
        if k == 0:
            return 0.0
        a, b = head[k - 1], head[k]
        return float(self.leans[k - 1] + (self.leans[k] - self.leans[k - 1]) * (-a / (b - a)))

    def interpolate(self, leans: np.ndarray, volumes: np.ndarray,
                    partials: bool = True) -> dict[str, np.ndarray]:
        """Vectorised lookup with partials, for planners: for arrays of leans and volumes (same
        shape) returns ``h, A, cx, cy`` and their derivatives ``dh_dlean, dh_dvolume, ...``
        (the bilinear interpolant's, i.e. finite differences of the table) unless ``partials`` is
        False."""
        lean = np.clip(np.asarray(leans, np.float64), 0.0, self.leans[-1])
        vol = np.clip(np.asarray(volumes, np.float64), 0.0, self.volumes[-1])
        dl, dv = self.leans[1] - self.leans[0], self.volumes[1] - self.volumes[0]
        i = np.minimum((lean / dl).astype(np.int64), len(self.leans) - 2)
        j = np.minimum((vol / dv).astype(np.int64), len(self.volumes) - 2)
        fi, fj = lean / dl - i, vol / dv - j
        out = {}
        for name, t in (("h", self.head), ("A", self.section), ("cx", self.centroid[..., 0]),
                        ("cy", self.centroid[..., 1])):
            a, b, c, d = t[i, j], t[i, j + 1], t[i + 1, j], t[i + 1, j + 1]
            out[name] = (a + (b - a) * fj) * (1 - fi) + (c + (d - c) * fj) * fi
            if not partials:
                continue
            out[f"d{name}_dlean"] = ((c - a) * (1 - fj) + (d - b) * fj) / dl
            out[f"d{name}_dvolume"] = ((b - a) * (1 - fi) + (d - c) * fi) / dv
        # no outflow section while the surface is below the lip (the interpolant of A can be a
        # hair above 0 next to the max-tilt boundary)
        below = out["h"] <= 0.0
        for k in ("A", "dA_dlean", "dA_dvolume") if partials else ("A",):
            out[k] = np.where(below, 0.0, out[k])
        return out


def _cell(x: float, x_max: float, n: int) -> tuple[int, float]:
    """Grid cell index and fraction of x on a uniform grid [0, x_max] with n nodes, clamped."""
    s = min(max(x, 0.0), x_max) * ((n - 1) / x_max)
    i = min(int(s), n - 2)
    return i, s - i


def compute_tables(shape: Container) -> OutflowTables:
    """Build the tables of ``shape`` from its interior polygon (no cache)."""
    poly = np.asarray(shape.interior, np.float64)
    lip_l, lip_r = poly[0], poly[-1]
    capacity = shape.interior_area
    leans = np.linspace(0.0, math.pi, N_LEAN)
    volumes = np.linspace(0.0, capacity, N_VOLUME)
    chord = lip_l - lip_r                               # from the pouring lip across the opening
    width = float(np.linalg.norm(chord))
    c, s = np.cos(-leans)[:, None], np.sin(-leans)[:, None]
    polys = np.stack([c * poly[:, 0] - s * poly[:, 1], s * poly[:, 0] + c * poly[:, 1]], axis=-1)
    levels = _volume_levels(polys, volumes)             # (N_LEAN, N_VOLUME)
    y_lip, y_other = polys[:, -1, 1:2], polys[:, 0, 1:2]
    head = levels - y_lip
    # fraction of the chord (from the pouring lip) below the free surface; the other lip is
    # higher for every lean in (0, pi)
    rise = y_other - y_lip
    frac = np.where(rise > 1e-12, np.clip(head / np.maximum(rise, 1e-12), 0.0, 1.0),
                    (head > 0).astype(np.float64))
    section = frac * width
    centroid = lip_r + 0.5 * frac[..., None] * chord
    # the lip-side wall: the interior edge ending at the right lip (second-last vertex -> lip)
    wall = lip_r - poly[-2]
    wd = np.column_stack([c[:, 0] * wall[0] - s[:, 0] * wall[1], s[:, 0] * wall[0] + c[:, 0] * wall[1]])
    wall_drop = np.maximum(0.0, -wd[:, 1])              # the wall's inner end above the lip
    wall_dir = wd / np.linalg.norm(wall)
    return OutflowTables(leans, volumes, head, section, centroid, wall_drop, wall_dir, width,
                         capacity)


def _key(shape: Container) -> str:
    h = hashlib.sha256()
    h.update(f"v{TABLE_VERSION}-{N_LEAN}-{N_VOLUME}-{N_LEVEL}".encode())
    h.update(np.ascontiguousarray(np.round(shape.interior, 12)).tobytes())
    return h.hexdigest()[:24]


_MEMORY: dict[str, OutflowTables] = {}
_MEMORY_SIZE = 256                                      # ~0.3 MB each


def _load_or_compute(key: str, shape: Container) -> OutflowTables:
    path = cache_dir() / "outflow_tables" / f"{key}.npz"
    if path.exists():
        try:
            with np.load(path) as z:
                return OutflowTables(**{k: z[k] for k in z.files if k not in ("width", "capacity")},  # noqa
                                     width=float(z["width"]), capacity=float(z["capacity"]))
        except Exception:  # a damaged cache file is recomputed, not fatal
            pass
    tables = compute_tables(shape)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".npz")
        with os.fdopen(fd, "wb") as f:
            np.savez(f, **{k: getattr(tables, k) for k in OutflowTables.__dataclass_fields__})
        os.replace(tmp, path)                           # atomic: readers never see half a file
    except OSError:
        pass                                            # read-only home: the tables still work
    return tables


def outflow_tables(shape: Container) -> OutflowTables:
    """The lookup tables of a container, from the memory or disk cache or computed (~10 ms)."""
    key = _key(shape)
    tables = _MEMORY.get(key)
    if tables is None:
        if len(_MEMORY) >= _MEMORY_SIZE:
            _MEMORY.pop(next(iter(_MEMORY)))            # drop the oldest entry
        tables = _MEMORY[key] = _load_or_compute(key, shape)
    return tables
