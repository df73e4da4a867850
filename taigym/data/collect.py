"""Expert rollouts and beta-mixed (DAgger) rollouts, resumable, spread over workers.

:func:`rollout` runs one episode in which the expert labels every visited state and the action
applied is the expert's with probability ``beta`` (per step), else the learner's. With
``relabel="replan"`` (DAgger with a planning expert) the expert first replans from the state in
``info`` (``expert.replan(info)``) at every ``replan_every``-th step (every step by default), so
that its label is its action from the state the mixture actually reached (in between, it
tracks its last replan); with ``relabel="none"`` the expert just acts (plans once at the first
step and tracks, as in a demonstration); with ``relabel="outflow"`` it tracks its first plan
until liquid first leaves S, replans ONCE from the state the mixture reached then, and tracks
that plan to the end: labels right for where the learner is when the pour starts (most learner
spills begin 1-5 steps after the first outflow), and consistent within the episode (replanning
every k steps gave labels that disagree from replan to replan).

:func:`collect` runs a list of such jobs, skipping those whose episode file is already in
``out_dir`` (resume after an interruption) and writing each new episode atomically as soon as
it ends. ``workers > 1`` spreads the jobs over processes: Ray if it is installed (a local
cluster of ``workers`` CPUs unless ``RAY_ADDRESS`` names one), else :mod:`multiprocessing`.
Each worker builds its own env (``make_env()``) and expert (``taigym.agents.make(expert.name,
env, **expert.cfg)``); the learner travels as a NumPy copy of its weights.
"""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import pickle
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from taigym.agents.metrics import episode_metrics

from . import Episode, load_episode, save_episode

RELABEL = ("auto", "replan", "none", "outflow")
# relabel="outflow": the fraction of the liquid that must have left S (in_source below 1 - this)
# before the one replan; 1 % is poured ~1-2 steps (0.05 s each) after the lip is first crossed
OUTFLOW_FRACTION = 0.01


def can_replan(expert) -> bool:
    """Whether ``expert`` plans again from the state in a step's ``info`` (``expert.replan(info)``:
    ``sqp``); an agent says so with ``replans_from_info = True``."""
    return bool(getattr(expert, "replans_from_info", False))


def check_can_replan(relabel: str, expert) -> None:
    """ValueError when ``relabel`` ("replan", "outflow") asks ``expert`` to replan and it cannot."""
    if relabel in ("replan", "outflow") and not can_replan(expert):
        raise ValueError(f"relabel={relabel!r} needs an expert that can replan (replan(info), e.g. sqp); "
                         f"{getattr(expert, 'name', expert)!r} cannot (use relabel='none')")


def info_keys(env, info: dict) -> list[str]:
    """The per-step ``info`` entries an episode records: the env's episode metrics, the time and
    the liquid in flight where the env reports them (numbers and booleans only)."""
    keys = [*episode_metrics(env), "time", "in_source", "in_flight", "sim_unstable"]
    return [k for k in dict.fromkeys(keys) if isinstance(info.get(k), (bool, int, float, np.bool_, np.number))]


def expert_spec(expert) -> tuple[str, dict]:
    """``(name, cfg)`` that rebuild ``expert`` with ``taigym.agents.make`` in a worker."""
    return str(getattr(expert, "name", type(expert).__name__)), dict(getattr(expert, "cfg", {}))


def rollout(env, expert, *, task, seed: int, task_index: int = -1, policy: Callable | None = None,
            beta: float = 1.0, relabel: str = "auto", mix_seed: int | None = None,
            replan_every: int = 1) -> Episode:
    """One episode on ``task``; see the module docstring. ``policy``: obs -> action (None =
    pure expert). ``mix_seed`` seeds the per-step choice between expert and learner."""
    if relabel not in RELABEL:
        raise ValueError(f"relabel must be one of {RELABEL}, got {relabel!r}")
    if not (isinstance(replan_every, int) and replan_every >= 1):
        raise ValueError(f"replan_every must be an integer >= 1, got {replan_every!r}")
    replan = relabel == "replan" or (relabel == "auto" and policy is not None and can_replan(expert))
    at_outflow = relabel == "outflow"
    check_can_replan(relabel, expert)
    rng = np.random.default_rng(mix_seed if mix_seed is not None else [int(seed), 7])
    obs, info = env.reset(seed=int(seed), options={"task": task})
    t0 = time.perf_counter()
    expert.reset(seed=int(seed))                 # an expert may plan here (sfrrt, stance)
    exp_time = time.perf_counter() - t0
    if hasattr(policy, "reset"):
        policy.reset()                   # a NumpyPolicy keeps the episode's first observation
    keys = info_keys(env, info)
    obs_l, lab_l, act_l, rew_l, term_l, trunc_l = [np.asarray(obs).copy()], [], [], [], [], []
    info_l = {k: [float(info[k])] for k in keys}
    learner = 0
    terminated = truncated = False
    step = 0
    while not (terminated or truncated):
        t0 = time.perf_counter()
        if replan and step % replan_every == 0:
            expert.replan(info)
        elif at_outflow and step > 0 and float(info["in_source"]) < 1.0 - OUTFLOW_FRACTION:
            expert.replan(info)
            at_outflow = False
        label = np.asarray(expert.act(obs, info), np.float32)
        exp_time += time.perf_counter() - t0
        step += 1
        if policy is not None and (beta < 1.0 and rng.random() >= beta):
            action = np.asarray(policy(obs), np.float32)
            learner += 1
        else:
            action = label
        obs, reward, terminated, truncated, info = env.step(action)
        obs_l.append(np.asarray(obs).copy())
        lab_l.append(label)
        act_l.append(action)
        rew_l.append(float(reward))
        term_l.append(bool(terminated))
        trunc_l.append(bool(truncated))
        for k in keys:
            info_l[k].append(float(info[k]))
    return Episode(obs=np.stack(obs_l), labels=np.stack(lab_l), actions=np.stack(act_l),
                   rewards=np.asarray(rew_l), terminations=np.asarray(term_l), truncations=np.asarray(trunc_l),
                   infos={k: np.asarray(v) for k, v in info_l.items()}, task_index=int(task_index),
                   seed=int(seed), success=bool(info["success"]), expert_labels=len(lab_l),
                   expert_plans=int(getattr(expert, "plans", 0)), expert_seconds=exp_time,
                   learner_steps=learner, task=task_dict(task))


def task_dict(task) -> dict | None:
    """``task.to_dict()`` (plain JSON: lists for tuples), or None for a task without one."""
    to_dict = getattr(task, "to_dict", None)
    return json.loads(json.dumps(to_dict())) if to_dict is not None else None


def make_job(task_index: int, task, *, seed: int, beta: float = 1.0, relabel: str = "none",
             mix_seed: int | None = None, key: str | None = None, replan_every: int = 1) -> dict:
    """A job for :func:`collect`; ``key`` names its episode file (default: task index and seed)."""
    return {"task_index": int(task_index), "task": task, "seed": int(seed), "beta": float(beta),
            "relabel": relabel, "mix_seed": mix_seed, "replan_every": int(replan_every),
            "key": key or f"task{int(task_index):05d}-seed{int(seed)}"}


def _rollout_args(job: dict) -> dict:
    return {k: job[k] for k in ("task", "seed", "task_index", "beta", "relabel", "mix_seed")} | \
        {"replan_every": job.get("replan_every", 1)}


class _Worker:
    """One env + one expert (+ the learner's NumPy weights) that runs jobs."""

    def __init__(self, make_env, expert_name: str, expert_cfg: dict, policy_params, out_dir):
        from taigym.agents import make
        from taigym.agents.policy import NumpyPolicy

        self.env = make_env()
        self.expert = make(expert_name, self.env, **expert_cfg)
        space = self.env.action_space
        self.policy = NumpyPolicy(policy_params, space.low, space.high) if policy_params is not None else None
        self.out_dir = Path(out_dir) if out_dir is not None else None

    def run(self, job: dict) -> Episode:
        ep = rollout(self.env, self.expert, policy=self.policy, **_rollout_args(job))
        if self.out_dir is not None:
            save_episode(ep, self.out_dir / f"{job['key']}.npz")
        return ep

    def run_keyed(self, job: dict) -> tuple[str, Episode]:
        return job["key"], self.run(job)


_WORKER: _Worker | None = None


def _init_worker(*args) -> None:
    global _WORKER
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    _WORKER = _Worker(*args)


def _run_job(job: dict) -> tuple[str, Episode]:
    assert _WORKER is not None
    return _WORKER.run_keyed(job)


def _ray_available() -> bool:
    try:
        import ray  # noqa: F401
    except Exception:
        return False
    return True


def collect(make_env: Callable, expert, jobs: Sequence[dict], *, out_dir: str | Path | None = None,
            workers: int = 1, policy_params: dict | None = None, env=None, progress: bool = True,
            desc: str = "episodes", backend: str = "auto") -> list[Episode]:
    """Run ``jobs`` (see :func:`make_job`) and return their episodes in job order.

    Episodes already in ``out_dir`` are loaded instead of rerun. ``workers=1`` runs in this
    process with ``env`` (or ``make_env()``) and the ``expert`` object; ``workers>1`` uses
    ``backend`` ``"ray"``, ``"multiprocessing"`` or ``"auto"`` (Ray when installed).
    """
    if backend not in ("auto", "ray", "multiprocessing"):
        raise ValueError(f"backend must be auto, ray or multiprocessing, got {backend!r}")
    out = Path(out_dir) if out_dir is not None else None
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
    keys = [j["key"] for j in jobs]
    if len(set(keys)) != len(keys):
        raise ValueError("job keys must be unique")
    done: dict[str, Episode] = {}
    if out is not None:
        for k in keys:
            f = out / f"{k}.npz"
            if f.is_file():
                try:
                    done[k] = load_episode(f)
                except Exception:           # a damaged file (should not happen: writes are atomic)
                    f.unlink()
    todo = [j for j in jobs if j["key"] not in done]
    bar = _progress(len(jobs), len(done), desc, progress)
    try:
        if todo:
            n_succ = sum(ep.success for ep in done.values())

            def finished(key, ep):
                nonlocal n_succ
                done[key] = ep
                n_succ += bool(ep.success)
                if bar is not None:
                    bar.update(1)
                    bar.set_postfix(success=f"{n_succ}/{len(done)}", refresh=False)

            workers = max(int(workers), 1)
            if workers == 1 or len(todo) == 1:
                from taigym.agents.policy import NumpyPolicy

                env = env if env is not None else make_env()
                space = env.action_space
                pol = NumpyPolicy(policy_params, space.low, space.high) if policy_params is not None else None
                for j in todo:
                    ep = rollout(env, expert, policy=pol, **_rollout_args(j))
                    if out is not None:
                        save_episode(ep, out / f"{j['key']}.npz")
                    finished(j["key"], ep)
            else:
                name, cfg = expert_spec(expert)
                args = (make_env, name, cfg, policy_params, out)
                use_ray = backend == "ray" or (backend == "auto" and _ray_available())
                if use_ray:
                    _collect_ray(args, todo, min(workers, len(todo)), finished)
                else:
                    _collect_mp(args, todo, min(workers, len(todo)), finished)
    finally:
        if bar is not None:
            bar.close()
    return [done[k] for k in keys]


def _collect_mp(args, todo, workers, finished) -> None:
    try:
        pickle.dumps(args[0])
        method = "spawn"         # a fresh interpreter: safe with Taichi and torch state
    except Exception:
        method = "fork"          # make_env is a closure: it cannot travel to a spawned process
    ctx = mp.get_context(method)
    with ctx.Pool(workers, initializer=_init_worker, initargs=args) as pool:
        for key, ep in pool.imap_unordered(_run_job, todo):
            finished(key, ep)


def _collect_ray(args, todo, workers, finished) -> None:
    import ray
    from ray.util import ActorPool

    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")   # never report usage over the network
    started = False
    if not ray.is_initialized():
        if os.environ.get("RAY_ADDRESS"):
            ray.init(log_to_driver=False)
        else:
            ray.init(num_cpus=workers, include_dashboard=False, log_to_driver=False)
        started = True
    try:
        actor = ray.remote(num_cpus=1)(_Worker)
        pool = ActorPool([actor.remote(*args) for _ in range(workers)])
        for key, ep in pool.map_unordered(lambda a, j: a.run_keyed.remote(j), todo):
            finished(key, ep)
    finally:
        if started:
            ray.shutdown()


def _progress(total: int, initial: int, desc: str, enabled: bool):
    if not enabled:
        return None
    try:
        from tqdm.auto import tqdm
    except ImportError:
        return None
    return tqdm(total=total, initial=initial, desc=desc, unit="ep", file=sys.stderr, dynamic_ncols=True)


__all__ = ["can_replan", "check_can_replan", "collect", "expert_spec", "info_keys", "make_job", "rollout", "task_dict"]
