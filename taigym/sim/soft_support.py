"""A deformable support in a pybullet scene: a linear-elastic pad (Bouyarmane 2011,
"Multi-Contact Planning", part 5) whose top face is a heightfield moved by a finite-element
model each physics step. No Gymnasium, no planner.

Why this model (measured with a 20 kg box, 22 x 9 cm, on a 0.6 x 0.4 x 0.1 m pad, E = 1 MPa,
nu = 0.4): pybullet's own FEM deformables (``loadSoftBody`` in a deformable world, Neo-Hookean
tetrahedra) let the box fall through the pad at the scenes' 1/240 s step (with collision margins
of 2 and 6 mm, face contact on or off); at 1 ms steps the box rests, but on the contact margin's
cushion (1.6 mm above the surface) rather than in the elastic dent, at 17-21 ms of computation per
1 ms step. Here the pad is a linear FEM (:mod:`taigym.sim.fem`: the paper's model, also the
planner's), coupled quasi-statically: the pad's first compression mode (c / 4T, c the P-wave
speed) is 50-200 Hz for E in 0.25-4 MPa and rho = 1000 kg/m^3, far above a robot's motions, so
its inertia is left out.

Coupling, each physics step (:meth:`SoftSupport.update`):

1. pybullet's contact forces between the robot and the heightfield, summed per robot link into a
   wrench (force and moment about the link's footprint centre);
2. each touching link is a rigid punch: the pad's top nodes under it (within half a node spacing
   of its flat face's corners, a sole's, as the caller gives them; of its contact points for
   other links) move as one rigid body, with loads that make up its wrench; solved jointly for
   all links with the pad's compliance between those nodes (C_DD f = Phi r, Phi^T f = wrench);
3. the vertical displacement of every top node (the nodal loads through the compliance), which
   the pad's top follows with its viscoelastic retardation time, moves the heightfield's vertices.

The rigid sole under a flat contact then rests in a dent whose floor is the punch's rigid
motion, as on a real pad; pybullet reports at most four contact points per body pair, so the
contact points themselves are not used as point loads (their distribution is the solver's, not
the pad's). Below the heightfield a rigid core, and along its edges a rigid rim up to 2 mm below
the top, keep links off the pad's sides; the heightfield's collision margin is 0.5 mm.

The pad's sink is :meth:`SoftSupport.dent`, the depression of its top face (the FEM's state);
a sole resting in it sits within pybullet's contact resolution (0.1-0.3 mm) of it.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np
import pybullet as p
from scipy.linalg import LinAlgWarning, lu_factor, lu_solve

from . import fem

PAD_SIZE = (0.9, 2.0, 0.1)      #: m, length (x), width (y), thickness of a soft pad
HF_SPACING = 0.02               #: m, the heightfield's and the fine mesh's node spacing
FINE_HALF_WIDTH = 0.16          #: m, the mesh is fine (HF_SPACING) for |y - centre| <= this
PAD_LEVELS = (0.0, 0.4, 0.7, 0.9, 1.0)   #: layer levels as fractions of the thickness: finer near the top
PIN_DEPTH = 0.05                #: m, the heightfield's fixed lower bound (deepest dent it represents)
CORE_GAP = 0.03                 #: m, the rigid core stops this far below the pad's top
HF_MARGIN = 5e-4                #: m, the heightfield's collision margin (see SoftSupport)
RIM = 0.01                      #: m, width of the rigid rim along the pad's edges (see SoftSupport)
RIM_GAP = 0.002                 #: m, the rim stops this far below the pad's top
FOOTPRINT_TILT = 0.01           #: m, a face's corners this close to its lowest bear on the pad
FOOTPRINT_HYSTERESIS = 0.003    #: m, see SoftSupport.update
#: m, a face bears on the top nodes within this of it: with only the nodes strictly under a
#: sole, it bridged the dent on the triangles beyond its last row (0.5 mm above a 1.07 mm dent)
FOOTPRINT_GROW = 0.5 * HF_SPACING
#: s, the pad's viscoelastic retardation time (Kelvin-Voigt: the strain follows the quasi-static
#: response of the load with this time constant; foams' loss factors of 0.1-0.5 at 1-10 Hz give
#: 5-50 ms). It also keeps the explicit coupling from ringing: applied at once (the wave time,
#: 2 ms), the response let a 40 kg box lose contact and bounce on the pad (0.6 mm rms)
RETARDATION = 0.02


@dataclass(frozen=True)
class SoftBlock:
    """A linear-elastic pad bonded to what it rests on: x from ``x0`` to ``x0 + size[0]``, y
    centred on ``y0``, top face at z = ``top`` (m). ``E`` Pa, ``nu``, ``rho`` kg/m^3."""

    x0: float
    top: float
    E: float
    nu: float = 0.4
    rho: float = 1000.0
    y0: float = 0.0
    size: tuple[float, float, float] = PAD_SIZE
    retardation: float = RETARDATION

    def __post_init__(self) -> None:
        fem.elasticity_matrix(self.E, self.nu)       # validates E and nu
        if not self.rho > 0:
            raise ValueError(f"rho must be > 0, got {self.rho!r}")
        if not self.retardation >= 0:
            raise ValueError(f"retardation must be >= 0 s, got {self.retardation!r}")

    def mesh(self) -> fem.BoxMesh:
        """The pad's mesh: HF_SPACING along x and, within FINE_HALF_WIDTH of the centre line,
        along y; beyond, cells doubling out to each side; layers finer towards the top
        (PAD_LEVELS)."""
        L, W, T = self.size
        nx = int(round(L / HF_SPACING))
        xs = self.x0 + np.linspace(0.0, L, nx + 1)
        fine = np.arange(-FINE_HALF_WIDTH, FINE_HALF_WIDTH + 1e-9, HF_SPACING)
        out, h = [], 2 * HF_SPACING
        while FINE_HALF_WIDTH + sum(out) + h < W / 2 - 1e-9:
            out.append(h)
            h *= 2
        side = FINE_HALF_WIDTH + np.cumsum(out + [W / 2 - FINE_HALF_WIDTH - sum(out)])
        ys = self.y0 + np.r_[-side[::-1], fine, side]
        zs = self.top - T + np.asarray(PAD_LEVELS) * T
        return fem.BoxMesh(tuple(xs), tuple(ys), tuple(zs))

    def solid(self) -> fem.LinearElasticSolid:
        """The pad's FEM, its bottom bonded, observed on its top two node layers (the top face
        and the tetrahedra touching it: what contacts and the heightfield need)."""
        mesh = self.mesh()
        return fem.LinearElasticSolid(mesh, self.E, self.nu, observed=np.r_[mesh.layer(-2), mesh.layer(-1)])

    def contains(self, x: float, y: float, margin: float = 0.0) -> bool:
        """Whether (x, y) lies on the pad's top face (at least ``margin`` inside its edges)."""
        L, W, _ = self.size
        return self.x0 + margin <= x <= self.x0 + L - margin and abs(y - self.y0) <= W / 2 - margin


def top_nodes_under(solid: fem.LinearElasticSolid, polygon: np.ndarray, tol: float = FOOTPRINT_GROW) -> np.ndarray:
    """The solid's top nodes whose (x, y) lie inside the convex polygon (k, 2) grown by ``tol``
    (m; by default half a node spacing: the nodes whose cells the face covers, as the
    heightfield's triangles between a face's last node inside and first outside bear its edge);
    for fewer than three points, the nodes within ``tol`` + half a spacing of them."""
    mesh = solid.mesh
    poly = np.asarray(polygon, float)[:, :2]
    # candidates: the top grid's nodes in the polygon's bounding box (grown by a spacing)
    pad = abs(tol) + HF_SPACING
    xs, ys = np.asarray(mesh.xs), np.asarray(mesh.ys)
    i0, i1 = np.searchsorted(xs, poly[:, 0].min() - pad), np.searchsorted(xs, poly[:, 0].max() + pad)
    j0, j1 = np.searchsorted(ys, poly[:, 1].min() - pad), np.searchsorted(ys, poly[:, 1].max() + pad)
    I, J = np.meshgrid(np.arange(i0, i1), np.arange(j0, j1))
    top = mesh.index(I.ravel(), J.ravel(), len(mesh.zs) - 1)
    if not len(top):                  # off the pad: the nearest top node
        top = mesh.layer(-1)
    X = mesh.nodes[top, :2]
    if len(poly) >= 3:
        hull = _convex_hull(poly)
        if hull is not None:
            inside = np.ones(len(X), bool)
            for a, b in zip(hull, np.roll(hull, -1, axis=0)):
                e = b - a
                n = np.array([e[1], -e[0]]) / np.linalg.norm(e)     # outward for a counter-clockwise hull
                inside &= (X - a) @ n <= tol
            if inside.any():
                return top[inside]
    d = np.min(np.linalg.norm(X[:, None, :] - poly[None], axis=2), axis=1)
    near = d <= tol + 0.5 * HF_SPACING
    return top[near] if near.any() else top[[int(np.argmin(d))]]


def _convex_hull(pts: np.ndarray) -> np.ndarray | None:
    """Counter-clockwise convex hull (monotone chain) of a few 2-D points; None if degenerate."""
    P = sorted({(round(float(x), 9), round(float(y), 9)) for x, y in pts})
    if len(P) < 3:
        return None

    def cross(o, a, b):
        return (a[0] - o[0]) * (b[1] - o[1]) - (a[1] - o[1]) * (b[0] - o[0])

    lower, upper = [], []
    for q in P:
        while len(lower) >= 2 and cross(lower[-2], lower[-1], q) <= 1e-12:
            lower.pop()
        lower.append(q)
    for q in reversed(P):
        while len(upper) >= 2 and cross(upper[-2], upper[-1], q) <= 1e-12:
            upper.pop()
        upper.append(q)
    hull = lower[:-1] + upper[:-1]
    return np.array(hull) if len(hull) >= 3 else None


def rigid_modes(points: np.ndarray, centre: np.ndarray, rotations: bool = True) -> np.ndarray:
    """Phi (3k, 6) (or (3k, 3) without rotations): the displacements of points moving with a
    rigid body whose motion is (translation t, small rotation theta) about ``centre``:
    t + theta x (x - c); Phi^T f is the loads' force and moment about the centre."""
    k = len(points)
    r = np.asarray(points, float) - np.asarray(centre, float)
    Phi = np.zeros((3 * k, 6 if rotations else 3))
    for i in range(k):
        Phi[3 * i:3 * i + 3, :3] = np.eye(3)
        if rotations:
            x, y, z = r[i]
            Phi[3 * i:3 * i + 3, 3:] = -np.array([[0, -z, y], [z, 0, -x], [-y, x, 0]])
    return Phi


class Punches:
    """Rigid punches on a solid's top, solved together (they interact through the solid): punch
    i moves its top nodes ``nodes[i]`` as one rigid body (translation, and small rotation about
    the nodes' centre when it has three or more), with nodal loads that make up its wrench.
    The saddle system [[C_DD, -Phi], [Phi^T, 0]] (C_DD the compliance between the punches'
    nodes) is factorised once: a wrench costs two triangular solves."""

    def __init__(self, solid: fem.LinearElasticSolid, nodes: list[np.ndarray]):
        self.nodes = [np.asarray(n, int) for n in nodes]
        self.all_nodes = np.concatenate(self.nodes)
        self.centres = [solid.mesh.nodes[n].mean(axis=0) for n in self.nodes]
        self.rot = [len(n) >= 3 for n in self.nodes]
        C = solid.response(self.all_nodes, self.all_nodes)
        blocks = [rigid_modes(solid.mesh.nodes[n], c, rotations=r) for n, c, r in zip(self.nodes, self.centres, self.rot)]
        m = sum(b.shape[1] for b in blocks)
        Phi = np.zeros((len(C), m))
        row = col = 0
        for b in blocks:
            Phi[row:row + b.shape[0], col:col + b.shape[1]] = b
            row, col = row + b.shape[0], col + b.shape[1]
        self.A = np.block([[C, -Phi], [Phi.T, np.zeros((m, m))]])
        self.widths = [b.shape[1] for b in blocks]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", LinAlgWarning)
            lu, piv = lu_factor(self.A, check_finite=False)
        # nodes on a line (an edge contact): a moment about it has no stiffness, the matrix is singular
        singular = np.abs(np.diag(lu)).min() <= 1e-12 * np.abs(np.diag(lu)).max()
        self._lu = None if singular else (lu, piv)

    def solve(self, wrenches) -> tuple[np.ndarray, list[np.ndarray]]:
        """Nodal loads (k, 3) on ``all_nodes`` (N) and each punch's rigid motion (t, theta) for
        the punches' wrenches (6,) (force, moment about the punch's centre; N, N m); a punch with
        fewer than three nodes takes the force only."""
        rhs = np.concatenate([np.asarray(w, float)[:k] for w, k in zip(wrenches, self.widths)])
        b = np.r_[np.zeros(3 * len(self.all_nodes)), rhs]
        if self._lu is not None:
            sol = lu_solve(self._lu, b, check_finite=False)
        else:                   # singular (see __init__): the least-squares loads
            sol = np.linalg.lstsq(self.A, b, rcond=1e-10)[0]
        motions, col = [], 3 * len(self.all_nodes)
        for k in self.widths:
            motions.append(sol[col:col + k])
            col += k
        return sol[:3 * len(self.all_nodes)].reshape(-1, 3), motions


class SoftSupport:
    """A :class:`SoftBlock` in a pybullet client: a rigid core below and a heightfield on top
    whose vertices follow the pad's top nodes (module docstring). ``update(robot_body, dt)``
    after each physics step; ``dent(x, y)`` the current depression of the top face (m, > 0 down)."""

    def __init__(self, client: int, block: SoftBlock, friction: float, *, visual: bool = True):
        self.client, self.block = client, block
        self.solid = block.solid()
        mesh = self.solid.mesh
        self.top = mesh.layer(-1)
        L, W, T = block.size
        self.hx = np.asarray(mesh.xs)                                # heightfield x = mesh x levels
        ny = int(round(W / HF_SPACING)) + 1
        self.hy = block.y0 - W / 2 + HF_SPACING * np.arange(ny)
        # vertical displacement of the heightfield's vertices from the top nodes' (linear in y)
        self._interp = _interp_matrix(np.asarray(mesh.ys), self.hy)
        self.uz_top = np.zeros(len(self.top))                        # m, the top nodes' current uz
        self.loads = {}                                              # link -> (nodes, loads (k, 3), N)
        self._punches: dict[tuple, tuple] = {}       # footprints -> (Punches, uz of the top per load)
        self._footprints: dict[int, np.ndarray] = {}  # link -> its footprint's nodes, last step
        pin = np.zeros((ny, len(self.hx)))
        pin[0, 0] = -PIN_DEPTH          # fixes the shape's height range: Bullet centres it on (min + max) / 2
        self._hf_args = dict(meshScale=[HF_SPACING, HF_SPACING, 1.0], numHeightfieldRows=len(self.hx),
                             numHeightfieldColumns=ny, physicsClientId=client)
        self.shape = p.createCollisionShape(p.GEOM_HEIGHTFIELD, heightfieldData=list(pin.ravel()), **self._hf_args)
        centre = [block.x0 + L / 2, block.y0, block.top - PIN_DEPTH / 2]
        self.body = p.createMultiBody(0.0, self.shape, -1, centre, [0, 0, 0, 1], physicsClientId=client)
        # Bullet gives a heightfield a collision margin of centimetres: links then touched the pad
        # that far above it (a shin 4 cm over the pad's edge caught on it, soft eval task 2 fell)
        p.changeDynamics(self.body, -1, lateralFriction=float(friction), collisionMargin=HF_MARGIN,
                         physicsClientId=client)
        if visual:
            p.changeVisualShape(self.body, -1, rgbaColor=(0.45, 0.62, 0.45, 1.0), physicsClientId=client)
        self._set_heights(np.zeros(len(self.hx) * ny))
        # a rigid core below the top face, and a rim along its edges up to RIM_GAP below the top:
        # without it a toe rising along the pad's front slid into the slot between the core and
        # the heightfield's edge and jammed there (soft eval task 2: the swing pushed the robot
        # over backwards)
        core_h, rim_h = T - CORE_GAP, T - RIM_GAP
        x0, y0, z0 = block.x0, block.y0, block.top - T
        parts = [((L, W, core_h), (x0 + L / 2, y0))]
        parts += [((RIM, W, rim_h), (x0 + RIM / 2, y0)), ((RIM, W, rim_h), (x0 + L - RIM / 2, y0))]
        parts += [((L, RIM, rim_h), (x0 + L / 2, y0 + sgn * (W - RIM) / 2)) for sgn in (-1.0, 1.0)]
        self.core = []
        for (sx, sy, sz), (cx, cy) in parts:
            col = p.createCollisionShape(p.GEOM_BOX, halfExtents=[sx / 2, sy / 2, sz / 2], physicsClientId=client)
            vis = p.createVisualShape(p.GEOM_BOX, halfExtents=[sx / 2, sy / 2, sz / 2], rgbaColor=(0.45, 0.62, 0.45, 1.0),
                                      physicsClientId=client) if visual else -1
            body = p.createMultiBody(0.0, col, vis, [cx, cy, z0 + sz / 2], [0, 0, 0, 1], physicsClientId=client)
            p.changeDynamics(body, -1, lateralFriction=float(friction), physicsClientId=client)
            self.core.append(body)

    @property
    def body_ids(self) -> list[int]:
        return [self.body] + self.core

    def _set_heights(self, h: np.ndarray) -> None:
        p.createCollisionShape(p.GEOM_HEIGHTFIELD, heightfieldData=list(map(float, h)),
                               replaceHeightfieldIndex=self.shape, **self._hf_args)

    def update(self, robot_body: int, dt: float, footprints: dict | None = None) -> None:
        """Move the top face towards the pad's response to the robot's current contact forces on
        it with the retardation time :attr:`SoftBlock.retardation` (module docstring).
        ``footprints``: link index -> the world corners (k, 3) of that link's flat contact face
        (a sole's); its punch is then the top nodes under the corners within FOOTPRINT_TILT of the
        lowest (under a tilted sole, its lower edge). Other links' punches are the nodes under
        their contact points (pybullet's manifold keeps four points that wander over a flat
        face from step to step: as a footprint they made a resting box rock on its dent)."""
        c = self.client
        by_link: dict[int, list] = {}
        for cp in p.getContactPoints(robot_body, self.body, physicsClientId=c):
            by_link.setdefault(cp[3], []).append(cp)
        faces, wrenches, links = [], [], []
        for link, cps in by_link.items():
            if sum(cp[9] for cp in cps) <= 0.0:
                continue
            pos = np.array([cp[6] for cp in cps])                    # on the pad
            # the force on the robot at each point: normal (along the pad's normal, B -> A) and friction
            f_rob = np.array([cp[9] * np.asarray(cp[7]) + cp[10] * np.asarray(cp[11]) + cp[12] * np.asarray(cp[13])
                              for cp in cps])
            face = (footprints or {}).get(link)
            if face is not None:
                face = np.asarray(face, float)
                face = face[face[:, 2] <= face[:, 2].min() + FOOTPRINT_TILT]
            shape = pos if face is None else face
            nodes = top_nodes_under(self.solid, shape)
            # keep the link's last footprint while it differs only by nodes within FOOTPRINT_HYSTERESIS
            # of the face's edges (a node on an edge flickered in and out with the sole's jitter,
            # each new footprint a new factorisation)
            prev = self._footprints.get(link)
            if prev is not None and not np.array_equal(prev, nodes):
                inner = top_nodes_under(self.solid, shape, tol=FOOTPRINT_GROW - FOOTPRINT_HYSTERESIS)
                outer = top_nodes_under(self.solid, shape, tol=FOOTPRINT_GROW + FOOTPRINT_HYSTERESIS)
                if np.isin(inner, prev).all() and np.isin(prev, outer).all():
                    nodes = prev
            faces.append(nodes)
            wrenches.append((pos, f_rob))
            links.append(link)
        target = np.zeros(len(self.top))
        self.loads = {}
        if faces:
            key = tuple(tuple(int(i) for i in n) for n in faces)
            if key not in self._punches:
                self.solid.preload(np.concatenate(faces))     # columns from the disk cache, or computed once
                punches = Punches(self.solid, faces)
                self._punches[key] = (punches, self.solid.response(self.top, punches.all_nodes)[2::3])
            punches, G = self._punches[key]
            # the pad's loads are the opposite of the robot's forces; moments about each punch's centre
            w = [np.r_[-f.sum(axis=0), -np.cross(pos - c, f).sum(axis=0)]
                 for (pos, f), c in zip(wrenches, punches.centres)]
            f, _ = punches.solve(w)
            target = G @ f.ravel()
            k = 0
            for link, n in zip(links, faces):
                self.loads[link] = (n, f[k:k + len(n)])
                k += len(n)
        self._footprints = dict(zip(links, faces))
        a = min(1.0, dt / max(self.block.retardation, 1e-9))
        self.uz_top += a * (target - self.uz_top)
        nx = len(self.hx)
        uz_grid = self.uz_top.reshape(-1, nx)                      # (mesh ys, xs)
        self._set_heights((self._interp @ uz_grid).ravel())

    def dent(self, x: float, y: float) -> float:
        """The top face's depression (m, positive down) at (x, y), bilinear on the heightfield."""
        nx = len(self.hx)
        uz = self._interp @ self.uz_top.reshape(-1, nx)
        return -float(_bilinear(self.hx, self.hy, uz, x, y))


def _interp_matrix(src: np.ndarray, dst: np.ndarray) -> np.ndarray:
    """(len(dst), len(src)): linear interpolation from levels ``src`` to points ``dst``."""
    out = np.zeros((len(dst), len(src)))
    for i, y in enumerate(dst):
        j = int(np.clip(np.searchsorted(src, y) - 1, 0, len(src) - 2))
        w = (y - src[j]) / (src[j + 1] - src[j])
        out[i, j], out[i, j + 1] = 1.0 - w, w
    return out


def _bilinear(xs, ys, grid, x, y) -> float:
    i = int(np.clip(np.searchsorted(xs, x) - 1, 0, len(xs) - 2))
    j = int(np.clip(np.searchsorted(ys, y) - 1, 0, len(ys) - 2))
    wx = np.clip((x - xs[i]) / (xs[i + 1] - xs[i]), 0.0, 1.0)
    wy = np.clip((y - ys[j]) / (ys[j + 1] - ys[j]), 0.0, 1.0)
    return ((1 - wy) * ((1 - wx) * grid[j, i] + wx * grid[j, i + 1])
            + wy * ((1 - wx) * grid[j + 1, i] + wx * grid[j + 1, i + 1]))
