"""PPO on the simplified Pour-v0 through the batched SB3 adapter, with learning curves and evals.

Trains Stable-Baselines3's PPO on ``gym.make_vec("taigym/Pour-v0", fidelity="simplified",
reward_mode=...)`` wrapped by ``taigym.training.vec_env.BatchedVecEnv`` (observations
normalised by ``VecNormalize``), and every ``--eval-every`` env steps runs the deterministic
policy once on each of the 100 eval tasks (``taigym.envs.tasks("pour", "eval")``). Writes to
``--out``:

* ``curve.csv``: env steps, wall and CPU seconds, env steps/s, training episodes' mean return, success,
  in T and spilled (the episodes finished since the last row), eval success, in T, spilled;
* ``checkpoint/`` (model, normaliser, step count; written atomically): a rerun with the same
  ``--out`` resumes from it;
* ``policy.zip`` + ``vecnormalize.pkl`` at the end, and ``final.json`` (hyperparameters, evals;
  with ``--particle-eval``, the policy on the particle env's eval tasks too).

Ends with one JSON line. Run one at a time on a shared machine, pinned to a core::

    taskset -c 1 python scripts/ppo_pour.py --out runs/ppo/seed0 --seed 0 --timesteps 3000000
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import time
from pathlib import Path

os.environ.setdefault("TI_SKIP_VERSION_CHECK", "ON")

import numpy as np  # noqa: E402
import torch  # noqa: E402
from stable_baselines3 import PPO  # noqa: E402
from stable_baselines3.common.callbacks import BaseCallback  # noqa: E402
from stable_baselines3.common.vec_env import VecMonitor, VecNormalize  # noqa: E402

import taigym  # noqa: E402,F401
from taigym.envs import tasks  # noqa: E402
from taigym.envs.pour_tasks import over_target, sample_task  # noqa: E402
from taigym.training.vec_env import make_batched_vec_env  # noqa: E402

ENV_ID = "taigym/Pour-v0"
CURVE_FIELDS = ("steps", "seconds", "cpu_seconds", "steps_per_s", "episodes", "return", "success", "in_target",
                "spilled", "eval_success", "eval_in_target", "eval_spilled")


def parse() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--timesteps", type=int, default=3_000_000)
    p.add_argument("--n-envs", type=int, default=64)
    p.add_argument("--n-steps", type=int, default=64, help="per env and rollout")
    p.add_argument("--batch-size", type=int, default=1024)
    p.add_argument("--n-epochs", type=int, default=5)
    p.add_argument("--lr", type=float, default=3e-4)
    p.add_argument("--gamma", type=float, default=0.99)
    p.add_argument("--gae-lambda", type=float, default=0.95)
    p.add_argument("--clip-range", type=float, default=0.2)
    p.add_argument("--ent-coef", type=float, default=0.0)
    p.add_argument("--target-kl", type=float, default=None)
    p.add_argument("--log-std-init", type=float, default=-0.5)
    p.add_argument("--net", type=int, nargs="+", default=[128, 128])
    p.add_argument("--activation", default="tanh", choices=("tanh", "relu"))
    p.add_argument("--reward-mode", default="dense", choices=("rp", "dense", "sparse"))
    p.add_argument("--norm-reward", action=argparse.BooleanOptionalAction, default=True)
    p.add_argument("--task-split", default=None, choices=(None, "train"))
    p.add_argument("--eval-every", type=int, default=250_000, help="env steps (0: at the end only)")
    p.add_argument("--checkpoint-every", type=int, default=250_000)
    p.add_argument("--particle-eval", action="store_true",
                   help="at the end, also evaluate on the particle env's eval tasks")
    p.add_argument("--particle-batch", type=int, default=25)
    p.add_argument("--env-kw", type=json.loads, default={}, help="more Pour-v0 kwargs (JSON)")
    p.add_argument("--over-target", type=float, default=0.0,
                   help="fraction of training episodes that start with S's lip over T (over_target)")
    p.add_argument("--eval-only", action="store_true",
                   help="evaluate --out's policy.zip (with --particle-eval: on the particle env too)")
    return p.parse_args()


def env_kwargs(args, **over) -> dict:
    kw = dict(fidelity="simplified", reward_mode=args.reward_mode, shaping_gamma=args.gamma,
              **args.env_kw)
    if args.task_split:
        kw["task_split"] = args.task_split
    kw.update(over)
    return kw


def curriculum(args):
    """The start-state curriculum: a reset hook giving ``--over-target`` of the resets a train
    task (or a sampled one) started over T (``pour_tasks.over_target``); the rest are the env's."""
    if args.over_target <= 0.0:
        return None
    rng = np.random.default_rng([args.seed, 7])
    split = tasks("pour", "train") if args.task_split else None

    def options(mask: np.ndarray) -> dict:
        picks = []
        for reset in mask:
            if reset and rng.random() < args.over_target:
                task = split[int(rng.integers(len(split)))] if split else sample_task(rng)
                picks.append(over_target(task))
            else:
                picks.append(None)
        return {"task": picks}

    return options


def evaluate(model, norm: VecNormalize, task_list, batch: int, **kw) -> dict:
    """The deterministic policy once on each task: success, in T and spilled, mean and per task."""
    rows = []
    for lo in range(0, len(task_list), batch):
        chunk = list(task_list[lo:lo + batch])
        venv = make_batched_vec_env(ENV_ID, len(chunk), seed=lo, step_infos=False, **kw)
        venv.set_options({"task": chunk})
        obs = venv.reset()
        first = [None] * len(chunk)
        while any(f is None for f in first):
            action, _ = model.predict(norm.normalize_obs(obs), deterministic=True)
            obs, _, done, infos = venv.step(action)
            for i in np.flatnonzero(done):
                if first[i] is None:
                    first[i] = infos[i]
        venv.close()
        rows += [{k: float(f[k]) for k in ("success", "in_target", "spilled", "in_source")} for f in first]
    mean = {k: float(np.mean([r[k] for r in rows])) for k in rows[0]}
    return {**mean, "episodes": len(rows), "per_task": rows}


def save_atomic(model, norm: VecNormalize, directory: Path, steps: int) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    tmp = directory / "tmp"
    tmp.mkdir(exist_ok=True)
    model.save(tmp / "model.zip")
    norm.save(str(tmp / "vecnormalize.pkl"))
    (tmp / "state.json").write_text(json.dumps({"steps": steps}))
    for name in ("model.zip", "vecnormalize.pkl", "state.json"):   # state.json last: it marks a whole set
        os.replace(tmp / name, directory / name)


class Curve(BaseCallback):
    """Rows of curve.csv: training episodes since the last row, evals, checkpoints."""

    def __init__(self, args, norm: VecNormalize, eval_tasks, t0_steps: int):
        super().__init__()
        self.args, self.norm, self.eval_tasks = args, norm, eval_tasks
        self.path = args.out / "curve.csv"
        self.episodes: list[dict] = []
        self.t_start, self.cpu_start = time.perf_counter(), time.process_time()
        self.steps0 = t0_steps
        self.next_eval = (t0_steps // args.eval_every + 1) * args.eval_every if args.eval_every else None
        self.next_ckpt = (t0_steps // args.checkpoint_every + 1) * args.checkpoint_every
        self.next_row = t0_steps

    def _on_step(self) -> bool:
        for info in self.locals["infos"]:
            if "episode" in info:
                self.episodes.append({"return": info["episode"]["r"], "success": float(info["success"]),
                                      "in_target": info["in_target"], "spilled": info["spilled"]})
        n = self.num_timesteps
        ev = None
        if self.next_eval is not None and n >= self.next_eval:
            ev = evaluate(self.model, self.norm, self.eval_tasks, 100, **env_kwargs(self.args))
            self.next_eval += self.args.eval_every
        if n >= self.next_row or ev is not None:
            self._row(n, ev)
            self.next_row = n + 50_000
        if n >= self.next_ckpt:
            save_atomic(self.model, self.norm, self.args.out / "checkpoint", n)
            self.next_ckpt += self.args.checkpoint_every
        return True

    def _row(self, n: int, ev: dict | None) -> None:
        sec = time.perf_counter() - self.t_start
        eps = self.episodes
        mean = (lambda k: float(np.mean([e[k] for e in eps]))) if eps else (lambda k: "")
        row = {"steps": n, "seconds": round(sec, 1), "cpu_seconds": round(time.process_time() - self.cpu_start, 1),
               "steps_per_s": round((n - self.steps0) / max(sec, 1e-9)),
               "episodes": len(eps), "return": mean("return"), "success": mean("success"),
               "in_target": mean("in_target"), "spilled": mean("spilled"),
               "eval_success": ev["success"] if ev else "", "eval_in_target": ev["in_target"] if ev else "",
               "eval_spilled": ev["spilled"] if ev else ""}
        new = not self.path.exists()
        with self.path.open("a", newline="") as f:
            w = csv.DictWriter(f, CURVE_FIELDS)
            if new:
                w.writeheader()
            w.writerow(row)
        print(json.dumps(row), flush=True)
        self.episodes = []


def final_evals(model, norm, args, eval_tasks) -> dict:
    ev = evaluate(model, norm, eval_tasks, 100, **env_kwargs(args))
    result = {"eval_simplified": {k: v for k, v in ev.items() if k != "per_task"}}
    if args.particle_eval:
        t1 = time.perf_counter()
        evp = evaluate(model, norm, eval_tasks, args.particle_batch, **env_kwargs(args, fidelity="particles"))
        result["eval_particles"] = {k: v for k, v in evp.items() if k != "per_task"}
        result["particle_eval_seconds"] = round(time.perf_counter() - t1, 1)
        result["particle_per_task"] = evp["per_task"]
    return result


def main() -> None:
    args = parse()
    torch.set_num_threads(1)
    args.out.mkdir(parents=True, exist_ok=True)
    eval_tasks = tasks("pour", "eval")
    if args.eval_only:
        venv = make_batched_vec_env(ENV_ID, 1, **env_kwargs(args))
        norm = VecNormalize.load(str(args.out / "vecnormalize.pkl"), venv)
        norm.training = False
        result = final_evals(PPO.load(args.out / "policy.zip", device="cpu"), norm, args, eval_tasks)
        (args.out / "eval.json").write_text(json.dumps(result, indent=1))
        print(json.dumps({k: v for k, v in result.items() if k != "particle_per_task"}))
        return
    venv = VecMonitor(make_batched_vec_env(ENV_ID, args.n_envs, seed=args.seed, step_infos=False,
                                           reset_options=curriculum(args), **env_kwargs(args)))
    ckpt = args.out / "checkpoint"
    steps0 = 0
    if (ckpt / "state.json").exists():
        steps0 = json.loads((ckpt / "state.json").read_text())["steps"]
        norm = VecNormalize.load(str(ckpt / "vecnormalize.pkl"), venv)
        model = PPO.load(ckpt / "model.zip", env=norm, device="cpu")
        print(f"resuming from {steps0} steps", flush=True)
    else:
        norm = VecNormalize(venv, norm_obs=True, norm_reward=args.norm_reward, gamma=args.gamma)
        act = {"tanh": torch.nn.Tanh, "relu": torch.nn.ReLU}[args.activation]
        model = PPO("MlpPolicy", norm, learning_rate=args.lr, n_steps=args.n_steps,
                    batch_size=args.batch_size, n_epochs=args.n_epochs, gamma=args.gamma,
                    gae_lambda=args.gae_lambda, clip_range=args.clip_range, ent_coef=args.ent_coef,
                    target_kl=args.target_kl, seed=args.seed, device="cpu", verbose=0,
                    policy_kwargs=dict(net_arch=list(args.net), activation_fn=act,
                                       log_std_init=args.log_std_init))
    (args.out / "args.json").write_text(json.dumps({k: str(v) if isinstance(v, Path) else v
                                                    for k, v in vars(args).items()}, indent=1))
    t0, cpu0 = time.perf_counter(), time.process_time()
    model.learn(args.timesteps - steps0, callback=Curve(args, norm, eval_tasks, steps0),
                reset_num_timesteps=steps0 == 0)
    train_s = time.perf_counter() - t0
    save_atomic(model, norm, ckpt, model.num_timesteps)
    model.save(args.out / "policy.zip")
    norm.save(str(args.out / "vecnormalize.pkl"))
    result = {"steps": int(model.num_timesteps), "train_seconds": round(train_s, 1),
              "train_cpu_seconds": round(time.process_time() - cpu0, 1)}
    result.update(final_evals(model, norm, args, eval_tasks))
    (args.out / "final.json").write_text(json.dumps({"args": json.loads((args.out / "args.json").read_text()),
                                                     **result}, indent=1))
    print(json.dumps({k: v for k, v in result.items() if k != "particle_per_task"}))


if __name__ == "__main__":
    main()
