"""Expert demonstrations as a Minari dataset.

```bash
python -m taigym.apps.demos env=pour agent=sqp episodes=200                 # fidelity=simplified
python -m taigym.apps.demos env=pour agent=scripted episodes=50 out=data/minari workers=2
python -m taigym.apps.demos env=pour agent=sqp episodes=20 agent.time_limit=1.0 fidelity=particles
```

Runs the expert on the first ``episodes`` tasks of the train split (from ``start``; episode i
is seeded ``seed + start + i``), keeps the successful episodes (``success_only=false`` keeps
all; the number filtered out is reported), and writes the Minari dataset ``dataset_id``
(default ``taigym/<env>-<fidelity>/<agent>-v0``) under ``out`` (default
``$MINARI_DATASETS_PATH``, else ``~/.minari/datasets``): ``minari.load_dataset(dataset_id)``
with ``MINARI_DATASETS_PATH=out`` reads it, as does ``bc``'s ``dataset=`` option.
Observations are the env's (``obs_mode``), actions the expert's, and the infos hold per-step
``in_source``, ``in_target``, ``spilled``, ``in_flight``, ``success``, ``time`` and the
train-split ``task_index``.

Resuming: every episode is written as soon as it ends (atomically) to
``out/.staging/<dataset id>/episodes/``; rerunning the same command after an interruption
reruns only the missing episodes, then assembles the dataset (atomically: it appears whole or
not at all). Rerunning a finished command does nothing; a larger ``episodes`` records the new
episodes only and rebuilds the dataset. ``overwrite=true`` starts over.

Arguments (``key=value``): ``env`` (pour), ``agent`` (sqp; any expert of
``taigym.agents.make``), ``episodes`` (10), ``fidelity`` (simplified | particles),
``obs_mode`` (features | lip), ``split`` (train | eval), ``start`` (0), ``seed`` (0), ``out``,
``dataset_id``, ``workers`` (1: in this process; k > 1: Ray if installed, local unless
``RAY_ADDRESS`` is set, else multiprocessing), ``success_only`` (true), ``overwrite`` (false),
``progress`` (true), and ``agent.<option>=value`` for the expert's options. The last line
printed is a JSON summary.
"""

from __future__ import annotations

import ast
import functools
import json
import shutil
import sys
import time

ENV_IDS = {"pour": "taigym/Pour-v0"}
DEFAULTS = dict(env="pour", agent="sqp", episodes=10, fidelity="simplified", obs_mode="features",
                split="train", start=0, seed=0, out=None, dataset_id=None, workers=1, success_only=True,
                overwrite=False, progress=True)


def _value(text: str):
    low = text.lower()
    if low in ("true", "yes", "on"):
        return True
    if low in ("false", "no", "off"):
        return False
    if low in ("null", "none", "~"):
        return None
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


def parse_args(argv: list[str]) -> tuple[dict, dict]:
    """``key=value`` arguments -> (options, expert options); unknown keys raise ValueError."""
    cfg, agent_cfg = dict(DEFAULTS), {}
    for arg in argv:
        if arg in ("-h", "--help"):
            print(__doc__)
            raise SystemExit(0)
        key, sep, val = arg.lstrip("+").partition("=")
        if not sep:
            raise ValueError(f"arguments are key=value, got {arg!r}")
        if key.startswith("agent."):
            agent_cfg[key[6:]] = _value(val)
        elif key in cfg:
            cfg[key] = _value(val) if key not in ("out", "dataset_id", "env", "agent") else val
        else:
            raise ValueError(f"unknown argument {key!r}; accepted: {', '.join(DEFAULTS)}, agent.<option>")
    if cfg["env"] not in ENV_IDS and cfg["env"] not in ENV_IDS.values():
        raise ValueError(f"env must be one of {', '.join(ENV_IDS)}, got {cfg['env']!r}")
    if cfg["fidelity"] not in ("simplified", "particles"):
        raise ValueError(f"fidelity must be simplified or particles, got {cfg['fidelity']!r}")
    if cfg["obs_mode"] not in ("features", "lip"):
        raise ValueError(f"obs_mode must be features or lip (flat observations), got {cfg['obs_mode']!r}")
    if cfg["split"] not in ("train", "eval"):
        raise ValueError(f"split must be train or eval, got {cfg['split']!r}")
    if not isinstance(cfg["episodes"], int) or cfg["episodes"] < 1:
        raise ValueError(f"episodes must be a positive integer, got {cfg['episodes']!r}")
    return cfg, agent_cfg


def _make_env(env_id: str, fidelity: str, obs_mode: str):
    import gymnasium as gym

    import taigym  # noqa: F401  (registers the ids)

    return gym.make(env_id, fidelity=fidelity, obs_mode=obs_mode)


def run(cfg: dict, agent_cfg: dict | None = None) -> dict:
    """Record the dataset described by ``cfg`` (see the module docstring); returns the summary."""
    import taigym
    from taigym.data import dataset_exists, datasets_root, open_minari, write_minari
    from taigym.data.collect import collect, make_job, task_family

    agent_cfg = dict(agent_cfg or {})
    t_start = time.perf_counter()
    env_id = ENV_IDS.get(cfg["env"], cfg["env"])
    family = [k for k, v in ENV_IDS.items() if v == env_id][0]
    dataset_id = cfg["dataset_id"] or f"taigym/{family}-{cfg['fidelity']}/{cfg['agent']}-v0"
    root = datasets_root(cfg["out"])
    root.mkdir(parents=True, exist_ok=True)
    staging = root / ".staging" / dataset_id.replace("/", "__")
    identity = {"env": env_id, "agent": cfg["agent"], "agent_cfg": agent_cfg, "fidelity": cfg["fidelity"],
                "obs_mode": cfg["obs_mode"], "split": cfg["split"], "start": cfg["start"], "seed": cfg["seed"],
                "success_only": cfg["success_only"]}
    if cfg["overwrite"]:
        shutil.rmtree(staging, ignore_errors=True)
    ident_file = staging / "run.json"
    if ident_file.is_file():
        old = json.loads(ident_file.read_text())
        if old != json.loads(json.dumps(identity)):
            raise ValueError(f"{staging} holds episodes of another configuration ({old}); rerun with the same "
                             "arguments, another dataset_id, or overwrite=true")
    elif dataset_exists(dataset_id, root) and not cfg["overwrite"]:
        raise FileExistsError(f"Minari dataset {dataset_id!r} already exists in {root} (not made by this "
                              "command); choose another dataset_id or pass overwrite=true")
    staging.mkdir(parents=True, exist_ok=True)
    ident_file.write_text(json.dumps(identity, indent=1))

    make_env = functools.partial(_make_env, env_id, cfg["fidelity"], cfg["obs_mode"])
    env = make_env()
    expert = taigym.agents.make(cfg["agent"], env, **agent_cfg)
    tasks = taigym.envs.tasks(task_family(env), split=cfg["split"])
    if cfg["start"] + cfg["episodes"] > len(tasks):
        raise ValueError(f"the {cfg['split']} split has {len(tasks)} tasks; start + episodes = "
                         f"{cfg['start'] + cfg['episodes']}")
    idx = range(cfg["start"], cfg["start"] + cfg["episodes"])
    jobs = [make_job(i, tasks[i], seed=cfg["seed"] + i, relabel="none") for i in idx]
    episodes = collect(make_env, expert, jobs, out_dir=staging / "episodes", workers=cfg["workers"], env=env,
                       progress=cfg["progress"], desc=f"{cfg['agent']} demos")
    kept = [e for e in episodes if e.success or not cfg["success_only"]]
    n_success = sum(e.success for e in episodes)

    # the dataset: rebuilt only when it does not already hold exactly these episodes
    manifest = {"episodes": [j["key"] for j in jobs], "kept": len(kept)}
    manifest_file = staging / "assembled.json"
    up_to_date = (dataset_exists(dataset_id, root) and manifest_file.is_file()
                  and json.loads(manifest_file.read_text()) == manifest)
    if not kept:
        raise RuntimeError(f"none of the {len(episodes)} expert episodes succeeded: no dataset written")
    if not up_to_date:
        write_minari(kept, dataset_id, env, root=root, algorithm_name=f"taigym/{cfg['agent']}",
                     description=(f"{cfg['agent']} expert on {env_id} (fidelity={cfg['fidelity']}, "
                                  f"obs_mode={cfg['obs_mode']}), {cfg['split']} tasks {cfg['start']}.."
                                  f"{cfg['start'] + cfg['episodes'] - 1}, "
                                  f"{'successful episodes only' if cfg['success_only'] else 'all episodes'}"),
                     overwrite=True)
        manifest_file.write_text(json.dumps(manifest))
    ds = open_minari(root / dataset_id)
    summary = {"dataset_id": dataset_id, "path": str((root / dataset_id).resolve()), "episodes": len(episodes),
               "successful": int(n_success), "kept": len(kept), "filtered": len(episodes) - len(kept),
               "steps": int(ds.total_steps), "expert_seconds": round(sum(e.expert_seconds for e in episodes), 3),
               "rebuilt": not up_to_date, "seconds": round(time.perf_counter() - t_start, 3)}
    return summary


def main(argv: list[str] | None = None) -> int:
    cfg, agent_cfg = parse_args(sys.argv[1:] if argv is None else argv)
    s = run(cfg, agent_cfg)
    print(f"{s['episodes']} episodes of {cfg['agent']}: {s['successful']} successful, kept {s['kept']}, "
          f"filtered out {s['filtered']}; {s['steps']} steps -> Minari dataset {s['dataset_id']!r} at {s['path']}"
          + ("" if s["rebuilt"] else " (already up to date)"))
    print(json.dumps(s))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
