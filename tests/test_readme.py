"""The README is the entry point: short, naming the papers, its links alive, its examples running.

The Python examples run in order in one namespace, as a reader would paste them; the app
commands run as written in a scratch directory. Both compile Taichi solvers, train or plan, so
they are integration tests; the checks of the text itself are fast.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
TEXT = README.read_text(encoding="utf-8")
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.MULTILINE | re.DOTALL)


def blocks(language: str) -> list[str]:
    return [body for lang, body in FENCE.findall(TEXT) if lang == language]


def app_commands() -> list[str]:
    return [line.split("  #")[0].strip() for body in blocks("bash") for line in body.splitlines()
            if line.startswith("python -m taigym.apps.")]


def test_readme_is_an_entry_point():
    assert len(TEXT.splitlines()) <= 300
    assert not re.search(r"seeds? 00\d", TEXT, re.IGNORECASE), "name the papers, not their file numbers"
    assert blocks("python") and app_commands()


def test_readme_links_point_at_files():
    for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", TEXT):
        if "://" not in target:
            assert (ROOT / target).is_file(), target


@pytest.mark.integration
def test_python_examples_run(capsys):
    namespace: dict = {"__name__": "__readme__"}
    for code in blocks("python"):
        exec(compile(code, str(README), "exec"), namespace)
    out = capsys.readouterr().out
    assert out.startswith("True"), out  # the sqp episode succeeds
    assert "fill" in out  # the bad argument's error names it


@pytest.mark.integration
@pytest.mark.parametrize("command", app_commands())
def test_app_commands_run(command, tmp_path):
    env = dict(os.environ, WANDB_MODE="disabled", TAIGYM_FAST_COMPILE="1")
    argv = [sys.executable] + shlex.split(command)[1:]
    done = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
