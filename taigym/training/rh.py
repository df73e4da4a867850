"""Training of ``rh`` (Pan & Manocha 2017): the CMA-ES dataset, then the liquid-parameter network.

``train(make_env, cfg, run_dir, logger)`` generates (or completes) the CMA-ES dataset
(:mod:`taigym.data.cmaes_dataset`, resumable) in the run directory (or uses ``cfg["dataset"]``),
keeps the successful pours (R/N >= ``min_reward``), adds every state of ``rh``'s own rollouts in
``onpolicy`` (``scripts/cmaes_dataset.py --onpolicy``: the states the planner reaches, surges
included, which the teacher's pours never visit), fits :class:`~taigym.models.liquid_net.
LiquidNet` and saves the agent (``agent.pt``): ``python -m taigym.apps.train agent=rh
env=pour_simplified``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from taigym.agents.rh import PLANNER_DEFAULTS, RHAgent
from taigym.data.cmaes_dataset import generate, load
from taigym.envs import family_of
from taigym.models.liquid_net import FitConfig, fit

TRAIN_DEFAULTS = dict(dataset=None, problems=40, obs_mode="features", popsize=8, iterations=15,
                      labels="particles", min_reward=0.0, onpolicy=None, epochs=300, lr=3e-3,
                      batch_size=256, val_fraction=0.15, seed=0, progress=True)


def train(make_env, cfg: dict, run_dir: str | Path, logger=None, expert=None) -> RHAgent:
    """Generate (or complete) the CMA-ES dataset, fit the network, return the agent.

    ``cfg``: ``TRAIN_DEFAULTS`` (dataset directory, or None for ``run_dir/cmaes_dataset``;
    ``problems``, ``popsize``, ``iterations`` of the generator; ``labels``: the env, simplified
    or particles, in which the CMA-ES pours are replayed and recorded; ``min_reward``: keep the
    pours whose R/N reaches it; ``onpolicy``: directories of ``rh``'s own rollouts on the same
    problems (``taigym.data.cmaes_dataset.generate_onpolicy``), all their states added;
    ``epochs``, ``lr``, ``batch_size``, ``val_fraction``, ``seed`` of the fit) plus the
    planner's options (``PLANNER_DEFAULTS``)."""
    known = set(TRAIN_DEFAULTS) | set(PLANNER_DEFAULTS) | {"checkpoint_every", "threads", "torch_threads"}
    unknown = set(cfg) - known
    if unknown:
        raise ValueError(f"unknown rh training option(s): {', '.join(sorted(unknown))}; accepted: "
                         f"{', '.join(sorted(known))}")
    c = {**TRAIN_DEFAULTS, **PLANNER_DEFAULTS, **cfg}
    run_dir = Path(run_dir)
    env = make_env()
    if family_of(env) != "pour":
        raise ValueError(f"rh is a Pour-v0 agent (its network predicts Pour-v0's outflow), not {family_of(env)}")
    env_mode = getattr(getattr(env.unwrapped, "cfg", None), "obs_mode", c["obs_mode"])
    if env_mode != c["obs_mode"]:
        raise ValueError(f"obs_mode={c['obs_mode']!r} but the env observes {env_mode!r}")
    data_dir = Path(c["dataset"]) if c["dataset"] else run_dir / "cmaes_dataset"
    resolution = int(getattr(getattr(env.unwrapped, "cfg", None), "resolution", 128))
    generate(data_dir, int(c["problems"]), obs_mode=c["obs_mode"], resolution=resolution,
             cmaes={"popsize": int(c["popsize"]), "max_iterations": int(c["iterations"])},
             progress=bool(c["progress"]), label_fidelity=c["labels"])
    d = load(data_dir, int(c["problems"]))
    keep = d["reward"] >= float(c["min_reward"])
    if not keep.any():
        raise RuntimeError(f"no CMA-ES pour in {data_dir} reached R/N >= {c['min_reward']}")
    m = keep[d["problem"]]
    # rh's own rollouts (generate_onpolicy), every state kept: the failed ones hold the states
    # the teacher's pours never reach; grouped by problem index with the teacher's pour of it
    onpolicy = [c["onpolicy"]] if isinstance(c["onpolicy"], (str, Path)) else list(c["onpolicy"] or [])
    parts = [(d["obs"][m], d["labels"][m], d["index"][d["problem"]][m])]
    for p in onpolicy:
        e = load(p, int(c["problems"]))
        parts.append((e["obs"], e["labels"], e["index"][e["problem"]]))
    obs, labels, groups = (np.concatenate(a) for a in zip(*parts))
    fc = FitConfig(epochs=int(c["epochs"]), lr=float(c["lr"]), batch_size=int(c["batch_size"]),
                   val_fraction=float(c["val_fraction"]), seed=int(c["seed"]))
    net, report = fit(obs, labels, groups, fc, progress=bool(c["progress"]))
    meta = {"obs_mode": c["obs_mode"], "dataset": str(data_dir), "problems_used": int(keep.sum()),
            "problems": int(len(keep)), "states": int(m.sum()),
            "onpolicy": [str(p) for p in onpolicy], "onpolicy_states": int(len(obs) - m.sum()),
            "val_errors": report.get("val_errors"), "val_constant_errors": report.get("val_constant_errors")}
    if logger is not None:
        flat = {f"train/val_{k}": v for k, v in (report.get("val_errors") or {}).items()}
        flat.update({"train/problems_used": meta["problems_used"], "train/states": meta["states"]})
        logger.log(flat, step=0)
    planner = {k: c[k] for k in PLANNER_DEFAULTS}
    agent = RHAgent(env, net=net, meta=meta, **planner)
    agent.save(run_dir / RHAgent.checkpoint_name)
    return agent


__all__ = ["TRAIN_DEFAULTS", "train"]
