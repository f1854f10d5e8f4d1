"""Reading the lake: ``sql``, ``sessions`` (the daily logs), ``recover`` and ``show`` (one
session)."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from pipeline.cli.main import SESSION, LakeContext, cli, pass_lake, render


@cli.command()
@click.argument("query", required=False)
@click.option("-f", "--file", "query_file", type=click.File("r", encoding="utf-8"), default=None,
              help="Read the query from this file ('-' for standard input).")
@click.option("--json", "as_json", is_flag=True, help="Print rows as a JSON list of objects.")
@click.option("--ndjson", "as_ndjson", is_flag=True, help="Print rows as JSON lines (one object a line).")
@click.option("--csv", "as_csv", is_flag=True, help="Print rows as CSV.")
@click.option("--markdown", "as_markdown", is_flag=True, help="Print rows as a Markdown table.")
@click.option("--unsafe", is_flag=True,
              help="Allow any statement and file access (COPY, ATTACH, read_csv, ...).")
@pass_lake
def sql(obj: LakeContext, query: str | None, query_file, as_json: bool, as_ndjson: bool,
        as_csv: bool, as_markdown: bool, unsafe: bool) -> None:
    """Run a read-only SQL query over the lake's views.

    Only SELECT (and SHOW, DESCRIBE, SUMMARIZE, EXPLAIN) over the views: no COPY ... TO,
    ATTACH, file-reading or file-writing functions, unless --unsafe is given.

    \b
    Example:
      ctxlake sql "SELECT role, count(*) FROM messages GROUP BY role ORDER BY role"
      ctxlake sql -f weekly.sql --csv > weekly.csv
      ctxlake sql "SELECT * FROM sessions LIMIT 3" --ndjson | jq .session_id
    """
    from pipeline.reports.query import run_query

    chosen = [name for name, on in (("--json", as_json), ("--ndjson", as_ndjson),
                                    ("--csv", as_csv), ("--markdown", as_markdown)) if on]
    if len(chosen) > 1:
        raise click.UsageError(f"choose one output format, not {' and '.join(chosen)}")
    if (query is None) == (query_file is None):
        raise click.UsageError("give the query as QUERY or with -f FILE (one of them)")
    columns, rows = run_query(obj.lake, query if query is not None else query_file.read(),
                              unsafe=unsafe)
    if as_json:
        click.echo(render.to_json(render.rows_to_dicts(columns, rows)))
    elif as_ndjson:
        click.echo(render.to_ndjson(render.rows_to_dicts(columns, rows)), nl=False)
    elif as_csv:
        click.echo(render.to_csv(columns, rows), nl=False)
    elif as_markdown:
        click.echo(render.to_markdown(columns, rows), nl=False)
    else:
        render.console().print(render.table(columns, rows))


@cli.command("sessions")
@click.argument("day", metavar="[DATE]", required=False)
@click.option("--all", "show_all", is_flag=True, help="The whole day's log, not its last 50 lines.")
@click.option("--json", "as_json", is_flag=True, help="Print the list or the log lines as JSON.")
@pass_lake
def sessions_command(obj: LakeContext, day: str | None, show_all: bool, as_json: bool) -> None:
    """List the days with session logs, or show one day's log (its last 50 lines).

    \b
    Example:
      ctxlake sessions
      ctxlake sessions 2025-12-09
      ctxlake sessions 2025-12-09 --all
    """
    from pipeline.stages.summarize import TAIL_LINES, session_log_index, session_log_tail

    if day is None:
        index = session_log_index(obj.lake)
        if as_json:
            click.echo(render.to_json(index.to_dict()))
            return
        if not index.days:
            click.echo(f"No session logs yet in {index.log_dir}.")
            click.echo("Write them with: ctxlake summarize (the nightly `ctxlake run` does it too)")
            return
        click.echo(f"Session logs, most recent first ({index.log_dir}):")
        for name, count in index.days:
            click.echo(f"  {name}  {count} session{'' if count == 1 else 's'}")
        if index.more_days:
            click.echo(f"... and {index.more_days} more days")
        click.echo("View one day with: ctxlake sessions YYYY-MM-DD")
        return
    tail = session_log_tail(obj.lake, day, lines=None if show_all else TAIL_LINES)
    if as_json:
        click.echo(render.to_json(tail.to_dict()))
        return
    if tail.omitted:
        click.echo(f"... ({tail.omitted} earlier lines omitted)")
    for line in tail.lines:
        click.echo(line)


@cli.command("recover")
@click.argument("session", type=SESSION)
@click.option("--out", "out_file", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Write the document to this file instead of printing it.")
@click.option("--json", "as_json", is_flag=True, help="Print the document's fields as JSON.")
@pass_lake
def recover_command(obj: LakeContext, session: str, out_file: Path | None, as_json: bool) -> None:
    """Write the recovery document of a session (id or unique prefix): where to pick it up.

    Every field is filled from the transcript only; a field without evidence says (none).

    \b
    Example:
      ctxlake recover 7f2abd2d --out resume.md
    """
    from pipeline.stages.recover import recover

    document = recover(obj.lake, session, out=out_file)
    if as_json:
        click.echo(render.to_json(document.to_dict()))
    elif out_file is not None:
        click.echo(f"wrote {out_file} ({document.memory_id})")
    else:
        click.echo(document.to_markdown(), nl=False)


# -- one session's transcript (pipeline/reports/show.py) ------------------------------------------
def _fold(text: str | None, width: int) -> str:
    line = " ".join((text or "").split())
    return line if len(line) <= width else line[:width - 1] + "…"


def _show_lines(view, full: bool) -> list[str]:
    """The transcript as text lines: messages in full, tool calls and results folded to one
    line (``--full`` unfolds them), each eviction on a line of its own."""
    when = lambda t: t.strftime("%Y-%m-%d %H:%M:%S") if t else "-"  # noqa: E731
    lines = [f"session {view.session_id} ({view.format}, {view.project or 'no project'}"
             + (f", branch {view.git_branch}" if view.git_branch else "") + ")",
             f"{when(view.started_at)} .. {when(view.ended_at)} UTC; {view.n_user} user / "
             f"{view.n_assistant} assistant messages, {view.n_tool_calls} tool calls, "
             f"~{view.est_tokens or 0:,} tokens; {view.evicted} blocks evicted by a plan"]
    if view.parent_session_id:
        lines.append(f"sub-agent of {view.parent_session_id}")
    for block in view.blocks:
        stamp = block.timestamp.strftime("%H:%M:%S") if block.timestamp else "--:--:--"
        side = " (sidechain)" if block.is_sidechain else ""
        if block.kind == "tool_use":
            body = block.text if full else _fold(block.text, 100)
            lines.append(f"[{stamp}] ▸ {block.tool_name or 'tool'}{side}: {body}")
        elif block.kind == "tool_result":
            status = "error" if block.is_error else "ok"
            size = f"{block.payload_bytes:,} bytes" if block.payload_bytes is not None else "?"
            state = f", {block.compaction_state}" if block.compaction_state else ""
            body = block.text if full else _fold(block.text, 80)
            lines.append(f"[{stamp}] ◂ result {status} ({size}{state}){side}: {body}")
        else:
            label = block.role or "?"
            if block.kind not in ("text", None):
                label += f" {block.kind}"
            if block.is_meta and block.kind != "meta":
                label += " (meta)"
            text = block.text or ""
            if not full and block.kind == "thinking":
                text = _fold(text, 100)
            first, *rest = text.splitlines() or [""]
            lines.append(f"[{stamp}] {label}{side}: {first}")
            lines.extend(f"    {line}" for line in rest)
        for ev in block.evictions:
            saved = ""
            if ev.tokens_before is not None and ev.tokens_after is not None:
                saved = f", ~{ev.tokens_before - ev.tokens_after:,} tokens"
            lines.append(f"    ✂ {ev.action} by {ev.policy}"
                         + (f" (step {ev.step})" if ev.step and ev.step != ev.policy else "")
                         + f": {ev.reason or 'no reason given'}{saved}"
                         + (f"; locator {ev.locator}" if ev.locator else ""))
    return lines


@cli.command("show")
@click.argument("session", type=SESSION)
@click.option("--policy", default=None, help="Only the evictions of this planned policy.")
@click.option("--full", is_flag=True, help="Unfold tool calls, tool results and thinking.")
@click.option("--json", "as_json", is_flag=True, help="Print the transcript as JSON.")
@pass_lake
def show_command(obj: LakeContext, session: str, policy: str | None, full: bool,
                 as_json: bool) -> None:
    """One session's transcript: messages, tool calls folded, evictions marked.

    Each eviction a plan made shows its policy, reason and the compaction:// locator of the
    stored payload. Paged when the output is a terminal.

    \b
    Example:
      ctxlake show 7f2abd2d
      ctxlake show 7f2abd2d --policy microcompact --full
      ctxlake show 7f2abd2d --json
    """
    from pipeline.reports.show import show_session

    view = show_session(obj.lake, session, policy=policy)
    if as_json:
        click.echo(render.to_json(view.to_dict()))
        return
    text = "\n".join(_show_lines(view, full)) + "\n"
    if sys.stdout.isatty():
        click.echo_via_pager(text)
    else:
        click.echo(text, nl=False)
