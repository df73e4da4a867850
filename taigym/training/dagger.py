"""DAgger, Dataset Aggregation (Ross, Gordon & Bagnell, AISTATS 2011), around an expert: trains
the ``dagger`` agent.

``train(make_env, cfg, run_dir, logger, expert=None)``:

* round 0: expert demonstrations (``demo_episodes`` train-split tasks, or ``cfg["dataset"]``, a
  Minari dataset), successful ones kept as for ``bc``; fit the MLP policy on them;
* round i = 1..``rounds``: roll out the mixture pi_i = beta_i * expert + (1 - beta_i) * learner
  (chosen per step) on ``episodes_per_round`` new train-split tasks, with
  ``beta_i = beta0 * beta_decay ** (i - 1)``; the expert labels EVERY visited state with
  ``expert.act(obs, info)``, the expert policy as it runs (``relabel="none"``, the default:
  ``sqp`` tracks the plan it made at the episode's start, so from a state off the plan its label
  heads back to the plan's pose at that time; ``scripted`` is closed-loop anyway), or after
  replanning from that state (``relabel="replan"``: ``expert.replan(info)``, ~2 s a label for
  ``sqp``; ``"auto"`` replans when the expert can), or from every ``relabel_every``-th visited
  state, tracking that replan in between (``sqp``: ~0.6 s a replan, warm-started), or once, when
  liquid first leaves S, tracking that replan to the end (``relabel="outflow"``; both need an
  expert that can replan, else ValueError), or, on Transport-v0, by ``sfrrt``'s tracking law along
  the recorded carry of the rollout's task (``relabel="recorded"``: the rollouts take the
  demonstrations' tasks in turn; :class:`taigym.training.carry_labels.RecordedCarry`, gain: the
  expert's ``track_gain``; ``sfrrt`` replans only from rest, and its new RRT* draws take other routes
  than the demonstrations'; what each mode gave: ``docs/agents/dagger.md``);
  aggregate every labelled state (successful or not) with the data so far; retrain the policy
  warm-started from round i-1's weights (normalisation fixed at round 0's), early-stopped on
  validation episodes that stay the same in every round (a new draw per round put episodes the
  warm-started policy had trained on into validation, and with at most 100 epochs and patience
  10 the rounds kept their 1st-11th epoch); evaluate it on ``eval_episodes`` validation tasks
  (the last train-split tasks); log; checkpoint.

Expert labels are counted (``labels`` = rows of the aggregated dataset, the number to match
when comparing with ``bc``; ``labels_queried`` also counts discarded failed demonstrations;
``expert_plans`` the planner calls) and ``max_labels`` stops aggregation at a label budget.
The returned policy is the last round's (``select="last"``) or the one with the best
validation success, then in_target (``select="best"``): on ``select_episodes`` tasks of the
``val`` split when given (``bc``'s ``select_candidates`` gives BC as many candidates), else on
the ``eval_episodes`` validation tasks (50 of them did not rank the rounds: ``docs/agents/dagger.md``).

Resuming: each round's episodes are written as they end (``run_dir/rounds/r###/``), and the
state after a round (weights, best round, history, counters) goes to ``run_dir/checkpoint.pt``
every ``checkpoint_every`` rounds; rerunning resumes after the last checkpointed round
(reusing any episodes already recorded), and a larger ``rounds`` extends a finished run.
Everything is seeded, so a resumed run equals an uninterrupted one.

Options (defaults): those of ``bc`` for the network and the fit (``hidden``, ``lr``,
``weight_decay``, ``batch_size``, ``max_epochs`` (per round), ``patience``, ``val_fraction``,
``seed``, ``threads``, ``features``; ``max_epochs`` 200 and ``patience`` 20 as for ``bc``),
``expert`` (None: the apps give the env's), ``expert_options`` ({}), ``dataset`` (None), ``dataset_root`` (None),
``demo_episodes`` (10), ``success_only`` (True, round 0), ``perturb`` (None; Transport-v0: round 0
adds perturbed replays of the demonstrations, as ``bc``), ``rounds`` (5), ``episodes_per_round`` (10), ``beta0`` (0.5), ``beta_decay`` (0.5),
``relabel`` ("none"), ``relabel_every`` (1), ``max_labels`` (None), ``select`` ("best"), ``workers`` (1),
``checkpoint_every`` (1 round), ``eval_episodes`` (10), ``select_episodes`` (0), ``progress`` (True).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path

import numpy as np

from taigym.agents.dagger import DAggerAgent
from taigym.agents.policy import MLPPolicy, torch_load, torch_save_atomic
from taigym.agents.sfrrt import TRACK_GAIN
from taigym.data import transitions
from taigym.data.collect import RELABEL, can_replan, check_can_replan, collect, make_job
from taigym.envs import family_of

from .carry_labels import RecordedCarry, check_options, split_ids, with_replays
from .common import learner_setup, build_expert, learning_task, load_demos, rollout_metrics, \
    selection_score, selection_tasks, start_rows, validation_tasks
from .fit import TRAIN_DEFAULTS, Fit, check_cfg, seed_everything

DEFAULTS = dict(expert=None, expert_options={}, dataset=None, dataset_root=None, demo_episodes=10,
                success_only=True, perturb=None, rounds=5, episodes_per_round=10, beta0=0.5, beta_decay=0.5,
                relabel="none", relabel_every=1, max_labels=None, select="best", workers=1, **TRAIN_DEFAULTS,
                checkpoint_every=1, eval_episodes=10, select_episodes=0, progress=True)


def beta_at(cfg: dict, rnd: int) -> float:
    """beta of round ``rnd`` (round 0 is the expert alone)."""
    return 1.0 if rnd == 0 else float(cfg["beta0"]) * float(cfg["beta_decay"]) ** (rnd - 1)


def _score(row: dict) -> tuple:
    if "select_success" in row:
        return selection_score({"success": row["select_success"], "in_target": row.get("select_in_target", 0.0)})
    return selection_score(row)


def train(make_env: Callable, cfg: dict | None, run_dir: str | Path, logger, expert=None) -> DAggerAgent:
    """DAgger; see the module docstring. Returns the trained :class:`DAggerAgent`."""
    cfg = check_cfg(cfg, DEFAULTS, "dagger")
    if cfg["select"] not in ("best", "last"):
        raise ValueError(f"select must be 'best' or 'last', got {cfg['select']!r}")
    if cfg["relabel"] not in (*RELABEL, "recorded"):
        raise ValueError(f"relabel must be one of {(*RELABEL, 'recorded')}, got {cfg['relabel']!r}")
    if cfg["relabel"] == "recorded" and int(cfg["workers"]) > 1:
        raise ValueError("relabel='recorded' labels in this process: workers must be 1")
    if not (isinstance(cfg["relabel_every"], int) and cfg["relabel_every"] >= 1):
        raise ValueError(f"relabel_every must be an integer >= 1, got {cfg['relabel_every']!r}")
    for k in ("beta0", "beta_decay"):
        if not 0.0 <= float(cfg[k]) <= 1.0:
            raise ValueError(f"{k} must be in [0, 1], got {cfg[k]}")
    run_dir, env, (obs_dim, act_dim), features = learner_setup(make_env, cfg, run_dir, expert)
    perturb = check_options(cfg["perturb"], family_of(env))
    expert = build_expert(env, cfg, expert)
    relabel = cfg["relabel"]
    if relabel == "auto":
        relabel = "replan" if can_replan(expert) else "none"
    on_recorded = relabel == "recorded"     # the rounds replay the demonstrations' carries
    # the collector's mode: RecordedCarry (below) labels as it runs, like an expert that never replans
    job_relabel = "none" if on_recorded else relabel
    check_can_replan(job_relabel, expert)  # before anything is collected
    val_tasks = validation_tasks(env, cfg["eval_episodes"])
    select_tasks = selection_tasks(env, cfg["select_episodes"])
    budget = cfg["max_labels"]

    # round 0: demonstrations
    demo_cfg = dict(cfg, episodes=cfg["demo_episodes"], max_labels=None)
    demos, demo_stats = load_demos(make_env, env, demo_cfg, run_dir, expert)
    if on_recorded:      # the rounds' labeller: sfrrt's tracking law along the recorded carries
        # the gain of the sfrrt expert (the apps build it with expert_options, which they keep
        # from cfg)
        gain = float(getattr(expert, "track_gain", TRACK_GAIN))
        recorded = [e for e in demos if e.task is not None]
        expert = RecordedCarry(env, recorded, gain)
    demos = with_replays(demos, perturb, cfg["seed"])      # round 0: the demonstrations and their replays
    rounds_eps: list[list] = [demos]

    ckpt = run_dir / "checkpoint.pt"
    state = torch_load(ckpt) if ckpt.is_file() else None
    if state is not None and state.get("agent") != "dagger":
        raise ValueError(f"{ckpt} belongs to another run (agent {state.get('agent')!r}); use a new run_dir")
    seed_everything(cfg["seed"])
    policy = MLPPolicy(obs_dim, act_dim, cfg["hidden"], cfg["ignore_obs"], features=features,
                       members=cfg["members"])
    history: list[dict] = []
    best = {"round": -1, "score": (-1.0, -1.0), "state": None}
    counters = {"labels_queried": demo_stats["labels_queried"], "expert_plans": 0,
                "expert_seconds": demo_stats["expert_seconds"], "learner_steps": 0}
    counters["expert_plans"] = int(sum(e.expert_plans for e in demos))
    start_round, resumed_from = 0, None
    if state is not None:
        policy.load_state_dict(state["model"])
        policy.features = state.get("features", policy.features)   # with Transport's action_scale
        history, best, counters = state["history"], state["best"], state["counters"]
        start_round = state["round"] + 1
        resumed_from = state["round"]

    def data_upto(rnd: int):
        eps = [e for r in rounds_eps[:rnd + 1] for e in r]
        obs, labels, groups = transitions(eps, budget)
        return obs, labels, groups, start_rows(eps, groups), split_ids(eps)[groups]

    def round_jobs(rnd: int) -> list[dict]:
        first = int(cfg["demo_episodes"]) + (rnd - 1) * int(cfg["episodes_per_round"])
        out = []
        for k in range(int(cfg["episodes_per_round"])):
            if on_recorded:      # the recorded carries' tasks, in turn
                i = (first - int(cfg["demo_episodes"]) + k) % len(recorded)
                t, task = recorded[i].task_index, recorded[i].task
                key = f"r{rnd:03d}-{k:05d}-carry{i:05d}"
            else:
                t, task = learning_task(env, first + k, int(cfg["eval_episodes"] or 0))
                key = f"r{rnd:03d}-task{t:05d}"
            out.append(make_job(t, task, seed=int(cfg["seed"]) * 1_000_003 + first + k, beta=beta_at(cfg, rnd),
                                relabel=job_relabel, replan_every=int(cfg["relabel_every"]),
                                mix_seed=int(cfg["seed"]) * 7919 + 1000 * rnd + k, key=key))
        return out

    # the rounds before the checkpoint: their episodes are on disk (reloaded, not rerun)
    for rnd in range(1, start_round):
        rounds_eps.append(collect(make_env, expert, round_jobs(rnd), out_dir=run_dir / "rounds" / f"r{rnd:03d}",
                                  env=env, progress=False))

    rnd = start_round
    budget_reached = False
    if history:
        budget_reached = bool(history[-1].get("budget_reached", False))
    while rnd <= int(cfg["rounds"]) and not budget_reached:
        beta = beta_at(cfg, rnd)
        new_eps: list = []
        if rnd > 0:
            params = policy.numpy_params()
            new_eps = collect(make_env, expert, round_jobs(rnd), out_dir=run_dir / "rounds" / f"r{rnd:03d}",
                              workers=cfg["workers"], policy_params=params, env=env, progress=cfg["progress"],
                              desc=f"dagger round {rnd} (beta={beta:.3f})")
            rounds_eps.append(new_eps)
            counters["labels_queried"] += int(sum(e.expert_labels for e in new_eps))
            counters["expert_plans"] += int(sum(e.expert_plans for e in new_eps))
            counters["expert_seconds"] += float(sum(e.expert_seconds for e in new_eps))
            counters["learner_steps"] += int(sum(e.learner_steps for e in new_eps))
        obs, labels, groups, start, sides = data_upto(rnd)
        if budget is not None and len(labels) >= int(budget):
            budget_reached = True
        # fit: round 0 from scratch (sets the normalisation), later rounds warm-started
        # the validation episodes stay the same across rounds (a new draw would validate the
        # warm-started policy on episodes it trained on, and stop it after an epoch or two)
        fit = Fit(policy, obs, labels, groups, cfg, seed=int(cfg["seed"]) + 1000 * rnd, renormalise=(rnd == 0),
                  start=start, split_seed=int(cfg["seed"]), split_groups=sides)
        fit.run()
        policy = fit.finalise()
        agent = DAggerAgent(env, policy=policy)
        row = {"round": rnd, "beta": beta, "dataset_size": int(len(labels)), "labels": int(len(labels)),
               **counters, "epochs": fit.epoch, "train_loss": fit.history[-1]["train_loss"],
               "val_loss": fit.best_val, "budget_reached": budget_reached}
        if rnd > 0:
            row["rollout_success"] = float(np.mean([e.success for e in new_eps])) if new_eps else float("nan")
            if new_eps and "in_target" in new_eps[0].infos:
                row["rollout_in_target"] = float(np.mean([e.final["in_target"] for e in new_eps]))
        if val_tasks:
            m = rollout_metrics(env, agent, val_tasks)
            row.update(m)
        if select_tasks:
            m = rollout_metrics(env, agent, select_tasks)
            row.update({f"select_{k}": v for k, v in m.items()})
        history.append(row)
        logger.log({k: float(v) for k, v in row.items() if isinstance(v, (int, float, bool, np.floating))},
                   step=row["round"])
        if best["state"] is None or _score(row) >= tuple(best["score"]):
            best = {"round": rnd, "score": list(_score(row)), "state": copy.deepcopy(policy.state_dict())}
        last = rnd == int(cfg["rounds"]) or budget_reached
        if (rnd + 1) % max(int(cfg["checkpoint_every"]), 1) == 0 or last:
            torch_save_atomic({"agent": "dagger", "round": rnd, "model": policy.state_dict(),
                               "features": policy.features, "history": history,
                               "best": best, "counters": counters, "cfg": cfg}, ckpt)
        rnd += 1

    final_round = history[-1]["round"] if history else 0
    if cfg["select"] == "best" and best["state"] is not None:
        policy.load_state_dict(best["state"])
        chosen = best["round"]
    else:
        chosen = final_round
    policy.eval()
    meta = {"cfg": cfg, "history": history, "round": final_round, "selected_round": chosen,
            "resumed_from_round": resumed_from, "labels": history[-1]["labels"] if history else 0,
            **{k: v for k, v in counters.items()}, "demo_kept": demo_stats["demo_kept"],
            "demo_filtered": demo_stats["demo_filtered"], "relabel": relabel}
    agent = DAggerAgent(env, policy=policy, meta=meta)
    path = run_dir / "agent.pt"
    agent.save(path)
    logger.log_artifact(path, name="dagger", kind="checkpoint")
    return agent


__all__ = ["DEFAULTS", "beta_at", "train"]
