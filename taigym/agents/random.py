"""``random``: uniform actions from the env's action space, seeded by ``reset(seed=...)``."""

from __future__ import annotations

import numpy as np

from .base import Agent


class RandomAgent(Agent):
    name = "random"

    def __init__(self, env, **cfg):
        super().__init__(env, **cfg)
        self.space = env.action_space

    def reset(self, *, seed: int | None = None) -> None:
        super().reset(seed=seed)
        self.space.seed(int(self.rng.integers(2 ** 31)) if seed is not None else None)

    def act(self, obs, info: dict) -> np.ndarray:
        return self.space.sample()
