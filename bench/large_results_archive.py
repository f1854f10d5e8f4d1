"""A deterministic Claude-Code-only archive whose sessions carry many large tool results.

``write_archive(root, size_bytes=S, seed=N)`` writes the ``~/.claude`` layout::

    <root>/projects/<encoded-cwd>/<sessionId>.jsonl
    <root>/projects/<encoded-cwd>/agent-<8hex>.jsonl                 sub-agent, 2.0 layout
    <root>/projects/<encoded-cwd>/<sessionId>/subagents/agent-<8hex>.jsonl   newer layout

The shapes follow the real Claude Code samples (``../shared/data/real/claude_code``): one line
per assistant content block sharing ``message.id``/``requestId`` with usage repeated and
``output_tokens`` final on the last line; user lines with one ``tool_result`` block and the
tool's ``toolUseResult`` beside it (Read ``{type: text, file: {...}}``, Read of an image
``{type: image, file: {base64, ...}}``, Bash ``{stdout, stderr, interrupted, isImage}``, Grep
``{mode: content, ...}``, an MCP tool's list of blocks, a Task's ``{content, totalTokens, ...}``,
``"Error: ..."`` strings on errors).

What makes it different from ``pipeline.demo``: most bytes are tool results of 50 KB to 5 MB
(Read, Bash, Grep; log-skewed sizes, median ~150 KB), a project's files are read again in
other sessions and sub-agents (the same payload bytes), some results are content lists
(text blocks, base64 image blocks), some are errors (``is_error`` with a large output), and
the text mixes code, logs and CJK. Every line ends with a newline: ingest should quarantine
and hold back nothing.

Same ``(seed, size_bytes)`` -> byte-identical files, names and mtimes. ``add_session(root,
seed=N, index=K)`` writes one more session (the "appended session" of a nightly run).

Usage: ``python bench/large_results_archive.py OUT [--size 300MB] [--seed 7] [--add-session K]``.
"""

from __future__ import annotations

import argparse
import base64
import os
import random
import sys
import uuid as uuidlib
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path

import orjson

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

START = datetime(2026, 10, 5, 8, 0, tzinfo=timezone.utc)
MODELS = ("claude-sonnet-4-5-20250929", "claude-opus-4-1-20250805", "claude-sonnet-4-20250514")
VERSION = "2.0.28"
ARROW = "\u2192"
KB = 1000

_CODE = [
    "def {n}(self, {a}, {b}=None):", "    return {a}.{n}({b}) if {b} else {a}",
    "    for {a} in self.{b}:", "        if not {a}.{n}():", "            raise ValueError('{n} failed')",
    "class {N}({N2}):", "    \"\"\"{N} keeps the {a} of every {b}.\"\"\"", "import {a}.{b} as {n}",
    "    {a} = {{k: v for k, v in {b}.items() if v}}", "const {n} = async ({a}, {b}) => {{",
    "  await {a}.{n}({b});", "}};", "export function {n}({a}: {N}): {N2} {{",
    "    logger.debug('%s -> %s', {a}, {b})", "# TODO: {n} should not copy {a}",
]
_LOG = [
    "2026-10-05T08:{m:02d}:{s:02d}.{ms:03d}Z INFO  {n}: handled {k} {a} in {ms} ms",
    "2026-10-05T08:{m:02d}:{s:02d}.{ms:03d}Z WARN  {n}: retry {k}/5 for {b}",
    "2026-10-05T08:{m:02d}:{s:02d}.{ms:03d}Z DEBUG {N}.{n} state={a} queue={k}",
    "tests/test_{a}.py::test_{n}_{b} PASSED                                   [{k:3d}%]",
    "tests/test_{a}.py::test_{n}_{b} FAILED                                   [{k:3d}%]",
    "  File \"/srv/app/{a}/{b}.py\", line {k}, in {n}",
]
_CJK = [
    "この関数は{a}を読み込み、{b}の結果を返します。", "配置文件中的{a}字段已经被弃用，请使用{b}。",
    "# 注意: {n} は {k} 件ごとにキャッシュを更新する", "错误：无法连接到 {a} 服务（第 {k} 次重试）",
    "사용자 {a} 의 설정을 {b} 로 변경했습니다.", "ログ出力：{n} 完了（{k} ミリ秒）🚀",
]
_WORDS = ("cache", "token", "session", "payload", "ledger", "store", "index", "worker", "batch",
          "record", "policy", "plan", "apply", "reader", "schema", "lake", "queue", "config",
          "parser", "router", "client", "buffer", "stream", "handler")
_PROMPTS = ("Read the {a} module and tell me why {b} is slow.", "Run the tests and fix what fails in {a}.",
            "grep for every use of {a}.{b} and list them", "{a} の {b} を直して、テストも追加して。",
            "看一下 {a} 的日志，为什么 {b} 一直在重试？", "Show me the screenshot of the {a} page after the {b} change.")


def _corpus(rng: random.Random, n_lines: int, kind: str) -> list[str]:
    out = []
    for _ in range(n_lines):
        a, b, n = rng.choice(_WORDS), rng.choice(_WORDS), rng.choice(_WORDS) + "_" + rng.choice(_WORDS)
        fields = dict(a=a, b=b, n=n, N=a.capitalize() + b.capitalize(), N2=b.capitalize(),
                      k=rng.randrange(1, 100), m=rng.randrange(60), s=rng.randrange(60),
                      ms=rng.randrange(1000))
        if kind == "log":
            out.append(rng.choice(_LOG).format(**fields))
        elif rng.random() < 0.12:
            out.append(rng.choice(_CJK).format(**fields))
        else:
            out.append(rng.choice(_CODE).format(**fields))
    return out


@dataclass
class Pools:
    code: list[str]
    log: list[str]
    noise: bytes          # incompressible bytes for image payloads

    @classmethod
    def make(cls, seed: int) -> "Pools":
        rng = random.Random(f"large-results pools {seed}")
        return cls(_corpus(rng, 60_000, "code"), _corpus(rng, 60_000, "log"), rng.randbytes(4_000_000))

    def lines(self, pool: list[str], start: int, nbytes: int) -> list[str]:
        out, size, i = [], 0, start
        while size < nbytes:
            line = pool[i % len(pool)]
            out.append(line)
            size += len(line.encode()) + 1
            i += 1
        return out


def _size(rng: random.Random, lo: int = 50 * KB, hi: int = 5_000 * KB) -> int:
    """Log-skewed between lo and hi: median ~150 KB, a few near 5 MB."""
    return int(lo * (hi / lo) ** (rng.random() ** 2.2))


@dataclass
class SharedFile:
    path: str
    start: int
    nbytes: int


@dataclass
class Project:
    cwd: str
    files: list[SharedFile]

    @property
    def encoded(self) -> str:
        return self.cwd.replace("/", "-").replace(".", "-")


def _projects(seed: int) -> list[Project]:
    rng = random.Random(f"large-results projects {seed}")
    out = []
    for name in ("ledger-service", "web-console", "データ解析", "infra", "mobile-app", "ml-pipeline"):
        cwd = f"/home/dev/src/{name}"
        files = [SharedFile(f"{cwd}/src/{rng.choice(_WORDS)}_{i}.{rng.choice(('py', 'ts', 'json', 'md'))}",
                            rng.randrange(60_000), _size(rng, 50 * KB, 3_000 * KB)) for i in range(14)]
        out.append(Project(cwd, files))
    return out


def _uuid(rng: random.Random) -> str:
    return str(uuidlib.UUID(int=rng.getrandbits(128), version=4))


def _ts(ms: int) -> str:
    t = START + timedelta(milliseconds=ms)
    return t.strftime("%Y-%m-%dT%H:%M:%S.") + f"{t.microsecond // 1000:03d}Z"


@dataclass
class Log:
    """The lines of one transcript file and its clock."""

    rng: random.Random
    session_id: str
    cwd: str
    clock: int
    agent_id: str | None = None
    parent: str | None = None
    lines: list[bytes] = field(default_factory=list)
    context: int = 12_000          # tokens of the conversation so far (usage grows with it)

    def _base(self, rtype: str) -> dict:
        uid = _uuid(self.rng)
        rec = {"parentUuid": self.parent, "isSidechain": self.agent_id is not None,
               "userType": "external", "cwd": self.cwd, "sessionId": self.session_id,
               "version": VERSION, "gitBranch": "main"}
        if self.agent_id:
            rec["agentId"] = self.agent_id
        rec["type"] = rtype
        self.parent = uid
        rec["uuid"] = uid
        self.clock += self.rng.randrange(300, 9000)
        rec["timestamp"] = _ts(self.clock)
        return rec

    def write(self, rec: dict) -> None:
        self.lines.append(orjson.dumps(rec) + b"\n")

    def user_text(self, text: str) -> None:
        rec = self._base("user")
        uid, ts = rec.pop("uuid"), rec.pop("timestamp")
        rec.update(message={"role": "user", "content": text}, uuid=uid, timestamp=ts)
        self.write(rec)
        self.context += len(text) // 3

    def assistant(self, model: str, blocks: list[dict]) -> None:
        mid = "msg_01" + "".join(self.rng.choices("ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz0123456789", k=22))
        rid = "req_011C" + "".join(self.rng.choices("ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz0123456789", k=20))
        fresh = self.rng.randrange(2, 400)
        out_final = sum(len(orjson.dumps(b)) for b in blocks) // 4 + 5
        for i, block in enumerate(blocks):
            rec = self._base("assistant")
            uid, ts, rtype = rec.pop("uuid"), rec.pop("timestamp"), rec.pop("type")
            last = i == len(blocks) - 1
            usage = {"input_tokens": fresh, "cache_creation_input_tokens": fresh * 3,
                     "cache_read_input_tokens": self.context,
                     "cache_creation": {"ephemeral_5m_input_tokens": fresh * 3, "ephemeral_1h_input_tokens": 0},
                     "output_tokens": out_final if last else self.rng.randrange(1, 30),
                     "service_tier": "standard"}
            rec.update(message={"model": model, "id": mid, "type": "message", "role": "assistant",
                                "content": [block], "stop_reason": "tool_use" if last and block["type"] == "tool_use" else None,
                                "stop_sequence": None, "usage": usage},
                       requestId=rid, type=rtype, uuid=uid, timestamp=ts)
            self.write(rec)
        self.context += out_final + fresh * 4

    def tool_result(self, call_id: str, content, result, is_error: bool) -> None:
        rec = self._base("user")
        uid, ts = rec.pop("uuid"), rec.pop("timestamp")
        block = {"tool_use_id": call_id, "type": "tool_result", "content": content}
        if is_error or self.rng.random() < 0.5:
            block["is_error"] = is_error
        rec.update(message={"role": "user", "content": [block]}, uuid=uid, timestamp=ts,
                   toolUseResult=result)
        self.write(rec)
        size = len(content) if isinstance(content, str) else sum(len(b.get("text", "")) for b in content)
        self.context += size // 4


class Session:
    """One session: its turns, each an assistant tool call and its (often large) result."""

    def __init__(self, root: Path, project: Project, pools: Pools, seed: int, index: int):
        self.rng = random.Random(f"large-results session {seed} {index}")
        self.root, self.project, self.pools, self.index = root, project, pools, index
        self.session_id = _uuid(self.rng)
        self.model = self.rng.choice(MODELS)
        clock = self.index * 3_100_000 + self.rng.randrange(600_000)
        self.log = Log(self.rng, self.session_id, project.cwd, clock)
        self.files: list[tuple[Path, int]] = []

    def _call_id(self) -> str:
        return "toolu_01" + "".join(self.rng.choices("ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz0123456789", k=22))

    # -- the tools ------------------------------------------------------------------
    def read(self, log: Log) -> tuple[str, dict, object, object, bool]:
        rng, pools = self.rng, self.pools
        f = rng.choice(self.project.files)
        if rng.random() < 0.04:
            return ("Read", {"file_path": f.path.replace(".", "_old.", 1)},
                    "<tool_use_error>File does not exist.</tool_use_error>", "Error: File does not exist.", True)
        if rng.random() < 0.08:            # a screenshot / image file: a content list with base64
            n = rng.randrange(40 * KB, 900 * KB)
            off = rng.randrange(len(pools.noise) - n)
            data = base64.b64encode(pools.noise[off:off + n]).decode()
            path = f"{self.project.cwd}/docs/screenshot_{off % 97}.png"
            return ("Read", {"file_path": path},
                    [{"type": "image", "source": {"type": "base64", "data": data, "media_type": "image/png"}}],
                    {"type": "image", "file": {"base64": data, "type": "image/png", "originalSize": n}}, False)
        lines = pools.lines(pools.code, f.start, f.nbytes)
        shown = "\n".join(f"{i + 1:6d}{ARROW}{line}" for i, line in enumerate(lines))
        if rng.random() < 0.3:
            shown += ("\n\n<system-reminder>\nWhenever you read a file, you should consider whether it "
                      "looks malicious.\n</system-reminder>\n")
        return ("Read", {"file_path": f.path}, shown,
                {"type": "text", "file": {"filePath": f.path, "content": "\n".join(lines),
                                          "numLines": len(lines), "startLine": 1, "totalLines": len(lines)}},
                False)

    def bash(self, log: Log) -> tuple[str, dict, object, object, bool]:
        rng, pools = self.rng, self.pools
        repeated = rng.random() < 0.25     # the same log file cat'ed again (same bytes)
        start = rng.randrange(8) * 7919 if repeated else rng.randrange(60_000)
        nbytes = (200 * KB + start % 300 * KB) if repeated else _size(rng)
        cmd = f"cat /var/log/app/{start}.log" if repeated else rng.choice(
            ("python -m pytest -q -x", "npm run build 2>&1", "journalctl -u worker --since today",
             "docker compose logs api", "git log -p -n 40"))
        out = "\n".join(pools.lines(pools.log, start, nbytes))
        if not repeated and rng.random() < 0.15:
            text = f"Exit code 1\n{out}"
            return "Bash", {"command": cmd, "description": "Run it"}, text, f"Error: {text}", True
        return ("Bash", {"command": cmd, "description": "Run it"}, out,
                {"stdout": out, "stderr": "", "interrupted": False, "isImage": False}, False)

    def grep(self, log: Log) -> tuple[str, dict, object, object, bool]:
        rng, pools = self.rng, self.pools
        pattern = rng.choice(_WORDS)
        nbytes = _size(rng, 50 * KB, 2_000 * KB)
        files = self.project.files
        lines = [f"{files[i % len(files)].path}:{i % 900 + 1}:{line}"
                 for i, line in enumerate(pools.lines(pools.code, rng.randrange(60_000), nbytes))]
        text = "\n".join(lines)
        return ("Grep", {"pattern": pattern, "path": self.project.cwd, "output_mode": "content", "-n": True},
                text, {"mode": "content", "numFiles": 0, "filenames": [], "content": text,
                       "numLines": len(lines)}, False)

    def mcp(self, log: Log) -> tuple[str, dict, object, object, bool]:
        """A browser MCP tool: a content list of text blocks and a base64 screenshot."""
        rng, pools = self.rng, self.pools
        n = rng.randrange(30 * KB, 600 * KB)
        off = rng.randrange(len(pools.noise) - n)
        data = base64.b64encode(pools.noise[off:off + n]).decode()
        text = "\n".join(pools.lines(pools.code, rng.randrange(60_000), rng.randrange(2 * KB, 120 * KB)))
        blocks = [{"type": "text", "text": "### Page snapshot\n" + text},
                  {"type": "image", "source": {"type": "base64", "data": data, "media_type": "image/jpeg"}},
                  {"type": "text", "text": "スクリーンショットを撮りました。"}]
        return "mcp__playwright__browser_take_screenshot", {"fullPage": True}, blocks, blocks, False

    def small(self, log: Log) -> tuple[str, dict, object, object, bool]:
        f = self.rng.choice(self.project.files)
        return ("Edit", {"file_path": f.path, "old_string": "return a", "new_string": "return b"},
                f"The file {f.path} has been updated.",
                {"filePath": f.path, "oldString": "return a", "newString": "return b",
                 "structuredPatch": [{"oldStart": 3, "oldLines": 1, "newStart": 3, "newLines": 1,
                                      "lines": ["-return a", "+return b"]}]}, False)

    def _turn(self, log: Log, big: bool = True) -> None:
        rng = self.rng
        tool = rng.choices((self.read, self.bash, self.grep, self.mcp, self.small),
                           (40, 30, 15, 5, 10) if big else (0, 0, 0, 0, 1))[0]
        name, args, content, result, is_error = tool(log)
        call_id = self._call_id()
        blocks = []
        if rng.random() < 0.4:
            blocks.append({"type": "thinking", "thinking": f"I should look at {args} first.",
                           "signature": base64.b64encode(rng.randbytes(96)).decode()})
        blocks.append({"type": "text", "text": rng.choice(("Let me check.", "確認します。", "I'll run it."))})
        blocks.append({"type": "tool_use", "id": call_id, "name": name, "input": args})
        log.assistant(self.model, blocks)
        log.tool_result(call_id, content, result, is_error)

    def _prompt(self) -> str:
        return self.rng.choice(_PROMPTS).format(a=self.rng.choice(_WORDS), b=self.rng.choice(_WORDS))

    def write(self, budget: int) -> int:
        """Write the session (and maybe a sub-agent) until about ``budget`` bytes; return them."""
        rng, log = self.rng, self.log
        log.write({"type": "file-history-snapshot", "messageId": _uuid(rng),
                   "snapshot": {"messageId": _uuid(rng), "trackedFileBackups": {},
                                "timestamp": _ts(log.clock)}, "isSnapshotUpdate": False})
        sub_budget = budget // 3 if rng.random() < 0.35 else 0
        done = 0
        while done < budget - sub_budget:
            log.user_text(self._prompt())
            for _ in range(rng.randrange(1, 6)):
                before = len(log.lines)
                self._turn(log, big=rng.random() < 0.7)
                done += sum(len(x) for x in log.lines[before:])
            log.assistant(self.model, [{"type": "text", "text": rng.choice(
                ("Done: the tests pass now.", "完了しました。", "The retry loop was the cause."))}])
            if sub_budget and not self.files and done > (budget - sub_budget) // 2:
                done += self._subagent(sub_budget)
        self._save(self.root / "projects" / self.project.encoded / f"{self.session_id}.jsonl", log)
        return done

    def _subagent(self, budget: int) -> int:
        rng = self.rng
        agent = "".join(rng.choices("0123456789abcdef", k=8))
        call_id = self._call_id()
        prompt = f"Search the {rng.choice(_WORDS)} code for slow paths and report them."
        self.log.assistant(self.model, [{"type": "tool_use", "id": call_id, "name": "Task",
                                         "input": {"description": "Find slow paths", "prompt": prompt,
                                                   "subagent_type": "general-purpose"}}])
        sub = Log(rng, self.session_id, self.project.cwd, self.log.clock, agent_id=agent)
        sub.user_text(prompt)
        done = 0
        while done < budget:
            before = len(sub.lines)
            self._turn(sub)
            done += sum(len(x) for x in sub.lines[before:])
        report = [{"type": "text", "text": "Found 3 slow paths: " + ", ".join(rng.sample(_WORDS, 3))}]
        sub.assistant(self.model, report)
        took = sub.clock - self.log.clock
        self.log.clock = sub.clock + 500
        self.log.tool_result(call_id, report, {"content": report, "totalDurationMs": took,
                                              "totalTokens": sub.context, "totalToolUseCount": 7,
                                              "usage": {"input_tokens": 40, "output_tokens": 900}}, False)
        folder = self.root / "projects" / self.project.encoded
        path = folder / self.session_id / "subagents" / f"agent-{agent}.jsonl" if rng.random() < 0.5 \
            else folder / f"agent-{agent}.jsonl"
        self._save(path, sub)
        return done

    def _save(self, path: Path, log: Log) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        data = b"".join(log.lines)
        path.write_bytes(data)
        mtime = (START + timedelta(milliseconds=log.clock)).timestamp()
        os.utime(path, (mtime, mtime))
        self.files.append((path, len(data)))


def _budget(seed: int, index: int) -> int:
    rng = random.Random(f"large-results budget {seed} {index}")
    return int(150 * KB * (30 ** rng.random()))        # 150 KB .. 4.5 MB (plus the last turn)


def add_session(root: Path, *, seed: int, index: int, pools: Pools | None = None) -> list[tuple[Path, int]]:
    """Write session number ``index`` of the archive (its files and their sizes)."""
    projects = _projects(seed)
    session = Session(root, projects[index % len(projects)], pools or Pools.make(seed), seed, index)
    session.write(_budget(seed, index))
    return session.files


def write_archive(root: Path, *, size_bytes: int, seed: int) -> dict:
    """Write sessions 0, 1, ... until ``size_bytes``; return files, sessions and bytes."""
    root = Path(root)
    if (root / "projects").exists() and any((root / "projects").iterdir()):
        raise SystemExit(f"{root}/projects is not empty")
    pools = Pools.make(seed)
    total = index = files = 0
    while total < size_bytes:
        written = add_session(root, seed=seed, index=index, pools=pools)
        total += sum(n for _, n in written)
        files += len(written)
        index += 1
    return {"sessions": index, "files": files, "bytes": total}


def main() -> int:
    from pipeline.demo.archive import parse_size

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--size", default="300MB")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--add-session", type=int, default=None, metavar="INDEX",
                        help="write only session INDEX (e.g. the archive's count, to append one)")
    args = parser.parse_args()
    if args.add_session is not None:
        for path, n in add_session(args.out, seed=args.seed, index=args.add_session):
            print(f"{path} {n}")
        return 0
    print(orjson.dumps(write_archive(args.out, size_bytes=parse_size(args.size), seed=args.seed)).decode())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
