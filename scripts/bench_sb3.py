"""SB3 PPO's training throughput on the simplified Pour-v0: the batched adapter against
``make_vec_env``, in one run.

Both train Stable-Baselines3's PPO for ``--timesteps`` env steps with the same hyperparameters,
the same rollout size (n_steps x n_envs transitions per update) and the same wrappers
(``VecMonitor``, ``VecNormalize``), on

* ``make_vec_env``: SB3's ``DummyVecEnv`` over ``--copies`` single envs (``gym.make``), the way
  a new user would vectorise;
* the adapter: ``taigym.training.vec_env.BatchedVecEnv`` over ``gym.make_vec(...,
  num_envs=--num-envs, vectorization_mode="vector_entry_point")``.

The defaults are the train app's PPO recipe (``conf/recipe/ppo_pour_simplified.yaml``: rollouts
of 4096 transitions, 3 epochs of minibatches of 1024, 128 x 128 tanh, ``log_std_init`` -0.5,
one torch thread). With ``--task-split``, every task of the split is first reset to once, so
that both setups start with the task caches a long run has (a reset to a task seen before
reuses its geometry). Prints env steps per second of training (wall time and CPU time of this
process, which on a shared machine is the fairer clock) and their ratio, then one JSON line.
Pin it to one core::

    taskset -c 0 python scripts/bench_sb3.py --timesteps 200000 --task-split train
"""

from __future__ import annotations

import argparse
import json
import os
import time

os.environ.setdefault("TI_SKIP_VERSION_CHECK", "ON")

import gymnasium as gym  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402
from stable_baselines3 import PPO  # noqa: E402
from stable_baselines3.common.env_util import make_vec_env  # noqa: E402
from stable_baselines3.common.vec_env import VecMonitor, VecNormalize  # noqa: E402

import taigym  # noqa: E402,F401
from taigym.agents.activations import ACTIVATIONS  # noqa: E402
from taigym.agents.sb3 import policy_kwargs  # noqa: E402
from taigym.envs import tasks  # noqa: E402
from taigym.training.vec_env import make_batched_vec_env  # noqa: E402

ID = "taigym/Pour-v0"


def train(venv, n_envs: int, args) -> dict:
    """Train PPO for args.timesteps steps on ``venv``: steps per wall and CPU second."""
    venv = VecNormalize(VecMonitor(venv), gamma=args.gamma)
    model = PPO("MlpPolicy", venv, n_steps=args.rollout // n_envs, batch_size=args.batch_size,
                n_epochs=args.n_epochs, learning_rate=3e-4, gamma=args.gamma, seed=0, device="cpu",
                policy_kwargs=policy_kwargs(dict(net_arch=list(args.net), activation_fn=args.activation,
                                                 log_std_init=-0.5)))
    if args.warmup:                                    # random actions through the same env
        venv.reset()
        for _ in range(args.warmup // n_envs):
            venv.step(np.random.uniform(-1, 1, (n_envs, 3)).astype(np.float32))
    t0, c0 = time.perf_counter(), time.process_time()
    model.learn(args.timesteps)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    n = model.num_timesteps
    venv.close()
    return {"n_envs": n_envs, "steps": n, "steps_per_s": n / wall, "cpu_steps_per_s": n / cpu,
            "seconds": wall}


def prime(kw: dict, split: str) -> int:
    """Reset once to every task of ``split``: the task caches a long run on the split has."""
    split_tasks = tasks("pour", split)
    venv = gym.make_vec(ID, num_envs=1, vectorization_mode="vector_entry_point", **kw)
    for task in split_tasks:
        venv.reset(options={"task": [task]})
    venv.close()
    return len(split_tasks)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--timesteps", type=int, default=200_000)
    p.add_argument("--copies", type=int, default=8, help="make_vec_env's single envs")
    p.add_argument("--num-envs", type=int, default=128, help="the batched env's members")
    p.add_argument("--rollout", type=int, default=4096, help="transitions per PPO update (both)")
    p.add_argument("--batch-size", type=int, default=1024)
    p.add_argument("--n-epochs", type=int, default=3)
    p.add_argument("--gamma", type=float, default=0.99)
    p.add_argument("--net", type=int, nargs="+", default=[128, 128])
    p.add_argument("--activation", default="tanh", choices=sorted(ACTIVATIONS))
    p.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    p.add_argument("--reward-mode", default="dense")
    p.add_argument("--pivot", default="lip", choices=("frame", "lip"))
    p.add_argument("--task-split", default=None, choices=(None, "train"),
                   help="both draw tasks from this fixed split")
    p.add_argument("--warmup", type=int, default=0,
                   help="env steps of random actions before timing, per setup (a split's tasks seen once)")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    kw = dict(fidelity="simplified", reward_mode=args.reward_mode, shaping_gamma=args.gamma, pivot=args.pivot,
              **({"task_split": args.task_split} if args.task_split else {}))
    primed = prime(kw, args.task_split) if args.task_split else 0
    load0 = os.getloadavg()
    ref = train(make_vec_env(ID, n_envs=args.copies, seed=0, env_kwargs=kw), args.copies, args)
    ours = train(make_batched_vec_env(ID, args.num_envs, seed=0, step_infos=False, **kw), args.num_envs, args)
    load1 = os.getloadavg()
    print(f"{'env':>28} | {'n_envs':>6} | {'steps/s wall':>12} | {'steps/s cpu':>11}")
    for name, r in (("make_vec_env (DummyVecEnv)", ref), ("BatchedVecEnv", ours)):
        print(f"{name:>28} | {r['n_envs']:6d} | {r['steps_per_s']:12.0f} | {r['cpu_steps_per_s']:11.0f}")
    ratio, ratio_cpu = ours["steps_per_s"] / ref["steps_per_s"], ours["cpu_steps_per_s"] / ref["cpu_steps_per_s"]
    print(f"ratio {ratio:.2f} (wall), {ratio_cpu:.2f} (cpu); PPO rollout {args.rollout}, batch "
          f"{args.batch_size}, {args.n_epochs} epochs, net {args.net} {args.activation}, {args.threads} torch "
          f"thread(s); {primed} tasks primed; {args.timesteps} steps each; load "
          f"average {load0[0]:.2f} -> {load1[0]:.2f}")
    print(json.dumps({"make_vec_env_steps_per_s": round(ref["steps_per_s"]),
                      "make_vec_env_cpu_steps_per_s": round(ref["cpu_steps_per_s"]),
                      "batched_steps_per_s": round(ours["steps_per_s"]),
                      "batched_cpu_steps_per_s": round(ours["cpu_steps_per_s"]),
                      "ratio": round(ratio, 2), "ratio_cpu": round(ratio_cpu, 2), "copies": args.copies,
                      "num_envs": args.num_envs, "timesteps": args.timesteps, "task_split": args.task_split,
                      "rollout": args.rollout, "batch_size": args.batch_size, "n_epochs": args.n_epochs,
                      "net": args.net, "activation": args.activation, "threads": args.threads,
                      "load": [round(load0[0], 2), round(load1[0], 2)]}))


if __name__ == "__main__":
    main()
