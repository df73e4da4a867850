"""The docs site's generated parts (docs/hooks.py): env pages from the env docstrings, benchmark
tables from result files, the validation table from its summary. `make docs` builds the whole
site strictly; these tests pin down what the generators produce."""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
ENV_PAGES = ("multicontact", "pour", "pour3d", "transport", "transport3d")  # docs/envs/<name>.md
SECTIONS = ("## Action space", "## Observation space", "## Rewards", "## Episode end", "## Info",
            "## Arguments", "## Version history")


def load_hooks():
    spec = importlib.util.spec_from_file_location("taigym_docs_hooks", ROOT / "docs" / "hooks.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


hooks = load_hooks()


def test_every_registered_env_has_a_page():
    registered = re.findall(r'id="taigym/(\w+)-v\d+"', (ROOT / "taigym/envs/__init__.py").read_text())
    assert registered and sorted({name.lower() for name in registered}) == sorted(ENV_PAGES)   # a page per env, all versions


@pytest.mark.parametrize("module", ENV_PAGES)
def test_env_page_is_the_env_docstring(module):
    page = (ROOT / "docs" / "envs" / f"{module}.md").read_text(encoding="utf-8")
    assert f"<!-- taigym:envdoc taigym.envs.{module} -->" in page
    md = hooks.docstring_markdown(f"taigym.envs.{module}", f"envs/{module}.md")
    for section in SECTIONS:
        assert section in md, f"taigym/envs/{module}.py's docstring has no '{section}' section"
    assert "``" not in md and not re.search(r":(class|mod|func|data):`", md)  # RST became Markdown
    assert not re.search(r"\bseeds? 00\d", md)  # papers are named


def test_docstring_markup_becomes_markdown(tmp_path, monkeypatch):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "mod.py").write_text(
        '"""``taigym/X-v0``: see :class:`~taigym.envs.pour_tasks.PourTask` and\n'
        ':mod:`taigym.sim`."""\n')
    monkeypatch.setattr(hooks, "ROOT", tmp_path)
    md = hooks.docstring_markdown("pkg.mod", "envs/x.md")
    assert md == "`taigym/X-v0`: see `PourTask` and\n`taigym.sim`."
    with pytest.raises(hooks.PluginError):
        hooks.docstring_markdown("pkg.missing", "envs/x.md")


def test_every_result_file_reaches_the_benchmark_page(tmp_path, monkeypatch):
    results = tmp_path / "results"
    results.mkdir()
    (results / "a_table.md").write_text("# Suite\n\n| agent | success |\n|---|---|\n| sqp | 0.97 |\n")
    (results / "b_run.csv").write_text("agent,success\nbc,0.91\nrandom,0.00\n")
    (results / "b_run.json").write_text(json.dumps({"title": "BC run", "date": "2026-11-28",
                                                    "command": "python -m taigym.apps.benchmark"}))
    (results / "b_run.png").write_bytes(b"\x89PNG")
    monkeypatch.setattr(hooks, "DOCS", tmp_path)
    md = hooks.results_markdown("results", "benchmarks.md")
    assert md.index("## Suite") < md.index("## BC run")  # files in name order, titles kept
    assert "| sqp | 0.97 |" in md and "| bc | 0.91 |" in md and "| random | 0.00 |" in md
    assert "*date: 2026-11-28*" in md and "python -m taigym.apps.benchmark" in md
    assert "![b_run](results/b_run.png)" in md


def test_validation_summary_replaces_the_fallback(tmp_path, monkeypatch):
    monkeypatch.setattr(hooks, "DOCS", tmp_path)
    page = "A\n<!-- taigym:validation validation -->\ntoday's table\n<!-- /taigym:validation -->\nB"

    class Page:
        class file:
            src_uri = "validation.md"

    assert "today's table" in hooks.on_page_markdown(page, Page, None, None)
    (tmp_path / "validation").mkdir()
    (tmp_path / "validation" / "summary.json").write_text(json.dumps({"checks": [
        {"name": "dam break", "error": 0.043, "tolerance": 0.1, "passed": True},
        {"name": "sloshing 3D", "error": 0.12, "tolerance": 0.05, "passed": False}]}))
    (tmp_path / "validation" / "dam_break.png").write_bytes(b"\x89PNG")
    md = hooks.on_page_markdown(page, Page, None, None)
    assert "today's table" not in md and md.startswith("A\n") and md.endswith("\nB")
    assert "| name | error | tolerance | passed |" in md
    assert "| dam break | 0.043 | 0.1 | yes |" in md and "| sloshing 3D | 0.12 | 0.05 | **no** |" in md
    assert "![dam_break](validation/dam_break.png)" in md
