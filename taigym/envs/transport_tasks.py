"""Transport tasks (the SFRRT* paper, 2024, planar): carry a filled frustum from a start to a goal pose
through a room cluttered with shelves, boxes and narrow gaps.

A :class:`TransportTask` fixes the start and goal poses (x, z, tilt; m, m, rad; the pose of the
container's frame: origin at the centre of its inner bottom, tilt counter-clockwise), the static
obstacles (axis-aligned boxes (x_centre, z_centre, width, height), m), the container (the SFRRT* paper's
frustum: bottom and top radius, i.e. half-widths in 2D, and height, interior, m) and the fill
(liquid height / container height at rest). The room is :data:`ROOM` = 1.2 m x 0.8 m; its edges
are walls.

Sampled tasks follow one of three layouts, as in the SFRRT* paper's experiments (shelves, boxes, a
narrow gap): ``shelf`` (a shelf board between start and goal, the goal on or under it),
``boxes`` (one to three boxes on the floor in the way), ``gap`` (a wall with a window a few cm
taller than the container). Containers: top radius 3-5 cm, bottom radius 0.6-1.0 x top, height
8-12 cm; fill 0.3-0.8. ``taigym.envs.tasks("transport", split)`` gives 1000 train and 100 eval
tasks from fixed seeds.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..sim import container as make_container
from ..sim.collide2d import collides, container_hull
from .checks import bounded_float

ROOM = (1.2, 0.8)                   #: (width, height) of the room, m
MAX_OBSTACLES = 6                   #: obstacle slots of the observation
WALL_THICKNESS = 0.008              #: container wall, m
LAYOUTS = ("shelf", "boxes", "gap")
SPLIT_SIZES = {"train": 1000, "eval": 100}
_SPLIT_SEEDS = {"train": (20260402, 0), "eval": (20260402, 1)}
MAX_TOP_RADIUS = 0.06              #: m, largest top radius the env's liquid grid holds
MAX_HEIGHT = 0.14                   #: m, tallest container the env's liquid grid holds
REACH_CELL = 0.01                   #: m, grid of the reachability check


def _pose(name: str, value: Any) -> tuple[float, float, float]:
    try:
        a = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        a = np.full(0, np.nan)
    if a.shape != (3,) or not np.all(np.isfinite(a)):
        raise ValueError(f"{name} must be a pose (x, z, tilt) of 3 finite numbers (m, m, rad), "
                         f"got {value!r}")
    return (float(a[0]), float(a[1]), float(a[2]))


@dataclass(frozen=True)
class TransportTask:
    """One planar transport problem; validated on construction (ValueError naming the field)."""

    start: tuple[float, float, float]
    goal: tuple[float, float, float]
    obstacles: tuple[tuple[float, float, float, float], ...]
    bottom_radius: float
    top_radius: float
    height: float
    fill: float
    layout: str = "custom"

    def __post_init__(self) -> None:
        set_ = functools.partial(object.__setattr__, self)
        set_("top_radius", bounded_float("top_radius", self.top_radius, 0.01, MAX_TOP_RADIUS))
        set_("bottom_radius", bounded_float("bottom_radius", self.bottom_radius, 0.005, self.top_radius))
        set_("height", bounded_float("height", self.height, 0.02, MAX_HEIGHT))
        try:
            fill = float(self.fill)
        except (TypeError, ValueError):
            fill = math.nan
        if not (math.isfinite(fill) and 0.0 < fill <= 1.0):
            raise ValueError(f"fill must be in (0, 1] (liquid height / container height; above 1 "
                             f"the liquid would rise above the brim), got {self.fill!r}")
        set_("fill", fill)
        set_("start", _pose("start", self.start))
        set_("goal", _pose("goal", self.goal))
        for name in ("start", "goal"):
            if abs(getattr(self, name)[2]) > math.pi / 2:
                raise ValueError(f"{name} tilt must be in [-pi/2, pi/2] rad, got {getattr(self, name)[2]!r}")
        obs = []
        try:
            rows = [tuple(float(v) for v in o) for o in self.obstacles]
        except (TypeError, ValueError):
            rows = None
        if rows is None or len(rows) > MAX_OBSTACLES or any(len(r) != 4 for r in rows):
            raise ValueError(f"obstacles must be at most {MAX_OBSTACLES} boxes (x_centre, z_centre, "
                             f"width, height) in m, got {self.obstacles!r}")
        for i, (x, z, w, h) in enumerate(rows):
            if not (all(map(math.isfinite, (x, z, w, h))) and w > 0 and h > 0):
                raise ValueError(f"obstacles[{i}] must have finite centre and positive size, got "
                                 f"{(x, z, w, h)}")
            obs.append((x, z, w, h))
        set_("obstacles", tuple(obs))
        set_("layout", str(self.layout))

    # ------------------------------------------------------------------ derived
    @property
    def fill_height(self) -> float:
        """Liquid height at rest, m (the SFRRT* paper's h_w)."""
        return self.fill * self.height

    def container(self):
        """The container's cross-section (``sim.container("frustum", ...)``)."""
        return make_container("frustum", width=2 * self.top_radius, height=self.height,
                              wall_thickness=WALL_THICKNESS, bottom_width=2 * self.bottom_radius)

    def hull(self, margin: float = 0.0) -> np.ndarray:
        return container_hull(self.container(), margin)

    def collides(self, poses, margin: float = 0.0) -> np.ndarray:
        """bool (N,): the container at these poses hits an obstacle or the room's walls."""
        return collides(self.hull(margin), poses, self.obstacles, ROOM)

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d["start"], d["goal"] = list(self.start), list(self.goal)
        d["obstacles"] = [list(o) for o in self.obstacles]
        return d

    @classmethod
    def from_dict(cls, d: dict) -> TransportTask:
        d = dict(d)
        d["obstacles"] = tuple(tuple(o) for o in d.get("obstacles", ()))
        return cls(**d)


def free_cells(task: TransportTask) -> np.ndarray:
    """bool (nx, nz): the upright container fits at each point of a :data:`REACH_CELL` grid over
    the room (cell (i, j) at (i, j) * REACH_CELL m)."""
    nx, nz = int(ROOM[0] / REACH_CELL) + 1, int(ROOM[1] / REACH_CELL) + 1
    gx, gz = np.meshgrid(np.arange(nx) * REACH_CELL, np.arange(nz) * REACH_CELL, indexing="ij")
    poses = np.column_stack([gx.ravel(), gz.ravel(), np.zeros(gx.size)])
    return ~task.collides(poses).reshape(nx, nz)


def _cell(p, shape) -> tuple[int, int]:
    i, j = int(round(p[0] / REACH_CELL)), int(round(p[1] / REACH_CELL))
    return min(max(i, 0), shape[0] - 1), min(max(j, 0), shape[1] - 1)


def check_feasible(task: TransportTask) -> None:
    """Raise ValueError if the start or goal pose is in collision, or if the goal cannot be
    reached from the start by an upright container (breadth-first search over a 1 cm grid of
    positions; tilting never makes the frustum's upright footprint larger than needed here)."""
    for name in ("start", "goal"):
        if task.collides([getattr(task, name)])[0]:
            raise ValueError(f"{name} pose {getattr(task, name)} puts the container inside an "
                             f"obstacle or outside the room [0, {ROOM[0]}] x [0, {ROOM[1]}] m")
    free = free_cells(task)
    nx, nz = free.shape
    s, g = _cell(task.start, free.shape), _cell(task.goal, free.shape)
    free[s] = free[g] = True  # both poses themselves were checked exactly above
    seen = np.zeros_like(free)
    seen[s] = True
    frontier = [s]
    while frontier and not seen[g]:
        nxt = []
        for i, j in frontier:
            for a, b in ((i + 1, j), (i - 1, j), (i, j + 1), (i, j - 1)):
                if 0 <= a < nx and 0 <= b < nz and free[a, b] and not seen[a, b]:
                    seen[a, b] = True
                    nxt.append((a, b))
        frontier = nxt
    if not seen[g]:
        raise ValueError(f"goal {task.goal} is unreachable from start {task.start}: the obstacles "
                         f"leave no passage wide enough for the container")


@functools.lru_cache(maxsize=64)
def route_field(task: TransportTask) -> np.ndarray:
    """float (nx, nz), m: the length of the shortest collision-free route of the upright
    container from each point of the :func:`free_cells` grid to the goal (Dijkstra over the free
    cells, 8-connected, so diagonal steps cost sqrt(2) cells). A blocked or cut-off cell gets the
    value of the nearest cell that has a route plus its straight distance to it, so the field is
    finite everywhere (a tilted container can stand where the upright one does not fit)."""
    from scipy import ndimage
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import dijkstra

    free = free_cells(task)
    g = _cell(task.goal, free.shape)
    free[g] = True
    nx, nz = free.shape
    index = np.arange(free.size).reshape(free.shape)
    rows, cols, costs = [], [], []
    for di, dj in ((1, 0), (0, 1), (1, 1), (1, -1)):
        a = free[max(0, -di):nx - max(0, di), max(0, -dj):nz - max(0, dj)]
        b = free[max(0, di):nx - max(0, -di) or None, max(0, dj):nz - max(0, -dj) or None]
        ia = index[max(0, -di):nx - max(0, di), max(0, -dj):nz - max(0, dj)]
        ib = index[max(0, di):nx - max(0, -di) or None, max(0, dj):nz - max(0, -dj) or None]
        both = a & b
        rows.append(ia[both])
        cols.append(ib[both])
        costs.append(np.full(int(both.sum()), math.hypot(di, dj) * REACH_CELL))
    graph = coo_matrix((np.concatenate(costs), (np.concatenate(rows), np.concatenate(cols))),
                       shape=(free.size, free.size)).tocsr()
    dist = dijkstra(graph, directed=False, indices=index[g]).reshape(free.shape)
    routed = np.isfinite(dist)
    gap, (ni, nj) = ndimage.distance_transform_edt(~routed, return_indices=True)
    return dist[ni, nj] + gap * REACH_CELL


def route_distance(task: TransportTask, x: float, z: float) -> float:
    """:func:`route_field` at (x, z) (m), interpolated bilinearly between grid points."""
    from scipy import ndimage

    field = route_field(task)
    i = min(max(x / REACH_CELL, 0.0), field.shape[0] - 1.0)
    j = min(max(z / REACH_CELL, 0.0), field.shape[1] - 1.0)
    return float(ndimage.map_coordinates(field, [[i], [j]], order=1)[0])


NEAR_GOAL_ROUTE = (0.02, 0.30)      #: m, route lengths to the goal that :func:`near_goal_start` starts at


def near_goal_start(task: TransportTask, rng: np.random.Generator,
                    route: tuple[float, float] = NEAR_GOAL_ROUTE) -> TransportTask:
    """``task`` starting, upright, at a free point of the :func:`free_cells` grid whose
    collision-free route to the goal (:func:`route_field`) is ``route`` m long (bounds
    included), drawn uniformly among those points with ``rng``: a start-state curriculum for RL,
    which learns the arrival and the stop at the goal before the whole carry. The task as it
    was if no point qualifies."""
    field, free = route_field(task), free_cells(task)
    cells = np.flatnonzero(free & (field >= route[0]) & (field <= route[1]))
    if len(cells) == 0:
        return task
    i, j = np.unravel_index(cells[min(int(rng.random() * len(cells)), len(cells) - 1)], free.shape)
    return dataclasses.replace(task, start=(float(i * REACH_CELL), float(j * REACH_CELL), 0.0))


def sample_task(rng: np.random.Generator, layout: str | None = None) -> TransportTask:
    """Draw one feasible task (rejection sampling on the feasibility check)."""
    W, H = ROOM
    for _ in range(100):
        lay = layout or LAYOUTS[int(rng.random() * len(LAYOUTS))]
        ru = 0.03 + 0.02 * rng.random()
        rb = ru * (0.6 + 0.4 * rng.random())
        hc = 0.08 + 0.04 * rng.random()
        fill = 0.3 + 0.5 * rng.random()
        xs, xg = 0.12 + 0.1 * rng.random(), W - 0.12 - 0.1 * rng.random()
        if rng.random() < 0.5:
            xs, xg = xg, xs
        zs = 0.05 + 0.3 * rng.random()
        zg = 0.05 + 0.3 * rng.random()
        obstacles = []
        mid = 0.5 * (xs + xg) + (rng.random() - 0.5) * 0.2
        if lay == "shelf":
            zb = 0.3 + 0.2 * rng.random()                  # shelf board height
            length = 0.4 + 0.3 * rng.random()
            obstacles.append((mid, zb, length, 0.02))
            obstacles.append((mid, zb + 0.25 + 0.05 * rng.random(), length, 0.02))
            zg = zb + 0.01 + 0.012 + 0.02 * rng.random()   # just above the lower board
            xg = mid + (rng.random() - 0.5) * (length - 0.15)
            zs = 0.05 + 0.15 * rng.random()
        elif lay == "boxes":
            for k in range(1 + int(rng.random() * 3)):
                w, h = 0.08 + 0.12 * rng.random(), 0.1 + 0.3 * rng.random()
                x = min(xs, xg) + 0.15 + (abs(xg - xs) - 0.3) * rng.random()
                obstacles.append((x, 0.5 * h, w, h))
        else:  # gap: a wall from floor to ceiling with a window
            gap = hc + 2 * WALL_THICKNESS + 0.03 + 0.04 * rng.random()
            zc = 0.15 + 0.35 * rng.random()
            lo_h, hi_z = zc - 0.5 * gap, zc + 0.5 * gap
            wall_w = 0.04 + 0.06 * rng.random()
            obstacles.append((mid, 0.5 * lo_h, wall_w, lo_h))
            obstacles.append((mid, 0.5 * (hi_z + H), wall_w, H - hi_z))
        obstacles = [o for o in obstacles if o[2] > 0 and o[3] > 0]
        try:
            task = TransportTask(start=(xs, zs, 0.0), goal=(xg, zg, 0.0), obstacles=tuple(obstacles),
                                 bottom_radius=rb, top_radius=ru, height=hc, fill=fill, layout=lay)
            check_feasible(task)
        except ValueError:
            continue
        return task
    raise RuntimeError("could not sample a feasible transport task in 100 attempts")


@functools.lru_cache(maxsize=2)
def transport_tasks(split: str = "train") -> tuple[TransportTask, ...]:
    """The fixed split: 1000 train or 100 eval tasks, identical on every machine."""
    if split not in SPLIT_SIZES:
        raise ValueError(f"split must be one of {', '.join(SPLIT_SIZES)}; got {split!r}")
    rng = np.random.default_rng(list(_SPLIT_SEEDS[split]))
    return tuple(sample_task(rng) for _ in range(SPLIT_SIZES[split]))


def as_task(value) -> TransportTask:
    if isinstance(value, TransportTask):
        return value
    if isinstance(value, dict):
        return TransportTask.from_dict(value)
    raise ValueError(f"task must be a TransportTask or its to_dict(), got {type(value).__name__}")
