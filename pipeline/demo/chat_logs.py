"""Message logs, one conversation a line: ``openai/chat-*.jsonl`` (OpenAI chat completions
style, tool calls and tool messages) and ``anthropic/messages-*.jsonl`` (Anthropic Messages
style, tool_use / tool_result blocks). They record no usage.
"""

from __future__ import annotations

import orjson

from pipeline.demo.content import NOUNS, file_lines, prose, sentence, text_pools, user_prompt
from pipeline.demo.context import KIB, DemoContext, Draws, JsonLines, stamp
from pipeline.demo.projects import Project
from pipeline.demo.usage import UNPRICED_MODEL


def conversation(rng: Draws, project: Project, style: str, cap: int) -> dict:
    pools = text_pools()
    msgs: list[dict] = []
    for turn in range(rng.randrange(1, 4)):
        msgs.append({"role": "user", "content": user_prompt(rng, project, first=turn == 0)})
        for _ in range(rng.randrange(0, 5)):
            f = rng.choice(project.small)
            name = rng.choice(("read_file", "run_shell", "search_code"))
            args = {"path": project.abs(f.rel)} if name == "read_file" else \
                {"command": rng.choice(("pytest -q", "ls src", "git diff"))} if name == "run_shell" else \
                {"query": rng.choice(NOUNS)}
            out = "\n".join(file_lines(f.pool, f.start, min(f.nbytes, cap))) if name == "read_file" else \
                pools[rng.choice(("pytest", "grep", "log"))].text(rng, rng.payload_size(cap))
            failed = rng.random() < 0.05
            if style == "openai":
                call_id = rng.call_id()
                msgs.append({"role": "assistant", "content": None, "tool_calls": [
                    {"id": call_id, "type": "function",
                     "function": {"name": name, "arguments": orjson.dumps(args).decode()}}]})
                msgs.append({"role": "tool", "tool_call_id": call_id,
                             "content": ("Error: " + sentence(rng)) if failed else out})
            else:
                call_id = rng.tool_use_id()
                msgs.append({"role": "assistant", "content": [
                    {"type": "text", "text": sentence(rng)},
                    {"type": "tool_use", "id": call_id, "name": name, "input": args}]})
                result = {"type": "tool_result", "tool_use_id": call_id, "content": out}
                if failed:
                    result = {"type": "tool_result", "tool_use_id": call_id,
                              "content": "Error: " + sentence(rng), "is_error": True}
                msgs.append({"role": "user", "content": [result]})
        answer = prose(rng, rng.randrange(100, 1500))
        msgs.append({"role": "assistant", "content": answer if style == "openai" or rng.random() < 0.5
                     else [{"type": "text", "text": answer}]})
    if style == "openai":
        msgs.insert(0, {"role": "system", "content": "You are a coding assistant working in " + project.cwd})
        model = rng.choice(("gpt-5.1-codex-max", "gpt-5.1-codex-max", UNPRICED_MODEL))
        return {"id": "conv_" + rng.b62(20), "model": model, "messages": msgs}
    model = rng.choice(("claude-haiku-4-5-20251001", "claude-sonnet-4-5-20250929"))
    return {"id": "msgconv_" + rng.b62(20), "model": model,
            "system": "You are a coding assistant working in " + project.cwd, "messages": msgs}


def write_logs(ctx: DemoContext, fmt: str, style: str, budget: int) -> None:
    """Two files of ``style`` ("openai" or "anthropic") conversations, a week apart, of about
    ``budget`` bytes together."""
    rng = ctx.draws(style)
    for part in range(2):
        log = JsonLines()
        while log.size < budget // 2 or not log.lines:
            log.add(conversation(rng, rng.choice(ctx.projects), style, max(KIB, min(60_000, budget // 30))))
        day = stamp(ctx.t0 + part * 7 * 86_400_000, "%Y-%m-%d")
        name = "chat" if style == "openai" else "messages"
        ctx.write(fmt, f"{style}/{name}-{day}.jsonl", log.data(),
                  ctx.t0 + (part * 7 + 6) * 86_400_000, sessions=len(log.lines))
