"""The 3D liquid backend: geometry of revolved containers, World3D's checks, and the solver's
rest, determinism and batching properties on tiny grids (16^3, a few thousand particles).

A World3D compiles its kernel on its first advance (~15 s here): the physics tests share one
built world (module fixture) and restart its liquid, so the fast ones compile once."""

import math

import numpy as np
import pytest
from scipy.spatial.transform import Rotation

from taigym.models.max_tilt import max_tilt_3d
from taigym.sim.geometry3d import Box3, container3d
from taigym.sim.scenes import free_surface_slope
from taigym.sim.scenes3d import BOTTOM, HEIGHT, TOP, quasi_static_tilt, torricelli_tank
from taigym.sim.world3d import World3D

SIZE, CELLS, CAPACITY = (0.1, 0.1, 0.1), 16, 6000
DX = SIZE[0] / CELLS
WALL = 2.2 * DX


def cup_world(fill=0.6, shape="cup", batch_size=1, seed=0, **kw):
    w = World3D(size=SIZE, cells=CELLS, seed=seed, batch_size=batch_size, max_particles=CAPACITY, **kw)
    c = container3d(shape, width=0.06, height=0.06, wall_thickness=WALL)
    h = w.add_body(c, pose=(0.05, WALL + 1e-3, 0.05, 0.0, 0.0, 0.0), fill=fill)
    return w, h


# ---------------------------------------------------------------- geometry
def test_revolved_volumes_match_closed_forms():
    cyl = container3d("rect", width=0.08, height=0.1)
    assert cyl.liquid_volume(0.5) == pytest.approx(math.pi * 0.04 ** 2 * 0.05, rel=1e-9)
    fr = container3d("frustum", width=0.08, height=0.1, bottom_width=0.04)
    rw, hw = 0.02 + 0.02 * 0.7, 0.07
    assert fr.liquid_volume(0.7) == pytest.approx(math.pi * hw * (0.02 ** 2 + 0.02 * rw + rw ** 2) / 3)
    box = container3d("rect", width=0.08, height=0.1, section="square")
    assert box.liquid_volume(0.5) == pytest.approx(0.08 ** 2 * 0.05)
    for c in (cyl, fr, box, container3d("cup", 0.08, 0.1), container3d("oval", 0.04, 0.1)):
        h = 0.002
        assert len(c.fill_points(0.6, h)) * h ** 3 == pytest.approx(c.liquid_volume(0.6), rel=0.03)


def test_revolved_sdf_and_interior():
    c = container3d("rect", width=0.08, height=0.1, wall_thickness=0.01)
    pts = np.array([[0.0, 0.05, 0.0],                 # axis: 4 cm from the wall
                    [0.045 / math.sqrt(2), 0.05, 0.045 / math.sqrt(2)],   # inside the wall
                    [0.0, -0.005, 0.0],               # in the bottom
                    [0.0, 0.2, 0.0]])                 # above the opening
    d = c.sdf(pts)
    assert d[0] == pytest.approx(0.04, abs=1e-9) and d[1] == pytest.approx(-0.005, abs=1e-9)
    assert d[2] == pytest.approx(-0.005, abs=1e-9) and d[3] > 0
    assert c.contains(pts).tolist() == [True, False, False, False]
    np.testing.assert_allclose(c.opening_centre, [0.0, 0.1, 0.0])
    assert Box3(0.2, 0.1, 0.4).sdf([[0.0, 0.0, 0.0], [0.0, 0.0, 0.3]]).tolist() == pytest.approx([-0.05, 0.1])


# ---------------------------------------------------------------- checks
@pytest.mark.parametrize("kwargs, name", [
    (dict(size=(0.1, -0.1, 0.1)), "size"), (dict(cells=4), "cells"), (dict(viscosity=-1.0), "viscosity"),
    (dict(cfl=10.0), "cfl"), (dict(batch_size=0), "batch_size"), (dict(arch="tpu"), "arch"),
    (dict(gravity=(0.0, -9.81)), "gravity"), (dict(seed=[1, 2], batch_size=3), "seed")])
def test_bad_world_arguments_name_themselves(kwargs, name):
    with pytest.raises(ValueError, match=name):
        World3D(**{"size": SIZE, "cells": CELLS, **kwargs})


def test_bad_body_arguments_name_themselves():
    w = World3D(size=SIZE, cells=CELLS)
    with pytest.raises(ValueError, match="wall_thickness"):
        w.add_body(container3d("cup", 0.06, 0.06, wall_thickness=DX))
    with pytest.raises(ValueError, match="pose"):
        w.add_body(container3d("cup", 0.06, 0.06, wall_thickness=WALL), pose=(0.0, 0.05, 0.05, 0, 0, 0))
    with pytest.raises(ValueError, match="pose"):
        w.add_body(Box3(0.01, 0.01, 0.01), pose=(0.05, 0.05, 0.05))
    with pytest.raises(ValueError, match="fill"):
        w.add_body(container3d("cup", 0.06, 0.06, wall_thickness=WALL), pose=(0.05, 0.02, 0.05, 0, 0, 0),
                   fill=1.5)
    with pytest.raises(ValueError, match="section"):
        container3d("frustum", section="square")
    with pytest.raises(ValueError, match="shape"):
        w.add_body("cup")
    h = w.add_body(Box3(0.01, 0.01, 0.01), pose=(0.05, 0.05, 0.05, 0, 0, 0))
    with pytest.raises(ValueError, match="not a container"):
        w.fill_body(h, 0.5)
    with pytest.raises(ValueError, match="handle"):
        w.set_pose(7, (0.05, 0.05, 0.05, 0, 0, 0))
    with pytest.raises(ValueError, match="velocity"):
        w.set_pose(h, (0.05, 0.05, 0.05, 0, 0, 0), velocity=(1.0, 0.0))
    with pytest.raises(ValueError, match="origin"):
        w.set_frame_motion(origin=(0.0, 0.0))


# ---------------------------------------------------------------- physics
REST_POSE = (0.05, WALL + 1e-3, 0.05, 0.0, 0.0, 0.0)


@pytest.fixture(scope="module")
def world():
    """One built single-scene world shared by the physics tests (one compilation)."""
    w, _ = cup_world(fill=None)
    return w.build()


def restart(w, fill=0.6, seed=0, member=None):
    """Put the cup back upright at rest and refill it from a fresh jitter stream."""
    w.clear_liquid(member=member)
    w.set_pose(0, REST_POSE, member=member)
    w.reseed(seed, member=member)
    w.fill_body(0, fill, member=member)
    return w


def rest_run(w, seconds: float):
    n = w.particle_count()
    drifts = []
    for _ in range(round(seconds / 0.05)):
        w.advance(0.05)
        drifts.append(w.diagnostics()["volume_drift"])
    return n, np.array(drifts)


@pytest.mark.slow
def test_cup_at_rest_keeps_its_liquid_and_volume(world):
    w = restart(world)
    n, drifts = rest_run(w, 2.0)
    d = w.diagnostics()
    assert not w.unstable and w.particle_count() == n > 2000
    assert d["in"][0] == 1.0 and d["spilled"] == 0.0 and d["in_flight"] == 0.0
    assert np.abs(drifts).max() < 0.01
    assert np.abs(w.velocities()).max() < 0.02            # settled, m/s
    # the liquid sits in the cup: nothing below its inner bottom, nothing above the fill
    y = w.positions()[:, 1] - w.pose(0)[1]
    assert y.min() > 0 and y.max() < 0.06 * 0.6 + 2 * DX


@pytest.mark.slow
def test_cup_at_rest_ten_seconds(world):
    w = restart(world)
    _, drifts = rest_run(w, 10.0)
    assert not w.unstable and w.diagnostics()["in"][0] == 1.0
    assert np.abs(drifts).max() < 0.01


def tilt_run(w, steps=6):
    """A tilt about z at 1 rad/s (17 degrees in 0.3 s): the walls move and the liquid sloshes."""
    w.set_pose(0, REST_POSE, velocity=(0, 0, 0, 0, 0, 1.0))
    for _ in range(steps):
        w.advance(0.05)
    return w.positions(0) if w.batch_size == 1 else [w.positions(b) for b in range(w.batch_size)]


def test_same_seed_is_bit_identical(world):
    a = tilt_run(restart(world, 0.6, seed=3))
    b = tilt_run(restart(world, 0.6, seed=3))
    assert np.array_equal(a, b) and not np.array_equal(a[0], a[1])
    c = tilt_run(restart(world, 0.6, seed=4))
    assert not np.array_equal(a, c)


@pytest.mark.slow  # ~30 s: a second compilation for the batch of two
def test_batch_members_equal_the_scenes_run_alone(world):
    a = tilt_run(restart(world, 0.6, seed=3))
    alone = tilt_run(restart(world, 0.4, seed=5))
    batch, _ = cup_world(fill=None, batch_size=2)
    batch.build()
    restart(batch, 0.6, seed=3, member=0)
    restart(batch, 0.4, seed=5, member=1)
    both = tilt_run(batch)
    assert np.array_equal(both[0], a) and np.array_equal(both[1], alone)
    assert len(alone) < len(a)


def test_moving_frame_matches_the_moving_container(world):
    """Transport's set-up: the liquid simulated in the carried container's frame (fictitious
    forces) moves like the liquid in a container moved through the room. A 1 rad/s tilt about z
    for 0.5 s (29 degrees): the liquid's centroid in the container frame agrees within a fifth
    of a cell, and it has moved towards the lowered lip by more than a cell."""
    om, steps = 1.0, 10
    w = restart(world)
    w.set_pose(0, REST_POSE, velocity=(0, 0, 0, 0, 0, om))
    for _ in range(steps):
        w.advance(0.05)
    rot = Rotation.from_rotvec(w.pose(0)[3:]).as_matrix()
    room = ((w.positions() - w.pose(0)[:3]) @ rot).mean(0)
    w = restart(world)
    try:
        for s in range(steps):
            w.set_frame_motion(origin=REST_POSE[:3], rotation=(0, 0, om * 0.05 * s), omega=(0, 0, om))
            w.advance(0.05)
        frame = (w.positions() - REST_POSE[:3]).mean(0)
        assert w.diagnostics()["in"][0] == 1.0
    finally:
        w.clear_frame_motion()
    assert np.abs(room - frame).max() < 0.2 * DX
    assert frame[0] < -0.3 * DX < 0  # towards the lowered (-x) lip


def test_accelerated_frame_tilts_the_surface(world):
    """A constant acceleration a of the frame tilts the free surface by a/g: the centroid of a
    cylinder's liquid (radius R, depth H) shifts by -(a/g) R^2 / (4 H) (sloshing averaged over
    the last 0.5 s of 2 s)."""
    a, R, H = 3.0, 0.03, 0.036
    w = restart(world)
    shape = container3d("rect", width=0.06, height=0.06, wall_thickness=WALL)
    w.clear_liquid()
    try:
        w.set_shape(0, shape)  # a cylinder for the closed form; the cup is restored below
        w.reseed(0)
        w.fill_body(0, 0.6)
        x0 = w.positions()[:, 0].mean()
        shifts = []
        for _ in range(40):
            w.set_frame_motion(origin=REST_POSE[:3], accel=(a, 0.0, 0.0))
            w.advance(0.05)
            shifts.append(w.positions()[:, 0].mean() - x0)
        assert w.diagnostics()["in"][0] == 1.0
    finally:
        w.clear_frame_motion()
        w.set_shape(0, container3d("cup", width=0.06, height=0.06, wall_thickness=WALL))
    expected = -a / 9.81 * R * R / (4 * H)
    assert np.mean(shifts[-10:]) == pytest.approx(expected, rel=0.25)


@pytest.mark.slow  # ~60 s
def test_quasi_static_tilt_below_and_above_the_max_tilt():
    """DESIGN.md §6: a frustum tilted slowly to 6 degrees below the SFRRT* paper's 3D max tilt keeps its
    liquid; 6 degrees above, it spills (20-cell grid, ~1100 particles)."""
    fill = 0.5
    model = max_tilt_3d(BOTTOM / 2, TOP / 2, HEIGHT, fill * HEIGHT)
    r = quasi_static_tilt([model - math.radians(6), model + math.radians(6)], fill)
    assert not r["unstable"]
    assert r["left"][0] < 0.001 and r["left"][1] > 0.02


@pytest.mark.slow  # ~45 s
def test_torricelli_jet_speed():
    """DESIGN.md §6: the jet leaving a slot at depth h has speed sqrt(2 g h) within 10 %
    (median speed 2-5 cells past the slot, mean ratio over 0.15-0.3 s, as the 2D test)."""
    world, geo = torricelli_tank()
    world.build()
    ox, oy = geo["orifice"]
    dx = world.dx
    ratios = []
    for step in range(12):
        world.advance(0.025)
        if step < 6:  # let the outflow establish itself (0.15 s)
            continue
        x, v = world.positions(), world.velocities()
        level = np.percentile(x[x[:, 0] < geo["tank"][1], 1], 99.5)
        jet = (x[:, 0] > ox + 2 * dx) & (x[:, 0] < ox + 5 * dx) & (np.abs(x[:, 1] - oy) < 6 * dx)
        assert jet.sum() > 10, "no jet left the orifice"
        ratios.append(np.median(np.linalg.norm(v[jet], axis=1)) / math.sqrt(2 * 9.81 * (level - oy)))
    assert abs(np.mean(ratios) - 1.0) < 0.10, np.round(ratios, 3)


@pytest.mark.slow
def test_a_larger_room_changes_nothing_the_liquid_does():
    """The solver works only on the tiles around the liquid: the same pour (a cup tilted at
    2 rad/s until liquid leaves it) in a room twice as long gives the same particles, bit for
    bit, as long as the liquid stays clear of the smaller room's far wall."""
    runs = []
    for length in (0.2, 0.4):
        w = World3D(size=(length, 0.15, 0.12), cells=round(length / 0.008), seed=3)
        cup = w.add_body(container3d("cup", width=0.05, height=0.05, wall_thickness=0.017),
                         pose=(0.12, 0.05, 0.06, 0, 0, 0), fill=0.7)
        w.build()
        for k in range(10):
            w.set_pose(cup, (0.12, 0.05, 0.06, 0, 0, 0.1 * k), velocity=(0, 0, 0, 0, 0, 2.0))
            w.advance(0.05)
        runs.append((w.positions(), w.velocities(), w.diagnostics()))
    (xa, va, da), (xb, vb, db) = runs
    assert da["in"][0] < 0.95 and xb[:, 0].max() < 0.15, "the cup must pour, clear of x = 0.2 m"
    assert np.array_equal(xa, xb) and np.array_equal(va, vb)


@pytest.mark.slow
def test_container_coasting_at_constant_velocity_keeps_a_flat_surface():
    """Galilean invariance (as test_sim_physics's 2D test): a square cup and its liquid moving
    together at a constant 2 m/s keep a flat surface (mean angle within 0.5 deg over 1 s, three
    sloshing periods) and all the liquid; a solver whose liquid feels a drag from moving over the
    grid tilts it (the density correction as a fraction per substep: -0.9 deg)."""
    speed, dt, length = 2.0, 0.05, 2.2
    w = World3D(size=(length, 0.15, 0.12), cells=round(length / 0.008), seed=3)
    cup = container3d("rect", width=0.08, height=0.08, wall_thickness=0.017, section="square")
    h = w.add_body(cup, pose=(0.08, 0.03, 0.06, 0, 0, 0), velocity=(speed, 0, 0, 0, 0, 0),
                   fill=0.5, liquid_follows=True)
    w.build()
    x, slopes = 0.08, []
    for _ in range(20):  # 1 s: the cup travels 2 m
        w.set_pose(h, (x, 0.03, 0.06, 0, 0, 0), velocity=(speed, 0, 0, 0, 0, 0))
        w.advance(dt)
        x += speed * dt
        slopes.append(free_surface_slope(w.positions()[:, :2] - (x, 0.03), bins=8))
    assert w.diagnostics()["in"][h] == 1.0
    got = math.degrees(float(np.mean(slopes)))
    assert abs(got) < 0.5, f"surface angle {got:.2f} deg, expected 0"


@pytest.mark.slow  # ~60 s: three compilations
def test_active_tiles_and_bounding_box_give_the_same_liquid():
    """The solver's region is the active tiles or the liquid's padded box, whichever has fewer
    cells; forced either way, a cup pouring far from a collapsing block of liquid gives the same
    particles bit for bit (and left to choose, the solver takes the tiles there)."""
    runs = {}
    for region in ("auto", "tiles", "box"):
        cls = type("Forced", (World3D,), {"REGION": region})
        w = cls(size=(0.48, 0.15, 0.12), cells=60, seed=5)
        cup = w.add_body(container3d("cup", width=0.05, height=0.05, wall_thickness=0.017),
                         pose=(0.4, 0.05, 0.06, 0, 0, 0), fill=0.7)
        w.add_liquid_box((0.01, 0.02, 0.03), (0.04, 0.06, 0.09))
        w.build()
        for k in range(8):
            w.set_pose(cup, (0.4, 0.05, 0.06, 0, 0, 0.1 * k), velocity=(0, 0, 0, 0, 0, 2.0))
            w.advance(0.05)
        runs[region] = w.positions(), w.velocities(), int(w._solver.use_tiles.to_numpy()[0])
    assert runs["auto"][2] == 1 and runs["tiles"][2] == 1 and runs["box"][2] == 0
    for region in ("tiles", "box"):
        assert np.array_equal(runs[region][0], runs["auto"][0])
        assert np.array_equal(runs[region][1], runs["auto"][1])
