"""Rendering helpers for the CLI: JSON (deterministic), CSV, rich tables, progress bars."""

from __future__ import annotations

import contextlib
import csv
import io
import sys
from datetime import date, datetime
from decimal import Decimal
from typing import TYPE_CHECKING, Any, Iterator

import orjson

if TYPE_CHECKING:  # rich is imported by the functions that draw (JSON output never loads it)
    from rich.console import Console
    from rich.table import Table


def _default(value: Any) -> Any:
    if isinstance(value, Decimal):
        return float(value)
    if isinstance(value, (set, frozenset, tuple)):
        return list(value)
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    raise TypeError(f"cannot serialise {type(value).__name__}")


# an object-store lake's (lake folder in its mirror, URL, mirror folder), set by the CLI
_REMOTE_LAKE: tuple[str, str, str] | None = None


def show_lake_as(folder: str | None, url: str | None = None, mirror: str | None = None) -> None:
    """Name an object-store lake by its URL in JSON output: a result whose ``lake`` is the
    lake folder in the mirror (each stage names the folder it worked in) says ``lake: <url>``
    and ``mirror: <mirror folder>``, as ``ctxlake status`` does. None: no such lake."""
    global _REMOTE_LAKE
    _REMOTE_LAKE = (folder, url, mirror or folder) if folder and url else None


def _located(value: Any) -> Any:
    if _REMOTE_LAKE is not None and isinstance(value, dict) and value.get("lake") == _REMOTE_LAKE[0]:
        return {**value, "lake": _REMOTE_LAKE[1], "mirror": _REMOTE_LAKE[2]}
    return value


def to_json(value: Any) -> str:
    """Deterministic JSON (sorted keys, ISO times, 2-space indent); an object-store lake is
    named by its URL (:func:`show_lake_as`)."""
    return orjson.dumps(_located(value), default=_default,
                        option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS
                        | orjson.OPT_NON_STR_KEYS).decode("utf-8")


def compact_json(value: Any) -> str:
    """One-line deterministic JSON (sorted keys), for values inside a text line."""
    return orjson.dumps(value, default=_default, option=orjson.OPT_SORT_KEYS
                        | orjson.OPT_NON_STR_KEYS).decode("utf-8")


def first_few(items: list[str], limit: int = 5) -> str:
    """``a, b, c, d, e ...``: the first ``limit`` items of a list said in one line."""
    return ", ".join(items[:limit]) + (" ..." if len(items) > limit else "")


def human_bytes(n: int) -> str:
    """1234567 -> '1.2 MB' (decimal units, as the README's figures)."""
    value = float(n)
    for unit in ("B", "kB", "MB", "GB", "TB"):
        if value < 1000 or unit == "TB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1000
    return f"{n} B"


def rows_to_dicts(columns: list[str], rows: list[tuple]) -> list[dict]:
    return [dict(zip(columns, row)) for row in rows]


def to_csv(columns: list[str], rows: list[tuple]) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(columns)
    for row in rows:
        writer.writerow(["" if v is None else (v.isoformat() if isinstance(v, (date, datetime)) else v)
                         for v in row])
    return buffer.getvalue()


def to_ndjson(rows: list[dict]) -> str:
    """One compact JSON object a line (sorted keys), each line ending in a newline."""
    return "".join(orjson.dumps(row, default=_default, option=orjson.OPT_SORT_KEYS
                                | orjson.OPT_NON_STR_KEYS).decode("utf-8") + "\n" for row in rows)


def _markdown_cell(value: Any) -> str:
    text = "" if value is None else _cell(value)
    return text.replace("\\", "\\\\").replace("|", "\\|").replace("\r", " ").replace("\n", " ")


def to_markdown(columns: list[str], rows: list[tuple]) -> str:
    """A GitHub-flavoured Markdown table (``|`` escaped, newlines folded to spaces)."""
    lines = ["| " + " | ".join(_markdown_cell(c) for c in columns) + " |",
             "|" + "|".join("---" for _ in columns) + "|"]
    lines += ["| " + " | ".join(_markdown_cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def console(stderr: bool = False) -> Console:
    """A console for results; when output is not a terminal, wide enough not to fold tables."""
    from rich.console import Console

    stream = sys.stderr if stderr else sys.stdout
    width = None if stream.isatty() else 240
    return Console(stderr=stderr, highlight=False, soft_wrap=True, width=width)


def table(columns: list[str], rows: list[tuple], *, title: str | None = None,
          max_width: int = 60) -> Table:
    """A rich table of plain values: cells and headers are literal text, never console markup
    (a value such as ``^\\[CRON\\]`` or ``a[b]c`` is shown exactly as stored)."""
    from rich import box
    from rich.table import Table
    from rich.text import Text

    out = Table(title=Text(title) if title is not None else None, show_lines=False, box=box.SIMPLE_HEAD if not sys.stdout.isatty() else box.HEAVY_HEAD)
    for col in columns:
        out.add_column(Text(str(col)), overflow="fold", max_width=max_width)
    for row in rows:
        out.add_row(*[Text("" if v is None else _cell(v)) for v in row])
    return out


def usage_table(columns: list[str], rows: list[tuple], *, compact: bool = False,
                text_columns: int = 2) -> Table:
    """A usage report table: numbers right-aligned, and no cell ever wraps (numbers, dates,
    model names; a cell with several models has one per line). ``compact``: narrow padding,
    so the compact report fits 80 columns. The first ``text_columns`` are left-aligned."""
    from rich import box
    from rich.table import Table
    from rich.text import Text

    out = Table(show_lines=False, box=box.SIMPLE_HEAD if not sys.stdout.isatty() else box.HEAVY_HEAD,
                pad_edge=not compact, padding=(0, 1) if not compact else (0, 1, 0, 0))
    for index, col in enumerate(columns):
        out.add_column(Text(str(col)), no_wrap=True, justify="left" if index < text_columns else "right")
    for row in rows:   # literal text, never console markup (a model name may hold brackets)
        out.add_row(*[Text("" if v is None else _cell(v)) for v in row])
    return out


def _cell(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:,.4f}".rstrip("0").rstrip(".") if abs(value) < 1e6 else f"{value:,.0f}"
    if isinstance(value, datetime):
        return value.isoformat(sep=" ", timespec="seconds")
    return str(value)


def quiet() -> bool:
    """``--quiet`` was given (``ctxlake --quiet`` or after the subcommand): no progress bars."""
    import click

    ctx = click.get_current_context(silent=True)
    return bool(ctx is not None and getattr(ctx.find_root().obj, "quiet", False))


@contextlib.contextmanager
def _one_bar(description: str, counts: str) -> Iterator:
    """A progress callback ``(done, total)`` drawing one bar on stderr (``counts``: "bytes"
    or "items"), None when quiet or not a TTY (rich is imported only to draw)."""
    if quiet() or not sys.stderr.isatty():
        yield None
        return
    from rich.console import Console
    from rich.progress import (BarColumn, DownloadColumn, MofNCompleteColumn, Progress,
                               TimeRemainingColumn, TransferSpeedColumn)

    columns = (DownloadColumn(), TransferSpeedColumn()) if counts == "bytes" \
        else (MofNCompleteColumn(),)
    with Progress("[progress.description]{task.description}", BarColumn(), *columns,
                  TimeRemainingColumn(), console=Console(stderr=True), transient=True) as bar:
        task = bar.add_task(description, total=None)

        def update(done: int, total: int) -> None:
            bar.update(task, completed=done, total=total or None)

        yield update


def byte_progress(description: str):
    """A progress callback ``(done, total)`` counting bytes, quiet when not a TTY."""
    return _one_bar(description, "bytes")


def step_progress(description: str):
    """A progress callback ``(done, total)`` counting items, quiet when not a TTY."""
    return _one_bar(description, "items")


@contextlib.contextmanager
def stage_progress() -> Iterator:
    """A factory ``stage(name) -> callback(done, total)``: one bar per pipeline stage on
    stderr, quiet (the factory returns None) when stderr is not a terminal."""
    if quiet() or not sys.stderr.isatty():
        yield lambda name: None
        return
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeRemainingColumn

    with Progress("[progress.description]{task.description:<10}", BarColumn(),
                  MofNCompleteColumn(), TimeRemainingColumn(),
                  console=Console(stderr=True), transient=True) as bar:
        tasks: dict[str, int] = {}

        def stage(name: str):
            def update(done: int, total: int) -> None:
                if name not in tasks:
                    tasks[name] = bar.add_task(name, total=None)
                bar.update(tasks[name], completed=done, total=total or None)
            return update

        yield stage
