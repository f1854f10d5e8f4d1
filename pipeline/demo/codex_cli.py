"""Codex CLI rollouts: ``codex/sessions/YYYY/MM/DD/rollout-<YYYY-MM-DDThh-mm-ss>-<uuid>.jsonl``
(session_meta, response items, event messages, turn contexts and token counts with the
hidden reasoning counted in the output).
"""

from __future__ import annotations

import re

import orjson

from pipeline.demo.content import NOUNS, VERBS, file_lines, prose, sentence, text_pools, user_prompt
from pipeline.demo.context import KIB, DemoContext, JsonLines, SessionPlan, iso, stamp
from pipeline.demo.usage import Meter, prefix_cached


def session(plan: SessionPlan) -> tuple[str, bytes, int]:
    """One rollout: its relative path, its bytes and its end (ms)."""
    rng, project, start, planned, cap = plan.rng, plan.project, plan.start, plan.planned, plan.cap
    session_id = rng.uuid7(start)
    clock = start
    rollout = JsonLines()
    model = "gpt-5.1-codex-max"
    total = {"input_tokens": 0, "cached_input_tokens": 0, "output_tokens": 0,
             "reasoning_output_tokens": 0, "total_tokens": 0}
    last: dict | None = None
    rate = {"primary": {"used_percent": 0.0, "window_minutes": 300, "resets_at": start // 1000 + 18000},
            "secondary": {"used_percent": 0.0, "window_minutes": 10080, "resets_at": start // 1000 + 600000},
            "credits": {"has_credits": False, "unlimited": False, "balance": None}, "plan_type": None}

    def put(kind: str, payload: dict) -> None:
        rollout.add({"timestamp": iso(clock), "type": kind, "payload": payload})

    def count(emitted_null: bool = False) -> None:
        info = None if emitted_null else {"total_token_usage": dict(total), "last_token_usage": dict(last or total),
                                          "model_context_window": 258400}
        put("event_msg", {"type": "token_count", "info": info, "rate_limits": rate})

    meter = Meter(f"usage:codex:{session_id}", model, (7_000, 10_000))
    previous: list[tuple[int, int]] = []    # (prompt, clock) of the last call

    def spend(prompt: int, reasoning: int) -> None:
        """Record the call just written: ``prompt`` as it stood before it, its visible output
        from the meter and its hidden ``reasoning`` (part of Codex's output count)."""
        nonlocal last
        out = meter.output() + reasoning
        warm = previous and clock - previous[0][1] <= 10 * 60_000
        cached = prefix_cached(prompt, previous[0][0] if warm else None, 128) if prompt >= 1024 else 0
        previous[:] = [(prompt, clock)]
        last = {"input_tokens": prompt, "cached_input_tokens": cached, "output_tokens": out,
                "reasoning_output_tokens": reasoning, "total_tokens": prompt + out}
        for key in total:
            total[key] += last[key]

    def tool_call(item: dict, written: str, prompt: int, reasoning: int) -> None:
        """The tool call ``item`` the model wrote (``written``: its input), then its usage."""
        put("response_item", item)
        meter.call(written)
        spend(prompt, reasoning)
        count()

    def tool_output(kind: str, call_id: str, output: str) -> None:
        """What the tool returned: part of the next call's prompt."""
        put("response_item", {"type": kind, "call_id": call_id, "output": output})
        meter.add(output, code=True)

    context = {"cwd": project.cwd, "approval_policy": "on-request",
               "sandbox_policy": {"type": "workspace-write", "network_access": False,
                                  "exclude_tmpdir_env_var": False, "exclude_slash_tmp": False},
               "model": model, "effort": rng.choice(("medium", "high", "low")), "summary": "auto"}
    put("session_meta", {"id": session_id, "timestamp": iso(clock), "cwd": project.cwd,
                         "originator": "codex_cli_rs", "cli_version": "0.66.0", "instructions": None,
                         "source": "cli", "model_provider": "openai",
                         "git": {"commit_hash": rng.hex(40), "branch": project.branch or "main",
                                 "repository_url": f"git@github.com:acme/{project.name}.git"}})
    environment = (f"<environment_context>\n  <cwd>{project.cwd}</cwd>\n  <approval_policy>on-request</approval_policy>\n"
                   "  <sandbox_mode>workspace-write</sandbox_mode>\n  <network_access>restricted</network_access>\n"
                   "  <shell>zsh</shell>\n</environment_context>")
    put("response_item", {"type": "message", "role": "user", "content": [{"type": "input_text", "text": environment}]})
    meter.add(environment)
    turn = 0
    while turn == 0 or rollout.size < planned:
        clock += rng.randrange(2000, 10 * 60_000) if turn else 1800
        if turn and rng.random() < 0.07:
            clock += rng.randrange(61, 240) * 60_000
        text = user_prompt(rng, project, first=turn == 0)
        put("response_item", {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]})
        meter.new_turn()
        meter.add(text)
        put("event_msg", {"type": "user_message", "message": text, "images": []})
        put("turn_context", context)
        if rng.random() < 0.6:
            put("response_item", {"type": "ghost_snapshot", "ghost_commit": {"id": rng.hex(40), "parent": rng.hex(40),
                                                                             "preexisting_untracked_files": [], "preexisting_untracked_dirs": []}})
        count(emitted_null=turn == 0)
        for step in range(max(1, int(rng.lognormvariate(1.5, 0.7)))):
            clock += rng.randrange(1500, 12000)
            summary = f"**{rng.choice(VERBS).capitalize()} {rng.choice(NOUNS)}**\n\n{sentence(rng)}"
            prompt = meter.prompt()
            reasoning = meter.hidden(meter.think(summary, shown=False))
            put("event_msg", {"type": "agent_reasoning", "text": summary})
            put("response_item", {"type": "reasoning", "summary": [{"type": "summary_text", "text": summary}],
                                  "content": None, "encrypted_content": "gAAAAAB" + rng.b64(rng.randrange(300, 1500))})
            call_id = rng.call_id()
            pick = rng.random()
            if pick < 0.2:
                f = rng.choice(project.small)
                patch = f"*** Begin Patch\n*** Update File: {f.rel}\n@@\n-{project.lines(f)[0]}\n+{project.lines(f)[0]}  # {sentence(rng, 4)}\n*** End Patch"
                tool_call({"type": "custom_tool_call", "status": "completed", "call_id": call_id,
                           "name": "apply_patch", "input": patch}, patch, prompt, reasoning)
                ok = rng.random() > 0.08
                output = {"output": f"Success. Updated the following files:\nM {f.rel}\n" if ok else
                          f"apply_patch verification failed: Failed to find expected lines in {f.rel}",
                          "metadata": {"exit_code": 0 if ok else 1, "duration_seconds": round(rng.uniform(0, 2), 1)}}
                clock += rng.randrange(100, 3000)
                tool_output("custom_tool_call_output", call_id, orjson.dumps(output).decode())
            elif pick < 0.28:
                plan = [{"step": sentence(rng, 5), "status": rng.choice(("completed", "in_progress", "pending"))}
                        for _ in range(rng.randrange(2, 6))]
                arguments = orjson.dumps({"plan": plan}).decode()
                tool_call({"type": "function_call", "name": "update_plan", "arguments": arguments,
                           "call_id": call_id}, arguments, prompt, reasoning)
                tool_output("function_call_output", call_id, "Plan updated")
            else:
                if rng.random() < 0.3:
                    f = rng.choice(project.small + [project.by_rel["AGENTS.md"]])
                    cmd = rng.choice((f"sed -n '1,400p' {f.rel}", f"cat {f.rel}"))
                    out = "\n".join(file_lines(f.pool, f.start, min(f.nbytes, cap)))
                else:
                    cmd = rng.choice(("rg -n TODO", "pytest -q", "npm test", "git status --short", "ls -la",
                                      "pip install -r requirements.txt", "npm install", "git commit -am \"wip\"",
                                      "python -m app.main"))
                    out = text_pools()[rng.choice(("log", "pytest", "grep", "npm", "pip"))].text(rng, rng.payload_size(cap))
                code = 1 if rng.random() < 0.1 else 0
                arguments = orjson.dumps({"command": cmd, "workdir": project.cwd}).decode()
                tool_call({"type": "function_call", "name": "shell_command", "arguments": arguments,
                           "call_id": call_id}, arguments, prompt, reasoning)
                clock += rng.randrange(100, 30000)
                tool_output("function_call_output", call_id,
                            f"Exit code: {code}\nWall time: {rng.uniform(0.1, 30):.1f} seconds\nOutput:\n{out}\n")
            put("turn_context", context)
            count()
            if rollout.size >= planned:
                break
        clock += rng.randrange(1000, 9000)
        answer = prose(rng, rng.randrange(100, 1500), cjk=bool(re.search(r"[\u3040-\u9fff]", text)))
        put("event_msg", {"type": "agent_message", "message": answer})
        put("response_item", {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": answer}]})
        prompt = meter.prompt()
        meter.write(answer)
        # the answer's reasoning, when there is any, leaves no summary
        spend(prompt, meter.hidden(meter.rng.randrange(0, 60)) if meter.rng.random() < 0.3 else 0)
        count()
        turn += 1
    rel = f"codex/sessions/{stamp(start, '%Y/%m/%d')}/rollout-{stamp(start, '%Y-%m-%dT%H-%M-%S')}-{session_id}.jsonl"
    return rel, rollout.data(), clock


def write_sessions(ctx: DemoContext, budget: int) -> None:
    """Codex CLI rollouts until ``budget`` bytes."""
    rng = ctx.draws("codex")
    written = 0
    index = 0
    while written < budget:
        remaining = budget - written
        planned = min(remaining, rng.planned(80_000, 1.0, 10_000, 8_000_000))
        if remaining - planned < 20_000:
            planned = remaining
        project = rng.choice(ctx.projects)
        plan = SessionPlan(ctx.draws("codex", index), project, ctx.session_start(rng), planned,
                           max(4 * KIB, min(600_000, remaining // 8)))
        rel, data, mtime = session(plan)
        ctx.write("codex_cli", rel, data, mtime, sessions=1)
        written += len(data)
        index += 1
