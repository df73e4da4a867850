"""The main job: a small benchmark of taigym's experts and learned agents on Pour-v0 eval tasks.

    python -m taigym.apps.demo --out out/demo [--episodes 5] [--agents sqp scripted rh bc dagger random]

``rh`` (Pan & Manocha 2017) runs with the liquid network shipped with taigym. The learned agents
(``bc``, ``dagger``) are trained first, on the simplified Pour-v0 from the
``scripted`` expert (``TRAINING`` below: under a minute), in ``--out/train/<agent>``; a rerun
reloads them (an interrupted training resumes). Then every agent runs on the first
``--episodes`` tasks of the fixed eval split in the particle env, and the job prints a Markdown
table (success with its 95 % interval, liquid in the target, spilled, per-decision latency) and
writes, under ``--out``: ``metrics.md``, ``metrics.csv``, ``metrics.png`` (a bar chart) and
``pour.mp4`` (the first agent's first episodes). Ends with one line of JSON.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import os
import time
from pathlib import Path

os.environ.setdefault("TI_SKIP_VERSION_CHECK", "ON")

import gymnasium as gym  # noqa: E402
import numpy as np  # noqa: E402

from taigym import agents  # noqa: E402
from taigym.envs import tasks  # noqa: E402

FPS = 20  # one frame per 0.05 s control step: real time

# How the demo trains its learned agents: from the closed-loop scripted expert (whose labels
# are a function of the observed state, so a small MLP can imitate it from few episodes), on
# train-split tasks in the simplified env (~10^4 steps/s).
TRAINING = {
    "bc": dict(expert="scripted", episodes=200, eval_episodes=0, max_epochs=150),
    "dagger": dict(expert="scripted", demo_episodes=50, rounds=5, episodes_per_round=30, beta0=0.5,
                   eval_episodes=10, max_epochs=100),
}


def trained_agent(name: str, run_dir: Path, seed: int):
    """Train ``name`` (a key of ``TRAINING``) in ``run_dir``, or reload / resume it there."""
    import functools

    from taigym.training import bc, dagger
    from taigym.training.loggers import NullLogger

    make_env = functools.partial(gym.make, "taigym/Pour-v0", fidelity="simplified")
    module = {"bc": bc, "dagger": dagger}[name]
    cfg = dict(TRAINING[name], seed=seed, progress=False)
    return module.train(make_env, cfg, run_dir, NullLogger())


def metrics_table(summaries: dict[str, dict]) -> str:
    """A Markdown table of ``{agent name: agents.summarise(...)}`` on Pour-v0."""
    lines = ["| agent | episodes | success | 95 % CI | in target | spilled | left in S | latency (ms) |",
             "|" + "---|" * 8]
    for name, s in summaries.items():
        lo, hi = s["success_ci95"]
        lines.append(f"| {name} | {s['episodes']} | {s['success_rate']:.2f} | [{lo:.2f}, {hi:.2f}] | "
                     f"{s['mean_in_target']:.3f} | {s['mean_spilled']:.3f} | {s['mean_in_source']:.3f} | "
                     f"{s['latency_ms']:.3f} |")
    return "\n".join(lines)


def write_atomic(path: Path, data: bytes) -> None:
    """Write through a temporary file and rename, so an interrupted run never leaves a torn file."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def plot(summaries: dict[str, dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(summaries)
    keys = [("success_rate", "success"), ("mean_in_target", "in target"), ("mean_spilled", "spilled")]
    fig, ax = plt.subplots(figsize=(6.5, 3.8))
    width = 0.8 / len(names)
    for k, name in enumerate(names):
        s = summaries[name]
        vals = [s[key] for key, _ in keys]
        lo, hi = s["success_ci95"]
        err = np.zeros((2, len(keys)))
        err[:, 0] = [vals[0] - lo, hi - vals[0]]
        ax.bar(np.arange(len(keys)) + k * width, vals, width, yerr=err, capsize=3, label=name)
    ax.set_xticks(np.arange(len(keys)) + 0.4 - width / 2, [label for _, label in keys])
    ax.set_ylim(0, 1.05)
    ax.set_ylabel("fraction (success: 95 % interval)")
    ax.set_title(f"Pour-v0, {summaries[names[0]]['episodes']} eval tasks")
    ax.legend()
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=120)
    write_atomic(path, buf.getvalue())


def write_video(frames: list[np.ndarray], path: Path) -> None:
    import imageio.v2 as imageio

    tmp = path.with_name(f".{path.stem}.tmp{path.suffix}")
    with imageio.get_writer(tmp, fps=FPS, codec="libx264", macro_block_size=8) as writer:
        for frame in frames:
            writer.append_data(frame)
    os.replace(tmp, path)


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("out/demo"))
    ap.add_argument("--episodes", type=int, default=5)
    ap.add_argument("--agents", nargs="+", default=["sqp", "scripted", "rh", "bc", "dagger", "random"])
    ap.add_argument("--video-episodes", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)

    learned = {}
    for name in args.agents:
        if name in TRAINING:
            t0 = time.perf_counter()
            learned[name] = trained_agent(name, args.out / "train" / name, args.seed)
            print(f"{name}: trained from the {TRAINING[name]['expert']} expert on "
                  f"{learned[name].meta['labels']} labels ({time.perf_counter() - t0:.0f} s)", flush=True)

    task_list = tasks("pour", "eval")[:args.episodes]
    env = gym.make("taigym/Pour-v0", render_mode="rgb_array")
    summaries, rows_out, frames = {}, [], []
    for k, name in enumerate(args.agents):
        checkpoint = {"checkpoint": args.out / "train" / name / "agent.pt"} if name in learned else {}
        agent = agents.make(name, env, **checkpoint)
        t0 = time.perf_counter()
        rows = agents.evaluate(env, agent, task_list, seed=args.seed,
                               video_frames=frames if k == 0 else None,
                               video_episodes=args.video_episodes)
        summaries[name] = agents.summarise(rows, agents.episode_metrics(env))
        rows_out += [{"agent": name, **{key: r[key] for key in
                                        ("task", "success", "in_target", "spilled", "in_source",
                                         "steps", "act_seconds", "sim_unstable")}} for r in rows]
        print(f"{name}: {summaries[name]['success_rate']:.0%} success on {len(rows)} tasks "
              f"({time.perf_counter() - t0:.0f} s)", flush=True)
    env.close()

    table = metrics_table(summaries)
    print(table)
    write_atomic(args.out / "metrics.md", (table + "\n").encode())
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=list(rows_out[0]))
    writer.writeheader()
    writer.writerows(rows_out)
    write_atomic(args.out / "metrics.csv", buf.getvalue().encode())
    plot(summaries, args.out / "metrics.png")
    written = "metrics.md, metrics.csv, metrics.png"
    if frames:                                  # --video-episodes 0: no video
        write_video(frames, args.out / "pour.mp4")
        written += f", pour.mp4 ({len(frames)} frames)"
    print(f"wrote {args.out}/{written}")
    figures = {f"{name}_{key}": round(float(s[key]), 4) for name, s in summaries.items()
               for key in ("success_rate", "mean_in_target", "mean_spilled", "latency_ms")}
    print(json.dumps(figures))
    return figures


if __name__ == "__main__":
    main()
