"""2D rigid shapes for the liquid solver, as signed distance functions (pure NumPy).

Every shape lives in its own body frame; lengths are metres, angles radians, areas m^2.
``sdf(points)`` is negative inside the solid, positive in free space (where liquid may be).

* :class:`Box` - a solid rectangle centred on its frame origin (``kind == KIND_BOX``).
* :class:`Container` - a container cross-section (``kind == KIND_CHAIN``): its solid is a
  chain of capsules of radius ``wall_thickness / 2`` around the polyline ``walls``; its liquid
  region is the polygon ``interior``. Build one with :func:`container`.

Polygon convention: ``Container.interior`` is counter-clockwise (positive shoelace area) with
vertex 0 = LEFT lip (inner top-left corner), then down the left wall, along the bottom, up the
right wall, last vertex = RIGHT lip; the closing edge last -> 0 is the opening. (A CCW walk
from the right lip round the bottom is impossible, hence left lip first; use ``lips``.)
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

KIND_BOX = 0  #: solver kernel kind of :class:`Box`
KIND_CHAIN = 1  #: solver kernel kind of :class:`Container` (chain of capsules)

SHAPES = ("rect", "frustum", "oval", "cup")
_SHAPE_PARAMS = {"rect": (), "frustum": ("bottom_width",),
                 "oval": ("body_width", "neck_height"), "cup": ("corner_radius",)}


def positive(name: str, value: Any) -> float:
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be > 0 and finite, got {value!r}") from None
    if not (math.isfinite(v) and v > 0):
        raise ValueError(f"{name} must be > 0 and finite, got {value!r}")
    return v


def check_fill(fill: float) -> float:
    f = float(fill)
    if not (math.isfinite(f) and 0.0 < f <= 1.0):
        raise ValueError(f"fill must be in (0, 1], got {fill!r}")
    return f


def _points(points: Any) -> np.ndarray:
    p = np.asarray(points, dtype=np.float64)
    if p.ndim == 1 and p.shape == (2,):
        p = p[None, :]
    if p.ndim != 2 or p.shape[1] != 2:
        raise ValueError(f"points must have shape (N, 2), got {p.shape}")
    return p


def densify(chain: Any, step: float) -> np.ndarray:
    """The polyline ``chain`` (n, d) with points inserted so that consecutive points are at most
    ``step`` (m) apart (its vertices kept)."""
    chain = np.asarray(chain, np.float64)
    out = [chain[:1]]
    for a, b in zip(chain[:-1], chain[1:]):
        n = max(int(math.ceil(np.linalg.norm(b - a) / step)), 1)
        out.append(a + (np.arange(1, n + 1)[:, None] / n) * (b - a))
    return np.concatenate(out)


def rotate(points: Any, angle: float) -> np.ndarray:
    """Rotate (N, 2) points counter-clockwise by ``angle`` rad about the origin."""
    p = _points(points)
    c, s = math.cos(angle), math.sin(angle)
    return np.column_stack((c * p[:, 0] - s * p[:, 1], s * p[:, 0] + c * p[:, 1]))


def signed_area(poly: Any) -> float:
    """Shoelace area of a closed polygon (K, 2) in m^2: positive if counter-clockwise."""
    p = np.asarray(poly, dtype=np.float64)
    if len(p) < 3:
        return 0.0
    q = np.roll(p, -1, axis=0)
    return 0.5 * float(np.sum(p[:, 0] * q[:, 1] - q[:, 0] * p[:, 1]))


def polygon_area(poly: Any) -> float:
    """Area (m^2, >= 0) of a closed simple polygon (K, 2), either orientation."""
    return abs(signed_area(poly))


def clip_below(poly: Any, level: float) -> np.ndarray:
    """Part of polygon ``poly`` (K, 2) with y <= ``level`` (Sutherland-Hodgman, one half-plane).

    Returns the clipped polygon's vertices (n, 2), same orientation; n < 3 means empty. For a
    concave polygon the result may contain zero-width bridges along y = level; its area is exact.
    """
    p = np.asarray(poly, dtype=np.float64)
    q = np.roll(p, -1, axis=0)
    in_p, in_q = p[:, 1] <= level, q[:, 1] <= level
    cross = in_p != in_q
    dy = np.where(cross, q[:, 1] - p[:, 1], 1.0)
    t = np.where(cross, (level - p[:, 1]) / dy, 0.0)
    inter = p + t[:, None] * (q - p)
    inter[:, 1] = level
    # Edge i emits its start vertex if inside, then its crossing point if it crosses.
    return np.stack((p, inter), axis=1)[np.stack((in_p, cross), axis=1)]


def points_in_polygon(poly: Any, points: Any) -> np.ndarray:
    """Crossing-number (even-odd) test: bool (N,) for points strictly inside ``poly`` (K, 2)."""
    pts = _points(points)
    a = np.asarray(poly, dtype=np.float64)
    b = np.roll(a, -1, axis=0)
    px, py = pts[:, 0:1], pts[:, 1:2]  # (N, 1) against (K,) edges
    straddle = (a[:, 1] > py) != (b[:, 1] > py)
    dy = np.where(b[:, 1] == a[:, 1], 1.0, b[:, 1] - a[:, 1])
    x_cross = a[:, 0] + (py - a[:, 1]) * (b[:, 0] - a[:, 0]) / dy
    return (np.count_nonzero(straddle & (px < x_cross), axis=1) % 2) == 1


@dataclass(frozen=True)
class Box:
    """Solid rectangle ``width`` x ``height`` (m), frame origin at its centre."""

    width: float
    height: float
    kind: ClassVar[int] = KIND_BOX

    def __post_init__(self) -> None:
        object.__setattr__(self, "width", positive("width", self.width))
        object.__setattr__(self, "height", positive("height", self.height))

    @property
    def half_extents(self) -> tuple[float, float]:
        """(width / 2, height / 2) in m."""
        return (0.5 * self.width, 0.5 * self.height)

    @property
    def bounding_radius(self) -> float:
        """Largest distance (m) of a solid point from the frame origin."""
        return math.hypot(*self.half_extents)

    def sdf(self, points: Any) -> np.ndarray:
        """Exact signed distance (m) of body-frame points (N, 2): < 0 inside the box."""
        q = np.abs(_points(points)) - np.asarray(self.half_extents)
        outside = np.linalg.norm(np.maximum(q, 0.0), axis=1)
        return outside + np.minimum(q.max(axis=1), 0.0)


@dataclass(frozen=True, eq=False)
class Container:
    """A container's 2D cross-section. Frame: origin at the centre of the inner bottom, +y along
    the axis. ``width`` is the interior width at the opening, ``height`` the interior height,
    ``wall_thickness`` the wall thickness (all m); ``interior`` the CCW interior polygon (see the
    module docstring); ``params`` the shape parameters actually used."""

    shape: str
    width: float
    height: float
    wall_thickness: float
    interior: np.ndarray
    params: dict = field(default_factory=dict)
    kind: ClassVar[int] = KIND_CHAIN
    _walls: np.ndarray = field(init=False, repr=False)

    def __post_init__(self) -> None:
        for name in ("width", "height", "wall_thickness"):
            object.__setattr__(self, name, positive(name, getattr(self, name)))
        poly = np.array(self.interior, dtype=np.float64)
        if poly.ndim != 2 or poly.shape[1] != 2 or len(poly) < 3 or not np.all(np.isfinite(poly)):
            raise ValueError(f"interior must be a finite (K>=3, 2) polygon, got shape {poly.shape}")
        if signed_area(poly) <= 0:
            raise ValueError("interior must be counter-clockwise (positive area)")
        poly.setflags(write=False)
        object.__setattr__(self, "interior", poly)
        walls = _offset_chain(poly, 0.5 * self.wall_thickness)
        walls.setflags(write=False)
        object.__setattr__(self, "_walls", walls)

    @property
    def walls(self) -> np.ndarray:
        """(M, 2) centreline of the walls, left lip round the bottom to the right lip: the interior
        boundary without the opening edge, offset outward by ``radius`` with mitred joins. The
        solid is every point within ``radius`` of it, so the solid's inner face is the interior
        polygon (exactly on straight parts and at convex corners; at reflex corners, e.g. a
        bottle's shoulder, the solid is slightly rounded) and the rim is rounded."""
        return self._walls

    @property
    def radius(self) -> float:
        """Capsule radius = wall_thickness / 2 (m)."""
        return 0.5 * self.wall_thickness

    @functools.cached_property
    def bounding_radius(self) -> float:
        """Largest distance (m) of a solid point from the frame origin."""
        return float(np.max(np.linalg.norm(self._walls, axis=1))) + self.radius

    @property
    def lips(self) -> tuple[np.ndarray, np.ndarray]:
        """(left_lip, right_lip): the inner top corners, frame coordinates (m)."""
        return self.interior[0].copy(), self.interior[-1].copy()

    @property
    def opening_centre(self) -> np.ndarray:
        """Midpoint of the lips (the papers' "centre of opening"), frame coordinates (m)."""
        return 0.5 * (self.interior[0] + self.interior[-1])

    @property
    def interior_area(self) -> float:
        """Area of the interior polygon (m^2)."""
        return polygon_area(self.interior)

    def sdf(self, points: Any, chunk: int = 65536) -> np.ndarray:
        """Signed distance (m) of body-frame points (N, 2) to the wall solid: min over the wall
        segments of the distance to the segment, minus ``radius``. < 0 inside the walls."""
        p = _points(points)
        a, b = self._walls[:-1], self._walls[1:]
        ab = b - a
        inv_len2 = 1.0 / np.maximum(np.einsum("ij,ij->i", ab, ab), 1e-300)
        out = np.empty(len(p))
        for s in range(0, len(p), chunk):
            ap = p[s:s + chunk, None, :] - a[None]
            t = np.clip(np.einsum("nmk,mk->nm", ap, ab) * inv_len2, 0.0, 1.0)
            d = np.linalg.norm(ap - t[..., None] * ab, axis=2)
            out[s:s + chunk] = d.min(axis=1)
        return out - self.radius

    def contains(self, points: Any) -> np.ndarray:
        """bool (N,): body-frame points strictly inside the interior polygon (crossing number)."""
        return points_in_polygon(self.interior, points)

    def liquid_area(self, fill: float) -> float:
        """Area (m^2) of the interior below y = fill * height, container upright; fill in (0, 1]."""
        return polygon_area(clip_below(self.interior, check_fill(fill) * self.height))

    def fill_points(self, fill: float, spacing: float) -> np.ndarray:
        """(N, 2) cell-centred lattice points (x, y in (k + 1/2) * spacing, symmetric about x = 0)
        inside the interior and below y = fill * height. N * spacing^2 ~= liquid_area(fill)."""
        level = check_fill(fill) * self.height
        h = positive("spacing", spacing)
        lo, hi = self.interior.min(axis=0), self.interior.max(axis=0)
        xs = (np.arange(math.floor(lo[0] / h) - 1, math.ceil(hi[0] / h) + 1) + 0.5) * h
        ys = (np.arange(math.floor(lo[1] / h) - 1, math.ceil(level / h) + 1) + 0.5) * h
        ys = ys[ys < level]
        grid = np.stack(np.meshgrid(xs, ys, indexing="xy"), axis=-1).reshape(-1, 2)
        return grid[self.contains(grid)] if len(grid) else grid

    def free_surface_level(self, area: float, tilt: float) -> float:
        """World height y (m, frame origin at (0, 0)) of the horizontal free surface under which
        the interior, rotated by ``tilt`` rad counter-clockwise about its origin, holds ``area``
        m^2 (the opening treated as closed). Bisection on clip_below + shoelace area."""
        area = positive("area", area)
        if area > self.interior_area * (1 + 1e-12):
            raise ValueError(f"area must be <= interior_area={self.interior_area:.6g}, got {area}")
        poly = rotate(self.interior, tilt)
        lo, hi = float(poly[:, 1].min()), float(poly[:, 1].max())
        tol = 1e-13 * max(hi - lo, 1e-300)
        while hi - lo > tol:
            mid = 0.5 * (lo + hi)
            if polygon_area(clip_below(poly, mid)) < area:
                lo = mid
            else:
                hi = mid
        return 0.5 * (lo + hi)

    def max_tilt_angle(self, fill: float, clockwise: bool = False) -> float:
        """Geometric maximum tilt (rad, in [0, pi)) before spilling, quasi-static.

        Default: a counter-clockwise rotation (the LEFT lip goes down); ``clockwise=True``: the
        right lip goes down. It is the smallest tilt at which the free surface holding
        ``liquid_area(fill)`` reaches the lower lip's height, i.e. at which the rotated interior
        below the lower lip holds no more than that area. Found by a 0.5 degree scan over (0, pi)
        and bisection. All built-in shapes are symmetric, so both directions agree. fill = 1
        gives 0. Liquid that would be cut off in separate pockets is counted as one body.
        """
        target = self.liquid_area(fill)
        sign = -1.0 if clockwise else 1.0

        def excess(theta: float) -> float:
            poly = rotate(self.interior, sign * theta)
            lip = min(poly[0, 1], poly[-1, 1])
            return polygon_area(clip_below(poly, lip)) - target

        if excess(0.0) <= 1e-12 * self.interior_area:
            return 0.0
        thetas = np.linspace(0.0, math.pi, 361)
        lo = 0.0
        for hi in thetas[1:]:
            if excess(hi) <= 0.0:
                break
            lo = hi
        else:  # cannot happen for a container whose lips are its top
            return math.pi
        for _ in range(60):
            mid = 0.5 * (lo + hi)
            if excess(mid) > 0.0:
                lo = mid
            else:
                hi = mid
            if hi - lo < 1e-13:
                break
        return 0.5 * (lo + hi)


def _offset_chain(poly: np.ndarray, r: float) -> np.ndarray:
    """Offset the open chain poly[0] .. poly[-1] of a CCW polygon outward by r (mitred joins)."""
    d = np.diff(poly, axis=0)
    d /= np.linalg.norm(d, axis=1, keepdims=True)
    n = np.column_stack((d[:, 1], -d[:, 0]))  # right-hand normal = outward for CCW
    out = np.empty_like(poly)
    out[0] = poly[0] + r * n[0]
    out[-1] = poly[-1] + r * n[-1]
    n1, n2 = n[:-1], n[1:]
    cos = np.einsum("ij,ij->i", n1, n2)
    out[1:-1] = poly[1:-1] + r * (n1 + n2) / np.maximum(1.0 + cos, 1e-3)[:, None]
    return out


def _check_param(shape: str, name: str, value: float, lo: float, hi: float,
                 lo_open: bool = True, hi_open: bool = False) -> float:
    try:
        v = float(value)
    except (TypeError, ValueError):
        v = math.nan
    ok_lo = v > lo if lo_open else v >= lo
    ok_hi = v < hi if hi_open else v <= hi
    if not (math.isfinite(v) and ok_lo and ok_hi):
        rng = f"{'(' if lo_open else '['}{lo:.6g}, {hi:.6g}{')' if hi_open else ']'}"
        raise ValueError(f"{name} for shape {shape!r} must be in {rng}, got {value!r}")
    return v


def container(shape: str, width: float = 0.08, height: float = 0.1,
              wall_thickness: float = 0.01, **shape_params: float) -> Container:
    """Build a container cross-section; all lengths in metres, interior dimensions.

    ``width`` is the interior width at the opening, ``height`` the interior height. Shapes:
    ``rect``; ``frustum`` (``bottom_width`` in (0, 2*width], default 0.6*width); ``oval``, a
    bottle whose neck (opening) is ``width`` wide, with an elliptic body ``body_width`` wide
    (> width, default 2.5*width) and a straight neck ``neck_height`` tall (in (0, height),
    default 0.25*height); ``cup``, straight sides with bottom corners rounded by
    ``corner_radius`` (in [0, min(width/2, height)), default 0.15*width).
    """
    if shape not in _SHAPE_PARAMS:
        raise ValueError(f"shape must be one of {', '.join(SHAPES)}; got {shape!r}")
    w = positive("width", width)
    h = positive("height", height)
    t = positive("wall_thickness", wall_thickness)
    unknown = sorted(set(shape_params) - set(_SHAPE_PARAMS[shape]))
    if unknown:
        accepted = ", ".join(_SHAPE_PARAMS[shape]) or "none"
        hint = " (the neck width of 'oval' is `width`)" if "neck_width" in unknown else ""
        raise ValueError(f"unknown parameter(s) {', '.join(unknown)} for shape {shape!r}; "
                         f"accepted: {accepted}{hint}")
    params: dict[str, float] = {}
    if shape == "rect":
        pts = [(-w / 2, h), (-w / 2, 0.0), (w / 2, 0.0), (w / 2, h)]
    elif shape == "frustum":
        b = _check_param(shape, "bottom_width", shape_params.get("bottom_width", 0.6 * w), 0, 2 * w)
        params["bottom_width"] = b
        pts = [(-w / 2, h), (-b / 2, 0.0), (b / 2, 0.0), (w / 2, h)]
    elif shape == "cup":
        rc = _check_param(shape, "corner_radius", shape_params.get("corner_radius", 0.15 * w),
                          0, min(w / 2, h), lo_open=False, hi_open=True)
        params["corner_radius"] = rc
        pts = [(-w / 2, h)]
        if rc > 0:
            ang = np.linspace(math.pi, 1.5 * math.pi, 5)  # chamfer vertices on the arc
            left = np.column_stack((-w / 2 + rc + rc * np.cos(ang), rc + rc * np.sin(ang)))
            right = left[::-1] * np.array([-1.0, 1.0])
            pts += [tuple(p) for p in left] + [tuple(p) for p in right]
        else:
            pts += [(-w / 2, 0.0), (w / 2, 0.0)]
        pts.append((w / 2, h))
    else:  # oval: bottle = elliptic body (bottom at y = 0) + straight neck of width w
        bw = _check_param(shape, "body_width", shape_params.get("body_width", 2.5 * w),
                          w, math.inf, hi_open=True)
        hn = _check_param(shape, "neck_height", shape_params.get("neck_height", 0.25 * h),
                          0, h, hi_open=True)
        params.update(body_width=bw, neck_height=hn, neck_width=w)
        a, shoulder = bw / 2, h - hn
        s = math.sqrt(1.0 - (w / bw) ** 2)
        c = shoulder / (1.0 + s)  # ellipse semi-axis along y; centre at (0, c)
        phi_j = math.atan2(s, w / bw)  # ellipse meets the neck at (+-w/2, shoulder)
        phi = np.linspace(math.pi - phi_j, 2 * math.pi + phi_j, 17)[1:-1]  # bottom = vertex 8
        body = np.column_stack((a * np.cos(phi), c + c * np.sin(phi)))
        body[len(body) // 2] = (0.0, 0.0)
        pts = [(-w / 2, h), (-w / 2, shoulder)] + [tuple(p) for p in body]
        pts += [(w / 2, shoulder), (w / 2, h)]
    return Container(shape=shape, width=w, height=h, wall_thickness=t,
                     interior=np.array(pts, dtype=np.float64), params=params)
