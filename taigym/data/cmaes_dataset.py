"""Pan & Manocha 2017's TRANSFER+ZERO / TRANSFER+FOLLOW dataset: CMA-ES pours and their visited states.

Problem i is drawn from the Pour task distribution (``taigym.envs.pour_tasks.sample_task``:
relative position of S and T, T's speed, fill 0.3-0.8, viscosity, T's shape) with a
rectangular S (the paper trains on one container shape; other shapes are held out) from the
generator ``default_rng([seed, i])``; even i are TRANSFER+ZERO (liquid at rest), odd i
TRANSFER+FOLLOW (liquid moving with S). For each, ``taigym.agents.cmaes`` searches S's
trajectory with CMA-ES in the simplified Pour-v0, replays the best one (in the simplified env, or
with ``label_fidelity="particles"`` in the particle env) and records every visited state's
observation (the env's ``features``: the heightfield of the last 4 frames and both
containers' poses, or ``lip``) with the labels ``taigym.agents.cmaes.LABELS`` (outflow parabola
p, v and flux rho in S's frame; the mean-trajectory prior's ratios alpha, beta, gamma).

Layout: ``<dir>/meta.json`` (the generation options) and ``<dir>/problem_<i>.npz`` per problem
(``obs``, ``labels``; ``reward``: R/N of the recorded replay, without the dribble term;
``initial_reward``, ``planned_reward``: CMA-ES's objective at its initial mean and best, in the
simplified env; ``history``,
``ratios``, ``task`` JSON,
``details`` JSON), each written atomically (temporary file, then ``os.replace``). Generation is
resumable: problems whose file exists are skipped; it is deterministic per problem.

Size: the default, 40 problems (popsize 8, 15 iterations, particle labels), takes a few
minutes on one core here (2-10 s per problem, depending on the load); the agent shipped in the
report used 160 (``--problems 160``, 9 min). The paper's full size is P = 1000 problems per
dataset (2000 in all, I = 200 iterations of R = 30 samples): ``python scripts/cmaes_dataset.py
--problems 2000 --popsize 30 --iterations 200``: 12 million rollouts of ~10-30 ms, days on one core.
"""

from __future__ import annotations

import dataclasses
import io
import json
import time
from pathlib import Path

import numpy as np

DATASET_SEED = 20260417            #: problems of the dataset
TEST_SEED = 20260418               #: the 30 "new problems" of scripts/rh_eval.py


def problem(i: int, seed: int = DATASET_SEED, source_container: str = "rect"):
    """Problem i of a problem set (module docstring): even i TRANSFER+ZERO, odd i
    TRANSFER+FOLLOW."""
    from taigym.envs.pour_tasks import sample_task

    rng = np.random.default_rng([int(seed), int(i)])
    return sample_task(rng, source_container=source_container,
                       liquid_velocity="zero" if i % 2 == 0 else "follow")


def _write_npz_atomic(path: Path, **arrays) -> None:
    from taigym.agents.policy import atomic_write_bytes

    buf = io.BytesIO()
    np.savez_compressed(buf, **arrays)
    atomic_write_bytes(path, buf.getvalue())


def generate(out_dir: str | Path, problems: int = 40, *, obs_mode: str = "features",
             cmaes: dict | None = None, seed: int = DATASET_SEED, progress: bool = True,
             resolution: int = 128, label_fidelity: str = "particles") -> Path:
    """Generate (or complete) the dataset in ``out_dir``; returns its path. CMA-ES always
    searches in the simplified env; ``label_fidelity="particles"`` (default) replays the best
    trajectory in the particle env (FLIP) and records its states, labels and reward (the
    heightfield and outflow the agent will see there; ~1-2 s more per problem); ``"simplified"``
    replays it in the simplified env."""
    if label_fidelity not in ("simplified", "particles"):
        raise ValueError(f"label_fidelity must be 'simplified' or 'particles', got {label_fidelity!r}")
    import gymnasium as gym

    import taigym.envs  # noqa: F401  (registers Pour-v0)
    from taigym.agents.cmaes import plan_task, rollout
    from taigym.planners.cmaes import CMAESConfig

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    cfg = CMAESConfig(**(cmaes or {}))
    meta = {"problems": int(problems), "obs_mode": obs_mode, "seed": int(seed), "resolution": int(resolution),
            "cmaes": dataclasses.asdict(cfg), "source_container": "rect", "label_fidelity": label_fidelity}
    meta_path = out / "meta.json"
    if meta_path.exists():
        old = json.loads(meta_path.read_text())
        same = {k: old.get(k) for k in meta if k != "problems"} == {k: v for k, v in meta.items() if k != "problems"}
        if not same:
            raise ValueError(f"{out} holds a dataset generated with other options ({old}); "
                             f"use another directory")
    from taigym.agents.policy import atomic_write_bytes

    atomic_write_bytes(meta_path, json.dumps(meta, indent=1).encode())
    env = gym.make("taigym/Pour-v0", fidelity="simplified", obs_mode=obs_mode, resolution=resolution)
    label_env = env if label_fidelity == "simplified" else \
        gym.make("taigym/Pour-v0", fidelity="particles", obs_mode=obs_mode, resolution=resolution)
    todo = [i for i in range(problems) if not (out / f"problem_{i:05d}.npz").exists()]
    t0 = time.perf_counter()
    for n, i in enumerate(todo):
        task = problem(i, seed)
        res = plan_task(task, env, dataclasses.replace(cfg, seed=cfg.seed + i))
        reward, details, (obs, labels) = rollout(label_env, task, res.poses, record=True, lean=cfg.lean,
                                                 seed=i)
        _write_npz_atomic(out / f"problem_{i:05d}.npz", obs=obs, labels=labels,
                          reward=np.float64(reward), initial_reward=np.float64(res.initial_reward),
                          planned_reward=np.float64(res.reward),
                          history=np.asarray(res.history), ratios=res.ratios,
                          task=np.str_(task.to_json()), details=np.str_(json.dumps(details)))
        if progress:
            el = time.perf_counter() - t0
            print(f"[{problems - len(todo) + n + 1}/{problems}] problem {i} ({task.liquid_velocity}): "
                  f"R/N {res.initial_reward:.2f} -> {res.reward:.3f} (simplified), {reward:.3f} replayed in "
                  f"{label_fidelity}: in T {details['in_target']:.3f}, "
                  f"spilled {details['spilled']:.3f}, {len(obs)} states; {el:.0f} s, "
                  f"eta {el / (n + 1) * (len(todo) - n - 1):.0f} s", flush=True)
    env.close()
    label_env.close()
    return out


def generate_onpolicy(out_dir: str | Path, checkpoint: str | Path, problems: int = 160, *,
                      seed: int = DATASET_SEED, start: int = 0, resolution: int = 128,
                      fidelity: str = "particles", progress: bool = True) -> Path:
    """Data aggregation for the model (DAgger's step, as in model-based RL): roll out ``rh``
    with the network ``checkpoint`` on the dataset's problems start..start+problems-1 (rect S,
    reset seed i like the CMA-ES replay) in the particle env (``fidelity``), and record at every
    visited state the observation and the outflow labels p, v, rho of the step it leads to
    (:func:`taigym.agents.cmaes.outflow_labels`, as :func:`taigym.agents.cmaes.rollout` does).
    These label the liquid, whatever moved S, so they hold at the states ``rh`` itself reaches
    (surges, leaning far from T) that the teacher's pours never visit. The prior's labels
    (alpha, beta, gamma) are NaN: they are the teacher's trajectory, and ``rh``'s own (which may
    spill) is not one to imitate; the fit leaves NaN labels out of the prior's loss.

    Same layout as :func:`generate` (``reward``: the rollout's R/N; ``initial_reward`` and
    ``planned_reward`` NaN), atomic and resumable; ``meta.json`` names the checkpoint and its
    SHA-256, and a directory made with another network is refused."""
    import hashlib

    import gymnasium as gym

    import taigym.envs  # noqa: F401  (registers Pour-v0)
    from taigym.agents.cmaes import SPILL_REWARD, env_constants, not_in_target, outflow_labels
    from taigym.agents.policy import atomic_write_bytes
    from taigym.agents.rh import RHAgent

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    digest = hashlib.sha256(Path(checkpoint).read_bytes()).hexdigest()
    meta = {"problems": int(problems), "start": int(start), "obs_mode": "features", "seed": int(seed),
            "resolution": int(resolution),
            "source_container": "rect", "label_fidelity": fidelity, "onpolicy": "rh",
            "checkpoint": str(checkpoint), "checkpoint_sha256": digest}
    meta_path = out / "meta.json"
    if meta_path.exists():
        old = json.loads(meta_path.read_text())
        keys = ("start", "obs_mode", "seed", "resolution", "label_fidelity", "checkpoint_sha256")
        if any(old.get(k) != meta[k] for k in keys):
            raise ValueError(f"{out} holds rollouts of other options or another network ({old}); "
                             f"use another directory")
    atomic_write_bytes(meta_path, json.dumps(meta, indent=1).encode())
    env = gym.make("taigym/Pour-v0", fidelity=fidelity, obs_mode="features", resolution=resolution)
    agent = RHAgent.load(checkpoint, env)
    dt = env_constants(env)[0]
    todo = [i for i in range(start, start + problems) if not (out / f"problem_{i:05d}.npz").exists()]
    t0 = time.perf_counter()
    for n, i in enumerate(todo):
        task = problem(i, seed)
        obs, info = env.reset(seed=i, options={"task": task})
        agent.reset(seed=i)
        obs_list, out_list, earned = [], [], 0.0
        done = False
        while not done:
            obs_list.append(np.asarray(obs, np.float32))
            prev = float(info["in_source"])
            obs, _, terminated, truncated, info = env.step(agent.act(obs, info))
            done = terminated or truncated
            earned += float(info["reward_target"])
            out_list.append(outflow_labels(env, info, prev, dt))
        labels = np.hstack([np.array(out_list), np.full((len(out_list), 3), np.nan)]).astype(np.float32)
        reward = earned + SPILL_REWARD * not_in_target(info)
        details = {k: float(info[k]) for k in ("in_target", "spilled", "in_source", "in_flight")}
        details["steps"] = len(obs_list)
        _write_npz_atomic(out / f"problem_{i:05d}.npz", obs=np.array(obs_list), labels=labels,
                          reward=np.float64(reward), initial_reward=np.float64(np.nan),
                          planned_reward=np.float64(np.nan), task=np.str_(task.to_json()),
                          details=np.str_(json.dumps(details)))
        if progress:
            el = time.perf_counter() - t0
            print(f"[{problems - len(todo) + n + 1}/{problems}] problem {i} ({task.liquid_velocity}): rh "
                  f"R/N {reward:.3f}: in T {details['in_target']:.3f}, spilled {details['spilled']:.3f}, "
                  f"{len(obs_list)} states; {el:.0f} s, eta {el / (n + 1) * (len(todo) - n - 1):.0f} s",
                  flush=True)
    env.close()
    return out


def load(path: str | Path, problems: int | None = None) -> dict:
    """The dataset's arrays: ``obs`` (N, D), ``labels`` (N, 8), ``problem`` (N,) index of each
    state's problem, ``reward``, ``initial_reward``, ``planned_reward`` (P,) each, ``index``
    (P,) each problem's index i in its problem set, ``meta``."""
    path = Path(path)
    files = sorted(path.glob("problem_*.npz"))
    if problems is not None:
        files = files[:problems]
    if not files:
        raise FileNotFoundError(f"no problem_*.npz in {path}; generate with scripts/cmaes_dataset.py")
    obs, labels, idx, rew, rew0, planned = [], [], [], [], [], []
    for k, f in enumerate(files):
        with np.load(f) as z:
            obs.append(z["obs"])
            labels.append(z["labels"])
            idx.append(np.full(len(z["obs"]), k))
            rew.append(float(z["reward"]))
            rew0.append(float(z["initial_reward"]))
            planned.append(float(z["planned_reward"]) if "planned_reward" in z else np.nan)
    meta = json.loads((path / "meta.json").read_text()) if (path / "meta.json").exists() else {}
    return {"obs": np.concatenate(obs), "labels": np.concatenate(labels), "problem": np.concatenate(idx),
            "reward": np.array(rew), "initial_reward": np.array(rew0), "planned_reward": np.array(planned),
            "index": np.array([int(f.stem.split("_")[1]) for f in files]), "meta": meta}
