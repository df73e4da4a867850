"""Expert datasets in Minari's format, for every env (a Hydra app).

    python -m taigym.apps.datasets env=pour_simplified agent=expert episodes=200   # sqp's pours
    python -m taigym.apps.datasets env=transport agent=expert episodes=50 workers=2 # sfrrt's carries
    python -m taigym.apps.datasets env=multicontact agent=expert episodes=5 out=data/minari
    python -m taigym.apps.datasets env=pour agent=sqp episodes=20 planner.time_limit=2

Runs the agent (``agent=expert``: the env's own expert) on tasks ``start .. start + episodes - 1``
of the ``split`` (episode i reset with seed ``seed + i``), keeps the successful episodes
(``success_only=false`` keeps all; the number filtered out is reported), and writes the Minari
dataset ``dataset_id`` (default ``taigym/<env>/<agent>-v0``) under ``out`` (default
``$MINARI_DATASETS_PATH``, else ``~/.minari/datasets``): ``minari.load_dataset(dataset_id)`` with
``MINARI_DATASETS_PATH=out`` reads it, as does ``bc``'s ``dataset=`` option. Observations are the
env's, actions the ones applied, the infos hold per step the env's episode metrics and ``time``
(and the split's ``task_index``), and each episode's metadata its reset seed and its task
(``options["task"]``: the task's ``to_dict()`` as JSON). So ``dataset.recover_environment()``
and :func:`taigym.data.replay` rerun any episode to its recorded outcome.

Resuming: every episode is written as soon as it ends (atomically) to
``out/.staging/<dataset id>/episodes/``; rerunning the same command after an interruption reruns
only the missing episodes, then assembles the dataset (atomically: it appears whole or not at
all). Rerunning a finished command does nothing; a larger ``episodes`` records the new episodes
only and rebuilds the dataset. ``overwrite=true`` starts over. Ends with one line of JSON.
Config: ``taigym/conf/datasets.yaml``.
"""

from __future__ import annotations

import json
import logging
import shutil
import time
from collections.abc import Mapping
from pathlib import Path

from omegaconf import DictConfig

from taigym.data import dataset_exists, datasets_root, open_minari, write_minari
from taigym.data.collect import collect, make_job
from taigym.training.loggers import make_logger

from .common import (agent_name, agent_options, build_agent, count, env_factory, eval_tasks, hydra_app, to_plain,
                     write_json)

log = logging.getLogger(__name__)


def episode_settings(env_cfg: dict) -> dict:
    """The env config without its learner defaults (``learner``)."""
    return {k: v for k, v in env_cfg.items() if k != "learner"}


def record(cfg: DictConfig | Mapping) -> dict:
    """Record the dataset ``cfg`` describes (module docstring); returns the summary."""
    plain = to_plain(cfg)
    t_start = time.perf_counter()
    env_cfg, agent_cfg = plain["env"], plain["agent"]
    name = agent_name(agent_cfg, env_cfg)
    episodes, start, workers = count("episodes", plain["episodes"]), count("start", plain["start"], 0), \
        count("workers", plain["workers"])
    tasks = eval_tasks(env_cfg, plain["split"], episodes, start)
    dataset_id = plain.get("dataset_id") or f"taigym/{env_cfg['name']}/{name}-v0"
    from minari.dataset.minari_dataset import parse_dataset_id

    parse_dataset_id(dataset_id)                      # ValueError on a malformed id, before any work
    root = datasets_root(plain.get("out"))
    staging = root / ".staging" / dataset_id.replace("/", "__")
    options = agent_options(agent_cfg, plain.get("planner"), env_cfg)
    # what the episodes depend on: not the env's defaults for learners (env.learner), which a
    # dataset serves but which do not change a recorded episode
    identity = json.loads(json.dumps({"env": episode_settings(env_cfg), "agent": name, "agent_options": options,
                                      "split": plain["split"], "start": start, "seed": plain["seed"],
                                      "success_only": plain["success_only"]}, default=str))
    if plain["overwrite"]:
        shutil.rmtree(staging, ignore_errors=True)
    ident_file = staging / "run.json"
    if ident_file.is_file():
        old = json.loads(ident_file.read_text())
        old["env"] = episode_settings(old.get("env") or {})         # run.json files that stored them
        if old != identity:
            changed = sorted(k for k in set(old) | set(identity) if old.get(k) != identity.get(k))
            raise ValueError(f"{staging} holds episodes of another configuration ({', '.join(changed)} differ); "
                             "rerun with the same arguments, another dataset_id, or overwrite=true")
    elif dataset_exists(dataset_id, root) and not plain["overwrite"]:
        raise FileExistsError(f"Minari dataset {dataset_id!r} already exists in {root} (not made by this command); "
                              "choose another dataset_id or pass overwrite=true")

    make_env = env_factory(env_cfg)
    env = make_env()
    try:
        expert = build_agent(name, env, options)
        staging.mkdir(parents=True, exist_ok=True)
        write_json(ident_file, identity)
        jobs = [make_job(start + i, task, seed=int(plain["seed"]) + start + i, relabel="none")
                for i, task in enumerate(tasks)]
        eps = collect(make_env, expert, jobs, out_dir=staging / "episodes", workers=workers, env=env,
                      progress=bool(plain["progress"]), desc=f"{name} on {env_cfg['name']}")
        kept = [e for e in eps if e.success or not plain["success_only"]]
        if not kept:
            raise ValueError(f"none of the {len(eps)} episodes of {name} succeeded: no dataset written "
                             "(success_only=false keeps them all)")
        # the dataset: rebuilt only when it does not already hold exactly these episodes
        manifest = {"episodes": [j["key"] for j in jobs], "kept": len(kept)}
        manifest_file = staging / "assembled.json"
        up_to_date = (dataset_exists(dataset_id, root) and manifest_file.is_file()
                      and json.loads(manifest_file.read_text()) == manifest)
        if not up_to_date:
            write_minari(kept, dataset_id, env, root=root, algorithm_name=f"taigym/{name}",
                         description=(f"{name} on {env_cfg['id']} ({env_cfg['name']}: {env_cfg.get('kwargs') or {}}), "
                                      f"{plain['split']} tasks {start}..{start + episodes - 1}, "
                                      f"{'successful episodes only' if plain['success_only'] else 'all episodes'}"),
                         overwrite=True)
            write_json(manifest_file, manifest)
    finally:
        env.close()
    ds = open_minari(root / dataset_id)
    return {"dataset_id": dataset_id, "path": str((root / dataset_id).resolve()), "agent": name,
            "env": env_cfg["name"], "episodes": len(eps), "successful": int(sum(e.success for e in eps)),
            "kept": len(kept), "filtered": len(eps) - len(kept), "steps": int(ds.total_steps),
            "expert_seconds": round(sum(e.expert_seconds for e in eps), 3), "rebuilt": not up_to_date,
            "seconds": round(time.perf_counter() - t_start, 3)}


@hydra_app("datasets")
def main(cfg: DictConfig, run_dir: Path) -> dict:
    s = record(cfg)
    logger = make_logger(to_plain(cfg).get("logger"), run_dir, config=to_plain(cfg))
    logger.log({k: v for k, v in s.items() if isinstance(v, (int, float))}, step=0)
    logger.log_artifact(s["path"], name=s["dataset_id"].replace("/", "-"), kind="dataset")
    logger.finish()
    log.info("%d episodes of %s on %s: %d successful, kept %d, filtered out %d; %d steps -> Minari dataset %r at %s%s",
             s["episodes"], s["agent"], s["env"], s["successful"], s["kept"], s["filtered"], s["steps"],
             s["dataset_id"], s["path"], "" if s["rebuilt"] else " (already up to date)")
    print(json.dumps(s))
    return s


if __name__ == "__main__":
    main()
