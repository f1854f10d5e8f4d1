"""The replay report: ``report.md`` with the comparison table, and PNG charts.

``write_report(result, out_dir)`` writes, from a :class:`pipeline.stages.replay.ReplayResult`:

- ``report.md``: what was replayed, the comparison table (policies as rows; totals and medians
  over sessions), the definitions behind each column, the estimate-vs-usage figures, the
  policies' parameters, and the charts;
- ``context_per_turn.png``: context tokens per turn of one session under each policy (the
  session given, else the one with the most turns among those where some policy evicted
  something; ties by session id);
- ``cost_vs_risk.png``: cost saved (with caching; tokens saved when nothing is priced) against
  at-risk evictions, one point per policy;
- ``savings_distribution.png``: the distribution of per-session token savings per policy.

Charts are drawn with matplotlib's Agg canvas on standalone ``Figure`` objects (no pyplot, no
global backend switch, so the functions are safe inside notebooks too) and saved without the
"Software" metadata: same result, same bytes. Every file is written atomically.
"""

from __future__ import annotations

import dataclasses
import io
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import pyarrow as pa
import pyarrow.compute as pc

from pipeline.core.errors import UsageError
from pipeline.core.lake import atomic_write_bytes, private_dirs

__all__ = ["COMPARISON_COLUMNS", "comparison_table", "markdown_table", "choose_chart_session",
           "context_figure", "cost_risk_figure", "savings_figure", "write_report", "ReportFiles"]

# (summary key, header, kind): the columns of the comparison table (CLI and report.md).
COMPARISON_COLUMNS: list[tuple[str, str, str]] = [
    ("policy", "policy", "text"),
    ("sessions", "sessions", "int"),
    ("turns", "turns", "int"),
    ("total_input_tokens", "input tokens", "int"),
    ("tokens_saved_pct", "saved % (total)", "pct"),
    ("median_tokens_saved_pct", "saved % (median)", "pct"),
    ("median_peak_context_tokens", "peak ctx (median)", "int"),
    ("max_peak_context_tokens", "peak ctx (max)", "int"),
    ("cost_usd", "cost $ (cached)", "usd"),
    ("cost_saved_pct", "cost saved %", "pct"),
    ("median_cost_saved_pct", "cost saved % (median)", "pct"),
    ("cost_uncached_saved_pct", "uncached cost saved %", "pct"),
    ("evictions", "evictions", "int"),
    ("at_risk_evictions", "at-risk (regret proxy)", "int"),
    ("protected_violations", "protected violations", "int"),
]
CLI_KEYS = ("policy", "sessions", "turns", "total_input_tokens", "tokens_saved_pct",
            "median_tokens_saved_pct", "median_peak_context_tokens", "cost_usd", "cost_saved_pct",
            "cost_uncached_saved_pct", "evictions", "at_risk_evictions", "protected_violations")
# Narrower headers for a terminal.
SHORT_HEADERS = {"total_input_tokens": "input tok", "tokens_saved_pct": "saved %",
                 "median_tokens_saved_pct": "median saved %",
                 "median_peak_context_tokens": "median peak", "cost_usd": "cost $",
                 "cost_saved_pct": "cost saved %", "cost_uncached_saved_pct": "uncached saved %",
                 "at_risk_evictions": "at-risk (regret)", "protected_violations": "violations"}


def _cell(value: Any, kind: str) -> str:
    if value is None:
        return "-"
    if kind == "int":
        return f"{int(round(value)):,}"
    if kind == "pct":
        return f"{value:.1f}"
    if kind == "usd":
        return f"{value:,.4f}"
    return str(value)


def comparison_table(summary: Sequence[dict], *, keys: Sequence[str] | None = None,
                     short: bool = False) -> tuple[list[str], list[tuple]]:
    """(headers, rows of formatted cells) of the comparison table; ``keys`` picks columns,
    ``short`` uses the narrower terminal headers."""
    columns = [c for c in COMPARISON_COLUMNS if keys is None or c[0] in keys]
    headers = [SHORT_HEADERS.get(key, header) if short else header
               for key, header, _kind in columns]
    rows = [tuple(_cell(row.get(key), kind) for key, _header, kind in columns) for row in summary]
    return headers, rows


def markdown_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A GitHub-flavoured Markdown table (numbers right-aligned)."""
    def align(i: int) -> str:
        numeric = bool(rows) and all(_numeric(r[i]) for r in rows)
        return "---:" if numeric else "---"

    lines = ["| " + " | ".join(headers) + " |",
             "| " + " | ".join(align(i) for i in range(len(headers))) + " |"]
    for row in rows:
        lines.append("| " + " | ".join(str(c).replace("|", "\\|") for c in row) + " |")
    return "\n".join(lines)


def _numeric(text: Any) -> bool:
    cleaned = str(text).replace(",", "").replace(".", "").replace("-", "")
    return cleaned.isdigit() or str(text) == "-"


# ---------------------------------------------------------------------------------------
# Charts
# ---------------------------------------------------------------------------------------
def charts_unavailable() -> str | None:
    """Why the charts cannot be drawn (matplotlib, the ``reports`` extra, is missing), or None."""
    try:
        import matplotlib.backends.backend_agg  # noqa: F401
        import matplotlib.figure  # noqa: F401
    except ImportError:
        return "matplotlib is not installed (pip install 'ctxlake[reports]')"
    return None


def _figure(width: float = 8.0, height: float = 4.5):
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:
        raise UsageError("the replay report's charts need matplotlib",
                         hint="pip install 'ctxlake[reports]'") from None

    fig = Figure(figsize=(width, height), dpi=100)
    FigureCanvasAgg(fig)
    return fig


def _png(fig) -> bytes:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", metadata={"Software": None})
    return buffer.getvalue()


def choose_chart_session(evals: pa.Table, policies: Sequence[str]) -> str | None:
    """The session with the most turns among those where some policy evicted something
    (all sessions when none did); ties broken by session id."""
    if evals.num_rows == 0:
        return None
    rows = evals.select(["policy", "session_id", "turns", "evictions"]).to_pylist()
    evicted = {r["session_id"] for r in rows if r["policy"] in policies and r["evictions"]}
    candidates = [r for r in rows if (r["session_id"] in evicted or not evicted)
                  and r["turns"]]
    if not candidates:
        return None
    best = min(candidates, key=lambda r: (-r["turns"], r["session_id"]))
    return best["session_id"]


def context_figure(turns: pa.Table, session_id: str, policies: Sequence[str]):
    """Context tokens per turn of ``session_id`` under each policy (one line each)."""
    fig = _figure()
    ax = fig.add_subplot(1, 1, 1)
    mine = turns.filter(pc.equal(turns.column("session_id"), session_id))
    for policy in policies:
        part = mine.filter(pc.equal(mine.column("policy"), policy)).sort_by("turn")
        if part.num_rows == 0:
            continue
        x = [t + 1 for t in part.column("turn").to_pylist()]
        style = {"linestyle": "--", "color": "black", "linewidth": 1.2} if policy == "none" \
            else {"linewidth": 1.5}
        ax.plot(x, part.column("context_tokens").to_pylist(), label=policy, **style)
    ax.set_xlabel("turn (API call)")
    ax.set_ylabel("context tokens (estimate)")
    ax.set_title(f"Context per turn: {session_id}", fontsize=10)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def cost_risk_figure(summary: Sequence[dict]):
    """Cost saved with caching (filled) and without (hollow) against at-risk evictions, one
    point per policy (policies at the same point share a label); tokens saved when no
    session is priced."""
    priced = any(row.get("cost_saved_pct") is not None for row in summary)
    key = "cost_saved_pct" if priced else "tokens_saved_pct"
    fig = _figure()
    ax = fig.add_subplot(1, 1, 1)
    points: dict[tuple, list[str]] = {}
    for row in summary:
        y = row.get(key)
        if y is None:
            continue
        x = row.get("at_risk_evictions") or 0
        points.setdefault((x, round(y, 2)), []).append(row["policy"])
        if priced and row.get("cost_uncached_saved_pct") is not None:
            ax.scatter([x], [row["cost_uncached_saved_pct"]], s=40, facecolors="none",
                       edgecolors="grey")
    for (x, y), names in sorted(points.items()):
        ax.scatter([x], [y], s=40)
        ax.annotate("\n".join(names), (x, y), textcoords="offset points", xytext=(6, 4),
                    fontsize=7, va="bottom")
    ax.axhline(0, color="grey", linewidth=0.8)
    ax.margins(x=0.25, y=0.2)
    ax.set_xlabel("at-risk evictions (proxy for regret)")
    ax.set_ylabel("saved vs none, % of cost" if priced else "tokens saved vs none, %")
    ax.set_title("Saving vs at-risk evictions per policy"
                 + (" (filled: with prompt caching; hollow: uncached)" if priced else ""),
                 fontsize=10)
    ax.grid(True, alpha=0.3)
    fig.tight_layout()
    return fig


def savings_figure(evals: pa.Table, policies: Sequence[str]):
    """Distribution of per-session token savings (%) under each policy but ``none``."""
    shown = [p for p in policies if p != "none"] or list(policies)
    data, labels = [], []
    for policy in shown:
        part = evals.filter(pc.equal(evals.column("policy"), policy))
        values = [v for v in part.column("tokens_saved_pct").to_pylist() if v is not None]
        data.append(values or [0.0])
        labels.append(policy)
    fig = _figure(8.0, max(2.5, 0.6 * len(labels) + 1.5))
    ax = fig.add_subplot(1, 1, 1)
    try:
        ax.boxplot(data, orientation="horizontal", showmeans=True)   # matplotlib >= 3.10
    except TypeError:
        ax.boxplot(data, vert=False, showmeans=True)
    ax.set_yticks(range(1, len(labels) + 1))
    ax.set_yticklabels(labels, fontsize=8)
    ax.set_xlabel("tokens saved per session vs none, %")
    sessions = max((len(values) for values in data), default=0)
    ax.set_title(f"Savings per session ({sessions} sessions; box: quartiles, triangle: mean)",
                 fontsize=10)
    ax.grid(True, axis="x", alpha=0.3)
    fig.tight_layout()
    return fig


# ---------------------------------------------------------------------------------------
# report.md
# ---------------------------------------------------------------------------------------
def _usage_section(result) -> list[str]:
    evals = result.evals
    base = evals.filter(pc.equal(evals.column("policy"), "none"))
    rows = [r for r in base.to_pylist() if r["recorded_input_tokens"]]
    if not rows:
        return ["No session has recorded usage: the token figures are estimates only."]
    recorded = sum(r["recorded_input_tokens"] for r in rows)
    estimated = sum(r["estimated_input_tokens"] for r in rows)
    lines = [f"{len(rows)} sessions have recorded usage ({sum(r['usage_turns'] for r in rows)} "
             f"turns). Over them the replay's context estimate ({rows[0]['estimator']}) totals "
             f"{estimated:,} tokens against {recorded:,} recorded "
             f"({100.0 * (estimated - recorded) / recorded:+.1f}%). Recorded usage includes "
             "the system prompt and tool definitions, which transcripts do not carry.", ""]
    headers = ["session", "scope", "turns", "recorded input", "estimated", "error %",
               "heuristic error %"]
    table = [(r["session_id"], r["usage_scope"], r["usage_turns"],
              f"{r['recorded_input_tokens']:,}", f"{r['estimated_input_tokens']:,}",
              _cell(r["estimate_error_pct"], "pct"), _cell(r["heuristic_error_pct"], "pct"))
             for r in sorted(rows, key=lambda r: r["session_id"])[:30]]
    lines.append(markdown_table(headers, table))
    if len(rows) > 30:
        lines.append(f"\n(first 30 of {len(rows)} sessions; all in `policy_eval`)")
    return lines


def render_markdown(result, charts: dict[str, str], chart_session: str | None,
                    charts_skipped: str | None = None) -> str:
    ttl = result.cache_ttl_minutes
    lines = ["# Replay report", ""]
    lines.append(f"- Sessions replayed: {result.sessions:,}"
                 + (f" ({result.sessions_ignored:,} skipped by ignore_patterns)"
                    if result.sessions_ignored else ""))
    lines.append(f"- Policies: {', '.join(f'`{p}`' for p in result.policies)} "
                 "(`none` is the baseline)")
    lines.append("- Prompt cache: " + ("no expiry" if ttl is None else f"TTL {ttl:g} min"))
    lines.append(f"- Prices: {result.price_source}"
                 + (f"; every call priced as `{result.price_model}`" if result.price_model
                    else "; each call at its recorded model"))
    lines.append(f"- Token estimate vs recorded usage: {result.estimator}")
    if getattr(result, "replay_id", None):
        lines.append(f"- Replay id: `{result.replay_id}` (its rows in `policy_eval` and "
                     f"`replay_turns`: `WHERE replay_id = '{result.replay_id}'`)")
    lines += ["", "## Comparison", ""]
    headers, rows = comparison_table(result.summary)
    lines.append(markdown_table(headers, rows))
    priced = [r["priced_sessions"] for r in result.summary if r["policy"] == "none"]
    if priced and priced[0] < result.sessions:
        lines.append("")
        lines.append(f"Costs cover the {priced[0]:,} sessions whose every turn has a price; "
                     "the others (unknown model) are left out of the cost columns, never "
                     "counted as $0.")
    lines += ["", "What the columns mean:", "",
              "- *input tokens*: context sent summed over every turn (API call), estimated "
              "with `est_tokens`; *saved %* against `none`, over all sessions (total) and the "
              "median of per-session savings.",
              "- *peak ctx*: the largest context of a session (median over sessions, max).",
              "- *cost $ (cached)*: each turn reads from the prompt cache the prefix unchanged "
              "since the previous turn and writes the rest at the cache-write price, plus "
              "output; a clearing invalidates the cache from the earliest changed position. "
              "*uncached cost saved %*: the same calls billed without a cache.",
              "- *at-risk (regret proxy)*, a proxy for regret: evicted items whose path or exact "
              "call is requested again after the eviction took effect. A replay cannot see how the agent would "
              "have acted differently; this counts the times it came back for the content.",
              "- *protected violations*: evictions of user/assistant/system text, managed-memory "
              "reads, tail-protected exchanges or excluded tools. Must be 0."]
    lines += ["", "## Charts", ""]
    if charts_skipped:
        lines += [f"Charts skipped: {charts_skipped}.", ""]
    if "context_per_turn" in charts:
        lines.append(f"Context tokens per turn for `{chart_session}` under each policy:")
        lines += ["", f"![Context tokens per turn]({charts['context_per_turn']})", ""]
    if "cost_vs_risk" in charts:
        lines += ["Saving against at-risk evictions, per policy:", "",
                  f"![Saving vs at-risk evictions]({charts['cost_vs_risk']})", "",
                  "Savings per session:", "",
                  f"![Distribution of savings per session]({charts['savings_distribution']})",
                  ""]
    lines += ["## Estimate vs recorded usage", ""]
    lines += _usage_section(result)
    lines += ["", "## Policies", ""]
    for name in result.policies:
        steps = result.steps.get(name, [])
        described = " then ".join(
            s["policy"] + ("(" + ", ".join(f"{k}={_param(v)}" for k, v in sorted(s["params"].items()))
                           + ")" if s["params"] else "") for s in steps)
        lines.append(f"- `{name}`: {described or name} (config hash "
                     f"`{result.config_hashes.get(name, '')}`)")
    lines.append("")
    return "\n".join(lines)


def _param(value: Any) -> str:
    if isinstance(value, (list, tuple)) and len(value) > 4:
        return f"[{len(value)} items]"
    return repr(value)


@dataclass
class ReportFiles:
    """What :func:`write_report` wrote: the folder, report.md, the charts (paths), the session
    of the per-turn chart and why charts were skipped (None: they were not)."""

    dir: str
    report: str
    charts: list[str]
    chart_session: str | None
    charts_skipped: str | None

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def write_report(result, out_dir: Path, *, session_id: str | None = None) -> ReportFiles:
    """Write ``report.md`` and the charts under ``out_dir``; return what was written.
    Without matplotlib (the ``reports`` extra) ``report.md`` is still written, without
    charts, and says so (``charts_skipped``)."""
    out_dir = Path(out_dir)
    private_dirs(out_dir)       # the report quotes the lake's sessions: 0700 whatever the umask
    charts: dict[str, str] = {}
    chart_session = session_id or choose_chart_session(result.evals, result.policies)
    skipped = charts_unavailable()
    figures = []
    if skipped is None and chart_session is not None:
        figures.append(("context_per_turn",
                        context_figure(result.turns, chart_session, result.policies)))
    if skipped is None:
        figures.append(("cost_vs_risk", cost_risk_figure(result.summary)))
        figures.append(("savings_distribution", savings_figure(result.evals, result.policies)))
    for name, fig in figures:
        filename = f"{name}.png"
        atomic_write_bytes(out_dir / filename, _png(fig))
        charts[name] = filename
    report = out_dir / "report.md"
    atomic_write_bytes(report, render_markdown(result, charts, chart_session,
                                               skipped).encode("utf-8"))
    return ReportFiles(dir=str(out_dir), report=str(report),
                       charts=[str(out_dir / f) for f in charts.values()],
                       chart_session=chart_session, charts_skipped=skipped)
