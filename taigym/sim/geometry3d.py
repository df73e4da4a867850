"""3D rigid shapes for the liquid solver (pure NumPy), built from the 2D cross-sections.

Every shape lives in its own body frame: y along the container's axis, origin at the centre of
the inner bottom (as in 2D); lengths in metres, volumes m^3. ``sdf(points)`` is negative inside
the solid, positive in free space.

* :class:`Box3` - a solid box centred on its frame origin (obstacles, shelves).
* :class:`Container3` - a container: the 2D cross-section of :func:`geometry.container`
  revolved about the y axis (``section="round"``: cylinder, frustum, cup, bottle), or, for
  ``rect`` only, swept into a square box (``section="square"``). A point (x, y, z) of a revolved
  container has the 2D distance and inside test of the point (r, y), r = sqrt(x^2 + z^2), on the
  cross-section: exact for a surface of revolution, since the nearest wall point lies in the
  half-plane through the axis and the point.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from .geometry import Container, check_fill, clip_below, container, positive

KIND_BOX3 = 0       #: solver kind of :class:`Box3`
KIND_REVOLVED = 1   #: solver kind of a revolved :class:`Container3`
KIND_SQUARE = 2     #: solver kind of a square-box :class:`Container3`
SECTIONS = ("round", "square")


def _points3(points: Any) -> np.ndarray:
    p = np.asarray(points, dtype=np.float64)
    if p.ndim == 1 and p.shape == (3,):
        p = p[None, :]
    if p.ndim != 2 or p.shape[1] != 3:
        raise ValueError(f"points must have shape (N, 3), got {p.shape}")
    return p


def _box_sdf(q: np.ndarray, half: np.ndarray) -> np.ndarray:
    e = np.abs(q) - half
    return np.linalg.norm(np.maximum(e, 0.0), axis=1) + np.minimum(e.max(axis=1), 0.0)


@dataclass(frozen=True)
class Box3:
    """Solid box ``width`` (x) x ``height`` (y) x ``depth`` (z), m, frame origin at its centre."""

    width: float
    height: float
    depth: float
    kind: ClassVar[int] = KIND_BOX3

    def __post_init__(self) -> None:
        for name in ("width", "height", "depth"):
            object.__setattr__(self, name, positive(name, getattr(self, name)))

    @property
    def half_extents(self) -> tuple[float, float, float]:
        return (0.5 * self.width, 0.5 * self.height, 0.5 * self.depth)

    @property
    def bounding_radius(self) -> float:
        return float(np.linalg.norm(self.half_extents))

    def sdf(self, points: Any) -> np.ndarray:
        """Exact signed distance (m) of body-frame points (N, 3): < 0 inside the box."""
        return _box_sdf(_points3(points), np.asarray(self.half_extents))


def _first_moment_x(poly: np.ndarray) -> float:
    """Integral of x over a CCW polygon (m^3), the Pappus numerator."""
    p, q = poly, np.roll(poly, -1, axis=0)
    cross = p[:, 0] * q[:, 1] - q[:, 0] * p[:, 1]
    return float(np.sum((p[:, 0] + q[:, 0]) * cross) / 6.0)


@dataclass(frozen=True, eq=False)
class Container3:
    """A 3D container made from the 2D cross-section ``section2d`` (a :class:`geometry.Container`):
    revolved about y (``section="round"``) or a square box (``"square"``, rect only). ``width``
    is the interior diameter (or side) at the opening, ``height`` the interior height."""

    section2d: Container
    section: str = "round"

    def __post_init__(self) -> None:
        if self.section not in SECTIONS:
            raise ValueError(f"section must be one of {SECTIONS}, got {self.section!r}")
        if self.section == "square" and self.section2d.shape != "rect":
            raise ValueError(f"section='square' needs shape 'rect', got {self.section2d.shape!r}")

    kind = property(lambda self: KIND_SQUARE if self.section == "square" else KIND_REVOLVED)
    shape = property(lambda self: self.section2d.shape)
    width = property(lambda self: self.section2d.width)
    height = property(lambda self: self.section2d.height)
    wall_thickness = property(lambda self: self.section2d.wall_thickness)
    radius = property(lambda self: self.section2d.radius)
    walls = property(lambda self: self.section2d.walls)          # (r, y) capsule chain
    interior = property(lambda self: self.section2d.interior)    # (r, y) polygon

    @property
    def bounding_radius(self) -> float:
        """Largest distance (m) of a solid point from the frame origin."""
        if self.section == "square":
            t, w, h = self.wall_thickness, self.width, self.height
            return math.sqrt(2 * (w / 2 + t) ** 2 + max(h, t) ** 2)
        return self.section2d.bounding_radius

    @property
    def opening_centre(self) -> np.ndarray:
        """Centre of the opening (the papers' "centre of opening"), frame coordinates (m)."""
        return np.array([0.0, self.height, 0.0])

    def _rz(self, p: np.ndarray) -> np.ndarray:
        return np.column_stack((np.hypot(p[:, 0], p[:, 2]), p[:, 1]))

    def sdf(self, points: Any) -> np.ndarray:
        """Signed distance (m) of body-frame points (N, 3) to the wall solid; < 0 in the walls.
        Square box: max(outer box, -open inner box), exact outside the corners' edges."""
        p = _points3(points)
        if self.section == "round":
            return self.section2d.sdf(self._rz(p))
        t, w, h = self.wall_thickness, self.width, self.height
        outer = _box_sdf(p - (0, 0.5 * (h - t), 0), np.array([w / 2 + t, 0.5 * (h + t), w / 2 + t]))
        inner = _box_sdf(p - (0, 0.5 * h + t, 0), np.array([w / 2, 0.5 * h + t, w / 2]))
        return np.maximum(outer, -inner)

    def contains(self, points: Any) -> np.ndarray:
        """bool (N,): body-frame points strictly inside the interior."""
        p = _points3(points)
        if self.section == "round":
            return self.section2d.contains(self._rz(p))
        w = 0.5 * self.width
        return (np.abs(p[:, 0]) < w) & (np.abs(p[:, 2]) < w) & (p[:, 1] > 0) & (p[:, 1] < self.height)

    def liquid_volume(self, fill: float) -> float:
        """Volume (m^3) of the interior below y = fill * height, upright; fill in (0, 1].
        Round: Pappus on the right half of the clipped cross-section, V = 2 pi int x dA."""
        level = check_fill(fill) * self.height
        if self.section == "square":
            return self.width ** 2 * level
        poly = clip_below(self.interior, level)
        if len(poly) < 3:
            return 0.0
        # keep x >= 0: rotate by -90 deg ((x, y) -> (y, -x)), clip below 0, rotate back
        rot = clip_below(np.column_stack((poly[:, 1], -poly[:, 0])), 0.0)
        if len(rot) < 3:
            return 0.0
        half = np.column_stack((-rot[:, 1], rot[:, 0]))
        return 2.0 * math.pi * _first_moment_x(half)

    @property
    def interior_volume(self) -> float:
        return self.liquid_volume(1.0)

    def fill_points(self, fill: float, spacing: float) -> np.ndarray:
        """(N, 3) cell-centred lattice points ((k + 1/2) * spacing) inside the interior and below
        y = fill * height. N * spacing^3 ~= liquid_volume(fill)."""
        level = check_fill(fill) * self.height
        h = positive("spacing", spacing)
        r = 0.5 * max(self.width, float(np.abs(self.interior[:, 0]).max()) * 2)
        xs = (np.arange(math.floor(-r / h) - 1, math.ceil(r / h) + 1) + 0.5) * h
        ys = (np.arange(-1, math.ceil(level / h) + 1) + 0.5) * h
        ys = ys[ys < level]
        g = np.stack(np.meshgrid(xs, ys, xs, indexing="ij"), axis=-1).reshape(-1, 3)
        return g[self.contains(g)] if len(g) else g


def container3d(shape: str, width: float = 0.08, height: float = 0.1, wall_thickness: float = 0.01,
                *, section: str = "round", **shape_params: float) -> Container3:
    """A 3D container from the same parameters as :func:`geometry.container` (interior
    dimensions, m): the cross-section revolved about the axis, or a square box
    (``section="square"``, ``rect`` only). ``width`` is the diameter (side) at the opening."""
    return Container3(container(shape, width, height, wall_thickness, **shape_params), section)
