"""SWE-agent trajectories: the real 0.x and 1.x samples, counted independently from the raw JSON.

Every expected number below is computed from the sample with a few lines of plain ``json``
(never copied from the reader's output) and, where SOURCES.md states a fact, checked
against it too.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers.lake import REAL, ingest_paths, rows, scalar

SAMPLES = ["6e44b9__sweagenttestrepo-1c2844.traj", "pydicom__pydicom-1458.traj"]


def _raw(name: str) -> dict:
    return json.loads((REAL / "swe_agent" / name).read_text(encoding="utf-8"))


def _expected(data: dict) -> dict:
    """What the lake must hold, from the raw trajectory (plain json, no reader code)."""
    history = data["history"]
    demo = [h for h in history if h.get("is_demo")]
    live = [h for h in history if not h.get("is_demo")]
    actions = [h for h in live if h["role"] == "assistant"]
    history_calls = sum(len(h.get("tool_calls") or []) or 1 for h in actions)
    # an answer is a user/tool message right after an assistant message
    answers = [m for prev, m in zip(live, live[1:])
               if prev["role"] == "assistant" and m["role"] in ("user", "tool")]
    last_step = data["trajectory"][-1]["action"].strip()
    trajectory_only = int(last_step != actions[-1]["action"].strip())
    users = [m for m in live if m["role"] == "user" and not any(m is a for a in answers)]
    stats = data["info"]["model_stats"]
    return dict(
        demo=len(demo), system=sum(m["role"] == "system" for m in live),
        prompts=len(users), assistant_turns=len(actions) + trajectory_only,
        calls=history_calls + trajectory_only, results=len(answers),
        tokens_sent=stats["tokens_sent"], tokens_received=stats["tokens_received"],
        cost=stats["instance_cost"], api_calls=stats["api_calls"],
    )


@pytest.fixture(scope="module")
def lake(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("swe")
    lake, summary = ingest_paths(tmp, REAL / "swe_agent")
    assert summary.quarantined == 0 and summary.problems == []
    assert summary.records == 2 and summary.files == 2
    return lake


def test_the_real_samples_match_the_facts_in_sources_md():
    new = _raw(SAMPLES[0])
    assert len(new["trajectory"]) == 5 and len(new["history"]) == 10
    assert sum(h["role"] == "assistant" for h in new["history"]) == 4
    assert sum(h["role"] == "tool" for h in new["history"]) == 4
    assert isinstance(new["replay_config"], dict) and new["environment"] == "main"
    old = _raw(SAMPLES[1])
    assert len(old["trajectory"]) == 12 and old["environment"] == "swe_main"
    assert sum(bool(h.get("is_demo")) for h in old["history"]) == 1
    assert old["history"][-1]["action"].strip() == "submit"


@pytest.mark.parametrize("name", SAMPLES)
def test_each_sample_has_exact_counts_per_role_kind_and_tool(lake, name):
    data = _raw(name)
    want = _expected(data)
    session = name[: -len(".traj")]
    got = dict(rows(lake, "SELECT role || '/' || kind, count(*) FROM messages "
                          "WHERE session_id = ? GROUP BY ALL", [session]))
    expected = {
        "system/text": want["system"],
        "user/text": want["prompts"],
        "assistant/text": want["assistant_turns"],
        "assistant/tool_use": want["calls"],
        "tool/tool_result": want["results"],
        "assistant/other": 1,
    }
    if want["demo"]:
        expected["user/meta"] = want["demo"]
    assert got == expected
    assert scalar(lake, "SELECT count(*) FROM messages WHERE session_id = ? AND is_demo",
                  [session]) == want["demo"]
    assert scalar(lake, "SELECT count(*) FROM messages WHERE session_id = ? AND is_prompt",
                  [session]) == want["prompts"]
    assert scalar(lake, "SELECT count(*) FROM tool_calls WHERE session_id = ?",
                  [session]) == want["calls"]
    paired = scalar(lake, "SELECT count(*) FROM tool_results r JOIN tool_calls c "
                          "USING (session_id, call_id) WHERE session_id = ?", [session])
    assert paired == want["results"]
    # the only call without a result is the final submit
    orphans = rows(lake, "SELECT c.tool_name FROM tool_calls c LEFT JOIN tool_results r "
                         "USING (session_id, call_id) WHERE session_id = ? AND r.call_id IS NULL",
                   [session])
    assert orphans == [("submit",)]
    assert scalar(lake, "SELECT count(*) FROM tool_results WHERE session_id = ? AND is_error",
                  [session]) == 0


@pytest.mark.parametrize("name", SAMPLES)
def test_run_level_model_stats_become_one_run_row(lake, name):
    want = _expected(_raw(name))
    session = name[: -len(".traj")]
    got = rows(lake, "SELECT subtype, input_tokens, output_tokens, cost_usd_recorded, json_path "
                     "FROM messages WHERE session_id = ? AND usage_scope IS NOT NULL", [session])
    assert got == [("model_stats", want["tokens_sent"], want["tokens_received"], want["cost"],
                    "/info/model_stats")]
    meta = json.loads(scalar(lake, "SELECT meta_json FROM session_info WHERE session_id = ?",
                             [session]))
    assert meta["api_calls"] == want["api_calls"]
    # one API call per assistant turn: the rows of a turn share their api_call_id
    turns = scalar(lake, "SELECT count(DISTINCT api_call_id) FROM messages "
                         "WHERE session_id = ? AND kind IN ('text', 'tool_use') "
                         "AND role = 'assistant'", [session])
    assert turns == want["assistant_turns"] == want["api_calls"]


def test_function_calling_pairs_by_tool_call_ids_and_keeps_crlf(lake):
    data = _raw(SAMPLES[0])
    session = SAMPLES[0][: -len(".traj")]
    history = data["history"]
    pairs = sorted((h["tool_calls"][0]["id"], h["tool_calls"][0]["function"]["name"])
                   for h in history if h["role"] == "assistant")
    got = rows(lake, "SELECT call_id, tool_name FROM tool_calls WHERE session_id = ? "
                     "AND json_path LIKE '/history/%' ORDER BY call_id", [session])
    assert got == pairs
    for index, entry in enumerate(history):
        if entry["role"] != "tool":
            continue
        text, call_id, name = rows(lake, "SELECT text, call_id, tool_name FROM messages "
                                         "WHERE session_id = ? AND json_path = ?",
                                   [session, f"/history/{index}"])[0]
        assert text == entry["content"]
        assert call_id == entry["tool_call_ids"][0]
        assert name == dict(pairs)[call_id]
    assert scalar(lake, "SELECT count(*) FROM messages WHERE session_id = ? "
                        "AND kind = 'tool_result' AND contains(text, chr(13) || chr(10))",
                  [session]) == sum("\r\n" in h["content"] for h in history if h["role"] == "tool")
    model = data["replay_config"]["agent"]["model"]["name"]
    assert rows(lake, "SELECT DISTINCT model FROM messages WHERE session_id = ? "
                      "AND role = 'assistant'", [session]) == [(model,)]


def test_the_trajectory_only_submit_is_an_orphan_call_read_from_the_trajectory(lake):
    data = _raw(SAMPLES[0])
    session = SAMPLES[0][: -len(".traj")]
    last = len(data["trajectory"]) - 1
    got = rows(lake, "SELECT call_id, tool_name, tool_family, input_json, cwd FROM tool_calls "
                     "WHERE session_id = ? AND json_path = ?", [session, f"/trajectory/{last}"])
    step = data["trajectory"][last]
    assert got == [(f"{session}#/trajectory/{last}", "submit", "other",
                    json.dumps({"command": step["action"]}, separators=(",", ":")),
                    step["state"]["working_dir"])]
    text = scalar(lake, "SELECT text FROM messages WHERE session_id = ? AND json_path = ? "
                        "AND kind = 'text'", [session, f"/trajectory/{last}"])
    assert text == step["response"]


def test_text_actions_get_made_up_ids_and_the_next_user_message_answers(lake):
    data = _raw(SAMPLES[1])
    session = SAMPLES[1][: -len(".traj")]
    history = data["history"]
    expected = []
    for index, entry in enumerate(history):
        if entry["role"] == "assistant":
            call_id = f"{session}#/history/{index}"
            answer = f"/history/{index + 1}" if index + 1 < len(history) else None
            expected.append((call_id, entry["action"].split()[0], answer))
    got = rows(lake, "SELECT c.call_id, c.tool_name, r.json_path FROM tool_calls c "
                     "LEFT JOIN tool_results r USING (session_id, call_id) "
                     "WHERE session_id = ? ORDER BY c.seq", [session])
    assert got == expected
    families = dict(rows(lake, "SELECT DISTINCT tool_name, tool_family FROM tool_calls "
                               "WHERE session_id = ?", [session]))
    assert families == {"create": "write", "edit": "edit", "python": "shell",
                        "find_file": "glob", "open": "read", "rm": "shell", "submit": "other"}
    # cwd of each call: the working_dir of its (pre-action) trajectory state
    states = [json.loads(step["state"])["working_dir"] for step in data["trajectory"]]
    assert rows(lake, "SELECT DISTINCT cwd FROM tool_calls WHERE session_id = ?",
                [session]) == [(s,) for s in sorted(set(states))]
    project = scalar(lake, "SELECT project FROM session_info WHERE session_id = ?", [session])
    assert project == states[0]
    # the demonstration is a meta row, not a prompt, and the issue text is the prompt
    demo = [i for i, h in enumerate(history) if h.get("is_demo")]
    assert rows(lake, "SELECT json_path, kind, is_prompt FROM messages WHERE session_id = ? "
                      "AND is_demo", [session]) == [(f"/history/{demo[0]}", "meta", False)]
    assert scalar(lake, "SELECT json_path FROM messages WHERE session_id = ? AND is_prompt",
                  [session]) == f"/history/{demo[0] + 1}"


def test_every_json_path_points_at_the_object_the_row_came_from(lake):
    for name in SAMPLES:
        data = _raw(name)
        session = name[: -len(".traj")]
        for path, kind, call_id in rows(lake, "SELECT json_path, kind, call_id FROM messages "
                                              "WHERE session_id = ?", [session]):
            node = data
            for part in path.strip("/").split("/"):
                node = node[int(part)] if isinstance(node, list) else node[part]
            if kind == "tool_use" and "/tool_calls/" in path:
                assert node["id"] == call_id


def _write(tmp_path: Path, name: str, doc) -> Path:
    archive = tmp_path / "archive"
    archive.mkdir(exist_ok=True)
    target = archive / name
    target.write_text(json.dumps(doc), encoding="utf-8")
    return archive


def test_a_json_string_replay_config_gives_the_model_and_one_tool_message_can_answer_two_ids(
        tmp_path):
    doc = {
        "environment": "main",
        "replay_config": json.dumps({"agent": {"model": {"name": "claude-x"}},
                                     "env": {"repo": {"github_url": "https://github.com/o/r"}}}),
        "trajectory": [{"action": "ls", "observation": "a", "response": "r", "thought": "t",
                        "state": {}}],
        "history": [
            {"role": "system", "content": "sys", "agent": "main", "message_type": "system_prompt"},
            {"role": "user", "content": "fix it", "agent": "main", "message_type": "observation"},
            {"role": "assistant", "content": "both", "thought": "both", "action": "ls",
             "agent": "main", "message_type": "action",
             "tool_calls": [
                 {"id": "c1", "type": "function", "function": {"name": "bash", "arguments": "{\"command\": \"ls\"}"}},
                 {"id": "c2", "type": "function", "function": {"name": "str_replace_editor", "arguments": "{\"command\": \"view\", \"path\": \"/r/a\"}"}}]},
            {"role": "tool", "content": [{"type": "text", "text": "a\nb"}], "agent": "main",
             "message_type": "observation", "tool_call_ids": ["c1", "c2"]},
        ],
        "info": {"model_stats": {"instance_cost": 0.5, "tokens_sent": 10, "tokens_received": 2,
                                 "api_calls": 1}},
    }
    lake, summary = ingest_paths(tmp_path, _write(tmp_path, "inst-1.traj", doc))
    assert summary.quarantined == 0
    assert rows(lake, "SELECT DISTINCT model FROM messages WHERE role = 'assistant'") == \
        [("claude-x",)]
    assert scalar(lake, "SELECT project FROM session_info") == "https://github.com/o/r"
    assert rows(lake, "SELECT call_id, tool_name, tool_family FROM tool_calls ORDER BY call_id") \
        == [("c1", "bash", "shell"), ("c2", "str_replace_editor", "read")]
    assert rows(lake, "SELECT call_id, tool_name, text, subtype FROM messages "
                      "WHERE kind = 'tool_result' ORDER BY seq") == \
        [("c1", "bash", "a\nb", "observation"), ("c2", "str_replace_editor", "", "shared_observation")]
    # the last trajectory step is in the history: nothing is read from the trajectory
    assert scalar(lake, "SELECT count(*) FROM messages WHERE json_path LIKE '/trajectory/%'") == 0


def test_a_demonstration_file_is_all_demo_rows_and_no_tool_calls(tmp_path):
    doc = {"history": [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "issue"},
        {"role": "assistant", "content": "look", "action": "ls"},
        {"role": "user", "content": "a b"},
    ]}
    lake, summary = ingest_paths(tmp_path, _write(tmp_path, "demo.traj", doc))
    assert summary.quarantined == 0
    assert rows(lake, "SELECT role, kind, is_demo, is_prompt FROM messages ORDER BY seq") == [
        ("system", "meta", True, False), ("user", "meta", True, False),
        ("assistant", "meta", True, False), ("user", "meta", True, False)]
    assert scalar(lake, "SELECT count(*) FROM tool_calls") == 0
    assert json.loads(scalar(lake, "SELECT meta_json FROM session_info"))["demo_only"] is True


def test_step_by_step_demonstrations_never_become_tool_calls(tmp_path):
    doc = {
        "trajectory": [{"action": "ls", "observation": "x", "response": "r", "state": {}}],
        "history": [
            {"role": "system", "content": "sys", "agent": "main"},
            {"role": "assistant", "content": "demo", "action": "cat a", "is_demo": True,
             "tool_calls": [{"id": "d1", "type": "function",
                             "function": {"name": "bash", "arguments": "{}"}}]},
            {"role": "tool", "content": "demo out", "tool_call_ids": ["d1"], "is_demo": True},
            {"role": "user", "content": "issue", "agent": "main"},
            {"role": "assistant", "content": "go", "action": "ls", "agent": "main"},
            {"role": "user", "content": "x", "agent": "main"},
        ],
        "info": {},
    }
    lake, _ = ingest_paths(tmp_path, _write(tmp_path, "i.traj", doc))
    assert rows(lake, "SELECT role, kind, is_demo FROM messages WHERE is_demo ORDER BY seq") == [
        ("assistant", "meta", True), ("tool", "meta", True)]
    assert rows(lake, "SELECT c.call_id, r.json_path FROM tool_calls c "
                      "JOIN tool_results r USING (session_id, call_id)") == \
        [("i#/history/4", "/history/5")]
    assert scalar(lake, "SELECT count(*) FROM messages WHERE usage_scope IS NOT NULL") == 0


@pytest.mark.parametrize("doc, reason", [
    ([1, 2], "must be a JSON object"),
    ({"trajectory": []}, "needs a 'history' list"),
    ({"attempts": {"0": {}}}, "'attempts' must be a list"),
    ({"attempts": [{"trajectory": [], "info": {}}]}, "attempts[0]: a SWE-agent trajectory needs"),
])
def test_a_malformed_trajectory_is_quarantined_with_a_reason(tmp_path, doc, reason):
    lake, summary = ingest_paths(tmp_path, _write(tmp_path, "bad.traj", doc))
    assert summary.quarantined == 1 and summary.records == 0
    assert reason in summary.problems[0].reason
    assert scalar(lake, "SELECT count(*) FROM messages") == 0


ASK = {"role": "user", "content": "fix the bug"}


@pytest.mark.parametrize("doc, reason", [
    ({"history": [ASK, "x"]}, "history[1] is a str, expected an object"),
    ({"info": {}, "history": [ASK, {"role": "assistant", "content": "", "tool_calls": "nope"}]},
     "history[1]: history entry /history/1: tool_calls must be a list, found str"),
    ({"attempts": [{"history": [ASK, 3]}]}, "attempts[0]: history[1] is a int, expected an object"),
])
def test_a_history_entry_that_cannot_be_read_costs_that_entry_not_the_trajectory(tmp_path, doc,
                                                                                  reason):
    lake, summary = ingest_paths(tmp_path, _write(tmp_path, "bad.traj", doc))
    assert (summary.lines, summary.records, summary.quarantined) == (1, 1, 0)
    assert [(p.line_no, p.reason) for p in summary.problems] == [(0, reason)]
    assert rows(lake, "SELECT line_no, reason FROM quarantine") == [(0, reason)]
    assert rows(lake, "SELECT role, text FROM messages") == [("user", "fix the bug")]


def test_replays_of_one_instance_in_different_run_folders_are_different_sessions(tmp_path):
    """SWE-agent writes ``<run>/<instance>/<instance>.traj``; a benchmark reruns the same
    instances in every run, so the run folder is part of the id (the instance folder is not)."""
    archive = tmp_path / "trajectories"
    name = SAMPLES[1]
    stem = name[:-len(".traj")]
    source = (REAL / "swe_agent" / name).read_bytes()
    for rel in (f"runA/{stem}/{name}", f"runB/{name}", f"team/runC/{stem}/{name}", name):
        (archive / rel).parent.mkdir(parents=True, exist_ok=True)
        (archive / rel).write_bytes(source)
    lake, summary = ingest_paths(tmp_path, archive)
    assert summary.quarantined == 0 and summary.files == 4
    calls = _expected(_raw(name))["calls"]
    assert rows(lake, "SELECT session_id, count(*) FROM tool_calls GROUP BY 1 ORDER BY 1") == [
        (stem, calls), (f"{stem}@runA", calls), (f"{stem}@runB", calls),
        (f"{stem}@team/runC", calls)]
    # the made-up ids of text actions are per session too, so no call pairs across runs
    assert scalar(lake, "SELECT count(DISTINCT call_id) FROM tool_calls") == 4 * calls


# -- RetryAgent (agent.type: retry): sweagent/agent/agents.py RetryAgent.get_trajectory_data ----
def _attempt(data: dict, tag: str, stats: dict) -> dict:
    """One attempt as a RetryAgent stores it: a sub-agent's whole trajectory (its own
    ``get_trajectory_data``; ``replay_config`` is null: the run config is set on the RetryAgent,
    not on its sub-agents), here the real 1.x sample with its call ids made unique."""
    attempt = json.loads(json.dumps({k: data[k] for k in ("trajectory", "history", "info")}))
    for entry in attempt["history"]:
        for call in entry.get("tool_calls") or []:
            call["id"] += tag
        if isinstance(entry.get("tool_call_ids"), list):
            entry["tool_call_ids"] = [i + tag for i in entry["tool_call_ids"]]
    attempt["info"]["model_stats"] = stats
    attempt["replay_config"] = None
    attempt["environment"] = "main"
    return attempt


ATTEMPT_STATS = [
    {"instance_cost": 0.25, "tokens_sent": 1000, "tokens_received": 100, "api_calls": 5},
    {"instance_cost": 0.5, "tokens_sent": 2000, "tokens_received": 200, "api_calls": 5},
]
REVIEW_STATS = {"instance_cost": 0.125, "tokens_sent": 300, "tokens_received": 30, "api_calls": 1}


def _retry_doc(*, choose: bool = True) -> dict:
    """``{"attempts": [...]}`` (the saves during the run), plus, in the final save, a deep copy
    of the chosen attempt at the top level whose info gains best_attempt_idx,
    rloop_model_stats and the run's total model_stats (attempts + reviewer)."""
    data = _raw(SAMPLES[0])
    attempts = [_attempt(data, f"-a{i}", stats) for i, stats in enumerate(ATTEMPT_STATS)]
    doc = {"attempts": attempts}
    if choose:
        doc |= json.loads(json.dumps(attempts[1]))
        doc["info"]["best_attempt_idx"] = 1
        doc["info"]["rloop_model_stats"] = REVIEW_STATS
        doc["info"]["model_stats"] = {key: sum(s[key] for s in ATTEMPT_STATS) + REVIEW_STATS[key]
                                      for key in REVIEW_STATS}
    return doc


def test_a_retry_agent_file_reads_every_attempt_once_and_not_the_top_level_copy(tmp_path):
    doc = _retry_doc()
    lake, summary = ingest_paths(tmp_path, _write(tmp_path, "inst.traj", doc))
    assert summary.quarantined == 0
    want = _expected(_raw(SAMPLES[0]))
    # every row comes from an attempt: the top-level history/trajectory are the chosen copy
    assert rows(lake, "SELECT split_part(json_path, '/', 2) || '/' || split_part(json_path, '/', 3),"
                      " count(*) FILTER (WHERE kind = 'tool_use'), "
                      "count(*) FILTER (WHERE kind = 'tool_result') FROM messages "
                      "WHERE json_path <> '/info/rloop_model_stats' GROUP BY 1 ORDER BY 1") == [
        ("attempts/0", want["calls"], want["results"]),
        ("attempts/1", want["calls"], want["results"])]
    assert scalar(lake, "SELECT count(*) FROM tool_results r JOIN tool_calls c "
                        "USING (session_id, call_id)") == 2 * want["results"]
    last = len(doc["trajectory"]) - 1
    assert rows(lake, "SELECT c.call_id FROM tool_calls c LEFT JOIN tool_results r "
                      "USING (session_id, call_id) WHERE r.call_id IS NULL ORDER BY 1") == [
        (f"inst#/attempts/0/trajectory/{last}",), (f"inst#/attempts/1/trajectory/{last}",)]
    # usage: each attempt's own stats and the reviewer's, which sum to the top-level total
    got = rows(lake, "SELECT subtype, json_path, input_tokens, output_tokens, cost_usd_recorded "
                     "FROM messages WHERE usage_scope = 'run' ORDER BY seq")
    assert got == [("model_stats", f"/attempts/{i}/info/model_stats", s["tokens_sent"],
                    s["tokens_received"], s["instance_cost"]) for i, s in enumerate(ATTEMPT_STATS)] \
        + [("rloop_model_stats", "/info/rloop_model_stats", 300, 30, 0.125)]
    total = doc["info"]["model_stats"]
    assert rows(lake, "SELECT sum(input_tokens), sum(output_tokens), sum(cost_usd_recorded) "
                      "FROM messages") == [(total["tokens_sent"], total["tokens_received"],
                                            total["instance_cost"])]
    meta = json.loads(scalar(lake, "SELECT meta_json FROM session_info"))
    assert (meta["attempts"], meta["best_attempt_idx"], meta["api_calls"]) == (2, 1, 11)
    assert rows(lake, "SELECT DISTINCT session_id FROM messages") == [("inst",)]
    for path, kind, call_id in rows(lake, "SELECT json_path, kind, call_id FROM messages"):
        node = doc
        for part in path.strip("/").split("/"):
            node = node[int(part)] if isinstance(node, list) else node[part]
        if kind == "tool_use" and "/tool_calls/" in path:
            assert node["id"] == call_id


def test_a_retry_agent_file_saved_during_the_run_holds_only_attempts_and_is_read(tmp_path):
    lake, summary = ingest_paths(tmp_path, _write(tmp_path, "inst.traj", _retry_doc(choose=False)))
    assert summary.quarantined == 0
    want = _expected(_raw(SAMPLES[0]))
    assert scalar(lake, "SELECT count(*) FROM tool_calls") == 2 * want["calls"]
    assert rows(lake, "SELECT json_path FROM messages WHERE usage_scope = 'run' ORDER BY seq") == [
        ("/attempts/0/info/model_stats",), ("/attempts/1/info/model_stats",)]
    assert json.loads(scalar(lake, "SELECT meta_json FROM session_info"))["api_calls"] == 10


def test_a_retry_agents_own_copy_of_an_attempt_adds_no_rows_beside_its_attempts_list(tmp_path):
    """The RetryAgent saves each finished attempt to ``<instance>/attempt_<n>/<instance>.traj``
    right before the ``attempts`` list that holds it: read once, from that list."""
    archive = tmp_path / "trajectories"
    doc = _retry_doc()
    files = {"run/inst/inst.traj": doc, "run/inst/attempt_0/inst.traj": doc["attempts"][0],
             "run/inst/attempt_1/inst.traj": doc["attempts"][1],
             # an attempt_<n> folder that is not inside its instance's folder: a plain file
             "other/attempt_0/inst.traj": doc["attempts"][0]}
    for rel, content in files.items():
        (archive / rel).parent.mkdir(parents=True, exist_ok=True)
        (archive / rel).write_text(json.dumps(content, indent=2), encoding="utf-8")
    lake, summary = ingest_paths(tmp_path, archive)
    assert summary.quarantined == 0 and summary.files == 4
    calls = _expected(_raw(SAMPLES[0]))["calls"]
    assert rows(lake, "SELECT session_id, count(*) FROM tool_calls GROUP BY 1 ORDER BY 1") == [
        ("inst@other/attempt_0", calls), ("inst@run", 2 * calls)]
    assert rows(lake, "SELECT session_id, sum(cost_usd_recorded) FROM messages "
                      "GROUP BY 1 ORDER BY 1") == [("inst@other/attempt_0", 0.25), ("inst@run", 0.875)]
    copies = rows(lake, "SELECT session_id, json_extract_string(meta_json, "
                        "'$.retry_attempt_copy_of') FROM session_info ORDER BY 1")
    assert copies == [("inst@other/attempt_0", None), ("inst@run", None),
                      ("inst@run/inst/attempt_0", "inst@run"),
                      ("inst@run/inst/attempt_1", "inst@run")]


def test_apply_clears_a_chosen_attempt_in_its_top_level_copy_too_and_restore_is_byte_exact(
        tmp_path):
    from pipeline.stages.apply import apply_policy
    from pipeline.stages.restore import restore
    from tests.test_apply import CLEARED, hand_evictions

    archive = tmp_path / "archive"
    (archive / "run").mkdir(parents=True)
    original = json.dumps(_retry_doc(), indent=2).encode()
    (archive / "run" / "inst.traj").write_bytes(original)
    lake, _ = ingest_paths(tmp_path, archive)
    summary = apply_policy(lake, policy="clear", out=tmp_path / "out",
                           evictions=hand_evictions(lake, policy="clear", action="clear"))
    assert summary.problems == []
    output = tmp_path / "out" / "clear" / "run" / "inst.traj"
    cleared = json.loads(output.read_bytes())
    tools = [h["role"] == "tool" for h in cleared["history"]]
    # 5 steps: 4 tool calls answered in history, the final submit only in trajectory
    steps = [True] * 4 + [False]
    for run in [*cleared["attempts"], cleared]:     # both attempts, and the chosen one's copy
        assert [h["content"] == CLEARED for h in run["history"]] == tools
        assert [t["observation"] == CLEARED for t in run["trajectory"]] == steps
    assert restore(output, store=lake.store_dir).data == original


# -- clear_input: a call's input is its own field, never the whole entry ----------------------
@pytest.mark.parametrize("name", SAMPLES)
def test_clear_input_clears_only_the_action_of_a_text_action_and_restore_is_byte_exact(
        tmp_path, name):
    """A call without a real id (a 0.x text action, the 1.x trajectory-only ``submit``) has its
    input in the ``action`` field of its history entry / trajectory step: clear_input empties
    that field (a string input stays a string: ``"{}"``) and keeps the thought, the content,
    the response and every other field; a function call's ``arguments`` are cleared as before."""
    from pipeline.stages.apply import apply_policy
    from pipeline.stages.restore import restore
    from tests.helpers.lake import copy_real
    from tests.test_apply import hand_evictions

    archive = copy_real(tmp_path, f"swe_agent/{name}")
    original = (archive / "swe_agent" / name).read_bytes()
    lake, _ = ingest_paths(tmp_path, archive)
    evictions = hand_evictions(lake, policy="inputs", action="clear_input")
    data = _raw(name)
    session = name[: -len(".traj")]
    # what must change: every call's input, nothing else
    expected = json.loads(json.dumps(data))
    text_actions = 0
    for index, entry in enumerate(data["history"]):
        if entry["role"] != "assistant" or entry.get("is_demo"):
            continue
        if entry.get("tool_calls"):
            for call in expected["history"][index]["tool_calls"]:
                call["function"]["arguments"] = "{}"
        else:
            expected["history"][index]["action"] = "{}"
            text_actions += 1
    last = len(data["trajectory"]) - 1
    actions = [h["action"] for h in data["history"] if h["role"] == "assistant"]
    trajectory_only = data["trajectory"][last]["action"].strip() != actions[-1].strip()
    if trajectory_only:
        expected["trajectory"][last]["action"] = "{}"
    assert evictions.num_rows == _expected(data)["calls"]
    assert sorted(evictions.column("json_path").to_pylist()) == sorted(
        [f"/history/{i}" for i, h in enumerate(data["history"]) if h["role"] == "assistant"
         and not h.get("is_demo") and not h.get("tool_calls")]
        + [f"/history/{i}/tool_calls/{k}" for i, h in enumerate(data["history"])
           if h["role"] == "assistant" for k in range(len(h.get("tool_calls") or []))]
        + ([f"/trajectory/{last}"] if trajectory_only else []))
    assert (text_actions, trajectory_only) == ((12, False) if name == SAMPLES[1] else (0, True))

    summary = apply_policy(lake, policy="inputs", out=tmp_path / "out", evictions=evictions)
    assert summary.problems == [] and summary.files_pruned == 1
    output = tmp_path / "out" / "inputs" / "swe_agent" / name
    new = json.loads(output.read_bytes())
    assert new == expected
    # the assistant's own words are all still there
    for before, after in zip(data["history"], new["history"]):
        if before["role"] == "assistant":
            assert (after["thought"], after["content"]) == (before["thought"], before["content"])
    assert restore(output, store=lake.store_dir).data == original
    # the pruned file is still a trajectory with the same calls
    again, summary = ingest_paths(tmp_path / "again", output.parent)
    assert summary.quarantined == 0
    assert scalar(again, "SELECT count(*) FROM tool_calls WHERE session_id = ?",
                  [session]) == _expected(data)["calls"]
