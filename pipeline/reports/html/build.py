"""``render_html``: the static HTML report over the lake (``ctxlake report html``).

Layout under the output folder (default ``<lake>/html``)::

    index.html                     overview: tokens and cost per day / model / project / agent,
                                   the tools that fill the context, the latest runs
    sessions.html                  every session (sub-agents under their parent), sortable and
                                   filterable in the page
    policies.html                  the lake's latest replay comparison (table and charts)
    sessions/<slug>/index.html     a session: facts, per-turn context chart, daily-log entry,
                                   recovery document, then the transcript (page 1)
    sessions/<slug>/<n>.html       further transcript pages of a long session
    payloads/<sha256>.html         an evicted payload, read back from the payload store

Decisions:
- Incremental contract: with ``sessions`` given, the overview, list and policies pages are
  rebuilt and only the pages of those sessions (and of their parents, whose page lists their
  sub-agents) are rendered; pages of sessions no longer in the report are deleted in both
  modes. A file is written (atomically, 0600) only when its bytes change.
- The eviction shown is that of one policy (``policy``, default the nightly job's
  ``payload_prune+microcompact``): each compaction point is a box before the message where it
  takes effect (``at_seq``) with the reason, tokens saved and locator; the evicted item links
  to it and back. A pruned item (a ``compaction://`` locator) whose payload is in the store
  links to its payload page, rendered from the store's bytes (content-addressed: an existing
  payload page is kept as it is). A cleared item has no payload hash of its own (``apply``
  stores the removed span of its source line), so its original is the item itself, folded in
  the transcript, which the box links to.
- Long sessions are paged (at most ``PAGE_ROWS`` rows or ``PAGE_CHARS`` characters of text
  per page); thinking, tool calls, tool results and injected meta text are folded
  (``<details>``), so a 20 MB session stays responsive.
- The per-turn context chart: the context sent at each assistant turn (sum of ``est_tokens`` of
  the main-thread rows before it), as recorded and under the policy (minus the tokens its
  evictions saved once they took effect).
- Filters (``since``/``until`` inclusive UTC dates, ``project``) apply to the overview and the
  session list; the policies page shows the latest replay as it is (replay has no filter).
- Deterministic: no clock, every list sorted, charts from :mod:`pipeline.reports.html.svg`.
"""

from __future__ import annotations

import bisect
import contextlib
import os
import re
import shutil
import tempfile
import time
from dataclasses import asdict, dataclass
from datetime import date, datetime
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable
from zoneinfo import ZoneInfo

from pipeline.core import sqlfiles
from pipeline.core.dates import day_span
from pipeline.core.errors import UsageError
from pipeline.reports.html import svg
from pipeline.reports.html.page import esc, page, table
from pipeline.core.lake import HTML_MARKER, Lake, claim_folder, private_dirs, write_marker
from pipeline.stages.recover import recovery_file_name

if TYPE_CHECKING:
    from pipeline.reports.report_tools import ToolUsage

__all__ = ["render_html", "HtmlSummary", "session_slug", "DEFAULT_POLICY"]

DEFAULT_POLICY = "payload_prune+microcompact"
PAGE_ROWS = 400
PAGE_CHARS = 1_000_000
RUNS_SHOWN = 10
TOOLS_SHOWN = 15
PREVIEW_CHARS = 160
FOLD_TEXT_CHARS = 20_000
KINDS = (("input_tokens", "input"), ("output_tokens", "output"),
         ("cache_write_tokens", "cache write"), ("cache_read_tokens", "cache read"))
_SHA = re.compile(r"^[0-9a-f]{64}$")
_PAGE = re.compile(r"^(index|[0-9]+)\.html$")


@dataclass
class HtmlSummary:
    out: str
    sessions: int = 0              # sessions in the report (after the filters)
    sessions_rendered: int = 0     # sessions whose pages were rendered this time
    pages_written: int = 0
    pages_unchanged: int = 0
    pages_removed: int = 0
    payload_pages: int = 0         # payload pages written this time
    seconds: float = 0.0

    def to_dict(self) -> dict:
        return {k: (round(v, 3) if isinstance(v, float) else v) for k, v in asdict(self).items()}


def session_slug(session_id: str) -> str:
    """The folder name of a session's pages (the recovery document's name, without ``.md``)."""
    return recovery_file_name(session_id)[:-3]


# the pages every render writes: a folder holding them is an earlier report (before the marker)
REPORT_PAGES = ("index.html", "sessions.html", "policies.html")


# ---------------------------------------------------------------------------------------
# Writing
# ---------------------------------------------------------------------------------------
def _replace_file(path: Path, data: bytes) -> None:
    """Write ``data`` to a private temp file beside ``path`` and rename it into place: a reader
    sees the old page or the new one, never half of one. No fsync: the report is derived and
    the next render compares bytes and rewrites any page a crash left wrong (fsync of ~5,000
    pages was half of the full render's time on a busy disk)."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.chmod(tmp, 0o600)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


class _Writer:
    """Writes files below ``out`` only when their bytes change; never through a symlink."""

    def __init__(self, out: Path, summary: HtmlSummary):
        self.out = out
        self.summary = summary

    def folder(self, *parts: str) -> Path:
        path = self.out.joinpath(*parts)
        private_dirs(self.out)      # 0700 with its new parents, whatever the umask
        current = self.out
        for part in parts:
            current = current / part
            if current.is_symlink():
                raise UsageError("refusing to write through a symlink in the report folder",
                                 hint=f"remove {current}")
            current.mkdir(mode=0o700, exist_ok=True)
        return path

    def write(self, path: Path, data: bytes) -> bool:
        if path.is_symlink():
            path.unlink()       # the link itself, inside the report folder; never its target
        elif path.is_file() and path.stat().st_size == len(data) and path.read_bytes() == data:
            self.summary.pages_unchanged += 1
            return False
        _replace_file(path, data)
        self.summary.pages_written += 1
        return True

    def remove(self, path: Path) -> None:
        if path.is_symlink() or path.is_file():
            path.unlink()
            self.summary.pages_removed += 1
        elif path.is_dir():
            self.summary.pages_removed += sum(1 for p in path.iterdir() if p.is_file())
            shutil.rmtree(path)


# ---------------------------------------------------------------------------------------
# Formatting
# ---------------------------------------------------------------------------------------
def _int(value) -> str:
    return f"{int(value or 0):,}"


def _usd(value, unpriced: bool = False) -> str:
    if value is None:
        return "UNPRICED" if unpriced else "-"
    text = f"${Decimal(value):,.4f}"
    return text + (" + UNPRICED" if unpriced else "")


def _ts(value) -> str:
    if value is None:
        return "-"
    if isinstance(value, datetime):
        return value.astimezone(ZoneInfo("UTC")).strftime("%Y-%m-%d %H:%M:%S UTC")
    return str(value)


def _preview(text: str | None, limit: int = PREVIEW_CHARS) -> str:
    line = " ".join((text or "").split())
    return line if len(line) <= limit else line[: limit - 1] + "…"


def _fetch(con, name: str, params: dict | None = None) -> list[dict]:
    return sqlfiles.fetch_dicts(con.execute(sqlfiles.load(name), params or {}))


def _ensure_optional_views(con) -> None:
    """Empty stand-ins for derived tables a lake may not have yet (no plan / no replay run)."""
    from pipeline.stages.plan import EVICTIONS_SCHEMA
    from pipeline.stages.replay import POLICY_EVAL, REPLAY_TURNS

    present = {row["name"] for row in _fetch(con, "select_view_names")}
    for name, schema in (("evictions", EVICTIONS_SCHEMA), ("policy_eval", POLICY_EVAL),
                         ("replay_turns", REPLAY_TURNS)):
        if name not in present:
            con.register(name, schema.empty_table())


# ---------------------------------------------------------------------------------------
# Overview
# ---------------------------------------------------------------------------------------
def _group(rows: list[dict], key: str) -> list[dict]:
    out: dict[Any, dict] = {}
    for row in rows:
        name = row[key] if row[key] is not None else "(none)"
        group = out.setdefault(name, {"name": str(name), "calls": 0, "cost": Decimal(0),
                                      "priced": False, "unpriced": 0, "total_tokens": 0,
                                      **{k: 0 for k, _label in KINDS}})
        for k, _label in KINDS:
            group[k] += int(row[k])
        group["total_tokens"] += int(row["total_tokens"])
        group["calls"] += int(row["calls"])
        group["unpriced"] += int(row["unpriced_calls"])
        if row["cost_usd"] is not None:
            group["cost"] += Decimal(row["cost_usd"])
            group["priced"] = True
    return list(out.values())


def _usage_table(groups: list[dict], label: str) -> str:
    headers = [label, "calls", *[lab for _k, lab in KINDS], "total", "cost (USD)"]
    rows = [(g["name"], _int(g["calls"]), *[_int(g[k]) for k, _l in KINDS],
             _int(g["total_tokens"]),
             _usd(g["cost"] if g["priced"] else None, g["unpriced"] > 0)) for g in groups]
    return table(headers, rows, numeric=range(1, len(headers)))


def _overview(con, sessions: list[dict], tools: ToolUsage, runs: list[dict], filters: str,
              bounds: dict, policy: str) -> bytes:
    usage = _fetch(con, "select_html_usage_groups", bounds)
    parts = ["<h1>Overview</h1>", f'<p class="muted">{esc(filters)}</p>']
    tops = [s for s in sessions if s["parent_session_id"] is None]
    cost = sum((Decimal(s["cost_usd"]) for s in sessions if s["cost_usd"] is not None), Decimal(0))
    unpriced = any(s["unpriced_models"] for s in sessions)
    parts.append('<dl class="kv">'
                 f"<dt>sessions</dt><dd>{len(tops):,} ({len(sessions) - len(tops):,} sub-agent sessions)</dd>"
                 f"<dt>messages</dt><dd>{sum(s['n_user'] + s['n_assistant'] for s in sessions):,}</dd>"
                 f"<dt>recorded tokens</dt><dd>{sum(int(s['total_tokens']) for s in sessions):,}</dd>"
                 f"<dt>cost</dt><dd>{esc(_usd(cost, unpriced))}</dd>"
                 f"<dt>evictions ({esc(policy)})</dt><dd>{sum(s['evictions'] for s in sessions):,}</dd></dl>")
    days = _group([r for r in usage if r["day"] is not None], "day")
    parts.append("<h2>Tokens and cost per day</h2>")
    series = [(label, [g[k] for g in days]) for k, label in KINDS]
    cost_series = [("priced cost", [float(g["cost"]) for g in days])]
    parts.append('<div class="charts">' + svg.stacked_bars(
        [g["name"] for g in days], series, "Recorded tokens per day (UTC), by kind")
        + svg.stacked_bars([g["name"] for g in days], cost_series,
                           "Cost per day (UTC, USD; unpriced models not included)", "USD")
        + "</div>")
    undated = [r for r in usage if r["day"] is None]
    if undated:
        parts.append(f'<p class="note">{sum(int(r["total_tokens"]) for r in undated):,} tokens '
                     "have no date (runs without timestamps) and are not in the chart.</p>")
    parts.append("<details><summary>per day, as a table</summary>"
                 + _usage_table(days, "day (UTC)") + "</details>")
    for key, label in (("model", "model"), ("project", "project"), ("agent", "agent")):
        groups = sorted(_group(usage, key), key=lambda g: (-g["total_tokens"], g["name"]))
        parts.append(f"<h2>Per {esc(label)}</h2>")
        bars = [(g["name"], float(g["total_tokens"]),
                 f"{svg.human(g['total_tokens'])} tok, "
                 + _usd(g["cost"] if g["priced"] else None, g["unpriced"] > 0)) for g in groups]
        parts.append('<div class="charts">' + svg.hbars(bars, f"Recorded tokens per {label}")
                     + "</div>")
        parts.append(_usage_table(groups, label))
    parts.append("<h2>Tools that fill the context</h2>")
    families = tools.by_family
    parts.append('<div class="charts">' + svg.hbars(
        [(f["tool_family"] or "(none)", float(f["est_tokens"]),
          f"{svg.human(f['est_tokens'])} est. tok ({f['share'] * 100:.1f}%)") for f in families],
        "Estimated tokens of tool calls and results, by family") + "</div>")
    rows = [(t["tool_name"], t["tool_family"], _int(t["calls"]), _int(t["results"]),
             _int(t["input_est_tokens"]), _int(t["result_est_tokens"]), _int(t["payload_bytes"]),
             _int(t["errors"]), f"{t['share'] * 100:.1f}%") for t in tools.by_tool[:TOOLS_SHOWN]]
    parts.append(table(["tool", "family", "calls", "results", "input est. tokens",
                        "result est. tokens", "result bytes", "errors", "share"], rows,
                       numeric=range(2, 9)))
    if len(tools.by_tool) > TOOLS_SHOWN:
        parts.append(f'<p class="note">the {TOOLS_SHOWN} largest of {len(tools.by_tool)} '
                     "tools (all of them: <code>ctxlake report tools</code>)</p>")
    parts.append("<h2>Latest runs</h2>")
    rows = []
    for run in runs:
        notes = [run["status"] or "-"]
        if run["quarantined"]:
            notes.append(f"{run['quarantined']:,} lines quarantined")
        if run["held_back"]:
            notes.append(f"{run['held_back']:,} held back")
        if run["sessions_failed"]:
            notes.append(f"{run['sessions_failed']:,} sessions failed")
        notes.extend(run["warnings"] or [])
        rows.append((run["run_id"], run["command"] or "-", "; ".join(notes),
                     _ts(run["started_at"]), _ts(run["finished_at"]), _int(run["files"]),
                     _int(run["files_skipped"]), _int(run["lines"]), _int(run["records"]),
                     _int(run["sessions_done"])))
    parts.append(table(["run", "command", "status", "started", "finished", "files read",
                        "files skipped", "lines", "records", "sessions done"], rows,
                       numeric=range(5, 10)))
    return page("Overview", "\n".join(parts), current="index.html")


# ---------------------------------------------------------------------------------------
# Session list
# ---------------------------------------------------------------------------------------
def _session_link(session_id: str, root: str = "") -> str:
    return f"{root}sessions/{session_slug(session_id)}/index.html"


def _ordered_with_children(sessions: list[dict]) -> list[tuple[dict, bool]]:
    """Top-level sessions in time order, each followed by its sub-agents (a sub-agent whose
    parent is not in the report stands alone)."""
    ids = {s["session_id"] for s in sessions}
    children: dict[str, list[dict]] = {}
    for s in sessions:
        if s["parent_session_id"] in ids:
            children.setdefault(s["parent_session_id"], []).append(s)
    out = []
    for s in sessions:
        if s["parent_session_id"] in ids:
            continue
        out.append((s, False))
        out.extend((child, True) for child in children.get(s["session_id"], []))
    return out


def _session_list(sessions: list[dict], topics: dict[str, str], filters: str,
                  policy: str) -> bytes:
    headers = ["date (UTC)", "session", "project", "agent", "topic", "messages", "tokens",
               "est. tokens", "cost (USD)", "evictions"]
    rows, attrs = [], []
    for s, is_child in _ordered_with_children(sessions):
        started = s["started_at"]
        group = s["parent_session_id"] if is_child else s["session_id"]
        link = f'<a href="{esc(_session_link(s["session_id"]))}">{esc(s["session_id"])}</a>'
        cost = _usd(s["cost_usd"], bool(s["unpriced_models"])) if s["has_usage"] else "-"
        rows.append((
            (esc(_ts(started)[:16]) if started else "-",
             started.isoformat() if started else ""),
            (link, s["session_id"]), s["project"] or "-", s["format"],
            topics.get(s["session_id"], ""),
            (_int(s["n_user"] + s["n_assistant"]), s["n_user"] + s["n_assistant"]),
            (_int(s["total_tokens"]), int(s["total_tokens"])),
            (_int(s["est_tokens"]), int(s["est_tokens"])),
            (esc(cost), str(s["cost_usd"] if s["cost_usd"] is not None else -1)),
            (_int(s["evictions"]), s["evictions"])))
        attrs.append(f' data-group="{esc(group)}"' + (' class="child"' if is_child else ""))
    body = ["<h1>Sessions</h1>", f'<p class="muted">{esc(filters)}; evictions under '
            f"<code>{esc(policy)}</code>; click a header to sort, sub-agent sessions stay "
            "under their parent.</p>",
            '<div class="toolbar"><label>filter <input type="search" data-filter="sessions" '
            'placeholder="words in any column"></label>'
            f'<span id="sessions-count" class="muted">{len(rows)} shown</span></div>',
            table(headers, rows, numeric=range(5, 10), table_id="sessions", sortable=True,
                  row_attrs=attrs)]
    return page("Sessions", "\n".join(body), current="sessions.html")


# ---------------------------------------------------------------------------------------
# Session pages
# ---------------------------------------------------------------------------------------
def _pages_of(rows: list[dict]) -> list[list[dict]]:
    pages: list[list[dict]] = [[]]
    chars = 0
    for row in rows:
        size = len(row["text"] or "")
        if pages[-1] and (len(pages[-1]) >= PAGE_ROWS or chars + size > PAGE_CHARS):
            pages.append([])
            chars = 0
        pages[-1].append(row)
        chars += size
    return pages


def _page_name(index: int) -> str:
    return "index.html" if index == 0 else f"{index + 1}.html"


def _turn_points(rows: list[dict], evictions: list[dict]) -> tuple[list, list]:
    """(as recorded, under the policy): (turn number, context tokens) at each assistant turn."""
    saved_at = sorted((e["at_seq"], int(e["tokens_before"] or 0) - int(e["tokens_after"] or 0))
                      for e in evictions)
    recorded, policy = [], []
    context = 0
    saved = 0
    cursor = 0
    previous_reply = None
    turn = 0
    for row in rows:
        if row["is_sidechain"]:
            continue
        is_reply = row["role"] == "assistant" and row["kind"] in ("text", "thinking", "tool_use")
        if is_reply:
            call = row["api_call_id"]
            new_turn = previous_reply is None or (call is None and previous_reply is False) \
                or (call is not None and call != previous_reply)
            if new_turn:
                while cursor < len(saved_at) and saved_at[cursor][0] <= row["seq"]:
                    saved += saved_at[cursor][1]
                    cursor += 1
                turn += 1
                recorded.append((turn, context))
                policy.append((turn, max(0, context - saved)))
            previous_reply = call if call is not None else True
        else:
            previous_reply = False if previous_reply is not None else None
        context += int(row["est_tokens"] or 0)
    return recorded, policy


def _folded(summary: str, text: str, cls: str = "code") -> str:
    return (f"<details><summary>{summary}</summary>"
            f'<pre class="{cls}">{esc(text)}</pre></details>')


def _message(row: dict, evicted: dict | None, link_of, policy: str, tool_names: dict) -> str:
    role, kind, text = row["role"], row["kind"], row["text"] or ""
    seq = row["seq"]
    classes = ["msg", role if role in ("user", "assistant", "tool", "system") else "system"]
    if row["is_sidechain"]:
        classes.append("sidechain")
    who = [role, kind]
    if row["subtype"] and row["subtype"] != kind:
        who.append(row["subtype"])
    if row["model"] and role == "assistant":
        who.append(row["model"])
    if row["timestamp"] is not None:
        who.append(_ts(row["timestamp"]))
    who.append(f"~{int(row['est_tokens'] or 0):,} tokens")
    if row["is_sidechain"]:
        who.append("sidechain")
    head = f'<div class="who">{esc(" · ".join(who))}</div>'
    tool = esc(row["tool_name"] or tool_names.get(row["call_id"]) or "?")
    if kind == "tool_use":
        content = _folded(f"tool call <b>{tool}</b> <code>{esc(row['call_id'])}</code>", text)
    elif kind == "tool_result":
        state = f" · {esc(row['compaction_state'])}" if row["compaction_state"] else ""
        content = _folded(f"tool result <b>{tool}</b> <code>{esc(row['call_id'])}</code> · "
                          f"{len(text):,} chars{state}: {esc(_preview(text, 80))}", text)
    elif kind == "thinking":
        content = _folded(f"thinking · {len(text):,} chars", text, "text")
    elif row["is_meta"] or kind not in ("text",) or len(text) > FOLD_TEXT_CHARS:
        content = _folded(f"{esc(kind)} · {len(text):,} chars: {esc(_preview(text, 80))}",
                          text, "text")
    else:
        content = f'<pre class="text">{esc(text)}</pre>'
    mark = ""
    if evicted is not None:
        mark = (f'<div class="note">evicted under {esc(policy)} '
                f'(<a href="{esc(link_of(evicted["at_seq"], "e" + str(evicted["at_seq"])))}">'
                f"at seq {evicted['at_seq']}</a>, {esc(evicted['action'])}, "
                f"{int(evicted['tokens_before'] or 0) - int(evicted['tokens_after'] or 0):,} "
                "tokens saved)</div>")
    return (f'<div class="{" ".join(classes)}" id="m{seq}">{head}{content}{mark}</div>')


def _eviction_box(at_seq: int, items: list[dict], link_of, payloads: set[str], root: str,
                  policy: str) -> str:
    saved = sum(int(e["tokens_before"] or 0) - int(e["tokens_after"] or 0) for e in items)
    lines = [f'<div class="eviction" id="e{at_seq}"><b>compaction under '
             f"{esc(policy)}</b> at seq {at_seq}: {len(items)} item(s), {saved:,} tokens saved"
             "<ul>"]
    for e in items:
        where = esc(link_of(e["seq"], f"m{e['seq']}")) if e["seq"] is not None else ""
        item = (f'<a href="{where}">{esc(e["tool_name"] or "?")} <code>{esc(e["call_id"])}</code></a>'
                if where else f'{esc(e["tool_name"] or "?")} <code>{esc(e["call_id"])}</code>')
        paths = ", ".join(e["paths"] or [])
        locator = e["locator"]
        stored = ""
        if locator:
            sha = e["payload_sha256"]
            if sha in payloads:
                stored = (f' · <a href="{esc(root)}payloads/{esc(sha)}.html">original payload '
                          f"({int(e['bytes_before'] or 0):,} bytes, from the store)</a>")
            else:
                stored = " · payload not in the store yet (run <code>ctxlake apply</code>)"
        lines.append(
            f"<li>{item}: {esc(e['action'])} ({esc(e['step'] or '')}) — {esc(e['reason'])}; "
            f"{int(e['tokens_before'] or 0):,} → {int(e['tokens_after'] or 0):,} tokens"
            + (f"; paths {esc(paths)}" if paths else "")
            + (f"; locator <code>{esc(locator)}</code>" if locator else "") + stored + "</li>")
    lines.append("</ul></div>")
    return "".join(lines)


def _log_entry(info: dict, topic: str, zone: ZoneInfo, lake: Lake) -> str:
    if info["started_at"] is None:
        return '<p class="muted">(no timestamp: not in any daily log)</p>'
    local = info["started_at"].astimezone(zone)
    day = local.strftime("%Y-%m-%d")
    entry = "\n".join([f"### {local.strftime('%H:%M')}", f"- **Topic:** {topic}",
                       f"- **Messages:** {info['n_user']} user / {info['n_assistant']} assistant",
                       f"- **Est. tokens:** ~{int(info['est_tokens'] or 0):,}"])
    log = lake.summaries_dir / "sessions" / f"{day}.md"
    found = log.is_file() and not log.is_symlink() and entry in log.read_text(encoding="utf-8")
    note = (f"from summaries/sessions/{day}.md" if found
            else f"not in summaries/sessions/{day}.md (run <code>ctxlake summarize</code>)"
            if info["parent_session_id"] is None else "sub-agent sessions are folded into their "
            "parent in the daily logs")
    return f'<p class="note">{note}</p><pre class="doc">{esc(entry)}</pre>'


def _recovery(lake: Lake, session_id: str) -> str:
    path = lake.summaries_dir / "recovery" / recovery_file_name(session_id)
    if path.is_file() and not path.is_symlink():
        return (f'<p class="note">summaries/recovery/{esc(path.name)}</p>'
                f'<pre class="doc">{esc(path.read_text(encoding="utf-8"))}</pre>')
    return '<p class="muted">(no recovery document: sub-agent sessions are folded into their ' \
           "parent, ignored sessions get none, and <code>ctxlake summarize</code> writes them)</p>"


def _pager(count: int, current: int) -> str:
    if count <= 1:
        return ""
    items = []
    for index in range(count):
        label = f"page {index + 1}"
        if index == current:
            items.append(f'<span class="here">{label}</span>')
        else:
            items.append(f'<a href="{_page_name(index)}">{label}</a>')
    return '<nav class="pager">' + "".join(items) + "</nav>"


def _session_pages(lake: Lake, info: dict, rows: list[dict], evictions: list[dict],
                   children: list[dict], topic: str, zone: ZoneInfo,
                   payloads: set[str], policy: str) -> list[bytes]:
    session_id = info["session_id"]
    root = "../../"
    chunks = _pages_of(rows)
    page_of = {row["seq"]: index for index, chunk in enumerate(chunks) for row in chunk}
    by_at: dict[int, list[dict]] = {}
    evicted_item: dict[int, dict] = {}
    for e in evictions:
        by_at.setdefault(e["at_seq"], []).append(e)
        if e["seq"] is not None:
            evicted_item.setdefault(e["seq"], e)
    seqs = sorted(page_of)
    tool_names = {row["call_id"]: row["tool_name"] for row in rows
                  if row["kind"] == "tool_use" and row["call_id"] and row["tool_name"]}

    def page_for(seq: int) -> int:
        if seq in page_of:
            return page_of[seq]
        index = bisect.bisect_left(seqs, seq)
        return page_of[seqs[min(index, len(seqs) - 1)]] if seqs else 0

    out = []
    for index, chunk in enumerate(chunks):
        def link_of(seq: int, anchor: str, _here=index) -> str:
            target = page_for(seq)
            return ("" if target == _here else _page_name(target)) + "#" + anchor

        parts = [f"<h1>Session {esc(session_id)}</h1>"]
        if index == 0:
            parts.append(_session_facts(info, topic, children, policy))
            recorded, pruned = _turn_points(rows, evictions)
            parts.append("<h2>Context per turn</h2>")
            series = [("as recorded", recorded), (policy, pruned)] if pruned != recorded \
                else [(f"as recorded (no eviction under {policy})", recorded)]
            parts.append('<div class="charts">' + svg.lines(
                series,
                "Context sent per assistant turn (estimated tokens)", "turn", "tokens",
                dashed_first=True) + "</div>")
            parts.append("<h2>Daily-log entry</h2>" + _log_entry(info, topic, zone, lake))
            parts.append("<h2>Recovery document</h2>" + _recovery(lake, session_id))
            parts.append("<h2>Transcript</h2>")
        else:
            parts.append('<p><a href="index.html">session facts, charts and documents</a></p>')
        parts.append(_pager(len(chunks), index))
        placed: set[int] = set()
        for row in chunk:
            seq = row["seq"]
            for at in sorted(a for a in by_at if a <= seq and a not in placed
                             and page_for(a) == index):
                parts.append(_eviction_box(at, by_at[at], link_of, payloads, root, policy))
                placed.add(at)
            parts.append(_message(row, evicted_item.get(seq), link_of, policy, tool_names))
        if index == len(chunks) - 1:
            for at in sorted(a for a in by_at if a not in placed and page_for(a) == index):
                parts.append(_eviction_box(at, by_at[at], link_of, payloads, root, policy))
        parts.append(_pager(len(chunks), index))
        title = f"Session {session_id}" + (f" (page {index + 1})" if index else "")
        out.append(page(title, "\n".join(parts), root=root))
    return out


def _session_facts(info: dict, topic: str, children: list[dict], policy: str) -> str:
    facts = [("topic", esc(topic)), ("agent", esc(info["format"])),
             ("project", esc(info["project"] or "-")), ("branch", esc(info["git_branch"] or "-")),
             ("model", esc(info["model"] or "-")),
             ("started", esc(_ts(info["started_at"]))), ("ended", esc(_ts(info["ended_at"]))),
             ("messages", f"{info['n_user']:,} user / {info['n_assistant']:,} assistant"),
             ("tool calls", _int(info["n_tool_calls"])),
             ("est. tokens", _int(info["est_tokens"])),
             ("recorded tokens", _int(info["total_tokens"]) + " (" + ", ".join(
                 f"{label} {_int(info[k])}" for k, label in KINDS) + ")"),
             ("cost", esc(_usd(info["cost_usd"], bool(info["unpriced_models"]))
                          if info["has_usage"] else "-")),
             (f"evictions ({esc(policy)})",
              f"{info['evictions']:,} ({_int(info['tokens_saved'])} tokens saved)")]
    if info["parent_session_id"]:
        facts.append(("parent", f'<a href="{esc(_session_link(info["parent_session_id"], "../../"))}">'
                                f'{esc(info["parent_session_id"])}</a>'))
    if children:
        facts.append(("sub-agents", ", ".join(
            f'<a href="{esc(_session_link(c["session_id"], "../../"))}">{esc(c["session_id"])}</a>'
            for c in children)))
    return '<dl class="kv">' + "".join(f"<dt>{k}</dt><dd>{v}</dd>" for k, v in facts) + "</dl>"


def _payload_page(sha: str, data: bytes) -> bytes:
    text = data.decode("utf-8", errors="replace")
    body = (f"<h1>Payload {esc(sha)}</h1>"
            f'<p class="muted">compaction://{esc(sha)} · {len(data):,} bytes, read from the '
            "payload store (<code>ctxlake restore</code> puts it back)</p>"
            f'<pre class="code">{esc(text)}</pre>')
    return page(f"Payload {sha[:12]}", body, root="../")


# ---------------------------------------------------------------------------------------
# Policies
# ---------------------------------------------------------------------------------------
def _policies(con) -> bytes:
    from pipeline.stages.replay import summary_rows
    from pipeline.reports.replay_report import comparison_table

    chosen = _fetch(con, "select_html_policies")
    names = [row["policy"] for row in chosen]
    settings = chosen[0]["replay_settings"] if chosen else None
    parts = ["<h1>Policies</h1>"]
    if not names:
        parts.append('<p class="muted">No replay in this lake yet: run <code>ctxlake replay '
                     "--policy microcompact --policy payload_prune</code>.</p>")
        return page("Policies", "\n".join(parts), current="policies.html")
    summary = summary_rows(None, names, con=con, settings=settings)
    evals = _fetch(con, "select_html_policy_eval")
    parts.append(f'<p class="muted">The lake\'s latest replay: {len(names)} policies '
                 "(<code>none</code> is the baseline), the figures of <code>ctxlake replay "
                 "--report</code>"
                 + (f"; settings <code>{esc(settings)}</code>" if settings else "")
                 + ".</p>")
    headers, rows = comparison_table(summary)
    parts.append(table(headers, rows, numeric=range(1, len(headers))))
    evicted = {e["session_id"] for e in evals if e["evictions"]}
    candidates = [e for e in evals if (e["session_id"] in evicted or not evicted) and e["turns"]]
    charts = []
    if candidates:
        chosen = min(candidates, key=lambda e: (-e["turns"], e["session_id"]))["session_id"]
        turns = _fetch(con, "select_html_replay_turns", {"session_id": chosen})
        series = [(name, [(t["turn"] + 1, t["context_tokens"]) for t in turns
                          if t["policy"] == name]) for name in names]
        charts.append(svg.lines(series, f"Context per turn: {chosen}", "turn (API call)",
                                "context tokens (estimate)", dashed_first=True))
    priced = any(r.get("cost_saved_pct") is not None for r in summary)
    key = "cost_saved_pct" if priced else "tokens_saved_pct"
    charts.append(svg.scatter(
        [(float(r.get("at_risk_evictions") or 0), float(r[key]), r["policy"]) for r in summary
         if r.get(key) is not None], "Saving vs at-risk evictions per policy",
        "at-risk evictions (proxy for regret)",
        "cost saved vs none, %" if priced else "tokens saved vs none, %"))
    charts.append(svg.boxes(
        [(name, [e["tokens_saved_pct"] for e in evals if e["policy"] == name
                 and e["tokens_saved_pct"] is not None]) for name in names if name != "none"],
        "Tokens saved per session vs none, %", "tokens saved, %"))
    parts.append("<h2>Charts</h2>" + '<div class="charts">' + "".join(charts) + "</div>")
    return page("Policies", "\n".join(parts), current="policies.html")


# ---------------------------------------------------------------------------------------
# The report
# ---------------------------------------------------------------------------------------
def _rows_by_session(con, session_ids: list[str] | None) -> Iterable[tuple[str, list[dict]]]:
    """Message rows grouped by session, streamed from DuckDB in Arrow batches."""
    reader = con.sql(sqlfiles.load("select_html_session_messages"),
                     params={"session_ids": session_ids}).to_arrow_reader(50_000)
    current, rows = None, []
    for batch in reader:
        columns = {name: batch.column(i).to_pylist() for i, name in enumerate(batch.schema.names)}
        names = list(columns)
        for values in zip(*columns.values()):
            row = dict(zip(names, values))
            if row["session_id"] != current:
                if current is not None:
                    yield current, rows
                current, rows = row["session_id"], []
            rows.append(row)
    if current is not None:
        yield current, rows


def render_html(lake: Lake, out: Path | str | None = None, *, sessions: Iterable[str] | None = None,
                since: str | date | None = None, until: str | date | None = None,
                project: str | None = None,
                policy: str | None = None, tz: str | None = None) -> HtmlSummary:
    """Render the report into ``out`` (default ``<lake>/html``); see the module docstring.

    ``sessions``: re-render only these sessions' pages (None: all); the overview, list and
    policies pages are always rebuilt. ``tz``: the zone of the daily-log entries shown, as
    given to ``summarize`` (default: the machine's zone, as there). Returns what was written."""
    from pipeline.reports.report_tools import tool_usage
    from pipeline.core.store import PayloadStore
    from pipeline.stages.usage import resolve_timezone

    started = time.perf_counter()
    since, until = day_span(since, until)
    zone = ZoneInfo(resolve_timezone(tz))
    out_dir = Path(out) if out is not None else lake.root / "html"
    if out_dir.is_symlink():
        raise UsageError("the report folder is a symlink", path=str(out_dir),
                         hint="give --out a real folder")
    # the report replaces and removes files in its folder: never a folder of the user's
    claim_folder(out_dir, HTML_MARKER, what="report", owned=REPORT_PAGES)
    summary = HtmlSummary(out=str(out_dir))
    bounds = {"since": since, "until": until, "project": project}
    policy = policy or DEFAULT_POLICY
    filters = ", ".join(f"{k} {v}" for k, v in (("since", since), ("until", until),
                                                  ("project", project)) if v) or "all sessions"
    with lake.connect() as con:
        con.execute(sqlfiles.load("set_progress_bar_off"))
        _ensure_optional_views(con)
        listed = _fetch(con, "select_html_sessions", {**bounds, "policy": policy})
        by_id = {s["session_id"]: s for s in listed}
        summary.sessions = len(listed)
        from pipeline.stages.summarize import PROMPTS_PER_SESSION, topic_of

        prompts: dict[str, list[str]] = {}
        if listed:
            for row in _fetch(con, "select_session_prompts",
                              {"sessions": sorted(by_id), "limit": PROMPTS_PER_SESSION}):
                prompts.setdefault(row["session_id"], []).append(row["text"])
        topics = {sid: topic_of(prompts.get(sid, [])) for sid in by_id}
        tools = tool_usage(lake, since=since, until=until, project=project)
        runs = _fetch(con, "select_html_runs", {"limit": RUNS_SHOWN})
        writer = _Writer(out_dir, summary)
        writer.folder()
        write_marker(out_dir, HTML_MARKER, "ctxlake HTML report: its files are replaced and removed by each render\n")
        writer.write(out_dir / "index.html", _overview(con, listed, tools, runs, filters, bounds, policy))
        writer.write(out_dir / "sessions.html", _session_list(listed, topics, filters, policy))
        writer.write(out_dir / "policies.html", _policies(con))

        children: dict[str, list[dict]] = {}
        for s in listed:
            if s["parent_session_id"] in by_id:
                children.setdefault(s["parent_session_id"], []).append(s)
        if sessions is None:
            wanted = None
        else:
            chosen = {s for s in sessions if s in by_id}
            chosen |= {by_id[s]["parent_session_id"] for s in chosen
                       if by_id[s]["parent_session_id"] in by_id}
            wanted = sorted(chosen)
        filtered = any(v is not None for v in bounds.values())
        evictions = [e for e in _fetch(con, "select_html_evictions", {
            "policy": policy, "session_ids": sorted(by_id) if filtered else None})
            if e["session_id"] in by_id]
        sessions_dir = writer.folder("sessions")
        payload_dir = writer.folder("payloads")
        store = PayloadStore.for_lake(lake.root)
        payload_shas = sorted({e["payload_sha256"] for e in evictions
                               if e["locator"] and e["payload_sha256"]
                               and _SHA.match(e["payload_sha256"])})
        in_store = {sha for sha in payload_shas if store.has(sha)}
        ev_by_session: dict[str, list[dict]] = {}
        for e in evictions:
            ev_by_session.setdefault(e["session_id"], []).append(e)
        if wanted is None or wanted:
            for session_id, rows in _rows_by_session(con, wanted if wanted is not None
                                                     else None):
                if session_id not in by_id:
                    continue
                mine = ev_by_session.get(session_id, [])
                pages = _session_pages(lake, by_id[session_id], rows, mine,
                                       children.get(session_id, []), topics[session_id],
                                       zone, in_store, policy)
                folder = writer.folder("sessions", session_slug(session_id))
                for index, data in enumerate(pages):
                    writer.write(folder / _page_name(index), data)
                expected = {_page_name(i) for i in range(len(pages))}
                for stale in sorted(folder.iterdir()):
                    if _PAGE.match(stale.name) and stale.name not in expected:
                        writer.remove(stale)
                summary.sessions_rendered += 1
                rendered_shas = {e["payload_sha256"] for e in mine if e["payload_sha256"] in in_store}
                for sha in sorted(rendered_shas):
                    target = payload_dir / f"{sha}.html"
                    if not target.is_file():
                        writer.write(target, _payload_page(sha, store.get(sha)))
                        summary.payload_pages += 1
        store.close()
        # pages of sessions and payloads no longer in the report
        slugs = {session_slug(s) for s in by_id}
        for folder in sorted(sessions_dir.iterdir()):
            if folder.name not in slugs:
                writer.remove(folder)
        for path in sorted(payload_dir.iterdir()):
            if path.suffix != ".html" or path.stem not in in_store:
                writer.remove(path)
    summary.seconds = time.perf_counter() - started
    return summary
