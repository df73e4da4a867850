"""Benchmark a matrix of agents x envs x seeds: CSV and Markdown tables and plots, per env.

    python -m taigym.apps.benchmark suite=all                          # the whole suite (conf/suite/all.yaml)
    python -m taigym.apps.benchmark 'agents=[expert,random]' 'envs=[transport,pour_simplified]' episodes=10
    python -m taigym.apps.benchmark name=rl 'agents=[ppo,scripted]' episodes=100 \\
        'checkpoints={ppo: runs/train/ppo/{env}/seed{seed}}'

Every cell (agent, env, seed) runs the agent on the first ``episodes`` tasks of the fixed split
(``episodes`` is a number, or a mapping env -> number; episode i of seed s reset with seed
``1000 s + i``) and is written, as soon as it is done, to ``cells/<agent>__<env>__seed<s>.json``
in the run directory (``runs/benchmark/<name>``). Rerunning the command skips the cells already
written with the same settings, so an interrupted benchmark resumes where it stopped. Then,
pooling the seeds' episodes per agent and env (each env has its own metrics:
``metadata["episode_metrics"]``):

* ``episodes.csv``: one row per episode;
* ``summary.csv``: one row per agent and env, every metric with its 95 % interval (``_lo``,
  ``_hi``), planning time and per-decision latency;
* ``table.md``: a table per env: each metric (rates with Wilson intervals, means with Student-t
  intervals), planning time (s), latency (ms), return;
* ``plots/<env>.png``: each metric and the latency as bars with their intervals.

Agents are agent configs (``agent/<name>.yaml``; ``expert`` is each env's own expert;
``agent_overrides`` updates them per agent: ``'agent_overrides={sqp: {replan_every: 20}}'``; the
``planner`` group configures ``sqp``). Learned agents load ``checkpoints[<agent>]`` (``{seed}``
and ``{env}`` are filled in); with ``missing_checkpoints=skip`` a cell whose checkpoint does not
exist is left out (and listed as such in the table) instead of failing. The whole matrix is
checked before any cell runs. Config groups and envs from ``hydra.searchpath`` (a user's own
configs) are honoured. Ends with one line of JSON (success rate and latency per agent and env).
Config: ``taigym/conf/benchmark.yaml``, suites in ``taigym/conf/suite/``.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from omegaconf import DictConfig

from taigym.agents import agent_class
from taigym.agents.metrics import ci_key, summary_keys
from taigym.training.loggers import make_logger

from .common import (agent_name, aggregate, check_agent, count, hydra_app, progress_bar, save_figure, to_plain,
                     write_atomic, write_csv, write_json)

log = logging.getLogger(__name__)
SEED_STRIDE = 1000
EPISODE_FIELDS = ("agent", "env", "seed", "task")
MISSING = ("error", "skip")


def _searchpath() -> list[str]:
    """The config search path of the running Hydra app beyond taigym's own (``hydra.searchpath``,
    ``--config-dir``), for :func:`group_configs`."""
    from hydra.core.hydra_config import HydraConfig

    if not HydraConfig.initialized():
        return []
    sources = HydraConfig.get().runtime.config_sources
    return [f"{s.schema}://{s.path}" for s in sources if s.provider not in ("hydra", "main", "schema")]


def group_configs(agent: str, env: str, seed: int, overrides: Mapping | None = None) -> tuple[dict, dict]:
    """The composed ``agent`` and ``env`` group configs (as the evaluate app would see them, with
    the running app's search path), the agent's updated with ``overrides``."""
    from hydra import compose, initialize_config_module
    from hydra.core.global_hydra import GlobalHydra

    ov = [f"agent={agent}", f"env={env}", f"seed={seed}"]
    path = _searchpath()
    if path:
        ov.append(f"hydra.searchpath=[{','.join(path)}]")
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


def episodes_for(episodes, env: str) -> int:
    """The episodes per cell on ``env`` (``episodes``: a number, or a mapping env -> number)."""
    if isinstance(episodes, Mapping):
        if env not in episodes:
            raise ValueError(f"episodes names no count for env {env!r} ({', '.join(episodes)})")
        return count(f"episodes[{env}]", episodes[env])
    return count("episodes", episodes)


def plan_cells(plain: Mapping) -> tuple[list, list]:
    """The matrix, checked before any work: (cells to run, cells skipped for a missing
    checkpoint). Each cell is (agent, env, seed, spec)."""
    agents_, envs_ = list(plain["agents"]), list(plain["envs"])
    if not agents_ or not envs_:
        raise ValueError("agents and envs must each name at least one config")
    seeds = [count("seeds[]", s, 0) for s in plain["seeds"]]
    missing = plain.get("missing_checkpoints", "error")
    if missing not in MISSING:
        raise ValueError(f"missing_checkpoints must be one of {MISSING}, got {missing!r}")
    # a suite lists checkpoint paths for every learned agent: `agents=[expert,random]` narrows
    # it, so paths of agents not run are ignored; an override of an agent not run is a typo
    ckpts = {a: p for a, p in (plain.get("checkpoints") or {}).items() if a in agents_}
    overrides = dict(plain.get("agent_overrides") or {})
    unknown = sorted(set(overrides) - set(agents_))
    if unknown:
        raise ValueError(f"agent_overrides name agents not in agents: {', '.join(unknown)}")
    cells, skipped = [], []
    for env in envs_:
        episodes = episodes_for(plain["episodes"], env)
        for agent in agents_:
            for seed in seeds:
                agent_cfg, env_cfg = group_configs(agent, env, seed, overrides.get(agent))
                name = agent_name(agent_cfg, env_cfg)
                ckpt = ckpts.get(agent)
                if ckpt:
                    ckpt = str(ckpt).format(seed=seed, env=env)
                    if not Path(ckpt).exists():
                        if missing == "skip":
                            skipped.append((agent, env, seed, f"no checkpoint {ckpt}"))
                            continue
                        raise FileNotFoundError(f"checkpoint of {agent} for seed {seed}, env {env}: {ckpt} "
                                                "does not exist (missing_checkpoints=skip leaves such cells out)")
                try:
                    cls = agent_class(name, family=env_cfg["family"])
                    if not ckpt and getattr(cls, "needs_checkpoint", False) and missing == "skip":
                        skipped.append((agent, env, seed, "no checkpoint"))
                        continue
                    check_agent(name, env_cfg["family"], ckpt)
                except ValueError as e:
                    raise ValueError(f"{agent} on {env}: {e}") from e
                spec = {"agent": agent_cfg, "env": env_cfg, "episodes": episodes, "split": plain.get("split", "eval"),
                        "seed": seed, "checkpoint": ckpt, "planner": plain.get("planner") if name == "sqp" else None}
                cells.append((agent, env, seed, spec))
    return cells, skipped


def run_benchmark(cfg: DictConfig | Mapping, run_dir: str | Path, logger=None) -> dict:
    """Run (or complete) the matrix in ``run_dir``; returns ``{"summary": [...], "ran": [...],
    "skipped": [...], "missing": [...], "tables": {env: markdown}}``."""
    from .evaluate import run_agent

    plain = to_plain(cfg)
    cells, missing = plan_cells(plain)
    run_dir = Path(run_dir)
    (run_dir / "cells").mkdir(parents=True, exist_ok=True)
    own_logger = logger is None
    if own_logger:
        logger = make_logger(plain.get("logger"), run_dir, config=plain)
    try:
        ran, skipped, results = [], [], {}
        bar = progress_bar(len(cells), "benchmark", bool(plain.get("progress", True)), unit="cell")
        for agent, env, seed, spec in cells:
            name = cell_name(agent, env, seed)
            path = run_dir / "cells" / f"{name}.json"
            done = json.loads(path.read_text()) if path.exists() else None
            if done is not None and _same(done.get("spec"), spec):
                skipped.append(name)
            else:
                t0 = time.perf_counter()
                rows, _, metrics = run_agent(spec["env"], spec["agent"], spec["planner"], episodes=spec["episodes"],
                                             split=spec["split"], seed=SEED_STRIDE * seed,
                                             checkpoint=spec["checkpoint"])
                done = {"spec": spec, "agent": agent_name(spec["agent"], spec["env"]), "metrics": metrics,
                        "rows": rows, "aggregate": aggregate(rows, metrics), "wall_seconds": time.perf_counter() - t0}
                write_json(path, done)
                ran.append(name)
                log.info("%s: %d episodes in %.0f s", name, len(rows), done["wall_seconds"])
            results[(agent, env, seed)] = done
            if bar is not None:
                bar.update(1)
                bar.set_postfix(cell=name)
        if bar is not None:
            bar.close()
        summary, episode_rows = pool(plain, results)
        write_csv(run_dir / "episodes.csv", episode_rows)
        write_csv(run_dir / "summary.csv", [_flat(s) for s in summary])
        tables = markdown_tables(summary, missing, plain)
        write_atomic(run_dir / "table.md", "\n\n".join(tables.values()) + "\n")
        for env in tables:
            rows = [s for s in summary if s["env"] == env]
            if rows:
                plot(rows, run_dir / "plots" / f"{env}.png")
        for s in summary:
            logger.log({f"{s['agent']}/{s['env']}/{k}": s[k] for k in ("success_rate", "latency_ms", "plan_seconds")
                        if k in s}, step=0)
        logger.log_artifact(run_dir / "table.md", name="benchmark-table", kind="result")
    finally:
        if own_logger:
            logger.finish()
    return {"summary": summary, "ran": ran, "skipped": skipped, "missing": missing, "tables": tables}


def pool(plain: Mapping, results: Mapping) -> tuple[list[dict], list[dict]]:
    """Per (env, agent), the seeds' episodes pooled and summarised; and every episode as a row."""
    summary, episode_rows = [], []
    for env in plain["envs"]:
        for agent in plain["agents"]:
            cells = [results[k] for k in results if k[0] == agent and k[1] == env]
            if not cells:
                continue
            rows = []
            for (a, e, seed), cell in results.items():
                if a == agent and e == env:
                    rows += cell["rows"]
                    episode_rows += [{"agent": agent, "env": env, "seed": seed, **r} for r in cell["rows"]]
            metrics = cells[0]["metrics"]
            summary.append({"agent": agent, "resolved": cells[0]["agent"], "env": env, "seeds": len(cells),
                            "metrics": metrics, **aggregate(rows, metrics)})
    return summary, episode_rows


def _flat(s: Mapping) -> dict:
    out = {}
    for k, v in s.items():
        if k == "metrics":
            continue
        if isinstance(v, (list, tuple)) and len(v) == 2:
            out[f"{k}_lo"], out[f"{k}_hi"] = v
        else:
            out[k] = v
    return out


def _ci(s: Mapping, name: str, fmt: str) -> str:
    if name not in s or s[name] is None or (isinstance(s[name], float) and np.isnan(s[name])):
        return "-"
    lo, hi = s.get(ci_key(name), (s[name], s[name]))
    n = f" (n={s[name + '_n']})" if f"{name}_n" in s else ""
    return f"{s[name]:{fmt}} [{lo:{fmt}}, {hi:{fmt}}]{n}"


def markdown_tables(summary: Sequence[Mapping], missing: Sequence[tuple], plain: Mapping) -> dict[str, str]:
    """One Markdown table per env (its own metrics as columns), the cells left out listed below."""
    out = {}
    split = plain.get("split", "eval")
    for env in plain["envs"]:
        rows = [s for s in summary if s["env"] == env]
        gone = sorted({(a, why) for a, e, _, why in missing if e == env})
        metrics = rows[0]["metrics"] if rows else {"success": "rate"}
        names = summary_keys(metrics)
        head = ["agent", "episodes", *[f"{k} [95 % CI]" for k in metrics], "plan s [95 % CI]",
                "latency ms [95 % CI]", "return"]
        lines = [f"### {env} ({split} split)", "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        for s in rows:
            label = s["agent"] if s["resolved"] == s["agent"] else f"{s['agent']} ({s['resolved']})"
            cols = [label, str(s["episodes"]),
                    *[_ci(s, names[k], ".2f" if kind != "mean" else ".3g") for k, kind in metrics.items()],
                    _ci(s, "plan_seconds", ".3g"), _ci(s, "latency_ms", ".3g"), f"{s.get('mean_return', np.nan):.3f}"]
            lines.append("| " + " | ".join(cols) + " |")
        if gone:
            lines += ["", "Not run: " + "; ".join(f"{a} ({why})" for a, why in gone) + "."]
        out[env] = "\n".join(lines)
    return out


def plot(summary: Sequence[Mapping], path: Path) -> None:
    """Bars with 95 % intervals for each metric of one env, and the latency (log scale)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    metrics = summary[0]["metrics"]
    names = summary_keys(metrics)
    panels = [(names[k], k, kind) for k, kind in metrics.items()] + [("latency_ms", "latency per decision (ms)", "log")]
    fig, axes = plt.subplots(1, len(panels), figsize=(3.2 * len(panels), 3.4), squeeze=False)
    labels = [s["agent"] for s in summary]
    x = np.arange(len(summary))
    for ax, (name, title, kind) in zip(axes[0], panels):
        vals = np.array([s.get(name, np.nan) for s in summary], float)
        ci = np.array([s.get(ci_key(name), (np.nan, np.nan)) for s in summary], float)
        err = np.vstack([np.maximum(vals - ci[:, 0], 0), np.maximum(ci[:, 1] - vals, 0)])
        ax.bar(x, np.nan_to_num(vals), yerr=np.nan_to_num(err), capsize=3, color=[f"C{i}" for i in x])
        ax.set_xticks(x, labels, rotation=30, ha="right", fontsize=8)
        ax.set_title(title, fontsize=9)
        if kind == "log":
            ax.set_yscale("log")
        elif kind in ("rate", "fraction"):
            ax.set_ylim(0, 1.05)
    fig.suptitle(f"{summary[0]['env']} (bars: 95 % intervals)", fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    save_figure(fig, path)
    plt.close(fig)


@hydra_app("benchmark")
def main(cfg: DictConfig, run_dir: Path) -> dict:
    out = run_benchmark(cfg, run_dir)
    for table in out["tables"].values():
        log.info("\n%s", table)
    log.info("ran %d cell(s), skipped %d already done, %d without a checkpoint -> %s/{episodes.csv, summary.csv, "
             "table.md, plots/}", len(out["ran"]), len(out["skipped"]), len(out["missing"]), run_dir)
    figures = {f"{s['agent']}_{s['env']}_{k}": round(float(s[k]), 4) for s in out["summary"]
               for k in ("success_rate", "latency_ms") if k in s}
    print(json.dumps(figures))
    return figures


if __name__ == "__main__":
    main()
