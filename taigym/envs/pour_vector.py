"""``PourVectorEnv``: B Pour scenes stepped by one launch of the batched solver.

``gym.make_vec("taigym/Pour-v0", num_envs=B, vectorization_mode="vector_entry_point", **kw)``
returns it. Its transitions equal those of B single ``PourEnv`` in a ``SyncVectorEnv``: member
i is seeded with ``seed + i`` and draws its tasks from its own generator, and a finished member
is reset on the next call to ``step`` (``AutoresetMode.NEXT_STEP``: that step returns its reset
observation, reward 0 and no termination or truncation).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from gymnasium.utils import seeding
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space, concatenate, create_empty_array

from taigym.sim.constants import CONTROL_DT

from .checks import check_action, reset_options
from .pour import make_batch
from .pour_config import EPISODE_METRICS, action_space, as_task, make_config, observation_space


class PourVectorEnv(VectorEnv):
    metadata = {"render_modes": ["rgb_array"], "render_fps": int(round(1 / CONTROL_DT)),
                "autoreset_mode": AutoresetMode.NEXT_STEP, "episode_metrics": EPISODE_METRICS}

    def __init__(self, num_envs: int = 1, max_episode_steps: int | None = None, **kwargs):
        if not (isinstance(num_envs, (int, np.integer)) and 1 <= num_envs <= 4096):
            raise ValueError(f"num_envs must be an integer in [1, 4096], got {num_envs!r}")
        if max_episode_steps is not None:  # given by make_vec from a spec; the horizon rules
            kwargs.setdefault("horizon", float(max_episode_steps) * CONTROL_DT)
        self.cfg = make_config(**kwargs)
        self.num_envs = int(num_envs)
        self.render_mode = self.cfg.render_mode
        self.single_action_space = action_space()
        self.single_observation_space = observation_space(self.cfg)
        self.action_space = batch_space(self.single_action_space, self.num_envs)
        self.observation_space = batch_space(self.single_observation_space, self.num_envs)
        self._batch = make_batch(self.cfg, self.num_envs, vectorised=True)
        self._rngs = [None] * self.num_envs
        self._prev_done = np.zeros(self.num_envs, bool)
        self._ready = False                            # every member has a task (checked once)
        self._obs_buf = create_empty_array(self.single_observation_space, self.num_envs)

    @property
    def tasks(self) -> list:
        return [m.task for m in self._batch.members]

    @property
    def world(self):
        return self._batch.world

    def _reset_member(self, b: int, task=None) -> None:
        if self._rngs[b] is None:
            self._rngs[b], _ = seeding.np_random(None)
        rng = self._rngs[b]
        fresh = task is None and self.cfg.task_split is None
        task = self.cfg.sample(rng) if task is None else task
        self._batch.reset_member(b, task, int(rng.integers(2 ** 31)), fresh=fresh)

    def reset(self, *, seed: int | list[int] | None = None, options: dict[str, Any] | None = None):
        # Gymnasium's VectorEnv seeds its own generator from a Python int only; per-member seeds
        # (a list) are handled below
        super().reset(seed=int(seed) if isinstance(seed, (int, np.integer)) else None)
        options = reset_options(options, ("task", "reset_mask"))
        mask = options.pop("reset_mask", None)
        tasks = options.pop("task", None)
        B = self.num_envs
        if seed is None:
            seeds = [None] * B
        elif isinstance(seed, (int, np.integer)):
            seeds = [int(seed) + i for i in range(B)]
        else:
            seeds = list(seed)
            if len(seeds) != B:
                raise ValueError(f"seed must be None, an int or {B} ints, got {seed!r}")
        mask = np.ones(B, bool) if mask is None else np.asarray(mask, bool)
        if mask.shape != (B,):
            raise ValueError(f"options['reset_mask'] must be {B} booleans")
        if tasks is not None and not isinstance(tasks, (list, tuple)):
            tasks = [tasks] * B
        if tasks is not None and len(tasks) != B:
            raise ValueError(f"options['task'] must be one task or a list of {B} tasks")
        for b in np.flatnonzero(mask):
            if seeds[b] is not None or self._rngs[b] is None:
                self._rngs[b], _ = seeding.np_random(seeds[b])
            self._reset_member(b, None if tasks is None or tasks[b] is None else as_task(tasks[b]))
        self._prev_done[mask] = False
        return self._observations(), self._batch.infos()

    def step(self, actions):
        actions = check_action(actions, self.action_space, "actions")
        if not self._ready:
            if any(m.task is None for m in self._batch.members):
                raise RuntimeError("call reset() before step()")
            self._ready = True
        resetting = self._prev_done.copy()
        self._batch.step(actions, ~resetting)
        for b in np.flatnonzero(resetting):
            self._reset_member(b)
        rewards, terminated, truncated = self._batch.outcomes()
        self._prev_done = terminated | truncated
        return self._observations(), rewards, terminated, truncated, self._batch.infos()

    def _observations(self):
        obs = self._batch.observations()
        if isinstance(obs, np.ndarray):                 # the array engine's (B, ...) already
            return obs
        self._obs_buf = concatenate(self.single_observation_space, obs, self._obs_buf)
        return self._obs_buf.copy() if isinstance(self._obs_buf, np.ndarray) else \
            {k: v.copy() for k, v in self._obs_buf.items()}

    def render(self):
        if self.render_mode != "rgb_array" or any(m.task is None for m in self._batch.members):
            return None
        return tuple(self._batch.render(b, self.cfg.render_size) for b in range(self.num_envs))

    def close_extras(self, **kwargs):
        self._batch.release()
        self._ready = False
