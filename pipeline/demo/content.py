"""The text the demo archive is made of, shared by every format: word banks and sentences,
prose, user prompts, and the fixed text pools (code, logs, test runs, diffs, web pages...)
that file contents and tool results are windows over. The pools are built once from a fixed
seed, so a payload is a (pool, start, size) window: the same bytes in every run.
"""

from __future__ import annotations

from functools import lru_cache
from typing import TYPE_CHECKING

import orjson

from pipeline.demo.context import KIB, Draws

if TYPE_CHECKING:
    from pipeline.demo.projects import Project

WEB = ["https://docs.python.org/3/library/asyncio-task.html", "https://nextjs.org/docs/app/building-your-application/routing",
       "https://docs.pydantic.dev/latest/concepts/validators/", "https://developer.mozilla.org/en-US/docs/Web/API/Fetch_API",
       "https://duckdb.org/docs/data/json/overview", "https://www.postgresql.org/docs/current/indexes-types.html"]

NOUNS = ("account adapter alert batch buffer cache client config context cursor dataset "
         "decoder device event export feature filter gateway handler index invoice job "
         "ledger loader manifest metric model monitor node order parser payload payment "
         "pipeline policy profile queue record report request resolver route schema "
         "session shard signal snapshot source stage storage stream task template tenant "
         "token trace upload user vector webhook widget worker").split()
VERBS = ("apply build check collect compute create decode delete dispatch emit encode "
         "ensure fetch filter flush format handle load merge normalize parse persist "
         "prepare publish refresh register render resolve retry save scan serialize "
         "split sync transform update validate").split()
ADJ = ("active async cached cold default empty expired failed hidden internal invalid "
       "large legacy local missing nested optional partial pending primary raw remote "
       "stale strict temporary unknown").split()
EMOJI = ["✅", "🚀", "🐛", "🔥", "📦", "⚠️", "🎉", "👍", "🧪", "📝", "👨‍💻", "🇯🇵", "🙏", "💡",
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


def sentence(r: Draws, words: int | None = None) -> str:
    n = words or r.randrange(6, 18)
    parts = []
    for i in range(n):
        pick = r.random()
        if pick < 0.45:
            parts.append(r.choice(NOUNS))
        elif pick < 0.7:
            parts.append(r.choice(VERBS))
        elif pick < 0.85:
            parts.append(r.choice(ADJ))
        else:
            parts.append(r.choice(("the", "a", "to", "of", "when", "and", "for", "in", "is")))
    text = " ".join(parts)
    return text[0].upper() + text[1:] + "."


def cjk_sentence(r: Draws) -> str:
    bank = _JA if r.random() < 0.6 else _ZH
    sep = "、" if bank is _JA else "，"
    end = "。" if bank is _JA else "。"
    return sep.join(r.sample(bank, r.randrange(1, 4))) + end


def _py_block(r: Draws) -> list[str]:
    noun, other = r.sample(NOUNS, 2)
    verb = r.choice(VERBS)
    cls = noun.capitalize() + r.choice(("Service", "Client", "Repository", "Handler", "Parser"))
    kind = r.randrange(5)
    if kind == 0:
        return [f"def {verb}_{noun}({noun}: {cls}, {other}: int = {r.randrange(1, 500)}) -> dict:",
                f'    """{sentence(r)}"""',
                f"    result = {noun}.{r.choice(VERBS)}({other})",
                "    if not result:",
                f'        raise ValueError(f"{verb} failed for {{{other}!r}}")',
                f'    return {{"{noun}": result, "{other}": {other}}}', ""]
    if kind == 1:
        return [f"class {cls}({r.choice(('BaseModel', 'object', 'Protocol', 'Exception'))}):",
                f'    """{sentence(r)}"""', "",
                f"    {other}: {r.choice(('int', 'str', 'float', 'list[str]', 'dict'))}",
                f"    {noun}_id: str = \"\"", "",
                f"    def {verb}(self, {other}):",
                f"        self._{other} = {other}  # {sentence(r, 5)}",
                f"        return self.{r.choice(VERBS)}_{r.choice(NOUNS)}()", ""]
    if kind == 2:
        return [f"from {r.choice(('app', 'core', 'lib', 'service'))}.{noun} import {cls}",
                f"import {r.choice(('os', 'json', 'logging', 'asyncio', 're', 'typing', 'httpx'))}"]
    if kind == 3:
        return [f"    for {other} in {noun}.items():",
                f"        if {other}.{r.choice(ADJ)}:",
                f"            logger.{r.choice(('info', 'debug', 'warning'))}(\"{sentence(r, 6)}\")",
                "            continue",
                f"        {other}s.append({verb}_{other}({other}))"]
    return [f"def test_{verb}_{noun}_{r.choice(ADJ)}():",
            f"    {noun} = make_{noun}({other}={r.randrange(100)})",
            f"    assert {verb}_{noun}({noun}) == {r.randrange(1000)}", ""]


def _ts_block(r: Draws) -> list[str]:
    noun, other = r.sample(NOUNS, 2)
    verb = r.choice(VERBS)
    comp = noun.capitalize() + r.choice(("List", "Form", "Card", "Panel", "Item"))
    kind = r.randrange(4)
    if kind == 0:
        return [f"import {{ {verb.capitalize()}{noun.capitalize()} }} from '@/lib/{noun}';",
                f"import type {{ {other.capitalize()} }} from '@/types';"]
    if kind == 1:
        return [f"export function {comp}({{ {other}, on{verb.capitalize()} }}: {comp}Props) {{",
                f"  const [{noun}, set{noun.capitalize()}] = useState<{other.capitalize()}[]>([]);",
                f"  useEffect(() => {{ {verb}{noun.capitalize()}({other}).then(set{noun.capitalize()}); }}, [{other}]);",
                f"  return <div className=\"{r.choice(ADJ)}-{noun}\">{{{noun}.length}}</div>;",
                "}", ""]
    if kind == 2:
        return [f"export async function {verb}{noun.capitalize()}(id: string): Promise<{other.capitalize()}> {{",
                f"  const res = await fetch(`/api/{noun}/${{id}}`);",
                f"  if (!res.ok) throw new Error('{sentence(r, 5)}');",
                "  return res.json();", "}", ""]
    return [f"  // {sentence(r)}",
            f"  const {other} = {noun}.filter((x) => x.{r.choice(ADJ)}).map((x) => x.{other});"]


def _build_pools() -> dict[str, "Pool"]:
    r = Draws("ctxlake-demo-pools-v1")
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
            pools["md"].append(f"## {r.choice(VERBS).capitalize()} {r.choice(NOUNS)}s")
        elif pick < 0.35:
            pools["md"].append(f"- {sentence(r)}")
        elif pick < 0.42:
            pools["md"].append(f"- {cjk_sentence(r)}")
        elif pick < 0.46:
            pools["md"].append(f"{r.choice(EMOJI)} {sentence(r)}")
        elif pick < 0.52:
            pools["md"].append(f"`{r.choice(VERBS)} --{r.choice(NOUNS)}` {sentence(r, 8)}")
        elif pick < 0.6:
            pools["md"].append("")
        else:
            pools["md"].append(" ".join(sentence(r) for _ in range(r.randrange(1, 4))))
    while len(pools["cjk"]) < 1500:
        pools["cjk"].append(cjk_sentence(r) + (r.choice(EMOJI) if r.random() < 0.1 else ""))
    for i in range(3000):
        level = r.choices(("INFO", "DEBUG", "WARNING", "ERROR"), (60, 25, 10, 5))[0]
        pools["log"].append(
            f"2026-10-{1 + i % 28:02d} {i % 24:02d}:{i * 7 % 60:02d}:{i * 13 % 60:02d},{i % 1000:03d} "
            f"{level:<7} [{r.choice(NOUNS)}.{r.choice(NOUNS)}] {sentence(r)} "
            f"id={r.hex(12)} took={r.randrange(1, 5000)}ms")
    pkgs = ["requests", "httpx", "pydantic", "numpy", "pandas", "sqlalchemy", "fastapi", "uvicorn",
            "pytest", "ruff", "mypy", "boto3", "celery", "redis", "orjson", "polars", "rich", "click"]
    for i in range(2000):
        pkg = r.choice(pkgs) + ("" if r.random() < 0.7 else f"-{r.choice(NOUNS)}")
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
            pools["npm"].append(f"npm warn deprecated {pkg}@{r.randrange(1, 9)}.{r.randrange(20)}.{r.randrange(9)}: {sentence(r, 8)}")
        elif pick < 0.7:
            pools["npm"].append(f"npm http fetch GET 200 https://registry.npmjs.org/{pkg} {r.randrange(5, 900)}ms (cache revalidated)")
        else:
            pools["npm"].append(f"added {r.randrange(1, 1500)} packages, and audited {r.randrange(100, 2000)} packages in {r.randrange(1, 90)}s")
    for i in range(2500):
        noun = r.choice(NOUNS)
        pick = r.random()
        if pick < 0.7:
            pools["pytest"].append(f"tests/test_{noun}.py::test_{r.choice(VERBS)}_{r.choice(NOUNS)} PASSED{' ' * r.randrange(1, 30)}[{i % 100:3d}%]")
        elif pick < 0.8:
            pools["pytest"].append(f"tests/test_{noun}.py::test_{r.choice(VERBS)}_{noun} FAILED")
        elif pick < 0.9:
            pools["pytest"].append(f"E       AssertionError: assert {r.randrange(1000)} == {r.randrange(1000)}")
        else:
            pools["pytest"].append(f"    def test_{r.choice(VERBS)}_{noun}():  # {sentence(r, 5)}")
    code = pools["py"] + pools["ts"]
    for i in range(2500):
        line = r.choice(code).strip() or "pass"
        pools["grep"].append(f"src/{r.choice(NOUNS)}/{r.choice(NOUNS)}.{r.choice(('py', 'ts', 'tsx'))}:{r.randrange(1, 900)}:{line}")
        pools["diff"].append(("+" if r.random() < 0.5 else "-") + r.choice(code))
        if i % 40 == 0:
            pools["diff"].append(f"@@ -{r.randrange(1, 500)},{r.randrange(3, 40)} +{r.randrange(1, 500)},{r.randrange(3, 40)} @@")
    for i in range(1500):
        name = f"{r.choice(NOUNS)}_{r.choice(NOUNS)}.{r.choice(('py', 'ts', 'md', 'json', 'yaml', 'log'))}"
        pools["ls"].append(f"-rw-r--r--  1 dev staff {r.randrange(100, 90000):>6} Oct {1 + i % 28:2d} {i % 24:02d}:{i % 60:02d} {name}")
    for i in range(1500):
        obj = {"id": i, "name": f"{r.choice(ADJ)}-{r.choice(NOUNS)}", "tags": r.sample(NOUNS, 3),
               "score": round(r.random(), 4), "note": sentence(r),
               "owner": cjk_sentence(r) if r.random() < 0.05 else r.choice(NOUNS)}
        pools["json"].append(orjson.dumps(obj).decode())
    for i in range(1000):
        pools["conf"].append(f"{r.choice(NOUNS)}_{r.choice(NOUNS)}: {r.choice(('true', 'false', str(r.randrange(1, 10000)), repr(r.choice(ADJ))))}")
    while len(pools["web"]) < 2000:
        pick = r.random()
        if pick < 0.1:
            pools["web"].append(f"# {r.choice(VERBS).capitalize()} the {r.choice(NOUNS)} API")
        elif pick < 0.4:
            pools["web"].append(" ".join(sentence(r) for _ in range(r.randrange(2, 6))))
        elif pick < 0.55:
            pools["web"].append(f"* [{r.choice(NOUNS)}](https://docs.example.com/{r.choice(NOUNS)}/{r.choice(VERBS)})")
        else:
            pools["web"].append("")
    return {name: Pool(lines) for name, lines in pools.items()}


class Pool:
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

    def text(self, rng: Draws, nbytes: int) -> str:
        return "\n".join(self.take(rng.randrange(len(self.lines)), nbytes))


@lru_cache(maxsize=1)
def text_pools() -> dict[str, Pool]:
    return _build_pools()


@lru_cache(maxsize=1)
def passing_pool() -> Pool:
    """The test-run lines of a suite that passes (no FAILED line, no assertion error)."""
    return Pool([line for line in text_pools()["pytest"].lines if line.endswith("%]")])


@lru_cache(maxsize=256)
def file_lines(pool: str, start: int, nbytes: int) -> tuple[str, ...]:
    return tuple(text_pools()[pool].take(start, nbytes))


def numbered(pool: str, start: int, nbytes: int) -> str:
    """A file as Claude Code's Read tool shows it (``cat -n`` style with an arrow)."""
    if nbytes <= 256 * KIB:
        return _numbered_small(pool, start, nbytes)
    return "\n".join(f"{i:>6}→{line}" for i, line in enumerate(file_lines(pool, start, nbytes), 1))


@lru_cache(maxsize=128)
def _numbered_small(pool: str, start: int, nbytes: int) -> str:
    return "\n".join(f"{i:>6}→{line}" for i, line in enumerate(file_lines(pool, start, nbytes), 1))


# ---------------------------------------------------------------------------------------
# Prompts and prose
# ---------------------------------------------------------------------------------------
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
FOLLOWUPS = ["thanks! 🎉 now can you also handle the empty list case?", "ship it 🚀",
             "looks good, please commit", "hmm, that broke the build 😅 can you check?",
             "ok, continue", "also update the docs", "can you double-check the edge cases?",
             "ありがとう！次はテストもお願いします", "好的，继续", "perfect 👍 one more thing: add logging",
             "wait, don't touch the public API", "try again with the other approach"]


def user_prompt(rng: Draws, project: Project, *, first: bool, lang: str | None = None) -> str:
    f = rng.choice(project.files)
    fields = dict(path=f.rel, noun=rng.choice(NOUNS), other=rng.choice(NOUNS),
                  verb=rng.choice(VERBS), cls=rng.choice(NOUNS).capitalize() + "Service",
                  cmd=rng.choice(("npm run build", "pytest -q", "make lint", "docker compose up",
                                  "python -m app.main")))
    pick = lang or ("ja" if rng.random() < 0.1 else "zh" if rng.random() < 0.06 else "en")
    if not first and lang is None and rng.random() < 0.45:
        return rng.choice(FOLLOWUPS)
    bank = {"en": _PROMPTS_EN, "ja": _PROMPTS_JA, "zh": _PROMPTS_ZH}[pick]
    text = rng.choice(bank).format(**fields)
    if pick == "en" and rng.random() < 0.08:
        text += " " + rng.choice(EMOJI)
    if rng.random() < 0.15:
        text += "\n\n" + text_pools()["md"].text(rng, rng.randrange(200, 1500))
    return text


def prose(rng: Draws, nbytes: int, *, cjk: bool = False) -> str:
    out = []
    total = 0
    while total < nbytes:
        s = cjk_sentence(rng) if cjk and rng.random() < 0.7 else sentence(rng)
        if rng.random() < 0.03:
            s += " " + rng.choice(EMOJI)
        out.append(s)
        total += len(s) + 1
    return " ".join(out)


# ---------------------------------------------------------------------------------------
# Token usage: what the API would have counted for the content written
