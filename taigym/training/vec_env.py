"""Stable-Baselines3 ``VecEnv`` over a Gymnasium vector env: SB3 trains on taigym's batched envs.

SB3's own vectorisation (``make_vec_env``: ``DummyVecEnv`` / ``SubprocVecEnv``) steps one
Gymnasium env per member. taigym's vector envs step all members at once (``PourVectorEnv``:
one launch of the batched FLIP solver for the particle fidelity, array operations over the batch
for the simplified one), so :class:`BatchedVecEnv` wraps the vector env itself::

    from stable_baselines3 import PPO
    from stable_baselines3.common.vec_env import VecMonitor
    from taigym.training.vec_env import make_batched_vec_env

    venv = VecMonitor(make_batched_vec_env("taigym/Pour-v0", 256, seed=0, fidelity="simplified",
                                           reward_mode="dense"))
    PPO("MlpPolicy", venv, gamma=0.99).learn(1_000_000)

SB3's contract, on top of the Gymnasium vector env:

* ``step_wait`` resets a finished member in the same call and returns its first observation;
  the last one is in ``infos[i]["terminal_observation"]``, and ``infos[i]["TimeLimit.truncated"]``
  is True when the episode was truncated, not terminated (SB3 then bootstraps its value).
  Vector envs that reset on the next step (Gymnasium's ``AutoresetMode.NEXT_STEP``, taigym's
  envs) are reset at once through ``options={"reset_mask": done}``; ``SAME_STEP`` envs give the
  last observation in ``info["final_obs"]``.
* ``seed(s)`` seeds member i with s + i at the next ``reset`` (a Gymnasium vector env given a
  list of seeds); ``set_options`` passes options on (one dict for all members).
* ``infos`` is a list of per-member dicts built from the vector env's dict of arrays
  (``step_infos=False`` keeps only finished members' infos, which is all SB3's algorithms and
  ``VecMonitor`` read, and saves building B dicts per step).
* ``reset_options(mask)``, if given, is called at every reset with the mask of the members
  being reset (all at ``reset()``) and its dict is added to the vector env's reset options:
  e.g. ``{"task": [...]}`` for a start-state curriculum.
* ``get_attr``, ``set_attr`` and ``env_method`` act on the one vector env and return its answer
  for every index asked for (the members share it), except ``get_attr("task")``, which gives
  each member's task if the vector env lists them (``tasks``); ``env_is_wrapped`` is False.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode
from stable_baselines3.common.vec_env.base_vec_env import VecEnv, VecEnvIndices


def _split_info(info: dict, n: int, rows: Sequence[int] | None = None) -> list[dict]:
    """Gymnasium's vector info (``info[key]`` an array over members, ``info["_key"]`` a mask of
    the members that have it) as a list of per-member dicts, for ``rows`` (all if None)."""
    out: list[dict] = [{} for _ in range(n)]
    rows = range(n) if rows is None else rows
    for key, value in info.items():
        if key.startswith("_"):
            continue
        mask = info.get("_" + key)
        if isinstance(value, dict):
            nested = _split_info(value, n, rows)
            for i in rows:
                if mask is None or mask[i]:
                    out[i][key] = nested[i]
            continue
        if isinstance(value, np.ndarray) and value.ndim == 1 and value.dtype != object:
            value = value.tolist()                       # Python scalars, one call per key
        for i in rows:
            if mask is None or mask[i]:
                out[i][key] = value[i]
    return out


class BatchedVecEnv(VecEnv):
    """SB3 ``VecEnv`` over the Gymnasium vector env ``venv`` (module docstring)."""

    def __init__(self, venv: gym.vector.VectorEnv, step_infos: bool = True,
                 reset_options: Callable[[np.ndarray], dict] | None = None):
        if not isinstance(venv, gym.vector.VectorEnv):
            raise ValueError(f"venv must be a gymnasium.vector.VectorEnv, got {type(venv).__name__}")
        self.venv = venv
        self.step_infos = bool(step_infos)
        self.reset_options = reset_options
        self._same_step = venv.metadata.get("autoreset_mode") == AutoresetMode.SAME_STEP
        self._actions: np.ndarray | None = None
        super().__init__(venv.num_envs, venv.single_observation_space, venv.single_action_space)

    # ------------------------------------------------------------------ reset and step
    def reset(self):
        seeds = None if all(s is None for s in self._seeds) else list(self._seeds)
        options = self._options[0] if self._options else {}
        if any(o != options for o in self._options):
            raise ValueError("BatchedVecEnv: the members of one vector env share one reset "
                             "options dict; set_options got different ones")
        options = {**options, **self._hooked(np.ones(self.num_envs, bool))}
        obs, info = self.venv.reset(seed=seeds, options=options or None)
        self.reset_infos = _split_info(info, self.num_envs)
        self._reset_seeds()
        self._reset_options()
        return obs

    def step_async(self, actions: np.ndarray) -> None:
        self._actions = np.asarray(actions)

    def step_wait(self):
        if self._actions is None:
            raise RuntimeError("step_async must be called before step_wait")
        obs, reward, terminated, truncated, info = self.venv.step(self._actions)
        self._actions = None
        done = np.logical_or(terminated, truncated)
        rows = np.flatnonzero(done).tolist()
        infos = _split_info(info, self.num_envs, None if self.step_infos else rows)
        if rows:
            if self._same_step:
                final = info["final_obs"]
                finals = {i: final[i] for i in rows}
            else:
                finals = {i: _row(obs, i) for i in rows}
                new_obs, new_info = self.venv.reset(options={"reset_mask": done, **self._hooked(done)})
                obs = _merge(obs, new_obs, done)
                resets = _split_info(new_info, self.num_envs, rows)
                for i in rows:
                    self.reset_infos[i] = resets[i]
            for i in rows:
                infos[i]["terminal_observation"] = finals[i]
                infos[i]["TimeLimit.truncated"] = bool(truncated[i] and not terminated[i])
        return obs, np.asarray(reward, np.float32), done, infos

    def close(self) -> None:
        self.venv.close()

    def _hooked(self, mask: np.ndarray) -> dict:
        return {} if self.reset_options is None else dict(self.reset_options(mask))

    # ------------------------------------------------------------------ attributes
    def _indices(self, indices: VecEnvIndices) -> list[int]:
        if indices is None:
            return list(range(self.num_envs))
        if isinstance(indices, (int, np.integer)):
            return [int(indices)]
        return [int(i) for i in indices]

    def get_attr(self, attr_name: str, indices: VecEnvIndices = None) -> list[Any]:
        idx = self._indices(indices)
        if attr_name == "task" and hasattr(self.venv, "tasks"):
            tasks = self.venv.tasks
            return [tasks[i] for i in idx]
        value = getattr(self.venv, attr_name)
        return [value for _ in idx]

    def set_attr(self, attr_name: str, value: Any, indices: VecEnvIndices = None) -> None:
        if sorted(self._indices(indices)) != list(range(self.num_envs)):
            raise ValueError("BatchedVecEnv.set_attr: the members share one vector env; set an "
                             "attribute for all of them (indices=None)")
        setattr(self.venv, attr_name, value)

    def env_method(self, method_name: str, *method_args, indices: VecEnvIndices = None,
                   **method_kwargs) -> list[Any]:
        result = getattr(self.venv, method_name)(*method_args, **method_kwargs)
        return [result for _ in self._indices(indices)]

    def env_is_wrapped(self, wrapper_class: type[gym.Wrapper], indices: VecEnvIndices = None) -> list[bool]:
        return [False for _ in self._indices(indices)]

    def get_images(self) -> Sequence[np.ndarray | None]:
        images = self.venv.render()
        return [None] * self.num_envs if images is None else list(images)


def _row(obs, i: int):
    """Member i's observation, copied (arrays or dicts of arrays)."""
    if isinstance(obs, dict):
        return {k: v[i].copy() for k, v in obs.items()}
    return obs[i].copy()


def _merge(obs, new, mask: np.ndarray):
    """``obs`` with the rows in ``mask`` taken from ``new`` (arrays or dicts of arrays)."""
    if isinstance(obs, dict):
        return {k: _merge(v, new[k], mask) for k, v in obs.items()}
    obs = np.array(obs, copy=True)
    obs[mask] = new[mask]
    return obs


def make_batched_vec_env(env_id: str, num_envs: int, seed: int | None = None,
                         step_infos: bool = True, reset_options: Callable[[np.ndarray], dict] | None = None,
                         **kwargs) -> BatchedVecEnv:
    """``BatchedVecEnv`` over ``gym.make_vec(env_id, num_envs, vectorization_mode=
    "vector_entry_point", **kwargs)``; ``seed`` seeds member i with seed + i at the first reset."""
    venv = BatchedVecEnv(gym.make_vec(env_id, num_envs=num_envs,
                                      vectorization_mode="vector_entry_point", **kwargs),
                         step_infos=step_infos, reset_options=reset_options)
    if seed is not None:
        venv.seed(seed)
    return venv


__all__ = ["BatchedVecEnv", "make_batched_vec_env"]
