"""docs/ and the README: every relative link resolves, every reference to a document in the
code names a file of docs/, and every CLI command and option is documented (issue #16)."""

import re
from pathlib import Path

import click

from pipeline.cli import cli

REPO = Path(__file__).resolve().parent.parent
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
# A reference to one of our documents: docs/<lowercase name>.md, not inside a longer path (the
# demo archive and the tests write transcripts that name other projects' docs/ files).
DOC_REF = re.compile(r"(?<![\w/.-])docs/[a-z_]+\.md\b")


def _documents() -> list[Path]:
    return [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]


def _relative_links(path: Path) -> list[str]:
    return [t for t in LINK.findall(path.read_text(encoding="utf-8"))
            if not re.match(r"[a-z]+:", t) and not t.startswith("#")]


def test_every_relative_link_in_the_readme_and_docs_names_a_file_that_exists():
    broken = [(p.name, t) for p in _documents() for t in _relative_links(p)
              if not (p.parent / t.split("#")[0]).exists()]
    assert broken == []
    assert sum(len(_relative_links(p)) for p in _documents()) >= 15


def test_every_document_named_in_code_sql_and_tests_is_a_file_of_docs():
    named: dict[str, set[str]] = {}
    for folder in ("pipeline", "sql", "bench", "notebooks"):
        for path in (REPO / folder).rglob("*"):
            if path.is_file() and path.suffix in {".py", ".sql", ".ipynb", ".md"} and "demo" not in path.parts:
                for ref in DOC_REF.findall(path.read_text(encoding="utf-8", errors="replace")):
                    named.setdefault(ref, set()).add(path.relative_to(REPO).as_posix())
    missing = {ref: sorted(where) for ref, where in named.items() if not (REPO / ref).is_file()}
    assert missing == {}
    assert {"docs/policies.md", "docs/formats.md", "docs/architecture.md"} <= set(named)


def test_no_code_names_the_specification_files_that_are_not_in_the_repository():
    stale = [path.relative_to(REPO).as_posix()
             for folder in ("pipeline", "sql", "tests", "bench", "notebooks")
             for path in (REPO / folder).rglob("*")
             if path.is_file() and path.suffix in {".py", ".sql", ".ipynb", ".toml"}
             and re.search(r"(?<![\w/])(POLICIES|DESIGN|FORMATS)\.md", path.read_text(encoding="utf-8", errors="replace"))]
    assert stale == []


def _commands(group: click.Group, prefix: tuple[str, ...] = ()):
    for name, command in sorted(group.commands.items()):
        yield (*prefix, name), command
        if isinstance(command, click.Group):
            yield from _commands(command, (*prefix, name))


def test_every_cli_command_and_every_option_appears_in_the_readme_or_docs():
    text = "\n".join(p.read_text(encoding="utf-8") for p in _documents())
    undocumented = []
    for path, command in _commands(cli):
        # `report daily`, or one of the alternatives in `report daily\|weekly\|monthly`
        *parent, name = path
        named_as = (rf"`{re.escape(name)}[ `]" if not parent else
                    rf"\b{re.escape(' '.join(parent))} +(?:[\w-]+\\?\|)*{re.escape(name)}\b")
        if not re.search(named_as, text):
            undocumented.append(" ".join(path))
        for param in command.params:
            if isinstance(param, click.Option):
                for opt in param.opts:
                    if opt.startswith("--") and not re.search(rf"{re.escape(opt)}(?![\w-])", text):
                        undocumented.append(f"{' '.join(path)} {opt}")
    assert undocumented == []
