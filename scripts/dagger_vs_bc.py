"""DAgger vs behaviour cloning at equal expert labels, against the expert (issue 6, "must show" 1).

    python scripts/dagger_vs_bc.py                                   # sqp expert, 100 eval tasks
    python scripts/dagger_vs_bc.py --expert scripted --eval-tasks 30 # cheap expert
    python scripts/dagger_vs_bc.py --demo-episodes 2 --rounds 1 --episodes-per-round 1 \
        --eval-tasks 3 --max-epochs 20 --out out/dagger_vs_bc_tiny      # a smoke run

On the simplified Pour-v0: trains DAgger (round 0 = ``--demo-episodes`` expert episodes, then
``--rounds`` rounds of ``--episodes-per-round`` beta-mixed rollouts in which the expert labels
every visited state: with ``--relabel none`` (the default) the expert policy as it runs, i.e.
``sqp`` tracking the plan it made at the episode's start, whose action from a state off the plan
heads back to the plan's pose at that time; ``--relabel replan`` plans again from each state,
~2 s a label, or with ``--relabel-every k`` from every k-th state), counts the expert labels L
in DAgger's final dataset, trains BC on expert demonstrations holding exactly L labels, and
evaluates BC, DAgger and the expert (and, with ``--relabel replan --relabel-every k``, sqp
replanning every k steps on its own: DAgger's labeller) on the first ``--eval-tasks`` tasks of
the eval split. Prints a Markdown table (success with Wilson 95 % CI, in_target and spilled
with 95 % CI of the mean, per-decision latency and its ratio to the fastest expert's) and ends
with one JSON line; ``*_success_vs_expert`` divides by the best expert's success.

Both policies see the observation with T's predicted path relative to S, where the first outflow
would land, S's start pose and velocity and the side sqp pours towards (``--features``,
:mod:`taigym.agents.features`). The expert is ``sqp`` with tracking gain
``--gain`` (default 0.1: from a state off its plan a step returns a tenth of the way; its
labels at the learner's states lead to success more often than gain 1's, see
``scripts/expert_takeover.py``).

Both policies ignore S's velocity and the older heightfield frames (``--see-all-obs`` shows them):
from those a cloned policy copies its own last action, fits the demonstrations (validation MSE
0.0006) and drifts in closed loop. An sqp replan is warm-started and continues S's motion, so its
DAgger labels agree with the plan it replaces.

Model selection: ``--select-episodes N`` ranks DAgger's rounds on the first N tasks of Pour-v0's
``val`` split (400 tasks, off the train and eval splits) and gives BC the same budget: as many
candidates as DAgger has rounds (its lowest validation-loss weights and those at its last
checkpoints, every 10 epochs), ranked on the same N tasks. Without it, DAgger's round is picked on
the ``--val-episodes`` tasks and BC keeps its lowest-loss weights.

``--input-noise`` (Gaussian noise on the normalised inputs while training) and ``--members`` (an
ensemble of MLPs, mean action) apply to both policies alike. BC keeps DAgger's validation tasks out
of its demonstrations, and failures are counted by kind (spilled, left in S, other).

Both trainings live in ``--out`` (``dagger/``, ``bc/``) and checkpoint there: rerunning the same
command after an interruption resumes them; the evaluations are rerun. DAgger's round 0 and BC
record the same expert episodes (task i, seed i) in one directory, ``--out``/``demos``.
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("TI_SKIP_VERSION_CHECK", "ON")
os.environ.setdefault("WANDB_MODE", "disabled")

import gymnasium as gym  # noqa: E402
import numpy as np  # noqa: E402

import taigym  # noqa: E402
from taigym.agents import evaluate, make, summarise  # noqa: E402
from taigym.training import bc, dagger  # noqa: E402


# --test-tasks: extra_train_task(TEST_OFFSET + k); the learners draw the first few hundred (950
# demonstrations + 4 x 50 rollouts: ~470), so these are new to them and to the selection
TEST_OFFSET = 20_000


def make_env(fidelity: str = "simplified", obs_mode: str = "features"):
    return gym.make("taigym/Pour-v0", fidelity=fidelity, obs_mode=obs_mode)


class PrintLogger:
    """Prints DAgger's per-round metrics (the protocol of taigym.training.loggers)."""

    def __init__(self, prefix: str, keys=None):
        self.prefix, self.keys = prefix, keys

    def log(self, metrics, step):
        keys = self.keys or metrics.keys()
        body = "  ".join(f"{k}={metrics[k]:.4g}" for k in keys if k in metrics)
        if body:
            print(f"[{self.prefix} {step}] {body}", flush=True)

    def log_video(self, frames, step, name="video"):
        pass

    def log_artifact(self, path, name, kind="checkpoint"):
        pass

    def finish(self):
        pass


class _Quiet(PrintLogger):
    """BC logs every epoch: keep the output short."""

    def __init__(self):
        super().__init__("bc")

    def log(self, metrics, step):
        pass


def mean_ci(values) -> tuple[float, float, float]:
    """Mean and normal-approximation 95 % interval of fractions in [0, 1]."""
    v = np.asarray(values, float)
    m = float(v.mean())
    h = 1.96 * float(v.std(ddof=1)) / math.sqrt(len(v)) if len(v) > 1 else float("nan")
    return m, max(m - h, 0.0), min(m + h, 1.0)        # fractions: the interval stays in [0, 1]


def evaluate_agent(env, agent, tasks, seed: int) -> dict:
    t0 = time.perf_counter()
    rows = evaluate(env, agent, tasks, seed=seed)
    s = summarise(rows)
    steps = sum(r["steps"] for r in rows)
    act = sum(r["act_seconds"] * r["steps"] for r in rows)
    out = {"episodes": len(rows), "success": s["success_rate"], "success_ci95": s["success_ci95"],
           "wall_seconds": time.perf_counter() - t0,
           "act_ms": 1e3 * act / max(steps, 1),                        # per decision, over all steps
           "act_ms_max_episode": 1e3 * max(r["act_seconds"] for r in rows)}
    for k in ("in_target", "spilled"):
        m, lo, hi = mean_ci([r[k] for r in rows])
        out[k], out[f"{k}_ci95"] = m, [lo, hi]
    out["failures"] = failure_kinds(rows)
    return out


def failure_kinds(rows) -> dict:
    """Failed episodes by kind: spilled (> 5 %, the success limit), poured late or not at all
    (>= 10 % still in S), or short of T otherwise (in flight at the end, or T's 90 % missed)."""
    fails = [r for r in rows if not r["success"]]
    spill = sum(r["spilled"] > 0.05 for r in fails)
    left = sum(r["spilled"] <= 0.05 and r["in_source"] >= 0.1 for r in fails)
    return {"failed": len(fails), "spilled": spill, "left_in_source": left, "other": len(fails) - spill - left}


def table(results: dict, expert: str) -> str:
    ref = results[expert]["act_ms"]
    lines = ["| agent | labels | episodes | success | 95 % CI | in target | 95 % CI | spilled | 95 % CI | "
             "ms / decision | vs expert |", "|" + "---|" * 11]
    for name, r in results.items():
        lab = r.get("labels", "")
        lines.append(
            f"| {name} | {lab} | {r['episodes']} | {r['success']:.2f} | [{r['success_ci95'][0]:.2f}, "
            f"{r['success_ci95'][1]:.2f}] | {r['in_target']:.3f} | [{r['in_target_ci95'][0]:.3f}, "
            f"{r['in_target_ci95'][1]:.3f}] | {r['spilled']:.3f} | [{r['spilled_ci95'][0]:.3f}, "
            f"{r['spilled_ci95'][1]:.3f}] | {r['act_ms']:.3g} | {r['act_ms'] / ref:.2g} |")
    return "\n".join(lines)


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--expert", default="sqp", choices=("sqp", "scripted"))
    p.add_argument("--demo-episodes", type=int, default=700, help="DAgger round 0: expert episodes")
    p.add_argument("--rounds", type=int, default=4, help="DAgger rounds after round 0")
    p.add_argument("--episodes-per-round", type=int, default=50)
    p.add_argument("--beta0", type=float, default=0.5)
    p.add_argument("--beta-decay", type=float, default=0.5)
    p.add_argument("--relabel", default="none", choices=("none", "replan", "auto", "outflow"),
                   help="DAgger labels: none = the expert's act (sqp: its plan, tracked from the visited "
                        "state), replan = replan from every visited state, outflow = replan once, when liquid first "
                        "leaves S, and track that plan")
    p.add_argument("--relabel-every", type=int, default=1,
                   help="with --relabel replan: replan from every k-th visited state (labels in between track "
                        "the last replan); the table then also shows sqp replanning every k steps on its own")
    p.add_argument("--gain", type=float, default=0.1,
                   help="sqp's tracking gain (its labels and its own pours): each step is the plan's step plus "
                        "gain x the way back to the plan (1: straight to the plan's next pose)")
    p.add_argument("--features", default="auto", choices=("auto", "target_path", "none"),
                   help="policy inputs: the observation with T's predicted path relative to S (auto on Pour) "
                        "or alone")
    p.add_argument("--hidden", type=int, nargs="+", default=[256, 256])
    p.add_argument("--members", type=int, default=1,
                   help="ensemble size of both policies (independently initialised MLPs, mean action)")
    p.add_argument("--input-noise", type=float, default=0.0,
                   help="both policies: Gaussian noise on the normalised inputs while training (x each input's std)")
    p.add_argument("--ema-epochs", type=float, default=0.0,
                   help="both policies: fit, validate and return a moving average of the weights with this time "
                        "constant (epochs; 0: the last weights)")
    p.add_argument("--see-all-obs", action="store_true",
                   help="let the policies see S's velocity and the older heightfield/lip frames (by default "
                        "they do not: a cloned policy copies its last action from them)")
    p.add_argument("--max-epochs", type=int, default=200)
    p.add_argument("--weight-decay", type=float, default=1e-3, help="Adam's L2 penalty for both policies")
    p.add_argument("--val-episodes", type=int, default=10,
                   help="validation rollouts per DAgger round (last train-split tasks; 0: none)")
    p.add_argument("--select-episodes", type=int, default=0,
                   help="model selection on this many val-split tasks: DAgger's round and, among as many "
                        "candidates (its lowest-loss weights and its last checkpoints'), BC's weights "
                        "(0: DAgger's round on the --val-episodes tasks, BC's lowest-loss weights)")
    p.add_argument("--eval-tasks", type=int, default=100, help="first N tasks of the eval split")
    p.add_argument("--test-tasks", type=int, default=0,
                   help="also evaluate BC and DAgger on N more tasks of the train distribution that nothing "
                        "learned from or was selected on (extra_train_task from TEST_OFFSET): a tighter "
                        "comparison than the eval split's 100 tasks allow")
    p.add_argument("--obs-mode", default="features", choices=("features", "lip"))
    p.add_argument("--workers", type=int, default=1, help="processes for rollouts (Ray if installed)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default=None, help="run directory (default out/dagger_vs_bc/<expert>)")
    p.add_argument("--no-expert-eval", action="store_true", help="skip evaluating the expert itself")
    args = p.parse_args(argv)

    out = Path(args.out or f"out/dagger_vs_bc/{args.expert}")
    out.mkdir(parents=True, exist_ok=True)
    # DAgger's round 0 and BC record the same expert episodes (task i, seed i): one directory
    (out / "demos").mkdir(exist_ok=True)
    for run in ("dagger", "bc"):
        (out / run).mkdir(exist_ok=True)
        if not (out / run / "demos").exists():
            (out / run / "demos").symlink_to(Path("..") / "demos", target_is_directory=True)
    mk = functools.partial(make_env, "simplified", args.obs_mode)
    env = mk()
    expert = make(args.expert, env, **({"track_gain": args.gain} if args.expert == "sqp" else {}))
    dim = env.observation_space.shape[0]
    newest = (dim - 40) // 4                         # entries 40..: 4 frames of heightfield / lip heights
    ignore = [] if args.see_all_obs else [3, 4, 5, *range(40 + newest, dim)]
    common = dict(hidden=args.hidden, members=args.members, input_noise=args.input_noise, ignore_obs=ignore,
                  ema_epochs=args.ema_epochs,
                  features=args.features,
                  max_epochs=args.max_epochs,
                  seed=args.seed, weight_decay=args.weight_decay, workers=args.workers,
                  progress=sys.stderr.isatty())
    t0 = time.perf_counter()
    print(f"DAgger with the {args.expert} expert: {args.demo_episodes} demos + {args.rounds} x "
          f"{args.episodes_per_round} rollouts", flush=True)
    dag = dagger.train(mk, dict(common, demo_episodes=args.demo_episodes, rounds=args.rounds,
                                episodes_per_round=args.episodes_per_round, beta0=args.beta0,
                                beta_decay=args.beta_decay, relabel=args.relabel, relabel_every=args.relabel_every,
                                eval_episodes=args.val_episodes, select_episodes=args.select_episodes),
                       out / "dagger", PrintLogger("dagger round", ["beta", "dataset_size", "labels_queried",
                                                                     "expert_plans", "epochs", "train_loss",
                                                                     "val_loss", "rollout_success", "success",
                                                                     "in_target", "spilled", "select_success",
                                                                     "select_in_target"]), expert=expert)
    t_dagger = time.perf_counter() - t0
    labels = int(dag.meta["labels"])
    print(f"DAgger: {labels} expert labels in its dataset ({dag.meta['labels_queried']} queried, "
          f"{dag.meta['expert_plans']} expert plans), selected round {dag.meta['selected_round']}; "
          f"BC on {labels} expert labels", flush=True)
    t0 = time.perf_counter()
    # BC keeps DAgger's validation tasks out of its demonstrations too (and reports its success there)
    # the same selection budget: BC ranks as many candidates as DAgger has rounds, on the same tasks
    select = dict(select_episodes=args.select_episodes, select_candidates=args.rounds + 1 if args.select_episodes else 1)
    bca = bc.train(mk, dict(common, max_labels=labels, eval_episodes=args.val_episodes, **select), out / "bc",
                   _Quiet(), expert=expert)
    t_bc = time.perf_counter() - t0
    print(f"BC: {bca.meta['labels']} labels from {bca.meta['demo_kept']} successful of "
          f"{bca.meta['demo_episodes']} expert episodes, {bca.meta['epochs']} epochs"
          + (f", validation success {bca.meta['val_success']:.2f}" if "val_success" in bca.meta else "")
          + (f"; selected candidate {bca.meta['selected_candidate']} of {bca.meta['candidates']} (success on "
             f"{args.select_episodes} val-split tasks {bca.meta['candidate_success']})"
             if "selected_candidate" in bca.meta else ""), flush=True)

    tasks = taigym.envs.tasks("pour", split="eval")[:args.eval_tasks]
    results = {}
    experts = [] if args.no_expert_eval else [(args.expert, expert)]
    if experts and args.relabel == "replan" and args.relabel_every > 1 and args.expert == "sqp":
        # DAgger's labeller: sqp replanning from every k-th state it visits, on its own pours
        experts.append((f"sqp_replan{args.relabel_every}", make("sqp", env, replan_every=args.relabel_every)))
    for name, agent in [("bc", bca), ("dagger", dag)] + experts:
        print(f"evaluating {name} on {len(tasks)} eval tasks ...", flush=True)
        results[name] = evaluate_agent(env, agent, tasks, seed=args.seed)
    test = {}
    if args.test_tasks:
        from taigym.envs.pour_tasks import extra_train_task

        held_out = [extra_train_task(TEST_OFFSET + k) for k in range(args.test_tasks)]
        for name, agent in [("bc", bca), ("dagger", dag)]:
            print(f"evaluating {name} on {len(held_out)} held-out train-distribution tasks ...", flush=True)
            test[name] = evaluate_agent(env, agent, held_out, seed=args.seed)
    results["bc"]["labels"] = int(bca.meta["labels"])
    results["dagger"]["labels"] = labels
    # the reference: the best success and the lowest latency of the experts (both conservative)
    names = [n for n, _ in experts]
    best = max(names, key=lambda n: results[n]["success"]) if names else None
    fastest = min(names, key=lambda n: results[n]["act_ms"]) if names else "dagger"
    print()
    print(table({n: results[n] for n in names + ["bc", "dagger"]}, fastest))
    figures = {"expert": args.expert, "gain": args.gain, "members": args.members,
               "input_noise": args.input_noise, "ema_epochs": args.ema_epochs, "relabel": args.relabel, "relabel_every": args.relabel_every,
               "features": args.features, "eval_tasks": len(tasks), "labels": labels,
               "select_episodes": args.select_episodes,
               "dagger_select_success": [h.get("select_success") for h in dag.meta["history"]],
               "bc_select_success": bca.meta.get("candidate_success"),
               "bc_selected_candidate": bca.meta.get("selected_candidate"),
               "dagger_labels_queried": int(dag.meta["labels_queried"]),
               "dagger_expert_plans": int(dag.meta["expert_plans"]),
               "dagger_rounds": int(dag.meta["round"]), "dagger_selected_round": int(dag.meta["selected_round"]),
               "train_seconds": {"dagger": round(t_dagger, 2), "bc": round(t_bc, 2)},
               "reference": {"success": best, "latency": fastest}}
    for name, r in results.items():
        key = "expert" if name == args.expert else name
        figures[key] = {k: (round(v, 5) if isinstance(v, float) else
                            [round(x, 5) for x in v] if isinstance(v, list) else v) for k, v in r.items()}
    if names:
        for name in ("bc", "dagger"):
            e = results[best]["success"]
            figures[f"{name}_success_vs_expert"] = results[name]["success"] / e if e > 0 else None
            figures[f"{name}_latency_vs_expert"] = results[name]["act_ms"] / results[fastest]["act_ms"]
    figures["dagger_beats_bc"] = results["dagger"]["success"] > results["bc"]["success"]
    if test:
        print(f"\n{args.test_tasks} held-out train-distribution tasks (extra_train_task {TEST_OFFSET}-):")
        print(table(test, "dagger"))
        figures["test"] = {n: {k: r[k] for k in ("episodes", "success", "success_ci95", "in_target", "spilled",
                                                   "act_ms", "failures")} for n, r in test.items()}
    print(json.dumps(figures))
    return figures


if __name__ == "__main__":
    main()
