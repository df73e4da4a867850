"""The carried container's liquid, simulated in the container's own (non-inertial) frame."""

import math

import numpy as np
import pytest

from taigym import sim
from taigym.sim import scenes
from taigym.sim.carried import CarriedContainer2D

# physics validation: `make test-slow` (each check simulates seconds of liquid)
pytestmark = pytest.mark.slow


def _carry(cup, fill, motion, steps, dt=0.05, **kw):
    """motion(t) -> (velocity vx, vy, omega) at time t; the pose integrates it (trapezoid)."""
    cc = CarriedContainer2D(cup.width, cup.height, **kw)
    cc.load(cup, fill)
    pose = np.zeros(3)
    slopes = []
    for k in range(steps):
        v0, v1 = np.asarray(motion(k * dt)), np.asarray(motion((k + 1) * dt))
        cc.step(pose, v0, v1, dt)
        pose = pose + 0.5 * (v0 + v1) * dt
        slopes.append(scenes.free_surface_slope(cc.local_positions()))
    return cc, pose, slopes


def test_nothing_spills_at_rest_in_the_frame():
    cc, _, _ = _carry(sim.container("rect", width=0.1, height=0.1), 0.8, lambda t: (0, 0, 0), 40)
    assert cc.spilled == 0.0 and not cc.unstable
    assert np.abs(cc.world.velocities()).max() < 0.05


def test_frame_acceleration_tilts_the_surface_to_atan_a_over_g():
    """Same motion as the world-frame test (2 m/s^2 eased in over 0.5 s): in the container's
    frame the surface must tilt to -atan(a/g) within 3 deg, averaged over ~one sloshing period."""
    accel = 2.0

    def motion(t):  # velocity of a = accel * min(1, t / 0.5)
        v = accel * (t * t / 1.0 if t < 0.5 else 0.25 + (t - 0.5))
        return (v, 0.0, 0.0)

    cc, pose, slopes = _carry(sim.container("rect", width=0.1, height=0.1), 0.5, motion, 25)
    assert cc.spilled == 0.0
    got = float(np.mean(slopes[-8:]))  # the last 0.4 s
    expected = -math.atan(accel / scenes.GRAVITY)
    assert abs(got - expected) < math.radians(3), (math.degrees(got), math.degrees(expected))
    assert pose[0] == pytest.approx(accel * (0.125 / 3 + 0.25 * 0.75 + 0.5 * 0.75 ** 2), rel=0.02)


def test_rotation_about_the_bottom_keeps_the_surface_level_in_the_world():
    """Tilting slowly (quasi-static) by 20 deg: in the frame the surface tilts by -20 deg
    (it stays horizontal in the room), well below the 45 deg limit, so nothing spills."""
    tilt, T = math.radians(20), 1.5

    def motion(t):  # smoothstep tilt over T, then hold
        s = min(t / T, 1.0)
        return (0.0, 0.0, tilt * 6 * s * (1 - s) / T)

    cc, pose, slopes = _carry(sim.container("rect", width=0.1, height=0.1), 0.5, motion, 45)
    assert pose[2] == pytest.approx(tilt, rel=1e-2)
    assert cc.spilled == 0.0
    assert abs(float(np.mean(slopes[-8:])) + tilt) < math.radians(3)


def test_a_violent_jerk_spills_and_spill_never_decreases():
    cup = sim.container("rect", width=0.08, height=0.1)
    cc = CarriedContainer2D(cup.width, cup.height)
    cc.load(cup, 0.85)
    pose, last = np.zeros(3), 0.0
    for k in range(20):
        v0 = np.array([0.0 if k == 0 else 1.5, 0, 0])
        v1 = np.array([1.5 if k < 10 else 0.0, 0, 0])  # 30 m/s^2 starts and stops
        cc.step(pose, v0, v1, 0.05)
        pose = pose + 0.5 * (v0 + v1) * 0.05
        assert cc.spilled >= last
        last = cc.spilled
    assert cc.spilled > 0.01
