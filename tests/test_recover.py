"""Recovery documents: every field from a session built here, and a session with no evidence."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from pipeline.cli import cli
from pipeline.core.errors import UsageError
from pipeline.stages.recover import build_documents, memory_id, recover, recovery_file_name
from pipeline.stages.summarize import summarize
from tests.helpers.lake import ingest_paths


class ClaudeTranscript:
    """A Claude Code session written line by line (one second apart unless ``at`` is given)."""

    def __init__(self, session_id: str, *, cwd: str = "/work/proj",
                 start: str = "2025-12-09T10:00:00", model: str = "claude-sonnet-4-5-20250929",
                 branch: str = "main"):
        from datetime import datetime
        self.session_id = session_id
        self.cwd = cwd
        self.model = model
        self.branch = branch
        self.clock = datetime.fromisoformat(start)
        self.lines: list[dict] = []
        self.calls = 0

    def _stamp(self, at: str | None) -> str:
        from datetime import datetime, timedelta
        if at:
            self.clock = datetime.fromisoformat(at)
        else:
            self.clock += timedelta(seconds=1) if self.lines else timedelta(0)
        return self.clock.strftime("%Y-%m-%dT%H:%M:%S.000Z")

    def _line(self, kind: str, message: dict, at: str | None = None, **extra) -> dict:
        line = {"type": kind, "uuid": f"u{len(self.lines)}", "parentUuid": None,
                "sessionId": self.session_id, "timestamp": self._stamp(at), "cwd": self.cwd,
                "gitBranch": self.branch, "version": "2.0.28", "userType": "external",
                "isSidechain": False, "message": message, **extra}
        self.lines.append(line)
        return line

    def user(self, content, *, meta: bool = False, at: str | None = None) -> "ClaudeTranscript":
        extra = {"isMeta": True} if meta else {}
        self._line("user", {"role": "user", "content": content}, at, **extra)
        return self

    def _usage(self, usage: dict | None) -> dict:
        base = {"input_tokens": 10, "output_tokens": 5, "cache_creation_input_tokens": 0,
                "cache_read_input_tokens": 0}
        return {**base, **(usage or {})}

    def reply(self, *blocks: dict, usage: dict | None = None, at: str | None = None,
              model: str | None = None) -> "ClaudeTranscript":
        """One API response, written as one line per block (usage repeated on each); its
        message id and request id are unique across sessions, as the API's are."""
        self.calls += 1
        for block in blocks:
            self._line("assistant", {"id": f"msg_{self.session_id}_{self.calls}", "type": "message",
                                     "role": "assistant",
                                     "model": model or self.model, "content": [block],
                                     "usage": self._usage(usage)}, at,
                       requestId=f"req_{self.session_id}_{self.calls}")
            at = None
        return self

    def say(self, text: str, **kwargs) -> "ClaudeTranscript":
        return self.reply({"type": "text", "text": text}, **kwargs)

    def tool(self, name: str, input_obj: dict, result: str, *, is_error: bool = False,
             at: str | None = None) -> "ClaudeTranscript":
        call_id = f"toolu_{len(self.lines)}"
        self.reply({"type": "tool_use", "id": call_id, "name": name, "input": input_obj}, at=at)
        block = {"type": "tool_result", "tool_use_id": call_id, "content": result}
        if is_error:
            block["is_error"] = True
        self._line("user", {"role": "user", "content": [block]})
        return self

    def write(self, folder: Path, name: str | None = None) -> Path:
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / (name or f"{self.session_id}.jsonl")
        path.write_text("".join(json.dumps(line) + "\n" for line in self.lines), encoding="utf-8")
        return path


def _document(tmp_path: Path, transcript: ClaudeTranscript):
    archive = tmp_path / "archive"
    transcript.write(archive)
    lake, _ = ingest_paths(tmp_path, archive)
    return lake, recover(lake, transcript.session_id)


def _section(markdown: str, title: str) -> str:
    part = markdown.split(f"## {title}\n", 1)[1]
    return part.split("\n\n## ", 1)[0]


def _working_session() -> ClaudeTranscript:
    t = ClaudeTranscript("sess-work", cwd="/work/proj")
    t.user("<system-reminder>injected context</system-reminder>\nAdd a --verbose flag to the CLI. "
           "Don't touch the tests. Please keep the public API stable.")
    t.tool("TodoWrite", {"todos": [
        {"content": "Read the CLI", "status": "in_progress", "activeForm": "Reading"},
        {"content": "Add the flag", "status": "pending", "activeForm": "Adding"}]},
        "Todos have been modified successfully.")
    t.tool("Read", {"file_path": "/work/proj/README.md"}, "     1→# proj")
    t.tool("Read", {"file_path": "src/cli.py"}, "     1→import click")
    t.tool("Edit", {"file_path": "/work/proj/src/cli.py", "old_string": "a", "new_string": "b"},
           "The file /work/proj/src/cli.py has been updated.")
    t.tool("Edit", {"file_path": "/work/proj/src/cli.py", "old_string": "c", "new_string": "d"},
           "The file /work/proj/src/cli.py has been updated.")
    t.tool("Write", {"file_path": "/work/proj/docs/flags.md", "content": "# Flags\n"},
           "File created successfully at: /work/proj/docs/flags.md")
    t.tool("Bash", {"command": "pip install requests && git commit -am 'Add --verbose flag'"},
           "Successfully installed requests-2.32.3\n[main 1a2b3c4] Add --verbose flag")
    t.tool("TodoWrite", {"todos": [
        {"content": "Read the CLI", "status": "completed", "activeForm": "Reading"},
        {"content": "Add the flag", "status": "in_progress", "activeForm": "Adding"},
        {"content": "Run the tests", "status": "pending", "activeForm": "Running"}]},
        "Todos have been modified successfully.")
    t.say("Now I'll run the tests.")
    t.tool("Bash", {"command": "pytest -q tests/test_cli.py"},
           "FAILED tests/test_cli.py::test_verbose - AssertionError: expected 1\n1 failed",
           is_error=True, at="2025-12-09T10:20:00")
    return t


def test_every_field_is_filled_from_the_evidence_of_a_working_session(tmp_path):
    lake, doc = _document(tmp_path, _working_session())
    md = doc.to_markdown()
    assert doc.memory_id == "CMEM-20251209-102001"   # the failed test result, one second later
    assert md.startswith("# Recovery ID: CMEM-20251209-102001\n\n## Session ID\n(none)\n\n")
    assert _section(md, "Project Root") == "/work/proj"
    # the specification's "High-level goal (1-2 sentences)"
    assert _section(md, "Objective") == "Add a --verbose flag to the CLI. Don't touch the tests."
    assert _section(md, "Execution Plan") == (
        "### Source: todo (TodoWrite)\n\n<details>\n<summary>Full Execution Plan (Click to expand)</summary>\n\n"
        "- [x] Read the CLI\n- [>] Add the flag\n- [ ] Run the tests\n\n</details>")
    assert _section(md, "Working Files (Modified)") == (
        "- /work/proj/src/cli.py (role: edited)\n- /work/proj/docs/flags.md (role: created)")
    # README only read; src/cli.py was read (relative path, resolved against the cwd) then edited
    assert _section(md, "Reference Files (Read-Only)") == "- /work/proj/README.md (role: read)"
    assert _section(md, "Last Action") == (
        "Bash `pytest -q tests/test_cli.py` (2025-12-09 10:20:00 UTC)\n"
        "Result: failed: FAILED tests/test_cli.py::test_verbose - AssertionError: expected 1")
    assert _section(md, "Decisions") == "(none)"
    assert _section(md, "Constraints") == ("- Don't touch the tests.\n"
                                           "- Please keep the public API stable.")
    assert _section(md, "Dependencies") == "- `pip install requests` (success)"
    assert _section(md, "Known Issues") == (
        "- Bash `pytest -q tests/test_cli.py` failed: "
        "FAILED tests/test_cli.py::test_verbose - AssertionError: expected 1")
    assert _section(md, "Changes Made") == (
        "- Edited /work/proj/src/cli.py (2 edits)\n- Created /work/proj/docs/flags.md\n"
        "- Committed: Add --verbose flag")
    assert _section(md, "Pending") == "- Add the flag (in progress)\n- Run the tests"
    notes = _section(md, "Notes")
    assert notes.startswith("- Transcript session ID: sess-work\n")
    assert "- Recorded: format claude_code, model claude-sonnet-4-5-20250929, branch main" in notes
    assert "- Counts: 1 prompt, 10 assistant responses, 9 tool calls (1 failed)" in notes
    assert notes.endswith('- Last assistant message: "Now I\'ll run the tests."\n')


def test_the_fields_come_in_the_order_of_the_session_memory_format(tmp_path):
    _, doc = _document(tmp_path, _working_session())
    titles = [line[3:] for line in doc.to_markdown().splitlines() if line.startswith("## ")]
    assert titles == ["Session ID", "Project Root", "Objective", "Execution Plan",
                      "Working Files (Modified)", "Reference Files (Read-Only)", "Last Action",
                      "Decisions", "Constraints", "Dependencies", "Known Issues", "Changes Made",
                      "Pending", "Notes"]


def test_a_session_without_evidence_says_none_everywhere_it_has_nothing(tmp_path):
    t = ClaudeTranscript("sess-bare", cwd="/work/bare")
    t.user("hello there")
    t.say("Hi! How can I help?")
    _, doc = _document(tmp_path, t)
    md = doc.to_markdown()
    for title in ("Execution Plan", "Working Files (Modified)", "Reference Files (Read-Only)",
                  "Last Action", "Decisions", "Constraints", "Dependencies", "Known Issues",
                  "Changes Made", "Pending"):
        assert _section(md, title) == "(none)", title
    assert _section(md, "Objective") == "hello there"
    assert _section(md, "Project Root") == "/work/bare"
    assert md.endswith('- Last assistant message: "Hi! How can I help?"\n')


def test_a_failure_followed_by_a_success_on_the_same_target_is_not_a_known_issue(tmp_path):
    t = ClaudeTranscript("sess-fix")
    t.user("fix the build")
    t.tool("Edit", {"file_path": "/work/proj/a.py", "old_string": "x", "new_string": "y"},
           "<tool_use_error>File has not been read yet. Read it first before writing to it.</tool_use_error>",
           is_error=True)
    t.tool("Read", {"file_path": "/work/proj/a.py"}, "1→x")
    t.tool("Edit", {"file_path": "/work/proj/a.py", "old_string": "x", "new_string": "y"},
           "The file /work/proj/a.py has been updated.")
    t.tool("Bash", {"command": "make"}, "make: *** No rule to make target", is_error=True)
    t.tool("Bash", {"command": "make build"}, "ok")
    _, doc = _document(tmp_path, t)
    # the edit was retried successfully; `make` never succeeded (a different command did)
    assert doc.known_issues == ["Bash `make` failed: make: *** No rule to make target"]
    assert doc.working_files == [("/work/proj/a.py", "edited")]
    assert doc.reference_files == []
    assert doc.last_action == ["Bash `make build` (2025-12-09 10:00:09 UTC)", "Result: success: ok"]


def test_a_plan_written_with_exit_plan_mode_is_an_inferred_plan_and_its_approval_a_decision(tmp_path):
    t = ClaudeTranscript("sess-plan")
    t.user("plan the migration first")
    plan = "## Migration\n1. Dump the schema\n2. Write the new tables"
    t.tool("ExitPlanMode", {"plan": plan}, "User has approved your plan. You can now start coding.")
    t.tool("AskUserQuestion", {"questions": [{"question": "Which database?", "options": []}]},
           'User has answered your questions: "Which database?"="PostgreSQL". You can now continue.')
    _, doc = _document(tmp_path, t)
    assert (doc.plan_source, doc.plan_text) == ("inferred", plan)
    assert "### Source: inferred\n" in doc.to_markdown()
    assert doc.decisions == ["Plan approved by the user (2025-12-09 10:00:01 UTC)",
                             "Which database?: PostgreSQL"]
    assert doc.pending == []


def test_a_numbered_plan_in_the_prompt_is_user_stated(tmp_path):
    t = ClaudeTranscript("sess-user-plan")
    t.user("Please do the following:\n1. add the model\n2. add the route\n\nThanks")
    t.say("On it.")
    _, doc = _document(tmp_path, t)
    assert (doc.plan_source, doc.plan_text) == ("user-stated", "1. add the model\n2. add the route")


def test_a_plan_the_assistant_announced_is_inferred_and_a_list_without_intro_is_not(tmp_path):
    t = ClaudeTranscript("sess-inferred")
    t.user("speed up the importer")
    t.say("Here is what I found:\n1. parsing is slow\n2. writes are fine")
    t.say("Here's my plan:\n1. Profile the parser\n2. Cache the schema\n3. Re-run the benchmark")
    t.say("Results:\n1. 2x faster\n2. memory unchanged")
    _, doc = _document(tmp_path, t)
    assert (doc.plan_source, doc.plan_text) == (
        "inferred", "1. Profile the parser\n2. Cache the schema\n3. Re-run the benchmark")


def test_codex_update_plan_and_write_todos_are_todo_lists_with_their_statuses(tmp_path):
    from pipeline.stages.recover import ToolEvent, _todo_state

    def event(name, obj, family="todo"):
        return ToolEvent("s", 1, None, name, family, obj, json.dumps(obj), None, False, True, "ok",
                         False, False)

    codex = event("update_plan", {"plan": [{"step": "a", "status": "completed"},
                                           {"step": "b", "status": "in_progress"}]})
    gemini = event("write_todos", {"todos": [{"description": "c", "status": "cancelled"},
                                             {"description": "d", "status": "pending"}]})
    assert _todo_state([codex]) == [("completed", "a"), ("in_progress", "b")]
    assert _todo_state([codex, gemini]) == [("cancelled", "c"), ("pending", "d")]


def test_the_id_is_the_last_activity_in_utc():
    from datetime import datetime, timedelta, timezone
    paris = timezone(timedelta(hours=1))
    assert memory_id(datetime(2025, 12, 9, 20, 48, 50, tzinfo=paris)) == "CMEM-20251209-194850"


def test_sub_agent_sessions_count_for_their_parent_and_prefixes_pick_the_parent(tmp_path):
    parent = ClaudeTranscript("sess-p")
    parent.user("look around")
    parent.tool("Task", {"description": "explore", "prompt": "read the code"}, "done")
    child = ClaudeTranscript("sess-p")
    child.user("read the code")
    child.tool("Read", {"file_path": "/work/proj/lib.py"}, "1→pass")
    for line in child.lines:
        line["agentId"] = "abc12345"
        line["isSidechain"] = True
    archive = tmp_path / "archive"
    parent.write(archive)
    child.write(archive, "agent-abc12345.jsonl")
    lake, _ = ingest_paths(tmp_path, archive)
    doc = recover(lake, "sess")
    assert doc.session_id == "sess-p"
    assert doc.reference_files == [("/work/proj/lib.py", "read")]
    assert doc.last_action[0].startswith("Task explore")
    assert "- Sub-agent sessions: 1 (sess-p/agent-abc12345)" in doc.to_markdown()


def test_the_real_claude_session_document_reads_as_the_transcript_shows(tmp_path, real_dir):
    lake, _ = ingest_paths(tmp_path, real_dir / "claude_code" / "claude_session.jsonl")
    raw = [json.loads(line) for line in
           (real_dir / "claude_code" / "claude_session.jsonl").read_text(encoding="utf-8").splitlines()]
    writes = [b["input"]["file_path"] for o in raw if o["type"] == "assistant"
              for b in o["message"]["content"] if b["type"] == "tool_use" and b["name"] == "Write"]
    last = max(o["timestamp"] for o in raw if "timestamp" in o)
    doc = recover(lake, raw[1]["sessionId"])
    assert doc.working_files == [(writes[0], "created")]
    assert doc.memory_id == "CMEM-" + last[:10].replace("-", "") + "-" + last[11:19].replace(":", "")
    assert doc.objective == raw[1]["message"]["content"]
    assert doc.known_issues == ["Bash `cd myapp && python hoge.py` failed: error: target shim binary not found"]


def test_summarize_writes_a_document_per_top_level_session_and_the_cli_writes_one_to_a_file(tmp_path):
    archive = tmp_path / "archive"
    _working_session().write(archive)
    other = ClaudeTranscript("sess-other", start="2025-12-10T08:00:00")
    other.user("hello")
    other.write(archive)
    lake, _ = ingest_paths(tmp_path, archive)
    result = summarize(lake, tz="UTC", sessions=["sess-work"])
    names = sorted(p.name for p in (lake.summaries_dir / "recovery").iterdir())
    assert (result.recovery_written, names) == (1, ["sess-work.md"])
    expected = build_documents(lake.connect(), ["sess-work"])["sess-work"].to_markdown()
    assert (lake.summaries_dir / "recovery" / "sess-work.md").read_text(encoding="utf-8") == expected

    out = tmp_path / "resume.md"
    runner = CliRunner()
    res = runner.invoke(cli, ["--lake", str(lake.root), "recover", "sess-work", "--out", str(out)],
                        catch_exceptions=False)
    assert res.exit_code == 0
    assert res.output == "wrote " + str(out) + " (CMEM-20251209-102001)\n"
    assert out.read_text(encoding="utf-8") == expected
    res = runner.invoke(cli, ["--lake", str(lake.root), "recover", "nope"])
    assert res.exit_code == 2
    assert res.output.startswith("Error: no session 'nope' in the lake")


def test_recovery_file_names_are_safe_and_distinct():
    assert recovery_file_name("7f2abd2d-7cfc") == "7f2abd2d-7cfc.md"
    a, b = recovery_file_name("a/b"), recovery_file_name("a_b")
    assert a.startswith("a_b-") and a.endswith(".md") and b == "a_b.md" and a != b


IMPL_PLAN = "## Phase 1: Setup\n- [x] Initialize project structure\n- [ ] Configure TypeScript"


def test_plan_sources_follow_the_specifications_priority_workflow_todo_user_stated_inferred(
        tmp_path):
    def plan_of(name, steps) -> tuple[str, str]:
        t = ClaudeTranscript(name)
        t.user("Please do the following:\n1. add the model\n2. add the route")
        for step in steps:
            step(t)
        t.say("Here's my plan:\n1. Profile the parser\n2. Cache the schema")
        _, doc = _document(tmp_path / name, t)
        source = _section(doc.to_markdown(), "Execution Plan").splitlines()[0]
        return source, doc.plan_text

    def todo(t):
        t.tool("TodoWrite", {"todos": [{"content": "Add the model", "status": "pending",
                                        "activeForm": "Adding"}]}, "Todos have been modified")

    def write_plan(t):
        t.tool("Write", {"file_path": "/work/proj/.workflow/active/WFS-auth/IMPL_PLAN.md",
                         "content": IMPL_PLAN + "\n"}, "File created successfully")

    def read_plan(t):
        numbered = "".join(f"{n:>6}→{line}\n" for n, line in enumerate(IMPL_PLAN.splitlines(), 1))
        t.tool("Read", {"file_path": "/work/proj/.workflow/active/WFS-auth/IMPL_PLAN.md"}, numbered)

    assert plan_of("s-written", [todo, write_plan]) == ("### Source: workflow (IMPL_PLAN.md)", IMPL_PLAN)
    assert plan_of("s-read", [read_plan, todo]) == ("### Source: workflow (IMPL_PLAN.md)", IMPL_PLAN)
    assert plan_of("s-todo", [todo]) == ("### Source: todo (TodoWrite)", "- [ ] Add the model")
    assert plan_of("s-user", []) == ("### Source: user-stated", "1. add the model\n2. add the route")


def test_the_session_id_is_the_workflow_id_when_the_transcript_has_one(tmp_path):
    t = ClaudeTranscript("sess-wfs")
    t.user("continue the workflow")
    t.tool("Read", {"file_path": "/work/proj/.workflow/active/WFS-jwt-refresh/IMPL_PLAN.md"},
           "     1→## Phase 1\n     2→- [ ] step")
    _, doc = _document(tmp_path / "a", t)
    md = doc.to_markdown()
    assert _section(md, "Session ID") == "WFS-jwt-refresh"
    assert "- Transcript session ID: sess-wfs" in _section(md, "Notes")
    assert doc.to_dict()["workflow_session_id"] == "WFS-jwt-refresh"
    t = ClaudeTranscript("sess-wfs-text")
    t.user("resume WFS-payments-v2 please")
    t.say("Resuming WFS-payments-v2.")
    _, doc = _document(tmp_path / "b", t)
    assert _section(doc.to_markdown(), "Session ID") == "WFS-payments-v2"


def test_the_project_root_is_the_top_most_folder_with_a_marker_when_the_tree_is_here(
        tmp_path, monkeypatch):
    from pipeline.stages.recover import project_root

    home = tmp_path / "home" / "bob"
    monkeypatch.setenv("HOME", str(home))
    repo = home / "code" / "mono"
    pkg = repo / "packages" / "web"
    (pkg / "src").mkdir(parents=True)
    (repo / ".git").mkdir()
    (pkg / "package.json").write_text("{}")
    (home / ".claude").mkdir()                       # the user's settings, not a project
    assert project_root(str(pkg / "src")) == str(repo)
    assert project_root(str(pkg)) == str(repo)
    (tmp_path / "elsewhere").mkdir()
    assert project_root(str(tmp_path / "elsewhere")) == str(tmp_path / "elsewhere")
    assert project_root("/no/such/tree/here") == "/no/such/tree/here"
    assert project_root("a1b2c3projecthash") == "a1b2c3projecthash"
    t = ClaudeTranscript("sess-root", cwd=str(pkg / "src"))
    t.user("build the web package")
    _, doc = _document(tmp_path / "lake1", t)
    assert _section(doc.to_markdown(), "Project Root") == str(repo)


def test_recovery_ids_are_unique_per_lake_when_sessions_end_in_the_same_second(tmp_path):
    import hashlib

    archive = tmp_path / "archive"
    for name in ("sess-x", "sess-y"):
        t = ClaudeTranscript(name, start="2025-12-09T10:00:00")
        t.user("the same second")
        t.write(archive)
    lone = ClaudeTranscript("sess-z", start="2025-12-09T11:00:00")
    lone.user("another second")
    lone.write(archive)
    lake, _ = ingest_paths(tmp_path, archive)
    summarize(lake, tz="UTC")
    ids = {}
    for name in ("sess-x", "sess-y", "sess-z"):
        text = (lake.summaries_dir / "recovery" / f"{name}.md").read_text(encoding="utf-8")
        ids[name] = text.splitlines()[0].removeprefix("# Recovery ID: ")
    suffix = {n: hashlib.sha256(n.encode()).hexdigest()[:6] for n in ids}
    assert ids == {"sess-x": f"CMEM-20251209-100000-{suffix['sess-x']}",
                   "sess-y": f"CMEM-20251209-100000-{suffix['sess-y']}",
                   "sess-z": "CMEM-20251209-110000"}
    assert recover(lake, "sess-y").memory_id == ids["sess-y"]


def test_recovery_documents_built_by_the_worker_pool_equal_those_built_in_one_process(
        tmp_path, monkeypatch):
    from pipeline.stages import recover as recovery
    from tests.helpers.lake import REAL

    lake, _summary = ingest_paths(tmp_path, REAL)
    with lake.connect() as con:
        ids = [row[0] for row in con.execute(
            "SELECT session_id FROM sessions WHERE parent_session_id IS NULL").fetchall()]
        memory = recovery.lake_memory_ids(con)
        alone = recovery.render_documents(con, ids, memory, workers=1)
        monkeypatch.setattr(recovery, "PARALLEL_MIN_DOCUMENTS", 2)
        pooled = recovery.render_documents(con, ids, memory, workers=2)
        built = build_documents(con, ids, memory)
    assert len(ids) >= 8 and list(pooled) == sorted(ids)
    assert pooled == alone == {sid: doc.to_markdown() for sid, doc in built.items()}


def test_a_night_that_adds_a_session_ending_in_the_same_second_rewrites_the_older_document(tmp_path):
    """Recovery ids are unique across the lake: a new session ending in the second an older
    one ended gives both a hash suffix, and removing it takes both away again. The older
    session's files did not change, yet its document is written again, as a run over the
    whole lake writes it."""
    from pipeline.core.lake import Lake
    from pipeline.stages.nightly import run_nightly

    def night(lake_root: Path, archive: Path) -> None:
        assert run_nightly([archive], lake=Lake(lake_root), workers=1, tz="UTC").status == "ok"

    def documents(lake_root: Path) -> dict[str, str]:
        folder = lake_root / "summaries" / "recovery"
        return {p.name: p.read_text(encoding="utf-8") for p in sorted(folder.glob("*.md"))}

    archive = tmp_path / "archive"
    old = ClaudeTranscript("sess-old", start="2025-12-09T10:00:00")
    old.user("first task").user("second line")                  # ends 10:00:01
    old.write(archive)
    ClaudeTranscript("sess-apart", start="2025-12-09T11:00:00").user("other work").write(archive)
    lake_root = tmp_path / "lake"
    night(lake_root, archive)
    alone = documents(lake_root)["sess-old.md"]
    assert "CMEM-20251209-100001" in alone and "CMEM-20251209-100001-" not in alone

    twin = ClaudeTranscript("sess-twin", start="2025-12-09T10:00:01")
    twin.user("same second")
    twin.write(archive)
    night(lake_root, archive)
    whole = tmp_path / "whole"
    night(whole, archive)
    assert documents(lake_root) == documents(whole)
    assert "CMEM-20251209-100001-" in documents(lake_root)["sess-old.md"]

    (archive / "sess-twin.jsonl").unlink()
    night(lake_root, archive)
    assert list(documents(lake_root)) == ["sess-apart.md", "sess-old.md"]
    assert documents(lake_root)["sess-old.md"] == alone
