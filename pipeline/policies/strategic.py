"""``strategic``: boundary-aware compaction suggestions (docs/policies.md).

Counting. Every tool call adds its weight to a running count: by family, ``read`` 0.5,
``glob``/``search`` 0.3, ``web`` 0.5, everything else 1.0 (Edit/Write/Bash/NotebookEdit/
TaskUpdate and unknown tools). The count restarts at each compaction point: a suggestion
(replay compacts there, i.e. the user is assumed to accept) or a compaction boundary recorded
in the transcript. ``minutes`` is the time since that restart (or the session's first message).

Threshold ``threshold`` (50), or a scenario's: ``debugging`` 75, ``quick_fix`` 30,
``large_refactor`` 40, ``docs`` 60; ``scenario = "auto"`` picks one per user prompt with
keyword rules (:data:`SCENARIO_RULES`; none matching: ``threshold``).

Boundaries (checked when the call's result arrives, and only if it is not an error):
- ``Task done``: a todo-family call (TodoWrite, write_todos, todo_write, update_plan) whose
  list is non-empty and all ``completed``; or a TaskUpdate completing the last open task seen.
- ``Committed``: a shell call running ``git commit`` whose output shows no failure.
- ``Plan written``: ``ExitPlanMode``, or a write-family call to a ``*plan*.md`` file.
- ``Review done``: a task-family call (Task/Agent/task) whose input mentions a review.

A boundary with count >= threshold is a suggestion point unless suppressed (the
specification: never in the middle of work) by:
- debugging:
  ``debugging task``: the current task's wording says it is a fix, a bug, debugging or an
  investigation (:data:`DEBUG_TASK`: "fix the login redirect loop", "investigate why the
  cache misses");
  ``recent errors``: an error among the last ``error_lookback`` (5) tool results;
  ``investigating``: an error result not yet resolved by a successful edit followed by a
  passing run (a successful shell call without a failure in its output): the reads, greps
  and runs after it are the investigation pattern;
  ``debugging``: the current prompt names a failure (:data:`DEBUG_PROMPT`) and an error or
  failing test seen since it has not been followed by a passing test run;
- active implementation:
  ``uncommitted edits``: an edit/write since the last successful commit, when the session
  uses git (a git branch is recorded, or a git command ran before);
  ``failing tests``: the last test run (:data:`TEST_COMMAND`) failed;
- ``critical operation``: a migration, rollback or destructive command
  (:data:`CRITICAL_COMMAND`: ``alembic upgrade``, ``git reset --hard``, ``rm -rf``,
  ``DROP TABLE``, ``terraform apply``, ...) among the last ``critical_lookback`` (3) tool
  calls: in progress (no result yet) or just run;
- ``cooldown``: a suggestion less than ``cooldown_minutes`` (10) earlier.
Suppressed points are reported too, with their reasons.

Planning: at each suggestion point the session is compacted like microcompact's force trigger
(all compactable results but the ``keep_recent`` most recent; errors, managed-memory reads and
tail-protected results kept), trigger ``suggestion``; a point with nothing to clear still has a
plan row (``evicted = 0``) carrying the suggestion.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Mapping

import orjson

from pipeline.policies.base import (
    Ledger, ParamError, PolicyOutput, SessionInput, SessionView, plan_row, require_at_least,
)
from pipeline.policies.microcompact import DEFAULT_COMPACTABLE, MicrocompactParams, clear_at

NAME = "strategic"

DEFAULT_WEIGHTS = {"read": 0.5, "glob": 0.3, "search": 0.3, "web": 0.5}
SCENARIO_THRESHOLDS = {"debugging": 75.0, "quick_fix": 30.0, "large_refactor": 40.0, "docs": 60.0}
SCENARIOS = ("default", "auto", *SCENARIO_THRESHOLDS)
SCENARIO_RULES: list[tuple[str, re.Pattern]] = [
    ("debugging", re.compile(r"\b(debug\w*|bug|traceback|stack ?trace|exception|crash\w*|"
                             r"fails?|failing|failure|broken|error)\b", re.I)),
    ("large_refactor", re.compile(r"\b(refactor\w*|restructur\w*|migrat\w*|rewrite|"
                                  r"re-architect\w*|overhaul)\b", re.I)),
    ("docs", re.compile(r"\b(docs?|documentation|document|readme|docstrings?|changelog)\b",
                        re.I)),
    ("quick_fix", re.compile(r"\b(quick\w*|small|typo|tweak|minor|one-liner|simple fix)\b", re.I)),
]
DEBUG_PROMPT = SCENARIO_RULES[0][1]
# the specification: a task whose name says debug / fix / investigate
DEBUG_TASK = re.compile(r"\b(fix(?:e[sd]|ing)?|bug(?:s|fix\w*)?|debug\w*|investigat\w*|"
                        r"diagnos\w*|troubleshoot\w*|root[- ]cause)\b", re.I)
# migrations, rollbacks and destructive commands (shell commands, and SQL in any tool input)
CRITICAL_COMMAND = re.compile(
    r"\balembic\s+(?:upgrade|downgrade|stamp)\b|\bmanage\.py\s+migrate\b|"
    r"\b(?:rails|rake)\s+db:(?:migrate|rollback|drop|reset|schema:load)\b|"
    r"\bflask\s+db\s+(?:upgrade|downgrade)\b|\bprisma\s+(?:migrate|db\s+push)\b|"
    r"\b(?:knex|sequelize|typeorm|flyway|goose|dbmate|diesel|sqlx|migrate)\b[^|;&\n]*"
    r"\b(?:migrate|migration:run|up|down|rollback|redo)\b|\bliquibase\s+(?:update|rollback)\b|"
    r"\b(?:npm|pnpm|yarn)\s+(?:run\s+)?(?:migrate|db:migrate)\b|\bmake\s+migrate\b|"
    r"\bterraform\s+(?:apply|destroy|import|state\s+rm)\b|\bpulumi\s+(?:up|destroy)\b|"
    r"\bkubectl\s+(?:apply|delete|replace|rollout\s+undo|drain)\b|"
    r"\bhelm\s+(?:install|upgrade|rollback|uninstall|delete)\b|"
    r"\bgit\s+reset\s+--hard\b|\bgit\s+push\b[^|;&\n]*\s(?:--force\b|-f\b|--force-with-lease\b)|"
    r"\bgit\s+clean\s+-[a-z]*f|\bgit\s+(?:checkout|restore)\s+(?:--\s+)?\.(?:\s|$)|"
    r"\bgit\s+branch\s+-D\b|\bgit\s+rebase\b|"
    r"\brm\s+-[a-zA-Z]*[rR][a-zA-Z]*f|\brm\s+-[a-zA-Z]*f[a-zA-Z]*[rR]|\brm\s+--recursive\b|"
    r"\b(?:mkfs|dd\s+if=|shred|wipefs)\b|"
    r"\b(?:DROP|TRUNCATE)\s+(?:TABLE|DATABASE|SCHEMA|INDEX|VIEW)\b|\bTRUNCATE\s+\w|"
    r"\bDELETE\s+FROM\b|\bALTER\s+TABLE\b[^;]*\bDROP\b|\brollback\b", re.I)
SQL_CRITICAL = re.compile(r"\b(?:DROP|TRUNCATE)\s+(?:TABLE|DATABASE|SCHEMA)\b|\bDELETE\s+FROM\b",
                          re.I)
GIT_COMMIT = re.compile(r"\bgit\s+(?:(?:-C|-c)\s+\S+\s+|--?[\w-]+(?:=\S+)?\s+)*commit\b")
GIT_ANY = re.compile(r"\bgit\s")
COMMIT_FAILED = re.compile(r"nothing to commit|no changes added to commit|^\s*(error|fatal):|"
                           r"exit code:?\s*[1-9]|<returncode>\s*[1-9]", re.I | re.M)
TEST_COMMAND = re.compile(
    r"\b(pytest|py\.test|tox|nox|(?:npm|pnpm|yarn|bun)\s+(?:run\s+)?test|jest|vitest|mocha|"
    r"go\s+test|cargo\s+test|mvn\b[^|;&]*\btest|gradlew?\b[^|;&]*\btest|make\s+(?:test|check)|"
    r"python\d?(?:\.\d+)?\s+-m\s+(?:pytest|unittest)|rspec|phpunit|ctest|dotnet\s+test)\b")
TEST_FAILED = re.compile(r"\b[1-9]\d*\s+(failed|failing|errors?)\b|\bFAILED\b|\bFAIL\b|"
                         r"exit code:?\s*[1-9]|<returncode>\s*[1-9]", re.I)
PLAN_FILE = re.compile(r"(?i)plan[^/]*\.md$")
REVIEW = re.compile(r"(?i)review")
TAIL_CHARS = 8192          # test summaries: the output's end; commit errors: its start
BOUNDARY_LABELS = {"todo_done": "Task done", "commit": "Committed", "plan": "Plan written",
                   "review": "Review done"}


@dataclass(frozen=True)
class StrategicParams:
    threshold: float = 50.0
    scenario: str = "default"
    weights: Mapping[str, float] = field(default_factory=lambda: dict(DEFAULT_WEIGHTS))
    default_weight: float = 1.0
    error_lookback: int = 5
    critical_lookback: int = 3
    cooldown_minutes: float = 10.0
    keep_recent: int = 5
    compactable_tools: tuple[str, ...] = DEFAULT_COMPACTABLE

    def __post_init__(self) -> None:
        # configured weights override the defaults family by family
        object.__setattr__(self, "weights", {**DEFAULT_WEIGHTS, **dict(self.weights)})
        if self.threshold <= 0:
            raise ParamError("threshold", "must be > 0")
        if self.scenario not in SCENARIOS:
            raise ParamError("scenario", "must be one of " + ", ".join(SCENARIOS))
        for name, weight in self.weights.items():
            if weight < 0:
                raise ParamError(f"weights.{name}", "must be >= 0")
        require_at_least(self, error_lookback=0, critical_lookback=0, cooldown_minutes=0)
        if self.keep_recent < 1:
            raise ParamError("keep_recent", "must be at least 1")


def _parse(input_json: str | None) -> Any:
    if not input_json:
        return None
    try:
        return orjson.loads(input_json)
    except orjson.JSONDecodeError:
        return input_json


def shell_command(input_json: str | None) -> str:
    """The command text of a shell call's input (string, argv list or ``{command|cmd}``)."""
    obj = _parse(input_json)
    if isinstance(obj, dict):
        for key in ("command", "cmd", "script"):
            if key in obj:
                obj = obj[key]
                break
        else:
            return input_json or ""
    if isinstance(obj, list):
        return " ".join(str(part) for part in obj)
    return obj if isinstance(obj, str) else (input_json or "")


def _input_path(obj: Any) -> str | None:
    if isinstance(obj, dict):
        for key in ("file_path", "path", "absolute_path", "filePath"):
            if isinstance(obj.get(key), str):
                return obj[key]
    return None


def todo_all_completed(obj: Any) -> bool:
    if not isinstance(obj, dict):
        return False
    items = obj.get("todos") if isinstance(obj.get("todos"), list) else obj.get("plan")
    if not isinstance(items, list) or not items:
        return False
    return all(isinstance(t, dict) and t.get("status") == "completed" for t in items)


def scenario_for(prompt: str) -> str | None:
    for name, rule in SCENARIO_RULES:
        if rule.search(prompt or ""):
            return name
    return None


@dataclass
class _State:
    count: float = 0.0
    segment_start: int | None = None       # timestamp (us) of the last restart
    last_suggestion: int | None = None
    results: list[bool] = field(default_factory=list)   # is_error of the results so far
    uncommitted: bool = False
    git_used: bool = False
    tests_failing: bool = False
    prompt: str = ""
    debug_prompt: bool = False             # the current prompt asks to debug / fix
    debug_trouble: bool = False            # an error/failing test since a debugging prompt
    debug_task: bool = False               # the current task's wording says fix/debug/...
    open_error: str | None = None          # an unresolved error result (its tool)
    fix_edit: bool = False                 # a successful edit since that error
    critical: list = field(default_factory=list)   # (is critical, command) of the calls so far
    tasks: dict = field(default_factory=dict)
    todo_task: str = ""                    # the last completed todo item's text


def _minutes(a: int | None, b: int | None) -> float | None:
    if a is None or b is None:
        return None
    return round((b - a) / 60e6, 1)


def suggestion_points(view: SessionView, params: StrategicParams
                      ) -> tuple[list[dict], list[dict]]:
    """(suggestions, suppressed) for one session, in seq order (pure)."""
    st = _State(git_used=bool(view.info.git_branch))
    suggestions: list[dict] = []
    suppressed: list[dict] = []
    weights = dict(params.weights)
    first_ts = next((t for t in view.ts if t is not None), None)
    st.segment_start = first_ts
    last_ts = None
    for i, seq in enumerate(view.seq):
        ts = view.ts[i]
        if ts is not None:
            last_ts = ts
        kind = view.kind[i]
        if view.is_prompt[i]:
            if i == 0 or not view.is_prompt[i - 1]:
                st.prompt = view.text[i]
                st.debug_trouble = False
            else:
                st.prompt += "\n" + view.text[i]
            st.debug_prompt = bool(DEBUG_PROMPT.search(st.prompt))
            st.debug_task = bool(DEBUG_TASK.search(st.prompt))
            continue
        if kind == "boundary" and view.subtype[i] != "microcompact_boundary":
            st.count, st.segment_start = 0.0, last_ts
            continue
        if kind == "tool_use":
            call = view.call_by_seq.get(seq)
            family = call.family if call is not None else "other"
            st.count += weights.get(family, params.default_weight)
            if call is not None and call.family == "shell" and GIT_ANY.search(
                    shell_command(call.input_json)):
                st.git_used = True
            st.critical.append(_critical(call))
            continue
        if kind != "tool_result":
            continue
        item = view.item_by_seq.get(seq)
        if item is None:
            continue
        st.results.append(item.is_error)
        call = item.call
        boundary = None
        detail = ""
        if call is not None:
            family, name = call.family, call.tool_name or ""
            obj = _parse(call.input_json)
            if family == "shell":
                command = shell_command(call.input_json)
                if st.open_error and st.fix_edit and not item.is_error \
                        and not TEST_FAILED.search(item.text[-TAIL_CHARS:]):
                    st.open_error, st.fix_edit = None, False     # an edit, then a passing run
                if TEST_COMMAND.search(command):
                    # a test summary is at the end of the output
                    failed = item.is_error or bool(TEST_FAILED.search(item.text[-TAIL_CHARS:]))
                    st.tests_failing = failed
                    if failed and st.debug_prompt:
                        st.debug_trouble = True
                    elif not failed:
                        st.debug_trouble = False
                if GIT_COMMIT.search(command) and not item.is_error \
                        and not COMMIT_FAILED.search(item.text[:TAIL_CHARS]):
                    st.uncommitted = False
                    boundary, detail = "commit", command.strip()[:80]
            elif family in ("edit", "write") and not item.is_error:
                st.uncommitted = True
                if st.open_error:
                    st.fix_edit = True
                target = _input_path(obj)
                if target and PLAN_FILE.search(target):
                    boundary, detail = "plan", target
            elif name == "ExitPlanMode" and not item.is_error:
                boundary, detail = "plan", "plan mode exited"
            elif family == "todo" and not item.is_error:
                if todo_all_completed(obj):
                    items = obj.get("todos") or obj.get("plan")
                    boundary, detail = "todo_done", f"{len(items)} todo items completed"
                    last = items[-1]
                    st.todo_task = str(last.get("content") or last.get("step")
                                       or last.get("description") or "")
                elif name == "TaskUpdate" and isinstance(obj, dict):
                    task = obj.get("taskId") or obj.get("id")
                    if task is not None:
                        st.tasks[str(task)] = obj.get("status")
                        if obj.get("status") == "completed" and all(
                                s == "completed" for s in st.tasks.values()):
                            boundary, detail = "todo_done", f"{len(st.tasks)} tasks completed"
            elif family == "task" and not item.is_error and REVIEW.search(call.input_json or ""):
                boundary, detail = "review", "review sub-agent finished"
        if item.is_error and st.debug_prompt:
            st.debug_trouble = True
        if item.is_error:
            st.open_error, st.fix_edit = (call.tool_name if call is not None else None) or "a tool", False
        if boundary is None:
            continue
        threshold = params.threshold
        scenario = params.scenario
        if scenario == "auto":
            scenario = scenario_for(st.prompt) or "default"
        if scenario in SCENARIO_THRESHOLDS:
            threshold = SCENARIO_THRESHOLDS[scenario]
        if round(st.count, 6) < threshold:     # weights like 0.3 do not add up exactly
            continue
        reasons = []
        if st.debug_task:
            reasons.append("debugging task: the task says it is a fix, a bug, debugging or an "
                           "investigation")
        recent = st.results[-params.error_lookback:] if params.error_lookback else []
        if any(recent):
            reasons.append(f"recent errors: {sum(recent)} of the last {len(recent)} tool results")
        if st.open_error:
            reasons.append(f"investigating: calls after a {st.open_error} error, not yet resolved "
                           "by an edit and a passing run")
        critical = [cmd for flag, cmd in st.critical[-params.critical_lookback:] if flag] \
            if params.critical_lookback else []
        if critical:
            reasons.append(f"critical operation: `{critical[-1][:80]}` in progress or just run")
        if st.debug_trouble and st.debug_prompt:
            reasons.append("debugging: an error or failing test since the debugging request "
                           "is not resolved yet")
        if st.uncommitted and st.git_used:
            reasons.append("uncommitted edits: files edited since the last commit")
        if st.tests_failing:
            reasons.append("failing tests: the last test run failed")
        since_last = _minutes(st.last_suggestion, last_ts)
        if since_last is not None and since_last < params.cooldown_minutes:
            reasons.append(f"cooldown: last suggestion {since_last:g} min ago "
                           f"(< {params.cooldown_minutes:g})")
        point = {
            "seq": seq, "turn": view.turn_of_seq(seq) + 1,
            "time": _iso(last_ts), "weighted_calls": round(st.count, 1),
            "threshold": threshold, "scenario": scenario,
            "minutes": _minutes(st.segment_start, last_ts),
            "session_minutes": _minutes(first_ts, last_ts),
            "boundary": BOUNDARY_LABELS[boundary], "boundary_kind": boundary, "detail": detail,
        }
        if boundary == "todo_done" and st.todo_task:
            point["task"] = st.todo_task
        if boundary == "commit":
            message = COMMIT_MESSAGE.search(detail)
            if message:
                point["commit_message"] = next(g for g in message.groups() if g is not None)
        if reasons:
            point["suppressed_by"] = reasons
            suppressed.append(point)
            continue
        point["state"] = "Clean state"
        point["why"] = (f"{number_text(st.count)} weighted tool calls since the last compaction "
                        f"(threshold {number_text(threshold)}) and a task boundary just passed "
                        f"({BOUNDARY_LABELS[boundary].lower()}: {detail}); no recent errors, "
                        f"no failing tests, nothing left uncommitted")
        suggestions.append(point)
        st.count, st.segment_start, st.last_suggestion = 0.0, last_ts, last_ts
    return suggestions, suppressed


COMMIT_MESSAGE = re.compile(r"""-[a-zA-Z]*m\s*(?:"([^"]*)"|'([^']*)'|(\S+))""")


def _critical(call) -> tuple[bool, str]:
    """(is this call a migration, rollback or destructive command, its text)."""
    if call is None:
        return False, ""
    if call.family == "shell":
        command = shell_command(call.input_json)
        return bool(CRITICAL_COMMAND.search(command)), " ".join(command.split())
    text = call.input_json or ""
    return bool(SQL_CRITICAL.search(text)), " ".join(text.split())


def _iso(ts: int | None) -> str | None:
    if ts is None:
        return None
    return datetime.fromtimestamp(ts / 1e6, tz=timezone.utc).isoformat().replace("+00:00", "Z")


def number_text(value: float) -> str:
    """A count as the suggestion texts write it: whole numbers without decimals, else one."""
    return f"{value:.0f}" if float(value).is_integer() else f"{value:.1f}"


def plan_session(session: SessionInput, params: StrategicParams) -> PolicyOutput:
    view = session.view()
    out = PolicyOutput()
    suggestions, suppressed = suggestion_points(view, params)
    out.suggestions, out.suppressed = suggestions, suppressed
    ledger = Ledger(view)
    mc = MicrocompactParams(idle_minutes=-1, size_chars=-1, keep_recent=params.keep_recent,
                            compactable_tools=params.compactable_tools)
    tools = frozenset(params.compactable_tools)
    for point in suggestions:
        at_seq = point["seq"]
        extra = {"suggestion": point}
        before = len(out.plans)
        clear_at(view, ledger, out, at_seq=at_seq, trigger="suggestion", params=mc, tools=tools,
                 extra=extra, reason=f"suggestion: {point['boundary']}")
        if len(out.plans) == before:
            tokens = ledger.tokens(at_seq)
            out.plans.append(plan_row(view, trigger="suggestion", at_seq=at_seq,
                                      tokens_before=tokens, saved=0, evicted=0, preserved=0,
                                      kept=0, metadata={"trigger": "suggestion", **extra}))
    return out
