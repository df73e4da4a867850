"""Benchmark a matrix of agents x envs x seeds: CSV, a Markdown table and plots.

    python -m taigym.apps.benchmark agents=[sqp,scripted,random] envs=[pour_simplified] seeds=[0,1]
    python -m taigym.apps.benchmark name=rl agents=[ppo,scripted] episodes=100 \\
        'checkpoints={ppo: runs/train/ppo/pour_simplified/seed{seed}}'

Every cell (agent, env, seed) runs the agent on the first ``episodes`` tasks of the fixed split
(episode i of seed s reset with seed ``1000 s + i``) and is written, as soon as it is done, to
``cells/<agent>__<env>__seed<s>.json`` in the run directory (``runs/benchmark/<name>``).
Rerunning the command skips the cells already written with the same settings, so an interrupted
benchmark resumes where it stopped. Then, pooling the seeds' episodes per agent and env:

* ``episodes.csv``: one row per episode;
* ``summary.csv`` and ``table.md``: success rate (95 % Wilson interval), mean in-T, spilled and
  per-decision latency (95 % Student-t intervals), return;
* ``plots.png``: those four figures as bars with their intervals, one group per env.

Agents are configured by their ``agent/<name>.yaml`` (``agent_overrides`` updates them per
agent: ``'agent_overrides={sqp: {replan_every: 20}}'``; the ``planner`` group configures ``sqp``); learned agents load
``checkpoints[<agent>]`` (``{seed}`` and ``{env}`` are filled in). Ends with one line of JSON
(success rate and latency per agent and env). Config: ``taigym/conf/benchmark.yaml``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import hydra
import numpy as np
from omegaconf import DictConfig

from ._common import aggregate, save_figure, to_plain, write_atomic, write_csv, write_json
from .logging import make_logger

SEED_STRIDE = 1000
PANELS = (("success_rate", "success", "success_ci95"),
          ("mean_in_target", "in T", "mean_in_target_ci95"),
          ("mean_spilled", "spilled", "mean_spilled_ci95"),
          ("latency_ms", "latency per decision (ms)", "latency_ms_ci95"))
EPISODE_FIELDS = ("agent", "env", "seed", "task", "success", "in_target", "spilled", "in_source",
                  "return_", "steps", "act_seconds", "sim_unstable")


def group_configs(agent: str, env: str, seed: int, overrides: Mapping | None = None) -> tuple[dict, dict]:
    """The composed ``agent`` and ``env`` group configs (as the evaluate app would see them),
    the agent's updated with ``overrides``."""
    from hydra import compose, initialize_config_module
    from hydra.core.global_hydra import GlobalHydra

    ov = [f"agent={agent}", f"env={env}", f"seed={seed}"]
    if GlobalHydra.instance().is_initialized():
        c = compose(config_name="evaluate", overrides=ov)
    else:
        with initialize_config_module("taigym.conf", version_base="1.3"):
            c = compose(config_name="evaluate", overrides=ov)
    agent_cfg = to_plain(c.agent)
    agent_cfg.update(dict(overrides or {}))
    return agent_cfg, to_plain(c.env)


def cell_name(agent: str, env: str, seed: int) -> str:
    return f"{agent}__{env}__seed{seed}"


def _same(a: Any, b: Any) -> bool:
    return json.dumps(a, sort_keys=True, default=str) == json.dumps(b, sort_keys=True, default=str)


def run_benchmark(cfg: DictConfig | Mapping, run_dir: str | Path, logger=None) -> dict:
    """Run (or complete) the matrix in ``run_dir``; returns ``{"summary": [...], "ran": [...],
    "skipped": [...]}``."""
    from .evaluate import run_agent

    plain = to_plain(cfg)
    run_dir = Path(run_dir)
    (run_dir / "cells").mkdir(parents=True, exist_ok=True)
    agents_, envs_ = list(plain["agents"]), list(plain["envs"])
    seeds = [int(s) for s in plain["seeds"]]
    episodes, split = int(plain["episodes"]), plain.get("split", "eval")
    ckpts = dict(plain.get("checkpoints") or {})
    overrides = dict(plain.get("agent_overrides") or {})
    planner = plain.get("planner")
    own_logger = logger is None
    if own_logger:
        logger = make_logger(plain.get("logger"), run_dir, config=plain)

    # the whole matrix first, so that a bad name or a missing checkpoint fails before any work
    cells = []
    for env in envs_:
        for agent in agents_:
            for seed in seeds:
                agent_cfg, env_cfg = group_configs(agent, env, seed, overrides.get(agent))
                ckpt = ckpts.get(agent)
                if ckpt:
                    ckpt = str(ckpt).format(seed=seed, env=env)
                    if not Path(ckpt).exists():
                        raise FileNotFoundError(f"checkpoint of {agent} for seed {seed}, env {env}: {ckpt} does not exist")
                spec = {"agent": agent_cfg, "env": env_cfg, "episodes": episodes, "split": split,
                        "seed": seed, "checkpoint": ckpt,
                        "planner": planner if agent_cfg.get("name") == "sqp" else None}
                cells.append((agent, env, seed, spec))

    ran, skipped, results = [], [], {}
    bar = None
    if plain.get("progress", True):
        try:
            from tqdm import tqdm

            bar = tqdm(total=len(cells), desc="benchmark", unit="cell")
        except ImportError:  # pragma: no cover
            bar = None
    for agent, env, seed, spec in cells:
        name = cell_name(agent, env, seed)
        path = run_dir / "cells" / f"{name}.json"
        done = json.loads(path.read_text()) if path.exists() else None
        if done is not None and _same(done.get("spec"), spec):
            skipped.append(name)
        else:
            t0 = time.perf_counter()
            rows, _ = run_agent(spec["env"], spec["agent"], planner, episodes=episodes, split=split,
                                seed=SEED_STRIDE * seed, checkpoint=spec["checkpoint"], progress=False)
            done = {"spec": spec, "rows": rows, "aggregate": aggregate(rows),
                    "wall_seconds": time.perf_counter() - t0}
            write_json(path, done)
            ran.append(name)
        results[(agent, env, seed)] = done
        if bar is not None:
            bar.update(1)
            bar.set_postfix(cell=name)
    if bar is not None:
        bar.close()

    # pooled over seeds
    episode_rows, summary = [], []
    for env in envs_:
        for agent in agents_:
            rows = []
            for seed in seeds:
                for r in results[(agent, env, seed)]["rows"]:
                    rows.append(r)
                    episode_rows.append({"agent": agent, "env": env, "seed": seed, **r})
            agg = aggregate(rows)
            summary.append({"agent": agent, "env": env, "seeds": len(seeds), **agg})
    write_csv(run_dir / "episodes.csv", episode_rows, EPISODE_FIELDS)
    write_csv(run_dir / "summary.csv", [_flat(s) for s in summary])
    table = markdown_table(summary)
    write_atomic(run_dir / "table.md", table + "\n")
    plot(summary, run_dir / "plots.png", title=f"{split} split, {episodes} tasks x {len(seeds)} seed(s)")
    for s in summary:
        logger.log({f"{s['agent']}/{s['env']}/{k}": s[k] for k, _, _ in PANELS}, step=0)
    logger.log_artifact(run_dir / "table.md", name="benchmark-table", kind="result")
    logger.log_artifact(run_dir / "plots.png", name="benchmark-plots", kind="result")
    if own_logger:
        logger.finish()
    return {"summary": summary, "ran": ran, "skipped": skipped, "table": table}


def _flat(s: Mapping) -> dict:
    out = {}
    for k, v in s.items():
        if isinstance(v, (list, tuple)) and len(v) == 2:
            out[f"{k}_lo"], out[f"{k}_hi"] = v
        else:
            out[k] = v
    return out


def markdown_table(summary: Sequence[Mapping]) -> str:
    def ci(s, key, fmt):
        lo, hi = s[f"{key}_ci95"] if key != "success_rate" else s["success_ci95"]
        return f"{s[key]:{fmt}} [{lo:{fmt}}, {hi:{fmt}}]"

    lines = ["| agent | env | episodes | success [95 % CI] | in T [95 % CI] | spilled [95 % CI] | "
             "latency ms [95 % CI] | return |", "|" + "---|" * 8]
    for s in summary:
        lines.append(f"| {s['agent']} | {s['env']} | {s['episodes']} | {ci(s, 'success_rate', '.2f')} | "
                     f"{ci(s, 'mean_in_target', '.3f')} | {ci(s, 'mean_spilled', '.3f')} | "
                     f"{ci(s, 'latency_ms', '.3g')} | {s['mean_return']:.3f} |")
    return "\n".join(lines)


def plot(summary: Sequence[Mapping], path: Path, title: str = "") -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    agents_ = list(dict.fromkeys(s["agent"] for s in summary))
    envs_ = list(dict.fromkeys(s["env"] for s in summary))
    by = {(s["agent"], s["env"]): s for s in summary}
    fig, axes = plt.subplots(1, 4, figsize=(4 * 3.4, 3.6))
    width = 0.8 / max(len(agents_), 1)
    x = np.arange(len(envs_))
    for ax, (key, label, ci_key) in zip(axes, PANELS):
        for k, agent in enumerate(agents_):
            vals = np.array([by[(agent, e)][key] for e in envs_], float)
            lo = np.array([by[(agent, e)][ci_key][0] for e in envs_], float)
            hi = np.array([by[(agent, e)][ci_key][1] for e in envs_], float)
            err = np.vstack([np.maximum(vals - lo, 0), np.maximum(hi - vals, 0)])
            ax.bar(x + (k - (len(agents_) - 1) / 2) * width, vals, width, yerr=err, capsize=3, label=agent)
        ax.set_xticks(x, envs_, rotation=15)
        ax.set_title(label)
        if key == "latency_ms":
            ax.set_yscale("log")
        else:
            ax.set_ylim(0, 1.05)
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=len(agents_), fontsize=9, frameon=False)
    fig.suptitle(f"taigym benchmark ({title}; bars: 95 % intervals)", fontsize=10)
    fig.tight_layout(rect=(0, 0.07, 1, 1))
    save_figure(fig, path)
    plt.close(fig)


@hydra.main(config_path="../conf", config_name="benchmark", version_base="1.3")
def main(cfg: DictConfig) -> dict:
    from hydra.core.hydra_config import HydraConfig

    run_dir = Path(HydraConfig.get().runtime.output_dir)
    out = run_benchmark(cfg, run_dir)
    print(out["table"])
    print(f"ran {len(out['ran'])} cell(s), skipped {len(out['skipped'])} already done -> "
          f"{run_dir}/{{episodes.csv, summary.csv, table.md, plots.png}}")
    figures = {f"{s['agent']}_{s['env']}_{k}": round(float(s[k]), 4) for s in out["summary"]
               for k in ("success_rate", "mean_in_target", "mean_spilled", "latency_ms")}
    print(json.dumps(figures))
    return figures


if __name__ == "__main__":
    main()
