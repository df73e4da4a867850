"""MkDocs hooks: the parts of the site generated at build time from the code and result files.

A page asks for generated content with a marker (an HTML comment, invisible if left as is):

* ``<!-- taigym:envdoc taigym.envs.pour -->``: the module's docstring, read from its source file
  (not imported: the docs build needs neither Taichi nor torch), so an env page cannot drift
  from the env's code. RST markup (````x````, ``:class:`~a.B```) becomes Markdown code, and a
  paper still named by its file number in the project's reading list is named by its authors,
  with a link to the papers page.
* ``<!-- taigym:results results -->``: every result file under ``docs/results``, grouped by
  name: ``NAME.md`` is included as it is, ``NAME.csv`` becomes a table (or a download link when
  ``NAME.md`` exists), ``NAME.json`` (``title``, ``command``, ``date``, ``machine``, ``notes``)
  says where a CSV comes from, ``NAME.png`` is shown. Adding a file adds it to the page.
* ``<!-- taigym:validation validation -->`` ... ``<!-- /taigym:validation -->``: when
  ``docs/validation/summary.json`` exists, the text between the markers is replaced by a table
  generated from it (and every ``*.png`` of that folder); otherwise the text stays.
* ``<!-- taigym:include CHANGELOG.md -->``: a file of the repository, included as it is.

A marker whose source is missing stops the build (``PluginError``): the site never shows a page
with a silent hole.
"""

from __future__ import annotations

import ast
import csv
import io
import json
import posixpath
import re
from pathlib import Path

try:
    from mkdocs.exceptions import PluginError
except ImportError:  # the tests import this module without MkDocs installed
    PluginError = RuntimeError

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"

MARKER = re.compile(r"<!--\s*taigym:(envdoc|results|include)\s+(\S+)\s*-->")
VALIDATION = re.compile(r"<!--\s*taigym:validation\s+(\S+)\s*-->(.*?)<!--\s*/taigym:validation\s*-->",
                        re.DOTALL)

ROLE = re.compile(r":(?:class|mod|func|data|meth|attr|obj|exc):`(~?)([^`]+)`")
DOUBLE_BACKTICK = re.compile(r"``(.+?)``", re.DOTALL)


def _rel(page_src: str, target: str) -> str:
    """``target`` (a path under docs/) as a link relative to the page ``page_src``."""
    return posixpath.relpath(target, posixpath.dirname(page_src) or ".")


def docstring_markdown(module: str, page_src: str) -> str:
    """The docstring of ``module`` (e.g. ``taigym.envs.pour``) as Markdown."""
    path = ROOT.joinpath(*module.split(".")).with_suffix(".py")
    if not path.is_file():
        raise PluginError(f"{page_src}: envdoc {module}: no file {path}")
    doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8")))
    if not doc:
        raise PluginError(f"{page_src}: envdoc {module}: the module has no docstring")

    def role(m: re.Match) -> str:
        name = m.group(2).replace("\n", "").replace(" ", "")
        return f"`{name.rsplit('.', 1)[-1] if m.group(1) else name}`"

    doc = ROLE.sub(role, doc)
    return DOUBLE_BACKTICK.sub(lambda m: "`" + m.group(1).replace("\n", " ") + "`", doc)


def csv_table(text: str) -> str:
    rows = list(csv.reader(io.StringIO(text)))
    if not rows:
        return ""

    def line(cells):
        return "| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |"

    head, body = rows[0], rows[1:]
    return "\n".join([line(head), "|" + "---|" * len(head)] + [line(r) for r in body])


LINK = re.compile(r"\]\((?!https?:|#|/)([^)\s]+)\)")


def _rebase(md: str, folder: str, page_src: str) -> str:
    """Relative links of a file under docs/``folder``, rewritten for the page that includes it."""
    return LINK.sub(lambda m: f"]({_rel(page_src, posixpath.normpath(f'{folder}/{m.group(1)}'))})", md)


def _demote(md: str) -> str:
    """Headings one level down, so that an included file's ``#`` title sits under the page's."""
    return re.sub(r"^(#{1,5}) ", r"#\1 ", md, flags=re.MULTILINE)


def results_markdown(folder: str, page_src: str) -> str:
    root = DOCS / folder
    if not root.is_dir():
        raise PluginError(f"{page_src}: results folder docs/{folder} is missing")
    stems = sorted({p.stem for p in root.iterdir() if p.suffix in (".md", ".csv", ".png")})
    if not stems:
        return "*No result files yet.*"
    parts = []
    for stem in stems:
        md, table, meta, png = (root / f"{stem}{ext}" for ext in (".md", ".csv", ".json", ".png"))
        info = json.loads(meta.read_text(encoding="utf-8")) if meta.is_file() else {}
        link = _rel(page_src, f"{folder}/{stem}")
        if md.is_file():
            text = _rebase(md.read_text(encoding="utf-8").strip(), folder, page_src)
            parts.append(_demote(text) if text.startswith("# ") else f"## {stem}\n\n{text}")
        else:
            parts.append(f"## {info.get('title', stem)}")
        facts = [f"{k}: {info[k]}" for k in ("date", "machine", "load") if k in info]
        if facts:
            parts.append("*" + "; ".join(facts) + "*")
        if "command" in info:
            parts.append(f"```bash\n{info['command']}\n```")
        if "notes" in info:
            parts.append(str(info["notes"]))
        if table.is_file():
            if md.is_file():
                parts.append(f"Data: [{stem}.csv]({link}.csv)")
            else:
                parts.append(csv_table(table.read_text(encoding="utf-8")))
        if png.is_file():
            parts.append(f"![{stem}]({link}.png)")
    return "\n\n".join(parts)


def _cell(v) -> str:
    if isinstance(v, bool):
        return "yes" if v else "**no**"
    if isinstance(v, float):
        return f"{v:.4g}"
    if isinstance(v, (list, tuple)):
        return ", ".join(_cell(x) for x in v)
    return str(v).replace("|", "\\|").replace("\n", " ")


def summary_table(summary) -> str:
    """A Markdown table from a validation summary: a list of checks (dicts), a dict holding
    one (``checks``), or a dict of checks by name; otherwise key / value rows."""
    if isinstance(summary, dict) and isinstance(summary.get("checks"), (list, dict)):
        summary = summary["checks"]
    if isinstance(summary, dict) and summary and all(isinstance(v, dict) for v in summary.values()):
        summary = [{"check": k, **v} for k, v in summary.items()]
    if isinstance(summary, list) and summary and all(isinstance(r, dict) for r in summary):
        cols = list(dict.fromkeys(k for r in summary for k in r))
        lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
        lines += ["| " + " | ".join(_cell(r.get(c, "")) for c in cols) + " |" for r in summary]
        return "\n".join(lines)
    if isinstance(summary, dict):
        return "\n".join(["| key | value |", "|---|---|"]
                         + [f"| {k} | {_cell(v)} |" for k, v in summary.items()])
    raise PluginError(f"validation summary: cannot tabulate a {type(summary).__name__}")


def validation_markdown(folder: str, fallback: str, page_src: str) -> str:
    root = DOCS / folder
    summary = root / "summary.json"
    if not summary.is_file():
        return fallback
    parts = [summary_table(json.loads(summary.read_text(encoding="utf-8"))),
             f"Data: [summary.json]({_rel(page_src, f'{folder}/summary.json')})"]
    for png in sorted(root.glob("*.png")):
        parts.append(f"![{png.stem}]({_rel(page_src, f'{folder}/{png.name}')})")
    return "\n\n".join(parts)


def on_page_markdown(markdown: str, page, config, files) -> str:
    src = page.file.src_uri

    def marker(m: re.Match) -> str:
        kind, arg = m.groups()
        if kind == "envdoc":
            return docstring_markdown(arg, src)
        if kind == "results":
            return results_markdown(arg, src)
        path = ROOT / arg
        if not path.is_file():
            raise PluginError(f"{src}: include {arg}: no such file")
        return path.read_text(encoding="utf-8")

    markdown = VALIDATION.sub(lambda m: validation_markdown(m.group(1), m.group(2), src), markdown)
    return MARKER.sub(marker, markdown)
