"""Collision of a carried container with static boxes in a 2D room (pure NumPy, vectorised).

The container's solid is taken as its convex hull: the interior polygon (opening closed: an
obstacle poking into the opening would hit the liquid) offset outward by the wall thickness,
mitred. The room is [0, W] x [0, H]; obstacles are axis-aligned boxes (x_centre, z_centre,
width, height), m. Overlap by the separating-axis theorem, for many poses at once.
"""

from __future__ import annotations

import numpy as np

from .geometry import Container


def container_hull(container: Container, margin: float = 0.0) -> np.ndarray:
    """(K, 2) counter-clockwise convex hull of the container's solid and interior in its frame,
    grown by ``margin`` m (a clearance)."""
    p = np.asarray(container.interior, dtype=np.float64)
    r = container.wall_thickness + margin
    d = np.roll(p, -1, axis=0) - p
    d /= np.linalg.norm(d, axis=1, keepdims=True)
    n = np.column_stack((d[:, 1], -d[:, 0]))          # outward normals of CCW edges
    n_prev = np.roll(n, 1, axis=0)
    out = p + r * (n + n_prev) / np.maximum(1.0 + np.einsum("ij,ij->i", n, n_prev), 1e-3)[:, None]
    return out


def _place(hull: np.ndarray, poses: np.ndarray) -> np.ndarray:
    c, s = np.cos(poses[:, 2]), np.sin(poses[:, 2])
    x = c[:, None] * hull[None, :, 0] - s[:, None] * hull[None, :, 1] + poses[:, 0:1]
    z = s[:, None] * hull[None, :, 0] + c[:, None] * hull[None, :, 1] + poses[:, 1:2]
    return np.stack((x, z), axis=-1)                    # (N, K, 2)


def collides(hull: np.ndarray, poses, boxes, room: tuple[float, float]) -> np.ndarray:
    """bool (N,): the hull at each pose (x, z, theta) overlaps a box or leaves the room."""
    poses = np.atleast_2d(np.asarray(poses, dtype=np.float64))
    pts = _place(hull, poses)                            # (N, K, 2)
    lo, hi = pts.min(axis=1), pts.max(axis=1)            # (N, 2)
    hit = (lo[:, 0] < 0) | (lo[:, 1] < 0) | (hi[:, 0] > room[0]) | (hi[:, 1] > room[1])
    boxes = np.asarray(boxes, dtype=np.float64).reshape(-1, 4)
    if len(boxes) == 0:
        return hit
    bl = boxes[:, :2] - 0.5 * boxes[:, 2:]               # (M, 2)
    bh = boxes[:, :2] + 0.5 * boxes[:, 2:]
    # box axes: bounding intervals overlap on x and z
    overlap = ((lo[:, None, :] < bh[None]) & (hi[:, None, :] > bl[None])).all(axis=2)  # (N, M)
    # hull edge normals
    e = np.roll(pts, -1, axis=1) - pts                   # (N, K, 2)
    nrm = np.stack((e[..., 1], -e[..., 0]), axis=-1)     # (N, K, 2), outward
    hull_max = np.einsum("nkd,nkd->nk", nrm, pts)        # a convex hull lies behind each edge
    corners = np.stack([np.stack((bl[:, 0], bl[:, 1]), -1), np.stack((bh[:, 0], bl[:, 1]), -1),
                        np.stack((bh[:, 0], bh[:, 1]), -1), np.stack((bl[:, 0], bh[:, 1]), -1)], 1)
    proj = np.einsum("nkd,mcd->nmkc", nrm, corners)      # (N, M, K, 4)
    separated = (proj.min(axis=3) >= hull_max[:, None, :]).any(axis=2)
    return hit | (overlap & ~separated).any(axis=1)


def segment_collides(hull: np.ndarray, a, b, boxes, room, step: float = 0.01,
                     tilt_scale: float = 0.05) -> bool:
    """True if the straight motion from pose ``a`` to pose ``b`` hits anything, checked at poses
    at most ``step`` m apart (a radian of tilt counts as ``tilt_scale`` m: about how far the
    hull's points move)."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    dist = np.linalg.norm(b[:2] - a[:2]) + abs(b[2] - a[2]) * tilt_scale
    n = max(int(np.ceil(dist / step)), 1) + 1
    t = np.linspace(0.0, 1.0, n)[:, None]
    return bool(collides(hull, a + t * (b - a), boxes, room).any())
