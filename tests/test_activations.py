"""The SB3 agents' activation by name: ``tanh`` (taigym.agents.activations.Tanh, computed through
the sigmoid for speed) is the hyperbolic tangent, in value and gradient, and a policy built with
it saves and loads."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import torch

import taigym  # noqa: F401
from taigym.agents.ppo import PPOAgent
from taigym.agents.sb3 import policy_kwargs


def test_tanh_by_name_is_the_hyperbolic_tangent_in_value_and_gradient():
    act = policy_kwargs({"activation_fn": "tanh"})["activation_fn"]()
    x = torch.cat([torch.linspace(-30.0, 30.0, 20001), torch.tensor([0.0, 1e-8, -1e-8, 88.0, -88.0, 1e4])])
    for dtype, tol in ((torch.float32, 3e-7), (torch.float64, 1e-15)):
        xa, xb = (x.to(dtype).clone().requires_grad_() for _ in range(2))
        ya, yb = act(xa), torch.tanh(xb)
        assert torch.isfinite(ya).all() and (ya - yb).abs().max() <= tol
        g = torch.rand_like(ya)
        (ya * g).sum().backward()
        (yb * g).sum().backward()
        assert (xa.grad - xb.grad).abs().max() <= 4 * tol


def test_a_policy_with_the_named_tanh_saves_loads_and_acts_the_same(tmp_path):
    env = gym.make("taigym/Pour-v0", fidelity="simplified")
    agent = PPOAgent(env, policy_kwargs={"net_arch": [16, 16], "activation_fn": "tanh"})
    obs, info = env.reset(seed=0)
    path = agent.save(tmp_path / "agent.zip")
    again = PPOAgent.load(path, env)
    np.testing.assert_array_equal(agent.act(obs, info), again.act(obs, info))
    env.close()
