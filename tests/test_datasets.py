"""Expert datasets (``python -m taigym.apps.datasets``): recorded as Minari datasets, resumable,
written atomically, and replayable: each episode holds its seed and task, so that
``recover_environment()`` and its actions rerun it to the recorded outcome."""

from __future__ import annotations

import json

import minari
import numpy as np
import pytest

from taigym.apps.datasets import record
from taigym.data import collect as collect_mod
from taigym.data import episode_metadata, read_minari, replay


def compose(overrides: list[str]):
    from hydra import compose as hydra_compose
    from hydra import initialize_config_module

    with initialize_config_module("taigym.conf", version_base="1.3"):
        return hydra_compose(config_name="datasets", overrides=overrides)


def check_replays(ds, episodes: int) -> None:
    """Load, recover the env, replay every episode from its stored task and actions: it ends as
    recorded (every recorded info of the last step, the rewards)."""
    assert ds.total_episodes == episodes
    env = ds.recover_environment()
    try:
        metas = episode_metadata(ds)
        for ep, data, meta in zip(read_minari(ds), ds.iterate_episodes(), metas):
            assert ep.task is not None and json.loads(meta["options"]["task"]) == ep.task
            info, rewards = replay(env, ep)
            assert len(rewards) == len(ep)
            np.testing.assert_allclose(rewards, data.rewards, rtol=1e-6, atol=1e-9)
            for key, values in data.infos.items():
                if key != "task_index":
                    assert float(info[key]) == pytest.approx(float(values[-1]), rel=1e-6, abs=1e-9, nan_ok=True), key
    finally:
        env.close()


def test_datasets_app_records_resumes_and_replays(tmp_path, monkeypatch):
    """pour_simplified with its expert (sqp): an interrupted recording leaves no dataset, the
    rerun records only the missing episodes, and every episode replays to its outcome."""
    monkeypatch.delenv("MINARI_DATASETS_PATH", raising=False)
    cfg = compose(["env=pour_simplified", "agent=expert", "episodes=3", "start=4", f"out={tmp_path}",
                   "progress=false", "success_only=false"])
    real, calls = collect_mod.rollout, []

    def interrupted(*a, **k):
        if len(calls) == 2:
            raise KeyboardInterrupt
        calls.append(k["task_index"])
        return real(*a, **k)

    monkeypatch.setattr(collect_mod, "rollout", interrupted)
    with pytest.raises(KeyboardInterrupt):
        record(cfg)
    dataset_id = "taigym/pour_simplified/sqp-v0"
    assert not (tmp_path / dataset_id).exists()                      # nothing half-written
    calls.clear()
    monkeypatch.setattr(collect_mod, "rollout", lambda *a, **k: calls.append(k["task_index"]) or real(*a, **k))
    summary = record(cfg)
    assert calls == [6]                                               # only the missing episode ran
    assert summary["dataset_id"] == dataset_id and summary["agent"] == "sqp" and summary["episodes"] == 3
    # rerunning the finished command does nothing
    calls.clear()
    assert record(cfg)["rebuilt"] is False and calls == []

    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path))
    ds = minari.load_dataset(dataset_id)
    assert ds.total_steps == summary["steps"]
    assert set(next(ds.iterate_episodes()).infos) >= {"success", "in_target", "spilled", "in_source", "time"}
    check_replays(ds, 3)
    # bc trains from it (by id, under MINARI_DATASETS_PATH)
    import gymnasium as gym

    from taigym.training import bc
    from taigym.training.loggers import NullLogger

    agent = bc.train(lambda: gym.make("taigym/Pour-v0", fidelity="simplified"),
                     dict(dataset=dataset_id, success_only=False, hidden=[32], max_epochs=2, eval_episodes=0,
                          progress=False), tmp_path / "bc", NullLogger())
    assert agent.meta["labels"] == summary["steps"] and agent.meta["source"] == dataset_id


def test_datasets_app_refuses_other_settings_in_the_same_staging(tmp_path):
    cfg = compose(["env=pour_simplified_tilt", "agent=random", "episodes=1", f"out={tmp_path}", "progress=false",
                   "success_only=false"])
    record(cfg)
    with pytest.raises(ValueError, match="another configuration.*seed"):
        record(compose(["env=pour_simplified_tilt", "agent=random", "episodes=1", f"out={tmp_path}",
                        "progress=false", "success_only=false", "seed=5"]))


@pytest.mark.integration
@pytest.mark.parametrize("env", ["transport", "multicontact", "pour", "transport3d"])
def test_expert_datasets_replay_on_the_other_envs(tmp_path, env):
    """One episode of the env's expert (sfrrt, stance, sqp in FLIP: 15-70 s each on a loaded 2-core
    machine)."""
    summary = record(compose([f"env={env}", "agent=expert", "episodes=1", f"out={tmp_path}", "progress=false",
                              "success_only=false"]))
    check_replays(minari.MinariDataset(tmp_path / summary["dataset_id"] / "data"), 1)


@pytest.mark.slow
def test_expert_dataset_replays_on_pour3d(tmp_path):
    """Pour3D-v0: the 3D FLIP solver, minutes per episode."""
    summary = record(compose(["env=pour3d", "agent=expert", "episodes=1", f"out={tmp_path}", "progress=false",
                              "success_only=false"]))
    check_replays(minari.MinariDataset(tmp_path / summary["dataset_id"] / "data"), 1)


def test_datasets_app_resumes_when_only_the_learner_defaults_changed(tmp_path, monkeypatch):
    """env.learner (bc's and dagger's feature defaults) does not change a recorded episode: a
    recording interrupted before such a change resumes after it (it refused: "env differ")."""
    args = ["env=pour_simplified_tilt", "agent=random", f"out={tmp_path}", "progress=false", "success_only=false"]
    record(compose(args + ["episodes=1"]))
    calls, real = [], collect_mod.rollout
    monkeypatch.setattr(collect_mod, "rollout", lambda *a, **k: calls.append(k["task_index"]) or real(*a, **k))
    summary = record(compose(args + ["episodes=2", "env.learner.features=none", "env.learner.ignore_obs=[3]"]))
    assert calls == [1] and summary["episodes"] == 2
