"""Making an env again neither leaks nor recompiles: a closed liquid env hands its solver to the
next env with the same grid (``taigym.sim.pool``), and a reused solver gives the transitions a
new one gives (every reset sets all the state it uses)."""

import json
import os
import subprocess
import sys

import gymnasium as gym
import numpy as np
import pytest

import taigym  # noqa: F401

SCRIPT = os.path.join(os.path.dirname(__file__), os.pardir, "scripts", "env_cycles.py")


def rollout(env, seed: int, steps: int = 4) -> list:
    """Observations and infos' ``spilled`` of a reset and ``steps`` steps of a fixed action."""
    obs, info = env.reset(seed=seed)
    out = [obs]
    a = np.linspace(-0.6, 0.8, env.action_space.shape[0])
    for _ in range(steps):
        obs, r, term, trunc, info = env.step(a)
        out += [obs, r, info["spilled"]]
    return out


def solver_of(env):
    u = env.unwrapped
    return u.carried if hasattr(u, "carried") else u.world


def check_reuse(env_id: str, steps: int = 4) -> None:
    first = gym.make(env_id)
    fresh = rollout(first, seed=5, steps=steps)   # on a solver with no history
    rollout(first, seed=7, steps=steps)
    solver = solver_of(first)
    first.close()
    assert solver_of(first) is None
    second = gym.make(env_id)
    try:
        again = rollout(second, seed=5, steps=steps)
        assert solver_of(second) is solver       # handed on, not built and compiled again
        for a, b in zip(fresh, again):
            assert np.array_equal(a, b)
    finally:
        second.close()
    with pytest.raises(RuntimeError, match="reset"):
        first.step(np.zeros(first.action_space.shape))


@pytest.mark.parametrize("env_id", ["taigym/Transport-v0", "taigym/Pour-v0"])
def test_2d_envs_reuse_the_closed_envs_solver_with_the_same_transitions(env_id):
    check_reuse(env_id)


@pytest.mark.integration
@pytest.mark.parametrize("env_id", ["taigym/Pour3D-v0", "taigym/Transport3D-v0"])
def test_3d_envs_reuse_the_closed_envs_solver_with_the_same_transitions(env_id):
    check_reuse(env_id, steps=2)


@pytest.mark.integration
def test_ten_transport_make_close_cycles_keep_memory_flat():
    """10 cycles of make + reset + step + close in a fresh process: the resident set grows by
    less than 20 MB after the first two (a new solver per make grew it by ~20 MB a cycle)."""
    out = subprocess.run([sys.executable, SCRIPT, "--envs", "transport", "--cycles", "10",
                          "--warmup", "2"], capture_output=True, text=True, timeout=1800)
    assert out.returncode == 0, out.stderr[-3000:]
    figures = json.loads(out.stdout.strip().splitlines()[-1])["transport@this"]
    assert figures["cycles_done"] == 10
    assert figures["growth_after_warmup_mb"] < 20.0, out.stdout
