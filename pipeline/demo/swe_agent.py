"""SWE-agent trajectories: ``swe-agent/trajectories/<run>/<instance>.traj`` in the 1.x shape
(tool calls, message types) and the 0.x shape (a demonstration, text actions); the run's
``model_stats`` are the sums over its calls.
"""

from __future__ import annotations

from typing import Any

import orjson

from pipeline.demo.content import NOUNS, prose, text_pools
from pipeline.demo.context import Draws
from pipeline.demo.usage import Meter


def trajectory(rng: Draws, target: int, *, v1: bool) -> tuple[str, bytes]:
    pools = text_pools()
    repo = rng.choice(("astropy__astropy", "django__django", "sympy__sympy", "requests__requests"))
    instance = f"{repo}-{rng.randrange(1000, 20000)}"
    root = "/" + repo
    agent = "main" if v1 else "primary"
    history: list[dict] = [{"role": "system", "content": "SETTING: You are an autonomous programmer, and you're working directly in the command line with a special interface.\n" + prose(rng, 600), "agent": agent}]
    issue = f"We're currently solving the following issue within our repository. Here's the issue text:\nISSUE:\n{prose(rng, 600)}\r\n\r\n```python\r\n{text_pools()['py'].text(rng, 300)}\r\n```\n\nINSTRUCTIONS:\n{prose(rng, 800)}"
    if v1:
        history[0]["message_type"] = "system_prompt"
        history.append({"role": "user", "content": issue, "agent": agent, "message_type": "observation"})
    else:
        history.append({"role": "user", "content": "Here is a demonstration of how to correctly accomplish this task.\n" + prose(rng, 1000),
                        "agent": agent, "is_demo": True})
        history.append({"role": "user", "content": issue, "agent": agent})
    trajectory: list[dict] = []
    # the run's totals are the sums over its calls (tools' schemas with function calling)
    meter = Meter(f"usage:swe:{instance}:{v1}", "gpt-4o" if v1 else "gpt-4", (900, 1400) if v1 else (20, 60))
    for msg in history:
        meter.add(msg["content"])
    sent = received = 0
    size = sum(len(m["content"]) for m in history)
    open_file = "n/a"
    while size < target or len(trajectory) < 3:
        f = f"{root}/{rng.choice(NOUNS)}/{rng.choice(NOUNS)}.py"
        action, fn, args = rng.choice((
            (f"open \"{f}\"", "open", {"path": f}),
            (f"search_dir \"{rng.choice(NOUNS)}\"", "search_dir", {"search_term": rng.choice(NOUNS)}),
            ("python reproduce.py", "bash", {"command": "python reproduce.py"}),
            (f"find_file {rng.choice(NOUNS)}.py", "find_file", {"file_name": rng.choice(NOUNS) + ".py"})))
        if fn == "open":
            open_file = f
        observation = pools["py"].text(rng, rng.payload_size(max(2000, min(60_000, target // 6)), big=False))
        observation = observation.replace("\n", "\r\n")
        thought = prose(rng, rng.randrange(100, 500))
        step = {"action": action, "observation": observation, "response": thought if v1 else f"{thought}\n\n```\n{action}\n```",
                "thought": thought}
        state = {"open_file": open_file, "working_dir": root}
        if v1:
            step["execution_time"] = round(rng.uniform(0.05, 4.0), 6)
            step["state"] = state
        else:
            step["state"] = orjson.dumps(state).decode()
        trajectory.append(step)
        assistant = {"role": "assistant", "content": step["response"], "thought": thought, "action": action, "agent": agent}
        suffix = f"\n(Open file: {open_file})\n(Current directory: {root})\nbash-$"
        sent += meter.prompt()
        meter.write(step["response"])
        if v1:
            meter.call(orjson.dumps(args).decode())
        received += meter.output()
        meter.add(observation + suffix, code=True)
        if v1:
            call_id = rng.call_id()
            assistant.update(tool_calls=[{"function": {"arguments": orjson.dumps(args).decode(), "name": fn},
                                          "id": call_id, "type": "function"}], message_type="action")
            history.append(assistant)
            history.append({"role": "tool", "content": observation + suffix, "agent": agent,
                            "tool_call_ids": [call_id], "message_type": "observation"})
        else:
            history.append(assistant)
            history.append({"role": "user", "content": observation + suffix, "agent": agent})
        size += len(observation) * 2 + len(thought) * 3
    submission = "\r\ndiff --git a/x.py b/x.py\r\n" + pools["diff"].text(rng, 800).replace("\n", "\r\n")
    trajectory.append({"action": "submit", "observation": submission, "response": "submit", "thought": "submit",
                       **({"execution_time": 0.1, "state": {"open_file": open_file, "working_dir": root}} if v1 else
                          {"state": orjson.dumps({"open_file": open_file, "working_dir": root}).decode()})})
    sent += meter.prompt()                # the call that submitted
    meter.write("submit")
    received += meter.output()
    stats = {"instance_cost": round(sent * 2.5e-6 + received * 1e-5, 6), "tokens_sent": sent,
             "tokens_received": received, "api_calls": len(trajectory)}
    if not v1:
        stats["total_cost"] = round(stats["instance_cost"] * 3, 6)
    info = {"submission": submission, "exit_status": "submitted", "edited_files30": "[File: x.py]\n" + text_pools()["py"].text(rng, 500),
            "model_stats": stats}
    doc: dict[str, Any] = {"environment": "main" if v1 else "swe_main", "trajectory": trajectory,
                           "history": history, "info": info}
    if v1:
        doc["replay_config"] = orjson.dumps({"agent": {"model": {"name": "gpt-4o", "temperature": 0.0}},
                                             "env": {"repo": {"github_url": f"https://github.com/{repo.replace('__', '/')}"}}}).decode()
    run = "gpt4o__default__t-0.00" if v1 else "gpt4__swe-bench-dev__default__t-0.00"
    return f"swe-agent/trajectories/{run}/{instance}.traj", orjson.dumps(doc, option=orjson.OPT_INDENT_2)
