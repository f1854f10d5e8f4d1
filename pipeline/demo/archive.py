"""A deterministic, realistic demo archive of agent transcripts in every format ctxlake reads.

``write_demo_archive(out, size_bytes=S, seed=N)`` writes, under ``out``, the layout of the real
locations::

    claude/projects/<encoded-cwd>/<sessionId>.jsonl               Claude Code sessions (most bytes)
    claude/projects/<encoded-cwd>/agent-<8hex>.jsonl              sub-agents, 2.0 layout
    claude/projects/<encoded-cwd>/<sessionId>/subagents/agent-<8hex>.jsonl   newer layout
    gemini/tmp/<project hash>/chats/session-*.json                Gemini CLI, legacy whole-JSON
    gemini/tmp/<project hash>/chats/session-<YYYY-MM-DDTHH-MM>-<id8>.jsonl    current JSONL log
    codex/sessions/YYYY/MM/DD/rollout-<YYYY-MM-DDThh-mm-ss>-<uuid>.jsonl      Codex CLI rollouts
    openai/chat-*.jsonl, anthropic/messages-*.jsonl               one conversation per line
    swe-agent/trajectories/<run>/<instance>.traj                   SWE-agent (1.x and 0.x)
    mini-swe-agent/<instance>/<instance>.traj.json                mini-SWE-agent (v1 text, v1.1 tools)

Determinism contract: the same ``(seed, size_bytes, start)`` gives byte-identical files with the
same names and the same mtimes, on any machine and in any run (checked on CPython 3.11+).
Nothing reads the wall clock, the environment, the hash seed or directory order: every random
choice comes from ``random.Draws`` seeded with a string built from the seed (string seeds go
through SHA-512, which is stable across versions), and every timestamp is derived from ``start``
(default 2026-11-01 UTC; sessions spread over 20 days). A different ``size_bytes`` gives a
different archive (budgets shape every session); the text pools are fixed.

What the archive contains, on purpose (the first Claude sessions are scripted so that even a
tiny archive shows all of it): split assistant lines sharing ``message.id``/``requestId`` with
usage repeated and ``output_tokens`` final on the last line; tool_use/tool_result pairs with
``toolUseResult``; ``isMeta`` records and ``<command-name>`` slash commands;
``file-history-snapshot`` and ``compact_boundary``/``microcompact_boundary`` records; CJK and
emoji text; tool payloads from a few bytes to several MB (heavy-tailed: payloads over 16 KiB
are common, a few are multi-MB when the size allows); reads of managed-memory files
(``CLAUDE.md``, ``.claude/CLAUDE.md``, ``~/.claude/CLAUDE.md``, ``GEMINI.md``); idle gaps over an
hour; tool errors (``is_error``, ``<tool_use_error>``, non-zero exit codes); todo lists whose
items get completed; ``git commit``, ``pip install`` and ``npm install`` commands; repeated
reads of the same path; sub-agents in all three Claude layouts; several models plus one model
no price table knows (``acme-internal-coder-v3``) so reports show "unpriced".

One planted strategic showcase: the third Claude session (``claude_code.ClaudeSession.feature_work``) is
a long feature session that ends cleanly (tests green, todos completed, then a commit with no
recent errors), so ``ctxlake suggest`` has a compaction point to show in every archive from
~2 MB up, for any seed: turn 64, 57.7 weighted calls, at its commit. The first two sessions
get at most a third of the remaining Claude budget each, to leave it room.

Recorded usage is derived from the content, as an API would count it (``usage.Meter``): the
prompt of a call is a per-session overhead (system prompt and tool definitions, constant within
the session) plus the tokens of everything before the call (the current turn's thinking
included, earlier turns' dropped), split into cached and fresh parts the way each format records
them (Claude's cache read/creation with a 5-minute cache, Codex's ``cached_input_tokens`` in
128-token blocks, Gemini's ``cached`` in 1024-token blocks, DeepSeek's in 64); the output is the
tokens of what the call wrote plus a framing per tool call and a stop token, with hidden
reasoning recorded apart where the format does (Codex ``reasoning_output_tokens``, Gemini
``thoughts``). Tokens are docs/policies.md's heuristic times a per-model factor per content class
(prose, code, CJK), each piece of text with its own small deviation. SWE-agent's run totals are
the sums over its calls; mini-SWE-agent's ``instance_cost`` the sum of its calls' costs. The
OpenAI/Anthropic message logs record no usage (as before).

Bad data: none, except ONE deliberate case: the Claude session that ends last (a session
"still being written") ends with an incomplete last line (no newline). Ingest holds that line
back (``held_back = 1``); it is never quarantined. ``DemoSummary.held_back_files`` names it.
Not included: Claude's ``subagents/*.meta.json`` side files (their shape is not documented).

Sizes: ``size_bytes`` is a target; generation stops once it is reached (from 2 MB up the total
lands within ~2% above it; below that, the minimum of every format can overshoot). About 75-80%
of the bytes are Claude Code, like real archives. 500 MB take ~10-15 s on 2 cores.

Changing what is written for a given (seed, size) must bump ``GENERATOR`` (recorded in the
marker file), so that cached archives built by an older generator are rebuilt.

The package: ``context`` (the seeded random source with its id draws, the archive's clock,
budget and output folder, a session's plan), ``content`` (word banks, prose, prompts, the text
pools), ``projects``, ``usage`` (tokenizers and the usage meter), one module per format
written (``claude_code`` with ``claude_tools``, ``gemini_cli``, ``codex_cli``, ``chat_logs``,
``swe_agent``, ``mini_swe_agent``), and this module, which splits the size budget between
them, writes them in a fixed order and records the marker file.
"""

from __future__ import annotations

import os
import re
import stat
from datetime import date, datetime, timezone
from pathlib import Path
from typing import Callable

import orjson

from pipeline.core.errors import UsageError
from pipeline.demo import chat_logs, claude_code, codex_cli, gemini_cli, mini_swe_agent, swe_agent
from pipeline.demo.context import DemoContext, DemoSummary, write_own
from pipeline.demo.projects import make_projects
from pipeline.demo.usage import UNPRICED_MODEL

DEFAULT_START = date(2026, 11, 1)
MARKER = ".ctxlake-demo"          # lists the generated files; no transcript suffix, so ingest skips it
# Bump whenever the bytes written for a given (seed, size) change, so caches built from an
# older generator (bench/results/archive-*) are rebuilt.
GENERATOR = "ctxlake demo 4"
MIN_SIZE = 256 * 1024

__all__ = ["DemoSummary", "write_demo_archive", "parse_size", "UNPRICED_MODEL", "MARKER", "GENERATOR"]


# ---------------------------------------------------------------------------------------
# Sizes
# ---------------------------------------------------------------------------------------
_UNITS = {"": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
          "k": 10**3, "m": 10**6, "g": 10**9,
          "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}


def parse_size(text: str | int) -> int:
    """``"200MB"`` -> 200_000_000. KB/MB/GB are decimal, KiB/MiB/GiB binary; case-insensitive."""
    if isinstance(text, int):
        return text
    match = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([a-zA-Z]*)\s*", str(text))
    unit = match.group(2).lower() if match else None
    if not match or unit not in _UNITS:
        raise UsageError(f"cannot read the size '{text}'",
                         hint="write a number with a unit, e.g. 500KB, 200MB, 1GB (or 64MiB)")
    return int(float(match.group(1)) * _UNITS[unit])


def _human(n: int) -> str:
    for unit, scale in (("GB", 10**9), ("MB", 10**6), ("KB", 10**3)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"


# ---------------------------------------------------------------------------------------
# The archive
# ---------------------------------------------------------------------------------------
def _budgets(size: int) -> dict[str, int]:
    """Each format's share of ``size`` bytes (Claude Code gets the rest: most of it)."""
    s = size
    small = max(8_000, min(400_000, int(s * 0.0025)))
    chat = max(12_000, int(s * 0.015))
    budgets = {"swe_agent": 2 * small, "mini_swe_agent": 2 * small, "openai_chat": chat,
               "anthropic_messages": chat, "gemini_cli": max(40_000, int(s * 0.07)),
               "codex_cli": max(40_000, int(s * 0.09))}
    budgets["claude_code"] = max(100_000, s - sum(budgets.values()))
    return budgets


def _write_all(ctx: DemoContext) -> DemoSummary:
    budgets = _budgets(ctx.size)
    _trajectories(ctx, budgets["swe_agent"] // 2)
    chat_logs.write_logs(ctx, "openai_chat", "openai", budgets["openai_chat"])
    chat_logs.write_logs(ctx, "anthropic_messages", "anthropic", budgets["anthropic_messages"])
    gemini_cli.write_sessions(ctx, budgets["gemini_cli"])
    codex_cli.write_sessions(ctx, budgets["codex_cli"])
    # Claude Code is written last and absorbs the others' overshoot: it is the most
    # finely controlled (sessions stop between steps), so the total lands on the target.
    claude_code.write_sessions(ctx, max(budgets["claude_code"] // 2, ctx.size - ctx.done))
    s = ctx.summary
    s.files = len(ctx.manifest)
    s.size_bytes = sum(n for _, n in ctx.manifest)
    s.sessions = sum(v.sessions for v in s.formats.values())
    ctx.manifest.sort()
    marker = {"generator": GENERATOR, "seed": ctx.seed, "size_target": ctx.size,
              "files": [{"path": rel, "bytes": n} for rel, n in ctx.manifest],
              "held_back_files": s.held_back_files}
    write_own(ctx.out, ctx.out / MARKER, orjson.dumps(marker, option=orjson.OPT_INDENT_2) + b"\n")
    os.utime(ctx.out / MARKER, ns=(ctx.t0 * 1_000_000, ctx.t0 * 1_000_000))
    return s


def _trajectories(ctx: DemoContext, each: int) -> None:
    """Two SWE-agent trajectories (1.x, 0.x), then two mini-SWE-agent ones (tools, text), all
    from one random source."""
    rng = ctx.draws("trajectories")
    for v1 in (True, False):
        rel, data = swe_agent.trajectory(rng, each, v1=v1)
        ctx.write("swe_agent", rel, data, ctx.session_start(rng), sessions=1)
    for tools in (True, False):
        start = ctx.session_start(rng)
        rel, data = mini_swe_agent.trajectory(rng, each, tools=tools, clock=start)
        ctx.write("mini_swe_agent", rel, data, start + 3_600_000, sessions=1)


def _listed_file(out: Path, item) -> Path | None:
    """The file a demo marker entry names, when it is one this generator wrote: a relative
    path inside ``out`` (no ``..``, no symlink on the way), a regular file of the listed size."""
    if not isinstance(item, dict) or not isinstance(item.get("path"), str) \
            or not isinstance(item.get("bytes"), int):
        return None
    rel = Path(item["path"])
    if rel.is_absolute() or ".." in rel.parts or not rel.parts:
        return None
    current = out
    for part in rel.parts:
        current = current / part
        if current.is_symlink():
            return None
    try:
        st = current.lstat()
    except OSError:
        return None
    if not stat.S_ISREG(st.st_mode) or st.st_size != item["bytes"]:
        return None
    return current


def _clear_previous(out: Path) -> None:
    """Remove a previous demo archive in ``out``: only the files its marker lists that this
    generator wrote (see :func:`_listed_file`); a marker naming anything else (an absolute or
    ``../`` path, a symlink, a file of another size) deletes nothing of it."""
    marker = out / MARKER
    if not out.exists():
        return
    if not marker.exists() or marker.is_symlink() or not marker.is_file():
        if any(out.iterdir()):
            raise UsageError(f"{out} exists and is not a demo archive",
                             path=str(out), hint="choose an empty or new folder with --out")
        return
    try:
        listed = orjson.loads(marker.read_bytes()).get("files", [])
    except (orjson.JSONDecodeError, AttributeError):
        raise UsageError(f"{out} holds an unreadable demo marker", path=str(marker),
                         hint="choose an empty or new folder with --out") from None
    for item in listed if isinstance(listed, list) else []:
        path = _listed_file(out, item)
        if path is not None:
            path.unlink()
    marker.unlink()
    for dirpath, dirnames, filenames in sorted(os.walk(out, topdown=False), key=lambda t: -len(t[0])):
        if Path(dirpath) != out and not os.listdir(dirpath):
            os.rmdir(dirpath)


def write_demo_archive(out: Path, *, size_bytes: int, seed: int, start: date | None = None,
                       progress: Callable[[int, int], None] | None = None) -> DemoSummary:
    """Write a deterministic demo archive of about ``size_bytes`` under ``out``.

    A previous demo archive in ``out`` (recognised by its marker file) is replaced; any other
    non-empty folder is refused. ``progress(done_bytes, target_bytes)`` is called after each
    file. See the module docstring for the determinism contract.
    """
    if size_bytes < MIN_SIZE:
        raise UsageError(f"a demo archive needs at least {_human(MIN_SIZE)} (asked for {_human(size_bytes)})",
                         hint="use e.g. --size 2MB")
    out = Path(out)
    _clear_previous(out)
    out.mkdir(parents=True, exist_ok=True)
    start = start or DEFAULT_START
    t0 = int(datetime(start.year, start.month, start.day, tzinfo=timezone.utc).timestamp() * 1000)
    return _write_all(DemoContext(out, seed, size_bytes, t0, make_projects(seed), progress))
