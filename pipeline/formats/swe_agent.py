"""SWE-agent trajectories (``swe_agent``, ``*.traj``, one JSON object per file).

Facts (docs/formats.md): ``{environment?, trajectory[], history[], info{model_stats, ...},
replay_config? (dict in 2024 files, a JSON string in current code)}``; demonstration files
hold only ``history``. The messages come from ``history`` (what the model saw); every row
carries ``json_path`` (``/history/<i>``, ``/history/<i>/tool_calls/<k>``).

- Session: the file stem (the instance id) and its run folder, ``<instance>@<run>``
  (:attr:`SourceContext.run_session_id`). Project: the working directory of the first
  trajectory ``state`` (the repository root inside the container, the counterpart of a CLI
  session's cwd), else the repository of ``replay_config.env.repo``; each call's ``cwd`` is
  the ``working_dir`` of its trajectory step (found by matching the action text, in order).
  Model: ``replay_config.agent.model.name`` (or ``model_name``).
- Demonstrations: history entries with ``is_demo: true`` (and every entry of a
  demonstration-only file) become ``kind = meta`` rows with ``is_demo = true``: never
  prompts, never tool calls.
- Pairing, 1.x function calling: ``tool_calls[].id`` <-> ``tool_call_ids[]`` of the tool
  message. When one tool message answers several ids, its text is on the first id's rows
  and each other id gets an empty result row (subtype ``shared_observation``): the text is
  stored and counted once.
- Pairing, 0.x and 1.x text actions (no ids): an assistant ``action`` is answered by the next
  user message (the issue text comes before any action, demonstrations are skipped); both
  sides get the made-up, stable call id ``"<session>#/history/<i>"`` (i = the assistant
  entry). The tool name is the first word of the action (``open``, ``edit``, ``python``);
  its family is :func:`tool_family`'s for SWE-agent commands and ``shell`` for anything else
  (a plain shell command). The input is ``{"command": <action as written>}``. In 0.x the
  action is also inside the assistant text (``content`` is thought + fenced command), so the
  command's tokens are counted in both rows. ``clear_input`` on such a call replaces the
  entry's ``action`` string only (with the replacement as a string, ``"{}"``); its
  ``content``/``thought`` (and, in 0.x, the command written inside ``content``) stay.
- The final ``submit``: current code writes it into ``history`` with its observation (the
  patch); 1.0-era files have it in ``trajectory`` only. When the LAST trajectory step matches
  no history action (while every history action matched a step) it is emitted from the
  trajectory (``/trajectory/<j>``: the response text and a tool_use with id
  ``"<session>#/trajectory/<j>"``) WITHOUT a result: the patch was never shown to the
  model, so the call is a legitimate orphan; its input is the step's ``action`` (what
  ``clear_input`` clears; ``response``/``thought`` stay). Earlier unmatched
  trajectory steps are requeries (format errors) that never entered the history: not rows.
- Errors: SWE-agent records no exit code or error flag for an observation, so ``is_error``
  is always false (guessing from output text would be wrong for ``grep`` and friends).
- Usage: only per-run totals exist. ``info.model_stats`` becomes ONE row (role assistant,
  kind other, subtype ``model_stats``, ``usage_scope = run``): ``input_tokens =
  tokens_sent``, ``output_tokens = tokens_received``, ``cost_usd_recorded = instance_cost``;
  ``api_calls`` is in ``session_info.meta_json``. The rows of one assistant entry share
  ``api_call_id = "<session>#/history/<i>"`` so they count as one API call.
- RetryAgent (``agent.type: retry``, SWE-agent 1.x ``sweagent/agent/agents.py``): the file is
  ``{attempts[], ...}`` where each attempt is a whole trajectory ``{trajectory, history,
  info, replay_config, environment}``; the final save adds a deep copy of the chosen attempt
  at the top level, whose ``info`` gains ``best_attempt_idx``, ``rloop_model_stats`` (the
  reviewer's / chooser's own calls) and a ``model_stats`` overwritten with the run total
  (the attempts' sum plus ``rloop_model_stats``); saves during the run hold ``attempts``
  only. Every attempt is read (what the agent did; one session, ``<instance>@<run>``), with
  json paths ``/attempts/<i>/history/<j>``... and made-up ids ``"<session>#/attempts/<i>/..."``;
  each attempt's ``info.model_stats`` is one run row (``/attempts/<i>/info/model_stats``)
  and ``info.rloop_model_stats`` one more (subtype ``rloop_model_stats``). The top-level
  copy and the total are not read, so every call counts once; apply rewrites a chosen
  attempt's payload in the top-level copy too (:meth:`SweAgentReader.duplicate_paths`).
  Attempts carry ``replay_config: null`` (the run config is set on the RetryAgent, not its
  sub-agents), so these rows usually have no model. The RetryAgent also writes each finished
  attempt to ``<instance>/attempt_<n>/<instance>.traj`` just before the ``attempts`` list
  that holds it: such a file gets its session row (meta ``retry_attempt_copy_of`` = the
  RetryAgent file's session) and no other rows, record type ``retry_attempt_copy``.
"""

from __future__ import annotations

import re
from pathlib import PurePosixPath
from typing import Any

import orjson

from pipeline.formats.base import (
    Emitter, Reader, RecordError, SourceContext, chat_tool_input, chat_tool_result, content_text,
    dumps, nested_value, nonempty_str, tool_family,
)
from pipeline.formats.openai_chat import (
    emit_tool_call, emit_tool_result, float_or_none, int_or_none, openai_tool_calls,
)

# SWE-agent's own commands (0.x defaults and 1.x tool bundles); any other first word of an
# action is a plain shell command.
SWE_COMMANDS = {
    "open", "goto", "scroll_up", "scroll_down", "create", "edit", "insert", "submit",
    "search_dir", "search_file", "find_file", "filemap", "str_replace_editor", "exit",
    "exit_forfeit", "exit_cost", "exit_context", "exit_error", "exit_format", "skip",
}
_ROLES = {"system", "user", "assistant", "tool"}
# the folder a RetryAgent writes each finished attempt's own trajectory to
_ATTEMPT_DIR = re.compile(r"attempt_\d+")


def _dict_or_json(value: Any) -> dict | None:
    """A dict, or a JSON string holding one (replay_config, 0.x ``state``)."""
    if isinstance(value, dict):
        return value
    if isinstance(value, str) and value.strip().startswith("{"):
        try:
            parsed = orjson.loads(value)
        except orjson.JSONDecodeError:
            return None
        return parsed if isinstance(parsed, dict) else None
    return None


def _model_of(replay: dict) -> str | None:
    return nonempty_str(nested_value(replay, "agent", "model", "name")) \
        or nonempty_str(nested_value(replay, "agent", "model", "model_name"))


def _repo_name(replay: dict) -> str | None:
    repo = nested_value(replay, "env", "repo")
    return nonempty_str(nested_value(repo, "github_url")) \
        or nonempty_str(nested_value(repo, "repo_name")) \
        or nonempty_str(nested_value(repo, "path"))


def _workdirs(steps: list[dict]) -> list[str | None]:
    """The ``working_dir`` of each trajectory step's state (a dict, or a JSON string in 0.x)."""
    return [nonempty_str((_dict_or_json(step.get("state")) or {}).get("working_dir"))
            for step in steps]


def _model_stats(info: dict) -> dict | None:
    stats = info.get("model_stats")
    return stats if isinstance(stats, dict) else None


def _same(top: dict, attempt: dict, key: str, index: int, field: str) -> bool:
    """Whether ``top[key][index][field]`` is there and equals the attempt's (the copy)."""
    mine, theirs = top.get(key), attempt.get(key)
    if not isinstance(mine, list) or not isinstance(theirs, list) \
            or not 0 <= index < min(len(mine), len(theirs)) \
            or not isinstance(mine[index], dict) or not isinstance(theirs[index], dict) \
            or field not in mine[index]:
        return False
    return mine[index][field] == theirs[index].get(field)


def action_tool(action: str) -> tuple[str, str]:
    """(tool name, tool family) of a text action: its first word."""
    words = action.split()
    name = words[0] if words else ""
    family = tool_family(name) if name in SWE_COMMANDS else "shell"
    return name, family


def trajectory_step(obj: dict, history_index: int) -> int | None:
    """SWE-agent: the ``trajectory`` step whose ``observation`` the history message repeats.

    ``trajectory[k].observation`` is the raw output; the history message (role tool, or a user
    message in 0.x) holds it plus a status suffix. History and trajectory are aligned in order:
    a message pairs with the next step (skipping steps with an empty observation, looking at
    most 3 steps ahead) whose observation starts the message's content.
    """
    history, trajectory = obj.get("history"), obj.get("trajectory")
    if not isinstance(history, list) or not isinstance(trajectory, list):
        return None
    step = 0
    for index, message in enumerate(history):
        if step >= len(trajectory):
            return None
        if not isinstance(message, dict) or message.get("is_demo") \
                or message.get("role") not in ("tool", "user") \
                or not isinstance(message.get("content"), str):
            if index == history_index:
                return None
            continue
        content = message["content"]
        for ahead in range(step, min(step + 4, len(trajectory))):
            entry = trajectory[ahead]
            observation = entry.get("observation") if isinstance(entry, dict) else None
            if isinstance(observation, str) and observation.strip() \
                    and content.startswith(observation):
                step = ahead + 1
                if index == history_index:
                    return ahead
                break
        else:
            if index == history_index:
                return None
        if index >= history_index:
            return None
    return None


class SweAgentReader(Reader):
    name = "swe_agent"
    layout = "document"
    result_shapes = (chat_tool_result,)
    input_shapes = (chat_tool_input,)
    # a call with a made-up id (a text action, the trajectory-only submit) sits at its history
    # entry / trajectory step: its input is that node's ``action`` string, never the whole
    # node (the thought, content and response stay); a function call's input is found by
    # ``chat_tool_input`` (its ``function.arguments``) first
    input_keys = ("action",)

    @classmethod
    def duplicate_paths(cls, obj: Any, path: tuple) -> list[tuple]:
        """A ``history`` message's content is repeated in its ``trajectory`` step's observation.

        RetryAgent: an attempt's message (``attempts/<i>/history/<j>/content``) is repeated
        there too, and, for the chosen attempt (``info.best_attempt_idx``), in the top-level
        copy (``history/<j>/content`` and its ``trajectory`` step's observation)."""
        if not isinstance(obj, dict):
            return []
        if len(path) == 3 and path[0] == "history" and path[2] == "content":
            step_no = trajectory_step(obj, path[1])
            return [("trajectory", step_no, "observation")] if step_no is not None else []
        if len(path) != 5 or path[0] != "attempts" or path[2] != "history" \
                or path[4] != "content" or not isinstance(obj.get("attempts"), list) \
                or not isinstance(path[1], int) or not 0 <= path[1] < len(obj["attempts"]):
            return []
        attempt, j = obj["attempts"][path[1]], path[3]
        if not isinstance(attempt, dict):
            return []
        step_no = trajectory_step(attempt, j)
        found = [("attempts", path[1], "trajectory", step_no, "observation")] \
            if step_no is not None else []
        best = nested_value(obj, "info", "best_attempt_idx")
        if type(best) is int and best == path[1] and _same(obj, attempt, "history", j, "content"):
            found.append(("history", j, "content"))
            if step_no is not None and _same(obj, attempt, "trajectory", step_no, "observation"):
                found.append(("trajectory", step_no, "observation"))
        return found

    @classmethod
    def sniff(cls, path: str, head: bytes) -> int:
        if not path.endswith(".traj"):
            return 0
        # the suffix is SWE-agent's own: a .traj that is not an object is still ours to
        # quarantine with a reason, rather than to skip as unrecognised
        return 90 if head.lstrip(b"\xef\xbb\xbf \t\r\n").startswith(b"{") else 60

    def document(self, obj: Any, out: Emitter) -> str:
        if not isinstance(obj, dict):
            raise RecordError("a SWE-agent trajectory must be a JSON object with a 'history' "
                              f"list, found {type(obj).__name__}")
        if "attempts" in obj:
            return self._retry_document(obj, out)
        history, steps = self._run_parts(obj, "")
        info = obj.get("info") if isinstance(obj.get("info"), dict) else {}
        replay = _dict_or_json(obj.get("replay_config")) or {}
        demo_only = "trajectory" not in obj and "info" not in obj
        session_id = self.ctx.run_session_id
        model = _model_of(replay)
        workdirs = _workdirs(steps)
        repo_name = _repo_name(replay)
        stats = _model_stats(info)
        meta = {
            "environment": obj.get("environment"),
            "exit_status": info.get("exit_status"),
            "api_calls": int_or_none(stats.get("api_calls")) if stats else None,
            "repo": repo_name,
            "problem_statement_id": nested_value(replay, "problem_statement", "id"),
            "demo_only": demo_only,
        }
        copy_of = None if demo_only else self._attempt_copy_of()
        if copy_of is not None:
            meta["retry_attempt_copy_of"] = copy_of
        out.session(session_id=session_id, format=self.name,
                    project=next((w for w in workdirs if w), None) or repo_name,
                    cli_version=nonempty_str(info.get("swe_agent_version")), json_path="",
                    meta_json=dumps({k: v for k, v in meta.items() if v is not None}))
        if copy_of is not None:
            # a RetryAgent's own copy of one attempt: read where the attempt is stored whole
            return "retry_attempt_copy"
        self._read_run(history, steps, workdirs, "", session_id, model, demo_only, out)
        if stats is not None:
            self._stats_row(stats, "/info/model_stats", "model_stats", session_id, model, out)
        return "demonstration" if demo_only else "trajectory"

    def _retry_document(self, obj: dict, out: Emitter) -> str:
        """A RetryAgent trajectory: every attempt is read from ``attempts[i]``; the top-level
        ``history``/``trajectory``/``info`` are a copy of the chosen attempt (with the run's
        total ``model_stats``) and are not read again."""
        attempts = obj["attempts"]
        if not isinstance(attempts, list):
            raise RecordError("'attempts' must be a list of attempt trajectories, found "
                              f"{type(attempts).__name__}")
        session_id = self.ctx.run_session_id
        info = obj.get("info") if isinstance(obj.get("info"), dict) else {}
        top_replay = _dict_or_json(obj.get("replay_config")) or {}
        runs = []
        for i, attempt in enumerate(attempts):
            if not isinstance(attempt, dict):
                raise RecordError(f"attempts[{i}] is a {type(attempt).__name__}, expected an "
                                  "object")
            history, steps = self._run_parts(attempt, f"attempts[{i}]: ")
            replay = _dict_or_json(attempt.get("replay_config")) or top_replay
            attempt_info = attempt.get("info") if isinstance(attempt.get("info"), dict) else {}
            runs.append((history, steps, _workdirs(steps), replay, attempt_info))
        replays = [run[3] for run in runs] + [top_replay]
        repo_name = next(filter(None, map(_repo_name, replays)), None)
        project = next((w for run in runs for w in run[2] if w), None) or repo_name
        stats = _model_stats(info)
        attempt_stats = [_model_stats(run[4]) for run in runs]
        api_calls = int_or_none(stats.get("api_calls")) if stats else None
        if api_calls is None and any(attempt_stats):
            api_calls = sum(int_or_none(s.get("api_calls")) or 0 for s in attempt_stats if s)
        best = info.get("best_attempt_idx")
        version = nonempty_str(info.get("swe_agent_version")) or next(
            filter(None, (nonempty_str(run[4].get("swe_agent_version")) for run in runs)), None)
        meta = {
            "environment": obj.get("environment") or next(
                (a.get("environment") for a in attempts if a.get("environment")), None),
            "exit_status": info.get("exit_status"),
            "api_calls": api_calls,
            "repo": repo_name,
            "problem_statement_id": next(filter(None, (nested_value(
                r, "problem_statement", "id") for r in replays)), None),
            "demo_only": False,
            "attempts": len(attempts),
            "best_attempt_idx": best if type(best) is int else None,
        }
        out.session(session_id=session_id, format=self.name, project=project,
                    cli_version=version, json_path="",
                    meta_json=dumps({k: v for k, v in meta.items() if v is not None}))
        for i, (history, steps, workdirs, replay, _) in enumerate(runs):
            model = _model_of(replay)
            prefix = f"/attempts/{i}"
            self._read_run(history, steps, workdirs, prefix, session_id, model, False, out,
                           label=f"attempts[{i}]: ")
            if attempt_stats[i] is not None:
                self._stats_row(attempt_stats[i], f"{prefix}/info/model_stats", "model_stats",
                                session_id, model, out)
        # the reviewer's / chooser's own calls: in no attempt (the top-level model_stats is the
        # attempts' sum plus these, so it is not read)
        review = info.get("rloop_model_stats")
        if isinstance(review, dict):
            self._stats_row(review, "/info/rloop_model_stats", "rloop_model_stats", session_id,
                            None, out)
        return "retry_trajectory"

    def _attempt_copy_of(self) -> str | None:
        """The session of the RetryAgent trajectory this file is an attempt copy of, or None.

        A RetryAgent writes each finished attempt to ``<dir>/attempt_<n>/<instance>.traj``
        (a plain trajectory) before it writes ``<dir>/<instance>.traj`` with that attempt in
        its ``attempts`` list; ``<dir>`` is the instance's own folder (``<run>/<instance>``)."""
        path = PurePosixPath(self.ctx.path)
        parts = path.parts
        if len(parts) < 3 or not _ATTEMPT_DIR.fullmatch(parts[-2]) \
                or parts[-3] != self.ctx.stem:
            return None
        main = SourceContext(str(path.parent.parent / path.name), self.ctx.source_id,
                             self.ctx.generation, self.ctx.root)
        return main.run_session_id

    def _run_parts(self, run: dict, where: str) -> tuple[list, list[dict]]:
        """(history, trajectory steps) of one trajectory (the file, or one attempt)."""
        history = run.get("history")
        if not isinstance(history, list):
            raise RecordError(f"{where}a SWE-agent trajectory needs a 'history' list, found "
                              f"{type(history).__name__}")
        trajectory = run.get("trajectory", [])
        if not isinstance(trajectory, list):
            raise RecordError(f"{where}'trajectory' must be a list of steps, found "
                              f"{type(trajectory).__name__}")
        return history, [step if isinstance(step, dict) else {} for step in trajectory]

    @staticmethod
    def _stats_row(stats: dict, where: str, subtype: str, session_id: str, model: str | None,
                   out: Emitter) -> None:
        out.message(session_id=session_id, role="assistant", kind="other", subtype=subtype,
                    text="", model=model, json_path=where,
                    input_tokens=int_or_none(stats.get("tokens_sent")),
                    output_tokens=int_or_none(stats.get("tokens_received")),
                    cost_usd_recorded=float_or_none(stats.get("instance_cost")),
                    usage_scope="run")

    def _read_run(self, history: list, steps: list[dict], workdirs: list, prefix: str,
                  session_id: str, model: str | None, demo_only: bool, out: Emitter,
                  label: str = "") -> None:
        """Rows of one trajectory's ``history`` (and its trajectory-only final submit); every
        json_path starts with ``prefix`` (``/attempts/<i>`` for a RetryAgent attempt)."""
        cursor = 0                      # next trajectory step to match an action against
        unmatched = 0                   # history actions found in no trajectory step
        awaiting: tuple[str, str] | None = None   # made-up call waiting for its observation
        names: dict[str, str | None] = {}

        def read_entry(index: int, entry: Any) -> None:
            nonlocal cursor, unmatched, awaiting
            where = f"{prefix}/history/{index}"
            if not isinstance(entry, dict):
                raise RecordError(f"{label}history[{index}] is a {type(entry).__name__}, "
                                  "expected an object")
            role = entry.get("role")
            content = entry.get("content")
            text = content_text(content)
            row = dict(session_id=session_id, json_path=where)
            if demo_only or entry.get("is_demo") is True:
                out.message(role=role if isinstance(role, str) and role in _ROLES else "user", kind="meta",
                            subtype="demonstration", text=text, is_demo=True, is_meta=True,
                            is_prompt=False, **row)
                return
            subtype = nonempty_str(entry.get("message_type"))
            if role == "system":
                out.message(role="system", kind="text", subtype=subtype or "system_prompt",
                            text=text, **row)
            elif role == "assistant":
                awaiting = None
                action = entry.get("action") if isinstance(entry.get("action"), str) else ""
                cwd = None
                if action.strip():
                    match = self._match_step(steps, cursor, action)
                    if match is not None:
                        cursor = match + 1
                        cwd = workdirs[match]
                    else:
                        unmatched += 1
                awaiting = self._assistant(entry, text, action, cwd, model, row, names, out)
            elif role == "tool":
                ids = entry.get("tool_call_ids")
                ids = [i for i in ids if isinstance(i, str)] if isinstance(ids, list) else []
                if not ids and isinstance(entry.get("tool_call_id"), str):
                    ids = [entry["tool_call_id"]]
                if not ids and awaiting is not None:
                    ids = [awaiting[0]]
                awaiting = None
                self._result(ids, names, content, text, subtype, row, out)
            elif role == "user":
                if awaiting is not None:
                    self._result([awaiting[0]], names, content, text, subtype or "observation",
                                 row, out)
                    awaiting = None
                else:
                    out.message(role="user", kind="text", subtype=subtype, text=text,
                                is_prompt=bool(text.strip()), **row)
            else:
                out.message(role="system", kind="other", subtype=str(role), text=text, **row)

        # an entry that cannot be read costs that entry, not the trajectory
        for index, entry in enumerate(history):
            out.read_element(f"{label}history[{index}]", entry,
                             lambda index=index, entry=entry: read_entry(index, entry))

        # 1.0-era files: the final submit lives in the trajectory only (when history and
        # trajectory disagree on action texts, nothing can be told apart: read nothing)
        if steps and cursor <= len(steps) - 1 and not demo_only and not unmatched:
            last = len(steps) - 1
            step = steps[last]
            action = step.get("action") if isinstance(step.get("action"), str) else ""
            if action.strip():
                where = f"{prefix}/trajectory/{last}"
                response = step.get("response") if isinstance(step.get("response"), str) \
                    else (step.get("thought") or "")
                entry = {"action": action}
                self._assistant(entry, content_text(response), action, workdirs[last], model,
                                dict(session_id=session_id, json_path=where), names, out)

    @staticmethod
    def _match_step(steps: list[dict], cursor: int, action: str) -> int | None:
        wanted = action.strip()
        for j in range(cursor, len(steps)):
            candidate = steps[j].get("action")
            if isinstance(candidate, str) and candidate.strip() == wanted:
                return j
        return None

    def _assistant(self, entry: dict, text: str, action: str, cwd: str | None,
                   model: str | None, row: dict, names: dict, out: Emitter
                   ) -> tuple[str, str] | None:
        """Rows of one model turn; returns the made-up call awaiting an observation, if any."""
        where = row["json_path"]
        session_id = row["session_id"]
        row = dict(row, role="assistant", model=model, api_call_id=f"{session_id}#{where}")
        thinking = entry.get("thinking_blocks")
        if isinstance(thinking, list):
            for k, block in enumerate(thinking):
                if isinstance(block, dict) and isinstance(block.get("thinking"), str):
                    out.message(kind="thinking", subtype=nonempty_str(block.get("type")),
                                text=block["thinking"],
                                **dict(row, json_path=f"{where}/thinking_blocks/{k}"))
        calls = openai_tool_calls(entry.get("tool_calls"), f"history entry {where}")
        if text or (not calls and not action.strip()):
            out.message(kind="text", text=text, **row)
        if calls:
            for k, (call_id, name, input_obj, input_json) in enumerate(calls):
                emit_tool_call(out, dict(row, json_path=f"{where}/tool_calls/{k}"),
                               call_id=call_id, name=name, input_obj=input_obj,
                               input_json=input_json, cwd=cwd)
                if call_id:
                    names[call_id] = name
            return None
        if not action.strip():
            return None
        call_id = f"{session_id}#{where}"
        name, family = action_tool(action)
        emit_tool_call(out, row, call_id=call_id, name=name, input_obj=None,
                       input_json=dumps({"command": action}), cwd=cwd, family=family)
        names[call_id] = name
        return call_id, name

    @staticmethod
    def _result(ids: list[str], names: dict, content: Any, text: str, subtype: str | None,
                row: dict, out: Emitter) -> None:
        first = ids[0] if ids else None
        emit_tool_result(out, dict(row, subtype=subtype), call_id=first,
                         name=names.get(first) if first else None, payload=content,
                         is_error=False, text=text)
        for other in ids[1:]:
            # one observation answering several calls: stored once, the others are empty
            emit_tool_result(out, dict(row, subtype="shared_observation"), call_id=other,
                             name=names.get(other), payload="", is_error=False, text="")
