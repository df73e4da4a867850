"""taigym.sim.fem: linear elasticity against closed-form solutions; the paper's nodal reaction
forces (Bouyarmane 2011, "Multi-Contact Planning", part 5) against K U and their gradient
against finite differences."""

import numpy as np
import pytest
from scipy.sparse.linalg import splu

from taigym.sim import fem

E, NU = 1e6, 0.4        # the paper's support: E = 1e6 Pa, nu = 0.4


def _solve(mesh, fixed_dofs, U_fixed, F):
    K = fem.stiffness(mesh, E, NU).tocsc()
    free = ~fixed_dofs
    U = np.zeros(K.shape[0])
    U[fixed_dofs] = U_fixed
    U[free] = splu(K[free][:, free].tocsc()).solve(F[free] - K[free][:, fixed_dofs] @ U_fixed)
    return U


def test_block_under_uniform_pressure_in_uniaxial_strain():
    """A layer h thick, its sides held laterally and its bottom fixed, pressed by p: its top
    sinks p h / M, M = E (1 - nu) / ((1 + nu)(1 - 2 nu)) (closed form)."""
    h, p = 0.1, 2e4
    mesh = fem.BoxMesh.uniform((0.2, 0.2, h), (3, 3, 4))
    n = 3 * len(mesh.nodes)
    fixed = np.zeros(n, bool)
    fixed[0::3] = fixed[1::3] = True
    fixed[(3 * mesh.layer(0)[:, None] + np.arange(3)).ravel()] = True
    # consistent nodal loads of the pressure: a third of each top triangle's force on its corners
    F = np.zeros(n)
    nx = mesh.grid[0]
    top = mesh.layer(-1).reshape(-1, nx)
    X = mesh.nodes
    for j in range(top.shape[0] - 1):
        for i in range(nx - 1):
            a, b, c, d = top[j, i], top[j, i + 1], top[j + 1, i], top[j + 1, i + 1]
            for tri in ((a, b, d), (a, d, c)):
                area = 0.5 * np.linalg.norm(np.cross(X[tri[1]] - X[tri[0]], X[tri[2]] - X[tri[0]]))
                F[3 * np.array(tri) + 2] -= p * area / 3
    U = _solve(mesh, fixed, np.zeros(fixed.sum()), F)
    expect = -p * h / fem.uniaxial_modulus(E, NU)
    np.testing.assert_allclose(U[3 * mesh.layer(-1) + 2], expect, rtol=1e-6)


def _boussinesq(X, P):
    """Displacement (x, y, z up) of a half-space z <= 0 under a point load P pushing down at the
    origin (Boussinesq; Johnson, Contact Mechanics, eq. 3.21)."""
    x, y, z = X.T
    d, r = -z, np.hypot(x, y)
    rho = np.sqrt(r ** 2 + d ** 2)
    c = (1 + NU) * P / (2 * np.pi * E)
    ur = c * (r * d / rho ** 3 - (1 - 2 * NU) * r / (rho * (rho + d)))
    uz = -c * (d ** 2 / rho ** 3 + 2 * (1 - NU) / rho)
    safe = np.where(r > 0, r, 1.0)
    return np.column_stack([ur * x / safe, ur * y / safe, uz])


def test_point_load_on_a_half_space_matches_boussinesq():
    """A block whose sides and bottom take Boussinesq's displacements, loaded by a point force
    at its top centre: the top's vertical displacement along a radius is Boussinesq's
    (1 - nu^2) P / (pi E r) within 5 % from the second node out (the first is next to the
    load's singularity). Mesh graded from 6 mm at the load by 1.4 per cell."""
    P = 100.0
    lv = [0.0]
    h = 0.006
    while lv[-1] < 0.3:
        lv.append(lv[-1] + h)
        h *= 1.4
    lv = np.array(lv)
    xs = np.r_[-lv[::-1], lv[1:]]
    mesh = fem.BoxMesh(tuple(xs), tuple(xs), tuple(-lv[::-1]))
    X = mesh.nodes
    R = lv[-1]
    bnd = (np.isclose(np.abs(X[:, 0]), R) | np.isclose(np.abs(X[:, 1]), R) | np.isclose(X[:, 2], -R))
    F = np.zeros(3 * len(X))
    centre = int(np.flatnonzero(np.all(np.abs(X) < 1e-12, axis=1))[0])
    F[3 * centre + 2] = -P
    U = _solve(mesh, np.repeat(bnd, 3), _boussinesq(X[bnd], P).ravel(), F)
    ray = np.flatnonzero(np.isclose(X[:, 2], 0) & np.isclose(X[:, 1], 0) & (X[:, 0] > 0) & ~bnd)
    ray = ray[np.argsort(X[ray, 0])][1:]
    exact = -(1 - NU ** 2) * P / (np.pi * E * X[ray, 0])
    np.testing.assert_allclose(_boussinesq(X[ray], P)[:, 2], exact, rtol=1e-12)
    err = U[3 * ray + 2] / exact - 1
    assert len(ray) >= 6 and np.abs(err).max() < 0.05, err


@pytest.fixture(scope="module")
def patch():
    mesh = fem.BoxMesh.uniform((0.3, 0.2, 0.08), (15, 10, 3))
    solid = fem.LinearElasticSolid(mesh, E, NU)
    top = mesh.layer(-1)
    X = mesh.nodes[top]
    nodes = top[(np.abs(X[:, 0] - 0.15) <= 0.06) & (np.abs(X[:, 1] - 0.1) <= 0.03)]
    return fem.DirichletPatch(solid, nodes)


def test_the_papers_nodal_reactions_are_the_consistent_forces_K_U(patch):
    """On the rest mesh, sum_e -(alpha_e/3)(n_e^T (x) I) D A B_e KK_e U^D is node j's row of K U:
    the loads that hold the patch at U^D (here computed through the compliance instead)."""
    rng = np.random.default_rng(0)
    UD = rng.normal(0.0, 1e-3, (len(patch.nodes), 3))
    f = patch.reactions(UD, deformed=False)
    np.testing.assert_allclose(f, patch.consistent_reactions(UD), atol=1e-8 * np.abs(f).max())
    # and those loads alone (K U = F, F zero off the patch) hold the patch at U^D, the field [KK] U^D
    F = np.zeros((len(patch.solid.mesh.nodes), 3))
    F[patch.nodes] = f
    U = patch.solid.displacement(F)
    np.testing.assert_allclose(U[patch.nodes], UD, atol=1e-9)
    np.testing.assert_allclose(U[patch.rel_nodes], patch.field(UD), atol=1e-9)


def test_pressing_the_patch_down_pushes_the_contact_up_with_the_deformed_normals(patch):
    UD = np.zeros((len(patch.nodes), 3))
    UD[:, 2] = -2e-3
    rest, deformed = patch.reactions(UD, deformed=False), patch.reactions(UD)
    assert rest[:, 2].sum() < 0        # the contact pushes the pad down: the pad pushes it up
    assert abs(deformed[:, 2].sum() / rest[:, 2].sum() - 1) < 0.02    # normals turn by O(strain)


def test_reaction_gradient_matches_finite_differences(patch):
    """The paper's gradient (the deformed normals' term and the displacements') against central
    differences."""
    rng = np.random.default_rng(1)
    UD = rng.normal(0.0, 1e-3, (len(patch.nodes), 3))
    J = patch.reactions_jacobian(UD)
    h = 1e-7
    for k in rng.choice(UD.size, 12, replace=False):
        e = np.zeros(UD.size)
        e[k] = h
        fd = (patch.reactions(UD + e.reshape(-1, 3)) - patch.reactions(UD - e.reshape(-1, 3))).ravel() / (2 * h)
        np.testing.assert_allclose(J[:, k], fd, rtol=1e-5, atol=1e-6 * np.abs(J).max())


def test_invalid_material_raises():
    with pytest.raises(ValueError, match="nu"):
        fem.elasticity_matrix(1e6, 0.5)
    with pytest.raises(ValueError, match="E"):
        fem.elasticity_matrix(-1.0, 0.3)


def test_a_pads_response_does_not_depend_on_which_pad_a_process_built_first(tmp_path, monkeypatch):
    """Pads of one shape share a factorisation (and its disk cache). Built on the mesh of the first
    pad asked for, in that pad's absolute coordinates, it gave every later pad columns whose last
    bits depended on where that first pad stood: an eval soft task's outcome changed with the
    order of the episodes. The response of a pad must be bit for bit the same whichever pad came
    first."""
    from taigym.sim.soft_support import SoftBlock
    monkeypatch.setenv("TAIGYM_CACHE_DIR", str(tmp_path))
    first, pad = SoftBlock(x0=0.43, top=0.37, E=1e6), SoftBlock(x0=0.5, top=0.3, E=2e6)

    def response():
        solid = pad.solid()
        top = solid.mesh.layer(-1)
        return solid.response(top, top[len(top) // 2:len(top) // 2 + 2])
    monkeypatch.setattr(fem, "_FACTORS", {})
    alone = response()
    monkeypatch.setattr(fem, "_FACTORS", {})
    first.solid()
    assert np.array_equal(response(), alone)
