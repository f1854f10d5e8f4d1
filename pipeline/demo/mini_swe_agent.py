"""mini-SWE-agent trajectories: ``mini-swe-agent/<instance>/<instance>.traj.json``, v1 (text
actions in bash blocks) and v1.1 (tool calls); ``instance_cost`` is the sum of its calls' costs.
"""

from __future__ import annotations

import orjson

from pipeline.demo.content import prose, text_pools
from pipeline.demo.context import Draws
from pipeline.demo.usage import Meter, prefix_cached


def trajectory(rng: Draws, target: int, *, tools: bool, clock: int) -> tuple[str, bytes]:
    pools = text_pools()
    repo = rng.choice(("pvlib__pvlib-python", "pylint-dev__pylint", "sphinx-doc__sphinx"))
    instance = f"{repo}-{rng.randrange(1000, 9000)}"
    model = "deepseek/deepseek-chat" if tools else "anthropic/claude-sonnet-4-5-20250929"
    msgs: list[dict] = [{"role": "system", "content": "You are a helpful assistant that can interact with a computer shell to solve programming tasks."},
                        {"role": "user", "content": f"<pr_description>\nConsider the following PR description:\n{prose(rng, 900)}\n</pr_description>\n\n<instructions>\n{prose(rng, 1500)}\n</instructions>"}]
    # the overhead: the bash tool's schema (tool calling) or the chat template (text mode)
    meter = Meter(f"usage:mini:{instance}:{tools}", model, (500, 900) if tools else (20, 60))
    for msg in msgs:
        meter.add(msg["content"])
    # USD per prompt / completion token (DeepSeek's and Claude Sonnet's list prices)
    price_in, price_out = (2.7e-7, 1.1e-6) if tools else (3e-6, 1.5e-5)
    spent = 0.0
    previous = None
    size = 3000
    calls = 0
    while size < target or calls < 3:
        cmd = rng.choice(("grep -rn \"def \" src | head -50", "cat pvlib/tools.py", "python -m pytest -x -q", "sed -n '1,200p' setup.py"))
        out = pools[rng.choice(("py", "pytest", "grep"))].text(rng, rng.payload_size(max(2000, min(50_000, target // 6)), big=False))
        thought = "THOUGHT: " + prose(rng, rng.randrange(100, 600))
        clock += rng.randrange(2000, 20000)
        calls += 1
        prompt = meter.prompt()
        if tools:
            call_id = f"call_00_{rng.b62(24)}"
            content = thought if rng.random() < 0.7 else ""
            arguments = orjson.dumps({"command": cmd}).decode()
            meter.write(content)
            meter.call(arguments)
        else:
            content = f"{thought}\n\n```bash\n{cmd}\n```"
            meter.write(content)
        completion = meter.output()
        usage = {"completion_tokens": completion, "prompt_tokens": prompt, "total_tokens": prompt + completion,
                 "prompt_tokens_details": {"cached_tokens": prefix_cached(prompt, previous, 64)}}
        previous = prompt
        cost = prompt * price_in + completion * price_out
        spent += cost
        if tools:
            tool_calls = [{"index": 0, "function": {"arguments": arguments, "name": "bash"},
                           "id": call_id, "type": "function"}]
            msgs.append({"content": content, "role": "assistant", "tool_calls": tool_calls, "function_call": None,
                         "provider_specific_fields": None,
                         "extra": {"actions": [{"command": cmd, "tool_call_id": call_id}],
                                   "response": {"id": rng.uuid4(), "created": clock // 1000, "model": "deepseek-chat",
                                                "object": "chat.completion", "usage": usage,
                                                "choices": [{"finish_reason": "tool_calls", "index": 0,
                                                             "message": {"content": content, "role": "assistant", "tool_calls": tool_calls}}]},
                                   "cost": round(cost, 8), "timestamp": clock / 1000}})
            code = 1 if rng.random() < 0.1 else 0
            observation = f"<returncode>{code}</returncode>\n<output>\n{out}\n</output>"
            msgs.append({"content": observation,
                         "extra": {"raw_output": out, "returncode": code, "timestamp": clock / 1000 + 0.5, "exception_info": ""},
                         "tool_call_id": call_id, "role": "tool"})
        else:
            msgs.append({"role": "assistant", "content": content,
                         "extra": {"response": {"id": "gen-" + rng.b62(20), "model": model, "object": "chat.completion",
                                                "created": clock // 1000, "usage": usage,
                                                "choices": [{"finish_reason": "stop", "index": 0,
                                                             "message": {"role": "assistant", "content": content}}]}}})
            observation = f"<returncode>0</returncode>\n<output>\n{out}\n</output>"
            msgs.append({"role": "user", "content": observation})
        meter.add(observation, code=True)
        size += len(out) * (2 if tools else 1) + len(thought) * 2 + 800
    submission = "diff --git a/x.py b/x.py\n" + pools["diff"].text(rng, 600)
    if tools:
        msgs.append({"role": "exit", "content": submission, "extra": {"exit_status": "Submitted", "submission": submission}})
    else:
        msgs.append({"role": "user", "content": submission})
    stats = {"instance_cost": round(spent, 6), "api_calls": calls}
    info = {"model_stats": stats, "config": {"agent": {"step_limit": 250, "cost_limit": 3.0},
                                             "model": {"model_name": model}},
            "mini_version": "2.2.7" if tools else "1.15.0", "exit_status": "Submitted", "submission": submission}
    doc = {"info": info, "messages": msgs, "trajectory_format": "mini-swe-agent-1.1" if tools else "mini-swe-agent-1",
           "instance_id": instance}
    return f"mini-swe-agent/{instance}/{instance}.traj.json", orjson.dumps(doc, option=orjson.OPT_INDENT_2)
