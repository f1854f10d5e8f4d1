"""Recovery documents: where to pick up a session, from transcript evidence only.

The document is the structured session-memory format of Claude Code Workflow's
``/memory:compact`` (catlog22/Claude-Code-Workflow): a ``CMEM-YYYYMMDD-HHMMSS`` id, then
Session ID, Project Root, Objective, Execution Plan (``### Source: workflow | todo |
user-stated | inferred``, the plan verbatim inside ``<details>``), Working Files (Modified),
Reference Files (Read-Only), Last Action, Decisions, Constraints, Dependencies, Known
Issues, Changes Made, Pending, Notes. ctxlake writes it without a model: every field is
filled from what the transcript shows, and a field with no evidence says ``(none)``.

Evidence rules (each is a test in ``tests/test_recover.py``):
- Id: ``CMEM-YYYYMMDD-HHMMSS`` of the session's last activity (latest timestamp of its rows),
  in UTC; when the transcript has no timestamps at all, its file's modification time (UTC).
  Ids are unique per lake: when several sessions of the lake have the same second, each of
  them gets ``-`` and the first 6 hex digits of the sha256 of its session id appended
  (``CMEM-20251209-194850-1a2b3c``), so a document written before the second session arrived
  keeps an id no other document has (:func:`unique_memory_ids`).
- Session ID: the workflow session id (``WFS-...``) when the transcript has one: the
  ``WFS-*`` folder of the workflow plan (``.workflow/active/WFS-x/IMPL_PLAN.md``), else the
  last ``WFS-*`` name in the main thread's tool inputs or messages; else ``(none)``. The
  transcript's own session id is in Notes.
- Project Root: the specification's detection: from the session's cwd (``sessions.project``,
  else the first tool call's cwd) up, the top-most folder holding ``.git``, ``package.json``
  or ``.claude``, when that tree is present on this machine (folders at or above a home
  directory, the cwd's or this user's, such as ``~`` with its ``~/.claude`` settings, are
  not project roots);
  else the cwd itself.
- Objective: the first human prompt, with injected metadata removed (``<system-reminder>``,
  ``<environment_context>``, slash-command wrappers, ...): its first 1-2 sentences (the
  specification's "High-level goal (1-2 sentences)"; a sentence ends at ``.``/``!``/``?``
  followed by a space, or at a blank line; whitespace collapsed; at most 800 characters);
  when the session has no prompt, the first slash command the user typed with its arguments.
- Execution Plan, by the specification's priority: ``workflow (IMPL_PLAN.md)`` = the latest
  content of an ``IMPL_PLAN.md`` the session wrote (its content) or read (the result, line
  numbers stripped); ``todo (TodoWrite)`` = the LAST todo state of Claude Code ``TodoWrite``
  (or ``TaskCreate``/``TaskUpdate`` replayed), Gemini/Qwen ``write_todos``/``todo_write``,
  Codex ``update_plan`` (``- [x]`` completed, ``- [>]`` in progress, ``- [ ]`` pending,
  cancelled struck through); ``user-stated`` = the numbered list (2+ items) of the latest
  prompt that has one; ``inferred`` = the latest plan the assistant wrote (Claude Code
  ``ExitPlanMode``'s ``plan``, a file written under a ``plans/`` folder or named
  ``*plan*.md``), else the numbered list of the latest assistant message that introduces it
  as a plan or steps ("plan", "steps", "I'll", "I will", "let me", "next"). Verbatim.
- Working Files: absolute paths (``pipeline.text.paths.request_paths``, relative paths resolved
  against the call's cwd) of successful edit/write calls (incl. Codex ``apply_patch`` file
  headers), with their role (created / written / edited / deleted / moved). Reference Files:
  paths successfully read (read tools, ``cat``/``head``/``sed -n`` of a simple shell command)
  and never modified. Sub-agent sessions' calls count for their parent.
- Last Action: the last tool call of the main thread, its status (success / failed / no
  result recorded) and the first line of its result. A call failed when its result is an
  error or says ``Exit code: N`` / ``<returncode>N</returncode>`` with N != 0.
- Decisions: answers the user gave to ``AskUserQuestion``; a plan the user approved.
- Constraints: lines of the user's prompts that state one ("don't", "never", "must",
  "always", "only", "avoid", "without", "make sure", ...), verbatim.
- Dependencies: package installs in shell commands (pip / uv / poetry / conda / npm / pnpm /
  yarn / bun / cargo / go / apt / brew / gem / composer / dotnet), with their status.
- Known Issues: failed calls not followed by a success on the same target (same shell
  command, same file path, or same tool for other tools).
- Changes Made: files created / written / edited / deleted (per path, in order), git commits,
  and simple file-system commands (mkdir, touch, rm, mv, cp, ln, chmod).
- Pending: unfinished items of the last todo state.
- Notes: model, branch, time span, counts, sub-agents, context compactions, an interrupted
  last request, and the last assistant message (quoted, 500 characters).
"""

from __future__ import annotations

import functools
import os
import re
import shlex
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterable

import orjson

from pipeline.core import sqlfiles
from pipeline.core.lake import Lake, atomic_write_bytes
from pipeline.reports.sessions import resolve_session_id

NONE = "(none)"
OBJECTIVE_CHARS = 800
OBJECTIVE_SENTENCES = 2
PLAN_LABELS = {"workflow": "workflow (IMPL_PLAN.md)", "todo": "todo (TodoWrite)",
               "user-stated": "user-stated", "inferred": "inferred"}
PROJECT_MARKERS = (".git", "package.json", ".claude")
_WFS_ID = re.compile(r"\bWFS-[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?")
_LINE_NUMBER = re.compile(r"^ *\d+(?:→|\t)", re.M)
_SENTENCE_END = re.compile(r"(?<=[.!?。！？])\s+|\n\s*\n")
MAX_ITEMS = 12
PLAN_SUMMARY = "Full Execution Plan (Click to expand)"

# ---------------------------------------------------------------------------------------
# Text helpers shared with the daily logs
# ---------------------------------------------------------------------------------------
INJECTED_TAGS = (
    "environment_context", "system-reminder", "system_reminder", "user_instructions",
    "user-instructions", "INSTRUCTIONS", "instructions", "command-name", "command-message",
    "command-args", "command-contents", "local-command-stdout", "local-command-stderr",
    "local-command-caveat", "ide_opened_file", "ide_selection", "ide_diagnostics",
    "user-prompt-submit-hook", "turn_aborted", "user_shell_command", "session_context",
    "bash-input", "bash-stdout", "bash-stderr", "task-notification",
)
_TAGS = "|".join(re.escape(tag) for tag in INJECTED_TAGS)
_INJECTED_BLOCK = re.compile(rf"<({_TAGS})(?:\s[^>]*)?>.*?</\1\s*>", re.S)
_INJECTED_OPEN = re.compile(rf"<({_TAGS})(?:\s[^>]*)?>.*\Z", re.S)
_INJECTED_LINE = re.compile(
    r"^(Caveat: The messages below were generated by the user while running local commands"
    r"|# AGENTS\.md instructions for )")
_TAG_ONLY = re.compile(r"^</?[A-Za-z][\w:-]*(\s[^>]*)?/?>$")
_COMMAND = re.compile(r"<command-name>\s*(.*?)\s*</command-name>", re.S)
_COMMAND_ARGS = re.compile(r"<command-args>\s*(.*?)\s*</command-args>", re.S)


def meaningful_text(text: str | None) -> str:
    """A prompt's text without injected metadata blocks and their header lines."""
    if not text:
        return ""
    cleaned = _INJECTED_BLOCK.sub("", text)
    cleaned = _INJECTED_OPEN.sub("", cleaned)
    lines = [line for line in cleaned.splitlines()
             if not _INJECTED_LINE.match(line.strip()) and not _TAG_ONLY.match(line.strip())]
    return "\n".join(lines).strip()


def first_line(text: str | None) -> str:
    """The first non-blank line of meaningful text, whitespace collapsed ("" if none)."""
    for line in meaningful_text(text).splitlines():
        line = " ".join(line.split())
        if line:
            return line
    return ""


def clip(text: str, limit: int) -> str:
    """At most ``limit`` characters; a cut text ends with an ellipsis (counted)."""
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


# ---------------------------------------------------------------------------------------
# Evidence
# ---------------------------------------------------------------------------------------
_EXIT_CODE = re.compile(r"(?im)^\s*(?:exit code|process exited with code)\s*:?\s*(-?\d+)")
_RETURN_CODE = re.compile(r"<returncode>\s*(-?\d+)\s*</returncode>")
# Result text that says nothing by itself: tool_use_error / returncode / output tags, the
# labels of Gemini's and Codex's shell output, exit code lines (reported separately).
_RESULT_TAGS = re.compile(r"</?(tool_use_error|output|warning)>|<returncode>\s*-?\d+\s*</returncode>")
_BOOKKEEPING = re.compile(
    r"^(Command|Directory|Signal|Background PIDs|Process Group PGID|Wall time|Chunk ID|"
    r"Original token count|Total output lines)\s*:|^(Error|Stderr|Output):\s*(\(none\)|\(empty\))?$|"
    r"^(exit code|process exited with code)\s*:?\s*-?\d+$", re.I)
_OUTPUT_LABEL = re.compile(r"^(Output|Stdout|Stderr|Error):\s*")
_ERRORISH = re.compile(r"error|exception|traceback|not found|no such|denied|failed|fatal|"
                       r"cannot|can't|invalid|refused|timed out", re.I)


@dataclass
class ToolEvent:
    session_id: str
    seq: int
    timestamp: datetime | None
    tool_name: str
    family: str
    input: Any
    input_json: str | None
    cwd: str | None
    is_error: bool | None
    has_result: bool
    result_text: str
    from_subagent: bool
    is_sidechain: bool

    @functools.cached_property
    def status(self) -> str:
        """success | failed | unknown (no result recorded)."""
        if not self.has_result:
            return "unknown"
        if self.is_error:
            return "failed"
        text = self.result_text or ""
        for pattern in (_EXIT_CODE, _RETURN_CODE):
            match = pattern.search(text[:2000])
            if match and int(match.group(1)) != 0:
                return "failed"
        return "success"

    @property
    def command(self) -> str | None:
        """The shell command text of a shell call (lists joined with spaces)."""
        value = self.input.get("command", self.input.get("cmd")) if isinstance(self.input, dict) else None
        if isinstance(value, list) and all(isinstance(v, str) for v in value):
            if len(value) == 3 and value[0].rsplit("/", 1)[-1] in ("bash", "sh", "zsh") \
                    and value[1] in ("-c", "-lc"):
                return value[2]
            return " ".join(value)
        return value if isinstance(value, str) else None

    def exit_code(self) -> int | None:
        for pattern in (_EXIT_CODE, _RETURN_CODE):
            match = pattern.search((self.result_text or "")[:2000])
            if match:
                return int(match.group(1))
        return None

    def result_line(self) -> str:
        """The most telling line of the result: for a failure the first line that reads like
        an error, else the first line that is not shell-wrapper bookkeeping."""
        text = _RESULT_TAGS.sub("", self.result_text or "")
        lines = [" ".join(line.split()) for line in text.splitlines()]
        lines = [line for line in lines if line and not _BOOKKEEPING.match(line)]
        chosen = ""
        if self.status == "failed":
            chosen = next((line for line in lines if _ERRORISH.search(line)), "")
        if not chosen and lines:
            chosen = lines[0]
        chosen = _OUTPUT_LABEL.sub("", chosen)
        code = self.exit_code()
        if self.status == "failed" and code not in (None, 0):
            chosen = f"{chosen} (exit code {code})" if chosen else f"exit code {code}"
        return clip(chosen, 200)


@dataclass
class FileChange:
    path: str
    actions: list[str] = field(default_factory=list)
    edits: int = 0


@dataclass
class RecoveryDocument:
    memory_id: str
    session_id: str                     # the transcript's session id (the document's key)
    workflow_session_id: str | None     # the Session ID field: WFS-* or None
    project_root: str | None
    objective: str | None
    plan_source: str | None
    plan_text: str | None
    working_files: list[tuple[str, str]]
    reference_files: list[tuple[str, str]]
    last_action: list[str]
    decisions: list[str]
    constraints: list[str]
    dependencies: list[str]
    known_issues: list[str]
    changes: list[str]
    pending: list[str]
    notes: list[str]

    def to_markdown(self) -> str:
        def bullets(items: Iterable[str]) -> str:
            text = "\n".join(f"- {item}" for item in items)
            return text or NONE

        if self.plan_source and self.plan_text:
            label = PLAN_LABELS.get(self.plan_source, self.plan_source)
            plan = (f"### Source: {label}\n\n<details>\n<summary>{PLAN_SUMMARY}</summary>"
                    f"\n\n{self.plan_text}\n\n</details>")
        else:
            plan = NONE
        sections = [
            ("Session ID", self.workflow_session_id or NONE),
            ("Project Root", self.project_root or NONE),
            ("Objective", self.objective or NONE),
            ("Execution Plan", plan),
            ("Working Files (Modified)", bullets(f"{p} (role: {r})" for p, r in self.working_files)),
            ("Reference Files (Read-Only)", bullets(f"{p} (role: {r})" for p, r in self.reference_files)),
            ("Last Action", "\n".join(self.last_action) or NONE),
            ("Decisions", bullets(self.decisions)),
            ("Constraints", bullets(self.constraints)),
            ("Dependencies", bullets(self.dependencies)),
            ("Known Issues", bullets(self.known_issues)),
            ("Changes Made", bullets(self.changes)),
            ("Pending", bullets(self.pending)),
            ("Notes", bullets(self.notes)),
        ]
        body = "\n\n".join(f"## {title}\n{text}" for title, text in sections)
        return f"# Recovery ID: {self.memory_id}\n\n{body}\n"

    def to_dict(self) -> dict:
        return {
            "id": self.memory_id, "session_id": self.session_id,
            "workflow_session_id": self.workflow_session_id, "project_root": self.project_root,
            "objective": self.objective,
            "execution_plan": {"source": self.plan_source, "plan": self.plan_text},
            "working_files": [{"path": p, "role": r} for p, r in self.working_files],
            "reference_files": [{"path": p, "role": r} for p, r in self.reference_files],
            "last_action": self.last_action, "decisions": self.decisions,
            "constraints": self.constraints, "dependencies": self.dependencies,
            "known_issues": self.known_issues, "changes_made": self.changes,
            "pending": self.pending, "notes": self.notes,
        }


# ---------------------------------------------------------------------------------------
# Loading
# ---------------------------------------------------------------------------------------
def _parse(input_json: str | None) -> Any:
    if input_json is None:
        return {}
    try:
        return orjson.loads(input_json)
    except orjson.JSONDecodeError:
        return input_json


def session_families(con, session_ids: list[str]) -> list[str]:
    """These sessions and their sub-agent sessions (the ids ``session_counts_of`` takes)."""
    rows = con.execute(sqlfiles.load("select_session_families"), {"sessions": session_ids}).fetchall()
    return [row[0] for row in rows]


def load_evidence(con, session_ids: list[str]) -> dict[str, dict]:
    """Per root session: its facts, sub-agent facts, tool events and quoted messages."""
    if not session_ids:
        return {}
    params = {"sessions": session_ids}
    cursor = con.execute(sqlfiles.load("select_recovery_sessions"),
                         {"sessions": session_families(con, session_ids)})
    facts = sqlfiles.fetch_dicts(cursor)
    wanted = set(session_ids)
    roots = {f["session_id"]: f for f in facts if f["session_id"] in wanted}
    owner: dict[str, str] = {sid: sid for sid in roots}
    children: dict[str, list[dict]] = {sid: [] for sid in roots}
    for fact in facts:
        parent = fact["parent_session_id"]
        if fact["session_id"] not in roots and parent in roots:
            owner[fact["session_id"]] = parent
            children[parent].append(fact)
    all_ids = sorted(owner)
    evidence = {sid: {"facts": roots[sid], "children": children[sid], "events": [], "messages": []}
                for sid in roots}
    cursor = con.execute(sqlfiles.load("select_recovery_tool_events"), {"sessions": all_ids})
    columns = [d[0] for d in cursor.description]
    for values in cursor.fetchall():
        row = dict(zip(columns, values))
        root = owner[row["session_id"]]
        evidence[root]["events"].append(ToolEvent(
            session_id=row["session_id"], seq=row["seq"], timestamp=row["timestamp"],
            tool_name=row["tool_name"] or "(unnamed tool)", family=row["tool_family"] or "other",
            input=_parse(row["input_json"]), input_json=row["input_json"], cwd=row["cwd"],
            is_error=row["is_error"], has_result=bool(row["has_result"]),
            result_text=row["result_text"] or "", from_subagent=row["session_id"] != root,
            is_sidechain=bool(row["is_sidechain"])))
    cursor = con.execute(sqlfiles.load("select_recovery_messages"), {"sessions": sorted(roots)})
    columns = [d[0] for d in cursor.description]
    for values in cursor.fetchall():
        row = dict(zip(columns, values))
        evidence[row["session_id"]]["messages"].append(row)
    return evidence


# ---------------------------------------------------------------------------------------
# Building the document
# ---------------------------------------------------------------------------------------
def memory_id(last_activity: datetime | None) -> str:
    """``CMEM-YYYYMMDD-HHMMSS`` of a time, in UTC."""
    if last_activity is None:
        return "CMEM-00000000-000000"
    utc = last_activity.astimezone(timezone.utc) if last_activity.tzinfo else last_activity
    return utc.strftime("CMEM-%Y%m%d-%H%M%S")


def _utc(value: datetime | None) -> str:
    if value is None:
        return "time unknown"
    utc = value.astimezone(timezone.utc) if value.tzinfo else value
    return utc.strftime("%Y-%m-%d %H:%M:%S UTC")


def unique_memory_ids(activity: dict[str, datetime | None]) -> dict[str, str]:
    """Per session, its lake-unique recovery id from ``activity`` (session id -> last
    activity of EVERY session of the lake): :func:`memory_id`, with ``-<6 hex of
    sha256(session id)>`` appended for every session sharing its second with another one."""
    import hashlib
    from collections import Counter

    base = {sid: memory_id(when) for sid, when in activity.items()}
    shared = Counter(base.values())
    return {sid: (value if shared[value] == 1 else
                  f"{value}-{hashlib.sha256(sid.encode('utf-8')).hexdigest()[:6]}")
            for sid, value in base.items()}


def lake_memory_ids(con) -> dict[str, str]:
    """:func:`unique_memory_ids` of every session of the lake."""
    rows = con.execute(sqlfiles.load("select_session_last_activity")).fetchall()
    return unique_memory_ids({sid: when for sid, when in rows})


def project_root(cwd: str | None) -> str | None:
    """The specification's project-root detection (see the module docstring)."""
    if not cwd or not cwd.startswith("/"):
        return cwd
    from pipeline.text.memory import home_for_cwd

    start = Path(cwd)
    try:
        if not start.is_dir():
            return cwd
    except OSError:
        return cwd
    homes = {Path(h) for h in (home_for_cwd(cwd), os.path.expanduser("~")) if h and h != "~"}
    found = None
    for folder in (start, *start.parents):
        if folder == Path(folder.anchor) or any(folder == h or folder in h.parents for h in homes):
            break
        try:
            if any((folder / marker).exists() for marker in PROJECT_MARKERS):
                found = folder
        except OSError:
            continue
    return str(found) if found is not None else cwd


def build_document(evidence: dict, memory_ids: dict[str, str] | None = None) -> RecoveryDocument:
    facts = evidence["facts"]
    events: list[ToolEvent] = evidence["events"]
    messages: list[dict] = evidence["messages"]
    if facts.get("parent_session_id"):
        # a sub-agent session is all sidechain rows: it is its own main thread
        for event in events:
            event.is_sidechain = False
        messages = [{**m, "is_sidechain": False} for m in messages]
    main_events = [e for e in events if not e.from_subagent and not e.is_sidechain]
    prompts = [m for m in messages if m["is_prompt"] and not m["is_sidechain"]]

    last_activity = facts["ended_at"] or facts.get("source_mtime")
    project = next((p for p in [facts["project"], *(e.cwd for e in events)] if _is_absolute(p)), None)
    plan_source, plan_text, todo_items, plan_path = _execution_plan(events, prompts, messages)
    changes, working = _changes(events, project)
    ids = memory_ids or {}
    return RecoveryDocument(
        memory_id=ids.get(facts["session_id"]) or memory_id(last_activity),
        session_id=facts["session_id"],
        workflow_session_id=_workflow_session_id(plan_path, main_events, messages),
        project_root=project_root(project),
        objective=_objective(prompts, messages),
        plan_source=plan_source,
        plan_text=plan_text,
        working_files=working,
        reference_files=_reference_files(events, project, {p for p, _ in working}),
        last_action=_last_action(main_events),
        decisions=_capped(_decisions(events)),
        constraints=_constraints(prompts),
        dependencies=_capped(_dependencies(events)),
        known_issues=_capped(_known_issues(events, project)),
        changes=_capped(changes),
        pending=[f"{text} (in progress)" if status == "in_progress" else text
                 for status, text in todo_items if status in ("pending", "in_progress")],
        notes=_notes(evidence, main_events, messages),
    )


def _is_absolute(path: str | None) -> bool:
    """A POSIX absolute path or a Windows drive path (Gemini records a project hash instead)."""
    return bool(path) and (path.startswith("/") or bool(re.match(r"^[A-Za-z]:[\\/]", path)))


def _workflow_session_id(plan_path: str | None, main_events: list[ToolEvent],
                         messages: list[dict]) -> str | None:
    """The ``WFS-*`` id of the workflow session the transcript shows, else None."""
    if plan_path:
        found = _WFS_ID.findall(plan_path)
        if found:
            return found[-1]
    last = None
    texts = [(e.seq, e.input_json or "") for e in main_events]
    texts += [(m["seq"], m["text"] or "") for m in messages
              if not m["is_sidechain"] and m["kind"] in ("text", "tool_use")]
    for _, text in sorted(texts, key=lambda t: t[0]):
        found = _WFS_ID.findall(text)
        if found:
            last = found[-1]
    return last


def first_sentences(text: str, count: int = OBJECTIVE_SENTENCES) -> str:
    """The first ``count`` sentences of ``text``, whitespace collapsed."""
    sentences = [" ".join(part.split()) for part in _SENTENCE_END.split(text)]
    return " ".join([s for s in sentences if s][:count])


def _objective(prompts: list[dict], messages: list[dict]) -> str | None:
    for prompt in prompts:
        text = meaningful_text(prompt["text"])
        if text:
            return _close_fences(clip(first_sentences(text), OBJECTIVE_CHARS))
    for message in messages:
        if message["kind"] == "meta" and not message["is_sidechain"]:
            name = _COMMAND.search(message["text"] or "")
            args = _COMMAND_ARGS.search(message["text"] or "")
            if name and args and args.group(1).strip():
                return _close_fences(clip(f"{name.group(1)} {args.group(1).strip()}", OBJECTIVE_CHARS))
    return None


def _close_fences(text: str) -> str:
    """A clipped text must not leave a Markdown code fence open (it would swallow the rest)."""
    return text + "\n```" if text.count("```") % 2 else text


def _capped(items: list[str]) -> list[str]:
    if len(items) <= MAX_ITEMS:
        return items
    return items[:MAX_ITEMS] + [f"... and {len(items) - MAX_ITEMS} more"]


def _plural(count: int, word: str) -> str:
    return f"{count} {word}" + ("" if count == 1 else "s")


# -- plan ---------------------------------------------------------------------------------
_TODO_MARK = {"completed": "x", "in_progress": ">", "pending": " "}
_NUMBERED = re.compile(r"^\s*\d+[.)]\s+\S")
_PLAN_INTRO = re.compile(r"\b(plan|steps?|approach|to-?do|i'll|i will|going to|next)\b.*:\s*$", re.I)
_USER_PLAN_INTRO = re.compile(r"\b(plan|steps?|tasks?|to-?do|following|approach|want|need|please)\b.*:\s*$",
                              re.I)
_TASK_NUMBER = re.compile(r"#(\d+)")


def _todo_state(events: list[ToolEvent]) -> list[tuple[str, str]] | None:
    """(status, text) items of the LAST todo state, or None when no todo call succeeded."""
    state: list[tuple[str, str]] | None = None
    tasks: dict[str, list[str]] = {}
    for event in events:
        if event.family != "todo" or event.status == "failed" or event.from_subagent:
            continue
        obj = event.input if isinstance(event.input, dict) else {}
        if isinstance(obj.get("todos"), list):          # TodoWrite, write_todos, todo_write
            state = [(_status(t.get("status")), str(t.get("content") or t.get("description") or "").strip())
                     for t in obj["todos"] if isinstance(t, dict)]
        elif isinstance(obj.get("plan"), list):          # Codex update_plan
            state = [(_status(t.get("status")), str(t.get("step") or "").strip())
                     for t in obj["plan"] if isinstance(t, dict)]
        elif event.tool_name == "TaskCreate":
            number = _TASK_NUMBER.search(event.result_text or "")
            task_id = number.group(1) if number else str(len(tasks) + 1)
            tasks[task_id] = ["pending", str(obj.get("subject") or obj.get("description") or "").strip()]
            state = [(s, t) for s, t in tasks.values()]
        elif event.tool_name == "TaskUpdate" and str(obj.get("taskId")) in tasks:
            task = tasks[str(obj.get("taskId"))]
            if obj.get("status"):
                task[0] = _status(obj.get("status"))
            if obj.get("subject"):
                task[1] = str(obj["subject"]).strip()
            state = [(s, t) for s, t in tasks.values() if s != "deleted"]
    return state


def _status(value: Any) -> str:
    value = str(value or "pending").lower()
    return {"done": "completed", "complete": "completed", "in-progress": "in_progress",
            "active": "in_progress", "canceled": "cancelled"}.get(value, value)


def _todo_line(status: str, text: str) -> str:
    if status == "cancelled":
        return f"- [ ] ~~{text}~~ (cancelled)"
    if status == "deleted":
        return f"- [ ] ~~{text}~~ (deleted)"
    return f"- [{_TODO_MARK.get(status, ' ')}] {text}"


def _numbered_block(text: str) -> str | None:
    lines = text.splitlines()
    numbered = [i for i, line in enumerate(lines) if _NUMBERED.match(line)]
    if len(numbered) < 2:
        return None
    return "\n".join(lines[numbered[0]: numbered[-1] + 1]).strip()


def _is_plan_file(path: str) -> bool:
    name = path.rsplit("/", 1)[-1]
    return "/plans/" in path or (name.lower().endswith(".md") and "plan" in name.lower())


def _event_path(event: ToolEvent) -> str:
    obj = event.input if isinstance(event.input, dict) else {}
    return str(obj.get("file_path") or obj.get("path") or obj.get("absolute_path") or "")


def _workflow_plan(events: list[ToolEvent]) -> tuple[str | None, str | None]:
    """(content, path) of the latest ``IMPL_PLAN.md`` the session wrote or read."""
    content = path = None
    for event in events:
        if event.status == "failed":
            continue
        target = _event_path(event)
        if target.replace("\\", "/").rsplit("/", 1)[-1] != "IMPL_PLAN.md":
            continue
        obj = event.input if isinstance(event.input, dict) else {}
        text = None
        if event.family == "write" and isinstance(obj.get("content"), str):
            text = obj["content"]
        elif event.family == "read" and event.has_result:
            text = _LINE_NUMBER.sub("", event.result_text or "")
        if text and text.strip():
            content, path = text.strip(), target
    return content, path


def _execution_plan(events, prompts, messages
                    ) -> tuple[str | None, str | None, list[tuple[str, str]], str | None]:
    """(source, plan, todo items, workflow plan path), in the specification's priority."""
    todos = _todo_state(events) or []
    workflow, workflow_path = _workflow_plan(events)
    if workflow:
        return "workflow", workflow, todos, workflow_path
    if todos:
        return "todo", "\n".join(_todo_line(s, t) for s, t in todos), todos, None
    for prompt in reversed(prompts):
        text = meaningful_text(prompt["text"])
        block = _numbered_block(text)
        if block:
            before = [line for line in text[: text.find(block)].splitlines() if line.strip()]
            if not before or _USER_PLAN_INTRO.search(before[-1]):
                return "user-stated", block, [], None
    written = None
    for event in events:
        obj = event.input if isinstance(event.input, dict) else {}
        if event.tool_name == "ExitPlanMode" and isinstance(obj.get("plan"), str) and obj["plan"].strip():
            written = obj["plan"].strip()
        elif event.family == "write" and event.status != "failed" and isinstance(obj.get("content"), str):
            path = str(obj.get("file_path") or obj.get("path") or "")
            if path and _is_plan_file(path) and obj["content"].strip():
                written = obj["content"].strip()
    if written:
        return "inferred", written, [], None
    for message in reversed(messages):
        if message["role"] != "assistant" or message["is_sidechain"]:
            continue
        text = message["text"] or ""
        block = _numbered_block(text)
        if block:
            before = [line for line in text[: text.find(block)].splitlines() if line.strip()]
            if before and _PLAN_INTRO.search(before[-1]):
                return "inferred", block, [], None
    return None, None, [], None


# -- files --------------------------------------------------------------------------------
_PATCH_OP = re.compile(r"^\*\*\* (Update File|Add File|Delete File|Move to): (.+?)\s*$", re.M)
_VERB = {"created": "created", "written": "wrote", "edited": "edited", "deleted": "deleted",
         "moved": "moved to"}
_PATCH_ACTION = {"Update File": "edited", "Add File": "created", "Delete File": "deleted",
                 "Move to": "moved"}


def _paths(event: ToolEvent, project: str | None) -> list[str]:
    try:
        from pipeline.text.paths import request_paths
    except ImportError:  # pragma: no cover - paths.py ships with the package
        obj = event.input if isinstance(event.input, dict) else {}
        value = obj.get("file_path") or obj.get("path") or obj.get("notebook_path")
        return [value] if isinstance(value, str) else []
    return request_paths(event.tool_name, event.input_json, event.cwd or project)


def _file_actions(event: ToolEvent, project: str | None) -> list[tuple[str, str]]:
    """(path, action) pairs a successful modifying call made."""
    patch = None
    if isinstance(event.input, str) and "*** " in event.input:
        patch = event.input
    elif isinstance(event.input, dict):
        for key in ("input", "patch"):
            if isinstance(event.input.get(key), str) and "*** " in event.input[key]:
                patch = event.input[key]
        command = event.input.get("command")
        if isinstance(command, list) and len(command) >= 2 and str(command[0]).endswith("apply_patch"):
            patch = command[1] if isinstance(command[1], str) else None
    if patch and (event.tool_name in ("apply_patch", "applypatch") or event.family in ("edit", "shell")):
        from pipeline.text.paths import resolve_path
        base = event.cwd or project
        out = []
        for op, raw in _PATCH_OP.findall(patch):
            resolved = resolve_path(raw, base)
            if resolved is not None:
                out.append((resolved.path, _PATCH_ACTION[op]))
        return out
    if event.family not in ("edit", "write"):
        return []
    if event.family == "write":
        created = "created" in (event.result_text or "").lower()[:300]
        action = "created" if created else "written"
    else:
        action = "edited"
    return [(path, action) for path in _paths(event, project)]


def _changes(events: list[ToolEvent], project: str | None) -> tuple[list[str], list[tuple[str, str]]]:
    files: dict[str, FileChange] = {}
    order: list[tuple[str, Any]] = []   # ("file", path) or ("line", text)
    for event in events:
        if event.status == "failed":
            continue
        for path, action in _file_actions(event, project):
            change = files.get(path)
            if change is None:
                change = files[path] = FileChange(path)
                order.append(("file", path))
            if action not in change.actions:
                change.actions.append(action)
            if action == "edited":
                change.edits += 1
        if event.family == "shell" and event.command:
            for segment in _segments(event.command):
                line = _shell_change(segment)
                if line:
                    order.append(("line", line))
    changes: list[str] = []
    seen_lines: set[str] = set()
    for kind, value in order:
        if kind == "file":
            change = files[value]
            verbs = ", ".join(_VERB[action] for action in change.actions)
            count = f" ({change.edits} edits)" if change.edits > 1 else ""
            changes.append(f"{verbs[0].upper()}{verbs[1:]} {value}{count}")
        elif value not in seen_lines:
            seen_lines.add(value)
            changes.append(value)
    working = [(path, ", ".join(change.actions)) for path, change in files.items()]
    return changes, working


def _reference_files(events: list[ToolEvent], project: str | None, modified: set[str]) -> list[tuple[str, str]]:
    out: dict[str, str] = {}
    for event in events:
        if event.status == "failed":
            continue
        if event.family == "read":
            role = "read"
        elif event.family == "shell":
            role = "read (shell)"
        else:
            continue
        for path in _paths(event, project):
            if path not in modified and path not in out:
                out[path] = role
    return list(out.items())


# -- shell ----------------------------------------------------------------------------------
_SEGMENT_SPLIT = re.compile(r"\s*(?:&&|\|\||;|\n|\|)\s*")
_INSTALL = re.compile(
    r"^(?:sudo\s+)?(?:"
    r"(?:python3?\s+-m\s+)?pip3?\s+install\b"
    r"|uv\s+(?:pip\s+install|add)\b|poetry\s+add\b|pipx\s+install\b|conda\s+install\b|mamba\s+install\b"
    r"|npm\s+(?:install|i|add)\b|pnpm\s+(?:add|install|i)\b|yarn\s+(?:add|install)\b|bun\s+(?:add|install)\b"
    r"|cargo\s+(?:add|install)\b|go\s+(?:get|install)\b"
    r"|apt(?:-get)?\s+install\b|brew\s+install\b|gem\s+install\b|composer\s+require\b"
    r"|dotnet\s+add\s+(?:\S+\s+)?package\b)")
_FS_CHANGE = re.compile(r"^(?:sudo\s+)?(mkdir|touch|rm|rmdir|mv|cp|ln|chmod)\b")
_GIT_COMMIT = re.compile(r"^git\s+(?:-C\s+\S+\s+)?commit\b")


def _segments(command: str) -> list[str]:
    return [s.strip() for s in _SEGMENT_SPLIT.split(command) if s.strip()]


def _shell_change(segment: str) -> str | None:
    if _GIT_COMMIT.match(segment):
        try:
            words = shlex.split(segment)
        except ValueError:
            words = []
        for index, word in enumerate(words):
            message = None
            if word == "--message" and index + 1 < len(words):
                message = words[index + 1]
            elif word.startswith("--message="):
                message = word.split("=", 1)[1]
            elif word.startswith("-") and not word.startswith("--") and "m" in word[1:]:
                attached = word[word.index("m", 1) + 1:]       # -m, -am, -m"text"
                message = attached or (words[index + 1] if index + 1 < len(words) else None)
            if message:
                return f"Committed: {clip(first_line(message) or message, 200)}"
        return f"Ran `{clip(segment, 200)}`"
    if _FS_CHANGE.match(segment):
        return f"Ran `{clip(segment, 200)}`"
    return None


def _dependencies(events: list[ToolEvent]) -> list[str]:
    found: dict[str, str] = {}
    for event in events:
        if event.family != "shell" or not event.command:
            continue
        for segment in _segments(event.command):
            if _INSTALL.match(segment):
                found[clip(segment, 200)] = event.status
    return [f"`{cmd}` ({'no result recorded' if status == 'unknown' else status})"
            for cmd, status in found.items()]


# -- actions and issues ---------------------------------------------------------------------
def _describe(event: ToolEvent) -> str:
    obj = event.input if isinstance(event.input, dict) else {}
    name = event.tool_name
    if event.family == "shell" and event.command:
        return f"{name} `{clip(' '.join(event.command.split()), 200)}`"
    if event.family in ("read", "write", "edit"):
        paths = _paths(event, None)
        if paths:
            return f"{name} {', '.join(paths[:3])}"
    if event.family == "todo":
        return f"{name} (todo list)"
    if event.family == "task":
        detail = obj.get("description") or obj.get("subagent_type") or ""
        return f"{name} {clip(str(detail), 120)}".rstrip()
    if event.family in ("search", "glob"):
        pattern = obj.get("pattern") or obj.get("query") or ""
        where = obj.get("path") or ""
        return f"{name} `{clip(str(pattern), 120)}`" + (f" in {where}" if where else "")
    if event.family == "web":
        return f"{name} {clip(str(obj.get('url') or obj.get('query') or ''), 200)}".rstrip()
    text = event.input_json or ""
    return f"{name} {clip(text, 150)}" if text and text != "{}" else name


def _last_action(main_events: list[ToolEvent]) -> list[str]:
    if not main_events:
        return []
    event = main_events[-1]
    status = {"success": "success", "failed": "failed",
              "unknown": "no result recorded"}[event.status]
    lines = [f"{_describe(event)} ({_utc(event.timestamp)})", f"Result: {status}"]
    result = event.result_line()
    if result:
        lines[-1] += f": {result}"
    return lines


def _issue_key(event: ToolEvent, project: str | None) -> tuple:
    if event.family == "shell" and event.command:
        return ("shell", " ".join(event.command.split()))
    paths = _paths(event, project) if event.family in ("read", "write", "edit") else []
    if paths:
        return ("file", event.family in ("write", "edit"), tuple(paths))
    return ("tool", event.tool_name)


def _known_issues(events: list[ToolEvent], project: str | None) -> list[str]:
    issues: list[str] = []
    for index, event in enumerate(events):
        if event.status != "failed":
            continue
        key = _issue_key(event, project)
        resolved = any(later.status == "success" and _issue_key(later, project) == key
                       for later in events[index + 1:])
        if resolved:
            continue
        line = f"{_describe(event)} failed"
        result = event.result_line()
        issues.append(f"{line}: {result}" if result else line)
    return list(dict.fromkeys(issues))


def _decisions(events: list[ToolEvent]) -> list[str]:
    out: list[str] = []
    for event in events:
        if event.status != "success":
            continue
        obj = event.input if isinstance(event.input, dict) else {}
        if event.tool_name == "AskUserQuestion":
            answers = re.findall(r'"([^"]+)"\s*=\s*"([^"]*)"', event.result_text or "")
            if answers:
                out.extend(f"{clip(q, 200)}: {clip(a, 200)}" for q, a in answers)
            else:
                questions = [q.get("question") for q in obj.get("questions", []) if isinstance(q, dict)]
                answer = event.result_line()
                if questions and answer:
                    out.append(f"{clip(str(questions[0]), 200)}: {answer}")
        elif event.tool_name == "ExitPlanMode":
            out.append(f"Plan approved by the user ({_utc(event.timestamp)})")
    return list(dict.fromkeys(out))


# A constraint is a sentence that STARTS with an instruction word (after "please", "also",
# "you", ...): "Don't touch the tests.", "Only change src/", "DO NOT MODIFY: tests".
_CONSTRAINT = re.compile(
    r"^(?:(?:please|also|and|but|so|you|we|i)\s+)*(?:should\s+|must\s+)?"
    r"(don't|do not|dont|never|must|mustn't|always|only|avoid|make sure|ensure|no need to|"
    r"keep|without|use only|shouldn't|should not)\b", re.I)
_SENTENCE = re.compile(r"(?<=[.!?])\s+")


def _constraints(prompts: list[dict]) -> list[str]:
    out: list[str] = []
    for prompt in prompts:
        for line in meaningful_text(prompt["text"]).splitlines():
            line = " ".join(line.split()).lstrip("-*• ").strip()
            for sentence in _SENTENCE.split(line):
                if sentence and _CONSTRAINT.match(sentence):
                    out.append(clip(sentence, 200))
    return _capped(list(dict.fromkeys(out)))


def _notes(evidence: dict, main_events: list[ToolEvent], messages: list[dict]) -> list[str]:
    facts = evidence["facts"]
    notes: list[str] = [f"Transcript session ID: {facts['session_id']}"]
    described = [f"format {facts['format']}" if facts.get("format") else None,
                 f"model {facts['model']}" if facts.get("model") else None,
                 f"branch {facts['git_branch']}" if facts.get("git_branch") else None]
    described = [d for d in described if d]
    if described:
        notes.append("Recorded: " + ", ".join(described))
    if facts.get("started_at") or facts.get("ended_at"):
        notes.append(f"Activity: {_utc(facts.get('started_at'))} to {_utc(facts.get('ended_at'))}")
    failed = sum(1 for e in main_events if e.status == "failed")
    notes.append(f"Counts: {_plural(facts.get('n_user') or 0, 'prompt')}, "
                 f"{_plural(facts.get('n_assistant') or 0, 'assistant response')}, "
                 f"{_plural(len(main_events), 'tool call')} ({failed} failed)")
    if facts.get("project") and not _is_absolute(facts["project"]):
        notes.append(f"Project id (not a path): {facts['project']}")
    children = evidence["children"]
    if children:
        ids = ", ".join(c["session_id"] for c in children[:5])
        more = f" and {len(children) - 5} more" if len(children) > 5 else ""
        notes.append(f"Sub-agent sessions: {len(children)} ({ids}{more})")
    boundaries = sum(1 for m in messages if m["kind"] == "boundary")
    if boundaries:
        notes.append(f"Context compacted {boundaries} time(s) (compaction boundaries in the transcript)")
    main_messages = [m for m in messages if not m["is_sidechain"]]
    if main_messages and main_messages[-1]["role"] == "user" and \
            "[Request interrupted" in (main_messages[-1]["text"] or ""):
        notes.append("The last request was interrupted by the user")
    last_reply = next((m for m in reversed(main_messages)
                       if m["role"] == "assistant" and (m["text"] or "").strip()), None)
    if last_reply:
        quoted = clip(" ".join(last_reply["text"].split()), 500)
        notes.append(f"Last assistant message: \"{quoted}\"")
    return notes


# ---------------------------------------------------------------------------------------
# Entry points
# ---------------------------------------------------------------------------------------
def build_documents(con, session_ids: list[str], memory_ids: dict[str, str] | None = None
                    ) -> dict[str, RecoveryDocument]:
    """Recovery documents of these sessions (ids that are not in the lake are skipped).
    ``memory_ids``: :func:`lake_memory_ids` (read here when not given)."""
    evidence = load_evidence(con, sorted(set(session_ids)))
    ids = lake_memory_ids(con) if memory_ids is None else memory_ids
    return {sid: build_document(ev, ids) for sid, ev in sorted(evidence.items())}


PARALLEL_MIN_DOCUMENTS = 200   # below this, one process is faster than a pool


def _render_slice(shared: dict, bounds: tuple[int, int]) -> list[str]:
    """Body of a forked worker: the Markdown of a slice of the evidence."""
    return [build_document(evidence, shared["ids"]).to_markdown()
            for _sid, evidence in shared["items"][bounds[0]:bounds[1]]]


def _render_items(memory_ids: dict[str, str], items: list) -> list[str]:
    """Body of an engine task (Ray): the Markdown of its own slice of the evidence."""
    return [build_document(evidence, memory_ids).to_markdown() for _sid, evidence in items]


def render_documents(con, session_ids: list[str], memory_ids: dict[str, str], *,
                     workers: int | None = None) -> dict[str, str]:
    """The Markdown of :func:`build_documents`, for the summarize stage: the evidence is
    read here, the documents are built over a forked pool of ``workers`` (default: up to 2)
    when there are many (building is pure Python, the same text whichever process made it),
    or as tasks of the activated engine (Ray; each gets its slice of the evidence)."""
    from pipeline.stages import engine as engines

    items = sorted(load_evidence(con, sorted(set(session_ids))).items())
    n_workers = workers or engines.default_workers()
    chosen = engines.resolve(None)
    if not engines.is_local(chosen) and len(items) >= PARALLEL_MIN_DOCUMENTS:
        runs = engines.chunked(items, -(-len(items) // (4 * n_workers)))
        texts = [text for part in chosen.map(_render_items, runs, shared=memory_ids)
                 for text in part]
        return {sid: text for (sid, _evidence), text in zip(items, texts)}
    if n_workers == 1 or len(items) < PARALLEL_MIN_DOCUMENTS or not engines.fork_safe():
        return {sid: build_document(evidence, memory_ids).to_markdown() for sid, evidence in items}
    step = -(-len(items) // (4 * n_workers))
    slices = [(start, min(start + step, len(items))) for start in range(0, len(items), step)]
    shared = {"items": items, "ids": memory_ids}
    texts = [text for part in engines.forked_map(_render_slice, slices, shared, workers=n_workers)
             for text in part]
    return {sid: text for (sid, _evidence), text in zip(items, texts)}


def recover(lake: Lake, session: str, *, out: Path | None = None) -> RecoveryDocument:
    """The recovery document of one session (id or unique prefix); written to ``out`` if given."""
    with lake.connect() as con:
        session_id = resolve_session_id(con, session)
        document = build_documents(con, [session_id])[session_id]
    if out is not None:
        atomic_write_bytes(Path(out), document.to_markdown().encode("utf-8"))
    return document


MAX_NAME_CHARS = 200   # file names end at 255 bytes on most file systems; room for a suffix


def recovery_file_name(session_id: str) -> str:
    """``<session id>.md`` with unsafe characters replaced; a hash keeps changed names unique.
    ``@`` is kept (a trajectory's ``<instance>@<run>``): safe in file names and URL paths.
    A session id too long for a file name is cut to its first 200 characters (plus the hash)."""
    import hashlib
    safe = re.sub(r"[^A-Za-z0-9._@-]", "_", session_id).strip(".") or "session"
    if safe != session_id or len(safe) > MAX_NAME_CHARS:
        safe = f"{safe[:MAX_NAME_CHARS]}-{hashlib.sha256(session_id.encode('utf-8')).hexdigest()[:8]}"
    return f"{safe}.md"
