"""taigym.data: expert episodes, their resumable on-disk chunks, and Minari datasets.

* :class:`Episode`: one rolled-out episode with the expert's label at every visited state
  (``labels``), the actions actually applied (``actions``: the same for pure expert demos,
  the beta-mixture's for DAgger), the env's metrics per step and the task it ran
  (``task.to_dict()``).
* :func:`save_episode` / :func:`load_episode`: one ``.npz`` per episode, written atomically
  (temporary file + ``os.replace``), so an interrupted collection loses at most the episodes
  in progress.
* :func:`write_minari` / :func:`read_minari`: Minari datasets (``minari.load_dataset``
  compatible; HDF5 storage). Observations are the env's, actions the ones applied, and the
  infos hold per step the env's episode metrics, ``time`` (and the liquid envs' ``in_source``
  and ``in_flight``) and the split's ``task_index``. Each episode's metadata holds its reset
  seed and ``options={"task": <the task's to_dict() as JSON>}``: :func:`replay` resets an env
  (``dataset.recover_environment()``) with them and applies the actions.
* :func:`transitions`: (obs, label, episode id) arrays for supervised learning, optionally
  capped at a number of expert labels.

The collection itself (expert rollouts, beta-mixed rollouts, workers) is
:mod:`taigym.data.collect`.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import warnings
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import numpy as np


@dataclass
class Episode:
    """One episode: ``obs`` has T+1 rows (the last is the final observation), ``labels`` and
    ``actions`` T rows; ``infos`` maps info keys (:func:`taigym.data.collect.info_keys`) to
    arrays of T+1 values; ``task`` is the task's ``to_dict()``."""

    obs: np.ndarray
    labels: np.ndarray
    actions: np.ndarray
    rewards: np.ndarray
    terminations: np.ndarray
    truncations: np.ndarray
    infos: dict[str, np.ndarray]
    task_index: int = -1
    seed: int = 0
    success: bool = False
    expert_labels: int = 0          # states labelled by the expert (= T when every state is)
    expert_plans: int = 0           # planner calls (replans) spent on this episode
    expert_seconds: float = 0.0     # wall time inside the expert
    learner_steps: int = 0          # steps on which the learner's action was applied
    task: dict | None = None        # the task's to_dict() (reset(options={"task": ...}) reruns it)
    extra: dict[str, Any] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.labels)

    @property
    def final(self) -> dict[str, float]:
        return {k: float(v[-1]) for k, v in self.infos.items()}


_SCALARS = ("task_index", "seed", "success", "expert_labels", "expert_plans", "expert_seconds",
            "learner_steps")


def episode_bytes(ep: Episode) -> bytes:
    arrays = {k: getattr(ep, k) for k in ("obs", "labels", "actions", "rewards", "terminations",
                                          "truncations")}
    arrays.update({f"info_{k}": v for k, v in ep.infos.items()})
    arrays.update({k: np.asarray(getattr(ep, k)) for k in _SCALARS})
    if ep.task is not None:
        arrays["task_json"] = np.asarray(json.dumps(ep.task))
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    return buf.getvalue()


def save_episode(ep: Episode, path: str | Path) -> None:
    """Write ``ep`` to ``path`` (.npz) atomically."""
    from taigym.agents.policy import atomic_write_bytes

    atomic_write_bytes(path, episode_bytes(ep))


def load_episode(path: str | Path) -> Episode:
    with np.load(path) as z:
        d = {k: z[k] for k in z.files}
    infos = {k[5:]: d.pop(k) for k in list(d) if k.startswith("info_")}
    task = json.loads(str(d.pop("task_json"))) if "task_json" in d else None
    kw = {k: d.pop(k) for k in ("obs", "labels", "actions", "rewards", "terminations", "truncations")}
    scal = {}
    for f in fields(Episode):
        if f.name in _SCALARS and f.name in d:
            v = d[f.name].item()
            scal[f.name] = bool(v) if f.name == "success" else v
    return Episode(infos=infos, task=task, **kw, **scal)


def transitions(episodes, max_labels: int | None = None):
    """``(obs, labels, groups)``: one row per labelled state, ``groups`` the episode's position
    in ``episodes``. ``max_labels`` keeps the first that many labels (episodes in order)."""
    obs, lab, grp = [], [], []
    n = 0
    for i, ep in enumerate(episodes):
        T = len(ep)
        if max_labels is not None:
            T = min(T, int(max_labels) - n)
            if T <= 0:
                break
        obs.append(np.asarray(ep.obs[:T], np.float32))
        lab.append(np.asarray(ep.labels[:T], np.float32))
        grp.append(np.full(T, i, np.int64))
        n += T
    if not obs:
        raise ValueError("no expert labels: the dataset is empty (were all episodes filtered out?)")
    return np.concatenate(obs), np.concatenate(lab), np.concatenate(grp)


# ------------------------------------------------------------------------------------- Minari
@contextlib.contextmanager
def minari_root(root: str | Path | None):
    """Point Minari at ``root`` (``MINARI_DATASETS_PATH``) inside the block (None: unchanged)."""
    if root is None:
        yield
        return
    old = os.environ.get("MINARI_DATASETS_PATH")
    os.environ["MINARI_DATASETS_PATH"] = str(Path(root).resolve())
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("MINARI_DATASETS_PATH", None)
        else:
            os.environ["MINARI_DATASETS_PATH"] = old


def datasets_root(root: str | Path | None = None) -> Path:
    """``root``, else ``$MINARI_DATASETS_PATH``, else Minari's default ``~/.minari/datasets``."""
    if root is not None:
        return Path(root)
    env = os.environ.get("MINARI_DATASETS_PATH")
    return Path(env) if env else Path.home() / ".minari" / "datasets"


def dataset_exists(dataset_id: str, root: str | Path | None = None) -> bool:
    return (datasets_root(root) / dataset_id / "data").is_dir()


def write_minari(episodes, dataset_id: str, env, *, root: str | Path | None = None,
                 algorithm_name: str | None = None, description: str | None = None,
                 overwrite: bool = False):
    """Write ``episodes`` as the Minari dataset ``dataset_id`` under ``root`` (default: Minari's
    own root) and return it (a ``minari.MinariDataset``). The dataset appears atomically: it
    is built in a staging directory and moved in place."""
    import minari
    from minari.data_collector import EpisodeBuffer
    from minari.namespace import create_namespace, list_local_namespaces
    from minari.dataset.minari_dataset import parse_dataset_id

    root = datasets_root(root)
    root.mkdir(parents=True, exist_ok=True)
    namespace = parse_dataset_id(dataset_id)[0]
    final = root / dataset_id
    if final.exists():
        if not overwrite:
            raise FileExistsError(f"Minari dataset {dataset_id!r} already exists in {root}")
        shutil.rmtree(final)
    buffers = []
    for i, ep in enumerate(episodes):
        T = len(ep)
        infos = {k: np.asarray(v) for k, v in ep.infos.items()}
        infos["task_index"] = np.full(T + 1, int(ep.task_index), np.int64)
        buffers.append(EpisodeBuffer(
            id=i, seed=int(ep.seed), options=None if ep.task is None else {"task": json.dumps(ep.task)},
            observations=np.asarray(ep.obs), actions=np.asarray(ep.actions),
            rewards=np.asarray(ep.rewards, np.float64), terminations=np.asarray(ep.terminations, bool),
            truncations=np.asarray(ep.truncations, bool), infos=infos))
    staging = root / ".staging" / f"assemble-{os.getpid()}"
    if staging.exists():
        shutil.rmtree(staging)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")     # Minari nags about author, e-mail, permalink
            with minari_root(staging):
                minari.create_dataset_from_buffers(
                    dataset_id, buffers, env=env, algorithm_name=algorithm_name, author="taigym",
                    description=description, data_format="hdf5", jpeg_encoding=False)
            with minari_root(root):
                if namespace is not None and namespace not in list_local_namespaces():
                    create_namespace(namespace)
        final.parent.mkdir(parents=True, exist_ok=True)
        os.replace(staging / dataset_id, final)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return minari.MinariDataset(final / "data")


def open_minari(dataset: str | Path, root: str | Path | None = None):
    """A ``minari.MinariDataset`` from a directory (the dataset's, or its ``data`` folder) or a
    dataset id (looked up under ``root`` / ``$MINARI_DATASETS_PATH``; never downloaded)."""
    import minari

    p = Path(dataset)
    for cand in (p / "data", p):
        if (cand / "metadata.json").is_file():
            return minari.MinariDataset(cand)
    if root is not None:
        cand = Path(root) / str(dataset) / "data"
        if cand.is_dir():
            return minari.MinariDataset(cand)
    with minari_root(root):
        return minari.load_dataset(str(dataset), download=False)


def episode_metadata(dataset) -> list[dict]:
    """Each episode's metadata (``id``, ``seed``, ``options``; the task as JSON under
    ``options["task"]``) of a Minari dataset, in episode order."""
    return list(dataset.storage.get_episode_metadata(dataset.episode_indices))


def episode_task(metadata: dict) -> dict | None:
    """The task (``to_dict()``) an episode's metadata holds, or None."""
    text = (metadata.get("options") or {}).get("task")
    return json.loads(text) if text is not None else None


def read_minari(dataset) -> list[Episode]:
    """The episodes of a Minari dataset (an object, a path or an id) as :class:`Episode`
    objects (``labels`` = ``actions`` = the dataset's actions)."""
    ds = open_minari(dataset) if isinstance(dataset, (str, Path)) else dataset
    out = []
    for e, meta in zip(ds.iterate_episodes(), episode_metadata(ds)):
        infos = {k: np.asarray(v) for k, v in (e.infos or {}).items()}
        ti = int(infos.pop("task_index", np.array([-1]))[0]) if "task_index" in infos else -1
        obs = np.asarray(e.observations)
        if obs.ndim != 2:
            raise ValueError("only flat Box observations are supported (Pour-v0: obs_mode features or lip)")
        acts = np.asarray(e.actions, np.float32)
        succ = bool(infos["success"][-1]) if "success" in infos else False
        seed = meta.get("seed")
        out.append(Episode(obs=obs, labels=acts, actions=acts, rewards=np.asarray(e.rewards),
                           terminations=np.asarray(e.terminations), truncations=np.asarray(e.truncations),
                           infos=infos, task_index=ti, seed=int(e.id if seed is None else seed), success=succ,
                           expert_labels=len(acts), task=episode_task(meta)))
    return out


def replay(env, episode: Episode) -> tuple[dict, list[float]]:
    """Reset ``env`` to ``episode``'s task and seed and apply its actions: the last ``info`` and
    the rewards. On the env the dataset was recorded in (``recover_environment()``) it ends as
    recorded: the envs are deterministic for a given seed and task."""
    if episode.task is None:
        raise ValueError("the episode holds no task (recorded before tasks were stored): it cannot be replayed")
    _, info = env.reset(seed=int(episode.seed), options={"task": episode.task})
    rewards = []
    for action in episode.actions:
        _, reward, terminated, truncated, info = env.step(np.asarray(action, np.float32))
        rewards.append(float(reward))
        if terminated or truncated:
            break
    return info, rewards


__all__ = ["Episode", "dataset_exists", "datasets_root", "episode_metadata", "episode_task", "load_episode",
           "minari_root", "open_minari", "read_minari", "replay", "save_episode", "transitions", "write_minari"]
