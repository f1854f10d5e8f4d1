"""The tool calls of a Claude Code session (Read, Bash, Grep, Glob, Edit, Write, WebFetch,
TodoWrite): each draws its input and result from the project and the text pools and returns
a :class:`Call`, which the session then writes as a tool_use / tool_result pair.
"""

from __future__ import annotations

import dataclasses
import zlib
from typing import Any, Callable

from pipeline.demo.content import NOUNS, VERBS, WEB, file_lines, numbered, passing_pool, sentence, text_pools
from pipeline.demo.context import Draws
from pipeline.demo.projects import File, Project, is_big

_TODO_OK = ("Todos have been modified successfully. Ensure that you continue to use the todo list "
            "to track your progress. Please proceed with the current tasks if applicable")


@dataclasses.dataclass
class Call:
    """One tool call: its name and input, the tool_result ``content`` and ``toolUseResult``
    (``result``), whether it failed, how long it took (ms), and a 1.0.x sub-agent's lines
    written inline after it (``inline``)."""

    name: str
    input: dict
    content: Any
    result: Any
    is_error: bool = False
    duration: int = 1000
    inline: list[bytes] | None = None


def _tool_error(name: str, args: dict, message: str, duration: int, *, shown: str = "") -> Call:
    """A call the tool refused: ``message`` in a ``<tool_use_error>`` (with ``shown`` after it)."""
    return Call(name, args, f"<tool_use_error>{message}{shown}</tool_use_error>", f"Error: {message}",
                True, duration)


def _shell(args: dict, out: str, duration: int, *, exit_code: int = 0) -> Call:
    """A Bash call that printed ``out``; a non-zero ``exit_code`` makes it an error result."""
    if exit_code:
        text = f"Exit code {exit_code}\n{out}"
        return Call("Bash", args, text, f"Error: {text}", True, duration)
    return Call("Bash", args, out, {"stdout": out, "stderr": "", "interrupted": False,
                                    "isImage": False}, False, duration)


def todo_item(verb: str, what: str) -> dict:
    """A pending todo: "<Verb> <what>", shown as "<Verb>ing <what>" while in progress."""
    gerund = (verb[:-1] if verb.endswith("e") else verb) + "ing"
    return {"content": f"{verb.capitalize()} {what}", "status": "pending",
            "activeForm": f"{gerund.capitalize()} {what}"}


class ClaudeTools:
    """The tool calls of one session, and what they leave behind: the paths read so far
    (``read_paths``), the files it can (re)read (``known``, extras included) and whether
    something was edited since the last commit (``edited``). ``cap()`` is the largest payload
    allowed now (it shrinks as the session nears its planned size)."""

    def __init__(self, rng: Draws, project: Project, cap: Callable[[], int]):
        self.rng = rng
        self.project = project
        self._cap = cap
        self.read_paths: list[str] = []
        self.known = dict(project.by_rel)
        self.edited = False

    @property
    def cap(self) -> int:
        return self._cap()

    def _file(self) -> File:
        rng = self.rng
        if rng.random() < 0.0015:
            return rng.choice(self.project.big)
        return rng.choice(self.project.small)

    def read(self, f: File | None = None, *, repeat: bool = False, ok: bool = False) -> Call:
        """A Read; ``ok``: never the occasional wrong path (an error)."""
        rng, project = self.rng, self.project
        if f is None and (repeat or self.read_paths and rng.random() < 0.22):
            f = self.known[rng.choice(self.read_paths)]
        f = f or self._file()
        self.known.setdefault(f.rel, f)
        path = f.rel if f.rel.startswith("/") else project.abs(f.rel)
        if not ok and rng.random() < 0.03 and f.rel not in ("CLAUDE.md", ".claude/CLAUDE.md"):
            wrong = path.replace(".", "_old.", 1)
            return _tool_error("Read", {"file_path": wrong}, "File does not exist.", rng.randrange(5, 40))
        return self._shown(f, path, min(f.nbytes, self.cap), 120)

    def read_memory(self, which: str) -> Call:
        project = self.project
        if which == "user":
            path = f"{project.home}/.claude/CLAUDE.md"
            f = File(path, "md", 1200 + zlib.crc32(path.encode()) % 2500)
        elif which == "escape":
            path = f"{project.cwd}/../shared-notes/CLAUDE.md"
            f = File(path, "md", 900)
        else:
            f = project.by_rel[which]
            path = project.abs(f.rel)
        self.known.setdefault(f.rel, f)
        return self._shown(f, path, f.nbytes, 60)

    def _shown(self, f: File, path: str, nbytes: int, slowest: int) -> Call:
        """A Read of the first ``nbytes`` of ``f`` at ``path`` (its whole text, or the lines
        that fit, with ``offset``/``limit``), taking up to ``slowest`` ms; ``f`` counts as read."""
        lines = file_lines(f.pool, f.start, nbytes)
        total = len(lines) if nbytes == f.nbytes else int(len(lines) * f.nbytes / max(nbytes, 1))
        args: dict[str, Any] = {"file_path": path}
        if nbytes < f.nbytes:
            args.update(offset=1, limit=len(lines))
        if f.rel not in self.read_paths:
            self.read_paths.append(f.rel)
        return Call("Read", args, numbered(f.pool, f.start, nbytes),
                    {"type": "text", "file": {"filePath": path, "content": "\n".join(lines),
                                              "numLines": len(lines), "startLine": 1,
                                              "totalLines": total}},
                    False, self.rng.randrange(5, slowest))

    def bash(self, kind: str | None = None) -> Call:
        rng, project = self.rng, self.project
        pools = text_pools()
        py = project.lang == "py"
        kind = kind or rng.choices(
            ("test", "status", "diff", "log", "install", "ls", "logs", "build", "run", "fail"),
            (18, 8, 8, 4, 6, 8, 5, 8, 6, 4))[0]
        size = rng.payload_size(self.cap)
        err = False
        code = 0
        if kind == "test":
            cmd = rng.choice(("pytest -q", "pytest tests/ -x", "python -m pytest -k " + rng.choice(NOUNS))) \
                if py else rng.choice(("npm test", "npx jest --runInBand", "npm run test -- --watch=false"))
            out = pools["pytest"].text(rng, size)
            err = rng.random() < 0.25
            code = 1
            desc = "Run the test suite"
        elif kind == "status":
            cmd, desc = "git status", "Show working tree status"
            out = "On branch " + (project.branch or "main") + "\nChanges not staged for commit:\n" + \
                "\n".join(f"\tmodified:   {f.rel}" for f in rng.sample(project.files, 4))
        elif kind == "diff":
            cmd, desc = rng.choice(("git diff", "git diff --stat HEAD~1", "git diff main...")), "Show changes"
            out = pools["diff"].text(rng, size)
        elif kind == "log":
            cmd, desc = "git log --oneline -20", "Recent commits"
            out = "\n".join(f"{rng.hex(7)} {sentence(rng, 6)}" for _ in range(20))
        elif kind == "install":
            if rng.random() < (0.7 if py else 0.3):
                cmd = rng.choice(("pip install -r requirements.txt", "pip install httpx==0.27.2",
                                  "pip install -e '.[dev]'", "uv pip install pydantic"))
                out = pools["pip"].text(rng, size) + "\nSuccessfully installed " + \
                    " ".join(f"{rng.choice(NOUNS)}-{rng.randrange(1, 5)}.{rng.randrange(20)}" for _ in range(5))
            else:
                cmd = rng.choice(("npm install", "npm install zod", "npm ci", "npm install -D vitest"))
                out = pools["npm"].text(rng, size) + "\n\nfound 0 vulnerabilities"
            desc = "Install dependencies"
        elif kind == "ls":
            cmd, desc = f"ls -la {rng.choice(('src', 'tests', '.', 'docs', 'config'))}", "List files"
            out = pools["ls"].text(rng, min(size, 6000))
        elif kind == "logs":
            cmd, desc = f"tail -n {rng.choice((200, 500, 2000))} logs/server.log", "Read recent server logs"
            out = pools["log"].text(rng, size)
        elif kind == "build":
            cmd = rng.choice(("python -m build", "make lint", "ruff check .", "mypy src")) if py else \
                rng.choice(("npm run build", "npx tsc --noEmit", "npm run lint"))
            desc = "Build the project"
            out = pools["log"].text(rng, size)
            err = rng.random() < 0.15
            code = 2
        elif kind == "run":
            cmd = rng.choice(("python -m app.main --dry-run", "python scripts/migrate.py", "docker compose ps")) if py \
                else rng.choice(("node scripts/seed.js", "npm run dev -- --port 3001", "docker compose ps"))
            desc = "Run it"
            out = pools["log"].text(rng, size)
        else:
            cmd, desc = rng.choice(("python hoge.py", "cd myapp && python app.py", "./scripts/deploy.sh staging")), "Run"
            out = rng.choice(("error: target shim binary not found", "bash: ./scripts/deploy.sh: Permission denied",
                              "Traceback (most recent call last):\n  File \"app.py\", line 3\nModuleNotFoundError: No module named 'app'"))
            err, code = True, 127 if "shim" in out else 1
        duration = rng.randrange(200, 60000) if err else rng.randrange(50, 40000)
        return _shell({"command": cmd, "description": desc}, out, duration, exit_code=code if err else 0)

    def commit(self, msg: str | None = None) -> Call:
        rng = self.rng
        msg = msg or rng.choice((f"Fix {rng.choice(NOUNS)} {rng.choice(VERBS)} on empty input",
                          f"Add {rng.choice(NOUNS)} pagination", f"Refactor {rng.choice(NOUNS)} client",
                          f"✨ {rng.choice(VERBS)} {rng.choice(NOUNS)}s", f"修复{rng.choice(NOUNS)}的超时问题",
                          f"docs: update README for {rng.choice(NOUNS)}"))
        cmd = f"git add -A && git commit -m \"{msg}\""
        n = rng.randrange(1, 9)
        out = (f"[{self.project.branch or 'main'} {rng.hex(7)}] {msg}\n {n} files changed, "
               f"{rng.randrange(1, 400)} insertions(+), {rng.randrange(0, 200)} deletions(-)")
        return _shell({"command": cmd, "description": "Commit the changes"}, out, rng.randrange(200, 3000))

    def test_run(self, *, failing: File | None = None) -> Call:
        """A test run whose summary says all passed, or (``failing``: that test file) one
        failure with exit code 1, as pytest / jest print them."""
        rng, py = self.rng, self.project.lang == "py"
        out = passing_pool().text(rng, rng.payload_size(self.cap, big=False))
        passed = rng.randrange(40, 400)
        secs = f"{rng.uniform(0.8, 40):.2f}"
        if failing is not None:
            name = f"test_{rng.choice(VERBS)}_{rng.choice(NOUNS)}"
            assertion = f"AssertionError: assert {rng.randrange(1000)} == {rng.randrange(1000)}"
            if py:
                out += (f"\n{failing.rel}::{name} FAILED\n\nFAILED {failing.rel}::{name} - "
                        f"{assertion}\n1 failed, {passed} passed in {secs}s")
            else:
                out += (f"\n  ● {name}\n\n    {assertion}\n\nTests:       1 failed, {passed} passed, "
                        f"{passed + 1} total\nTime:        {secs} s")
        elif py:
            out += f"\n{passed} passed in {secs}s"
        else:
            out += f"\nTests:       {passed} passed, {passed} total\nTime:        {secs} s"
        args = {"command": "pytest -q" if py else "npm test", "description": "Run the test suite"}
        return _shell(args, out, rng.randrange(800, 40000), exit_code=0 if failing is None else 1)

    def grep(self) -> Call:
        rng = self.rng
        pattern = rng.choice((rng.choice(VERBS) + "_" + rng.choice(NOUNS), "TODO|FIXME",
                              f"class {rng.choice(NOUNS).capitalize()}", "import .*" + rng.choice(NOUNS)))
        if rng.random() < 0.5:
            out = text_pools()["grep"].text(rng, rng.payload_size(self.cap))
            n = out.count("\n") + 1
            return Call("Grep", {"pattern": pattern, "output_mode": "content", "-n": True}, out,
                        {"mode": "content", "numFiles": 0, "filenames": [], "content": out,
                          "numLines": n}, False, rng.randrange(10, 900))
        files = [self.project.abs(f.rel) for f in rng.sample(self.project.files, rng.randrange(0, 8))]
        out = f"Found {len(files)} files\n" + "\n".join(files) if files else "No files found"
        return Call("Grep", {"pattern": pattern, "path": self.project.cwd,
                             "glob": rng.choice(("*.py", "*.ts", "*.md", "**/*"))}, out,
                    {"mode": "files_with_matches", "filenames": files, "numFiles": len(files)},
                    False, rng.randrange(10, 900))

    def glob(self) -> Call:
        rng = self.rng
        pattern = rng.choice(("**/*.py", "**/*.ts", "**/*.tsx", "**/CLAUDE.md", "src/**/*", "**/package.json", "tests/**/test_*.py"))
        files = [self.project.abs(f.rel) for f in rng.sample(self.project.files, rng.randrange(0, 25))]
        out = "\n".join(files) if files else "No files found"
        return Call("Glob", {"pattern": pattern}, out,
                    {"filenames": files, "durationMs": rng.randrange(2, 200), "numFiles": len(files),
                      "truncated": False}, False, rng.randrange(2, 200))

    def edit(self, *, multi: bool = False, unread: bool = False,
             target: File | None = None) -> Call:
        """An Edit of a file read before; ``target``: that file, and never an error."""
        rng, project = self.rng, self.project
        candidates = [project.by_rel[r] for r in self.read_paths if r in project.by_rel
                      and not is_big(project.by_rel[r])]
        if target is None and (unread or not candidates):
            f = rng.choice(project.small)
            path = project.abs(f.rel)
            args = {"file_path": path, "old_string": "pass", "new_string": "return None"}
            return _tool_error("MultiEdit" if multi else "Edit", args,
                               "File has not been read yet. Read it first before writing to it.", 3)
        f = target or rng.choice(candidates)
        path = project.abs(f.rel)
        lines = project.lines(f)
        at = rng.randrange(len(lines))
        old = lines[at] or lines[0]
        new = old.replace(rng.choice(NOUNS), rng.choice(NOUNS)) + \
            ("  # " + sentence(rng, 5) if f.pool == "py" else "")
        if target is None and rng.random() < 0.04:
            return _tool_error("Edit", {"file_path": path, "old_string": old + "x", "new_string": new},
                               "String to replace not found in file.", 5, shown=f"\nString: {old}x")
        self.edited = True
        snippet = "\n".join(f"{i + 1:>6}→{line}" for i, line in enumerate(lines[max(0, at - 4):at + 5], max(0, at - 4)))
        patch = [{"oldStart": at + 1, "oldLines": 1, "newStart": at + 1, "newLines": 1,
                  "lines": [f"-{old}", f"+{new}"]}]
        if multi:
            args = {"file_path": path, "edits": [{"old_string": old, "new_string": new}]}
            return Call("MultiEdit", args, f"Applied 1 edit to {path}:\n1. Replaced \"{old[:50]}...\" with \"{new[:50]}...\"",
                        {"filePath": path, "edits": args["edits"], "originalFileContents": project.text(f),
                          "structuredPatch": patch, "userModified": False}, False, 20)
        return Call("Edit", {"file_path": path, "old_string": old, "new_string": new},
                    f"The file {path} has been updated. Here's the result of running `cat -n` on a snippet of the edited file:\n{snippet}",
                    {"filePath": path, "oldString": old, "newString": new, "originalFile": project.text(f),
                      "structuredPatch": patch, "userModified": False, "replaceAll": False},
                    False, rng.randrange(5, 60))

    def write(self) -> Call:
        rng, project = self.rng, self.project
        ext = "py" if project.lang == "py" else "ts"
        rel = f"{'src' if rng.random() < 0.7 else 'tests'}/{rng.choice(NOUNS)}_{rng.choice(VERBS)}.{ext}"
        path = project.abs(rel)
        content = text_pools()[ext].text(rng, rng.payload_size(min(self.cap, 60_000), big=False))
        self.edited = True
        return Call("Write", {"file_path": path, "content": content},
                    f"File created successfully at: {path}",
                    {"type": "create", "filePath": path, "content": content, "structuredPatch": []},
                    False, rng.randrange(5, 60))

    def webfetch(self) -> Call:
        rng = self.rng
        url = rng.choice(WEB)
        if rng.random() < 0.08:
            return _tool_error("WebFetch", {"url": url, "prompt": "Summarise the relevant section"},
                               "Request failed with status code 404", rng.randrange(200, 3000))
        text = text_pools()["web"].text(rng, rng.payload_size(self.cap))
        return Call("WebFetch", {"url": url, "prompt": f"How do I {rng.choice(VERBS)} a {rng.choice(NOUNS)}?"},
                    text, {"bytes": len(text) * 3, "code": 200, "codeText": "OK", "result": text,
                            "durationMs": rng.randrange(300, 9000), "url": url},
                    False, rng.randrange(300, 9000))

    def todo(self, items: list[dict], *, completed: range | tuple[int, ...] = (),
             started: int | None = None, new: bool = False) -> Call:
        """A TodoWrite of the list ``items`` (updated in place): the ``completed`` items done,
        the ``started`` one in progress; ``new``: the list is written for the first time."""
        old = [] if new else [dict(x) for x in items]
        for i in completed:
            items[i]["status"] = "completed"
        if started is not None:
            items[started]["status"] = "in_progress"
        todos = [dict(x) for x in items]
        return Call("TodoWrite", {"todos": todos}, _TODO_OK, {"oldTodos": old, "newTodos": todos}, False, 5)
