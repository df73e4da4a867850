"""Experiment loggers: one small protocol for the trainers (taigym.training) and the apps.

```python
logger.log({"loss": 0.1, "success_rate": 0.8}, step=1000)      # scalars
logger.log_video(frames, step=1000, name="eval")                # list of (H, W, 3) uint8 frames
logger.log_artifact(run_dir / "agent.zip", name="ppo", kind="checkpoint")
logger.finish()
```

* :class:`NullLogger` does nothing (``logger=none``).
* :class:`ConsoleLogger` prints each call and appends the scalars to ``metrics.csv`` in the run
  directory (a column per key; the header grows when new keys appear); videos go to
  ``videos/<name>_<step>.mp4`` (``logger=console``).
* :class:`WandbLogger` logs to Weights & Biases (``logger=wandb``): scalars, the run's config,
  videos (``wandb.Video``) and checkpoints as artifacts. It runs **offline** unless the user sets
  ``WANDB_MODE=online`` (``wandb.init(mode=os.environ.get("WANDB_MODE", "offline"))``), writing
  ``<run_dir>/wandb/offline-run-*`` that ``wandb sync`` can upload later. Rerunning in the same run
  directory continues the same W&B run (its id is kept in ``<run_dir>/wandb_run_id``).

``make_logger(cfg, run_dir, config)`` builds one from the Hydra ``logger`` group (``name`` is
``none``, ``console`` or ``wandb``; the other keys are the class's options).
"""

from __future__ import annotations

import csv
import math
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np

VIDEO_FPS = 20  # one frame per 0.05 s control step: real time


@runtime_checkable
class Logger(Protocol):
    def log(self, metrics: dict[str, float], step: int) -> None: ...

    def log_video(self, frames: list[np.ndarray], step: int, name: str = "video") -> None: ...

    def log_artifact(self, path: str | Path, name: str, kind: str = "checkpoint") -> None: ...

    def finish(self) -> None: ...


class NullLogger:
    """Logs nothing."""

    def log(self, metrics: dict[str, float], step: int) -> None:
        pass

    def log_video(self, frames: list[np.ndarray], step: int, name: str = "video") -> None:
        pass

    def log_artifact(self, path: str | Path, name: str, kind: str = "checkpoint") -> None:
        pass

    def finish(self) -> None:
        pass


def _scalars(metrics: Mapping[str, Any]) -> dict[str, float]:
    out = {}
    for k, v in metrics.items():
        if isinstance(v, (bool, np.bool_)) or isinstance(v, (int, float, np.integer, np.floating)):
            out[k] = float(v)
        elif isinstance(v, np.ndarray) and v.size == 1:
            out[k] = float(v.reshape(()))
    return out


def write_video(frames: list[np.ndarray], path: Path, fps: int = VIDEO_FPS) -> Path:
    """Write ``frames`` to an mp4 file through a temporary file (never a torn video)."""
    import imageio.v2 as imageio

    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.stem}.tmp{path.suffix}")
    with imageio.get_writer(tmp, fps=fps, codec="libx264", macro_block_size=8) as writer:
        for frame in frames:
            writer.append_data(np.asarray(frame, np.uint8))
    os.replace(tmp, path)
    return path


class ConsoleLogger:
    """Prints every call; appends scalars to ``<run_dir>/metrics.csv`` (column ``step`` first)."""

    def __init__(self, run_dir: str | Path, *, filename: str = "metrics.csv", print_every: int = 1,
                 quiet: bool = False):
        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.path = self.run_dir / filename
        self.print_every = max(int(print_every), 1)
        self.quiet = bool(quiet)
        self._calls = 0
        self._fields: list[str] = []
        if self.path.exists():
            with self.path.open(newline="") as f:
                self._fields = next(csv.reader(f), [])

    def log(self, metrics: dict[str, float], step: int) -> None:
        values = _scalars(metrics)
        if not values:
            return
        self._calls += 1
        if not self.quiet and (self._calls - 1) % self.print_every == 0:
            body = "  ".join(f"{k}={v:.4g}" for k, v in values.items())
            print(f"[step {int(step)}] {body}", flush=True)
        row = {"step": int(step), **values}
        new = [k for k in row if k not in self._fields]
        if new or not self.path.exists():
            # the header grows: rewrite the file once with the wider header
            old_rows = []
            if self.path.exists():
                with self.path.open(newline="") as f:
                    old_rows = list(csv.DictReader(f))
            self._fields = (self._fields or ["step"]) + [k for k in new if k != "step"]
            if "step" not in self._fields:
                self._fields.insert(0, "step")
            tmp = self.path.with_name(f".{self.path.name}.tmp")
            with tmp.open("w", newline="") as f:
                w = csv.DictWriter(f, fieldnames=self._fields)
                w.writeheader()
                w.writerows(old_rows)
                w.writerow(row)
            os.replace(tmp, self.path)
        else:
            with self.path.open("a", newline="") as f:
                csv.DictWriter(f, fieldnames=self._fields).writerow(row)

    def log_video(self, frames: list[np.ndarray], step: int, name: str = "video") -> None:
        if not frames:
            return
        path = write_video(frames, self.run_dir / "videos" / f"{name.replace('/', '_')}_{int(step)}.mp4")
        if not self.quiet:
            print(f"[step {int(step)}] video {name}: {path} ({len(frames)} frames)", flush=True)

    def log_artifact(self, path: str | Path, name: str, kind: str = "checkpoint") -> None:
        if not self.quiet:
            print(f"{kind} {name}: {path}", flush=True)

    def finish(self) -> None:
        pass


class WandbLogger:
    """Weights & Biases, offline unless ``WANDB_MODE=online`` (or ``mode=``) says otherwise.

    ``print_to_console=True`` also echoes scalars as :class:`ConsoleLogger` does (and writes its
    CSV)."""

    def __init__(self, run_dir: str | Path, *, config: Mapping | None = None, project: str = "taigym",
                 entity: str | None = None, group: str | None = None, name: str | None = None,
                 tags: list[str] | tuple = (), mode: str | None = None, job_type: str | None = None,
                 print_to_console: bool = False, resume: bool = True):
        import wandb

        self.wandb = wandb
        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        mode = mode or os.environ.get("WANDB_MODE", "offline")
        id_file = self.run_dir / "wandb_run_id"
        run_id = id_file.read_text().strip() if resume and id_file.exists() else None
        self.run = wandb.init(mode=mode, dir=str(self.run_dir), config=dict(config or {}),
                              project=project, entity=entity, group=group, name=name,
                              tags=list(tags) or None, job_type=job_type, id=run_id,
                              resume="allow" if run_id else None, reinit="finish_previous")
        if self.run is not None and getattr(self.run, "id", None) and not id_file.exists():
            tmp = id_file.with_name(f".{id_file.name}.tmp")
            tmp.write_text(str(self.run.id))
            os.replace(tmp, id_file)
        self.console = ConsoleLogger(self.run_dir) if print_to_console else None
        self._last_step = -math.inf

    def log(self, metrics: dict[str, float], step: int) -> None:
        values = _scalars(metrics)
        if not values:
            return
        # W&B needs non-decreasing steps: a late value for an earlier step goes to the current one
        step = int(max(step, self._last_step))
        self._last_step = step
        self.run.log(values, step=step)
        if self.console is not None:
            self.console.log(values, step)

    def log_video(self, frames: list[np.ndarray], step: int, name: str = "video") -> None:
        if not frames:
            return
        path = write_video(frames, self.run_dir / "videos" / f"{name.replace('/', '_')}_{int(step)}.mp4")
        step = int(max(step, self._last_step))
        self._last_step = step
        self.run.log({name: self.wandb.Video(str(path), format="mp4")}, step=step)

    def log_artifact(self, path: str | Path, name: str, kind: str = "checkpoint") -> None:
        path = Path(path)
        safe = "".join(c if c.isalnum() or c in "-_." else "-" for c in name)
        art = self.wandb.Artifact(safe, type=kind)
        if path.is_dir():
            art.add_dir(str(path))
        else:
            art.add_file(str(path))
        self.run.log_artifact(art)

    def finish(self) -> None:
        if self.run is not None:
            self.run.finish()
            self.run = None


def make_logger(cfg: Mapping | None, run_dir: str | Path, config: Mapping | None = None):
    """The logger named by ``cfg["name"]`` (``none``, ``console``, ``wandb``), other keys as options."""
    opts = dict(cfg or {})
    name = opts.pop("name", "none") or "none"
    if name == "none":
        if opts:
            raise ValueError(f"logger 'none' takes no options; got {', '.join(sorted(opts))}")
        return NullLogger()
    if name == "console":
        return ConsoleLogger(run_dir, **opts)
    if name == "wandb":
        return WandbLogger(run_dir, config=config, **opts)
    raise ValueError(f"unknown logger {name!r}; accepted: none, console, wandb")


__all__ = ["ConsoleLogger", "Logger", "NullLogger", "WandbLogger", "make_logger", "write_video"]
