"""The package's architecture (DESIGN.md §1), checked on its source: one-way layers and no import
cycles (import-linter's contracts in pyproject.toml, imports inside functions included), no
private name used across modules, the shared constants defined once."""

from __future__ import annotations

import ast
import re
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "taigym"


def test_import_linter_contracts_are_kept(capsys):
    from importlinter.api import read_configuration
    from importlinter.application.use_cases import lint_imports

    config = str(PACKAGE.parent / "pyproject.toml")
    names = {c["name"] for c in read_configuration(config)["contracts_options"]}
    assert {"one-way layers", "sim imports nothing else of taigym",
            "no import cycles (between the modules of every package)"} <= names
    kept = lint_imports(config_filename=config, cache_dir=None, no_logo=True)
    assert kept, capsys.readouterr().out


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def test_no_private_name_is_used_across_modules():
    """``from m import _x``, ``import m._x``, ``alias._x`` on an imported module: none."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text())
        modules = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                for a in node.names:
                    modules.add(a.asname or a.name)
                    if _private(a.name):
                        found.append(f"{path.relative_to(PACKAGE)}:{node.lineno} imports {a.name}")
                if any(_private(p) for p in (node.module or "").split(".")):
                    found.append(f"{path.relative_to(PACKAGE)}:{node.lineno} imports from {node.module}")
            elif isinstance(node, ast.Import):
                for a in node.names:
                    modules.add(a.asname or a.name.split(".")[0])
                    if any(_private(p) for p in a.name.split(".")):
                        found.append(f"{path.relative_to(PACKAGE)}:{node.lineno} imports {a.name}")
        for node in ast.walk(tree):
            if (isinstance(node, ast.Attribute) and _private(node.attr) and isinstance(node.value, ast.Name)
                    and node.value.id in modules):
                found.append(f"{path.relative_to(PACKAGE)}:{node.lineno} uses {node.value.id}.{node.attr}")
    assert not found, found


def test_shared_constants_are_defined_once():
    """GRAVITY and CONTROL_DT are assigned in taigym/sim/constants.py and imported elsewhere."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = str(path.relative_to(PACKAGE))
        if rel == "sim/constants.py":
            continue
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if re.match(r"\s*(GRAVITY|CONTROL_DT)\s*=", line):
                found.append(f"{rel}:{n}: {line.strip()}")
    assert not found, found


def test_no_seed_numbers_for_the_papers():
    """The papers are named (Pan & Manocha 2016, ...), never by the seed numbers of documents
    that are not in the repository."""
    found = [f"{p.relative_to(PACKAGE)}:{n}" for p in sorted(PACKAGE.rglob("*")) if p.suffix in (".py", ".yaml")
             for n, line in enumerate(p.read_text().splitlines(), 1) if re.search(r"[Ss]eeds? 00[0-4]", line)]
    assert not found, found
