"""What every writer of the demo archive is given: the seeded random source with its id
generators (:class:`Draws`), the archive's clock, size budget and output folder
(:class:`DemoContext`), the plan of one session (:class:`SessionPlan`), and the lines of a JSONL
file being written (:class:`JsonLines`). Determinism: every draw comes from a ``Draws`` seeded
with a string (see ``pipeline/demo/archive.py``).
"""

from __future__ import annotations

import base64
import dataclasses
import math
import os
import time
import uuid
from pathlib import Path
from random import Random
from typing import TYPE_CHECKING, Any, Callable

import orjson

from pipeline.core.lake import refuse_symlinks

if TYPE_CHECKING:
    from pipeline.demo.projects import Project

SPAN_DAYS = 20                    # sessions start within this many days of the archive's first day
KIB = 1024

_B62 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
_HEX = "0123456789abcdef"


class Draws(Random):
    """``random.Random`` (seeded with a string: stable across Python versions) with the id and
    size draws the transcripts need. Each method draws from this generator only."""

    def uuid4(self) -> str:
        return str(uuid.UUID(int=self.getrandbits(128), version=4))

    def uuid7(self, ms: int) -> str:
        value = (ms & ((1 << 48) - 1)) << 80 | self.getrandbits(80)
        value = (value & ~(0xF << 76)) | (0x7 << 76)
        value = (value & ~(0x3 << 62)) | (0x2 << 62)
        return str(uuid.UUID(int=value))

    def b62(self, n: int) -> str:
        return "".join(self.choices(_B62, k=n))

    def hex(self, n: int) -> str:
        return "".join(self.choices(_HEX, k=n))

    def b64(self, nbytes: int) -> str:
        return base64.b64encode(self.randbytes(nbytes)).decode("ascii")

    def tool_use_id(self) -> str:
        """An Anthropic tool_use id (``toolu_01`` and 22 base-62 characters)."""
        return "toolu_01" + self.b62(22)

    def call_id(self) -> str:
        """An OpenAI tool call id (``call_`` and 24 base-62 characters)."""
        return "call_" + self.b62(24)

    def log_uniform(self, lo: float, hi: float) -> int:
        return int(math.exp(self.uniform(math.log(lo), math.log(hi))))

    def payload_size(self, cap: int, *, big: bool = True) -> int:
        """A heavy-tailed payload size: mostly small, ~11% over 16 KiB, rare multi-MB (when ``big``)."""
        u = self.random()
        if u < 0.55:
            n = int(self.lognormvariate(6.3, 1.0))                  # ~550 B
        elif u < 0.89:
            n = int(self.lognormvariate(8.2, 0.6))                  # ~3.6 KB
        elif u < 0.9955 or not big:
            n = self.log_uniform(16_500, 200_000)
        elif u < 0.9995:
            n = self.log_uniform(200_000, 1_000_000)
        else:
            n = self.log_uniform(1_000_000, 6_000_000)
        return max(8, min(n, cap))

    def planned(self, median: int, sigma: float, lo: int, hi: int) -> int:
        """The planned size of a session: log-normal around ``median``, within ``lo``..``hi``."""
        return int(min(max(self.lognormvariate(math.log(median), sigma), lo), hi))


def iso(ms: int) -> str:
    """``ms`` since the epoch as an ISO 8601 UTC timestamp with milliseconds."""
    sec, rem = divmod(ms, 1000)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(sec)) + f".{rem:03d}Z"


def stamp(ms: int, fmt: str) -> str:
    """``ms`` since the epoch in the ``time.strftime`` format ``fmt`` (UTC)."""
    return time.strftime(fmt, time.gmtime(ms // 1000))


@dataclasses.dataclass
class FormatFigures:
    """What the demo archive holds of one format."""

    files: int = 0
    bytes: int = 0
    sessions: int = 0


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
    formats: dict[str, FormatFigures] = dataclasses.field(default_factory=dict)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


@dataclasses.dataclass
class SessionPlan:
    """One session to write: its own random source, its project, when it starts (ms since the
    epoch), the bytes it aims for and the largest tool payload it may hold."""

    rng: Draws
    project: Project
    start: int
    planned: int
    cap: int


class JsonLines:
    """The lines of a JSONL file being written (``lines`` may be shared with a caller), and
    its size so far (newlines included)."""

    def __init__(self, lines: list[bytes] | None = None):
        self.lines = lines if lines is not None else []
        self.size = 0

    def add(self, obj: Any) -> None:
        data = orjson.dumps(obj)
        self.lines.append(data)
        self.size += len(data) + 1

    def extend(self, lines: list[bytes]) -> None:
        """Lines already serialised (a sub-agent's, inlined)."""
        self.lines.extend(lines)
        self.size += sum(len(x) + 1 for x in lines)

    def data(self) -> bytes:
        return b"\n".join(self.lines) + b"\n"


@dataclasses.dataclass
class DemoContext:
    """The archive being written: its output folder, seed, size budget, first day (``t0``, ms
    since the epoch) and projects; what has been written so far (``manifest``, ``done``,
    ``summary``). Format writers draw from :meth:`draws` and write through :meth:`write`."""

    out: Path
    seed: int
    size: int
    t0: int
    projects: list[Project]
    progress: Callable[[int, int], None] | None = None
    done: int = 0
    manifest: list[tuple[str, int]] = dataclasses.field(default_factory=list)
    summary: DemoSummary = dataclasses.field(init=False)

    def __post_init__(self) -> None:
        self.summary = DemoSummary(out=str(self.out), seed=self.seed, size_target=self.size)

    def draws(self, *labels: object) -> Draws:
        """The random source named ``<seed>:<label>:...`` (one per format, per session)."""
        return Draws(":".join(map(str, (self.seed, *labels))))

    def session_start(self, rng: Draws) -> int:
        """When a session starts: a day of the span, an hour weighted like a working day."""
        day = rng.randrange(SPAN_DAYS)
        hour = rng.choices(range(24), [1, 1, 1, 1, 1, 1, 2, 4, 8, 10, 10, 9, 7, 9, 10, 10, 9, 8, 6, 5, 4, 3, 2, 1])[0]
        return self.t0 + ((day * 24 + hour) * 3600 + rng.randrange(3600)) * 1000 + rng.randrange(1000)

    def write(self, fmt: str, rel: str, data: bytes, mtime_ms: int, *, sessions: int = 0) -> None:
        """Write one file of format ``fmt`` (holding ``sessions`` sessions) with its mtime."""
        path = self.out / rel
        write_own(self.out, path, data)
        os.utime(path, ns=(mtime_ms * 1_000_000, mtime_ms * 1_000_000))
        self.manifest.append((rel, len(data)))
        self.done += len(data)
        if self.progress:
            self.progress(min(self.done, self.size), self.size)
        stats = self.summary.formats.setdefault(fmt, FormatFigures())
        stats.files += 1
        stats.bytes += len(data)
        stats.sessions += sessions


def write_own(out: Path, path: Path, data: bytes) -> None:
    """Write a demo file under ``out``, never through a symlink (in its folders or at its name)."""
    refuse_symlinks(out, path.parent, what="demo archive")
    path.parent.mkdir(parents=True, exist_ok=True)
    refuse_symlinks(out, path, what="demo archive")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644)
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)
