"""Gemini CLI sessions: ``gemini/tmp/<project hash>/chats/session-<YYYY-MM-DDTHH-MM>-<id8>.jsonl``
(the current JSONL log: records, ``$set`` updates, a chat compression, a rewind) and the
legacy whole-JSON ``session-*.json``. Each model message holds its tool calls with their
results, and its ``tokens``.
"""

from __future__ import annotations

import re
from typing import Any

import orjson

from pipeline.demo.content import FOLLOWUPS, NOUNS, VERBS, WEB, file_lines, prose, sentence, text_pools, user_prompt
from pipeline.demo.context import KIB, DemoContext, Draws, JsonLines, SessionPlan, iso, stamp
from pipeline.demo.projects import Project
from pipeline.demo.usage import Meter, prefix_cached, text_of


_GEMINI_DESCRIPTIONS = {
    "read_file": ("ReadFile", "Reads and returns the content of a specified file."),
    "read_many_files": ("ReadManyFiles", "Reads content from multiple files."),
    "run_shell_command": ("Shell", "This tool executes a given shell command as `bash -c <command>`."),
    "glob": ("FindFiles", "Efficiently finds files matching specific glob patterns."),
    "grep_search": ("SearchText", "Searches for a regular expression pattern within the content of files."),
    "replace": ("Edit", "Replaces text within a file."),
    "write_file": ("WriteFile", "Writes content to a specified file in the local filesystem."),
    "web_fetch": ("WebFetch", "Processes content from URL(s) embedded in a prompt."),
    "write_todos": ("WriteTodos", "Lists out the subtasks that are required to complete the user request."),
}


def _tool_call(rng: Draws, project: Project, clock: int, cap: int,
               memory: bool = False) -> tuple[dict, int]:
    """One tool call with its result (Gemini keeps both in the model's message); its end time."""
    pools = text_pools()
    name = "read_file" if memory else \
        rng.choices(list(_GEMINI_DESCRIPTIONS), (30, 4, 24, 6, 8, 10, 5, 3, 3))[0]
    status = "success"
    display = None
    if name == "read_file":
        if memory or rng.random() < 0.2:
            f = project.by_rel["GEMINI.md"]
            path = project.abs(f.rel) if memory or rng.random() < 0.7 else f"{project.home}/.gemini/GEMINI.md"
        else:
            f = rng.choice(project.small)
            path = project.abs(f.rel)
        args: dict[str, Any] = {"absolute_path": path}
        nbytes = min(f.nbytes, cap)
        response: dict[str, Any] = {"output": "\n".join(file_lines(f.pool, f.start, nbytes))}
    elif name == "read_many_files":
        fs = rng.sample(project.small, 3)
        args = {"paths": [x.rel for x in fs]}
        response = {"output": "\n".join(f"--- {project.abs(x.rel)} ---\n\n" + "\n".join(file_lines(x.pool, x.start, min(x.nbytes, cap // 3)))
                                        for x in fs)}
    elif name == "run_shell_command":
        cmd = rng.choice(("npm test", "pytest -q", "git status", "ls -la", "npm install", "pip install -r requirements.txt",
                          "git diff", "git add -A && git commit -m \"update\"", "python3 hoge.py"))
        code = 1 if rng.random() < 0.12 else 0
        out = pools[rng.choice(("log", "pytest", "npm", "pip", "diff"))].text(rng, rng.payload_size(cap))
        args = {"command": cmd, "description": sentence(rng, 6)}
        response = {"output": f"Command: {cmd}\nDirectory: (root)\nOutput: {out}\nError: (none)\n"
                              f"Exit Code: {code}\nSignal: 0\nBackground PIDs: (none)\nProcess Group PGID: {rng.randrange(1000, 60000)}"}
        display = out[:2000]
    elif name == "glob":
        args = {"pattern": rng.choice(("**/*.py", "**/*.ts", "src/**"))}
        files = [project.abs(f.rel) for f in rng.sample(project.files, rng.randrange(1, 20))]
        response = {"output": f"Found {len(files)} file(s) matching \"{args['pattern']}\" within {project.cwd}, sorted by modification time (newest first):\n" + "\n".join(files)}
    elif name == "grep_search":
        args = {"pattern": rng.choice(VERBS) + "_" + rng.choice(NOUNS), "path": project.cwd}
        response = {"output": pools["grep"].text(rng, rng.payload_size(cap))}
    elif name == "replace":
        f = rng.choice(project.small)
        old = project.lines(f)[0]
        args = {"file_path": project.abs(f.rel), "old_string": old, "new_string": old + " # updated",
                "instruction": sentence(rng)}
        if rng.random() < 0.1:
            status = "error"
            response = {"error": "Failed to edit, 0 occurrences found for old_string in " + args["file_path"]}
        else:
            response = {"output": f"Successfully modified file: {args['file_path']} (1 replacements)."}
    elif name == "write_file":
        path = project.abs(f"src/{rng.choice(NOUNS)}.{project.lang}")
        args = {"content": pools[project.lang].text(rng, rng.payload_size(min(cap, 30_000), big=False)), "file_path": path}
        response = {"output": f"Successfully created and wrote to new file: {path}."}
    elif name == "web_fetch":
        args = {"prompt": f"Summarise {rng.choice(WEB)}"}
        response = {"output": pools["web"].text(rng, rng.payload_size(cap))}
    else:
        todos = [{"description": sentence(rng, 5), "status": rng.choice(("pending", "in_progress", "completed"))}
                 for _ in range(rng.randrange(2, 6))]
        args = {"todos": todos}
        response = {"output": "Successfully updated the todo list."}
    call_id = f"{name}-{clock}-{rng.hex(14)}"
    display_name, description = _GEMINI_DESCRIPTIONS[name]
    end = clock + rng.randrange(100, 20000)
    call = {"id": call_id, "name": name, "args": args,
            "result": [{"functionResponse": {"id": call_id, "name": name, "response": response}}],
            "status": status, "timestamp": iso(end)}
    if display is not None:
        call["resultDisplay"] = display
    call.update(displayName=display_name, description=description,
                renderOutputAsMarkdown=name not in ("run_shell_command",))
    return call, end


def _thought_text(thought: dict) -> str:
    """A thought as the transcript shows it (its subject, then its description)."""
    return "\n\n".join(t for t in (thought["subject"], thought["description"]) if t)


def session(plan: SessionPlan, *, jsonl: bool, script: bool,
            model: str | None = None) -> tuple[str, bytes, int]:
    """One session: its relative path, its bytes and its end (ms). ``jsonl``: the current JSONL
    log (else the legacy whole-JSON file); ``script``: the scripted first session."""
    rng, project, start, planned, cap = plan.rng, plan.project, plan.start, plan.planned, plan.cap
    model = model or rng.choice(("gemini-2.5-pro", "gemini-2.5-flash", "gemini-2.5-pro"))
    session_id = rng.uuid4()
    clock = start
    log = JsonLines()               # the JSONL log; its size also counts a legacy file's
    messages: list[dict] = []

    def put(obj: dict) -> None:
        if jsonl:
            log.add(obj)
        else:
            log.size += len(orjson.dumps(obj)) + 40

    def upsert(msg: dict) -> None:
        for i, old in enumerate(messages):
            if old["id"] == msg["id"]:
                messages[i] = msg
                break
        else:
            messages.append(msg)
        put(msg)

    def thoughts(at: int) -> list[dict]:
        return [{"subject": f"{rng.choice(VERBS).capitalize()} the {rng.choice(NOUNS)}",
                 "description": prose(rng, rng.randrange(100, 600)), "timestamp": iso(at)}
                for _ in range(rng.randrange(1, 3))]

    meter = Meter(f"usage:gemini:{session_id}", model, (9_000, 13_000))
    previous: list[int] = []           # the last prompt (implicit caching serves its prefix)

    def tokens(msg: dict) -> dict:
        """The usage of the call that wrote ``msg`` (thoughts, content, tool calls); its tool
        results join the context of the next call."""
        prompt = meter.prompt()
        summary = sum(meter.think(_thought_text(t), shown=False) for t in msg["thoughts"])
        meter.write(text_of(msg["content"]) if isinstance(msg["content"], list) else msg["content"])
        calls = msg.get("toolCalls") or []
        for call in calls:
            meter.call(orjson.dumps(call["args"]).decode())
        out = meter.output()
        for call in calls:
            response = call["result"][0]["functionResponse"]["response"]
            meter.add(response.get("output", response.get("error", "")), code=True)
        cached = prefix_cached(prompt, previous[-1] if previous else None, 1024) \
            if meter.rng.random() < 0.75 else 0
        previous[:] = [prompt]
        thoughts = meter.hidden(summary)
        return {"input": prompt, "output": out, "cached": cached, "thoughts": thoughts, "tool": 0,
                "total": prompt + out + thoughts}

    def user_turn(text: str) -> None:
        meter.new_turn()
        meter.add(text)

    head = {"sessionId": session_id, "projectHash": project.gemini_hash, "startTime": iso(clock),
            "lastUpdated": iso(clock), "kind": "main"}
    if jsonl:
        put(head)
    turn = 0
    rewound = False
    while turn == 0 or log.size < planned or script and turn < 4:
        clock += rng.randrange(20_000, 15 * 60_000) if turn else 0
        if turn and rng.random() < 0.06:
            clock += rng.randrange(61, 200) * 60_000
        if jsonl and turn == 2 and (script or rng.random() < 0.1):
            # chat compression: the recorded history is replaced by a summary, then goes on
            messages[:] = [{"id": rng.uuid4(), "timestamp": iso(clock), "type": "user",
                            "content": [{"text": "<state_snapshot>\n" + prose(rng, 1500) + "\n</state_snapshot>"}]},
                           {"id": rng.uuid4(), "timestamp": iso(clock), "type": "gemini",
                            "content": [{"text": "Got it. Thanks for the additional context!"}]}]
            put({"$set": {"messages": messages, "lastUpdated": iso(clock)}})
            meter.reset()
            for msg in messages:
                meter.add(text_of(msg["content"]))
        text = user_prompt(rng, project, first=turn == 0)
        if script and turn == 0:
            text = "GEMINI.md を読んでからテストを直して 🙏"
        user = {"id": rng.uuid4(), "timestamp": iso(clock), "type": "user",
                "content": [{"text": text}] if jsonl else text}
        before_prompt = meter.state()
        upsert(user)
        user_turn(text)
        if jsonl:
            put({"$set": {"lastUpdated": iso(clock)}})
        for step in range(max(1, int(rng.lognormvariate(1.3, 0.7)))):
            clock += rng.randrange(2000, 20000)
            # the scripted session reads GEMINI.md first, and again after its compression
            memory = script and turn in (0, 3) and step == 0 or turn == 0 and step == 0 and rng.random() < 0.3
            made = [_tool_call(rng, project, clock, cap, memory=memory and i == 0)
                    for i in range(rng.choices((1, 2, 3), (75, 18, 7))[0])]
            calls = [c for c, _ in made]
            msg = {"id": rng.uuid4(), "timestamp": iso(clock), "type": "gemini", "content": "",
                   "toolCalls": calls[:1], "thoughts": thoughts(clock), "model": model}
            if jsonl:
                upsert(dict(msg))
                if len(calls) > 1:
                    msg = dict(msg, toolCalls=calls)
                    upsert(dict(msg))
                msg = dict(msg, tokens=tokens(dict(msg, toolCalls=calls)))
                upsert(msg)
            else:
                msg = {"id": msg["id"], "timestamp": msg["timestamp"], "type": "gemini",
                       "content": sentence(rng), "thoughts": msg["thoughts"], "tokens": None,
                       "model": model, "toolCalls": calls}
                msg["tokens"] = tokens(msg)
                upsert(msg)
            clock = max(end for _, end in made)
            if log.size >= planned:
                break
        clock += rng.randrange(1500, 15000)
        reply = {"id": rng.uuid4(), "timestamp": iso(clock), "type": "gemini",
                 "content": prose(rng, rng.randrange(100, 1200), cjk=text != "" and bool(re.search(r"[\u3040-\u9fff]", text))),
                 "thoughts": thoughts(clock), "tokens": None, "model": model}
        usage = tokens(reply)
        if not jsonl:
            reply["tokens"] = usage
        upsert(dict(reply))
        if jsonl:
            put({"$set": {"lastUpdated": iso(clock)}})
            upsert(dict(reply, tokens=usage))
            if not rewound and turn >= 1 and (script or rng.random() < 0.15):
                # the user rewinds: their last prompt and everything after it is dropped
                rewound = True
                put({"$rewindTo": user["id"]})
                messages[:] = messages[:next(i for i, m in enumerate(messages) if m["id"] == user["id"])]
                meter.restore(before_prompt)
                clock += rng.randrange(5000, 60000)
                followup = rng.choice(FOLLOWUPS)
                upsert({"id": rng.uuid4(), "timestamp": iso(clock), "type": "user",
                        "content": [{"text": followup}]})
                user_turn(followup)
                put({"$set": {"lastUpdated": iso(clock)}})
        turn += 1
    started = stamp(start, "%Y-%m-%dT%H-%M")
    folder = f"gemini/tmp/{project.gemini_hash}/chats"
    if jsonl:
        return f"{folder}/session-{started}-{session_id[:8]}.jsonl", log.data(), clock
    head["lastUpdated"] = iso(clock)
    head.pop("kind")
    doc = dict(head, messages=messages)
    return f"{folder}/session-{started}-{session_id[:8]}.json", orjson.dumps(doc, option=orjson.OPT_INDENT_2), clock


def write_sessions(ctx: DemoContext, budget: int) -> None:
    """Gemini CLI sessions until ``budget`` bytes, always one JSONL and one legacy file."""
    rng = ctx.draws("gemini")
    written = 0
    index = 0
    while written < budget or index < 2:
        remaining = max(budget - written, 20_000)
        planned = min(remaining, rng.planned(60_000, 1.0, 10_000, 5_000_000))
        if index == 0:
            planned = min(planned, budget // 2)     # room for a legacy session after it
        elif remaining - planned < 20_000:
            planned = remaining
        jsonl = index % 4 != 1          # a quarter legacy whole-JSON
        project = rng.choice(ctx.projects)
        plan = SessionPlan(ctx.draws("gemini", index), project, ctx.session_start(rng), planned,
                           max(4 * KIB, min(400_000, remaining // 8)))
        rel, data, mtime = session(plan, jsonl=jsonl, script=index == 0,
                                   model=("gemini-2.5-pro", "gemini-2.5-flash")[index] if index < 2 else None)
        ctx.write("gemini_cli", rel, data, mtime, sessions=1)
        written += len(data)
        index += 1
