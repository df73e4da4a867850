"""Behaviour cloning of an expert into the ``bc`` agent (a deterministic MLP regressing its actions).

``train(make_env, cfg, run_dir, logger, expert=None)`` fits an :class:`~taigym.agents.policy.
MLPPolicy` (observation normalisation, ReLU hidden layers, linear head; actions clipped to
[-1, 1] when acting) to the expert's (observation, action) pairs with an MSE loss, Adam and
minibatches, and stops early when the loss on held-out episodes (``val_fraction``) has not
improved for ``patience`` epochs; the weights of the best validation epoch are kept. The
observation is the env's (a flat Box: Pour-v0's ``obs_mode="features"`` or ``"lip"``, and every
other env's).

Demonstrations come from ``cfg["dataset"]`` (a Minari dataset: an id under ``dataset_root`` /
``$MINARI_DATASETS_PATH``, or a directory; see ``python -m taigym.apps.datasets``) or, without
one, from ``episodes`` episodes of ``expert`` (or of ``taigym.agents.make(cfg["expert"], env,
**cfg["expert_options"])``) on the first learning tasks (:mod:`taigym.training.common`), recorded under
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
expert             None       expert name when ``expert`` is not given (the apps: the env's)
expert_options     {}         its options
episodes           50         expert episodes to collect (train-split tasks 0..episodes-1)
success_only       True       keep successful demonstrations only
max_labels         None       use at most this many labels (perturbed replays' included)
perturb            None       Transport-v0: ``{copies, pose_std, tilt_std, gain}``, perturbed
                              replays of each demonstration labelled by sfrrt's tracking
                              law (:mod:`taigym.training.carry_labels`); None: none
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
ignore_obs         []         observation entries the policy does not see (indices; the
                              env configs set Pour-v0's: S's velocity, older frames)
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
from collections.abc import Callable
from pathlib import Path

from taigym.agents.bc import BCAgent
from taigym.agents.policy import MLPPolicy, torch_load, torch_save_atomic
from taigym.data import transitions
from taigym.envs import family_of

from .carry_labels import check_options, split_ids, with_replays
from .common import learner_setup, load_demos, rollout_metrics, selection_score, selection_tasks, \
    start_rows, validation_tasks
from .fit import TRAIN_DEFAULTS, Fit, check_cfg, seed_everything

DEFAULTS = dict(dataset=None, dataset_root=None, expert=None, expert_options={}, episodes=50,
                success_only=True, max_labels=None, perturb=None, workers=1, **TRAIN_DEFAULTS,
                checkpoint_every=10, eval_episodes=10, select_episodes=0, select_candidates=1, progress=True)


# -------------------------------------------------------------------------------------- train
def train(make_env: Callable, cfg: dict | None, run_dir: str | Path, logger, expert=None) -> BCAgent:
    """Behaviour cloning; see the module docstring. Returns the trained :class:`BCAgent`."""
    cfg = check_cfg(cfg, DEFAULTS, "bc")
    n_candidates = cfg["select_candidates"]
    if not (isinstance(n_candidates, int) and n_candidates >= 1):
        raise ValueError(f"select_candidates must be an integer >= 1, got {n_candidates!r}")
    run_dir, env, (obs_dim, act_dim), features = learner_setup(make_env, cfg, run_dir, expert)
    perturb = check_options(cfg["perturb"], family_of(env))
    select_tasks = selection_tasks(env, cfg["select_episodes"])
    if n_candidates > 1 and not select_tasks:
        raise ValueError("select_candidates > 1 needs select_episodes > 0 (the tasks that rank them)")

    episodes, stats = load_demos(make_env, env, cfg, run_dir, expert)
    episodes = with_replays(episodes, perturb, cfg["seed"])
    stats["replays"] = len(episodes) - stats["demo_kept"]
    obs, labels, groups = transitions(episodes, cfg["max_labels"])
    if obs.shape[1] != obs_dim:
        raise ValueError(f"the demonstrations have {obs.shape[1]} observation entries, the env {obs_dim} "
                         "(another obs_mode?)")
    stats["labels"] = int(len(labels))

    seed_everything(cfg["seed"])
    policy = MLPPolicy(obs_dim, act_dim, cfg["hidden"], cfg["ignore_obs"], features=features,
                       members=cfg["members"])
    fit = Fit(policy, obs, labels, groups, cfg, seed=cfg["seed"], start=start_rows(episodes, groups),
              split_groups=split_ids(episodes)[groups])
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


__all__ = ["DEFAULTS", "train"]
