"""``bc``: behaviour cloning of an expert (a deterministic MLP regressing its actions).

``train(make_env, cfg, run_dir, logger, expert=None)`` fits an :class:`~taigym.agents.policy.
MLPPolicy` (observation normalisation, ReLU hidden layers, linear head; actions clipped to
[-1, 1] when acting) to the expert's (observation, action) pairs with an MSE loss, Adam and
minibatches, and stops early when the loss on held-out episodes (``val_fraction``) has not
improved for ``patience`` epochs; the weights of the best validation epoch are kept. The
observation is the env's (``obs_mode="features"``, the heightfield, or ``"lip"``).

Demonstrations come from ``cfg["dataset"]`` (a Minari dataset: an id under ``dataset_root`` /
``$MINARI_DATASETS_PATH``, or a directory; see ``python -m taigym.apps.demos``) or, without
one, from ``episodes`` episodes of ``expert`` (or of ``taigym.agents.make(cfg["expert"], env,
**cfg["expert_options"])``) on the first tasks of the train split, recorded under
``run_dir/demos`` (resumable). Only successful episodes are kept (``success_only``).
``max_labels`` caps the number of expert labels (state-action pairs) used, to compare with
DAgger at equal labels; without a dataset, collection then runs until that many labels are
kept.

Resuming: every ``checkpoint_every`` epochs the whole fit (current and best weights,
optimizer, RNG, history) goes to ``run_dir/checkpoint.pt`` atomically; calling ``train`` again
with the same ``run_dir`` continues from there (a larger ``max_epochs`` extends a finished
run). The trained agent is saved to ``run_dir/agent.pt`` and logged as an artifact.

Options (defaults):

================== ========== ===========================================================
key                default    meaning
================== ========== ===========================================================
dataset            None       Minari dataset id or directory; None: collect with the expert
dataset_root       None       directory holding Minari datasets (None: $MINARI_DATASETS_PATH)
expert             "sqp"      expert name when ``expert`` is not given
expert_options     {}         its options
episodes           50         expert episodes to collect (train-split tasks 0..episodes-1)
success_only       True       keep successful demonstrations only
max_labels         None       use at most this many expert labels
workers            1          processes for collecting (Ray if installed, else multiprocessing)
hidden             [256, 256] hidden layer widths
lr                 1e-3       Adam learning rate
weight_decay       0.0        Adam weight decay
batch_size         256        minibatch size
max_epochs         200        epoch budget
patience           20         early stopping patience (epochs)
val_fraction       0.1        fraction of episodes held out for early stopping
seed               0          seeds initialisation, split and minibatch order
threads            1          torch threads while training
features           "auto"     input features (:mod:`taigym.agents.features`): target_path on
                              Pour-v0 (T's predicted path relative to S), else none
checkpoint_every   10         epochs between checkpoints
eval_episodes      10         validation rollouts at the end (last train-split tasks; 0: none)
select_episodes    0          model selection: rollouts on this many ``val``-split tasks
select_candidates  1          policies ranked there (needs ``select_episodes``): the lowest
                              validation-loss weights and those at the last
                              ``select_candidates - 1`` checkpoints; the best success, then
                              in_target, is returned (DAgger ranks its rounds the same way)
progress           True       progress bars
================== ========== ===========================================================
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable
from pathlib import Path

import numpy as np

from .features import resolve
from .policy import TRAIN_DEFAULTS, Fit, MLPPolicy, PolicyAgent, check_cfg, flat_obs_dim, seed_everything, \
    torch_load, torch_save_atomic

DEFAULTS = dict(dataset=None, dataset_root=None, expert="sqp", expert_options={}, episodes=50,
                success_only=True, max_labels=None, workers=1, **TRAIN_DEFAULTS,
                checkpoint_every=10, eval_episodes=10, select_episodes=0, select_candidates=1, progress=True)


class BCAgent(PolicyAgent):
    """The behaviour-cloned policy (``make("bc", env, checkpoint=path)`` loads one)."""

    name = "bc"


# --------------------------------------------------------------------------- shared helpers
def env_for(make_env, expert=None):
    """The env to roll out in: the expert's own when one is given (an expert reads the task of
    the env it was built with), else a new ``make_env()``."""
    env = getattr(expert, "env", None) if expert is not None else None
    return env if env is not None else make_env()


def build_expert(env, cfg: dict, expert=None):
    if expert is not None:
        return expert
    from . import make

    return make(cfg["expert"], env, **dict(cfg.get("expert_options") or {}))


def train_tasks(env):
    from taigym.envs import tasks

    from taigym.data.collect import task_family

    return tasks(task_family(env), split="train")


def learning_task(env, i: int, reserve: int) -> tuple[int, object]:
    """(index, task) of the ``i``-th task to learn from (demonstrations, DAgger's rollouts): the
    train split's tasks but its last ``reserve`` (validation), then on Pour-v0 tasks 1000, 1001,
    ... from :func:`~taigym.envs.pour_tasks.extra_train_task` (the same distribution, another
    seed: more demonstrations help the cloned policy most, README); other families wrap around."""
    from taigym.data.collect import task_family

    tasks = train_tasks(env)
    usable = max(len(tasks) - int(reserve), 1)
    if i < usable:
        return i, tasks[i]
    if task_family(env) == "pour":
        from taigym.envs.pour_tasks import extra_train_task

        return len(tasks) + i - usable, extra_train_task(i - usable)
    return i % usable, tasks[i % usable]


def validation_tasks(env, n: int):
    """The last ``n`` train-split tasks (never used for demonstrations or DAgger's rollouts on
    Pour-v0, which continue with :func:`learning_task`'s further tasks; other families wrap around
    to the first tasks): rollouts that select and monitor without touching the eval split."""
    t = train_tasks(env)
    return list(t[len(t) - int(n):]) if n > 0 else []


def selection_tasks(env, n: int):
    """The first ``n`` tasks of the family's ``val`` split (Pour-v0: 400), for model selection:
    disjoint from the tasks learned from and from the eval split, and many more than the
    ``validation_tasks`` the train split can spare (50 of them did not rank DAgger's rounds, README)."""
    from taigym.envs import tasks

    from taigym.data.collect import task_family

    if not (isinstance(n, int) and n >= 0):
        raise ValueError(f"select_episodes must be an integer >= 0, got {n!r}")
    if n == 0:
        return []
    try:
        val = tasks(task_family(env), split="val")
    except ValueError as e:
        raise ValueError(f"select_episodes needs a val split, which {task_family(env)!r} has not") from e
    if n > len(val):
        raise ValueError(f"select_episodes must be at most {len(val)} (the val split), got {n}")
    return list(val[:n])


def selection_score(metrics: dict) -> tuple[float, float]:
    """Rank of a candidate policy on the selection (or validation) tasks: success, then in_target."""
    return (metrics.get("success", 0.0), metrics.get("in_target", 0.0))


def rollout_metrics(env, agent, tasks, seed: int = 10_000) -> dict:
    """Success rate, means of in_target / spilled and per-decision latency over ``tasks``."""
    from .base import evaluate, summarise

    rows = evaluate(env, agent, tasks, seed=seed)
    s = summarise(rows)
    return {"success": s["success_rate"], "in_target": s["mean_in_target"], "spilled": s["mean_spilled"],
            "act_seconds": float(np.mean([r["act_seconds"] for r in rows]))}


def start_rows(episodes, groups: np.ndarray) -> np.ndarray:
    """Each transition's episode's first observation (the policy's ``start_pose`` input)."""
    return np.stack([np.asarray(e.obs[0], np.float32) for e in episodes])[np.asarray(groups)]


def expert_demos(make_env, env, expert, cfg: dict, out_dir: Path, *, start: int = 0, seed0: int = 0):
    """Expert episodes on train tasks ``start..``: ``cfg["episodes"]`` of them, or, with
    ``max_labels``, as many as it takes to keep that many labels. Returns (kept, all)."""
    from taigym.data.collect import collect, make_job, task_family

    reserve = int(cfg.get("eval_episodes") or 0)
    budget = cfg.get("max_labels")
    target = int(cfg["episodes"]) if budget is None else math.inf
    chunk = max(int(cfg["workers"]), 1) * 4
    all_eps: list = []
    i = 0
    # a label budget on a family that cannot draw more tasks stops at the end of its train split
    limit = math.inf if task_family(env) == "pour" else len(train_tasks(env)) - reserve
    while i < target:
        n = chunk if budget is not None else int(target - i)
        if budget is not None and i >= limit:
            break
        jobs = [make_job(*learning_task(env, start + k, reserve), seed=seed0 + start + k, relabel="none")
                for k in range(i, i + n)]
        all_eps += collect(make_env, expert, jobs, out_dir=out_dir, workers=cfg["workers"], env=env,
                           progress=cfg["progress"], desc="expert demos")
        i += n
        kept = [e for e in all_eps if e.success or not cfg["success_only"]]
        if budget is not None and sum(len(e) for e in kept) >= int(budget):
            break
    kept = [e for e in all_eps if e.success or not cfg["success_only"]]
    return kept, all_eps


def load_demos(make_env, env, cfg: dict, run_dir: Path, expert=None):
    """Demonstrations for ``cfg``: (kept episodes, stats)."""
    from taigym.data import read_minari

    if cfg["dataset"]:
        from taigym.data import open_minari

        eps = read_minari(open_minari(cfg["dataset"], root=cfg["dataset_root"]))
        all_eps = eps
        kept = [e for e in eps if e.success or not cfg["success_only"]]
        source = str(cfg["dataset"])
    else:
        expert = build_expert(env, cfg, expert)
        kept, all_eps = expert_demos(make_env, env, expert, cfg, run_dir / "demos")
        source = f"expert:{getattr(expert, 'name', '?')}"
    stats = {"demo_episodes": len(all_eps), "demo_kept": len(kept), "demo_filtered": len(all_eps) - len(kept),
             "labels_queried": int(sum(e.expert_labels for e in all_eps)),
             "expert_seconds": float(sum(e.expert_seconds for e in all_eps)), "source": source}
    return kept, stats


# -------------------------------------------------------------------------------------- train
def train(make_env: Callable, cfg: dict | None, run_dir: str | Path, logger, expert=None) -> BCAgent:
    """Behaviour cloning; see the module docstring. Returns the trained :class:`BCAgent`."""
    from taigym.data import transitions

    cfg = check_cfg(cfg, DEFAULTS, "bc")
    n_candidates = cfg["select_candidates"]
    if not (isinstance(n_candidates, int) and n_candidates >= 1):
        raise ValueError(f"select_candidates must be an integer >= 1, got {n_candidates!r}")
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    env = env_for(make_env, expert)
    obs_dim = flat_obs_dim(env.observation_space)
    act_dim = int(np.prod(env.action_space.shape))
    features = resolve(cfg["features"], env)
    select_tasks = selection_tasks(env, cfg["select_episodes"])
    if n_candidates > 1 and not select_tasks:
        raise ValueError("select_candidates > 1 needs select_episodes > 0 (the tasks that rank them)")

    episodes, stats = load_demos(make_env, env, cfg, run_dir, expert)
    obs, labels, groups = transitions(episodes, cfg["max_labels"])
    if obs.shape[1] != obs_dim:
        raise ValueError(f"the demonstrations have {obs.shape[1]} observation entries, the env {obs_dim} "
                         "(another obs_mode?)")
    stats["labels"] = int(len(labels))

    seed_everything(cfg["seed"])
    policy = MLPPolicy(obs_dim, act_dim, cfg["hidden"], cfg["ignore_obs"], features=features,
                       members=cfg["members"])
    fit = Fit(policy, obs, labels, groups, cfg, seed=cfg["seed"], start=start_rows(episodes, groups))
    ckpt = run_dir / "checkpoint.pt"
    resumed_from = 0
    snapshots: list[dict] = []          # the validated weights at the last checkpoints
    if ckpt.is_file():
        state = torch_load(ckpt)
        if state.get("agent") != "bc" or state.get("labels") != len(labels):
            raise ValueError(f"{ckpt} belongs to another run (agent {state.get('agent')!r}, "
                             f"{state.get('labels')} labels; this run has {len(labels)}); use a new run_dir")
        fit.load_state_dict(state["fit"])
        snapshots = list(state.get("snapshots", []))
        resumed_from = fit.epoch

    def on_epoch(row):
        logger.log({"train/loss": row["train_loss"], "val/loss": row["val_loss"]}, step=row["epoch"])

    every = max(int(cfg["checkpoint_every"]), 1)
    while True:
        ran_from = fit.epoch
        finished = fit.run(stop_after=every, on_epoch=on_epoch)
        if n_candidates > 1 and fit.epoch > ran_from:
            snapshots = (snapshots + [copy.deepcopy(fit.validated.state_dict())])[-(n_candidates - 1):]
        torch_save_atomic({"agent": "bc", "labels": len(labels), "fit": fit.state_dict(), "cfg": cfg,
                           "stats": stats, "snapshots": snapshots}, ckpt)
        if finished:
            break

    policy = fit.finalise()
    meta = {"cfg": cfg, **stats, "epochs": fit.epoch, "stopped": fit.reason, "best_val_loss": fit.best_val,
            "resumed_from_epoch": resumed_from}
    if select_tasks:
        # the candidates: the lowest validation-loss weights, then the last checkpoints' (newest last)
        ranked = []
        for i, weights in enumerate([fit.best_state] + snapshots):
            policy.load_state_dict(weights)
            m = rollout_metrics(env, BCAgent(env, policy=policy), select_tasks)
            ranked.append((selection_score(m), -i, weights, m))
        score, neg_i, weights, m = max(ranked, key=lambda r: r[:2])
        policy.load_state_dict(weights)
        meta.update({"selected_candidate": -neg_i, "candidates": len(ranked),
                     **{f"select_{k}": v for k, v in m.items()},
                     "candidate_success": [r[3]["success"] for r in ranked]})
    agent = BCAgent(env, policy=policy, meta=meta)
    if cfg["eval_episodes"]:
        m = rollout_metrics(env, agent, validation_tasks(env, cfg["eval_episodes"]))
        agent.meta.update({f"val_{k}": v for k, v in m.items()})
        logger.log({f"val/{k}": v for k, v in m.items()} | {"labels": stats["labels"]}, step=fit.epoch)
    path = run_dir / "agent.pt"
    agent.save(path)
    logger.log_artifact(path, name="bc", kind="checkpoint")
    return agent


__all__ = ["BCAgent", "DEFAULTS", "train"]
