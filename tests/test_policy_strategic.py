"""strategic (docs/policies.md): weighted tool calls, boundaries, every suppression rule, the two
printed forms, and compaction at the suggestion points."""

from __future__ import annotations

import json

from pipeline.core.config import Config
from pipeline.stages.plan import plan_session_input
from tests.helpers.sessions import SessionBuilder
from pipeline.policies.strategic import suggestion_points
from pipeline.reports.suggestions import box, one_line

TODO_DONE = {"todos": [{"content": "a", "status": "completed", "activeForm": "a"},
                       {"content": "b", "status": "completed", "activeForm": "b"}]}
TODO_OPEN = {"todos": [{"content": "a", "status": "completed", "activeForm": "a"},
                       {"content": "b", "status": "in_progress", "activeForm": "b"}]}


def calls(b: SessionBuilder, tool: str, n: int, *, at: float | None = None, error: bool = False,
          result: str = "ok") -> list[str]:
    ids = []
    for i in range(n):
        ids.append(b.call(tool, {"file_path": f"src/{tool}{i}.py", "pattern": "x",
                                 "command": f"{tool.lower()} {i}", "url": "https://x"}, at=at))
        b.result(ids[-1], result, error=error)
    return ids


def points(b: SessionBuilder, spec: str = "strategic"):
    params = Config().resolve(spec).steps[0].params
    return suggestion_points(b.build().view(), params)


def todo_done(b: SessionBuilder, at: float | None = None) -> str:
    cid = b.call("TodoWrite", TODO_DONE, at=at)
    b.result(cid, "Todos have been modified successfully")
    return cid


def test_weighted_counts_per_tool_family():
    b = SessionBuilder()
    b.prompt("build the feature", at=0)
    calls(b, "Edit", 10, at=1)          # 10 x 1.0
    calls(b, "Read", 20)                # 20 x 0.5
    calls(b, "Grep", 10)                # 10 x 0.3
    calls(b, "Glob", 10)                # 10 x 0.3
    calls(b, "WebFetch", 4)             # 4 x 0.5
    calls(b, "Frobnicate", 2)           # unknown: 2 x 1.0
    todo_done(b)                        # TodoWrite: 1.0 -> 31 in all
    found, suppressed = points(b, "strategic(threshold=31)")
    assert [(p["weighted_calls"], p["boundary"]) for p in found] == [(31.0, "Task done")]
    assert suppressed == []
    assert points(b, "strategic(threshold=31.5)") == ([], [])
    heavy_reads = points(b, "strategic(threshold=41, weights={read=1.0})")[0]
    assert [p["weighted_calls"] for p in heavy_reads] == [41.0]


def test_each_boundary_kind_is_recognised():
    def first_boundary(add) -> str | None:
        b = SessionBuilder()
        b.prompt("implement the change", at=0)
        calls(b, "Read", 4, at=1)
        add(b)
        found, _ = points(b, "strategic(threshold=2)")
        return found[0]["boundary"] if found else None

    def bash(command: str, output: str):
        return lambda b: b.result(b.call("Bash", {"command": command}), output)

    assert first_boundary(lambda b: todo_done(b)) == "Task done"
    assert first_boundary(lambda b: b.result(b.call("TodoWrite", TODO_OPEN), "ok")) is None
    assert first_boundary(bash('git commit -m "add parser"',
                               "[main 1a2b3c4] add parser\n 1 file changed")) == "Committed"
    assert first_boundary(bash("git -C repo commit -am wip", "[dev 99] wip")) == "Committed"
    assert first_boundary(bash("git commit -m x", "nothing to commit, working tree clean")) is None
    assert first_boundary(bash("git status", "clean")) is None
    assert first_boundary(lambda b: b.result(b.call("ExitPlanMode", {"plan": "1. do it"}),
                                             "User approved the plan")) == "Plan written"
    assert first_boundary(lambda b: b.result(b.call("Write", {"file_path": "docs/PLAN.md",
                                                              "content": "# plan"}),
                                             "written")) == "Plan written"
    assert first_boundary(lambda b: b.result(b.call("Task", {"subagent_type": "code-reviewer",
                                                             "prompt": "check it"}),
                                             "review: looks good")) == "Review done"
    assert first_boundary(lambda b: b.result(b.call("Task", {"prompt": "explore the code"}),
                                             "found it")) is None


INVESTIGATING = ("investigating: calls after a Bash error, not yet resolved by an edit and a "
                 "passing run")


def test_recent_errors_suppress_until_five_clean_results():
    b = SessionBuilder()
    b.prompt("implement the change", at=0)
    calls(b, "Edit", 5, at=1)
    calls(b, "Bash", 1, error=True, result="command failed")
    todo_done(b, at=2)
    calls(b, "Edit", 1, at=29)                       # the fix ...
    calls(b, "Bash", 1, result="ok")                 # ... and a passing run resolve the error
    calls(b, "Read", 3)
    todo_done(b, at=31)
    found, suppressed = points(b, "strategic(threshold=3)")
    assert [p["suppressed_by"] for p in suppressed] == \
        [["recent errors: 1 of the last 5 tool results", INVESTIGATING]]
    assert [p["time"] for p in found] == ["2026-01-05T09:31:00Z"]


def test_the_investigation_pattern_suppresses_until_an_edit_and_a_passing_run():
    def reasons(*steps) -> list[list[str]]:
        b = SessionBuilder()
        b.prompt("implement the change", at=0)
        calls(b, "Edit", 3, at=1)
        calls(b, "Bash", 1, error=True, result="command failed")
        calls(b, "Read", 6)                          # the error leaves the 5-result window
        for step in steps:
            step(b)
        todo_done(b, at=30)
        found, suppressed = points(b, "strategic(threshold=3)")
        return [p["suppressed_by"] for p in suppressed] + [[] for _ in found]

    assert reasons() == [[INVESTIGATING]]                               # reads/greps only
    assert reasons(lambda b: calls(b, "Grep", 2), lambda b: calls(b, "Bash", 1)) == \
        [[INVESTIGATING]]                                               # runs without a fix
    assert reasons(lambda b: calls(b, "Edit", 1)) == [[INVESTIGATING]]  # a fix, not yet run
    assert reasons(lambda b: calls(b, "Edit", 1), lambda b: calls(b, "Bash", 1)) == [[]]
    assert reasons(lambda b: calls(b, "Edit", 1),
                   lambda b: calls(b, "Bash", 1, result="2 failed, 3 passed")) == \
        [[INVESTIGATING]]                                               # the run did not pass


def test_a_task_worded_as_a_fix_a_bug_or_an_investigation_is_never_interrupted():
    def suppressed_by(prompt: str) -> list[list[str]]:
        b = SessionBuilder()
        b.prompt(prompt, at=0)
        calls(b, "Edit", 5, at=1)
        todo_done(b, at=2)
        found, suppressed = points(b, "strategic(threshold=3)")
        return [p["suppressed_by"] for p in suppressed] + [[] for _ in found]

    debugging = ["debugging task: the task says it is a fix, a bug, debugging or an investigation"]
    for prompt in ("fix the login redirect loop", "investigate why the cache misses",
                   "Debug the flaky upload test", "there is a bug in the importer",
                   "find the root cause of the timeouts"):
        assert suppressed_by(prompt) == [debugging], prompt
    for prompt in ("add the export feature", "use the prefix option", "update the fixtures"):
        assert suppressed_by(prompt) == [[]], prompt
    # a new task lifts it
    b = SessionBuilder()
    b.prompt("fix the login redirect loop", at=0)
    calls(b, "Edit", 5, at=1)
    todo_done(b, at=2)
    b.prompt("now add the export feature", at=20)
    calls(b, "Edit", 5, at=21)
    todo_done(b, at=22)
    found, suppressed = points(b, "strategic(threshold=3)")
    assert [p["time"][11:16] for p in found] == ["09:22"] and len(suppressed) == 1


def test_a_migration_rollback_or_destructive_command_just_run_suppresses():
    def reasons(command: str, after: int = 0, tool: str = "Bash") -> list[list[str]]:
        b = SessionBuilder()
        b.prompt("ship the schema change", at=0)
        calls(b, "Edit", 5, at=1)
        key = "command" if tool == "Bash" else "query"
        b.result(b.call(tool, {key: command}, at=2), "done")
        calls(b, "Read", after)
        todo_done(b, at=3)
        found, suppressed = points(b, "strategic(threshold=3)")
        return [[r for r in p["suppressed_by"] if r.startswith("critical")] for p in suppressed] \
            + [[] for _ in found]

    for command in ("alembic upgrade head", "git reset --hard HEAD~1", "rm -rf build/",
                    "psql -c 'DROP TABLE users'", "terraform apply -auto-approve",
                    "python manage.py migrate", "rails db:rollback", "kubectl delete ns x",
                    "git push --force origin main"):
        [[reason]] = reasons(command)
        assert reason == f"critical operation: `{command}` in progress or just run", command
    assert reasons("DROP TABLE users;", tool="mcp__db__query") == \
        [["critical operation: `{\"query\":\"DROP TABLE users;\"}` in progress or just run"]]
    assert reasons("alembic upgrade head", after=2) == [[]]   # 3 calls later: not just run
    for command in ("alembic history", "git reset HEAD file.py", "rm build/old.txt",
                    "echo 'select * from users'", "terraform plan"):
        assert reasons(command) == [[]], command


def test_an_unresolved_debugging_task_suppresses_until_tests_pass():
    b = SessionBuilder()
    b.prompt("the parser crashes on empty files", at=0)
    calls(b, "Bash", 1, at=1, error=True, result="Traceback: crash")
    calls(b, "Edit", 5, at=2)                                   # pushes the error out of view
    todo_done(b, at=3)
    b.result(b.call("Bash", {"command": "pytest -q"}, at=20), "5 passed in 0.12s")
    todo_done(b, at=21)
    found, suppressed = points(b, "strategic(threshold=3)")
    assert [p["suppressed_by"] for p in suppressed] == [[
        INVESTIGATING,
        "debugging: an error or failing test since the debugging request is not resolved yet"]]
    assert [p["seq"] for p in found] == [b.messages[-1]["seq"]]


def test_uncommitted_edits_suppress_only_when_the_session_uses_git():
    def build(branch):
        b = SessionBuilder(git_branch=branch)
        b.prompt("implement the change", at=0)
        calls(b, "Edit", 5, at=1)
        todo_done(b, at=2)
        b.result(b.call("Bash", {"command": "git commit -m done"}, at=30),
                 "[main abc] done\n 5 files changed")
        return b

    found, suppressed = points(build("main"), "strategic(threshold=3)")
    assert [p["suppressed_by"] for p in suppressed] == \
        [["uncommitted edits: files edited since the last commit"]]
    assert [p["boundary"] for p in found] == ["Committed"]
    found, suppressed = points(build(None), "strategic(threshold=3)")
    assert suppressed == [] and [p["boundary"] for p in found] == ["Task done"]


def test_failing_tests_suppress_until_they_pass():
    b = SessionBuilder()
    b.prompt("add the export feature", at=0)
    b.result(b.call("Bash", {"command": "python -m pytest tests"}, at=1),
             "...\n=== 2 failed, 30 passed in 3.1s ===")
    calls(b, "Edit", 5, at=2)
    todo_done(b, at=3)
    b.result(b.call("Bash", {"command": "npm test"}, at=30), "Tests: 32 passed, 32 total")
    todo_done(b, at=31)
    found, suppressed = points(b, "strategic(threshold=3)")
    assert [p["suppressed_by"] for p in suppressed] == [["failing tests: the last test run failed"]]
    assert [p["time"] for p in found] == ["2026-01-05T09:31:00Z"]


def test_a_suggestion_less_than_ten_minutes_after_the_last_is_suppressed():
    b = SessionBuilder()
    b.prompt("implement the change", at=0)
    calls(b, "Edit", 5, at=1)
    todo_done(b, at=2)
    calls(b, "Edit", 5, at=5)
    todo_done(b, at=9)                  # 7 minutes later
    calls(b, "Edit", 5, at=13)
    todo_done(b, at=13)                 # 11 minutes after the first suggestion
    found, suppressed = points(b, "strategic(threshold=3)")
    assert [p["time"][11:16] for p in found] == ["09:02", "09:13"]
    assert [p["suppressed_by"] for p in suppressed] == [["cooldown: last suggestion 7 min ago (< 10)"]]
    # the count is not reset by a suppressed point: 6 + 6 = 12 calls at the third boundary
    assert [p["weighted_calls"] for p in found] == [6.0, 12.0]


def test_scenario_thresholds():
    b = SessionBuilder()
    b.prompt("update the README docs for the new API", at=0)
    calls(b, "Edit", 59, at=1)
    todo_done(b, at=2)                  # 60 weighted calls
    assert [p["threshold"] for p in points(b, 'strategic(scenario="docs")')[0]] == [60.0]
    assert points(b, 'strategic(scenario="debugging")')[0] == []           # 75
    auto = points(b, 'strategic(scenario="auto")')[0]
    assert [(p["scenario"], p["threshold"]) for p in auto] == [("docs", 60.0)]
    assert [p["threshold"] for p in points(b, 'strategic(scenario="quick_fix")')[0]] == [30.0]


def test_the_one_line_and_box_forms():
    point = {"seq": 90000, "turn": 12, "time": "2026-01-05T10:00:00Z", "weighted_calls": 72.0,
             "threshold": 50.0, "minutes": 42.5, "session_minutes": 45.2, "boundary": "Task done",
             "boundary_kind": "todo_done", "task": "Add user authentication",
             "detail": "4 todo items completed", "state": "Clean state",
             "why": "72 weighted tool calls since the last compaction"}
    assert one_line(point) == "[Compact? 72/50 calls | Task done | Clean state] Y/n/defer"
    rule = "━" * 51
    assert box(point) == "\n".join([
        rule,
        " Context Compaction Suggested",
        rule,
        " ",
        " Session Metrics:",
        "   Tool calls:     72 significant (threshold: 50)",
        "   Session time:   45 minutes",
        "   Last boundary:  Task completed 0 min ago",
        " ",
        " Boundary Detected:",
        '   Task "Add user authentication" marked complete (4 todo items completed)',
        "   No pending changes or active debugging",
        " ",
        " Recommendation: GOOD TIME TO COMPACT",
        " ",
        " Options:",
        "   [1] Compact now (will invoke context-saver first)",
        "   [2] Defer for 15 minutes",
        "   [3] Defer until next boundary",
        "   [4] Dismiss (don't suggest again this session)",
        rule,
    ])
    commit = {**point, "boundary": "Committed", "boundary_kind": "commit",
              "detail": 'git commit -m "feat: implement JWT auth flow"',
              "commit_message": "feat: implement JWT auth flow"}
    assert '   Git commit: "feat: implement JWT auth flow"' in box(commit).splitlines()
    assert "   Last boundary:  Committed 0 min ago" in box(commit).splitlines()


def test_a_suggestion_point_carries_what_the_box_shows():
    b = SessionBuilder()
    b.prompt("implement the change", at=0)
    calls(b, "Edit", 5, at=1)
    b.result(b.call("TodoWrite", {"todos": [
        {"content": "Add user authentication", "status": "completed", "activeForm": "x"}]},
        at=45), "ok")
    calls(b, "Edit", 3, at=50)
    b.result(b.call("Bash", {"command": 'git commit -am "feat: implement JWT auth flow"'}, at=58),
             "[main 1a2] feat: implement JWT auth flow")
    found, _ = points(b, "strategic(threshold=3, cooldown_minutes=0)")
    assert [(p["session_minutes"], p.get("task"), p.get("commit_message")) for p in found] == [
        (45.0, "Add user authentication", None), (58.0, None, "feat: implement JWT auth flow")]


def test_the_plan_compacts_at_each_suggestion_point():
    b = SessionBuilder()
    b.prompt("implement the change", at=0)
    reads = calls(b, "Read", 8, at=1, result="file text " * 40)
    done = todo_done(b, at=2)
    result = plan_session_input(b.build(), Config().resolve("strategic(threshold=3, keep_recent=2)"))
    [plan] = result.plans
    at = [r["seq"] for r in b.messages if r["call_id"] == done and r["kind"] == "tool_result"][0]
    assert (plan["trigger"], plan["at_seq"]) == ("suggestion", at)
    assert [e["call_id"] for e in result.evictions] == reads[:6]
    meta = json.loads(plan["metadata_json"])
    assert meta["suggestion"]["boundary"] == "Task done"
    assert meta["keepRecent"] == 2
    assert len(result.suggestions) == 1
