"""Every env answers a non-finite action, or one of another shape, with a ValueError naming
``action``, the expected shape and the accepted range, before it changes anything; finite actions
outside the range are clipped. (Pour3D-v0 and Transport3D-v0: in their own test files, which
build their solver once.)"""

import gymnasium as gym
import numpy as np
import pytest

import taigym  # noqa: F401

ENVS = {
    "pour": ("taigym/Pour-v0", {}),
    "pour_simplified": ("taigym/Pour-v0", {"fidelity": "simplified"}),
    "transport": ("taigym/Transport-v0", {}),
    "multicontact": ("taigym/MultiContact-v0", {}),
}


def message(n: int, shape: tuple, name: str = "action") -> str:
    return rf"{name} must be {n} finite numbers of shape \({', '.join(map(str, shape))},?\) in \[-1, 1\]"


@pytest.fixture(scope="module", params=list(ENVS))
def env(request):
    env_id, kw = ENVS[request.param]
    e = gym.make(env_id, **kw)
    e.reset(seed=0)
    yield e
    e.close()


def test_non_finite_or_misshapen_actions_raise_and_change_nothing(env):
    n = env.action_space.shape[0]
    _, info0 = env.reset(seed=3)
    for bad in (np.full(n, np.nan), np.r_[np.zeros(n - 1), np.inf], np.zeros(n - 1), np.zeros(n + 1),
                np.zeros((2, n)), "up", None):
        with pytest.raises(ValueError, match=message(n, (n,))):
            env.step(bad)
    obs, *_ = env.step(np.zeros(n))          # as if the bad actions had never been sent
    env.reset(seed=3)
    assert np.array_equal(obs, env.step(np.zeros(n))[0])
    env.step(np.zeros((1, n)))              # extra axes of length 1 are accepted


def test_out_of_range_actions_are_clipped(env):
    n = env.action_space.shape[0]
    a = np.linspace(-3.0, 3.0, n)
    env.reset(seed=1)
    obs, r, *_ = env.step(a)
    env.reset(seed=1)
    obs_c, r_c, *_ = env.step(np.clip(a, -1.0, 1.0))
    assert np.array_equal(obs, obs_c) and r == r_c


@pytest.mark.parametrize("fidelity", ["particles", "simplified"])
def test_vector_env_names_the_batch_shape(fidelity):
    env = gym.make_vec("taigym/Pour-v0", num_envs=2, vectorization_mode="vector_entry_point",
                       fidelity=fidelity)
    try:
        env.reset(seed=0)
        bad_member = np.zeros((2, 3))
        bad_member[1, 2] = np.nan
        for bad in (bad_member, np.zeros((2, 2)), np.zeros(3)):
            with pytest.raises(ValueError, match=message(6, (2, 3), "actions")):
                env.step(bad)
        env.step(np.full((2, 3), 5.0))
    finally:
        env.close()
