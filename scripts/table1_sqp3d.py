"""Pan & Manocha 2016's Table I in 3D: the ``sqp`` expert on Pour3D-v0, validated in the 3D FLIP solver.

For each of Pan & Manocha 2016's two scenes in 3D (``taigym.envs.pour3d_tasks.pan_manocha_2016_scenes``: T far from
S; a tall block between them) and each viscosity, the ``sqp`` expert plans (2D SQP on S's
cross-section in the pour plane, then inverse kinematics to the Panda's joints) and the plan
runs in Pour3D-v0 (``sim.World3D``). Columns as in the paper: scene, viscosity, planning time
(SQP + IK), validation time (the 3D simulation), quality = fraction of the liquid in T at the
end; plus spilled, the model's prediction and, to judge the 2D outflow model on the 3D
liquid, when half the liquid had left S (t50) in 3D FLIP, in the model (the plan's S
trajectory replayed in Pour-v0 ``fidelity="simplified"``) and in 2D FLIP (the same
trajectory in Pour-v0), and the RMS difference of the fraction in S over the episode
between 3D FLIP and each of them. Ends with one JSON line.

    python scripts/table1_sqp3d.py [--viscosities 1e-3 0.1] [--dx 0.007] [--video out/sqp3d.mp4]
    python scripts/table1_sqp3d.py --sources oval cup frustum   # the scenes with other sources
    python scripts/table1_sqp3d.py --eval 10 --scenes           # the first 10 eval tasks only

``--sources`` runs the scenes with S a cup (8 cm wide, 10 cm tall, corner radius 1.6 cm) or a
frustum (8 cm at the opening, 5 cm at the bottom, 10 cm tall) instead of the bottle, the same
fill. ``--eval N`` also runs the expert on the first N eval tasks (their own viscosities) and
prints their success (in T >= 0.9, spilled <= 0.05) and mean quality.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import time

os.environ.setdefault("TI_SKIP_VERSION_CHECK", "ON")

import gymnasium as gym  # noqa: E402
import numpy as np  # noqa: E402

import taigym.agents as agents  # noqa: E402
from taigym.envs.pour3d_tasks import pan_manocha_2016_scenes  # noqa: E402

SOURCES = {"oval": {},
           "cup": dict(source_container="cup", source_width=0.08, source_height=0.10,
                       source_params={"corner_radius": 0.016}),
           "frustum": dict(source_container="frustum", source_width=0.08, source_height=0.10,
                           source_params={"bottom_width": 0.05})}


def replay_2d(env2d, task2d, poses: np.ndarray, steps: int) -> np.ndarray:
    """Fraction of the liquid in S after each of ``steps`` steps of Pour-v0 moving S along
    ``poses`` (then holding the last one)."""
    u = env2d.unwrapped
    _, info = env2d.reset(seed=0, options={"task": task2d})
    out = []
    for k in range(steps):
        nxt = poses[min(k + 1, len(poses) - 1)]
        a = np.clip((nxt - info["source_pose"]) / u.action_scale, -1, 1)
        _, _, term, trunc, info = env2d.step(a)
        out.append(info["in_source"])
        if term or trunc:
            break
    return np.pad(np.array(out), (0, steps - len(out)), mode="edge")


def t_half(in_source: np.ndarray, dt: float) -> float:
    below = np.flatnonzero(in_source <= 0.5)
    return float((below[0] + 1) * dt) if len(below) else float("nan")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--viscosities", nargs="+", type=float, default=[1e-3, 0.1])
    ap.add_argument("--scenes", nargs="*", default=["far", "block"])
    ap.add_argument("--sources", nargs="+", default=["oval"], choices=sorted(SOURCES))
    ap.add_argument("--eval", type=int, default=0, help="also run the first N eval tasks")
    ap.add_argument("--dx", type=float, default=0.007)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--video", default=None, help="write the block scene with water here (.mp4)")
    args = ap.parse_args()
    env = gym.make("taigym/Pour3D-v0", dx=args.dx, render_mode="rgb_array" if args.video else None)
    env_model = gym.make("taigym/Pour-v0", fidelity="simplified")
    env_flip2d = gym.make("taigym/Pour-v0")
    rows, figures = [], {}
    print("| scene | viscosity (Pa s) | planning (s) | validation (s) | quality (in T) | spilled | "
          "model's prediction | t50 3D / model / 2D FLIP (s) | RMS in S: model, 2D FLIP vs 3D |")
    print("|---|---|---|---|---|---|---|---|---|")
    cases = [(f"{name}" + ("" if src == "oval" else f" ({src})"), mu,
              dataclasses.replace(pan_manocha_2016_scenes(mu)[name], **SOURCES[src]))
             for src in args.sources for mu in args.viscosities for name in args.scenes]
    agent = agents.make("sqp", env)            # plans again for every task
    for name, mu, task in cases:
        frames = [] if (args.video and name == "block" and mu == args.viscosities[0]) else None
        t0 = time.perf_counter()
        obs, info = env.reset(seed=args.seed, options={"task": task})
        agent.reset(seed=args.seed)
        hist, done = [], False                 # the fraction in S after each step, 3D FLIP
        while not done:
            obs, _, term, trunc, info = env.step(agent.act(obs, info))
            hist.append(info["in_source"])
            done = term or trunc
            if frames is not None:
                frames.append(env.render())
        wall = time.perf_counter() - t0
        row = info
        n = len(hist)
        s3 = np.array(hist)
        section = task.section(env.unwrapped.wall)
        sm = replay_2d(env_model, section, agent.plan2d.poses, n)
        s2 = replay_2d(env_flip2d, section, agent.plan2d.poses, n)
        dt = env.unwrapped.dt
        t50 = [t_half(s, dt) for s in (s3, sm, s2)]
        rms = [float(np.sqrt(np.mean((s - s3) ** 2))) for s in (sm, s2)]
        plan_s = agent.plan_seconds
        rows.append(row)
        print(f"| {name} | {mu:g} | {plan_s:.1f} | {wall - plan_s:.1f} | {row['in_target']:.1%} | "
              f"{row['spilled']:.1%} | {agent.plan2d.predicted['in_target']:.1%} | "
              f"{t50[0]:.2f} / {t50[1]:.2f} / {t50[2]:.2f} | {rms[0]:.3f}, {rms[1]:.3f} |", flush=True)
        figures[f"{name}_{mu:g}"] = {"planning_s": round(plan_s, 2), "validation_s": round(wall - plan_s, 2),
                                     "in_target": round(row["in_target"], 4),
                                     "spilled": round(row["spilled"], 4),
                                     "predicted_in_target": round(agent.plan2d.predicted["in_target"], 4),
                                     "t50_3d_model_2d": [round(v, 2) for v in t50],
                                     "rms_in_source_model_2d": [round(v, 4) for v in rms],
                                     "ik": {k: (round(v, 4) if isinstance(v, float) else v)
                                            for k, v in agent.report.items()}}
        if frames:
            import imageio

            os.makedirs(os.path.dirname(os.path.abspath(args.video)), exist_ok=True)
            imageio.mimsave(args.video, frames, fps=env.metadata["render_fps"])
    if rows:
        figures["min_in_target"] = min(r["in_target"] for r in rows)
    if args.eval:
        from taigym.envs import tasks

        results = []
        for k, task in enumerate(tasks("pour3d", "eval")[:args.eval]):
            row = agents.run_episode(env, agent, seed=args.seed, task=task)
            results.append(row)
            print(f"eval task {k}: {task.source_container} -> {task.target_container}, "
                  f"viscosity {task.viscosity:.3g}: in T {row['in_target']:.1%}, spilled "
                  f"{row['spilled']:.1%}, planning {agent.plan_seconds:.1f} s", flush=True)
        success = sum(r["success"] for r in results)
        print(f"eval tasks: success {success}/{len(results)}, mean in T "
              f"{np.mean([r['in_target'] for r in results]):.1%}")
        figures["eval"] = {"n": len(results), "success": int(success),
                           "mean_in_target": round(float(np.mean([r["in_target"] for r in results])), 4)}
    for e in (env, env_model, env_flip2d):
        e.close()
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
