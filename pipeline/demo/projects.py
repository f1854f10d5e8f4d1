"""The projects every format works in (one developer, several tools): a working folder, a
home, a language and files whose contents are windows over the text pools.
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
import zlib

from pipeline.demo.content import NOUNS, VERBS, file_lines
from pipeline.demo.context import Draws


@dataclasses.dataclass
class File:
    rel: str
    pool: str
    nbytes: int

    @property
    def start(self) -> int:
        return zlib.crc32(self.rel.encode("utf-8"))


@dataclasses.dataclass
class Project:
    name: str
    cwd: str
    home: str
    lang: str
    files: list[File]
    branch: str

    def __post_init__(self) -> None:
        self.small = [f for f in self.files if not is_big(f)]
        self.big = [f for f in self.files if is_big(f)]
        self.by_rel = {f.rel: f for f in self.files}

    @property
    def encoded(self) -> str:
        return re.sub(r"[^A-Za-z0-9]", "-", self.cwd)

    @property
    def gemini_hash(self) -> str:
        return hashlib.sha256(self.cwd.encode("utf-8")).hexdigest()

    def abs(self, rel: str) -> str:
        return f"{self.cwd}/{rel}"

    def lines(self, f: File) -> tuple[str, ...]:
        return file_lines(f.pool, f.start, f.nbytes)

    def text(self, f: File) -> str:
        return "\n".join(self.lines(f)) + "\n"


_PROJECT_NAMES = ["payments-api", "webshop.v2", "data-pipeline", "infra-terraform",
                  "ml-experiments", "mobile-app", "docs-site", "cli-tools", "auth-service",
                  "analytics-dashboard"]
_HOMES = ["/home/dev", "/Users/mika", "/home/sato"]


def make_projects(seed: int) -> list[Project]:
    r = Draws(f"{seed}:projects")
    projects = []
    for i, name in enumerate(_PROJECT_NAMES):
        home = _HOMES[i % len(_HOMES)]
        cwd = f"{home}/{r.choice(('src', 'work', 'code'))}/{name}"
        lang = "ts" if name in ("webshop.v2", "mobile-app", "docs-site", "analytics-dashboard") else "py"
        files = [File("CLAUDE.md", "md", r.randrange(1500, 6000)),
                 File(".claude/CLAUDE.md", "md", r.randrange(800, 3000)),
                 File("GEMINI.md", "md", r.randrange(800, 4000)),
                 File("AGENTS.md", "md", r.randrange(800, 3000)),
                 File("README.md", "md", r.randrange(2000, 12000)),
                 File("docs/README.ja.md", "cjk", r.randrange(2000, 9000))]
        if lang == "py":
            files += [File("pyproject.toml", "conf", r.randrange(600, 2500))]
            for _ in range(r.randrange(30, 70)):
                sub = r.choice(("src/" + name.replace("-", "_"), "tests", "scripts"))
                prefix = "test_" if sub == "tests" else ""
                files.append(File(f"{sub}/{prefix}{r.choice(NOUNS)}_{r.choice(NOUNS)}.py", "py",
                                  r.payload_size(150_000, big=False) + 300))
        else:
            files += [File("package.json", "json", r.randrange(600, 3000))]
            for _ in range(r.randrange(30, 70)):
                sub = r.choice(("src/components", "src/lib", "src/app", "tests"))
                ext = "tsx" if sub in ("src/components", "src/app") else "ts"
                files.append(File(f"{sub}/{r.choice(NOUNS)}{r.choice(NOUNS).capitalize()}.{ext}",
                                  "ts", r.payload_size(150_000, big=False) + 300))
        files += [File(f"config/{r.choice(NOUNS)}.yaml", "conf", r.randrange(300, 4000)) for _ in range(3)]
        files += [File(f"data/fixtures/{r.choice(NOUNS)}s.jsonl", "json", r.log_uniform(40_000, 400_000)),
                  File("data/export/full_dump.jsonl", "json", r.log_uniform(1_500_000, 6_000_000)),
                  File(f"logs/{r.choice(NOUNS)}.log", "log", r.log_uniform(100_000, 900_000)),
                  File("logs/server.log", "log", r.log_uniform(1_000_000, 5_000_000))]
        uniq = {f.rel: f for f in files}
        projects.append(Project(name, cwd, home, lang, sorted(uniq.values(), key=lambda f: f.rel),
                                r.choice(("main", "main", "develop", f"feature/{r.choice(NOUNS)}-{r.choice(VERBS)}", ""))))
    return projects


def is_big(f: File) -> bool:
    return f.rel.startswith(("data/", "logs/"))
