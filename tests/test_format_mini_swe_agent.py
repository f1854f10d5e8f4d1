"""mini-SWE-agent trajectories: the real v1 (text) and v2 (tool calling) samples.

Expected numbers are computed from the raw JSON with plain ``json``/``re`` in each test and
cross-checked with the facts stated in SOURCES.md.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.helpers.lake import REAL, ingest_paths, rows, scalar

V1 = "django__django-14155"     # mini-swe-agent-1: text actions in ```bash blocks
V2 = "pvlib__pvlib-python-1606"  # mini-swe-agent-1.1: tool calls
BASH_BLOCK = r"```bash\s*\n(.*?)\n```"


def _raw(session: str) -> dict:
    return json.loads((REAL / "mini_swe_agent" / f"{session}.traj.json").read_text(encoding="utf-8"))


def _call_usage(data: dict) -> dict:
    """Per-call usage summed over the stored assistant messages (the documented mapping)."""
    total = dict(input=0, output=0, cached=0, reasoning=0, calls=0)
    for message in data["messages"]:
        usage = message.get("extra", {}).get("response", {}).get("usage")
        if message["role"] != "assistant" or not usage:
            continue
        cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0
        total["input"] += usage["prompt_tokens"] - cached
        total["cached"] += cached
        total["output"] += usage["completion_tokens"]
        total["reasoning"] += (usage.get("completion_tokens_details") or {}).get("reasoning_tokens") or 0
        total["calls"] += 1
    return total


@pytest.fixture(scope="module")
def lake(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("mini")
    lake, summary = ingest_paths(tmp, REAL / "mini_swe_agent")
    assert summary.quarantined == 0 and summary.problems == []
    assert summary.files == 2 and summary.records == 2
    return lake


def test_the_samples_match_the_facts_in_sources_md():
    v2 = _raw(V2)
    roles = [m["role"] for m in v2["messages"]]
    assert roles.count("assistant") == 84 and roles.count("tool") == 83
    assert sum(bool(m.get("extra", {}).get("exception_info")) for m in v2["messages"]) == 2
    assert v2["info"]["model_stats"]["api_calls"] == 85
    assert v2["trajectory_format"] == "mini-swe-agent-1.1"
    v1 = _raw(V1)
    blocks = [len(re.findall(BASH_BLOCK, m["content"], re.DOTALL))
              for m in v1["messages"] if m["role"] == "assistant"]
    assert sum(n != 1 for n in blocks) == 5
    assert v1["info"]["model_stats"]["api_calls"] == 22 == len(blocks)


def test_v2_tool_calls_pair_by_id_and_errors_follow_returncode_and_exceptions(lake):
    data = _raw(V2)
    messages = data["messages"]
    calls = [(c["id"], c["function"]["name"]) for m in messages if m["role"] == "assistant"
             for c in m.get("tool_calls") or []]
    tools = [m for m in messages if m["role"] == "tool"]
    errors = sum(m["extra"]["returncode"] != 0 or bool(m["extra"].get("exception_info"))
                 for m in tools)
    call_ids = {c for c, _ in calls}
    paired = sum(m["tool_call_id"] in call_ids for m in tools)
    assert scalar(lake, "SELECT count(*) FROM tool_calls WHERE session_id = ?", [V2]) == len(calls)
    assert sorted(rows(lake, "SELECT call_id, tool_name FROM tool_calls WHERE session_id = ?",
                       [V2])) == sorted(calls)
    assert scalar(lake, "SELECT count(*) FROM tool_results WHERE session_id = ?", [V2]) == len(tools)
    assert scalar(lake, "SELECT count(*) FROM tool_results r JOIN tool_calls c "
                        "USING (session_id, call_id) WHERE session_id = ?", [V2]) == paired
    assert scalar(lake, "SELECT count(*) FROM tool_results WHERE session_id = ? AND is_error",
                  [V2]) == errors
    # the submit call has no tool reply: it is the one orphan
    last_call = next(m for m in reversed(messages) if m["role"] == "assistant")["tool_calls"][0]["id"]
    assert rows(lake, "SELECT c.call_id FROM tool_calls c LEFT JOIN tool_results r "
                      "USING (session_id, call_id) WHERE session_id = ? AND r.call_id IS NULL",
                [V2]) == [(last_call,)]
    assert rows(lake, "SELECT DISTINCT cwd FROM tool_calls WHERE session_id = ?", [V2]) == \
        [(data["info"]["config"]["environment"]["cwd"],)]


def test_v2_messages_per_role_and_kind_are_exact(lake):
    messages = _raw(V2)["messages"]
    assistants = [m for m in messages if m["role"] == "assistant"]
    users = [m for m in messages if m["role"] == "user"]
    got = dict(rows(lake, "SELECT role || '/' || kind, count(*) FROM messages "
                          "WHERE session_id = ? GROUP BY ALL", [V2]))
    assert got == {
        "system/text": sum(m["role"] == "system" for m in messages),
        "system/meta": sum(m["role"] == "exit" for m in messages),
        "user/text": sum("interrupt_type" not in m.get("extra", {}) for m in users),
        "user/meta": sum("interrupt_type" in m.get("extra", {}) for m in users),
        "assistant/text": sum(bool(m["content"]) for m in assistants),
        "assistant/tool_use": sum(len(m["tool_calls"]) for m in assistants),
        "assistant/other": 1,
        "tool/tool_result": sum(m["role"] == "tool" for m in messages),
    }
    assert scalar(lake, "SELECT count(*) FROM messages WHERE session_id = ? AND is_prompt",
                  [V2]) == 1


def test_v1_text_actions_with_one_block_are_calls_answered_by_the_next_user_message(lake):
    data = _raw(V1)
    messages = data["messages"]
    expected_calls, format_errors, errors = [], 0, 0
    for index, message in enumerate(messages):
        if message["role"] != "assistant":
            continue
        found = re.findall(BASH_BLOCK, message["content"], re.DOTALL)
        if len(found) == 1:
            answer = messages[index + 1]["content"]
            code = re.match(r"<returncode>(-?\d+)</returncode>", answer)
            errors += bool(code and int(code.group(1)) != 0)
            expected_calls.append((f"{V1}#/messages/{index}", found[0].strip(),
                                   f"/messages/{index + 1}"))
        else:
            format_errors += 1
    got = rows(lake, "SELECT c.call_id, json_extract_string(c.input_json, '$.command'), "
                     "r.json_path FROM tool_calls c LEFT JOIN tool_results r "
                     "USING (session_id, call_id) WHERE session_id = ? ORDER BY c.seq", [V1])
    assert got == expected_calls
    assert scalar(lake, "SELECT count(*) FROM messages WHERE session_id = ? "
                        "AND subtype = 'format_error' AND kind = 'meta'", [V1]) == format_errors
    assert scalar(lake, "SELECT count(*) FROM tool_results WHERE session_id = ? AND is_error",
                  [V1]) == errors
    # the last user message is the submission, the output of the last command
    assert messages[-1]["content"] == data["info"]["submission"]
    assert rows(lake, "SELECT json_path, subtype FROM messages WHERE session_id = ? "
                      "AND subtype = 'submission'", [V1]) == \
        [(f"/messages/{len(messages) - 1}", "submission")]
    got_roles = dict(rows(lake, "SELECT role, count(*) FROM messages WHERE session_id = ? "
                                "GROUP BY ALL", [V1]))
    n_assistant = sum(m["role"] == "assistant" for m in messages)
    assert got_roles == {
        "system": 1,
        "user": 1 + format_errors,
        "assistant": n_assistant + len(expected_calls) + 1,   # text + tool_use + model_stats
        "tool": len(expected_calls),
    }


@pytest.mark.parametrize("session", [V1, V2])
def test_per_call_usage_and_the_run_cost_are_recorded_without_double_counting(lake, session):
    data = _raw(session)
    want = _call_usage(data)
    got = rows(lake, "SELECT sum(input_tokens), sum(output_tokens), sum(cache_read_tokens), "
                     "coalesce(sum(reasoning_tokens), 0), count(input_tokens) FROM messages "
                     "WHERE session_id = ? AND usage_scope = 'call'", [session])[0]
    assert got == (want["input"], want["output"], want["cached"], want["reasoning"], want["calls"])
    run = rows(lake, "SELECT input_tokens, output_tokens, cost_usd_recorded FROM messages "
                     "WHERE session_id = ? AND usage_scope = 'run'", [session])
    assert run == [(None, None, data["info"]["model_stats"]["instance_cost"])]
    assert scalar(lake, "SELECT sum(cost_usd_recorded) FROM messages WHERE session_id = ?",
                  [session]) == data["info"]["model_stats"]["instance_cost"]
    response_ids = sorted(m["extra"]["response"]["id"] for m in data["messages"]
                          if m["role"] == "assistant")
    assert sorted(r[0] for r in rows(lake, "SELECT api_call_id FROM messages WHERE session_id = ? "
                                           "AND usage_scope = 'call'", [session])) == response_ids
    meta = json.loads(scalar(lake, "SELECT meta_json FROM session_info WHERE session_id = ?",
                             [session]))
    assert meta["api_calls"] == data["info"]["model_stats"]["api_calls"]
    assert scalar(lake, "SELECT project FROM session_info WHERE session_id = ?", [session]) == \
        data["info"]["config"]["environment"]["cwd"]


def test_v2_timestamps_come_from_extra_timestamp(lake):
    stamps = [m["extra"]["timestamp"] for m in _raw(V2)["messages"]
              if "timestamp" in m.get("extra", {})]
    got = rows(lake, "SELECT epoch_us(min(timestamp)), epoch_us(max(timestamp)) FROM messages "
                     "WHERE session_id = ?", [V2])[0]
    assert got == (round(min(stamps) * 1e6), round(max(stamps) * 1e6))


def _write(tmp_path: Path, name: str, doc) -> Path:
    archive = tmp_path / "archive"
    archive.mkdir(exist_ok=True)
    (archive / name).write_text(json.dumps(doc), encoding="utf-8")
    return archive


def _paired_calls(lake) -> list[tuple]:
    """(call id, input, result location, is_error) of every call paired with its result."""
    return rows(lake, "SELECT c.call_id, c.input_json, r.json_path, r.is_error FROM tool_calls c "
                      "JOIN tool_results r USING (session_id, call_id) ORDER BY c.seq")


def test_the_oldest_bare_list_of_messages_is_read_in_text_mode(tmp_path):
    doc = [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "task"},
        {"role": "assistant", "content": "THOUGHT\n```bash\nls -la\n```"},
        {"role": "user", "content": "<returncode>2</returncode>\n<output>\nno\n</output>"},
        {"role": "assistant", "content": "no block"},
        {"role": "user", "content": "Please always provide EXACTLY ONE action"},
        {"role": "assistant", "content": "```bash\nsleep 99\n```"},
        {"role": "user", "content": "The last command <command>sleep 99</command> timed out and has been killed."},
    ]
    lake, summary = ingest_paths(tmp_path, _write(tmp_path, "t1.traj.json", doc))
    assert summary.quarantined == 0
    assert _paired_calls(lake) == [
        ("t1#/2", '{"command":"ls -la"}', "/3", True),
        ("t1#/6", '{"command":"sleep 99"}', "/7", True)]
    assert rows(lake, "SELECT json_path, kind, subtype FROM messages WHERE role = 'user'") == [
        ("/1", "text", None), ("/5", "meta", "format_error")]
    assert scalar(lake, "SELECT count(*) FROM messages WHERE usage_scope IS NOT NULL") == 0


def test_v2_fenced_actions_without_extra_actions_are_calls_too(tmp_path):
    # mini v2's test data: a bare list whose actions are ```mswea_bash_command blocks
    # (v2's default fence), no extra.actions, no config
    doc = [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "task"},
        {"role": "assistant", "content": "Dummy:\n\n```mswea_bash_command\necho 'hello world'\n```"},
        {"role": "user", "content": "<returncode>0</returncode>\n<output>\nhello world\n</output>"},
        {"role": "assistant", "content": "End.\n\n```mswea_bash_command\necho COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT\n```"},
        {"role": "user", "content": ""},
    ]
    lake, summary = ingest_paths(tmp_path, _write(tmp_path, "t3.traj.json", doc))
    assert summary.quarantined == 0
    assert _paired_calls(lake) == [
        ("t3#/2", '{"command":"echo \'hello world\'"}', "/3", False),
        ("t3#/4", '{"command":"echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"}', "/5", False)]
    assert rows(lake, "SELECT json_path, kind, subtype FROM messages WHERE role = 'user'") == [
        ("/1", "text", None)]


def test_a_v2_model_action_regex_is_the_one_used(tmp_path):
    doc = {"trajectory_format": "mini-swe-agent-1.1",
           "info": {"config": {"model": {"action_regex": "<mswea_bash_command>(.*?)</mswea_bash_command>"}}},
           "messages": [
               {"role": "user", "content": "task"},
               {"role": "assistant", "content": "<mswea_bash_command>ls</mswea_bash_command>"},
               {"role": "user", "content": "<returncode>1</returncode>\n<output>\n</output>"},
           ]}
    lake, _ = ingest_paths(tmp_path, _write(tmp_path, "t4.traj.json", doc))
    assert rows(lake, "SELECT c.call_id, c.input_json, r.is_error FROM tool_calls c "
                      "JOIN tool_results r USING (session_id, call_id)") == [
        ("t4#/messages/1", '{"command":"ls"}', True)]


def test_v2_text_mode_actions_are_answered_by_user_observations(tmp_path):
    doc = {"trajectory_format": "mini-swe-agent-1.1", "info": {}, "messages": [
        {"role": "user", "content": "task"},
        {"role": "assistant", "content": "```mswea_bash_command\nls\n```",
         "extra": {"actions": [{"command": "ls"}], "timestamp": 1700000000.5,
                   "response": {"usage": {"prompt_tokens": 100, "completion_tokens": 7,
                                          "cache_creation_input_tokens": 10,
                                          "prompt_tokens_details": {"cached_tokens": 60}}}}},
        {"role": "user", "content": "out", "extra": {"raw_output": "out", "returncode": "0",
                                                     "timestamp": 1700000001}},
        {"role": "user", "content": "bad", "extra": {"interrupt_type": "FormatError"}},
    ]}
    lake, _ = ingest_paths(tmp_path, _write(tmp_path, "t2.traj.json", doc))
    assert rows(lake, "SELECT c.call_id, c.tool_name, r.json_path, r.is_error FROM tool_calls c "
                      "JOIN tool_results r USING (session_id, call_id)") == [
        ("t2#/messages/1/extra/actions/0", "bash", "/messages/2", False)]
    assert rows(lake, "SELECT input_tokens, cache_read_tokens, cache_creation_tokens, "
                      "output_tokens, api_call_id FROM messages WHERE usage_scope = 'call'") == [
        (30, 60, 10, 7, "t2#/messages/1")]
    assert scalar(lake, "SELECT subtype FROM messages WHERE json_path = '/messages/3'") == \
        "format_error"
    assert scalar(lake, "SELECT min(timestamp)::VARCHAR FROM messages") == \
        "2023-11-14 22:13:20.5+00"


@pytest.mark.parametrize("doc, reason", [
    ({"info": {}, "messages": "x"}, "needs a 'messages' list"),
    ("just a string", "must be an object or a list"),
])
def test_a_malformed_trajectory_is_quarantined(tmp_path, doc, reason):
    _, summary = ingest_paths(tmp_path, _write(tmp_path, "bad.traj.json", doc))
    assert summary.quarantined == 1
    assert reason in summary.problems[0].reason


@pytest.mark.parametrize("bad, reason", [
    ({"role": "user", "content": 5}, "messages[1]: content must be a string or a list, found int"),
    ("x", "messages[1] is a str, expected an object"),
])
def test_a_message_that_cannot_be_read_costs_that_message_not_the_trajectory(tmp_path, bad, reason):
    doc = {"messages": [{"role": "system", "content": "you fix bugs"}, bad,
                        {"role": "user", "content": "fix the bug"}]}
    lake, summary = ingest_paths(tmp_path, _write(tmp_path, "bad.traj.json", doc))
    assert (summary.lines, summary.records, summary.quarantined) == (1, 1, 0)
    assert [(p.line_no, p.reason) for p in summary.problems] == [(0, reason)]
    assert rows(lake, "SELECT line_no, reason FROM quarantine") == [(0, reason)]
    assert rows(lake, "SELECT json_path, text FROM messages ORDER BY seq") == [
        ("/messages/0", "you fix bugs"), ("/messages/2", "fix the bug")]


def test_replays_of_one_instance_in_different_run_folders_are_different_sessions(tmp_path):
    """mini-SWE-agent's batch runs write ``<output>/<instance>/<instance>.traj.json``: the
    output folder tells the runs apart, the instance folder adds nothing."""
    archive = tmp_path / "runs"
    source = (REAL / "mini_swe_agent" / f"{V1}.traj.json").read_bytes()
    for rel in (f"sonnet/{V1}/{V1}.traj.json", f"gpt/{V1}.traj.json"):
        (archive / rel).parent.mkdir(parents=True, exist_ok=True)
        (archive / rel).write_bytes(source)
    lake, summary = ingest_paths(tmp_path, archive)
    assert summary.quarantined == 0 and summary.files == 2
    assert rows(lake, "SELECT session_id, json_extract_string(meta_json, '$.instance_id') "
                      "FROM session_info ORDER BY 1") == [(f"{V1}@gpt", V1), (f"{V1}@sonnet", V1)]


# -- Responses API models (litellm_response_model, openrouter_response_model,
# portkey_response_model): the assistant turn is the response object itself
# (``response.model_dump()`` + ``extra``), results are ``function_call_output`` items
def _as_responses(data: dict) -> dict:
    """The real v2 sample as a Responses API model writes it: system/user/format-error
    messages as ``{"type": "message", "content": [input_text]}`` (OpenRouter's and Portkey's
    ``format_message``), each assistant turn as ``{"object": "response", "id", "model",
    "output": [message, function_call...], "usage", "extra": {actions, cost, timestamp}}``,
    each tool message as ``{"type": "function_call_output", "call_id", "output", "extra"}``."""
    messages = []
    for m in data["messages"]:
        if m["role"] in ("system", "user"):
            item = {"type": "message", "role": m["role"],
                    "content": [{"type": "input_text", "text": m["content"]}]}
            messages.append(item | ({"extra": m["extra"]} if "extra" in m else {}))
        elif m["role"] == "assistant":
            response, usage = m["extra"]["response"], m["extra"]["response"]["usage"]
            output = [{"id": f"msg_{response['id']}", "type": "message", "role": "assistant",
                       "status": "completed",
                       "content": [{"type": "output_text", "text": m["content"], "annotations": []}]}
                      ] if m["content"] else []
            output += [{"type": "function_call", "id": f"fc_{c['id']}", "call_id": c["id"],
                        "name": c["function"]["name"], "arguments": c["function"]["arguments"],
                        "status": "completed"} for c in m["tool_calls"]]
            messages.append({
                "id": response["id"], "object": "response", "created_at": response["created"],
                "model": response["model"], "status": "completed", "output": output,
                "usage": {"input_tokens": usage["prompt_tokens"],
                          "input_tokens_details": {"cached_tokens": usage["prompt_tokens_details"]["cached_tokens"]},
                          "output_tokens": usage["completion_tokens"],
                          "total_tokens": usage["total_tokens"]},
                "extra": {k: m["extra"][k] for k in ("actions", "cost", "timestamp")}})
        elif m["role"] == "tool":
            messages.append({"type": "function_call_output", "call_id": m["tool_call_id"],
                             "output": m["content"], "extra": m["extra"]})
        else:
            messages.append(m)
    return dict(data, messages=messages)


COMPARED = ("role, kind, subtype, text, call_id, tool_name, model, api_call_id, input_tokens, "
            "output_tokens, cache_read_tokens, cost_usd_recorded, timestamp")


def test_a_responses_api_trajectory_reads_like_the_same_chat_completions_one(tmp_path):
    data = _raw(V2)
    archive = _write(tmp_path, "chat.traj.json", data)
    _write(tmp_path, "responses.traj.json", _as_responses(data))
    lake, summary = ingest_paths(tmp_path, archive)
    assert summary.quarantined == 0
    chat = rows(lake, f"SELECT {COMPARED} FROM messages WHERE session_id = 'chat' ORDER BY seq")
    responses = rows(lake, f"SELECT {COMPARED} FROM messages WHERE session_id = 'responses' "
                           "ORDER BY seq")
    messages = data["messages"]
    assert len(chat) == len(messages) + 1 + sum(            # + model_stats, + one per call
        len(m["tool_calls"]) - (not m["content"]) for m in messages if m["role"] == "assistant")
    assert responses == chat                                 # every row, in order
    for table, columns in (("tool_calls", "call_id, tool_name, tool_family, input_json, cwd"),
                           ("tool_results", "call_id, tool_name, is_error")):
        got = [rows(lake, f"SELECT {columns} FROM {table} WHERE session_id = ? ORDER BY seq",
                    [session]) for session in ("chat", "responses")]
        assert got[0] == got[1] and len(got[0]) >= 83
    # calls sit on their function_call items, results on their function_call_output messages
    doc = _as_responses(data)
    for path, call_id in rows(lake, "SELECT json_path, call_id FROM tool_calls "
                                    "WHERE session_id = 'responses'"):
        _, _, i, _, k = path.split("/")
        assert doc["messages"][int(i)]["output"][int(k)]["call_id"] == call_id
    for path, call_id in rows(lake, "SELECT json_path, call_id FROM tool_results "
                                    "WHERE session_id = 'responses'"):
        assert doc["messages"][int(path.split("/")[2])]["call_id"] == call_id
    assert scalar(lake, "SELECT count(*) FROM tool_results r JOIN tool_calls c "
                        "USING (session_id, call_id) WHERE session_id = 'responses'") == 83


def test_responses_reasoning_summaries_are_thinking_and_a_turn_without_items_keeps_its_usage(
        tmp_path):
    usage = {"input_tokens": 120, "input_tokens_details": {"cached_tokens": 100},
             "output_tokens": 40, "output_tokens_details": {"reasoning_tokens": 30}}
    doc = {"trajectory_format": "mini-swe-agent-1.1",
           "info": {"config": {"model": {"model_name": "openai/gpt-5"}}}, "messages": [
        {"role": "user", "content": "task"},
        {"id": "resp_1", "object": "response", "model": "gpt-5-2025-08-07", "usage": usage,
         "output": [
             {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "gAAA"},
             {"type": "reasoning", "id": "rs_2", "content": None,
              "summary": [{"type": "summary_text", "text": "look first"},
                          {"type": "summary_text", "text": "then fix"}]},
             {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "bash",
              "arguments": "{\"command\": \"ls\"}"}],
         "extra": {"actions": [{"command": "ls", "tool_call_id": "call_1"}], "cost": 0.01,
                   "timestamp": 1700000000}},
        {"type": "function_call_output", "call_id": "call_1", "output": "<returncode>1</returncode>",
         "extra": {"raw_output": "", "returncode": 1, "timestamp": 1700000001}},
        {"id": "resp_2", "object": "response", "model": "gpt-5-2025-08-07", "output": [],
         "usage": {"input_tokens": 200, "output_tokens": 5}, "extra": {"actions": []}},
    ]}
    lake, summary = ingest_paths(tmp_path, _write(tmp_path, "r1.traj.json", doc))
    assert summary.quarantined == 0
    assert rows(lake, "SELECT json_path, role, kind, subtype, text, api_call_id, input_tokens, "
                      "cache_read_tokens, output_tokens, reasoning_tokens FROM messages "
                      "WHERE role <> 'user' ORDER BY seq") == [
        ("/messages/1/output/1", "assistant", "thinking", "reasoning", "look first\nthen fix",
         "resp_1", 20, 100, 40, 30),
        ("/messages/1/output/2", "assistant", "tool_use", None, '{"command":"ls"}', "resp_1",
         None, None, None, None),
        ("/messages/2", "tool", "tool_result", "observation", "<returncode>1</returncode>", None,
         None, None, None, None),
        ("/messages/3", "assistant", "text", None, "", "resp_2", 200, None, 5, None)]
    assert rows(lake, "SELECT c.call_id, c.tool_name, c.tool_family, r.is_error FROM tool_calls c "
                      "JOIN tool_results r USING (session_id, call_id)") == [
        ("call_1", "bash", "shell", True)]
    assert rows(lake, "SELECT DISTINCT model FROM messages WHERE role = 'assistant'") == \
        [("gpt-5-2025-08-07",)]


@pytest.mark.parametrize("action", ["clear", "clear_input"])
def test_responses_payloads_are_rewritten_in_place_and_restored_byte_for_byte(tmp_path, action):
    from pipeline.stages.apply import apply_policy
    from pipeline.stages.restore import restore
    from tests.test_apply import CLEARED, hand_evictions

    doc = _as_responses(_raw(V2))
    original = json.dumps(doc, indent=2).encode()
    archive = tmp_path / "archive"
    archive.mkdir()
    (archive / "r.traj.json").write_bytes(original)
    lake, _ = ingest_paths(tmp_path, archive)
    evictions = hand_evictions(lake, policy=action, action=action)
    assert evictions.num_rows == (83 if action == "clear" else 84)
    summary = apply_policy(lake, policy=action, out=tmp_path / "out", evictions=evictions)
    assert summary.problems == []
    output = tmp_path / "out" / action / "r.traj.json"
    new = json.loads(output.read_bytes())
    for before, after in zip(doc["messages"], new["messages"]):
        if before.get("type") == "function_call_output":
            assert after["output"] == (CLEARED if action == "clear" else before["output"])
            # the raw output is a copy of the payload: cleared with it
            assert after["extra"]["raw_output"] == (CLEARED if action == "clear" and
                                                    before["extra"]["raw_output"]
                                                    else before["extra"]["raw_output"])
        elif before.get("object") == "response":
            calls = [(b, a) for b, a in zip(before["output"], after["output"])
                     if b["type"] == "function_call"]
            assert all(a["arguments"] == ("{}" if action == "clear_input" else b["arguments"])
                       for b, a in calls)
        else:
            assert after == before
    assert restore(output, store=lake.store_dir).data == original


def test_context_editing_clears_a_text_mode_calls_results_and_keeps_the_replies_that_hold_them(
        tmp_path):
    from pipeline.stages.apply import apply_policy
    from pipeline.stages.plan import plan_many
    from pipeline.stages.restore import restore

    archive = tmp_path / "archive"
    archive.mkdir()
    original = (REAL / "mini_swe_agent" / f"{V1}.traj.json").read_bytes()
    (archive / f"{V1}.traj.json").write_bytes(original)
    lake, _ = ingest_paths(tmp_path, archive)
    spec = "context_editing(trigger=1000, keep=1, clear_tool_inputs=true)"
    [planned] = plan_many(lake, policies=[spec], workers=1)
    assert planned.evictions > 0
    assert scalar(lake, "SELECT count(*) FROM evictions WHERE action = 'clear_input'") == 0
    summary = apply_policy(lake, policy=spec, out=tmp_path / "out")
    assert summary.problems == []
    output = Path(summary.out) / f"{V1}.traj.json"
    before, after = json.loads(original)["messages"], json.loads(output.read_bytes())["messages"]
    changed = [i for i, (b, a) in enumerate(zip(before, after)) if a != b]
    assert len(before) == len(after) and len(changed) == planned.evictions
    assert all(before[i]["role"] == "user" and after[i] == dict(before[i], content=after[i]["content"])
               for i in changed)
    assert [m for m in after if m["role"] == "assistant"] == \
        [m for m in before if m["role"] == "assistant"]
    assert restore(output, store=lake.store_dir).data == original
