"""Bayesian hyperparameter search (Optuna) over a trainable agent, locally or on Ray.

    python -m taigym.apps.sweep                                        # PPO, sweep/ppo_optuna.yaml, local
    python -m taigym.apps.sweep sweep.backend=ray sweep.workers=2      # the same, 2 trials at a time on Ray
    python -m taigym.apps.sweep sweep.backend=ray sweep.ray_address=auto   # on a running Ray cluster
    python -m taigym.apps.sweep sweep.n_trials=16 'sweep.fixed.total_timesteps=100000'

Each trial samples the ``sweep.params`` search space (Optuna's TPE, or random), trains the agent
(``taigym.apps.train.run_training``: the agent config, then ``sweep.fixed``, then the sample) in
``trials/<hash of the sample>/`` and scores it by ``sweep.metric`` of its evaluation on
``sweep.eval_episodes`` eval-split tasks. The study lives in ``study.db`` (SQLite) in the run
directory (``runs/sweep/<sweep.name>-<env.name>``): rerunning the command goes on where it
stopped (trials cut short are rerun with the same sample, resuming their checkpoints), up to
``sweep.n_trials`` complete trials; ``sweep.json`` records what the trials depend on (env,
agent, ``sweep.fixed``, the search space, the metric, the evaluation), and a rerun that changes
any of it is refused (a new ``sweep.name`` starts another study) instead of mixing trials of
two configurations. Writes ``trials.csv``, ``best.yaml`` (metric, value, the
best sample and the full agent config) and ``agent/best.yaml`` (that agent config alone:
``python -m taigym.apps.train --config-dir <run dir> agent=best``).

``sweep.backend=ray`` runs ``sweep.workers`` trials at once as Ray tasks (one CPU each) on a
local Ray instance (``ray.init``, started and stopped by the sweep) or, with
``sweep.ray_address``, on an existing cluster; the driver keeps the Optuna study (ask / tell).
Ray is the optional extra ``pip install taigym[sweep]``. The Hydra Optuna sweeper plugin is not
used: it pins optuna < 3, which does not install beside optuna 5 here.

Hydra multirun also works for grid sweeps without Optuna:
``python -m taigym.apps.train -m agent.learning_rate=1e-4,3e-4,1e-3``.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from .common import hydra_app, to_plain, trainer, write_atomic, write_csv, write_json

log = logging.getLogger(__name__)
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
SPEC_KEYS = {"float": {"low", "high", "log", "step"}, "int": {"low", "high", "log", "step"},
             "categorical": {"choices"}}
#: sweep options that do not change what a trial trains or how it is scored (may change on a rerun)
RUN_OPTIONS = ("n_trials", "backend", "workers", "ray_address")


# ---------------------------------------------------------------------- search space
def check_space(params: Mapping) -> dict:
    """Validated ``{name: spec}``; raises ``ValueError`` on a malformed spec."""
    out = {}
    for name, spec in dict(params or {}).items():
        spec = dict(spec)
        kind = spec.pop("type", None)
        if kind not in SPEC_KEYS:
            raise ValueError(f"sweep param {name}: type must be one of {', '.join(SPEC_KEYS)}, got {kind!r}")
        unknown = set(spec) - SPEC_KEYS[kind]
        if unknown:
            raise ValueError(f"sweep param {name}: unknown key(s) {', '.join(sorted(unknown))} for type {kind}")
        if kind == "categorical" and not spec.get("choices"):
            raise ValueError(f"sweep param {name}: categorical needs choices")
        if kind != "categorical" and not ("low" in spec and "high" in spec and spec["low"] < spec["high"]):
            raise ValueError(f"sweep param {name}: needs low < high, got {spec}")
        out[name] = {"type": kind, **spec}
    if not out:
        raise ValueError("sweep.params is empty: nothing to search")
    return out


def suggest(trial, space: Mapping) -> dict:
    """One sample of the search space from an Optuna trial."""
    values = {}
    for name, spec in space.items():
        if spec["type"] == "float":
            values[name] = trial.suggest_float(name, float(spec["low"]), float(spec["high"]),
                                               log=bool(spec.get("log", False)), step=spec.get("step"))
        elif spec["type"] == "int":
            values[name] = trial.suggest_int(name, int(spec["low"]), int(spec["high"]),
                                             log=bool(spec.get("log", False)), step=int(spec.get("step") or 1))
        else:
            values[name] = trial.suggest_categorical(name, list(spec["choices"]))
    return values


def params_key(params: Mapping) -> str:
    return hashlib.sha1(json.dumps(params, sort_keys=True, default=str).encode()).hexdigest()[:10]


# ---------------------------------------------------------------------- one trial
def trial_config(plain: Mapping, params: Mapping) -> dict:
    """The train config of a trial: the agent config, then ``sweep.fixed``, then ``params``."""
    sweep = plain["sweep"]
    agent = {**plain["agent"], **dict(sweep.get("fixed") or {}), **dict(params)}
    return {"env": plain["env"], "agent": agent, "planner": plain.get("planner"),
            "logger": {"name": "none"}, "seed": plain.get("seed", 0),
            "train_split": sweep.get("train_split", "train"), "eval_split": "eval",
            "eval_episodes": int(sweep["eval_episodes"]), "video_episodes": 0}


def run_trial(plain: Mapping, params: Mapping, trial_dir: str) -> dict:
    """Train and evaluate one sample (in this process or a Ray worker); returns the aggregate."""
    os.environ.setdefault("TI_SKIP_VERSION_CHECK", "ON")
    os.environ.setdefault("WANDB_MODE", "offline")
    from .train import run_training

    trial_dir = Path(trial_dir)
    cfg = trial_config(plain, params)
    t0 = time.perf_counter()
    run_training(cfg, trial_dir)
    metrics = json.loads((trial_dir / "metrics.json").read_text())
    return {"aggregate": metrics["aggregate"], "seconds": time.perf_counter() - t0, "pid": os.getpid()}


# ---------------------------------------------------------------------- the study
def _sampler(sweep: Mapping, offset: int = 0):
    """The sampler; ``offset`` (the trials already in the study) shifts its seed, so that a
    resumed study does not draw its first samples again."""
    import optuna

    kind, seed = sweep.get("sampler", "tpe"), sweep.get("seed", 0)
    seed = None if seed is None else int(seed) + offset
    if kind == "tpe":
        return optuna.samplers.TPESampler(seed=seed, n_startup_trials=min(4, int(sweep["n_trials"])))
    if kind == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    raise ValueError(f"sweep.sampler must be tpe or random, got {kind!r}")


def run_sweep(cfg: DictConfig | Mapping, run_dir: str | Path) -> dict:
    """Run (or go on with) the study in ``run_dir``; returns ``{"best", "trials", "ran"}``."""
    import optuna
    from optuna.trial import TrialState

    plain = to_plain(cfg)
    sweep = plain["sweep"]
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    space = check_space(sweep["params"])
    metric = sweep.get("metric", "mean_return")
    n_trials = int(sweep["n_trials"])
    backend = sweep.get("backend", "local")
    if backend not in ("local", "ray"):
        raise ValueError(f"sweep.backend must be local or ray, got {backend!r}")
    trainer(plain["agent"]["name"])              # fail now if the agent is not trainable
    check_same_study(run_dir, study_identity(plain))

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    storage = f"sqlite:///{run_dir / 'study.db'}"
    study = optuna.create_study(study_name=sweep["name"], storage=storage, load_if_exists=True,
                                direction=sweep.get("direction", "maximize"))
    study.sampler = _sampler(sweep, offset=len(study.get_trials(deepcopy=False)))
    # trials cut short by an earlier interruption: failed, and their samples queued again
    for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        study.tell(t.number, state=TrialState.FAIL)
        study.enqueue_trial(t.params, skip_if_exists=False)

    def n_complete() -> int:
        return len(study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)))

    def finish(trial, params, result=None, error=None) -> None:
        if error is not None:
            log.warning("trial %d failed: %s", trial.number, error)
            study.tell(trial, state=TrialState.FAIL)
            return
        agg = result["aggregate"]
        if metric not in agg:
            raise KeyError(f"sweep.metric {metric!r} is not in the evaluation aggregate ({', '.join(agg)})")
        value = float(agg[metric])
        trial.set_user_attr("seconds", round(result["seconds"], 2))
        trial.set_user_attr("dir", str(run_dir / "trials" / params_key(params)))
        trial.set_user_attr("success_rate", float(agg.get("success_rate", float("nan"))))
        trial.set_user_attr("agent", trial_config(plain, params)["agent"])   # what the trial trained
        study.tell(trial, value)
        log.info("trial %d: %s=%.4f (%.0f s) %s", trial.number, metric, value, result["seconds"], params)

    ran = []
    max_failures = max(n_trials, 3)
    failures = 0
    if backend == "local":
        while n_complete() < n_trials and failures < max_failures:
            trial = study.ask()
            params = suggest(trial, space)
            try:
                result = run_trial(plain, params, str(run_dir / "trials" / params_key(params)))
            except Exception as e:
                failures += 1
                finish(trial, params, error=repr(e))
                continue
            finish(trial, params, result)
            ran.append(trial.number)
    else:
        ran, failures = _run_ray(plain, study, space, run_dir, n_complete, finish, max_failures)
    return write_results(study, plain, run_dir, space, ran)


def study_identity(plain: Mapping) -> dict:
    """What the study's trials depend on: the env, agent, planner and seed, and the sweep's
    options but those of :data:`RUN_OPTIONS` (``sweep.fixed``: the budget; the space; the metric)."""
    sweep = {k: v for k, v in plain["sweep"].items() if k not in RUN_OPTIONS}
    return json.loads(json.dumps({"env": plain["env"], "agent": plain["agent"], "planner": plain.get("planner"),
                                  "seed": plain.get("seed", 0), "sweep": sweep}, default=str))


def check_same_study(run_dir: Path, identity: dict) -> None:
    """Record ``identity`` in ``run_dir/sweep.json``, or ``ValueError`` naming what differs from
    the study already there (its trials were trained and scored another way)."""
    path = run_dir / "sweep.json"
    if not path.exists():
        if (run_dir / "study.db").exists():
            raise ValueError(f"{run_dir} holds a study without sweep.json (from an older taigym): its trials' "
                             "settings are unknown; use a new sweep.name or delete the directory")
        write_json(path, identity)
        return
    old = json.loads(path.read_text())
    changed = sorted(_diff(old, identity))
    if changed:
        raise ValueError(f"{run_dir} holds a study run with other settings ({'; '.join(changed)}): its trials "
                         "would not compare with new ones. Rerun with the same settings, give a new sweep.name, "
                         "or delete the directory")


def _diff(old, new, prefix: str = "") -> list[str]:
    if isinstance(old, dict) and isinstance(new, dict):
        return [d for k in sorted(set(old) | set(new)) for d in _diff(old.get(k), new.get(k), f"{prefix}{k}.")]
    return [] if old == new else [f"{prefix.rstrip('.')}: {old!r} -> {new!r}"]


def _run_ray(plain, study, space, run_dir, n_complete, finish, max_failures):
    try:
        import ray
    except ImportError as e:
        raise ImportError("sweep.backend=ray needs Ray: pip install 'taigym[sweep]'") from e
    sweep = plain["sweep"]
    workers = max(int(sweep.get("workers", 2)), 1)
    address = sweep.get("ray_address")
    started = not ray.is_initialized()
    if started:
        if address:
            ray.init(address=address, log_to_driver=False)
        else:                                    # a local instance of `workers` CPUs
            ray.init(num_cpus=workers, include_dashboard=False, log_to_driver=False,
                     object_store_memory=200 * 1024 * 1024, configure_logging=False)
    remote = ray.remote(num_cpus=1, max_retries=0)(run_trial)
    pending: dict = {}
    ran, failures = [], 0
    try:
        while True:
            while (len(pending) < workers and n_complete() + len(pending) < int(sweep["n_trials"])
                   and failures < max_failures):
                trial = study.ask()
                params = suggest(trial, space)
                ref = remote.remote(plain, params, str(run_dir / "trials" / params_key(params)))
                pending[ref] = (trial, params)
            if not pending:
                break
            done, _ = ray.wait(list(pending), num_returns=1)
            trial, params = pending.pop(done[0])
            try:
                result = ray.get(done[0])
            except Exception as e:
                failures += 1
                finish(trial, params, error=repr(e))
                continue
            finish(trial, params, result)
            ran.append(trial.number)
    finally:
        if started:
            ray.shutdown()
    return ran, failures


def write_results(study, plain: Mapping, run_dir: Path, space: Mapping, ran: list) -> dict:
    from optuna.trial import TrialState

    rows = []
    for t in study.get_trials(deepcopy=False):
        rows.append({"number": t.number, "state": t.state.name, "value": t.value,
                     "seconds": t.user_attrs.get("seconds"), "success_rate": t.user_attrs.get("success_rate"),
                     **{f"param_{k}": t.params.get(k) for k in space}, "dir": t.user_attrs.get("dir")})
    write_csv(run_dir / "trials.csv", rows, ["number", "state", "value", "seconds", "success_rate",
                                              *[f"param_{k}" for k in space], "dir"])
    complete = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    out: dict[str, Any] = {"trials": len(complete), "ran": ran, "best": None}
    if complete:
        best = study.best_trial
        agent = best.user_attrs.get("agent") or trial_config(plain, best.params)["agent"]
        sweep = plain["sweep"]
        summary = {"metric": sweep.get("metric", "mean_return"), "direction": sweep.get("direction", "maximize"),
                   "value": float(best.value), "trial": best.number, "complete_trials": len(complete),
                   "params": dict(best.params), "agent": agent}
        write_atomic(run_dir / "best.yaml", OmegaConf.to_yaml(OmegaConf.create(summary)))
        header = (f"# best of {len(complete)} trials of sweep {sweep['name']}: "
                  f"{summary['metric']} = {summary['value']:.4f} (trial {best.number})\n")
        write_atomic(run_dir / "agent" / "best.yaml", header + OmegaConf.to_yaml(OmegaConf.create(agent)))
        out["best"] = summary
    return out


@hydra_app("sweep")
def main(cfg: DictConfig, run_dir: Path) -> float | None:
    out = run_sweep(cfg, run_dir)
    best = out["best"]
    if best is None:
        log.warning("no trial completed")
        return None
    log.info("best of %d trials: %s = %.4f (trial %d) %s -> %s", out["trials"], best["metric"], best["value"],
             best["trial"], best["params"], run_dir / "best.yaml")
    print(json.dumps({"trials": out["trials"], "ran": len(out["ran"]), "best_value": best["value"],
                      "best_params": best["params"]}))
    return best["value"]


if __name__ == "__main__":
    main()
