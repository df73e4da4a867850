"""The simulator facade: determinism, batching, bad input and blow-ups (checks 6-7)."""

import os
import time
import warnings

import numpy as np
import pytest

from taigym import sim
from taigym.sim import backend


def _scene(batch_size=1, seed=0, fill=0.6, tilt_rate=-1.5):
    world = sim.World2D(size=(0.25, 0.2), cells=80, batch_size=batch_size, seed=seed,
                        max_particles=2000)
    cup = world.add_body(sim.container("frustum", width=0.08, height=0.08),
                         pose=(0.08, 0.06, 0.0), fill=fill)
    world.add_body(sim.Box(width=0.03, height=0.05), pose=(0.2, 0.025, 0.0))
    world.build()
    return world, cup


def _run(world, cup, steps=4, tilt_rate=-1.5, member=None):
    for k in range(steps):
        world.set_pose(cup, (0.08, 0.06, tilt_rate * 0.05 * k), velocity=(0.0, 0.0, tilt_rate),
                       member=member)
        world.advance(0.05)


def test_same_seed_same_inputs_bit_identical():
    a, cup_a = _scene(seed=3)
    b, cup_b = _scene(seed=3)
    _run(a, cup_a)
    _run(b, cup_b)
    assert np.array_equal(a.positions(), b.positions())
    assert np.array_equal(a.velocities(), b.velocities())
    c, cup_c = _scene(seed=4)
    _run(c, cup_c)
    assert not np.array_equal(a.positions(), c.positions()), "the seed must matter"


@pytest.mark.slow
def test_batch_member_equals_the_scene_run_alone():
    seeds = [5, 6, 7]
    batch, cup = _scene(batch_size=3, seed=seeds)
    # member 1 tilts the other way: members must not influence each other
    for k in range(4):
        rates = np.array([-1.5, 1.5, -1.5])
        poses = np.stack([np.full(3, 0.08), np.full(3, 0.06), rates * 0.05 * k], -1)
        vels = np.stack([np.zeros(3), np.zeros(3), rates], -1)
        batch.set_pose(cup, poses, velocity=vels)
        batch.advance(0.05)
    for b, rate in enumerate([-1.5, 1.5, -1.5]):
        alone, cup_alone = _scene(seed=seeds[b])
        _run(alone, cup_alone, tilt_rate=rate)
        assert np.array_equal(batch.positions(b), alone.positions()), f"member {b} differs"
        assert np.array_equal(batch.velocities(b), alone.velocities())


def test_liquid_can_be_refilled_after_stepping():
    world, cup = _scene()
    n = world.particle_count()
    _run(world, cup, steps=2)
    moved = world.positions()
    world.fill_body(cup, 0.2)  # adds liquid; what was there keeps its state
    assert world.particle_count() > n
    assert np.allclose(world.positions()[:n], moved, atol=1e-6)
    world.clear_liquid()
    world.fill_body(cup, 0.5)
    assert world.fractions()["in"][cup] == 1.0


@pytest.mark.parametrize("make, name", [
    (lambda: sim.container("teapot"), "shape"),
    (lambda: sim.container("rect", width=-0.1), "width"),
    (lambda: sim.World2D(viscosity=-1.0), "viscosity"),
    (lambda: sim.World2D(cells=3), "cells"),
    (lambda: sim.World2D(arch="tpu"), "arch"),
    (lambda: sim.World2D().add_body(sim.container("rect"), pose=(0.01, 0.2, 0.0)), "pose"),
    (lambda: sim.World2D(cells=32).add_body(sim.container("rect"), pose=(0.3, 0.1, 0.0)),
     "wall_thickness"),
    (lambda: sim.World2D().add_body(sim.container("rect"), pose=(0.3, 0.1, 0.0), fill=1.5), "fill"),
    (lambda: sim.World2D().add_body(sim.container("rect"), pose=(0.3, 0.1, 0.0), fill=0.0), "fill"),
    (lambda: sim.World2D().add_liquid_rect(0.1, 0.1, 0.05, 0.2), "rectangle"),
])
def test_bad_input_names_the_argument(make, name):
    with pytest.raises(ValueError, match=name):
        make()


@pytest.mark.parametrize("dt", [0.0, -0.05, float("nan"), 2.0])
def test_non_positive_or_absurd_dt_is_rejected(dt):
    world, _ = _scene()
    with pytest.raises(ValueError, match="dt"):
        world.advance(dt)


def test_blow_up_sets_the_flag_and_keeps_the_state():
    world = sim.World2D(size=(0.25, 0.2), cells=80, max_particles=2000)
    world.add_liquid_rect(0.05, 0.05, 0.1, 0.1, velocity=(80.0, 0.0))  # beyond any real pour
    world.build()
    world.advance(0.05)
    assert world.unstable and world.unstable_members()[0]
    d = world.diagnostics()
    assert d["unstable"]
    x = world.positions()
    assert np.all(np.isfinite(x)), "state must stay inspectable"
    world.advance(0.05)  # a blown-up member is frozen, not stepped into garbage
    assert np.array_equal(world.positions(), x)
    world.clear_liquid()  # and can be reset
    assert not world.unstable


def test_nan_velocity_sets_the_blow_up_flag():
    """A NaN in the liquid (the pressure solve can produce one when S's wall is pressed into T's
    liquid) is a blow-up: not a scene that runs on with its particles clamped into a corner."""
    world = sim.World2D(size=(0.25, 0.2), cells=80, max_particles=2000)
    world.add_liquid_rect(0.05, 0.05, 0.1, 0.1)
    world.build()
    world.advance(0.01)
    assert not world.unstable
    v = world._solver.v.to_numpy()
    v[0, 0] = np.nan
    world._solver.v.from_numpy(v)
    world.advance(0.01)
    assert world.unstable and world.diagnostics()["unstable"]


def test_gpu_request_without_gpu_falls_back_to_cpu():
    sim.World2D(size=(0.25, 0.2), cells=80).build()  # Taichi is up on the CPU
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        arch = backend.init("gpu")
    assert arch == "cpu"
    assert any(issubclass(w.category, RuntimeWarning) for w in caught)


def test_importing_taigym_does_not_initialise_taichi():
    import subprocess
    import sys

    code = ("import taigym, taigym.sim, taichi as ti; from taigym.sim import backend; "
            "assert backend.active_arch() is None; "
            "from taichi.lang import impl; assert impl.get_runtime().prog is None")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_per_member_viscosity_reseed_and_body_swap():
    world, cup = _scene(batch_size=2, seed=[1, 1])
    world.set_viscosity(0.5, member=1)  # honey-like in member 1 only
    with pytest.raises(ValueError, match="viscosity"):
        world.set_viscosity(-0.1)
    _run(world, cup, steps=3)
    water, honey = world.velocities_all()
    assert np.abs(honey).mean() < np.abs(water).mean(), "viscous liquid must flow slower"
    assert np.array_equal(world.positions_all()[0], world.positions(0))
    # an atomic shape + pose change: the new shape at the old pose would leave the domain
    wide = sim.container("rect", width=0.2, height=0.05)
    world.set_body(cup, wide, pose=(0.125, 0.06, 0.0), member=0)
    with pytest.raises(ValueError, match="pose"):
        world.set_body(cup, wide, pose=(0.05, 0.06, 0.0), member=1)
    world.clear_liquid(member=0)
    world.reseed(9, member=0)
    with pytest.raises(ValueError, match="max_particles"):
        world.fill_body(cup, 1.0, member=0)
    a = (world.fill_body(cup, 0.3, member=0), world.positions(0))
    world.clear_liquid(member=0)
    world.reseed(9, member=0)
    b = (world.fill_body(cup, 0.3, member=0), world.positions(0))
    assert a[0] == b[0] and np.array_equal(a[1], b[1]), "reseed must replay the jitter"


def test_set_poses_moves_every_body_at_once_and_checks_the_domain():
    world, cup = _scene(batch_size=2, seed=[1, 2])
    poses = np.array([[[0.08, 0.06, 0.2], [0.2, 0.025, 0.0]]] * 2)
    vels = np.zeros_like(poses)
    vels[1, 0, 2] = 0.5
    world.set_poses(poses, vels)
    assert np.allclose(world.pose(cup, member=0), [0.08, 0.06, 0.2])
    bad = poses.copy()
    bad[1, 0, 0] = -1.0  # a container outside the domain
    with pytest.raises(ValueError, match="pose"):
        world.set_poses(bad, vels)
    assert np.allclose(world.pose(cup, member=1), [0.08, 0.06, 0.2]), "a refused update changes nothing"
    with pytest.raises(ValueError, match="poses"):
        world.set_poses(poses[:, :1], vels)


def test_refilling_one_member_keeps_the_others_area_baseline():
    world, cup = _scene(batch_size=2, seed=[1, 2])
    _run(world, cup, steps=2)
    drift = world.diagnostics(1)["area_drift"]
    world.clear_liquid(member=0)
    world.fill_body(cup, 0.3, member=0)
    # fresh liquid measures the particles' rest area (up to their seeding jitter)
    assert abs(world.diagnostics(0)["area_drift"]) < 0.002
    assert world.diagnostics(1)["area_drift"] == pytest.approx(drift, abs=1e-6)


def test_containing_body_agrees_with_the_fractions_and_the_polygon():
    """The per-particle container read out with the diagnostics: the same count as
    ``fractions()["in"]``, and the same answer as testing the container's interior polygon."""
    world, cup = _scene(tilt_rate=-3.0)
    _run(world, cup, steps=8, tilt_rate=-3.0)          # pours: some liquid has left the cup
    owner = world.containing_body_all()[0]
    x = world.positions()
    n_in = int(np.count_nonzero(owner == cup))
    assert 0 < n_in < len(x)
    assert n_in / len(x) == pytest.approx(world.fractions()["in"][cup])
    assert set(np.unique(owner)) <= {-1, cup}          # the box has no interior
    shape, (px, py, th) = world._members[0].shapes[cup], world.pose(cup)
    c, s = np.cos(th), np.sin(th)
    local = (x - (px, py)) @ np.array([[c, -s], [s, c]])
    inside = shape.contains(local)
    assert np.mean(inside == (owner == cup)) > 0.995   # float32 on the device vs float64 here


def test_height_probe_is_the_highest_particle_over_each_column():
    """The liquid-height probe measured with the diagnostics: in the tilted cup's own frame, each
    column's height is that of its highest particle within the band (float32 on the device), the
    band's bottom where the column is empty; a column beside the cup stays empty."""
    world, cup = _scene(tilt_rate=-3.0)
    columns = np.array([[-0.04, -0.02], [-0.02, 0.0], [0.0, 0.02], [0.02, 0.04], [0.3, 0.4]])
    band = (-0.005, 0.1)
    world.set_height_probe(cup, columns, band)
    _run(world, cup, steps=6, tilt_rate=-3.0)
    (px, py, th), x = world.pose(cup), world.positions()
    c, s = np.cos(th), np.sin(th)
    local = (x - (px, py)) @ np.array([[c, -s], [s, c]])
    heights = world.heights_all()[0, :len(columns)]
    expected = []
    for lo, hi in columns:
        y = local[(local[:, 0] >= lo) & (local[:, 0] <= hi) & (local[:, 1] >= band[0]) &
                  (local[:, 1] <= band[1]), 1]
        expected.append(y.max() if len(y) else band[0])
    assert np.allclose(heights, expected, atol=1e-5)
    assert heights[:4].max() > 0.02 and heights[4] == pytest.approx(band[0])
    with pytest.raises(ValueError, match="columns"):
        world.set_height_probe(cup, [[0.1, 0.0]], band)
    world.set_height_probe(None)
    world.advance(0.05)
    assert np.all(world.heights_all()[0] == 0.0)       # off: y_lo of the cleared probe


def test_target_score_is_pan_manocha_2017_r_p_of_the_liquid_entering():
    """``target_scores`` against R_p recomputed here from the particles' paths: each particle
    entering T scores max(1 - dist / W, 0) where its path crossed T's opening line, and gives
    it back when it leaves; liquid outside both containers that did not move, or lies below T's
    opening, is spilled."""
    world = sim.World2D(size=(0.3, 0.2), cells=80, max_particles=2000)
    cup = world.add_body(sim.container("frustum", width=0.08, height=0.08),
                         pose=(0.08, 0.08, 0.0), fill=0.6)
    target = sim.container("rect", width=0.07, height=0.05)
    t_pose = np.array([0.19, 0.01, 0.0])
    t_vel = np.array([0.04, 0.0, 0.0])                 # T moves: scores are taken in its frame
    t = world.add_body(target, pose=t_pose)
    (lx, _), (rx, _) = target.lips
    half_w = 0.5 * (rx - lx)
    world.set_target_opening(t, target.opening_centre, half_w)
    world.build()
    oc = np.asarray(target.opening_centre)
    earned, total = {}, 0.0
    x, owner = world.positions(), world.containing_body_all()[0].copy()
    for k in range(16):
        tilt = -3.0 * 0.05 * min(k, 10)
        world.set_pose(cup, (0.08, 0.08, tilt), velocity=(0.0, 0.0, -3.0 if k < 10 else 0.0))
        world.set_pose(t, t_pose, velocity=t_vel)
        world.advance(0.05)
        t_next = t_pose + 0.05 * t_vel
        x_new, owner_new = world.positions(), world.containing_body_all()[0].copy()
        expected = 0.0
        for p in np.flatnonzero((owner_new == t) & (owner != t)):
            lp, ln = x[p] - t_pose[:2], x_new[p] - t_next[:2]
            s = np.clip((oc[1] - lp[1]) / (ln[1] - lp[1]), 0.0, 1.0) if ln[1] != lp[1] else 1.0
            earned[p] = max(1.0 - np.linalg.norm(lp + s * (ln - lp) - oc) / half_w, 0.0)
            expected += earned[p]
        for p in np.flatnonzero((owner == t) & (owner_new != t)):
            expected -= earned.pop(p)
        assert world.target_scores()[0] == pytest.approx(expected, rel=1e-3, abs=1e-3)
        out = owner_new < 0
        slow = np.linalg.norm(x_new - x, axis=1) < world._params["settle_speed"] * 0.05
        spilled = out & (slow | (x_new[:, 1] < t_next[1] + oc[1]))
        assert abs(world.fractions()["spilled"] * len(x) - spilled.sum()) <= 2
        total += expected
        x, owner, t_pose = x_new, owner_new, t_next
    assert total > 10.0                                 # liquid did pour into T
    assert world.fractions()["in"][t] > 0.2 and world.fractions()["spilled"] > 0.0


def test_a_stale_taichi_cache_lock_is_removed_and_a_fresh_one_kept(tmp_path):
    # a process killed while Taichi held its disk cache's lock leaves the file behind; while it
    # exists every later process compiles every kernel again (minutes per solver)
    lock = tmp_path / "ticache.lock"
    lock.write_text("")
    assert not backend.clear_stale_cache_lock(str(tmp_path))     # fresh: another process holds it
    assert lock.exists()
    old = time.time() - backend.STALE_LOCK_AGE - 60
    os.utime(lock, (old, old))
    with pytest.warns(RuntimeWarning, match="stale Taichi cache lock"):
        assert backend.clear_stale_cache_lock(str(tmp_path))
    assert not lock.exists()
    assert not backend.clear_stale_cache_lock(str(tmp_path))     # nothing left to remove
