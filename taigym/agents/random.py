"""``random``: uniform actions in the env's Box action space, seeded by ``reset(seed=...)``."""

from __future__ import annotations

import numpy as np
from gymnasium import spaces

from .base import Agent


class RandomAgent(Agent):
    name = "random"

    def __init__(self, env, **cfg):
        if cfg:
            raise ValueError(f"the random agent takes no options; got {', '.join(sorted(cfg))}")
        super().__init__(env)
        space = env.action_space
        if not isinstance(space, spaces.Box):
            raise ValueError(f"the random agent needs a Box action space, got {space}")
        self.low, self.high, self.dtype = space.low, space.high, space.dtype

    def act(self, obs, info: dict) -> np.ndarray:
        return self.rng.uniform(self.low, self.high).astype(self.dtype)
