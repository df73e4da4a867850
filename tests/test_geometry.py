"""Container and box geometry (pure NumPy; no Taichi)."""

import math

import numpy as np
import pytest

from taigym.sim.geometry import (
    KIND_BOX, KIND_CHAIN, SHAPES, Box, clip_below, container, polygon_area, rotate, signed_area,
)

W, H = 0.08, 0.1


def _segments_cross(p1, p2, q1, q2):
    def orient(a, b, c):
        return np.sign((b[0] - a[0]) * (c[1] - a[1]) - (b[1] - a[1]) * (c[0] - a[0]))
    return (orient(p1, p2, q1) * orient(p1, p2, q2) < 0) and (orient(q1, q2, p1) * orient(q1, q2, p2) < 0)


@pytest.mark.parametrize("shape", SHAPES)
def test_interior_polygon_is_simple_ccw_with_lips_on_top(shape):
    c = container(shape, width=W, height=H)
    poly = c.interior
    assert c.kind == KIND_CHAIN
    assert signed_area(poly) > 0
    left, right = c.lips
    np.testing.assert_allclose(left, [-W / 2, H], atol=1e-15)
    np.testing.assert_allclose(right, [W / 2, H], atol=1e-15)
    np.testing.assert_allclose(c.opening_centre, [0.0, H], atol=1e-15)
    assert poly[:, 1].min() == pytest.approx(0.0, abs=1e-15)  # frame origin on the inner bottom
    assert poly[:, 1].max() == pytest.approx(H)
    np.testing.assert_allclose(poly[::-1] * [-1, 1], poly, atol=1e-15)  # mirror-symmetric
    k = len(poly)
    for i in range(k):
        for j in range(i + 2, k):
            if (j + 1) % k == i:
                continue
            assert not _segments_cross(poly[i], poly[(i + 1) % k], poly[j], poly[(j + 1) % k])
    assert c.bounding_radius >= np.linalg.norm(c.walls, axis=1).max() + c.radius - 1e-15


@pytest.mark.parametrize("shape", SHAPES)
def test_sdf_signs(shape):
    c = container(shape, width=W, height=H, wall_thickness=0.01)
    # middle of the interior is free space, and at least 2 mm from the solid
    assert c.sdf([[0.0, 0.5 * H]])[0] > 0.002
    # every point of the interior is free space (walls never bulge into the liquid region)
    pts = c.fill_points(1.0, 0.001)
    assert len(pts) > 1000 and c.sdf(pts).min() >= -1e-12
    # the wall centreline is solid, at depth radius
    np.testing.assert_allclose(c.sdf(c.walls), -c.radius, atol=1e-12)
    # midpoints of the interior edges (not the opening) lie on the solid's inner face
    mids = 0.5 * (c.interior[:-1] + c.interior[1:])
    np.testing.assert_allclose(c.sdf(mids), 0.0, atol=1e-9)
    # far away: free, and the SDF is about the distance
    far = np.array([[1.0, 0.0], [0.0, -1.0], [-2.0, 3.0]])
    d = c.sdf(far)
    assert np.all(d > 0.8)
    # a point just outside the left wall's outer face is free, one inside it is solid
    y = 0.9 * H
    assert c.sdf([[-W / 2 - c.wall_thickness - 1e-4, y]])[0] > 0
    assert c.sdf([[-W / 2 - 0.5 * c.wall_thickness, y]])[0] < 0


def test_sdf_on_straight_interior_faces_is_zero():
    c = container("rect", width=W, height=H)
    y = np.linspace(0.0, H, 11)
    on_left = np.column_stack((np.full_like(y, -W / 2), y))
    np.testing.assert_allclose(c.sdf(on_left), 0.0, atol=1e-9)
    x = np.linspace(-W / 2, W / 2, 11)
    np.testing.assert_allclose(c.sdf(np.column_stack((x, np.zeros_like(x)))), 0.0, atol=1e-9)
    # the rim is rounded: the top of the wall is radius above the lip
    lip_top = [[-W / 2 - c.radius, H + c.radius]]
    assert c.sdf(lip_top)[0] == pytest.approx(0.0, abs=1e-12)


def test_box_sdf_exact():
    b = Box(width=0.2, height=0.1)
    assert b.kind == KIND_BOX and b.half_extents == (0.1, 0.05)
    assert b.bounding_radius == pytest.approx(math.hypot(0.1, 0.05))
    p = np.array([[0, 0], [0.3, 0], [0, -0.1], [0.2, 0.1], [0.09, 0.0], [0.1, 0.02]])
    np.testing.assert_allclose(b.sdf(p), [-0.05, 0.2, 0.05, math.hypot(0.1, 0.05), -0.01, 0.0],
                               atol=1e-15)


def test_helpers_area_and_clip():
    sq = np.array([[0, 0], [1, 0], [1, 1], [0, 1]], float)
    assert polygon_area(sq) == 1.0 and polygon_area(sq[::-1]) == 1.0
    assert polygon_area(clip_below(sq, 0.25)) == pytest.approx(0.25)
    assert polygon_area(clip_below(sq, -1.0)) == 0.0
    assert polygon_area(clip_below(sq, 2.0)) == pytest.approx(1.0)
    # a concave "U": clip keeps both arms
    u = np.array([[0, 0], [3, 0], [3, 2], [2, 2], [2, 1], [1, 1], [1, 2], [0, 2]], float)
    assert polygon_area(clip_below(u, 1.5)) == pytest.approx(3 + 2 * 0.5)
    np.testing.assert_allclose(rotate([[1.0, 0.0]], math.pi / 2), [[0.0, 1.0]], atol=1e-15)


@pytest.mark.parametrize("fill", [0.1, 0.35, 0.6, 1.0])
def test_rect_liquid_area_and_fill_points(fill):
    c = container("rect", width=W, height=H)
    assert c.interior_area == pytest.approx(W * H)
    assert c.liquid_area(fill) == pytest.approx(W * fill * H)
    s = 0.002
    pts = c.fill_points(fill, s)
    assert len(pts) * s * s == pytest.approx(c.liquid_area(fill), rel=0.03)
    assert np.all(c.contains(pts)) and np.all(pts[:, 1] < fill * H)
    np.testing.assert_allclose(np.sort(pts[:, 0]), np.sort(-pts[:, 0]), atol=1e-15)  # symmetric


@pytest.mark.parametrize("shape", SHAPES)
def test_fill_points_match_liquid_area(shape):
    c = container(shape)
    for fill in (0.3, 0.8):
        pts = c.fill_points(fill, 0.0015)
        assert len(pts) * 0.0015 ** 2 == pytest.approx(c.liquid_area(fill), rel=0.04)


def test_contains():
    c = container("frustum", width=W, height=H)  # bottom 0.048 wide
    inside = c.contains([[0, 0.05], [0.03, 0.09], [0.03, 0.01], [0, 0.11], [0, -0.001]])
    assert inside.tolist() == [True, True, False, False, False]


def _rect_max_tilt(w, h_cup, h_liq):
    """Closed form, counter-clockwise tilt, free surface through the lower (left) lip.

    h >= H/2: the surface meets the right wall above the bottom; liquid = trapezoid
        w * (H - w tan(t) / 2) = w h  ->  tan(t) = 2 (H - h) / w.
    h <  H/2: the surface meets the bottom; liquid = right triangle with legs H (left wall) and
        b = H / tan(t) (bottom):  H^2 / (2 tan(t)) = w h  ->  tan(t) = H^2 / (2 w h).
    (Both give tan(t) = H / w at h = H / 2.)"""
    if h_liq >= h_cup / 2:
        return math.atan(2 * (h_cup - h_liq) / w)
    return math.atan(h_cup ** 2 / (2 * w * h_liq))


@pytest.mark.parametrize("fill", [0.05, 0.2, 0.45, 0.5, 0.55, 0.7, 0.95])
@pytest.mark.parametrize("dims", [(0.08, 0.1), (0.12, 0.06)])
def test_rect_max_tilt_closed_form(fill, dims):
    w, h = dims
    c = container("rect", width=w, height=h)
    expected = _rect_max_tilt(w, h, fill * h)
    assert c.max_tilt_angle(fill) == pytest.approx(expected, abs=1e-9)
    assert c.max_tilt_angle(fill, clockwise=True) == pytest.approx(expected, abs=1e-9)


@pytest.mark.parametrize("shape", SHAPES)
def test_max_tilt_surface_reaches_lower_lip(shape):
    c = container(shape)
    for fill in (0.3, 0.7):
        area = c.liquid_area(fill)
        t = c.max_tilt_angle(fill)
        assert 0 < t < math.pi
        left_lip_y = rotate(c.interior, t)[0, 1]
        assert c.free_surface_level(area, t) == pytest.approx(left_lip_y, abs=1e-9)
        # just below the max tilt the surface is below the lip; just above, above it
        assert c.free_surface_level(area, t - 1e-3) < rotate(c.interior, t - 1e-3)[0, 1]
        assert c.free_surface_level(area, t + 1e-3) > rotate(c.interior, t + 1e-3)[0, 1]
    assert c.max_tilt_angle(1.0) == 0.0


def test_frustum_max_tilt_decreases_with_fill():
    c = container("frustum", width=0.08, height=0.1, bottom_width=0.05)
    tilts = [c.max_tilt_angle(f) for f in np.linspace(0.1, 1.0, 10)]
    assert all(a > b for a, b in zip(tilts, tilts[1:]))
    # tapered walls hold less liquid near the bottom than a rect with the same opening, so at a
    # high fill the frustum can be tilted further before spilling
    assert c.max_tilt_angle(0.9) > container("rect", width=0.08, height=0.1).max_tilt_angle(0.9)


def test_frustum_liquid_area_is_trapezoid():
    c = container("frustum", width=0.08, height=0.1, bottom_width=0.04)
    h = 0.06
    top = 0.04 + (0.08 - 0.04) * h / 0.1
    assert c.liquid_area(0.6) == pytest.approx(0.5 * (0.04 + top) * h)


def test_free_surface_level_upright_and_rotated():
    c = container("rect", width=W, height=H)
    assert c.free_surface_level(c.liquid_area(0.4), 0.0) == pytest.approx(0.4 * H, abs=1e-12)
    # upside down (tilt = pi): the liquid rests on the (closed) opening at y = -H
    assert c.free_surface_level(c.liquid_area(0.4), math.pi) == pytest.approx(-H + 0.4 * H, abs=1e-12)
    with pytest.raises(ValueError, match="area"):
        c.free_surface_level(2 * c.interior_area, 0.0)


def test_shape_params_recorded():
    assert container("frustum").params["bottom_width"] == pytest.approx(0.6 * 0.08)
    p = container("oval", width=0.03, height=0.2).params
    assert p["body_width"] == pytest.approx(0.075) and p["neck_height"] == pytest.approx(0.05)
    assert container("cup").params["corner_radius"] == pytest.approx(0.012)
    assert polygon_area(container("cup", corner_radius=0.0).interior) == pytest.approx(W * H)


@pytest.mark.parametrize("kwargs, name", [
    (dict(shape="bowl"), "shape"),
    (dict(shape="rect", width=0.0), "width"),
    (dict(shape="rect", height=-1.0), "height"),
    (dict(shape="rect", width=float("nan")), "width"),
    (dict(shape="rect", wall_thickness=0.0), "wall_thickness"),
    (dict(shape="frustum", bottom_width=0.2), "bottom_width"),
    (dict(shape="frustum", bottom_width=0.0), "bottom_width"),
    (dict(shape="oval", body_width=0.05), "body_width"),
    (dict(shape="oval", neck_height=0.1), "neck_height"),
    (dict(shape="cup", corner_radius=0.04), "corner_radius"),
    (dict(shape="rect", bottom_width=0.05), "bottom_width"),
])
def test_validation_names_argument(kwargs, name):
    with pytest.raises(ValueError, match=name):
        container(**kwargs)


def test_validation_messages():
    with pytest.raises(ValueError, match=r"rect, frustum, oval, cup"):
        container("bowl")
    with pytest.raises(ValueError, match=r"must be > 0"):
        container("rect", width=-0.1)
    with pytest.raises(ValueError, match=r"must be > 0"):
        Box(width=0.1, height=0.0)
    c = container("rect")
    for bad in (0.0, -0.1, 1.5, float("nan")):
        for call in (c.liquid_area, c.max_tilt_angle, lambda f: c.fill_points(f, 0.01)):
            with pytest.raises(ValueError, match=r"fill.*\(0, 1\]"):
                call(bad)
