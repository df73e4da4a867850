"""2D scene geometry of ``taigym/Pour-v0``: frame changes, S's solid and T's walls prepared for
fast distance and inside tests, obstacle boxes, and a task's geometry built once per task
(:func:`task_geometry`)."""

from __future__ import annotations

import functools
import math

import numpy as np

from taigym.sim.geometry import densify

from .pour_tasks import ALL_SHAPES, MAX_OBSTACLES, PourTask

def _rot(theta: float) -> np.ndarray:
    """Matrix M with world = local @ M for a counter-clockwise rotation by theta."""
    c, s = math.cos(theta), math.sin(theta)
    return np.array([[c, s], [-s, c]])


def to_local(points: np.ndarray, pose) -> np.ndarray:
    """World points (N, 2) -> the frame of ``pose`` = (x, y, theta)."""
    if pose[2] == 0.0:
        return points - pose[:2]
    return (points - pose[:2]) @ _rot(pose[2]).T


def to_world(points: np.ndarray, pose) -> np.ndarray:
    if pose[2] == 0.0:
        return points + pose[:2]
    return points @ _rot(pose[2]) + pose[:2]


def pivot_on_lip(pose, delta, lips, tilt_limit: float):
    """The displacement of S's frame that rotates S by ``delta``'s angle about its pouring lip
    (the right lip if the new angle is <= 0, else the left) and moves that lip by ``delta``'s
    (dx, dy): ``pose`` = (x, y, theta) and ``delta`` = (dx, dy, dtheta) (m, rad; floats or
    arrays over a batch), ``lips`` = ((x_left, y_left), (x_right, y_right)) in S's frame. The
    angle is clipped to +-``tilt_limit`` for the pivot (the move keeps the unclipped dtheta, which
    the env clips)."""
    x, y, th = pose
    dx, dy, dth = delta
    th_new = np.minimum(np.maximum(th + dth, -tilt_limit), tilt_limit)
    (lxl, lyl), (lxr, lyr) = lips
    right = th_new <= 0.0
    lx, ly = np.where(right, lxr, lxl), np.where(right, lyr, lyl)
    c0, s0, c1, s1 = np.cos(th), np.sin(th), np.cos(th_new), np.sin(th_new)
    # the lip's world position, moved by (dx, dy), minus its offset at the new angle
    px = (c0 * lx - s0 * ly) + dx - (c1 * lx - s1 * ly)
    py = (s0 * lx + c0 * ly) + dy - (s1 * lx + c1 * ly)
    return px, py, dth


class Walls:
    """A container's wall solid (capsule chain) prepared for fast distance queries."""

    def __init__(self, shape):
        w = np.asarray(shape.walls, np.float64)
        self.a = w[:-1]
        self.ab = w[1:] - w[:-1]
        self.inv = 1.0 / np.maximum(np.einsum("ij,ij->i", self.ab, self.ab), 1e-300)
        self.radius = shape.radius
        # per-axis copies (contiguous) for min_distance
        self.ax, self.ay = self.a[:, 0].copy(), self.a[:, 1].copy()
        self.abx, self.aby = self.ab[:, 0].copy(), self.ab[:, 1].copy()

    def min_distance(self, pts: np.ndarray) -> float:
        """Smallest distance (m) from points (N, 2), body frame, to the wall solid (< 0 inside)."""
        apx = pts[:, 0:1] - self.ax                           # (N, segments)
        apy = pts[:, 1:2] - self.ay
        abx, aby = self.abx, self.aby
        t = np.minimum(np.maximum((apx * abx + apy * aby) * self.inv, 0.0), 1.0)
        dx = apx - t * abx
        dy = apy - t * aby
        return math.sqrt(float((dx * dx + dy * dy).min())) - self.radius


def box_distance(px: float, py: float, box: tuple) -> float:
    """Signed distance (m) from the point (px, py) to the axis-aligned box (cx, cy, hx, hy)
    (centre and half extents, m); < 0 inside. Python floats: the fast path's check."""
    cx, cy, hx, hy = box
    qx, qy = abs(px - cx) - hx, abs(py - cy) - hy
    return math.hypot(max(qx, 0.0), max(qy, 0.0)) + min(max(qx, qy), 0.0)


def box_sdf(pts: np.ndarray, box: tuple) -> np.ndarray:
    """Signed distance (m) from world points (N, 2) to the axis-aligned box (cx, cy, hx, hy)."""
    cx, cy, hx, hy = box
    qx = np.abs(pts[:, 0] - cx) - hx
    qy = np.abs(pts[:, 1] - cy) - hy
    return np.hypot(np.maximum(qx, 0.0), np.maximum(qy, 0.0)) + np.minimum(np.maximum(qx, qy), 0.0)


def solid_box(shape) -> tuple[float, float, float, float]:
    """(x_min, y_min, x_max, y_max) of a container's wall solid in its own frame (m)."""
    w = np.asarray(shape.walls)
    lo, hi = w.min(axis=0) - shape.radius, w.max(axis=0) + shape.radius
    return float(lo[0]), float(lo[1]), float(hi[0]), float(hi[1])


def shape_features(shape) -> np.ndarray:
    onehot = [float(shape.shape == s) for s in ALL_SHAPES]
    p = shape.params
    if shape.shape == "frustum":
        params = [p["bottom_width"] / shape.width, 0.0]
    elif shape.shape == "cup":
        params = [p["corner_radius"] / shape.width, 0.0]
    elif shape.shape == "oval":
        params = [p["body_width"] / shape.width, p["neck_height"] / shape.height]
    else:
        params = [0.0, 0.0]
    return np.array(onehot + [shape.width, shape.height] + params)


class Region:
    """Fast point-in-interior test of a container in its own frame: half-planes for a convex
    interior polygon (rect, frustum, cup) or two convex pieces split at the chord between its
    two reflex vertices (the oval bottle's shoulders), else bounding box + crossing number."""

    def __init__(self, shape):
        poly = np.asarray(shape.interior, np.float64)
        self.shape = shape
        self.lo, self.hi = poly.min(0), poly.max(0)
        reflex = np.flatnonzero(_turns(poly) < -1e-15)
        self.pieces = None
        if len(reflex) == 0:
            self.pieces = [_half_planes(poly)]
        elif len(reflex) == 2:
            i, j = reflex
            a, b = poly[i:j + 1], np.concatenate([poly[j:], poly[:i + 1]])
            if np.all(_turns(a) >= -1e-15) and np.all(_turns(b) >= -1e-15):
                self.pieces = [_half_planes(a), _half_planes(b)]

    def inside(self, loc: np.ndarray) -> np.ndarray:
        if self.pieces is not None:
            out = None
            for normals, offsets in self.pieces:
                # same test as np.all(..., axis=1), reduced over a contiguous first axis (faster)
                ins = np.logical_and.reduce(np.ascontiguousarray((loc @ normals < offsets).T), axis=0)
                out = ins if out is None else out | ins
            return out
        cand = np.all((loc >= self.lo) & (loc <= self.hi), axis=1)
        out = np.zeros(len(loc), bool)
        if cand.any():
            out[cand] = self.shape.contains(loc[cand])
        return out


def _turns(poly: np.ndarray) -> np.ndarray:
    """Cross product of consecutive edges at each vertex of a closed polygon (> 0: convex, CCW)."""
    e_in = poly - np.roll(poly, 1, axis=0)
    e_out = np.roll(poly, -1, axis=0) - poly
    return e_in[:, 0] * e_out[:, 1] - e_in[:, 1] * e_out[:, 0]


def _half_planes(poly: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(normals (2, K), offsets (K,)) of a convex CCW polygon: inside iff p @ normals < offsets."""
    e = np.roll(poly, -1, axis=0) - poly
    n = np.column_stack((e[:, 1], -e[:, 0]))               # outward normals of a CCW polygon
    keep = np.linalg.norm(n, axis=1) > 1e-12                  # drop zero-length edges
    return n[keep].T.copy(), np.einsum("ij,ij->i", n[keep], poly[keep])


class TaskGeometry:
    """A task's scene geometry at one wall thickness, the constants that resets to the task
    share (containers are immutable): S, T, S's solid sampled along its walls, the fast
    inside/distance tests, the solids' bounding boxes (own frames, m), the liquid's area at the
    task's fill (m^2), S's outflow lookup tables and max tilt at that fill (rad) and the
    per-task entries of the state vector (read-only). ``cache_tables=False`` computes the
    tables without the tables' memory and disk caches: for tasks drawn from the continuous
    distribution, which never come again (each would leave a 0.2 MB file on disk)."""

    def __init__(self, task: PourTask, wall_thickness: float, cache_tables: bool = True):
        from taigym.models.outflow_tables import compute_tables, outflow_tables

        self.source = source = task.source_shape(wall_thickness)
        self.target = target = task.target_shape(wall_thickness)
        self.solid_pts = densify(source.walls, 0.75 * source.radius)
        self.s_region = Region(source)
        self.t_walls = Walls(target)
        self.s_box, self.t_box = solid_box(source), solid_box(target)
        self.fill_area = source.liquid_area(task.fill)
        self.tables = outflow_tables(source) if cache_tables else compute_tables(source)
        # from Pan & Manocha 2016's lookup tables (within 2e-3 rad of ``Container.max_tilt_angle``, ~20x
        # faster)
        self.max_tilt = self.tables.max_lean(self.fill_area)
        n_obst = len(task.obstacles)
        self.state = np.concatenate([
            np.zeros(12), [task.fill, math.log10(max(task.viscosity, 1e-4))],
            [0.0],  # time, filled in per step
            shape_features(source), [self.max_tilt], shape_features(target),
            np.ravel(task.obstacles), np.zeros(4 * (MAX_OBSTACLES - n_obst))])
        for a in (self.solid_pts, self.state):
            a.setflags(write=False)


@functools.lru_cache(maxsize=256)
def task_geometry(task: PourTask, wall_thickness: float) -> TaskGeometry:
    """The task's :class:`TaskGeometry`, built once per (task, wall thickness): resetting to a
    task seen before (a fixed split) costs no geometry."""
    return TaskGeometry(task, wall_thickness)
