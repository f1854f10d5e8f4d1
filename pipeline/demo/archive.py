"""A deterministic, realistic demo archive of agent transcripts in every format ctxlake reads.

``write_demo_archive(out, size_bytes=S, seed=N)`` writes, under ``out``, the layout of the real
locations::

    claude/projects/<encoded-cwd>/<sessionId>.jsonl               Claude Code sessions (most bytes)
    claude/projects/<encoded-cwd>/agent-<8hex>.jsonl              sub-agents, 2.0 layout
    claude/projects/<encoded-cwd>/<sessionId>/subagents/agent-<8hex>.jsonl   newer layout
    gemini/tmp/<project hash>/chats/session-*.json                Gemini CLI, legacy whole-JSON
    gemini/tmp/<project hash>/chats/session-<YYYY-MM-DDTHH-MM>-<id8>.jsonl    current JSONL log
    codex/sessions/YYYY/MM/DD/rollout-<YYYY-MM-DDThh-mm-ss>-<uuid>.jsonl      Codex CLI rollouts
    openai/chat-*.jsonl, anthropic/messages-*.jsonl               one conversation per line
    swe-agent/trajectories/<run>/<instance>.traj                   SWE-agent (1.x and 0.x)
    mini-swe-agent/<instance>/<instance>.traj.json                mini-SWE-agent (v1 text, v1.1 tools)

Determinism contract: the same ``(seed, size_bytes, start)`` gives byte-identical files with the
same names and the same mtimes, on any machine and in any run (checked on CPython 3.11+).
Nothing reads the wall clock, the environment, the hash seed or directory order: every random
choice comes from ``random.Random`` seeded with a string built from the seed (string seeds go
through SHA-512, which is stable across versions), and every timestamp is derived from ``start``
(default 2026-11-01 UTC; sessions spread over 20 days). A different ``size_bytes`` gives a
different archive (budgets shape every session); the text pools are fixed.

What the archive contains, on purpose (the first Claude sessions are scripted so that even a
tiny archive shows all of it): split assistant lines sharing ``message.id``/``requestId`` with
usage repeated and ``output_tokens`` final on the last line; tool_use/tool_result pairs with
``toolUseResult``; ``isMeta`` records and ``<command-name>`` slash commands;
``file-history-snapshot`` and ``compact_boundary``/``microcompact_boundary`` records; CJK and
emoji text; tool payloads from a few bytes to several MB (heavy-tailed: payloads over 16 KiB
are common, a few are multi-MB when the size allows); reads of managed-memory files
(``CLAUDE.md``, ``.claude/CLAUDE.md``, ``~/.claude/CLAUDE.md``, ``GEMINI.md``); idle gaps over an
hour; tool errors (``is_error``, ``<tool_use_error>``, non-zero exit codes); todo lists whose
items get completed; ``git commit``, ``pip install`` and ``npm install`` commands; repeated
reads of the same path; sub-agents in all three Claude layouts; several models plus one model
no price table knows (``acme-internal-coder-v3``) so reports show "unpriced".

One planted strategic showcase: the third Claude session (``_ClaudeSession.feature_work``) is
a long feature session that ends cleanly (tests green, todos completed, then a commit with no
recent errors), so ``ctxlake suggest`` has a compaction point to show in every archive from
~2 MB up, for any seed: turn 64, 57.7 weighted calls, at its commit. The first two sessions
get at most a third of the remaining Claude budget each, to leave it room.

Recorded usage is derived from the content, as an API would count it (:class:`_Meter`): the
prompt of a call is a per-session overhead (system prompt and tool definitions, constant within
the session) plus the tokens of everything before the call (the current turn's thinking
included, earlier turns' dropped), split into cached and fresh parts the way each format records
them (Claude's cache read/creation with a 5-minute cache, Codex's ``cached_input_tokens`` in
128-token blocks, Gemini's ``cached`` in 1024-token blocks, DeepSeek's in 64); the output is the
tokens of what the call wrote plus a framing per tool call and a stop token, with hidden
reasoning recorded apart where the format does (Codex ``reasoning_output_tokens``, Gemini
``thoughts``). Tokens are docs/policies.md's heuristic times a per-model factor per content class
(prose, code, CJK), each piece of text with its own small deviation. SWE-agent's run totals are
the sums over its calls; mini-SWE-agent's ``instance_cost`` the sum of its calls' costs. The
OpenAI/Anthropic message logs record no usage (as before).

Bad data: none, except ONE deliberate case: the Claude session that ends last (a session
"still being written") ends with an incomplete last line (no newline). Ingest holds that line
back (``held_back = 1``); it is never quarantined. ``DemoSummary.held_back_files`` names it.
Not included: Claude's ``subagents/*.meta.json`` side files (their shape is not documented).

Sizes: ``size_bytes`` is a target; generation stops once it is reached (from 2 MB up the total
lands within ~2% above it; below that, the minimum of every format can overshoot). About 75-80%
of the bytes are Claude Code, like real archives. 500 MB take ~10-15 s on 2 cores.

Changing what is written for a given (seed, size) must bump ``GENERATOR`` (recorded in the
marker file), so that cached archives built by an older generator are rebuilt.
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import math
import os
import re
import stat
import time
import uuid
import zlib
from datetime import date, datetime, timezone
from functools import lru_cache
from pathlib import Path
from random import Random
from typing import Any, Callable

import orjson

from pipeline.core.errors import UsageError
from pipeline.core.lake import refuse_symlinks
from pipeline.text.tokens import text_counts
from pipeline.text.written_output import WrittenRow, claude_tool_calls

DEFAULT_START = date(2026, 11, 1)
SPAN_DAYS = 20
MARKER = ".ctxlake-demo"          # lists the generated files; no transcript suffix, so ingest skips it
# Bump whenever the bytes written for a given (seed, size) change, so caches built from an
# older generator (bench/results/archive-*) are rebuilt.
GENERATOR = "ctxlake demo 4"
UNPRICED_MODEL = "acme-internal-coder-v3"
MIN_SIZE = 256 * 1024
KIB = 1024

_INDENT = orjson.OPT_INDENT_2

__all__ = ["DemoSummary", "write_demo_archive", "parse_size", "UNPRICED_MODEL", "MARKER", "GENERATOR"]


@dataclasses.dataclass
class DemoSummary:
    """What :func:`write_demo_archive` wrote (all figures deterministic)."""

    out: str
    seed: int
    size_target: int
    size_bytes: int = 0
    files: int = 0
    sessions: int = 0                 # top-level sessions / conversations / trajectories
    subagent_sessions: int = 0        # Claude sub-agent transcripts in their own files
    held_back_files: list[str] = dataclasses.field(default_factory=list)
    formats: dict[str, dict[str, int]] = dataclasses.field(default_factory=dict)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


# ---------------------------------------------------------------------------------------
# Sizes
# ---------------------------------------------------------------------------------------
_UNITS = {"": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
          "k": 10**3, "m": 10**6, "g": 10**9,
          "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}


def parse_size(text: str | int) -> int:
    """``"200MB"`` -> 200_000_000. KB/MB/GB are decimal, KiB/MiB/GiB binary; case-insensitive."""
    if isinstance(text, int):
        return text
    match = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([a-zA-Z]*)\s*", str(text))
    unit = match.group(2).lower() if match else None
    if not match or unit not in _UNITS:
        raise UsageError(f"cannot read the size '{text}'",
                         hint="write a number with a unit, e.g. 500KB, 200MB, 1GB (or 64MiB)")
    return int(float(match.group(1)) * _UNITS[unit])


def _human(n: int) -> str:
    for unit, scale in (("GB", 10**9), ("MB", 10**6), ("KB", 10**3)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"


# ---------------------------------------------------------------------------------------
# Small deterministic helpers
# ---------------------------------------------------------------------------------------
_B62 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
_HEX = "0123456789abcdef"


def _uuid4(rng: Random) -> str:
    return str(uuid.UUID(int=rng.getrandbits(128), version=4))


def _uuid7(rng: Random, ms: int) -> str:
    value = (ms & ((1 << 48) - 1)) << 80 | rng.getrandbits(80)
    value = (value & ~(0xF << 76)) | (0x7 << 76)
    value = (value & ~(0x3 << 62)) | (0x2 << 62)
    return str(uuid.UUID(int=value))


def _b62(rng: Random, n: int) -> str:
    return "".join(rng.choices(_B62, k=n))


def _hex(rng: Random, n: int) -> str:
    return "".join(rng.choices(_HEX, k=n))


def _b64(rng: Random, nbytes: int) -> str:
    return base64.b64encode(rng.randbytes(nbytes)).decode("ascii")


def _iso(ms: int) -> str:
    sec, rem = divmod(ms, 1000)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(sec)) + f".{rem:03d}Z"


def _stamp(ms: int, fmt: str) -> str:
    return time.strftime(fmt, time.gmtime(ms // 1000))


def _log_uniform(rng: Random, lo: float, hi: float) -> int:
    return int(math.exp(rng.uniform(math.log(lo), math.log(hi))))


def _payload_size(rng: Random, cap: int, *, big: bool = True) -> int:
    """A heavy-tailed payload size: mostly small, ~11% over 16 KiB, rare multi-MB (when ``big``)."""
    u = rng.random()
    if u < 0.55:
        n = int(rng.lognormvariate(6.3, 1.0))                  # ~550 B
    elif u < 0.89:
        n = int(rng.lognormvariate(8.2, 0.6))                  # ~3.6 KB
    elif u < 0.9955 or not big:
        n = _log_uniform(rng, 16_500, 200_000)
    elif u < 0.9995:
        n = _log_uniform(rng, 200_000, 1_000_000)
    else:
        n = _log_uniform(rng, 1_000_000, 6_000_000)
    return max(8, min(n, cap))


# ---------------------------------------------------------------------------------------
# Text pools (built once from a fixed seed; payloads are windows over them)
# ---------------------------------------------------------------------------------------
_NOUNS = ("account adapter alert batch buffer cache client config context cursor dataset "
          "decoder device event export feature filter gateway handler index invoice job "
          "ledger loader manifest metric model monitor node order parser payload payment "
          "pipeline policy profile queue record report request resolver route schema "
          "session shard signal snapshot source stage storage stream task template tenant "
          "token trace upload user vector webhook widget worker").split()
_VERBS = ("apply build check collect compute create decode delete dispatch emit encode "
          "ensure fetch filter flush format handle load merge normalize parse persist "
          "prepare publish refresh register render resolve retry save scan serialize "
          "split sync transform update validate").split()
_ADJ = ("active async cached cold default empty expired failed hidden internal invalid "
        "large legacy local missing nested optional partial pending primary raw remote "
        "stale strict temporary unknown").split()
_EMOJI = ["✅", "🚀", "🐛", "🔥", "📦", "⚠️", "🎉", "👍", "🧪", "📝", "👨‍💻", "🇯🇵", "🙏", "💡",
          "😅", "🤔", "👋🏽"]
_JA = ["このモジュールはセッションの要約を生成します", "テストが失敗しています", "原因を調べて修正してください",
       "設定ファイルのタイムアウトを確認しました", "ログイン画面にバリデーションを追加します",
       "キャッシュの有効期限が切れています", "データベースの接続がタイムアウトしました",
       "この関数は二回呼ばれています", "エラーメッセージを分かりやすくしてください",
       "型定義を更新しました", "ビルドが通るようになりました", "依存関係を整理します",
       "本番環境へのデプロイ前に確認が必要です", "ユーザー一覧のページネーションを実装",
       "差分を確認してからコミットします", "ドキュメントを日本語で書いてください"]
_ZH = ["请检查配置文件中的超时设置", "这个函数被调用了两次", "请帮我重构这段代码",
       "把重复的逻辑提取成函数", "为什么构建会报错", "数据库连接池已满", "单元测试全部通过了",
       "请更新依赖版本并修复兼容性问题", "日志里出现了大量的重试", "缓存命中率明显下降",
       "接口返回的字段缺失", "我们需要支持分页和排序", "请用中文写提交说明"]


def _sentence(r: Random, words: int | None = None) -> str:
    n = words or r.randrange(6, 18)
    parts = []
    for i in range(n):
        pick = r.random()
        if pick < 0.45:
            parts.append(r.choice(_NOUNS))
        elif pick < 0.7:
            parts.append(r.choice(_VERBS))
        elif pick < 0.85:
            parts.append(r.choice(_ADJ))
        else:
            parts.append(r.choice(("the", "a", "to", "of", "when", "and", "for", "in", "is")))
    text = " ".join(parts)
    return text[0].upper() + text[1:] + "."


def _cjk_sentence(r: Random) -> str:
    bank = _JA if r.random() < 0.6 else _ZH
    sep = "、" if bank is _JA else "，"
    end = "。" if bank is _JA else "。"
    return sep.join(r.sample(bank, r.randrange(1, 4))) + end


def _py_block(r: Random) -> list[str]:
    noun, other = r.sample(_NOUNS, 2)
    verb = r.choice(_VERBS)
    cls = noun.capitalize() + r.choice(("Service", "Client", "Repository", "Handler", "Parser"))
    kind = r.randrange(5)
    if kind == 0:
        return [f"def {verb}_{noun}({noun}: {cls}, {other}: int = {r.randrange(1, 500)}) -> dict:",
                f'    """{_sentence(r)}"""',
                f"    result = {noun}.{r.choice(_VERBS)}({other})",
                "    if not result:",
                f'        raise ValueError(f"{verb} failed for {{{other}!r}}")',
                f'    return {{"{noun}": result, "{other}": {other}}}', ""]
    if kind == 1:
        return [f"class {cls}({r.choice(('BaseModel', 'object', 'Protocol', 'Exception'))}):",
                f'    """{_sentence(r)}"""', "",
                f"    {other}: {r.choice(('int', 'str', 'float', 'list[str]', 'dict'))}",
                f"    {noun}_id: str = \"\"", "",
                f"    def {verb}(self, {other}):",
                f"        self._{other} = {other}  # {_sentence(r, 5)}",
                f"        return self.{r.choice(_VERBS)}_{r.choice(_NOUNS)}()", ""]
    if kind == 2:
        return [f"from {r.choice(('app', 'core', 'lib', 'service'))}.{noun} import {cls}",
                f"import {r.choice(('os', 'json', 'logging', 'asyncio', 're', 'typing', 'httpx'))}"]
    if kind == 3:
        return [f"    for {other} in {noun}.items():",
                f"        if {other}.{r.choice(_ADJ)}:",
                f"            logger.{r.choice(('info', 'debug', 'warning'))}(\"{_sentence(r, 6)}\")",
                "            continue",
                f"        {other}s.append({verb}_{other}({other}))"]
    return [f"def test_{verb}_{noun}_{r.choice(_ADJ)}():",
            f"    {noun} = make_{noun}({other}={r.randrange(100)})",
            f"    assert {verb}_{noun}({noun}) == {r.randrange(1000)}", ""]


def _ts_block(r: Random) -> list[str]:
    noun, other = r.sample(_NOUNS, 2)
    verb = r.choice(_VERBS)
    comp = noun.capitalize() + r.choice(("List", "Form", "Card", "Panel", "Item"))
    kind = r.randrange(4)
    if kind == 0:
        return [f"import {{ {verb.capitalize()}{noun.capitalize()} }} from '@/lib/{noun}';",
                f"import type {{ {other.capitalize()} }} from '@/types';"]
    if kind == 1:
        return [f"export function {comp}({{ {other}, on{verb.capitalize()} }}: {comp}Props) {{",
                f"  const [{noun}, set{noun.capitalize()}] = useState<{other.capitalize()}[]>([]);",
                f"  useEffect(() => {{ {verb}{noun.capitalize()}({other}).then(set{noun.capitalize()}); }}, [{other}]);",
                f"  return <div className=\"{r.choice(_ADJ)}-{noun}\">{{{noun}.length}}</div>;",
                "}", ""]
    if kind == 2:
        return [f"export async function {verb}{noun.capitalize()}(id: string): Promise<{other.capitalize()}> {{",
                f"  const res = await fetch(`/api/{noun}/${{id}}`);",
                f"  if (!res.ok) throw new Error('{_sentence(r, 5)}');",
                "  return res.json();", "}", ""]
    return [f"  // {_sentence(r)}",
            f"  const {other} = {noun}.filter((x) => x.{r.choice(_ADJ)}).map((x) => x.{other});"]


def _build_pools() -> dict[str, "_Pool"]:
    r = Random("ctxlake-demo-pools-v1")
    pools: dict[str, list[str]] = {k: [] for k in (
        "py", "ts", "md", "cjk", "log", "pip", "npm", "pytest", "grep", "ls", "json", "conf",
        "diff", "web")}
    while len(pools["py"]) < 3000:
        pools["py"].extend(_py_block(r))
    while len(pools["ts"]) < 3000:
        pools["ts"].extend(_ts_block(r))
    while len(pools["md"]) < 2000:
        pick = r.random()
        if pick < 0.08:
            pools["md"].append(f"## {r.choice(_VERBS).capitalize()} {r.choice(_NOUNS)}s")
        elif pick < 0.35:
            pools["md"].append(f"- {_sentence(r)}")
        elif pick < 0.42:
            pools["md"].append(f"- {_cjk_sentence(r)}")
        elif pick < 0.46:
            pools["md"].append(f"{r.choice(_EMOJI)} {_sentence(r)}")
        elif pick < 0.52:
            pools["md"].append(f"`{r.choice(_VERBS)} --{r.choice(_NOUNS)}` {_sentence(r, 8)}")
        elif pick < 0.6:
            pools["md"].append("")
        else:
            pools["md"].append(" ".join(_sentence(r) for _ in range(r.randrange(1, 4))))
    while len(pools["cjk"]) < 1500:
        pools["cjk"].append(_cjk_sentence(r) + (r.choice(_EMOJI) if r.random() < 0.1 else ""))
    for i in range(3000):
        level = r.choices(("INFO", "DEBUG", "WARNING", "ERROR"), (60, 25, 10, 5))[0]
        pools["log"].append(
            f"2026-10-{1 + i % 28:02d} {i % 24:02d}:{i * 7 % 60:02d}:{i * 13 % 60:02d},{i % 1000:03d} "
            f"{level:<7} [{r.choice(_NOUNS)}.{r.choice(_NOUNS)}] {_sentence(r)} "
            f"id={_hex(r, 12)} took={r.randrange(1, 5000)}ms")
    pkgs = ["requests", "httpx", "pydantic", "numpy", "pandas", "sqlalchemy", "fastapi", "uvicorn",
            "pytest", "ruff", "mypy", "boto3", "celery", "redis", "orjson", "polars", "rich", "click"]
    for i in range(2000):
        pkg = r.choice(pkgs) + ("" if r.random() < 0.7 else f"-{r.choice(_NOUNS)}")
        ver = f"{r.randrange(0, 5)}.{r.randrange(0, 30)}.{r.randrange(0, 12)}"
        pick = r.random()
        if pick < 0.3:
            pools["pip"].append(f"Collecting {pkg}=={ver}")
        elif pick < 0.6:
            pools["pip"].append(f"  Downloading {pkg}-{ver}-py3-none-any.whl ({r.randrange(10, 9000)} kB)")
        elif pick < 0.85:
            pools["pip"].append(f"Requirement already satisfied: {pkg}>={ver} in ./.venv/lib/python3.11/site-packages (from -r requirements.txt (line {r.randrange(1, 60)}))")
        else:
            pools["pip"].append(f"     ━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━ {r.randrange(1, 90)}.{r.randrange(10)}/{r.randrange(90, 99)}.0 MB {r.randrange(1, 40)}.{r.randrange(10)} MB/s eta 0:00:00")
    npkgs = ["react", "next", "zod", "lodash", "eslint", "typescript", "vite", "@types/node",
             "tailwindcss", "prisma", "jest", "webpack", "axios", "date-fns", "rimraf", "glob"]
    for i in range(2000):
        pkg = r.choice(npkgs)
        pick = r.random()
        if pick < 0.4:
            pools["npm"].append(f"npm warn deprecated {pkg}@{r.randrange(1, 9)}.{r.randrange(20)}.{r.randrange(9)}: {_sentence(r, 8)}")
        elif pick < 0.7:
            pools["npm"].append(f"npm http fetch GET 200 https://registry.npmjs.org/{pkg} {r.randrange(5, 900)}ms (cache revalidated)")
        else:
            pools["npm"].append(f"added {r.randrange(1, 1500)} packages, and audited {r.randrange(100, 2000)} packages in {r.randrange(1, 90)}s")
    for i in range(2500):
        noun = r.choice(_NOUNS)
        pick = r.random()
        if pick < 0.7:
            pools["pytest"].append(f"tests/test_{noun}.py::test_{r.choice(_VERBS)}_{r.choice(_NOUNS)} PASSED{' ' * r.randrange(1, 30)}[{i % 100:3d}%]")
        elif pick < 0.8:
            pools["pytest"].append(f"tests/test_{noun}.py::test_{r.choice(_VERBS)}_{noun} FAILED")
        elif pick < 0.9:
            pools["pytest"].append(f"E       AssertionError: assert {r.randrange(1000)} == {r.randrange(1000)}")
        else:
            pools["pytest"].append(f"    def test_{r.choice(_VERBS)}_{noun}():  # {_sentence(r, 5)}")
    code = pools["py"] + pools["ts"]
    for i in range(2500):
        line = r.choice(code).strip() or "pass"
        pools["grep"].append(f"src/{r.choice(_NOUNS)}/{r.choice(_NOUNS)}.{r.choice(('py', 'ts', 'tsx'))}:{r.randrange(1, 900)}:{line}")
        pools["diff"].append(("+" if r.random() < 0.5 else "-") + r.choice(code))
        if i % 40 == 0:
            pools["diff"].append(f"@@ -{r.randrange(1, 500)},{r.randrange(3, 40)} +{r.randrange(1, 500)},{r.randrange(3, 40)} @@")
    for i in range(1500):
        name = f"{r.choice(_NOUNS)}_{r.choice(_NOUNS)}.{r.choice(('py', 'ts', 'md', 'json', 'yaml', 'log'))}"
        pools["ls"].append(f"-rw-r--r--  1 dev staff {r.randrange(100, 90000):>6} Oct {1 + i % 28:2d} {i % 24:02d}:{i % 60:02d} {name}")
    for i in range(1500):
        obj = {"id": i, "name": f"{r.choice(_ADJ)}-{r.choice(_NOUNS)}", "tags": r.sample(_NOUNS, 3),
               "score": round(r.random(), 4), "note": _sentence(r),
               "owner": _cjk_sentence(r) if r.random() < 0.05 else r.choice(_NOUNS)}
        pools["json"].append(orjson.dumps(obj).decode())
    for i in range(1000):
        pools["conf"].append(f"{r.choice(_NOUNS)}_{r.choice(_NOUNS)}: {r.choice(('true', 'false', str(r.randrange(1, 10000)), repr(r.choice(_ADJ))))}")
    while len(pools["web"]) < 2000:
        pick = r.random()
        if pick < 0.1:
            pools["web"].append(f"# {r.choice(_VERBS).capitalize()} the {r.choice(_NOUNS)} API")
        elif pick < 0.4:
            pools["web"].append(" ".join(_sentence(r) for _ in range(r.randrange(2, 6))))
        elif pick < 0.55:
            pools["web"].append(f"* [{r.choice(_NOUNS)}](https://docs.example.com/{r.choice(_NOUNS)}/{r.choice(_VERBS)})")
        else:
            pools["web"].append("")
    return {name: _Pool(lines) for name, lines in pools.items()}


class _Pool:
    __slots__ = ("lines", "sizes")

    def __init__(self, lines: list[str]):
        self.lines = lines
        self.sizes = [len(line.encode("utf-8")) + 1 for line in lines]

    def take(self, start: int, nbytes: int) -> list[str]:
        """Lines from ``start`` (wrapping) until about ``nbytes`` UTF-8 bytes."""
        lines, sizes, n = self.lines, self.sizes, len(self.lines)
        out: list[str] = []
        total = 0
        i = start % n
        while total < nbytes:
            out.append(lines[i])
            total += sizes[i]
            i += 1
            if i == n:
                i = 0
        return out

    def text(self, rng: Random, nbytes: int) -> str:
        return "\n".join(self.take(rng.randrange(len(self.lines)), nbytes))


@lru_cache(maxsize=1)
def _pools() -> dict[str, _Pool]:
    return _build_pools()


@lru_cache(maxsize=1)
def _passing_pool() -> _Pool:
    """The test-run lines of a suite that passes (no FAILED line, no assertion error)."""
    return _Pool([line for line in _pools()["pytest"].lines if line.endswith("%]")])


@lru_cache(maxsize=256)
def _file_lines(pool: str, start: int, nbytes: int) -> tuple[str, ...]:
    return tuple(_pools()[pool].take(start, nbytes))


def _numbered(pool: str, start: int, nbytes: int) -> str:
    """A file as Claude Code's Read tool shows it (``cat -n`` style with an arrow)."""
    if nbytes <= 256 * KIB:
        return _numbered_small(pool, start, nbytes)
    return "\n".join(f"{i:>6}→{line}" for i, line in enumerate(_file_lines(pool, start, nbytes), 1))


@lru_cache(maxsize=128)
def _numbered_small(pool: str, start: int, nbytes: int) -> str:
    return "\n".join(f"{i:>6}→{line}" for i, line in enumerate(_file_lines(pool, start, nbytes), 1))


# ---------------------------------------------------------------------------------------
# Projects (shared by every format: one developer, several tools)
# ---------------------------------------------------------------------------------------
@dataclasses.dataclass
class _File:
    rel: str
    pool: str
    nbytes: int

    @property
    def start(self) -> int:
        return zlib.crc32(self.rel.encode("utf-8"))


@dataclasses.dataclass
class _Project:
    name: str
    cwd: str
    home: str
    lang: str
    files: list[_File]
    branch: str

    def __post_init__(self) -> None:
        self.small = [f for f in self.files if not _is_big(f)]
        self.big = [f for f in self.files if _is_big(f)]
        self.by_rel = {f.rel: f for f in self.files}

    @property
    def encoded(self) -> str:
        return re.sub(r"[^A-Za-z0-9]", "-", self.cwd)

    @property
    def gemini_hash(self) -> str:
        return hashlib.sha256(self.cwd.encode("utf-8")).hexdigest()

    def abs(self, rel: str) -> str:
        return f"{self.cwd}/{rel}"

    def lines(self, f: _File) -> tuple[str, ...]:
        return _file_lines(f.pool, f.start, f.nbytes)

    def text(self, f: _File) -> str:
        return "\n".join(self.lines(f)) + "\n"


_PROJECT_NAMES = ["payments-api", "webshop.v2", "data-pipeline", "infra-terraform",
                  "ml-experiments", "mobile-app", "docs-site", "cli-tools", "auth-service",
                  "analytics-dashboard"]
_HOMES = ["/home/dev", "/Users/mika", "/home/sato"]


def _make_projects(seed: int) -> list[_Project]:
    r = Random(f"{seed}:projects")
    projects = []
    for i, name in enumerate(_PROJECT_NAMES):
        home = _HOMES[i % len(_HOMES)]
        cwd = f"{home}/{r.choice(('src', 'work', 'code'))}/{name}"
        lang = "ts" if name in ("webshop.v2", "mobile-app", "docs-site", "analytics-dashboard") else "py"
        files = [_File("CLAUDE.md", "md", r.randrange(1500, 6000)),
                 _File(".claude/CLAUDE.md", "md", r.randrange(800, 3000)),
                 _File("GEMINI.md", "md", r.randrange(800, 4000)),
                 _File("AGENTS.md", "md", r.randrange(800, 3000)),
                 _File("README.md", "md", r.randrange(2000, 12000)),
                 _File("docs/README.ja.md", "cjk", r.randrange(2000, 9000))]
        if lang == "py":
            files += [_File("pyproject.toml", "conf", r.randrange(600, 2500))]
            for _ in range(r.randrange(30, 70)):
                sub = r.choice(("src/" + name.replace("-", "_"), "tests", "scripts"))
                prefix = "test_" if sub == "tests" else ""
                files.append(_File(f"{sub}/{prefix}{r.choice(_NOUNS)}_{r.choice(_NOUNS)}.py", "py",
                                   _payload_size(r, 150_000, big=False) + 300))
        else:
            files += [_File("package.json", "json", r.randrange(600, 3000))]
            for _ in range(r.randrange(30, 70)):
                sub = r.choice(("src/components", "src/lib", "src/app", "tests"))
                ext = "tsx" if sub in ("src/components", "src/app") else "ts"
                files.append(_File(f"{sub}/{r.choice(_NOUNS)}{r.choice(_NOUNS).capitalize()}.{ext}",
                                   "ts", _payload_size(r, 150_000, big=False) + 300))
        files += [_File(f"config/{r.choice(_NOUNS)}.yaml", "conf", r.randrange(300, 4000)) for _ in range(3)]
        files += [_File(f"data/fixtures/{r.choice(_NOUNS)}s.jsonl", "json", _log_uniform(r, 40_000, 400_000)),
                  _File("data/export/full_dump.jsonl", "json", _log_uniform(r, 1_500_000, 6_000_000)),
                  _File(f"logs/{r.choice(_NOUNS)}.log", "log", _log_uniform(r, 100_000, 900_000)),
                  _File("logs/server.log", "log", _log_uniform(r, 1_000_000, 5_000_000))]
        uniq = {f.rel: f for f in files}
        projects.append(_Project(name, cwd, home, lang, sorted(uniq.values(), key=lambda f: f.rel),
                                 r.choice(("main", "main", "develop", f"feature/{r.choice(_NOUNS)}-{r.choice(_VERBS)}", ""))))
    return projects


def _is_big(f: _File) -> bool:
    return f.rel.startswith(("data/", "logs/"))


_PROMPTS_EN = [
    "Fix the failing test in {path}",
    "Add pagination to the {noun} endpoint and update the tests",
    "Refactor {cls} so the {noun} logic lives in one place",
    "Why does `{cmd}` fail? Please investigate and fix it.",
    "Update the README with setup instructions for the {noun} service",
    "Investigate the memory leak in the {noun} worker",
    "Can you add type hints to {path}?",
    "Write unit tests for {path}",
    "The {noun} export is slow on large inputs, can you profile it?",
    "Rename {noun} to {other} everywhere and keep the public API stable",
    "Add a retry with exponential backoff to the {noun} client",
    "Review the changes on this branch and suggest improvements",
    "Implement the {noun} {verb} feature described in the issue",
    "Bump the dependencies and make sure the build still passes",
]
_PROMPTS_JA = ["{path} のテストが失敗しています。原因を調べて修正してください。",
               "{noun} のページネーションを実装してください 🙏",
               "このエラーの原因を教えて: `{cmd}`",
               "READMEを日本語で更新してください。セットアップ手順も追加で。",
               "キャッシュの有効期限の処理を見直してください"]
_PROMPTS_ZH = ["请帮我重构 {path}，把重复的逻辑提取成函数。",
               "为什么 `{cmd}` 会报错？请修复。",
               "给 {noun} 接口加上分页和排序 🚀",
               "请写单元测试覆盖 {path}"]
_FOLLOWUPS = ["thanks! 🎉 now can you also handle the empty list case?", "ship it 🚀",
              "looks good, please commit", "hmm, that broke the build 😅 can you check?",
              "ok, continue", "also update the docs", "can you double-check the edge cases?",
              "ありがとう！次はテストもお願いします", "好的，继续", "perfect 👍 one more thing: add logging",
              "wait, don't touch the public API", "try again with the other approach"]


def _prompt(rng: Random, project: _Project, *, first: bool, lang: str | None = None) -> str:
    f = rng.choice(project.files)
    fields = dict(path=f.rel, noun=rng.choice(_NOUNS), other=rng.choice(_NOUNS),
                  verb=rng.choice(_VERBS), cls=rng.choice(_NOUNS).capitalize() + "Service",
                  cmd=rng.choice(("npm run build", "pytest -q", "make lint", "docker compose up",
                                  "python -m app.main")))
    pick = lang or ("ja" if rng.random() < 0.1 else "zh" if rng.random() < 0.06 else "en")
    if not first and lang is None and rng.random() < 0.45:
        return rng.choice(_FOLLOWUPS)
    bank = {"en": _PROMPTS_EN, "ja": _PROMPTS_JA, "zh": _PROMPTS_ZH}[pick]
    text = rng.choice(bank).format(**fields)
    if pick == "en" and rng.random() < 0.08:
        text += " " + rng.choice(_EMOJI)
    if rng.random() < 0.15:
        text += "\n\n" + _pools()["md"].text(rng, rng.randrange(200, 1500))
    return text


def _prose(rng: Random, nbytes: int, *, cjk: bool = False) -> str:
    out = []
    total = 0
    while total < nbytes:
        s = _cjk_sentence(rng) if cjk and rng.random() < 0.7 else _sentence(rng)
        if rng.random() < 0.03:
            s += " " + rng.choice(_EMOJI)
        out.append(s)
        total += len(s) + 1
    return " ".join(out)


# ---------------------------------------------------------------------------------------
# Token usage: what the API would have counted for the content written
# ---------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class _Tokenizer:
    """How a model family's tokenizer counts, relative to the heuristic of docs/policies.md
    (``ceil(len / 4)`` plus 1.5 per CJK character): a factor for prose, one for code (tool
    inputs and results) and one for CJK, and the tokens of the syntax a model writes around
    each tool call (name, id, delimiters: in the count, never in a transcript's text)."""

    prose: float
    code: float
    cjk: float
    framing: int


# (part of the model name, tokenizer): the first match wins; a vendor's models share one.
# The factors are what real BPE tokenizers give on this archive's text: its prose is common
# English words (~6 characters a token, well under the heuristic's 4), its code and logs
# near 4; "gpt" is o200k_base's ratio and "claude" the legacy Claude vocabulary's (its tool
# calls counted as Claude writes them, pipeline.text.written_output: the tags are most of the
# framing, 3 tokens are left), measured, so that a real-tokenizer basis fits these models as
# it does real usage.
_TOKENIZERS = (
    ("claude", _Tokenizer(prose=0.69, code=1.20, cjk=0.96, framing=3)),
    ("gemini", _Tokenizer(prose=0.68, code=1.02, cjk=0.62, framing=12)),
    ("gpt", _Tokenizer(prose=0.67, code=1.03, cjk=0.78, framing=18)),
    ("deepseek", _Tokenizer(prose=0.70, code=1.08, cjk=0.66, framing=21)),
)
_OTHER_TOKENIZER = _Tokenizer(prose=0.80, code=1.10, cjk=1.10, framing=14)
# A real tokenizer's count of one text strays from its class factor (digits, punctuation,
# rare words): each piece of content gets its own deviation, drawn once, so the same text
# costs the same in every later prompt.
_PIECE_SPREAD = 0.03


def _tokenizer(model: str) -> _Tokenizer:
    return next((tok for part, tok in _TOKENIZERS if part in model), _OTHER_TOKENIZER)


def _text_of(content: Any) -> str:
    """The text of a message or tool-result content (a string or a list of text blocks)."""
    if isinstance(content, str):
        return content
    return "\n".join(block.get("text", "") for block in content or [])


class _Meter:
    """The usage an API records for one conversation, derived from what the transcript shows.

    Every piece of content is counted once, when it is written (:meth:`count`: the model's
    class factor times the heuristic, with the piece's own deviation). The prompt of a call is
    the session's ``overhead`` (system prompt and tool definitions: constant, never in the
    transcript) plus every piece before the call; thinking counts only within the current
    turn (the APIs drop earlier turns' thinking), :meth:`new_turn` starts one. The output of a
    call is what it wrote (:meth:`write`, :meth:`call` with the tool-call framing, thinking
    the transcript shows in full) plus a stop token or two; hidden reasoning
    (:meth:`hidden`) is recorded apart by the formats that record it. All draws come from
    the meter's own generator, so usage never shifts the content of the archive.
    """

    def __init__(self, seed: str, model: str, overhead: tuple[int, int]):
        self.rng = Random(seed)
        self.tokenizer = _tokenizer(model)
        self.overhead = self.rng.randrange(*overhead)
        self.context = 0            # the pieces so far, earlier turns' thinking left out
        self.thinking = 0           # thinking of the current turn
        self.written = 0            # the output of the call being written

    def count(self, text: str, *, code: bool = False) -> int:
        if not text:
            return 0
        cjk, units = text_counts(text)
        tok = self.tokenizer
        plain = (units - cjk) / 4 * (tok.code if code else tok.prose)
        return max(1, round(plain * self.rng.gauss(1.0, _PIECE_SPREAD) + cjk * 1.5 * tok.cjk))

    def add(self, text: str, *, code: bool = False) -> None:
        """Content the model reads (prompts, tool results, injected context)."""
        self.context += self.count(text, code=code)

    def new_turn(self) -> None:
        self.thinking = 0

    def reset(self) -> None:
        """A compaction: the conversation restarts from its summary (added next)."""
        self.context = self.thinking = 0

    def state(self) -> tuple[int, int]:
        return self.context, self.thinking

    def restore(self, state: tuple[int, int]) -> None:
        self.context, self.thinking = state

    def prompt(self) -> int:
        """The whole prompt of a call made now (cached parts included)."""
        return self.overhead + self.context + self.thinking

    def write(self, text: str) -> None:
        n = self.count(text)
        self.context += n
        self.written += n

    def call(self, input_text: str) -> None:
        n = self.count(input_text, code=True) + self.tokenizer.framing
        self.context += n
        self.written += n

    def think(self, text: str, *, shown: bool) -> int:
        """A thinking row: output when the transcript shows the thinking itself (``shown``),
        else a summary of hidden reasoning (see :meth:`hidden`). Its tokens."""
        n = self.count(text)
        self.thinking += n
        if shown:
            self.written += n
        return n

    def hidden(self, summary_tokens: int) -> int:
        """Hidden reasoning behind a summary of ``summary_tokens`` (0: none)."""
        if not summary_tokens:
            return 0
        return round(summary_tokens * self.rng.uniform(1.5, 5.0)) + self.rng.randrange(20, 200)

    def output(self) -> int:
        """The visible output of the call just written (then the next call starts)."""
        n = self.written + self.rng.choice((1, 1, 2))       # the stop token(s)
        self.written = 0
        return max(1, n)


def _cached(prompt: int, previous: int | None, unit: int) -> int:
    """The part of ``prompt`` an automatic prefix cache serves: the previous prompt of the
    conversation (None: cold), in whole cache blocks of ``unit`` tokens."""
    if not previous:
        return 0
    return min(prompt, previous) // unit * unit


# ---------------------------------------------------------------------------------------
# Claude Code
# ---------------------------------------------------------------------------------------
_CLAUDE_MODELS = [("claude-sonnet-4-5-20250929", 62), ("claude-opus-4-1-20250805", 14),
                  ("claude-haiku-4-5-20251001", 20), (UNPRICED_MODEL, 4)]
_CLAUDE_VERSIONS = [("1.0.108", 15), ("2.0.28", 30), ("2.0.42", 30), ("2.0.64", 25)]
_TOOL_WEIGHTS = [("read", 30), ("bash", 22), ("grep", 10), ("glob", 6), ("edit", 14),
                 ("write", 4), ("webfetch", 3), ("task", 2), ("multiedit", 1)]
_TODO_OK = ("Todos have been modified successfully. Ensure that you continue to use the todo list "
            "to track your progress. Please proceed with the current tasks if applicable")
_CAVEAT = ("Caveat: The messages below were generated by the user while running local commands. "
           "DO NOT respond to these messages or otherwise consider them in your response unless "
           "the user explicitly asks you to.")
_WEB = ["https://docs.python.org/3/library/asyncio-task.html", "https://nextjs.org/docs/app/building-your-application/routing",
        "https://docs.pydantic.dev/latest/concepts/validators/", "https://developer.mozilla.org/en-US/docs/Web/API/Fetch_API",
        "https://duckdb.org/docs/data/json/overview", "https://www.postgresql.org/docs/current/indexes-types.html"]


@dataclasses.dataclass
class _Call:
    name: str
    input: dict
    content: Any
    result: Any
    is_error: bool = False
    duration: int = 1000
    inline: list[bytes] | None = None


class _ClaudeLog:
    """The lines of one Claude Code transcript file (a main session or a sub-agent)."""

    def __init__(self, rng: Random, *, session_id: str, project: _Project, version: str,
                 model: str, clock: int, agent_id: str | None = None, sidechain: bool = False,
                 lines: list[bytes] | None = None, overhead: tuple[int, int] = (14_000, 20_000)):
        self.rng = rng
        self.lines = lines if lines is not None else []
        self.size = 0
        self.v2 = not version.startswith("1.")
        self.model = model
        head: dict[str, Any] = {"isSidechain": sidechain, "userType": "external",
                                "cwd": project.cwd, "sessionId": session_id,
                                "version": version, "gitBranch": project.branch}
        if agent_id:
            head["agentId"] = agent_id
        self.head = head
        self.parent: str | None = None
        self.clock = clock
        self.meter = _Meter(f"usage:{session_id}:{agent_id}:{sidechain}:{clock}", model, overhead)
        self.cached = 0                       # prompt prefix the cache holds after the last call
        self.last_call: int | None = None     # when the last call was made (the cache lives 5 min)
        self.last_usage: dict = {}
        self.turn_uid = ""

    def emit(self, obj: dict) -> None:
        data = orjson.dumps(obj)
        self.lines.append(data)
        self.size += len(data) + 1

    def wait(self, lo: int, hi: int) -> None:
        self.clock += self.rng.randrange(lo, hi)

    def _base(self, parent: str | None = None) -> dict:
        rec = {"parentUuid": self.parent if parent is None else parent}
        rec.update(self.head)
        return rec

    def snapshot(self, message_id: str, *, update: bool = False, paths: list[str] = ()) -> None:
        backups = {p: {"backupFileName": f"{_hex(self.rng, 16)}@v{1 + i}", "version": 1 + i,
                       "backupTime": _iso(self.clock)} for i, p in enumerate(paths)}
        self.emit({"type": "file-history-snapshot", "messageId": message_id,
                   "snapshot": {"messageId": message_id, "trackedFileBackups": backups,
                                "timestamp": _iso(self.clock)},
                   "isSnapshotUpdate": update})

    def user(self, content: Any, *, meta: bool = False, result: Any = dataclasses.MISSING,
             extra: dict | None = None, uid: str | None = None) -> str:
        uid = uid or _uuid4(self.rng)
        rec = self._base()
        rec["type"] = "user"
        rec["message"] = {"role": "user", "content": content}
        if meta:
            rec["isMeta"] = True
        if extra:
            rec.update(extra)
        rec["uuid"] = uid
        rec["timestamp"] = _iso(self.clock)
        if result is not dataclasses.MISSING:
            rec["toolUseResult"] = result
        self.emit(rec)
        self.parent = uid
        if isinstance(content, str):
            self.meter.add(content)
        else:
            for block in content:
                self.meter.add(_text_of(block.get("content")), code=True)
        return uid

    def prompt(self, text: str) -> str:
        uid = _uuid4(self.rng)
        self.turn_uid = uid
        if self.v2:
            self.snapshot(uid)
        extra = {"thinkingMetadata": {"level": "high", "disabled": False, "triggers": []}} \
            if self.v2 else None
        self.meter.new_turn()
        self.user(text, extra=extra, uid=uid)
        return uid

    def assistant(self, blocks: list[dict]) -> None:
        rng = self.rng
        meter = self.meter
        mid = "msg_01" + _b62(rng, 22)
        rid = "req_011C" + _b62(rng, 18)
        # the prompt: the prefix cached by the previous call (if within the cache's 5 minutes),
        # the new part written to the cache, and a few tokens after the last breakpoint
        total = meter.prompt()
        warm = self.last_call is not None and self.clock - self.last_call <= 5 * 60_000
        read = min(self.cached, total) if warm else 0
        inp = min(total - read, meter.rng.randrange(1, 12))
        created = total - read - inp
        self.cached = read + created
        self.last_call = self.clock
        for block in blocks:
            if block["type"] == "thinking":
                meter.think(block["thinking"], shown=True)
            elif block["type"] == "tool_use":   # written, and billed, in Claude's syntax
                meter.call(claude_tool_calls([WrittenRow(
                    "tool_use", orjson.dumps(block["input"]).decode(), block["name"])]))
            else:
                meter.write(block["text"])
        final = meter.output()
        early = meter.rng.choice((1, 2, 4, 8))
        tools = any(b["type"] == "tool_use" for b in blocks)
        stop = ("tool_use" if tools else "end_turn") if rng.random() < 0.5 else None
        for k, block in enumerate(blocks):
            last = k == len(blocks) - 1
            usage = {"input_tokens": inp, "cache_creation_input_tokens": created,
                     "cache_read_input_tokens": read,
                     "cache_creation": {"ephemeral_5m_input_tokens": created,
                                        "ephemeral_1h_input_tokens": 0},
                     "output_tokens": final if last else early, "service_tier": "standard"}
            if self.v2:
                msg = {"model": self.model, "id": mid, "type": "message", "role": "assistant",
                       "content": [block], "stop_reason": stop if last else None,
                       "stop_sequence": None, "usage": usage}
            else:
                msg = {"id": mid, "type": "message", "role": "assistant", "model": self.model,
                       "content": [block], "stop_reason": stop if last else None,
                       "stop_sequence": None, "usage": usage}
            uid = _uuid4(rng)
            rec = self._base()
            rec["message"] = msg
            rec["requestId"] = rid
            rec["type"] = "assistant"
            rec["uuid"] = uid
            rec["timestamp"] = _iso(self.clock)
            self.emit(rec)
            self.parent = uid
            self.wait(300, 4000 if block["type"] != "thinking" else 9000)
        self.last_usage = usage

    def tool_result(self, call_id: str, call: _Call) -> None:
        if call.is_error:
            block = {"type": "tool_result", "content": call.content, "is_error": True,
                     "tool_use_id": call_id}
        else:
            block = {"tool_use_id": call_id, "type": "tool_result", "content": call.content}
            if call.name == "Bash":
                block["is_error"] = False
        self.user([block], result=call.result)

    def system(self, subtype: str, content: str, meta_key: str, meta: dict) -> str:
        uid = _uuid4(self.rng)
        if subtype == "compact_boundary":
            rec = {"parentUuid": None, "logicalParentUuid": self.parent}
            rec.update(self.head)
        else:
            rec = self._base()
        rec.update({"type": "system", "subtype": subtype, "content": content, "isMeta": False,
                    "timestamp": _iso(self.clock), "uuid": uid, "level": "info", meta_key: meta})
        self.emit(rec)
        self.parent = uid
        return uid

    def command(self, name: str, args: str = "", stdout: str | None = "") -> None:
        self.user(_CAVEAT, meta=True)
        self.wait(50, 400)
        self.user(f"<command-name>/{name}</command-name>\n            <command-message>{name}"
                  f"</command-message>\n            <command-args>{args}</command-args>")
        if stdout is not None:
            self.wait(50, 400)
            self.user(f"<local-command-stdout>{stdout}</local-command-stdout>")


class _ClaudeSession:
    """Drives one session: turns of prompts, tool loops, todos, commits, sub-agents."""

    def __init__(self, gen: "_Generator", rng: Random, project: _Project, *, start: int,
                 planned: int, cap: int, script: int):
        self.gen = gen
        self.rng = rng
        self.project = project
        self.planned = planned
        self.base_cap = cap
        self.script = script
        self.session_id = _uuid4(rng)
        if script == 1:
            version, model = "2.0.28", "claude-sonnet-4-5-20250929"
        elif script == 2:
            version, model = "2.0.64", UNPRICED_MODEL
        elif script == 3:
            version, model = "2.0.42", "claude-sonnet-4-5-20250929"
        else:
            version = rng.choices(*zip(*_CLAUDE_VERSIONS))[0]
            model = rng.choices(*zip(*_CLAUDE_MODELS))[0]
        self.version = version
        self.log = _ClaudeLog(rng, session_id=self.session_id, project=project, version=version,
                              model=model, clock=start)
        self.files: list[tuple[str, bytes, int]] = []   # (relative path, data, mtime ms)
        self.read_paths: list[str] = []
        self.known = dict(project.by_rel)     # files this session can (re)read, incl. extras
        self.edited = False
        self.subagents = 0
        self.extra = 0                        # bytes of finished sub-agent files
        self.sub: _ClaudeLog | None = None    # the sub-agent being written
        self.main_rel = f"claude/projects/{project.encoded}/{self.session_id}.jsonl"

    # -- tools ---------------------------------------------------------------------------
    @property
    def cap(self) -> int:
        """Largest payload now: the archive-wide cap, shrinking as the session nears its size."""
        return max(4 * KIB, min(self.base_cap, (self.planned - self.size) // 2))

    @property
    def size(self) -> int:
        """Bytes of this session so far: main file, finished and running sub-agents."""
        return self.log.size + self.extra + (self.sub.size if self.sub is not None else 0)

    def _file(self) -> _File:
        rng = self.rng
        if rng.random() < 0.0015:
            return rng.choice(self.project.big)
        return rng.choice(self.project.small)

    def read(self, f: _File | None = None, *, repeat: bool = False, ok: bool = False) -> _Call:
        """A Read; ``ok``: never the occasional wrong path (an error)."""
        rng, project = self.rng, self.project
        if f is None and (repeat or self.read_paths and rng.random() < 0.22):
            f = self.known[rng.choice(self.read_paths)]
        f = f or self._file()
        self.known.setdefault(f.rel, f)
        path = f.rel if f.rel.startswith("/") else project.abs(f.rel)
        if not ok and rng.random() < 0.03 and f.rel not in ("CLAUDE.md", ".claude/CLAUDE.md"):
            wrong = path.replace(".", "_old.", 1)
            return _Call("Read", {"file_path": wrong},
                         "<tool_use_error>File does not exist.</tool_use_error>",
                         "Error: File does not exist.", True, rng.randrange(5, 40))
        nbytes = min(f.nbytes, self.cap)
        lines = _file_lines(f.pool, f.start, nbytes)
        total = len(project.lines(f)) if nbytes == f.nbytes else int(len(lines) * f.nbytes / max(nbytes, 1))
        args: dict[str, Any] = {"file_path": path}
        if nbytes < f.nbytes:
            args.update(offset=1, limit=len(lines))
        if f.rel not in self.read_paths:
            self.read_paths.append(f.rel)
        raw = "\n".join(lines)
        return _Call("Read", args, _numbered(f.pool, f.start, nbytes),
                     {"type": "text", "file": {"filePath": path, "content": raw,
                                               "numLines": len(lines), "startLine": 1,
                                               "totalLines": total}},
                     False, rng.randrange(5, 120))

    def read_memory(self, which: str) -> _Call:
        project = self.project
        if which == "user":
            path = f"{project.home}/.claude/CLAUDE.md"
            f = _File(path, "md", 1200 + zlib.crc32(path.encode()) % 2500)
        elif which == "escape":
            path = f"{project.cwd}/../shared-notes/CLAUDE.md"
            f = _File(path, "md", 900)
        else:
            f = project.by_rel[which]
            path = project.abs(f.rel)
        lines = _file_lines(f.pool, f.start, f.nbytes)
        self.known.setdefault(f.rel, f)
        if f.rel not in self.read_paths:
            self.read_paths.append(f.rel)
        return _Call("Read", {"file_path": path}, _numbered(f.pool, f.start, f.nbytes),
                     {"type": "text", "file": {"filePath": path, "content": "\n".join(lines),
                                               "numLines": len(lines), "startLine": 1,
                                               "totalLines": len(lines)}},
                     False, self.rng.randrange(5, 60))

    def bash(self, kind: str | None = None) -> _Call:
        rng, project = self.rng, self.project
        pools = _pools()
        py = project.lang == "py"
        kind = kind or rng.choices(
            ("test", "status", "diff", "log", "install", "ls", "logs", "build", "run", "fail"),
            (18, 8, 8, 4, 6, 8, 5, 8, 6, 4))[0]
        size = _payload_size(rng, self.cap)
        err = False
        code = 0
        if kind == "test":
            cmd = rng.choice(("pytest -q", "pytest tests/ -x", "python -m pytest -k " + rng.choice(_NOUNS))) \
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
            out = "\n".join(f"{_hex(rng, 7)} {_sentence(rng, 6)}" for _ in range(20))
        elif kind == "install":
            if rng.random() < (0.7 if py else 0.3):
                cmd = rng.choice(("pip install -r requirements.txt", "pip install httpx==0.27.2",
                                  "pip install -e '.[dev]'", "uv pip install pydantic"))
                out = pools["pip"].text(rng, size) + "\nSuccessfully installed " + \
                    " ".join(f"{rng.choice(_NOUNS)}-{rng.randrange(1, 5)}.{rng.randrange(20)}" for _ in range(5))
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
        args = {"command": cmd, "description": desc}
        if err:
            text = f"Exit code {code}\n{out}"
            return _Call("Bash", args, text, f"Error: {text}", True, rng.randrange(200, 60000))
        return _Call("Bash", args, out, {"stdout": out, "stderr": "", "interrupted": False,
                                         "isImage": False}, False, rng.randrange(50, 40000))

    def commit(self, msg: str | None = None) -> _Call:
        rng = self.rng
        msg = msg or rng.choice((f"Fix {rng.choice(_NOUNS)} {rng.choice(_VERBS)} on empty input",
                          f"Add {rng.choice(_NOUNS)} pagination", f"Refactor {rng.choice(_NOUNS)} client",
                          f"✨ {rng.choice(_VERBS)} {rng.choice(_NOUNS)}s", f"修复{rng.choice(_NOUNS)}的超时问题",
                          f"docs: update README for {rng.choice(_NOUNS)}"))
        cmd = f"git add -A && git commit -m \"{msg}\""
        n = rng.randrange(1, 9)
        out = (f"[{self.project.branch or 'main'} {_hex(rng, 7)}] {msg}\n {n} files changed, "
               f"{rng.randrange(1, 400)} insertions(+), {rng.randrange(0, 200)} deletions(-)")
        return _Call("Bash", {"command": cmd, "description": "Commit the changes"}, out,
                     {"stdout": out, "stderr": "", "interrupted": False, "isImage": False},
                     False, rng.randrange(200, 3000))

    def test_run(self, *, failing: _File | None = None) -> _Call:
        """A test run whose summary says all passed, or (``failing``: that test file) one
        failure with exit code 1, as pytest / jest print them."""
        rng, py = self.rng, self.project.lang == "py"
        out = _passing_pool().text(rng, _payload_size(rng, self.cap, big=False))
        passed = rng.randrange(40, 400)
        secs = f"{rng.uniform(0.8, 40):.2f}"
        if failing is not None:
            name = f"test_{rng.choice(_VERBS)}_{rng.choice(_NOUNS)}"
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
        duration = rng.randrange(800, 40000)
        if failing is not None:
            text = f"Exit code 1\n{out}"
            return _Call("Bash", args, text, f"Error: {text}", True, duration)
        return _Call("Bash", args, out, {"stdout": out, "stderr": "", "interrupted": False,
                                         "isImage": False}, False, duration)

    def grep(self) -> _Call:
        rng = self.rng
        pattern = rng.choice((rng.choice(_VERBS) + "_" + rng.choice(_NOUNS), "TODO|FIXME",
                              f"class {rng.choice(_NOUNS).capitalize()}", "import .*" + rng.choice(_NOUNS)))
        if rng.random() < 0.5:
            out = _pools()["grep"].text(rng, _payload_size(rng, self.cap))
            n = out.count("\n") + 1
            return _Call("Grep", {"pattern": pattern, "output_mode": "content", "-n": True}, out,
                         {"mode": "content", "numFiles": 0, "filenames": [], "content": out,
                          "numLines": n}, False, rng.randrange(10, 900))
        files = [self.project.abs(f.rel) for f in rng.sample(self.project.files, rng.randrange(0, 8))]
        out = f"Found {len(files)} files\n" + "\n".join(files) if files else "No files found"
        return _Call("Grep", {"pattern": pattern, "path": self.project.cwd,
                              "glob": rng.choice(("*.py", "*.ts", "*.md", "**/*"))}, out,
                     {"mode": "files_with_matches", "filenames": files, "numFiles": len(files)},
                     False, rng.randrange(10, 900))

    def glob(self) -> _Call:
        rng = self.rng
        pattern = rng.choice(("**/*.py", "**/*.ts", "**/*.tsx", "**/CLAUDE.md", "src/**/*", "**/package.json", "tests/**/test_*.py"))
        files = [self.project.abs(f.rel) for f in rng.sample(self.project.files, rng.randrange(0, 25))]
        out = "\n".join(files) if files else "No files found"
        return _Call("Glob", {"pattern": pattern}, out,
                     {"filenames": files, "durationMs": rng.randrange(2, 200), "numFiles": len(files),
                      "truncated": False}, False, rng.randrange(2, 200))

    def edit(self, *, multi: bool = False, unread: bool = False,
             target: _File | None = None) -> _Call:
        """An Edit of a file read before; ``target``: that file, and never an error."""
        rng, project = self.rng, self.project
        candidates = [project.by_rel[r] for r in self.read_paths if r in project.by_rel
                      and not _is_big(project.by_rel[r])]
        if target is None and (unread or not candidates):
            f = rng.choice(project.small)
            path = project.abs(f.rel)
            args = {"file_path": path, "old_string": "pass", "new_string": "return None"}
            return _Call("MultiEdit" if multi else "Edit", args,
                         "<tool_use_error>File has not been read yet. Read it first before writing to it.</tool_use_error>",
                         "Error: File has not been read yet. Read it first before writing to it.", True, 3)
        f = target or rng.choice(candidates)
        path = project.abs(f.rel)
        lines = project.lines(f)
        at = rng.randrange(len(lines))
        old = lines[at] or lines[0]
        new = old.replace(rng.choice(_NOUNS), rng.choice(_NOUNS)) + \
            ("  # " + _sentence(rng, 5) if f.pool == "py" else "")
        if target is None and rng.random() < 0.04:
            return _Call("Edit", {"file_path": path, "old_string": old + "x", "new_string": new},
                         "<tool_use_error>String to replace not found in file.\nString: " + old + "x</tool_use_error>",
                         "Error: String to replace not found in file.", True, 5)
        self.edited = True
        snippet = "\n".join(f"{i + 1:>6}→{line}" for i, line in enumerate(lines[max(0, at - 4):at + 5], max(0, at - 4)))
        patch = [{"oldStart": at + 1, "oldLines": 1, "newStart": at + 1, "newLines": 1,
                  "lines": [f"-{old}", f"+{new}"]}]
        if multi:
            args = {"file_path": path, "edits": [{"old_string": old, "new_string": new}]}
            return _Call("MultiEdit", args, f"Applied 1 edit to {path}:\n1. Replaced \"{old[:50]}...\" with \"{new[:50]}...\"",
                         {"filePath": path, "edits": args["edits"], "originalFileContents": project.text(f),
                          "structuredPatch": patch, "userModified": False}, False, 20)
        return _Call("Edit", {"file_path": path, "old_string": old, "new_string": new},
                     f"The file {path} has been updated. Here's the result of running `cat -n` on a snippet of the edited file:\n{snippet}",
                     {"filePath": path, "oldString": old, "newString": new, "originalFile": project.text(f),
                      "structuredPatch": patch, "userModified": False, "replaceAll": False},
                     False, rng.randrange(5, 60))

    def write(self) -> _Call:
        rng, project = self.rng, self.project
        ext = "py" if project.lang == "py" else "ts"
        rel = f"{'src' if rng.random() < 0.7 else 'tests'}/{rng.choice(_NOUNS)}_{rng.choice(_VERBS)}.{ext}"
        path = project.abs(rel)
        content = _pools()[ext].text(rng, _payload_size(rng, min(self.cap, 60_000), big=False))
        self.edited = True
        return _Call("Write", {"file_path": path, "content": content},
                     f"File created successfully at: {path}",
                     {"type": "create", "filePath": path, "content": content, "structuredPatch": []},
                     False, rng.randrange(5, 60))

    def webfetch(self) -> _Call:
        rng = self.rng
        url = rng.choice(_WEB)
        if rng.random() < 0.08:
            return _Call("WebFetch", {"url": url, "prompt": "Summarise the relevant section"},
                         "<tool_use_error>Request failed with status code 404</tool_use_error>",
                         "Error: Request failed with status code 404", True, rng.randrange(200, 3000))
        text = _pools()["web"].text(rng, _payload_size(rng, self.cap))
        return _Call("WebFetch", {"url": url, "prompt": f"How do I {rng.choice(_VERBS)} a {rng.choice(_NOUNS)}?"},
                     text, {"bytes": len(text) * 3, "code": 200, "codeText": "OK", "result": text,
                            "durationMs": rng.randrange(300, 9000), "url": url},
                     False, rng.randrange(300, 9000))

    def todo(self, todos: list[dict], old: list[dict]) -> _Call:
        return _Call("TodoWrite", {"todos": todos}, _TODO_OK,
                     {"oldTodos": old, "newTodos": todos}, False, 5)

    def task(self) -> _Call:
        """A sub-agent: its transcript goes inline (1.0.x), beside (2.0) or under subagents/."""
        rng, log = self.rng, self.log
        desc = rng.choice(("Explore the codebase", "Find the failing test", "Review the diff",
                           f"Analyse the {rng.choice(_NOUNS)} module"))
        prompt = f"{desc}. " + _prose(rng, rng.randrange(150, 900))
        agent_type = rng.choice(("general-purpose", "Explore", "Plan"))
        agent_id = _hex(rng, 8)
        inline = self.version.startswith("1.")
        start = log.clock
        sub_lines: list[bytes] = []
        sub = _ClaudeLog(rng, session_id=self.session_id, project=self.project,
                         version=self.version, model=log.model if rng.random() < 0.6 else "claude-haiku-4-5-20251001",
                         clock=start + rng.randrange(100, 800), agent_id=None if inline else agent_id,
                         sidechain=True, lines=sub_lines, overhead=(5_000, 9_000))
        if not inline:
            self.sub = sub
        sub.user(prompt)
        steps = rng.randrange(2, 8)
        calls = 0
        for _ in range(steps):
            call = rng.choice((self.read, self.grep, self.glob, self.bash, self.read))()
            tid = "toolu_01" + _b62(rng, 22)
            blocks = [{"type": "tool_use", "id": tid, "name": call.name, "input": call.input}]
            if rng.random() < 0.4:
                blocks.insert(0, {"type": "text", "text": _sentence(rng)})
            sub.assistant(blocks)
            sub.clock += call.duration
            sub.tool_result(tid, call)
            calls += 1
            if self.log.size + self.extra + sub.size >= self.planned:
                break
        report = _prose(rng, rng.randrange(400, 4000)) + "\n\n" + "\n".join(
            f"- `{self.project.abs(f.rel)}`: {_sentence(rng, 7)}" for f in rng.sample(self.project.files, 4))
        sub.assistant([{"type": "text", "text": report}])
        if not inline:
            if self.version == "2.0.64":
                rel = f"claude/projects/{self.project.encoded}/{self.session_id}/subagents/agent-{agent_id}.jsonl"
            else:
                rel = f"claude/projects/{self.project.encoded}/agent-{agent_id}.jsonl"
            self.files.append((rel, b"\n".join(sub_lines) + b"\n", sub.clock))
            self.subagents += 1
            self.extra += sub.size
            self.sub = None
        duration = sub.clock - start + rng.randrange(200, 1500)
        usage = dict(sub.last_usage)          # the sub-agent's last call, as Claude Code reports it
        total = sum(usage[k] for k in ("input_tokens", "cache_creation_input_tokens",
                                       "cache_read_input_tokens", "output_tokens"))
        result = {"content": [{"type": "text", "text": report}], "totalDurationMs": duration,
                  "totalTokens": total, "totalToolUseCount": calls, "usage": usage}
        call = _Call("Task", {"description": desc, "prompt": prompt, "subagent_type": agent_type},
                     [{"type": "text", "text": report}], result, False, duration)
        call.inline = sub_lines if inline else None
        return call

    def random_call(self, *, allow_task: bool = True) -> _Call:
        kind = self.rng.choices(*zip(*_TOOL_WEIGHTS))[0]
        if kind == "task" and not allow_task:
            kind = "read"
        return self.tool(kind)

    def tool(self, kind: str) -> _Call:
        return {"read": self.read, "bash": self.bash, "grep": self.grep, "glob": self.glob,
                "edit": self.edit, "write": self.write, "webfetch": self.webfetch,
                "task": self.task, "multiedit": lambda: self.edit(multi=True)}[kind]()

    # -- the loop ------------------------------------------------------------------------
    def step(self, calls: list[_Call], *, say: bool | None = None) -> None:
        rng, log = self.rng, self.log
        blocks: list[dict] = []
        if rng.random() < 0.3:
            blocks.append({"type": "thinking", "thinking": _prose(rng, rng.randrange(100, 1500)),
                           "signature": _b64(rng, rng.randrange(150, 600))})
        if say or say is None and rng.random() < 0.45:
            blocks.append({"type": "text", "text": _sentence(rng)})
        ids = ["toolu_01" + _b62(rng, 22) for _ in calls]
        for tid, call in zip(ids, calls):
            blocks.append({"type": "tool_use", "id": tid, "name": call.name, "input": call.input})
        log.assistant(blocks)
        for call in calls:
            if call.inline:
                log.lines.extend(call.inline)
                log.size += sum(len(x) + 1 for x in call.inline)
        log.clock += max(c.duration for c in calls)
        order = list(range(len(calls)))
        if len(order) > 1 and rng.random() < 0.3:
            rng.shuffle(order)
        touched = []
        for i in order:
            log.tool_result(ids[i], calls[i])
            log.wait(20, 300)
            if calls[i].name in ("Edit", "Write", "MultiEdit") and not calls[i].is_error:
                touched.append(calls[i].input["file_path"])
        if touched and log.v2:
            log.snapshot(log.turn_uid, update=True, paths=touched)

    def reply(self, *, cjk: bool = False) -> None:
        rng = self.rng
        blocks = []
        if rng.random() < 0.35:
            blocks.append({"type": "thinking", "thinking": _prose(rng, rng.randrange(80, 800)),
                           "signature": _b64(rng, rng.randrange(150, 600))})
        text = _prose(rng, rng.randrange(120, 1800), cjk=cjk)
        if rng.random() < 0.3:
            text += "\n\n```bash\n" + rng.choice(("pytest -q", "npm run build", "python -m app.main")) + "\n```"
        blocks.append({"type": "text", "text": text})
        self.log.assistant(blocks)

    def turn(self, prompt: str, *, steps: int, todos: bool, forced: list[str] = ()) -> None:
        rng, log = self.rng, self.log
        log.prompt(prompt)
        log.wait(1500, 9000)
        cjk = bool(re.search(r"[\u3040-\u30ff\u4e00-\u9fff]", prompt))
        items: list[dict] = []
        if todos:
            items = []
            for _ in range(rng.randrange(3, 6)):
                verb, what = rng.choice(_VERBS), f"{rng.choice(_NOUNS)} {rng.choice(_NOUNS)}"
                gerund = (verb[:-1] if verb.endswith("e") else verb) + "ing"
                items.append({"content": f"{verb.capitalize()} {what}", "status": "pending",
                              "activeForm": f"{gerund.capitalize()} {what}"})
            items[0]["status"] = "in_progress"
            self.step([self.todo([dict(x) for x in items], [])])
        done = 0
        for kind in forced:
            call = self._forced(kind)
            self.step([call])
        for n in range(steps):
            k = rng.choices((1, 2, 3, 4), (72, 17, 7, 4))[0]
            calls = [self.random_call() for _ in range(k)]
            if items and n % 3 == 2 and done < len(items) - 1:
                old = [dict(x) for x in items]
                items[done]["status"] = "completed"
                done += 1
                items[done]["status"] = "in_progress"
                calls.append(self.todo([dict(x) for x in items], old))
            self.step(calls)
            if self.size >= self.planned:
                break
        if self.edited and rng.random() < 0.45:
            self.step([self.commit()], say=True)
            self.edited = False
        if items:
            old = [dict(x) for x in items]
            for x in items:
                x["status"] = "completed"
            self.step([self.todo([dict(x) for x in items], old)])
        self.reply(cjk=cjk)

    def _forced(self, kind: str) -> _Call:
        if kind.startswith("mem:"):
            return self.read_memory(kind[4:])
        if kind == "read_big":
            f = _File(self.project.abs("data/fixtures/showcase.jsonl"), "json",
                      24_000 + self.rng.randrange(16_000))
            return self.read(f)
        if kind == "reread":
            return self.read_memory("CLAUDE.md")
        if kind == "edit_unread":
            return self.edit(unread=True)
        if kind == "edit":
            return self.edit()
        if kind in ("fail", "install"):
            return self.bash(kind)
        if kind == "pip":
            call = self.bash("install")
            while not call.input["command"].startswith(("pip", "uv")):
                call = self.bash("install")
            return call
        if kind == "npm":
            call = self.bash("install")
            while not call.input["command"].startswith("npm"):
                call = self.bash("install")
            return call
        if kind == "commit":
            return self.commit()
        if kind == "task":
            return self.task()
        return self.tool(kind)

    def feature_work(self) -> None:
        """The planted strategic showcase (script 3): three turns of a feature done cleanly.

        Turn 1 implements a feature item by item (a todo list, reads, edits, a test run per
        item, one failure fixed on the spot); turn 2 checks edge cases, the whole suite passes
        and every todo is completed: a task boundary past the threshold, but the edits are not
        committed yet (the policy reports it suppressed); turn 3 commits on the user's word.
        At that commit the last test run passed, nothing is left uncommitted and the last five
        results are no errors, so ``ctxlake suggest`` suggests compacting there. The call kinds
        are fixed (only their content is drawn), so the weighted count is the same for every
        seed: 54.7 at the completed todo list, 57.7 at the commit (threshold 50). Payloads
        stay those of an ordinary session (8 KiB at most), so the prompt never nears an
        automatic compaction; no prompt has a scenario keyword (docs/policies.md), so even
        ``scenario="auto"`` keeps the default threshold.
        """
        rng, log, project = self.rng, self.log, self.project
        base_cap, self.base_cap = self.base_cap, min(self.base_cap, 8 * KIB)
        code = [f for f in project.small if f.pool == project.lang]
        code = [f for f in code if f.nbytes <= 4 * KIB] or code     # edits record whole files
        tests = [f for f in code if f.rel.startswith("tests/")] or code
        sources = [f for f in code if f not in tests] or code
        picked = rng.sample(sources, 4) if len(sources) >= 4 else (sources * 4)[:4]
        noun, verb = rng.choice(_NOUNS), rng.choice(_VERBS)
        step = self.step

        # turn 1: the feature, item by item (weighted calls per line): 36.4
        log.prompt(f"Implement the {noun} {verb} feature described in the issue, with tests "
                   f"for each part")
        log.wait(1500, 9000)
        items = []
        gerund = (verb[:-1] if verb.endswith("e") else verb) + "ing"
        for _ in range(5):
            what = f"{rng.choice(_NOUNS)} {rng.choice(_NOUNS)}"
            items.append({"content": f"{verb.capitalize()} {what}", "status": "pending",
                          "activeForm": f"{gerund.capitalize()} {what}"})
        items[0]["status"] = "in_progress"
        step([self.todo([dict(x) for x in items], [])])                           # 1
        step([self.read_memory("CLAUDE.md")])                                     # 0.5
        step([self.glob(), self.grep()])                                          # 0.6
        step([self.read(f, ok=True) for f in picked[:2]])                         # 1
        step([self.read(f, ok=True) for f in picked[2:]])                         # 1
        step([self.read(tests[0], ok=True)])                                      # 0.5
        step([self.grep()])                                                       # 0.3
        step([self.bash("status")])                                               # 1
        for k in range(4):                                                        # 4 x 7
            target, test = picked[k], rng.choice(tests)
            step([self.read(target, ok=True), self.read(test, ok=True)])
            for _ in range(3):
                step([self.edit(target=target)])
            step([self.edit(target=test)])
            if k == 2:                      # a failure, fixed before the item is done: 2.5
                step([self.test_run(failing=test)])
                step([self.read(test, ok=True)])
                step([self.edit(target=target)])
            step([self.test_run()])
            old = [dict(x) for x in items]
            items[k]["status"], items[k + 1]["status"] = "completed", "in_progress"
            step([self.todo([dict(x) for x in items], old)])
        self.reply()
        # turn 2: edge cases, a new test file, the whole suite, the todo list completed: 18.3
        log.wait(20_000, 8 * 60_000)
        log.prompt("can you double-check the edge cases?")
        log.wait(1500, 9000)
        step([self.grep()])                                                       # 0.3
        for target in picked:                                                     # 4 x 3.5
            step([self.read(target, ok=True)])
            step([self.edit(target=target)])
            step([self.edit(target=rng.choice(tests))])
            step([self.test_run()])
        step([self.write()])                                                      # 1
        step([self.bash("diff")])                                                 # 1
        step([self.test_run()])                                                   # 1
        old = [dict(x) for x in items]
        for x in items:
            x["status"] = "completed"
        step([self.todo([dict(x) for x in items], old)])                          # 1
        self.reply()
        # turn 3: the status, the diff and the commit, in a clean state: 3
        log.wait(20_000, 5 * 60_000)
        log.prompt("looks good, please commit")
        log.wait(1500, 9000)
        step([self.bash("status"), self.bash("diff")])
        step([self.commit(f"Add {noun} {verb} with tests")], say=True)
        self.edited = False
        self.reply()
        self.base_cap = base_cap

    def compact(self, trigger: str) -> None:
        rng, log = self.rng, self.log
        if trigger == "manual":
            log.command("compact", stdout=None)
            log.wait(5000, 40000)
        pre = log.meter.prompt()
        log.system("compact_boundary", "Conversation compacted", "compactMetadata",
                         {"trigger": trigger, "preTokens": pre})
        log.wait(50, 500)
        summary = ("This session is being continued from a previous conversation that ran out of "
                   "context. The conversation is summarized below:\nAnalysis:\n" +
                   _prose(rng, rng.randrange(1500, 6000)) + "\n\nSummary:\n1. Primary Request and Intent:\n   " +
                   _sentence(rng) + "\n2. Pending Tasks:\n   - " + _sentence(rng))
        log.meter.reset()
        log.cached = log.meter.overhead       # the system prompt and tools stay cached
        log.user(summary, extra={"isVisibleInTranscriptOnly": True, "isCompactSummary": True})

    def microcompact(self) -> None:
        rng, log = self.rng, self.log
        ids = ["toolu_01" + _b62(rng, 22) for _ in range(rng.randrange(2, 9))]
        # old tool results are cleared from the prompt (the transcript keeps them)
        saved = min(rng.randrange(5000, 60000), log.meter.context // 2)
        log.system("microcompact_boundary", "Context microcompacted", "microcompactMetadata",
                   {"trigger": "auto", "preTokens": log.meter.prompt(), "tokensSaved": saved,
                    "compactedToolIds": ids, "clearedAttachmentUUIDs": []})
        log.meter.context -= saved
        log.cached = log.meter.overhead

    def run(self) -> None:
        rng, log, project = self.rng, self.log, self.project
        if not log.v2 and rng.random() < 0.25:
            log.emit({"type": "summary", "summary": _sentence(rng, 6), "leafUuid": _uuid4(rng)})
        if self.script == 0 and rng.random() < 0.2:
            log.command(rng.choice(("clear", "model", "context")), stdout="")
            log.wait(2000, 30000)
        first = True
        turns = 0
        if self.script == 3:
            self.feature_work()
            first, turns = False, 3
        while first or self.size < self.planned or self.script == 1 and turns < 3:
            if not first:
                if rng.random() < 0.1 or self.script == 1 and turns == 1:
                    log.wait(61 * 60_000, 300 * 60_000)          # idle: the user came back later
                    if rng.random() < 0.15:
                        self.microcompact()
                else:
                    log.wait(15_000, 12 * 60_000)
                if log.meter.prompt() > 150_000 and rng.random() < 0.6 or self.script == 1 and turns == 2:
                    self.compact("manual" if self.script == 1 or rng.random() < 0.2 else "auto")
            forced: list[str] = []
            lang = None
            if self.script == 1 and turns == 0:
                lang = "ja"
                forced = ["mem:CLAUDE.md", "mem:.claude/CLAUDE.md", "mem:user", "read_big",
                          "fail", "edit_unread", "edit", "pip", "npm", "task", "reread", "commit"]
            elif self.script == 1 and turns == 1:
                forced = ["mem:escape", "webfetch"]
            elif self.script == 2 and turns == 0:
                forced = ["task"]
            elif first:
                if rng.random() < 0.45:
                    forced.append("mem:CLAUDE.md")
                if rng.random() < 0.12:
                    forced.append("mem:.claude/CLAUDE.md")
                if rng.random() < 0.2:
                    forced.append("mem:user")
            prompt = _prompt(rng, project, first=first, lang=lang)
            if self.script == 1 and turns == 0:
                prompt += " ✅🚀"
            steps = max(1, min(40, int(rng.lognormvariate(1.8, 0.8))))
            self.turn(prompt, steps=steps, todos=self.script == 1 and turns == 0 or rng.random() < 0.25,
                      forced=forced)
            first = False
            turns += 1
        if rng.random() < 0.3:
            log.wait(5000, 120_000)
            log.command("exit", stdout=rng.choice(("Goodbye!", "See ya!", "Bye!")))
        self.files.insert(0, (self.main_rel, b"\n".join(log.lines) + b"\n", log.clock))


# ---------------------------------------------------------------------------------------
# Gemini CLI
# ---------------------------------------------------------------------------------------
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


def _gemini_call(rng: Random, project: _Project, clock: int, cap: int,
                 memory: bool = False) -> tuple[dict, int]:
    """One tool call with its result (Gemini keeps both in the model's message); its end time."""
    pools = _pools()
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
        response: dict[str, Any] = {"output": "\n".join(_file_lines(f.pool, f.start, nbytes))}
    elif name == "read_many_files":
        fs = rng.sample(project.small, 3)
        args = {"paths": [x.rel for x in fs]}
        response = {"output": "\n".join(f"--- {project.abs(x.rel)} ---\n\n" + "\n".join(_file_lines(x.pool, x.start, min(x.nbytes, cap // 3)))
                                        for x in fs)}
    elif name == "run_shell_command":
        cmd = rng.choice(("npm test", "pytest -q", "git status", "ls -la", "npm install", "pip install -r requirements.txt",
                          "git diff", "git add -A && git commit -m \"update\"", "python3 hoge.py"))
        code = 1 if rng.random() < 0.12 else 0
        out = pools[rng.choice(("log", "pytest", "npm", "pip", "diff"))].text(rng, _payload_size(rng, cap))
        args = {"command": cmd, "description": _sentence(rng, 6)}
        response = {"output": f"Command: {cmd}\nDirectory: (root)\nOutput: {out}\nError: (none)\n"
                              f"Exit Code: {code}\nSignal: 0\nBackground PIDs: (none)\nProcess Group PGID: {rng.randrange(1000, 60000)}"}
        display = out[:2000]
    elif name == "glob":
        args = {"pattern": rng.choice(("**/*.py", "**/*.ts", "src/**"))}
        files = [project.abs(f.rel) for f in rng.sample(project.files, rng.randrange(1, 20))]
        response = {"output": f"Found {len(files)} file(s) matching \"{args['pattern']}\" within {project.cwd}, sorted by modification time (newest first):\n" + "\n".join(files)}
    elif name == "grep_search":
        args = {"pattern": rng.choice(_VERBS) + "_" + rng.choice(_NOUNS), "path": project.cwd}
        response = {"output": pools["grep"].text(rng, _payload_size(rng, cap))}
    elif name == "replace":
        f = rng.choice(project.small)
        old = project.lines(f)[0]
        args = {"file_path": project.abs(f.rel), "old_string": old, "new_string": old + " # updated",
                "instruction": _sentence(rng)}
        if rng.random() < 0.1:
            status = "error"
            response = {"error": "Failed to edit, 0 occurrences found for old_string in " + args["file_path"]}
        else:
            response = {"output": f"Successfully modified file: {args['file_path']} (1 replacements)."}
    elif name == "write_file":
        path = project.abs(f"src/{rng.choice(_NOUNS)}.{project.lang}")
        args = {"content": pools[project.lang].text(rng, _payload_size(rng, min(cap, 30_000), big=False)), "file_path": path}
        response = {"output": f"Successfully created and wrote to new file: {path}."}
    elif name == "web_fetch":
        args = {"prompt": f"Summarise {rng.choice(_WEB)}"}
        response = {"output": pools["web"].text(rng, _payload_size(rng, cap))}
    else:
        todos = [{"description": _sentence(rng, 5), "status": rng.choice(("pending", "in_progress", "completed"))}
                 for _ in range(rng.randrange(2, 6))]
        args = {"todos": todos}
        response = {"output": "Successfully updated the todo list."}
    call_id = f"{name}-{clock}-{_hex(rng, 14)}"
    display_name, description = _GEMINI_DESCRIPTIONS[name]
    end = clock + rng.randrange(100, 20000)
    call = {"id": call_id, "name": name, "args": args,
            "result": [{"functionResponse": {"id": call_id, "name": name, "response": response}}],
            "status": status, "timestamp": _iso(end)}
    if display is not None:
        call["resultDisplay"] = display
    call.update(displayName=display_name, description=description,
                renderOutputAsMarkdown=name not in ("run_shell_command",))
    return call, end


def _gemini_thought_text(thought: dict) -> str:
    """A thought as the transcript shows it (its subject, then its description)."""
    return "\n\n".join(t for t in (thought["subject"], thought["description"]) if t)


def _gemini_session(rng: Random, project: _Project, *, start: int, planned: int, cap: int,
                    jsonl: bool, script: bool, model: str | None = None) -> tuple[str, bytes, int]:
    model = model or rng.choice(("gemini-2.5-pro", "gemini-2.5-flash", "gemini-2.5-pro"))
    session_id = _uuid4(rng)
    clock = start
    lines: list[bytes] = []
    size = 0
    messages: list[dict] = []

    def put(obj: dict) -> None:
        nonlocal size
        if jsonl:
            data = orjson.dumps(obj)
            lines.append(data)
            size += len(data) + 1
        else:
            size += len(orjson.dumps(obj)) + 40

    def upsert(msg: dict) -> None:
        for i, old in enumerate(messages):
            if old["id"] == msg["id"]:
                messages[i] = msg
                break
        else:
            messages.append(msg)
        put(msg)

    def thoughts(at: int) -> list[dict]:
        return [{"subject": f"{rng.choice(_VERBS).capitalize()} the {rng.choice(_NOUNS)}",
                 "description": _prose(rng, rng.randrange(100, 600)), "timestamp": _iso(at)}
                for _ in range(rng.randrange(1, 3))]

    meter = _Meter(f"usage:gemini:{session_id}", model, (9_000, 13_000))
    previous: list[int] = []           # the last prompt (implicit caching serves its prefix)

    def tokens(msg: dict) -> dict:
        """The usage of the call that wrote ``msg`` (thoughts, content, tool calls); its tool
        results join the context of the next call."""
        prompt = meter.prompt()
        summary = sum(meter.think(_gemini_thought_text(t), shown=False) for t in msg["thoughts"])
        meter.write(_text_of(msg["content"]) if isinstance(msg["content"], list) else msg["content"])
        calls = msg.get("toolCalls") or []
        for call in calls:
            meter.call(orjson.dumps(call["args"]).decode())
        out = meter.output()
        for call in calls:
            response = call["result"][0]["functionResponse"]["response"]
            meter.add(response.get("output", response.get("error", "")), code=True)
        cached = _cached(prompt, previous[-1] if previous else None, 1024) \
            if meter.rng.random() < 0.75 else 0
        previous[:] = [prompt]
        thoughts = meter.hidden(summary)
        return {"input": prompt, "output": out, "cached": cached, "thoughts": thoughts, "tool": 0,
                "total": prompt + out + thoughts}

    def user_turn(text: str) -> None:
        meter.new_turn()
        meter.add(text)

    head = {"sessionId": session_id, "projectHash": project.gemini_hash, "startTime": _iso(clock),
            "lastUpdated": _iso(clock), "kind": "main"}
    if jsonl:
        put(head)
    turn = 0
    rewound = False
    while turn == 0 or size < planned or script and turn < 4:
        clock += rng.randrange(20_000, 15 * 60_000) if turn else 0
        if turn and rng.random() < 0.06:
            clock += rng.randrange(61, 200) * 60_000
        if jsonl and turn == 2 and (script or rng.random() < 0.1):
            # chat compression: the recorded history is replaced by a summary, then goes on
            messages[:] = [{"id": _uuid4(rng), "timestamp": _iso(clock), "type": "user",
                            "content": [{"text": "<state_snapshot>\n" + _prose(rng, 1500) + "\n</state_snapshot>"}]},
                           {"id": _uuid4(rng), "timestamp": _iso(clock), "type": "gemini",
                            "content": [{"text": "Got it. Thanks for the additional context!"}]}]
            put({"$set": {"messages": messages, "lastUpdated": _iso(clock)}})
            meter.reset()
            for msg in messages:
                meter.add(_text_of(msg["content"]))
        text = _prompt(rng, project, first=turn == 0)
        if script and turn == 0:
            text = "GEMINI.md を読んでからテストを直して 🙏"
        user = {"id": _uuid4(rng), "timestamp": _iso(clock), "type": "user",
                "content": [{"text": text}] if jsonl else text}
        before_prompt = meter.state()
        upsert(user)
        user_turn(text)
        if jsonl:
            put({"$set": {"lastUpdated": _iso(clock)}})
        for step in range(max(1, int(rng.lognormvariate(1.3, 0.7)))):
            clock += rng.randrange(2000, 20000)
            # the scripted session reads GEMINI.md first, and again after its compression
            memory = script and turn in (0, 3) and step == 0 or turn == 0 and step == 0 and rng.random() < 0.3
            made = [_gemini_call(rng, project, clock, cap, memory=memory and i == 0)
                    for i in range(rng.choices((1, 2, 3), (75, 18, 7))[0])]
            calls = [c for c, _ in made]
            msg = {"id": _uuid4(rng), "timestamp": _iso(clock), "type": "gemini", "content": "",
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
                       "content": _sentence(rng), "thoughts": msg["thoughts"], "tokens": None,
                       "model": model, "toolCalls": calls}
                msg["tokens"] = tokens(msg)
                upsert(msg)
            clock = max(end for _, end in made)
            if size >= planned:
                break
        clock += rng.randrange(1500, 15000)
        reply = {"id": _uuid4(rng), "timestamp": _iso(clock), "type": "gemini",
                 "content": _prose(rng, rng.randrange(100, 1200), cjk=text != "" and bool(re.search(r"[\u3040-\u9fff]", text))),
                 "thoughts": thoughts(clock), "tokens": None, "model": model}
        usage = tokens(reply)
        if not jsonl:
            reply["tokens"] = usage
        upsert(dict(reply))
        if jsonl:
            put({"$set": {"lastUpdated": _iso(clock)}})
            upsert(dict(reply, tokens=usage))
            if not rewound and turn >= 1 and (script or rng.random() < 0.15):
                # the user rewinds: their last prompt and everything after it is dropped
                rewound = True
                put({"$rewindTo": user["id"]})
                messages[:] = messages[:next(i for i, m in enumerate(messages) if m["id"] == user["id"])]
                meter.restore(before_prompt)
                clock += rng.randrange(5000, 60000)
                followup = rng.choice(_FOLLOWUPS)
                upsert({"id": _uuid4(rng), "timestamp": _iso(clock), "type": "user",
                        "content": [{"text": followup}]})
                user_turn(followup)
                put({"$set": {"lastUpdated": _iso(clock)}})
        turn += 1
    stamp = _stamp(start, "%Y-%m-%dT%H-%M")
    folder = f"gemini/tmp/{project.gemini_hash}/chats"
    if jsonl:
        return f"{folder}/session-{stamp}-{session_id[:8]}.jsonl", b"\n".join(lines) + b"\n", clock
    head["lastUpdated"] = _iso(clock)
    head.pop("kind")
    doc = dict(head, messages=messages)
    return f"{folder}/session-{stamp}-{session_id[:8]}.json", orjson.dumps(doc, option=_INDENT), clock


# ---------------------------------------------------------------------------------------
# Codex CLI
# ---------------------------------------------------------------------------------------
def _codex_session(rng: Random, project: _Project, *, start: int, planned: int,
                   cap: int) -> tuple[str, bytes, int]:
    session_id = _uuid7(rng, start)
    clock = start
    lines: list[bytes] = []
    size = 0
    model = "gpt-5.1-codex-max"
    total = {"input_tokens": 0, "cached_input_tokens": 0, "output_tokens": 0,
             "reasoning_output_tokens": 0, "total_tokens": 0}
    last: dict | None = None
    rate = {"primary": {"used_percent": 0.0, "window_minutes": 300, "resets_at": start // 1000 + 18000},
            "secondary": {"used_percent": 0.0, "window_minutes": 10080, "resets_at": start // 1000 + 600000},
            "credits": {"has_credits": False, "unlimited": False, "balance": None}, "plan_type": None}

    def put(kind: str, payload: dict) -> None:
        nonlocal size
        data = orjson.dumps({"timestamp": _iso(clock), "type": kind, "payload": payload})
        lines.append(data)
        size += len(data) + 1

    def count(emitted_null: bool = False) -> None:
        info = None if emitted_null else {"total_token_usage": dict(total), "last_token_usage": dict(last or total),
                                           "model_context_window": 258400}
        put("event_msg", {"type": "token_count", "info": info, "rate_limits": rate})

    meter = _Meter(f"usage:codex:{session_id}", model, (7_000, 10_000))
    previous: list[tuple[int, int]] = []    # (prompt, clock) of the last call

    def spend(prompt: int, reasoning: int) -> None:
        """Record the call just written: ``prompt`` as it stood before it, its visible output
        from the meter and its hidden ``reasoning`` (part of Codex's output count)."""
        nonlocal last
        out = meter.output() + reasoning
        warm = previous and clock - previous[0][1] <= 10 * 60_000
        cached = _cached(prompt, previous[0][0] if warm else None, 128) if prompt >= 1024 else 0
        previous[:] = [(prompt, clock)]
        last = {"input_tokens": prompt, "cached_input_tokens": cached, "output_tokens": out,
                "reasoning_output_tokens": reasoning, "total_tokens": prompt + out}
        for key in total:
            total[key] += last[key]

    context = {"cwd": project.cwd, "approval_policy": "on-request",
               "sandbox_policy": {"type": "workspace-write", "network_access": False,
                                  "exclude_tmpdir_env_var": False, "exclude_slash_tmp": False},
               "model": model, "effort": rng.choice(("medium", "high", "low")), "summary": "auto"}
    put("session_meta", {"id": session_id, "timestamp": _iso(clock), "cwd": project.cwd,
                         "originator": "codex_cli_rs", "cli_version": "0.66.0", "instructions": None,
                         "source": "cli", "model_provider": "openai",
                         "git": {"commit_hash": _hex(rng, 40), "branch": project.branch or "main",
                                 "repository_url": f"git@github.com:acme/{project.name}.git"}})
    environment = (f"<environment_context>\n  <cwd>{project.cwd}</cwd>\n  <approval_policy>on-request</approval_policy>\n"
                   "  <sandbox_mode>workspace-write</sandbox_mode>\n  <network_access>restricted</network_access>\n"
                   "  <shell>zsh</shell>\n</environment_context>")
    put("response_item", {"type": "message", "role": "user", "content": [{"type": "input_text", "text": environment}]})
    meter.add(environment)
    turn = 0
    while turn == 0 or size < planned:
        clock += rng.randrange(2000, 10 * 60_000) if turn else 1800
        if turn and rng.random() < 0.07:
            clock += rng.randrange(61, 240) * 60_000
        text = _prompt(rng, project, first=turn == 0)
        put("response_item", {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]})
        meter.new_turn()
        meter.add(text)
        put("event_msg", {"type": "user_message", "message": text, "images": []})
        put("turn_context", context)
        if rng.random() < 0.6:
            put("response_item", {"type": "ghost_snapshot", "ghost_commit": {"id": _hex(rng, 40), "parent": _hex(rng, 40),
                                                                             "preexisting_untracked_files": [], "preexisting_untracked_dirs": []}})
        count(emitted_null=turn == 0)
        for step in range(max(1, int(rng.lognormvariate(1.5, 0.7)))):
            clock += rng.randrange(1500, 12000)
            summary = f"**{rng.choice(_VERBS).capitalize()} {rng.choice(_NOUNS)}**\n\n{_sentence(rng)}"
            prompt = meter.prompt()
            reasoning = meter.hidden(meter.think(summary, shown=False))
            put("event_msg", {"type": "agent_reasoning", "text": summary})
            put("response_item", {"type": "reasoning", "summary": [{"type": "summary_text", "text": summary}],
                                  "content": None, "encrypted_content": "gAAAAAB" + _b64(rng, rng.randrange(300, 1500))})
            call_id = "call_" + _b62(rng, 24)
            pick = rng.random()
            if pick < 0.2:
                f = rng.choice(project.small)
                patch = f"*** Begin Patch\n*** Update File: {f.rel}\n@@\n-{project.lines(f)[0]}\n+{project.lines(f)[0]}  # {_sentence(rng, 4)}\n*** End Patch"
                put("response_item", {"type": "custom_tool_call", "status": "completed", "call_id": call_id,
                                      "name": "apply_patch", "input": patch})
                meter.call(patch)
                spend(prompt, reasoning)
                count()
                ok = rng.random() > 0.08
                output = {"output": f"Success. Updated the following files:\nM {f.rel}\n" if ok else
                          f"apply_patch verification failed: Failed to find expected lines in {f.rel}",
                          "metadata": {"exit_code": 0 if ok else 1, "duration_seconds": round(rng.uniform(0, 2), 1)}}
                clock += rng.randrange(100, 3000)
                result = orjson.dumps(output).decode()
                put("response_item", {"type": "custom_tool_call_output", "call_id": call_id, "output": result})
                meter.add(result, code=True)
            elif pick < 0.28:
                plan = [{"step": _sentence(rng, 5), "status": rng.choice(("completed", "in_progress", "pending"))}
                        for _ in range(rng.randrange(2, 6))]
                arguments = orjson.dumps({"plan": plan}).decode()
                put("response_item", {"type": "function_call", "name": "update_plan",
                                      "arguments": arguments, "call_id": call_id})
                meter.call(arguments)
                spend(prompt, reasoning)
                count()
                put("response_item", {"type": "function_call_output", "call_id": call_id, "output": "Plan updated"})
                meter.add("Plan updated", code=True)
            else:
                if rng.random() < 0.3:
                    f = rng.choice(project.small + [project.by_rel["AGENTS.md"]])
                    cmd = rng.choice((f"sed -n '1,400p' {f.rel}", f"cat {f.rel}"))
                    out = "\n".join(_file_lines(f.pool, f.start, min(f.nbytes, cap)))
                else:
                    cmd = rng.choice(("rg -n TODO", "pytest -q", "npm test", "git status --short", "ls -la",
                                      "pip install -r requirements.txt", "npm install", "git commit -am \"wip\"",
                                      "python -m app.main"))
                    out = _pools()[rng.choice(("log", "pytest", "grep", "npm", "pip"))].text(rng, _payload_size(rng, cap))
                code = 1 if rng.random() < 0.1 else 0
                arguments = orjson.dumps({"command": cmd, "workdir": project.cwd}).decode()
                put("response_item", {"type": "function_call", "name": "shell_command",
                                      "arguments": arguments, "call_id": call_id})
                meter.call(arguments)
                spend(prompt, reasoning)
                count()
                clock += rng.randrange(100, 30000)
                result = f"Exit code: {code}\nWall time: {rng.uniform(0.1, 30):.1f} seconds\nOutput:\n{out}\n"
                put("response_item", {"type": "function_call_output", "call_id": call_id, "output": result})
                meter.add(result, code=True)
            put("turn_context", context)
            count()
            if size >= planned:
                break
        clock += rng.randrange(1000, 9000)
        answer = _prose(rng, rng.randrange(100, 1500), cjk=bool(re.search(r"[\u3040-\u9fff]", text)))
        put("event_msg", {"type": "agent_message", "message": answer})
        put("response_item", {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": answer}]})
        prompt = meter.prompt()
        meter.write(answer)
        # the answer's reasoning, when there is any, leaves no summary
        spend(prompt, meter.hidden(meter.rng.randrange(0, 60)) if meter.rng.random() < 0.3 else 0)
        count()
        turn += 1
    rel = f"codex/sessions/{_stamp(start, '%Y/%m/%d')}/rollout-{_stamp(start, '%Y-%m-%dT%H-%M-%S')}-{session_id}.jsonl"
    return rel, b"\n".join(lines) + b"\n", clock


# ---------------------------------------------------------------------------------------
# OpenAI chat / Anthropic Messages logs (one conversation per line)
# ---------------------------------------------------------------------------------------
def _conversation(rng: Random, project: _Project, style: str, cap: int) -> dict:
    pools = _pools()
    msgs: list[dict] = []
    for turn in range(rng.randrange(1, 4)):
        msgs.append({"role": "user", "content": _prompt(rng, project, first=turn == 0)})
        for _ in range(rng.randrange(0, 5)):
            f = rng.choice(project.small)
            name = rng.choice(("read_file", "run_shell", "search_code"))
            args = {"path": project.abs(f.rel)} if name == "read_file" else \
                {"command": rng.choice(("pytest -q", "ls src", "git diff"))} if name == "run_shell" else \
                {"query": rng.choice(_NOUNS)}
            out = "\n".join(_file_lines(f.pool, f.start, min(f.nbytes, cap))) if name == "read_file" else \
                pools[rng.choice(("pytest", "grep", "log"))].text(rng, _payload_size(rng, cap))
            failed = rng.random() < 0.05
            if style == "openai":
                call_id = "call_" + _b62(rng, 24)
                msgs.append({"role": "assistant", "content": None, "tool_calls": [
                    {"id": call_id, "type": "function",
                     "function": {"name": name, "arguments": orjson.dumps(args).decode()}}]})
                msgs.append({"role": "tool", "tool_call_id": call_id,
                             "content": ("Error: " + _sentence(rng)) if failed else out})
            else:
                call_id = "toolu_01" + _b62(rng, 22)
                msgs.append({"role": "assistant", "content": [
                    {"type": "text", "text": _sentence(rng)},
                    {"type": "tool_use", "id": call_id, "name": name, "input": args}]})
                result = {"type": "tool_result", "tool_use_id": call_id, "content": out}
                if failed:
                    result = {"type": "tool_result", "tool_use_id": call_id,
                              "content": "Error: " + _sentence(rng), "is_error": True}
                msgs.append({"role": "user", "content": [result]})
        answer = _prose(rng, rng.randrange(100, 1500))
        msgs.append({"role": "assistant", "content": answer if style == "openai" or rng.random() < 0.5
                     else [{"type": "text", "text": answer}]})
    if style == "openai":
        msgs.insert(0, {"role": "system", "content": "You are a coding assistant working in " + project.cwd})
        model = rng.choice(("gpt-5.1-codex-max", "gpt-5.1-codex-max", UNPRICED_MODEL))
        return {"id": "conv_" + _b62(rng, 20), "model": model, "messages": msgs}
    model = rng.choice(("claude-haiku-4-5-20251001", "claude-sonnet-4-5-20250929"))
    return {"id": "msgconv_" + _b62(rng, 20), "model": model,
            "system": "You are a coding assistant working in " + project.cwd, "messages": msgs}


# ---------------------------------------------------------------------------------------
# SWE-agent / mini-SWE-agent trajectories
# ---------------------------------------------------------------------------------------
def _swe_trajectory(rng: Random, target: int, *, v1: bool) -> tuple[str, bytes]:
    pools = _pools()
    repo = rng.choice(("astropy__astropy", "django__django", "sympy__sympy", "requests__requests"))
    instance = f"{repo}-{rng.randrange(1000, 20000)}"
    root = "/" + repo
    agent = "main" if v1 else "primary"
    history: list[dict] = [{"role": "system", "content": "SETTING: You are an autonomous programmer, and you're working directly in the command line with a special interface.\n" + _prose(rng, 600), "agent": agent}]
    issue = f"We're currently solving the following issue within our repository. Here's the issue text:\nISSUE:\n{_prose(rng, 600)}\r\n\r\n```python\r\n{_pools()['py'].text(rng, 300)}\r\n```\n\nINSTRUCTIONS:\n{_prose(rng, 800)}"
    if v1:
        history[0]["message_type"] = "system_prompt"
        history.append({"role": "user", "content": issue, "agent": agent, "message_type": "observation"})
    else:
        history.append({"role": "user", "content": "Here is a demonstration of how to correctly accomplish this task.\n" + _prose(rng, 1000),
                        "agent": agent, "is_demo": True})
        history.append({"role": "user", "content": issue, "agent": agent})
    trajectory: list[dict] = []
    # the run's totals are the sums over its calls (tools' schemas with function calling)
    meter = _Meter(f"usage:swe:{instance}:{v1}", "gpt-4o" if v1 else "gpt-4", (900, 1400) if v1 else (20, 60))
    for msg in history:
        meter.add(msg["content"])
    sent = received = 0
    size = sum(len(m["content"]) for m in history)
    open_file = "n/a"
    while size < target or len(trajectory) < 3:
        f = f"{root}/{rng.choice(_NOUNS)}/{rng.choice(_NOUNS)}.py"
        action, fn, args = rng.choice((
            (f"open \"{f}\"", "open", {"path": f}),
            (f"search_dir \"{rng.choice(_NOUNS)}\"", "search_dir", {"search_term": rng.choice(_NOUNS)}),
            ("python reproduce.py", "bash", {"command": "python reproduce.py"}),
            (f"find_file {rng.choice(_NOUNS)}.py", "find_file", {"file_name": rng.choice(_NOUNS) + ".py"})))
        if fn == "open":
            open_file = f
        observation = pools["py"].text(rng, _payload_size(rng, max(2000, min(60_000, target // 6)), big=False))
        observation = observation.replace("\n", "\r\n")
        thought = _prose(rng, rng.randrange(100, 500))
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
            call_id = "call_" + _b62(rng, 24)
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
    info = {"submission": submission, "exit_status": "submitted", "edited_files30": "[File: x.py]\n" + _pools()["py"].text(rng, 500),
            "model_stats": stats}
    doc: dict[str, Any] = {"environment": "main" if v1 else "swe_main", "trajectory": trajectory,
                           "history": history, "info": info}
    if v1:
        doc["replay_config"] = orjson.dumps({"agent": {"model": {"name": "gpt-4o", "temperature": 0.0}},
                                             "env": {"repo": {"github_url": f"https://github.com/{repo.replace('__', '/')}"}}}).decode()
    run = "gpt4o__default__t-0.00" if v1 else "gpt4__swe-bench-dev__default__t-0.00"
    return f"swe-agent/trajectories/{run}/{instance}.traj", orjson.dumps(doc, option=_INDENT)


def _mini_trajectory(rng: Random, target: int, *, tools: bool, clock: int) -> tuple[str, bytes]:
    pools = _pools()
    repo = rng.choice(("pvlib__pvlib-python", "pylint-dev__pylint", "sphinx-doc__sphinx"))
    instance = f"{repo}-{rng.randrange(1000, 9000)}"
    model = "deepseek/deepseek-chat" if tools else "anthropic/claude-sonnet-4-5-20250929"
    msgs: list[dict] = [{"role": "system", "content": "You are a helpful assistant that can interact with a computer shell to solve programming tasks."},
                        {"role": "user", "content": f"<pr_description>\nConsider the following PR description:\n{_prose(rng, 900)}\n</pr_description>\n\n<instructions>\n{_prose(rng, 1500)}\n</instructions>"}]
    # the overhead: the bash tool's schema (tool calling) or the chat template (text mode)
    meter = _Meter(f"usage:mini:{instance}:{tools}", model, (500, 900) if tools else (20, 60))
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
        out = pools[rng.choice(("py", "pytest", "grep"))].text(rng, _payload_size(rng, max(2000, min(50_000, target // 6)), big=False))
        thought = "THOUGHT: " + _prose(rng, rng.randrange(100, 600))
        clock += rng.randrange(2000, 20000)
        calls += 1
        prompt = meter.prompt()
        if tools:
            call_id = f"call_00_{_b62(rng, 24)}"
            content = thought if rng.random() < 0.7 else ""
            arguments = orjson.dumps({"command": cmd}).decode()
            meter.write(content)
            meter.call(arguments)
        else:
            content = f"{thought}\n\n```bash\n{cmd}\n```"
            meter.write(content)
        completion = meter.output()
        usage = {"completion_tokens": completion, "prompt_tokens": prompt, "total_tokens": prompt + completion,
                 "prompt_tokens_details": {"cached_tokens": _cached(prompt, previous, 64)}}
        previous = prompt
        cost = prompt * price_in + completion * price_out
        spent += cost
        if tools:
            tool_calls = [{"index": 0, "function": {"arguments": arguments, "name": "bash"},
                           "id": call_id, "type": "function"}]
            msgs.append({"content": content, "role": "assistant", "tool_calls": tool_calls, "function_call": None,
                         "provider_specific_fields": None,
                         "extra": {"actions": [{"command": cmd, "tool_call_id": call_id}],
                                   "response": {"id": _uuid4(rng), "created": clock // 1000, "model": "deepseek-chat",
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
                         "extra": {"response": {"id": "gen-" + _b62(rng, 20), "model": model, "object": "chat.completion",
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
    return f"mini-swe-agent/{instance}/{instance}.traj.json", orjson.dumps(doc, option=_INDENT)


# ---------------------------------------------------------------------------------------
# The archive
# ---------------------------------------------------------------------------------------
class _Generator:
    def __init__(self, out: Path, seed: int, size: int, start: date,
                 progress: Callable[[int, int], None] | None):
        self.out = out
        self.progress = progress
        self.done = 0
        self.seed = seed
        self.size = size
        self.t0 = int(datetime(start.year, start.month, start.day, tzinfo=timezone.utc).timestamp() * 1000)
        self.projects = _make_projects(seed)
        self.summary = DemoSummary(out=str(out), seed=seed, size_target=size)
        self.manifest: list[tuple[str, int]] = []

    def write(self, fmt: str, rel: str, data: bytes, mtime_ms: int) -> None:
        path = self.out / rel
        _write_own(self.out, path, data)
        os.utime(path, ns=(mtime_ms * 1_000_000, mtime_ms * 1_000_000))
        self.manifest.append((rel, len(data)))
        self.done += len(data)
        if self.progress:
            self.progress(min(self.done, self.size), self.size)
        stats = self.summary.formats.setdefault(fmt, {"files": 0, "bytes": 0, "sessions": 0})
        stats["files"] += 1
        stats["bytes"] += len(data)

    def session_start(self, rng: Random) -> int:
        day = rng.randrange(SPAN_DAYS)
        hour = rng.choices(range(24), [1, 1, 1, 1, 1, 1, 2, 4, 8, 10, 10, 9, 7, 9, 10, 10, 9, 8, 6, 5, 4, 3, 2, 1])[0]
        return self.t0 + ((day * 24 + hour) * 3600 + rng.randrange(3600)) * 1000 + rng.randrange(1000)

    def budgets(self) -> dict[str, int]:
        s = self.size
        small = max(8_000, min(400_000, int(s * 0.0025)))
        chat = max(12_000, int(s * 0.015))
        budgets = {"swe_agent": 2 * small, "mini_swe_agent": 2 * small, "openai_chat": chat,
                   "anthropic_messages": chat, "gemini_cli": max(40_000, int(s * 0.07)),
                   "codex_cli": max(40_000, int(s * 0.09))}
        budgets["claude_code"] = max(100_000, s - sum(budgets.values()))
        return budgets

    def run(self) -> DemoSummary:
        budgets = self.budgets()
        self.trajectories(budgets["swe_agent"] // 2)
        self.chats("openai_chat", "openai", budgets["openai_chat"])
        self.chats("anthropic_messages", "anthropic", budgets["anthropic_messages"])
        self.gemini(budgets["gemini_cli"])
        self.codex(budgets["codex_cli"])
        # Claude Code is written last and absorbs the others' overshoot: it is the most
        # finely controlled (sessions stop between steps), so the total lands on the target.
        self.claude(max(budgets["claude_code"] // 2, self.size - self.done))
        s = self.summary
        s.files = len(self.manifest)
        s.size_bytes = sum(n for _, n in self.manifest)
        s.sessions = sum(v["sessions"] for v in s.formats.values())
        self.manifest.sort()
        marker = {"generator": GENERATOR, "seed": self.seed, "size_target": self.size,
                  "files": [{"path": rel, "bytes": n} for rel, n in self.manifest],
                  "held_back_files": s.held_back_files}
        _write_own(self.out, self.out / MARKER, orjson.dumps(marker, option=_INDENT) + b"\n")
        os.utime(self.out / MARKER, ns=(self.t0 * 1_000_000, self.t0 * 1_000_000))
        return s

    def claude(self, budget: int) -> None:
        rng = Random(f"{self.seed}:claude")
        written = 0
        index = 0
        latest: tuple[int, str, dict, _Project] | None = None
        while written < budget:
            remaining = budget - written
            planned = int(min(max(rng.lognormvariate(math.log(80_000), 1.3), 12_000), 40_000_000))
            if index == 0:
                planned = max(planned, 120_000)
            if index < 2:                    # leave room for the planted session (index 2)
                planned = min(planned, remaining // 3)
            planned = min(planned, remaining)
            if remaining - planned < 30_000:
                planned = remaining
            cap = max(8 * KIB, min(6_000_000, remaining // 8))
            project = self.projects[index % len(self.projects)] if index < 2 else rng.choice(self.projects)
            start = self.session_start(rng)
            session = _ClaudeSession(self, Random(f"{self.seed}:claude:{index}"), project, start=start,
                                     planned=planned, cap=cap, script=index + 1 if index < 3 else 0)
            session.run()
            for rel, data, mtime in session.files:
                self.write("claude_code", rel, data, mtime)
                written += len(data)
            self.summary.formats["claude_code"]["sessions"] += 1
            self.summary.subagent_sessions += session.subagents
            end = session.files[0][2]
            if latest is None or end > latest[0]:
                latest = (end, session.main_rel, dict(session.log.head, parent=session.log.parent), project)
            index += 1
        if latest is not None:
            self.hold_back(*latest)

    def hold_back(self, clock: int, rel: str, head: dict, project: _Project) -> None:
        """End the newest session with two thirds of a line: a transcript still being written."""
        path = self.out / rel
        rng = Random(f"{self.seed}:held-back")
        record = {"parentUuid": head.pop("parent")}
        record.update(head)
        record.update({"type": "user", "message": {"role": "user", "content": _prompt(rng, project, first=True)},
                       "uuid": _uuid4(rng), "timestamp": _iso(clock + 60_000)})
        data = orjson.dumps(record)
        partial = data[: len(data) * 2 // 3]
        with open(path, "ab") as handle:
            handle.write(partial)
        mtime = clock + 60_000
        os.utime(path, ns=(mtime * 1_000_000, mtime * 1_000_000))
        self.manifest = [(r, n + len(partial)) if r == rel else (r, n) for r, n in self.manifest]
        self.summary.formats["claude_code"]["bytes"] += len(partial)
        self.summary.held_back_files.append(rel)

    def gemini(self, budget: int) -> None:
        rng = Random(f"{self.seed}:gemini")
        written = 0
        index = 0
        while written < budget or index < 2:            # always one JSONL and one legacy file
            remaining = max(budget - written, 20_000)
            planned = min(remaining, int(min(max(rng.lognormvariate(math.log(60_000), 1.0), 10_000), 5_000_000)))
            if index == 0:
                planned = min(planned, budget // 2)     # room for a legacy session after it
            elif remaining - planned < 20_000:
                planned = remaining
            jsonl = index % 4 != 1          # a quarter legacy whole-JSON
            project = rng.choice(self.projects)
            rel, data, mtime = _gemini_session(Random(f"{self.seed}:gemini:{index}"), project,
                                               start=self.session_start(rng), planned=planned,
                                               cap=max(4 * KIB, min(400_000, remaining // 8)),
                                               jsonl=jsonl, script=index == 0,
                                               model=("gemini-2.5-pro", "gemini-2.5-flash")[index] if index < 2 else None)
            self.write("gemini_cli", rel, data, mtime)
            self.summary.formats["gemini_cli"]["sessions"] += 1
            written += len(data)
            index += 1

    def codex(self, budget: int) -> None:
        rng = Random(f"{self.seed}:codex")
        written = 0
        index = 0
        while written < budget:
            remaining = budget - written
            planned = min(remaining, int(min(max(rng.lognormvariate(math.log(80_000), 1.0), 10_000), 8_000_000)))
            if remaining - planned < 20_000:
                planned = remaining
            project = rng.choice(self.projects)
            rel, data, mtime = _codex_session(Random(f"{self.seed}:codex:{index}"), project,
                                              start=self.session_start(rng), planned=planned,
                                              cap=max(4 * KIB, min(600_000, remaining // 8)))
            self.write("codex_cli", rel, data, mtime)
            self.summary.formats["codex_cli"]["sessions"] += 1
            written += len(data)
            index += 1

    def chats(self, fmt: str, style: str, budget: int) -> None:
        rng = Random(f"{self.seed}:{style}")
        for part in range(2):
            lines: list[bytes] = []
            size = 0
            while size < budget // 2 or not lines:
                conv = _conversation(rng, rng.choice(self.projects), style, max(KIB, min(60_000, budget // 30)))
                data = orjson.dumps(conv)
                lines.append(data)
                size += len(data) + 1
            day = _stamp(self.t0 + part * 7 * 86_400_000, "%Y-%m-%d")
            name = "chat" if style == "openai" else "messages"
            self.write(fmt, f"{style}/{name}-{day}.jsonl", b"\n".join(lines) + b"\n",
                       self.t0 + (part * 7 + 6) * 86_400_000)
            self.summary.formats[fmt]["sessions"] += len(lines)

    def trajectories(self, each: int) -> None:
        rng = Random(f"{self.seed}:trajectories")
        for v1 in (True, False):
            rel, data = _swe_trajectory(rng, each, v1=v1)
            self.write("swe_agent", rel, data, self.session_start(rng))
            self.summary.formats["swe_agent"]["sessions"] += 1
        for tools in (True, False):
            start = self.session_start(rng)
            rel, data = _mini_trajectory(rng, each, tools=tools, clock=start)
            self.write("mini_swe_agent", rel, data, start + 3_600_000)
            self.summary.formats["mini_swe_agent"]["sessions"] += 1


def _write_own(out: Path, path: Path, data: bytes) -> None:
    """Write a demo file under ``out``, never through a symlink (in its folders or at its name)."""
    refuse_symlinks(out, path.parent, what="demo archive")
    path.parent.mkdir(parents=True, exist_ok=True)
    refuse_symlinks(out, path, what="demo archive")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644)
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)


def _listed_file(out: Path, item) -> Path | None:
    """The file a demo marker entry names, when it is one this generator wrote: a relative
    path inside ``out`` (no ``..``, no symlink on the way), a regular file of the listed size."""
    if not isinstance(item, dict) or not isinstance(item.get("path"), str) \
            or not isinstance(item.get("bytes"), int):
        return None
    rel = Path(item["path"])
    if rel.is_absolute() or ".." in rel.parts or not rel.parts:
        return None
    current = out
    for part in rel.parts:
        current = current / part
        if current.is_symlink():
            return None
    try:
        st = current.lstat()
    except OSError:
        return None
    if not stat.S_ISREG(st.st_mode) or st.st_size != item["bytes"]:
        return None
    return current


def _clear_previous(out: Path) -> None:
    """Remove a previous demo archive in ``out``: only the files its marker lists that this
    generator wrote (see :func:`_listed_file`); a marker naming anything else (an absolute or
    ``../`` path, a symlink, a file of another size) deletes nothing of it."""
    marker = out / MARKER
    if not out.exists():
        return
    if not marker.exists() or marker.is_symlink() or not marker.is_file():
        if any(out.iterdir()):
            raise UsageError(f"{out} exists and is not a demo archive",
                             path=str(out), hint="choose an empty or new folder with --out")
        return
    try:
        listed = orjson.loads(marker.read_bytes()).get("files", [])
    except (orjson.JSONDecodeError, AttributeError):
        raise UsageError(f"{out} holds an unreadable demo marker", path=str(marker),
                         hint="choose an empty or new folder with --out") from None
    for item in listed if isinstance(listed, list) else []:
        path = _listed_file(out, item)
        if path is not None:
            path.unlink()
    marker.unlink()
    for dirpath, dirnames, filenames in sorted(os.walk(out, topdown=False), key=lambda t: -len(t[0])):
        if Path(dirpath) != out and not os.listdir(dirpath):
            os.rmdir(dirpath)


def write_demo_archive(out: Path, *, size_bytes: int, seed: int, start: date | None = None,
                       progress: Callable[[int, int], None] | None = None) -> DemoSummary:
    """Write a deterministic demo archive of about ``size_bytes`` under ``out``.

    A previous demo archive in ``out`` (recognised by its marker file) is replaced; any other
    non-empty folder is refused. ``progress(done_bytes, target_bytes)`` is called after each
    file. See the module docstring for the determinism contract.
    """
    if size_bytes < MIN_SIZE:
        raise UsageError(f"a demo archive needs at least {_human(MIN_SIZE)} (asked for {_human(size_bytes)})",
                         hint="use e.g. --size 2MB")
    out = Path(out)
    _clear_previous(out)
    out.mkdir(parents=True, exist_ok=True)
    return _Generator(out, seed, size_bytes, start or DEFAULT_START, progress).run()
