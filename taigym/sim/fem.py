"""Linear elasticity of a solid block with linear tetrahedra (small strain, static): the
deformable supports of Bouyarmane 2011, "Multi-Contact Planning", part 5 (its extension to
linear-elasticity models). Knows nothing of robots or Gymnasium.

The solid is a box meshed as a structured grid of hexahedra, each cut into six tetrahedra
(Kuhn's subdivision: conforming across faces). With the displacement u linear on each
tetrahedron, the Galerkin discretisation of the paper's weak form gives K U = F, with
K = sum_e V_e B_e^T A B_e (V_e the volume, B_e the 6 x 12 strain-displacement matrix,
A the 6 x 6 elasticity matrix of Hooke's law in Voigt notation, engineering shears).

Contacts on the support (the paper's slides, whose symbols the text conversion lost): the
nodes D under a rigid contact surface are held at displacements U^D (the contact surface's
motion); the free nodes satisfy K^F U^F + K^D U^D = 0, i.e. U = [KK] U^D (:class:`DirichletPatch`).
The paper's nodal reaction force at a contact node j is

    f^(j) = sum over the tetrahedra e holding j of  -(alpha_e / 3) (n_e^T (x) I_3) [D][A][B_e][KK_e] U^D

with alpha_e and n_e the area and outward unit normal of the face of e opposite j, [B_e] the
strain-displacement matrix (strain of e from its nodes' displacements), [A] the elasticity
matrix, [D] the 9 x 6 duplication matrix (vec(sigma) = D sigma_Voigt), [KK_e] the rows of [KK]
of e's four nodes, so that (n^T (x) I) D A B_e KK_e U^D = sigma_e n_e, the traction of e's stress
on that face. Since the gradient of j's shape function on e is -alpha_e n_e / (3 V_e), the sum
is sum_e V_e B_ej^T sigma_e, the node's row of K U: the force that holds node j where it is,
i.e. the force the contact applies to the support (the support's force on the contact is its
opposite). The paper writes n_e(q): here the normal of the deformed face (rest nodes plus U),
whose gradient is its first term; with the rest normal the sum equals K U exactly.

Material constants are SI (Pa, kg/m^3). Compliance is linear in 1/E: a solid factorises K for
E = 1 Pa once per (mesh, nu) and scales.
"""

from __future__ import annotations

import hashlib
import itertools
import os
import tempfile
from dataclasses import dataclass, field

import numpy as np
from scipy import sparse
from scipy.sparse.linalg import splu

#: 9 x 6 duplication matrix: vec(sigma) (column-major 3 x 3) from Voigt (xx, yy, zz, yz, xz, xy)
DUPLICATION = np.zeros((9, 6))
for _v, (_i, _j) in enumerate(((0, 0), (1, 1), (2, 2), (1, 2), (0, 2), (0, 1))):
    DUPLICATION[_i + 3 * _j, _v] = DUPLICATION[_j + 3 * _i, _v] = 1.0


def elasticity_matrix(E: float, nu: float) -> np.ndarray:
    """Hooke's law, 6 x 6 in Voigt notation with engineering shears: sigma = A eps (Pa)."""
    if not (E > 0 and -1.0 < nu < 0.5):
        raise ValueError(f"need E > 0 and nu in (-1, 0.5); got E={E!r}, nu={nu!r}")
    lam = E * nu / ((1 + nu) * (1 - 2 * nu))
    mu = E / (2 * (1 + nu))
    A = np.zeros((6, 6))
    A[:3, :3] = lam
    A[np.arange(3), np.arange(3)] = lam + 2 * mu
    A[np.arange(3, 6), np.arange(3, 6)] = mu
    return A


def uniaxial_modulus(E: float, nu: float) -> float:
    """P-wave (oedometric) modulus E (1 - nu) / ((1 + nu)(1 - 2 nu)), Pa: stress over strain in
    uniaxial strain (a layer pressed with its sides held)."""
    return E * (1 - nu) / ((1 + nu) * (1 - 2 * nu))


@dataclass(frozen=True, eq=False)
class BoxMesh:
    """A box meshed as a structured grid of hexahedra, six tetrahedra each: ``xs``, ``ys``, ``zs``
    are the grid's levels along each axis (m, increasing; graded where a finer mesh is needed).
    Nodes are numbered i + nx (j + ny k) for grid indices (i, j, k), nx = len(xs), ny = len(ys)."""

    xs: tuple[float, ...]
    ys: tuple[float, ...]
    zs: tuple[float, ...]
    nodes: np.ndarray = field(init=False, repr=False)
    tets: np.ndarray = field(init=False, repr=False)

    @classmethod
    def uniform(cls, size, cells, origin=(0.0, 0.0, 0.0)) -> "BoxMesh":
        """The box [origin, origin + size] with ``cells`` = (nx, ny, nz) equal hexahedra."""
        if min(int(c) for c in cells) < 1 or min(size) <= 0:
            raise ValueError(f"cells must be >= 1 and size > 0; got cells={cells}, size={size}")
        return cls(*(tuple(o + np.linspace(0.0, L, int(n) + 1)) for o, L, n in zip(origin, size, cells)))

    def __post_init__(self) -> None:
        levels = [np.asarray(v, float) for v in (self.xs, self.ys, self.zs)]
        if any(len(v) < 2 or np.any(np.diff(v) <= 0) for v in levels):
            raise ValueError("xs, ys, zs must each hold at least 2 increasing levels")
        for name, v in zip(("xs", "ys", "zs"), levels):
            object.__setattr__(self, name, tuple(float(x) for x in v))
        Z, Y, X = np.meshgrid(levels[2], levels[1], levels[0], indexing="ij")
        object.__setattr__(self, "nodes", np.column_stack([X.ravel(), Y.ravel(), Z.ravel()]))
        nx, ny, nz = (len(v) - 1 for v in levels)
        # Kuhn: one tetrahedron per order in which the path from corner 000 to 111 visits the axes
        I, J, K = np.meshgrid(np.arange(nx), np.arange(ny), np.arange(nz), indexing="ij")
        base = np.stack([I.ravel(), J.ravel(), K.ravel()], axis=1)
        tets = []
        for perm in itertools.permutations(range(3)):
            corner = base.copy()
            verts = [self.index(*corner.T)]
            for ax in perm:
                corner = corner.copy()
                corner[:, ax] += 1
                verts.append(self.index(*corner.T))
            tets.append(np.stack(verts, axis=1))
        tets = np.concatenate(tets)
        # positive orientation (det of the edge matrix > 0)
        X4 = self.nodes[tets]
        det = np.linalg.det(np.transpose(X4[:, 1:] - X4[:, :1], (0, 2, 1)))
        flip = det < 0
        tets[flip, 2], tets[flip, 3] = tets[flip, 3].copy(), tets[flip, 2].copy()
        object.__setattr__(self, "tets", tets)

    @property
    def grid(self) -> tuple[int, int, int]:
        """Nodes along x, y, z."""
        return len(self.xs), len(self.ys), len(self.zs)

    def index(self, i, j, k):
        nx1, ny1, _ = self.grid
        return np.asarray(i) + nx1 * (np.asarray(j) + ny1 * np.asarray(k))

    def layer(self, k: int) -> np.ndarray:
        """Node indices of grid layer k (0: bottom; -1: top), (ny, nx) row-major."""
        nx1, ny1, nz1 = self.grid
        k = k % nz1
        return np.arange(k * nx1 * ny1, (k + 1) * nx1 * ny1)

    def key(self) -> tuple:
        return self.xs, self.ys, self.zs


def _gradients(mesh: BoxMesh) -> tuple[np.ndarray, np.ndarray]:
    """Shape function gradients (T, 4, 3) and volumes (T,) of the rest tetrahedra."""
    X4 = mesh.nodes[mesh.tets]
    Dm = np.transpose(X4[:, 1:] - X4[:, :1], (0, 2, 1))      # columns: edges from node 0
    G = np.linalg.inv(Dm)                                    # rows: gradients of nodes 1-3
    grads = np.concatenate([-G.sum(axis=1, keepdims=True), G], axis=1)
    return grads, np.abs(np.linalg.det(Dm)) / 6.0


def strain_displacement(grads: np.ndarray) -> np.ndarray:
    """B (..., 6, 12): Voigt strain (xx, yy, zz, 2yz, 2xz, 2xy) from the 4 nodes' displacements."""
    B = np.zeros(grads.shape[:-2] + (6, 12))
    for a in range(4):
        bx, by, bz = grads[..., a, 0], grads[..., a, 1], grads[..., a, 2]
        c = 3 * a
        B[..., 0, c], B[..., 1, c + 1], B[..., 2, c + 2] = bx, by, bz
        B[..., 3, c + 1], B[..., 3, c + 2] = bz, by
        B[..., 4, c], B[..., 4, c + 2] = bz, bx
        B[..., 5, c], B[..., 5, c + 1] = by, bx
    return B


def stiffness(mesh: BoxMesh, E: float, nu: float) -> sparse.csr_matrix:
    """The assembled stiffness K (3N x 3N, N/m): sum over tetrahedra of V B^T A B."""
    grads, vol = _gradients(mesh)
    B = strain_displacement(grads)
    Ke = vol[:, None, None] * (np.transpose(B, (0, 2, 1)) @ (elasticity_matrix(E, nu) @ B))
    dofs = (3 * mesh.tets[:, :, None] + np.arange(3)).reshape(-1, 12)
    rows = np.repeat(dofs, 12, axis=1).ravel()
    cols = np.tile(dofs, (1, 12)).ravel()
    n = 3 * len(mesh.nodes)
    return sparse.csr_matrix((Ke.ravel(), (rows, cols)), shape=(n, n))


class LinearElasticSolid:
    """A box of linear-elastic material (Young's modulus ``E``, Pa; Poisson's ratio ``nu``),
    the nodes ``fixed`` (default: the bottom layer, bonded to what it rests on) held, the others
    free. :meth:`displacement` solves K U = F for nodal loads; :meth:`response` gives the
    displacement of ``observed`` nodes (default: all) per unit load on any node: columns of
    K^-1, computed per loaded node (three solves) and cached in memory and, with
    :meth:`preload`, on disk (``$TAIGYM_CACHE_DIR``, default ``~/.cache/taigym``). The cache is
    keyed by the mesh's shape relative to its first node, nu and the node sets, so solids of the
    same shape anywhere in a scene, of any E, share it."""

    def __init__(self, mesh: BoxMesh, E: float, nu: float, fixed: np.ndarray | None = None,
                 observed: np.ndarray | None = None):
        self.elasticity = elasticity_matrix(E, nu)      # validates
        self.mesh, self.E, self.nu = mesh, float(E), float(nu)
        self.fixed = mesh.layer(0) if fixed is None else np.asarray(fixed, int)
        self.observed = np.arange(len(mesh.nodes)) if observed is None else np.unique(np.asarray(observed, int))
        self._unit = _unit_factor(mesh, self.nu, self.fixed, self.observed)
        self.grads, self.volumes = self._unit.grads, self._unit.volumes

    def displacement(self, loads: np.ndarray) -> np.ndarray:
        """Nodal displacements (N, 3), m, under nodal loads ``loads`` (N, 3), N."""
        F = np.asarray(loads, float).reshape(-1)
        return self._unit.solve(F[:, None])[:, 0].reshape(-1, 3) / self.E

    def response(self, rows: np.ndarray, load_nodes: np.ndarray) -> np.ndarray:
        """(3 len(rows), 3 len(load_nodes)): displacement of the ``rows`` nodes' dofs (observed
        nodes) per unit load (N) on each dof of ``load_nodes`` (m/N)."""
        cols = self._unit.columns(np.asarray(load_nodes, int))
        pos = self._unit.row_of[np.asarray(rows, int)]
        if np.any(pos < 0):
            raise ValueError("response: rows must be observed nodes of the solid")
        dofs = (3 * pos[:, None] + np.arange(3)).ravel()
        return cols[dofs] / self.E

    def preload(self, nodes: np.ndarray) -> None:
        """Make the unit-load columns of ``nodes`` available, from the disk cache if it holds
        them, else computed in one batch and added to it (written atomically)."""
        self._unit.preload(np.asarray(nodes, int))


def cache_dir() -> str:
    """``$TAIGYM_CACHE_DIR``, else ``$XDG_CACHE_HOME/taigym`` or ``~/.cache/taigym``."""
    return os.environ.get("TAIGYM_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "taigym")


class _UnitFactor:
    """K for E = 1 Pa with the fixed nodes removed, LU-factorised on first use; unit-load
    columns (observed rows only) cached per loaded node."""

    def __init__(self, mesh: BoxMesh, nu: float, fixed: np.ndarray, observed: np.ndarray, key: str):
        self.mesh, self.nu, self.fixed, self.observed, self.key = mesh, nu, fixed, observed, key
        self.grads, self.volumes = _gradients(mesh)
        self.n = 3 * len(mesh.nodes)
        self.row_of = np.full(len(mesh.nodes), -1)
        self.row_of[observed] = np.arange(len(observed))
        self._obs_dofs = (3 * observed[:, None] + np.arange(3)).ravel()
        self._lu = None
        self._cols: dict[int, np.ndarray] = {}

    @property
    def lu(self):
        if self._lu is None:
            K = stiffness(self.mesh, 1.0, self.nu).tocsc()
            mask = np.ones(self.n, bool)
            mask[(3 * self.fixed[:, None] + np.arange(3)).ravel()] = False
            self.free = np.flatnonzero(mask)
            self._lu = splu(K[self.free][:, self.free].tocsc(), permc_spec="COLAMD")
        return self._lu

    def solve(self, F: np.ndarray) -> np.ndarray:
        lu = self.lu
        out = np.zeros((self.n, F.shape[1]))
        out[self.free] = lu.solve(np.ascontiguousarray(F[self.free]))
        return out

    def columns(self, nodes: np.ndarray) -> np.ndarray:
        self._compute([int(i) for i in nodes if int(i) not in self._cols])
        if not len(nodes):
            return np.zeros((len(self._obs_dofs), 0))
        return np.hstack([self._cols[int(i)] for i in nodes])

    def _compute(self, missing: list[int]) -> None:
        # one node's three columns per solve: SuperLU's blocked solve rounds a column differently
        # with other right-hand sides beside it, and a column must not depend on which others
        # were asked for with it (results would then depend on the cache's history)
        for i in missing:
            F = np.zeros((self.n, 3))
            F[3 * i:3 * i + 3] = np.eye(3)
            self._cols[i] = self.solve(F)[self._obs_dofs].copy()

    def preload(self, nodes: np.ndarray) -> None:
        path = os.path.join(cache_dir(), "fem", self.key + ".npz")
        want = [int(i) for i in nodes if int(i) not in self._cols]
        if not want:
            return
        stored = {}
        if os.path.exists(path):
            try:
                with np.load(path) as z:
                    stored = {int(k): z[k] for k in z.files}
            except Exception:      # a damaged cache file is recomputed, not fatal
                stored = {}
        self._cols.update({i: c for i, c in stored.items() if i not in self._cols})
        missing = [i for i in want if i not in self._cols]
        if not missing:
            return
        self._compute(missing)
        stored.update({i: self._cols[i] for i in missing})
        try:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), suffix=".npz")
            with os.fdopen(fd, "wb") as f:
                np.savez(f, **{str(i): c for i, c in stored.items()})
            os.replace(tmp, path)           # atomic: readers never see half a file
        except OSError:
            pass                            # a read-only home: the columns still work


_FACTORS: dict[str, _UnitFactor] = {}
#: part of the disk cache's key: changed whenever the columns' computation changes, so that no
#: column computed another way (files written before the factors' canonical mesh) is read back
FACTOR_VERSION = b"unit columns 2: canonical mesh, one node per solve"
_MAX_FACTORS = 4


def _unit_factor(mesh: BoxMesh, nu: float, fixed: np.ndarray, observed: np.ndarray) -> _UnitFactor:
    """The factor of a (mesh shape, nu, fixed and observed nodes), shared by the solids built on
    it (an env rebuilds its support's solid on every reset; the factorisation and the columns are
    the expensive part). It is built on the mesh moved to its first node at the origin, never on
    the mesh of whichever solid asked first: K from absolute coordinates differs in its last bits
    with the pad's place, and the columns shared by every later solid then depended on which task
    a process ran first (an eval soft task's outcome changed with the episode order)."""
    rel = [np.round(np.asarray(v) - v[0], 9) for v in mesh.key()]
    h = hashlib.sha1(FACTOR_VERSION)
    for a in (*rel, np.array([nu]), fixed, observed):
        h.update(np.ascontiguousarray(a).tobytes())
    key = h.hexdigest()[:20]
    if key not in _FACTORS:
        if len(_FACTORS) >= _MAX_FACTORS:
            _FACTORS.pop(next(iter(_FACTORS)))
        _FACTORS[key] = _UnitFactor(BoxMesh(*(tuple(v) for v in rel)), nu, fixed, observed, key)
    return _FACTORS[key]


class DirichletPatch:
    """The nodes ``nodes`` (D) of ``solid`` held at displacements U^D by a contact: the paper's
    {U} = [KK]{U^D} and its nodal reaction forces with their gradient (module docstring).

    [KK] comes from unit-load columns: with C_DD the compliance between D's dofs, the loads
    C_DD^-1 U^D on D alone produce U^D there and leave the other nodes load-free, so
    U = G_{:,D} C_DD^-1 U^D (G the solid's unit-load response)."""

    def __init__(self, solid: LinearElasticSolid, nodes: np.ndarray):
        self.solid = solid
        self.nodes = np.asarray(nodes, int)
        mesh = solid.mesh
        nd = len(self.nodes)
        if nd == 0:
            raise ValueError("a patch needs at least one node")
        # the tetrahedra holding a patch node, and (tet, corner) pairs for each patch node
        in_patch = np.full(len(mesh.nodes), -1)
        in_patch[self.nodes] = np.arange(nd)
        hit = in_patch[mesh.tets] >= 0                      # (T, 4)
        tets = np.flatnonzero(hit.any(axis=1))
        self.tets = tets
        self.rel_nodes = np.unique(mesh.tets[tets])         # nodes whose displacement is needed
        rel_index = np.full(len(mesh.nodes), -1)
        rel_index[self.rel_nodes] = np.arange(len(self.rel_nodes))
        G = solid.response(self.rel_nodes, self.nodes)      # (3 R, 3 nd)
        dD = (3 * rel_index[self.nodes][:, None] + np.arange(3)).ravel()
        self.C_DD = G[dD]
        # [KK] restricted to the relevant nodes: U_rel = KK U^D
        self.KK = np.linalg.solve(self.C_DD.T, G.T).T
        # per (tet, corner j in the patch): the opposite face's rest area, its nodes and where
        # its outward normal points
        pairs = np.argwhere(hit[tets])                      # (P, 2): row into tets, corner
        self.pair_tet = tets[pairs[:, 0]]
        self.pair_patch = in_patch[mesh.tets[self.pair_tet, pairs[:, 1]]]
        corners = mesh.tets[self.pair_tet]                  # (P, 4)
        opp = np.array([[1, 2, 3], [0, 2, 3], [0, 1, 3], [0, 1, 2]])[pairs[:, 1]]
        self.face = np.take_along_axis(corners, opp, axis=1)           # (P, 3) node ids
        self.apex = corners[np.arange(len(pairs)), pairs[:, 1]]
        X = mesh.nodes
        m = np.cross(X[self.face[:, 1]] - X[self.face[:, 0]], X[self.face[:, 2]] - X[self.face[:, 0]])
        self.alpha = 0.5 * np.linalg.norm(m, axis=1)        # rest face areas, m^2
        # outward from the tet: away from the apex node
        self._sign = -np.sign(np.einsum("pi,pi->p", m, X[self.apex] - X[self.face[:, 0]]))
        # stress per unit nodal displacement of each pair's tet: sigma_Voigt = A B_e U_e
        B = strain_displacement(solid.grads[self.pair_tet])                       # (P, 6, 12)
        tet_dofs = (3 * rel_index[corners][:, :, None] + np.arange(3)).reshape(-1, 12)
        self._tet_dofs = tet_dofs
        # S_p = D A B_e KK_e: vec(sigma) of the pair's tet per unit U^D, (P, 9, 3 nd)
        self.S = ((DUPLICATION @ solid.elasticity) @ B) @ self.KK[tet_dofs]     # batched products (BLAS)
        self._face_dofs = (3 * rel_index[self.face][:, :, None] + np.arange(3))   # (P, 3, 3)

    # ------------------------------------------------------------------ the paper's relation
    def field(self, UD: np.ndarray) -> np.ndarray:
        """Displacements (R, 3) of the relevant nodes (``rel_nodes``) for patch displacements UD (nd, 3)."""
        return (self.KK @ np.asarray(UD, float).reshape(-1)).reshape(-1, 3)

    def normals(self, UD: np.ndarray, deformed: bool = True):
        """Outward unit normals (P, 3) of the faces opposite each patch node in each tet, on the
        deformed mesh (``deformed``) or the rest mesh, and the unnormalised m = e1 x e2 (P, 3)."""
        X = self.solid.mesh.nodes
        Y = X[self.face]                                                # (P, 3, 3)
        if deformed:
            U = self.field(UD).reshape(-1)
            Y = Y + U[self._face_dofs]
        e1, e2 = Y[:, 1] - Y[:, 0], Y[:, 2] - Y[:, 0]
        m = np.cross(e1, e2) * self._sign[:, None]
        return m / np.linalg.norm(m, axis=1, keepdims=True), m, e1, e2

    def reactions(self, UD: np.ndarray, deformed: bool = True) -> np.ndarray:
        """The paper's f^(j) (nd, 3), N: the force the contact applies to the support at each
        patch node for patch displacements UD (nd, 3), m."""
        n, *_ = self.normals(UD, deformed)
        vs = self.S @ np.asarray(UD, float).reshape(-1)                 # (P, 9) vec(sigma)
        sig = vs.reshape(-1, 3, 3).transpose(0, 2, 1)                   # column-major vec -> matrix
        t = -(self.alpha / 3.0)[:, None] * np.einsum("pij,pj->pi", sig, n)
        out = np.zeros((len(self.nodes), 3))
        np.add.at(out, self.pair_patch, t)
        return out

    def reactions_jacobian(self, UD: np.ndarray, deformed: bool = True) -> np.ndarray:
        """d f / d U^D (3 nd, 3 nd) of :meth:`reactions`: the paper's gradient with dU^D/dq left
        to the caller (chain rule): the normal's term and the stress term."""
        UD = np.asarray(UD, float).reshape(-1)
        n, m, e1, e2 = self.normals(UD, deformed)
        vs = self.S @ UD
        sig = vs.reshape(-1, 3, 3).transpose(0, 2, 1)
        a3 = (self.alpha / 3.0)[:, None, None]
        # stress term: -(alpha/3)(n^T (x) I) S   (n^T (x) I) vec(s) = s n = sum_k n_k s[:, k]
        NI = np.einsum("pk,ij->pikj", n, np.eye(3)).reshape(-1, 3, 9)   # (P, 3, 9): columns (i + 3k)
        dt = -a3 * (NI @ self.S)
        if deformed:
            # normal term: -(alpha/3) sigma dn/dU^D, n = s m/|m|, m = e1 x e2, e_k = y_k - y_0
            P = len(n)
            KKf = self.KK[self._face_dofs.reshape(P, 9)].reshape(P, 3, 3, -1)     # d y_face / d U^D
            de1, de2 = KKf[:, 1] - KKf[:, 0], KKf[:, 2] - KKf[:, 0]
            dm = np.cross(de1, e2[:, :, None], axisa=1, axisb=1, axisc=1) + np.cross(
                e1[:, :, None], de2, axisa=1, axisb=1, axisc=1)
            dm *= self._sign[:, None, None]
            nm = np.linalg.norm(m, axis=1)[:, None, None]
            proj = (np.eye(3)[None] - n[:, :, None] * n[:, None, :]) / nm
            dn = proj @ dm
            dt = dt - a3 * (sig @ dn)
        out = np.zeros((len(self.nodes), 3, dt.shape[2]))
        np.add.at(out, self.pair_patch, dt)
        return out.reshape(3 * len(self.nodes), -1)

    def consistent_reactions(self, UD: np.ndarray) -> np.ndarray:
        """C_DD^-1 U^D (nd, 3): the loads on the patch nodes that hold them at UD (equal to
        :meth:`reactions` on the rest mesh, to round-off)."""
        return np.linalg.solve(self.C_DD, np.asarray(UD, float).reshape(-1)).reshape(-1, 3)
