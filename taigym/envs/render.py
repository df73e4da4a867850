"""Headless NumPy rasteriser for 2D liquid scenes: no window, no OpenGL, no matplotlib.

:func:`render_scene` draws static boxes (grey rectangles), container walls (thick polylines),
liquid particles (small squares coloured by speed) and optional polylines (e.g. an outflow
parabola) into an (H, W, 3) uint8 array. Everything is vectorised; a 320 x 512 frame of a
pouring scene takes about a millisecond.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

BACKGROUND = (246, 244, 238)
FLOOR = (90, 90, 90)
SOURCE_COLOUR = (70, 70, 80)
TARGET_COLOUR = (150, 150, 160)
OBSTACLE_COLOUR = (128, 128, 128)
PARABOLA_COLOUR = (230, 150, 20)
MAX_SPEED_COLOUR = 1.5  # m/s mapped to the end of the colour ramp

# slow -> fast: deep blue, blue, cyan, near-white
_RAMP = np.array([[20, 60, 170], [30, 110, 220], [60, 200, 235], [225, 250, 255]], np.float64)
_LUT = np.stack([np.interp(np.linspace(0, 1, 256), np.linspace(0, 1, len(_RAMP)), _RAMP[:, c])
                 for c in range(3)], axis=1).astype(np.uint8)


def speed_colours(speed: np.ndarray, max_speed: float = MAX_SPEED_COLOUR) -> np.ndarray:
    """(N,) speeds in m/s -> (N, 3) uint8 colours (blue = at rest, white = fast)."""
    idx = np.clip(np.asarray(speed, np.float64) / max_speed * 255.0, 0, 255).astype(np.int64)
    return _LUT[idx]


class Canvas:
    """An (H, W, 3) image of the world rectangle [0, domain[0]] x [0, domain[1]] (m), y up."""

    def __init__(self, size_hw: Sequence[int], domain: Sequence[float],
                 background: Sequence[int] = BACKGROUND):
        self.h, self.w = int(size_hw[0]), int(size_hw[1])
        self.sx, self.sy = self.w / float(domain[0]), self.h / float(domain[1])
        self.img = np.empty((self.h, self.w, 3), np.uint8)
        self.img[:] = np.asarray(background, np.uint8)

    def to_pixels(self, pts: np.ndarray) -> np.ndarray:
        """World points (N, 2) -> continuous pixel coordinates (col, row), row 0 at the top."""
        pts = np.asarray(pts, np.float64).reshape(-1, 2)
        return np.column_stack((pts[:, 0] * self.sx, self.h - pts[:, 1] * self.sy))

    def polyline(self, pts: np.ndarray, radius: float, colour: Sequence[int],
                 min_px: float = 0.6) -> None:
        """Draw the union of capsules of ``radius`` (m) around a world polyline (M, 2)."""
        p = self.to_pixels(pts)
        if len(p) == 0:
            return
        r = max(radius * self.sx, min_px)
        if len(p) == 1:
            p = np.vstack([p, p])
        lo = np.floor(p.min(0) - r).astype(int)
        hi = np.ceil(p.max(0) + r).astype(int)
        c0, r0 = max(lo[0], 0), max(lo[1], 0)
        c1, r1 = min(hi[0], self.w - 1), min(hi[1], self.h - 1)
        if c0 > c1 or r0 > r1:
            return
        cols = np.arange(c0, c1 + 1) + 0.5
        rows = np.arange(r0, r1 + 1) + 0.5
        q = np.stack(np.meshgrid(cols, rows, indexing="xy"), -1).reshape(-1, 2)
        a, b = p[:-1], p[1:]
        ab = b - a
        inv = 1.0 / np.maximum((ab * ab).sum(1), 1e-12)
        d2 = np.full(len(q), np.inf)
        for s in range(len(a)):  # loop over segments, vectorised over pixels (cheap, M <= ~50)
            aq = q - a[s]
            t = np.clip(aq @ ab[s] * inv[s], 0.0, 1.0)
            e = aq - t[:, None] * ab[s]
            d2 = np.minimum(d2, (e * e).sum(1))
        mask = (d2 <= r * r).reshape(len(rows), len(cols))
        self.img[r0:r1 + 1, c0:c1 + 1][mask] = np.asarray(colour, np.uint8)

    def particles(self, pts: np.ndarray, colours: np.ndarray, size_m: float,
                  min_px: int = 1) -> None:
        """Draw particles as squares ``size_m`` wide (at least ``min_px`` pixels)."""
        if len(pts) == 0:
            return
        p = self.to_pixels(pts)
        k = max(int(round(size_m * self.sx)), min_px)
        c = np.floor(p[:, 0] - 0.5 * (k - 1)).astype(np.int64)
        r = np.floor(p[:, 1] - 0.5 * (k - 1)).astype(np.int64)
        colours = np.asarray(colours, np.uint8)
        if colours.ndim == 1:
            colours = np.broadcast_to(colours, (len(p), 3))
        for dr in range(k):
            for dc in range(k):
                rr, cc = r + dr, c + dc
                ok = (rr >= 0) & (rr < self.h) & (cc >= 0) & (cc < self.w)
                self.img[rr[ok], cc[ok]] = colours[ok]

    def rect(self, lo: Sequence[float], hi: Sequence[float], colour: Sequence[int]) -> None:
        """Fill the axis-aligned world rectangle [lo, hi] (m): the pixels whose centres it holds,
        at least one pixel."""
        (c0, r1), (c1, r0) = self.to_pixels(np.array([lo, hi], np.float64))  # rows grow downwards

        def span(a: float, b: float, n: int) -> slice:
            i0, i1 = int(np.ceil(a - 0.5)), int(np.floor(b - 0.5)) + 1  # pixel centres j + 0.5
            if i1 <= i0:                                                # thinner than a pixel
                i0 = int(np.floor(0.5 * (a + b)))
                i1 = i0 + 1
            return slice(min(max(i0, 0), n), min(max(i1, 0), n))

        self.img[span(r0, r1, self.h), span(c0, c1, self.w)] = np.asarray(colour, np.uint8)

    def floor(self, colour: Sequence[int] = FLOOR, px: int = 2) -> None:
        self.img[self.h - px:] = np.asarray(colour, np.uint8)


def world_polyline(local: np.ndarray, pose: Sequence[float]) -> np.ndarray:
    """Body-frame points (M, 2) -> world, for pose (x, y, theta)."""
    x, y, th = pose
    c, s = np.cos(th), np.sin(th)
    local = np.asarray(local, np.float64)
    return local @ np.array([[c, s], [-s, c]]) + (x, y)


def render_scene(size_hw: Sequence[int], domain: Sequence[float],
                 bodies: Sequence[tuple], positions: np.ndarray,
                 velocities: np.ndarray | None = None, particle_size: float = 0.004,
                 polylines: Sequence[tuple] = (), boxes: Sequence[Sequence[float]] = (),
                 box_colour: Sequence[int] = OBSTACLE_COLOUR) -> np.ndarray:
    """Rasterise a scene into a new (H, W, 3) uint8 image.

    Args:
        size_hw: (height, width) in pixels.
        domain: (width, height) of the world rectangle, m.
        bodies: (container, pose, colour) triples; containers are ``taigym.sim.Container``.
        positions, velocities: (N, 2) particles (velocities colour them by speed).
        particle_size: drawn square size, m (at least one pixel).
        polylines: (points (M, 2), colour) pairs drawn one pixel wide on top.
        boxes: static obstacles (x_centre, y_centre, width, height), m, filled with box_colour.
    """
    cv = Canvas(size_hw, domain)
    for x, y, w, h in boxes:
        cv.rect((x - 0.5 * w, y - 0.5 * h), (x + 0.5 * w, y + 0.5 * h), box_colour)
    cv.floor()  # over the boxes: a block standing on the floor keeps the floor line
    for shape, pose, colour in bodies:
        cv.polyline(world_polyline(shape.walls, pose), shape.radius, colour)
    pos = np.asarray(positions, np.float64).reshape(-1, 2)
    if velocities is None:
        cols = np.broadcast_to(_LUT[0], (len(pos), 3))
    else:
        cols = speed_colours(np.linalg.norm(np.asarray(velocities).reshape(-1, 2), axis=1))
    cv.particles(pos, cols, particle_size)
    for pts, colour in polylines:
        cv.polyline(pts, 0.0, colour, min_px=0.75)
    return cv.img
