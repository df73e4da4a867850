"""The SFRRT* paper's maximum tilt angle of a filled frustum (SFRRT*, §III-A, Fig. 2, Eqs. 1-2).

The container is a frustum of a cone reduced to its 2D cross-section, a trapezoid: bottom radius
``r_b`` (half-width), top radius ``r_u``, height ``h_c``, liquid at rest up to ``h_w``. Tilting it
quasi-statically, the free surface stays horizontal and holds the same liquid area; the maximum
tilt ``theta_max`` is the tilt at which that surface reaches the lower lip. The text lost most
symbols; what follows is re-derived from the geometry (and agrees with what survived).

At rest the liquid is the trapezoid of area ``A = (r_b + r_w) h_w`` with the surface radius
``r_w = r_u - (r_u - r_b)(h_c - h_w) / h_c``. In the container's frame (origin at the centre of
the bottom, y up the axis) tilt it so that the left lip (-r_u, h_c) goes down; at the limit the
surface runs from that lip to the opposite side.

* Case I (trapezoid + triangle, Fig. 2b): the surface meets the opposite wall at height ``y'``,
  where the wall's radius is ``r_w' = r_b + (r_u - r_b) y' / h_c``. The liquid is the trapezoid
  below ``y'`` plus the triangle (-r_w', y'), (-r_u, h_c), (r_w', y'), so
  ``A = (r_b + r_w') y' + r_w' (h_c - y') = r_b h_c + r_u y'`` and
  ``tan theta_max = (h_c - y') / (r_u + r_w')``. Eliminating y' gives the paper's Eq. 1,
  ``theta_max = atan[h_c (r_u - r_w') / ((r_u - r_b)(r_u + r_w'))]`` with
  ``r_w' = (h_c r_u r_b - h_c r_2 r_b + h_w r_2 r_w + h_w r_2 r_b) / (h_c r_2 + h_c r_b)``,
  ``r_2 = r_u - r_b`` (the lost symbol). It holds while y' >= 0, i.e. ``A >= r_b h_c``.
* Case II (triangle only, Fig. 2c): the surface meets the bottom at x' (part of the bottom is
  dry). The liquid is the triangle (-r_u, h_c), (-r_b, 0), (x', 0):
  ``A = (x' + r_b) h_c / 2`` and ``tan theta_max = h_c / (r_u + x')``, which is the paper's Eq. 2,
  ``theta_max = atan[h_c / (r_u - r_b + 2 h_w (r_w + r_b) / h_c)]``.

Both cases hold for any trapezoid (walls flaring out, straight or leaning in), as it is convex.

3D: the paper says the 2D result "can be directly extended to 3D" but gives no formula; the
equal-volume condition for a tilted cone frustum has no closed form, so :func:`max_tilt_3d`
solves it numerically (volume below a plane through the lower lip by quadrature, bisection on
the tilt).
"""

from __future__ import annotations

import math

import numpy as np


def _check(bottom_radius: float, top_radius: float, height: float, fill_height: float
           ) -> tuple[float, float, float, float]:
    vals = []
    for name, v in (("bottom_radius", bottom_radius), ("top_radius", top_radius),
                    ("height", height)):
        v = float(v)
        if not (math.isfinite(v) and v > 0):
            raise ValueError(f"{name} must be > 0 m and finite, got {v!r}")
        vals.append(v)
    h = float(fill_height)
    if not (math.isfinite(h) and 0 < h <= vals[2]):
        raise ValueError(f"fill_height must be in (0, height={vals[2]:g}] m (the liquid cannot "
                         f"rise above the brim), got {fill_height!r}")
    return vals[0], vals[1], vals[2], h


def liquid_area(bottom_radius: float, top_radius: float, height: float, fill_height: float) -> float:
    """Liquid area (m^2) of the upright trapezoid filled to ``fill_height``: (r_b + r_w) h_w."""
    rb, ru, hc, hw = _check(bottom_radius, top_radius, height, fill_height)
    rw = ru - (ru - rb) * (hc - hw) / hc
    return (rb + rw) * hw


def tilt_case(bottom_radius: float, top_radius: float, height: float, fill_height: float) -> int:
    """1 if the liquid at the maximum tilt still covers the whole bottom (Fig. 2b), else 2."""
    rb, ru, hc, hw = _check(bottom_radius, top_radius, height, fill_height)
    return 1 if liquid_area(rb, ru, hc, hw) >= rb * hc else 2


def max_tilt(bottom_radius: float, top_radius: float, height: float, fill_height: float) -> float:
    """The SFRRT* paper's maximum quasi-static tilt (rad, in [0, pi)) of a 2D frustum (trapezoid) with
    bottom/top radii (half-widths) and height in m, filled to ``fill_height`` m (Eqs. 1-2).

    Raises ValueError for non-positive sizes or a fill above the brim.
    """
    rb, ru, hc, hw = _check(bottom_radius, top_radius, height, fill_height)
    area = liquid_area(rb, ru, hc, hw)
    if area >= rb * hc:  # case I: the surface ends on the opposite wall at height y'
        y = (area - rb * hc) / ru
        rw_prime = rb + (ru - rb) * y / hc
        return math.atan2(hc - y, ru + rw_prime)
    x = 2.0 * area / hc - rb  # case II: the surface ends on the bottom at x'
    return math.atan2(hc, ru + x)


def max_tilt_paper(bottom_radius: float, top_radius: float, height: float, fill_height: float
                   ) -> float:
    """The same angle written as the paper's Eqs. 1 and 2 (r_2 = r_u - r_b); needs r_u != r_b
    in case I. Kept to show that the re-derivation and the printed formulas agree."""
    rb, ru, hc, hw = _check(bottom_radius, top_radius, height, fill_height)
    r2 = ru - rb
    rw = ru - (ru - rb) / hc * (hc - hw)
    if tilt_case(rb, ru, hc, hw) == 1:
        rwp = (hc * ru * rb - hc * r2 * rb + hw * r2 * rw + hw * r2 * rb) / (hc * r2 + hc * rb)
        return math.atan(hc * (ru - rwp) / ((ru - rb) * (ru + rwp)))
    return math.atan(hc / (ru - rb + 2 * hw * (rw + rb) / hc))


def _frustum_volume_below(rb: float, ru: float, hc: float, theta: float, n: int = 400) -> float:
    """Volume (m^3) of a cone frustum (axis y, radii rb at y=0 and ru at y=hc) tilted by theta
    about a horizontal axis, below the horizontal plane through its lowest lip point. In the
    container frame the plane is y = hc - tan(theta) (x + ru); the volume is the integral over
    height of the area of each circular slice on the low side of the line x = x_c(y)."""
    ys = (np.arange(n) + 0.5) * hc / n
    r = rb + (ru - rb) * ys / hc
    t = math.tan(theta)
    xc = (hc - ys) / t - ru if t > 0 else np.full(n, np.inf)  # liquid where x >= xc ... see below
    # liquid in a slice: points with y <= hc - t (x + ru) <=> x <= (hc - y)/t - ru = xc
    u = np.clip(xc / r, -1.0, 1.0)
    seg = r * r * (np.arccos(-u) - (-u) * np.sqrt(1.0 - u * u))  # circle area with x <= xc
    return float(np.sum(seg) * hc / n)


def max_tilt_3d(bottom_radius: float, top_radius: float, height: float, fill_height: float) -> float:
    """Maximum quasi-static tilt (rad) of an axisymmetric cone frustum filled to ``fill_height``:
    equal liquid *volume* before and after tilting (numerical; the paper has no 3D formula)."""
    rb, ru, hc, hw = _check(bottom_radius, top_radius, height, fill_height)
    rw = rb + (ru - rb) * hw / hc
    vol = math.pi * hw * (rb * rb + rb * rw + rw * rw) / 3.0
    if hw >= hc:
        return 0.0
    lo, hi = 1e-9, math.pi / 2 - 1e-9
    for _ in range(60):  # the volume below the lip falls monotonically with the tilt
        mid = 0.5 * (lo + hi)
        if _frustum_volume_below(rb, ru, hc, mid) > vol:
            lo = mid
        else:
            hi = mid
    return 0.5 * (lo + hi)
