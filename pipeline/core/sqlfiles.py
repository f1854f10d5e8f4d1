"""Load SQL statements from ``sql/`` by name (one statement per file, cached).

``sql/`` sits at the top level of the repository; the wheel carries it as ``pipeline/sql``
so an installed (non-editable) package finds it too. Values are always bound as parameters;
the only string slots (``{name}``) are for identifiers and lake locations, filled through
:func:`ident` / :func:`literal_path` which quote them.
"""

from __future__ import annotations

import functools
from pathlib import Path


@functools.cache
def sql_dir() -> Path:
    from importlib import resources   # imported when first needed (~3 ms a process)

    packaged = resources.files("pipeline") / "sql"
    if packaged.is_dir():
        return Path(str(packaged))
    repo = Path(__file__).resolve().parents[2] / "sql"
    if repo.is_dir():
        return repo
    raise FileNotFoundError("ctxlake's sql/ folder is missing from this installation")


@functools.cache
def load(name: str) -> str:
    """Return the text of ``sql/<name>.sql`` (``name`` may contain ``checks/``)."""
    path = sql_dir() / f"{name}.sql"
    return path.read_text(encoding="utf-8")


def render(sql_name: str, /, **slots: str) -> str:
    """Load ``sql_name`` and fill identifier slots (already quoted by ``ident``/``literal_path``)."""
    text = load(sql_name)
    return text.format(**slots) if slots else text


def ident(name: str) -> str:
    """Quote an identifier for DuckDB."""
    return '"' + name.replace('"', '""') + '"'


def literal_path(path: str | Path) -> str:
    """Quote a file location (a glob) as a SQL string literal; locations are identifiers here."""
    return "'" + str(path).replace("'", "''") + "'"


def glob_literal(folder: str | Path, pattern: str | None = None) -> str:
    """A SQL string literal for DuckDB's file readers (which expand globs): ``folder`` (or the
    file) with its glob characters escaped as classes (``[`` -> ``[[]``, ``*`` -> ``[*]``,
    ``?`` -> ``[?]``), so a lake at ``lake[A]`` reads its own files, then ``/pattern``."""
    escaped = "".join(f"[{ch}]" if ch in "[*?" else ch for ch in str(folder))
    return literal_path(escaped + ("/" + pattern if pattern else ""))


def check_names() -> list[str]:
    """Names of the data-rule checks in ``sql/checks`` (each returns violating rows)."""
    return sorted(f"checks/{p.stem}" for p in (sql_dir() / "checks").glob("*.sql"))


def fetch_dicts(cursor) -> list[dict]:
    """Every row of an executed DuckDB cursor as a dict keyed by column name."""
    columns = [d[0] for d in cursor.description]
    return [dict(zip(columns, row)) for row in cursor.fetchall()]
