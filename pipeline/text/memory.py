"""Managed-memory classification of a path: ``project`` | ``user`` | ``team`` | ``none`` | ``escape``.

The microcompact policy never clears a read of a managed-memory file (docs/policies.md). This
module says whether a path is one, safely:

Roots (:class:`MemoryRoots`, docs/formats.md "Memory files", plus config)
    *Project-relative* entries sit in a project directory: ``CLAUDE.md``,
    ``.claude/CLAUDE.md``, ``GEMINI.md`` (project) and the folder ``.qwen/team-memory/``
    (team). A project directory is the session cwd, one of its ancestors or one of its
    descendants (Claude Code and Gemini CLI load these files up the tree from the cwd and from
    subfolders); without a cwd, any directory. *Anchored* entries start with ``~`` or ``/``:
    ``~/.claude/CLAUDE.md``, ``~/.gemini/GEMINI.md``, the folder ``~/.qwen/memories/`` (user)
    and ``~/.qwen/projects/*/memory/`` (project; ``*`` is any one path component because
    Qwen's sanitising of the git root is not reproduced here). An entry ending in ``/`` is a
    folder (the folder itself and everything below it); otherwise a file (that exact path).
    Config ``[memory] project=[...] user=[...] team=[...]`` adds entries; a relative entry in
    ``user`` is relative to the home directory. When several roots match, an anchored root
    beats a project-relative one, then the longer entry wins (``~/.claude/CLAUDE.md`` is
    user, ``x/.qwen/team-memory/CLAUDE.md`` is team).

Resolution (:func:`classify`)
    1. ``~`` expands to ``home``; a relative path joins the cwd (itself ``~``-expanded).
    2. The *claimed* root is the root the path names literally, reading its components as
       written (``.`` dropped, ``..`` kept and never part of the root): the root a reader of
       the path would believe it is in.
    3. The lexical path is ``posixpath.normpath`` of the joined path; the *real* path is the
       nearest existing real path: the longest existing ancestor is ``realpath``-ed and the
       rest re-appended (a dangling symlink counts as existing and is followed). For an archive
       from another machine, where nothing exists here, the real path is the lexical one, so
       classification is lexical after normalising.
    4. A path claimed by a root whose lexical path is not inside that same root (``..``) or
       whose real path is not inside the root's real path (a symlink out) is ``escape``. A
       path lexically in a root whose real path leaves the root's real path is ``escape``.
       A folder root's own symlink is followed (``~/.claude`` linked to a dotfiles folder);
       a file root's is not: a memory *file* that is a symlink is ``escape``.
       A path outside every root lexically whose real path is inside one (a symlink into
       memory) takes that root's class. ``escape`` is never protected.

Home: ``home`` when given; otherwise :func:`home_for_cwd` infers it from a transcript cwd
(``/Users/<name>``, ``/home/<name>``, ``/root``) so archives from another machine resolve
``~`` to *their* home; otherwise ``os.path.expanduser("~")``.
"""

from __future__ import annotations

import os
import posixpath
import re
from dataclasses import dataclass
from typing import Any, Mapping

__all__ = ["MemoryRoots", "Classifier", "classify", "home_for_cwd", "MEMORY_CLASSES",
           "PROTECTED_CLASSES"]

PROJECT, USER, TEAM, NONE, ESCAPE = "project", "user", "team", "none", "escape"
MEMORY_CLASSES = (PROJECT, USER, TEAM, NONE, ESCAPE)
PROTECTED_CLASSES = frozenset({PROJECT, USER, TEAM})

_HOME_IN_CWD = re.compile(r"^(/Users/[^/]+|/home/[^/]+|/root)(?:/|$)")


def home_for_cwd(cwd: str | None) -> str | None:
    """The home directory a transcript's cwd implies (``/Users/x``, ``/home/x``, ``/root``)."""
    if not cwd:
        return None
    match = _HOME_IN_CWD.match(cwd)
    return match.group(1) if match else None


@dataclass(frozen=True)
class MemoryRoots:
    """Managed-memory roots per class (see the module docstring for the entry syntax)."""

    project: tuple[str, ...] = ("CLAUDE.md", ".claude/CLAUDE.md", "GEMINI.md",
                                "~/.qwen/projects/*/memory/")
    user: tuple[str, ...] = ("~/.claude/CLAUDE.md", "~/.gemini/GEMINI.md", "~/.qwen/memories/")
    team: tuple[str, ...] = (".qwen/team-memory/",)

    @classmethod
    def from_config(cls, memory: Mapping[str, Any] | None) -> "MemoryRoots":
        """Defaults plus the extra entries of a config ``[memory]`` table (unknown keys fail)."""
        base = cls()
        if not memory:
            return base
        unknown = set(memory) - {"project", "user", "team"}
        if unknown:
            raise ValueError(f"unknown [memory] keys: {', '.join(sorted(unknown))}")
        extra: dict[str, tuple[str, ...]] = {}
        for name in ("project", "user", "team"):
            values = memory.get(name) or []
            if not isinstance(values, (list, tuple)) or not all(isinstance(v, str) and v.strip()
                                                                for v in values):
                raise ValueError(f"[memory] {name} must be a list of non-empty strings")
            extra[name] = tuple(getattr(base, name)) + tuple(v.strip() for v in values)
        return cls(**extra)


@dataclass(frozen=True)
class _Root:
    cls: str
    parts: tuple[str, ...]   # components; anchored roots start with "/" or "~"
    folder: bool
    anchored: bool

    @property
    def priority(self) -> tuple[int, int]:
        return (1 if self.anchored else 0, len(self.parts))


def _compile(roots: MemoryRoots) -> list[_Root]:
    compiled: list[_Root] = []
    for cls_name in (TEAM, PROJECT, USER):
        for entry in getattr(roots, cls_name):
            folder = entry.endswith("/")
            text = entry.rstrip("/") or "/"
            anchored = text.startswith(("/", "~"))
            if cls_name == USER and not anchored:
                text, anchored = "~/" + text, True
            parts = tuple(p for p in text.split("/") if p not in ("", "."))
            if text.startswith("/"):
                parts = ("/",) + parts
            elif text.startswith("~"):
                parts = ("~",) + parts[1:] if parts and parts[0] == "~" else parts
            if ".." in parts:
                raise ValueError(f"a memory root may not contain '..': {entry!r}")
            compiled.append(_Root(cls_name, parts, folder, anchored))
    # stable: higher priority first; ties keep the class order team, project, user
    return sorted(compiled, key=lambda r: r.priority, reverse=True)


def _components(path: str) -> tuple[str, ...]:
    """Components as written ('.' and empty dropped, '..' kept); absolute paths start with '/'."""
    parts = tuple(p for p in path.split("/") if p not in ("", "."))
    return ("/",) + parts if path.startswith("/") else parts


def _join_parts(parts: tuple[str, ...]) -> str:
    if parts and parts[0] == "/":
        return "/" + "/".join(parts[1:])
    return "/".join(parts)


def _inside(path: str, root: str, folder: bool) -> bool:
    if path == root:
        return True
    if not folder:
        return False
    return path.startswith(root.rstrip("/") + "/")


class Classifier:
    """Classifies many paths against one set of roots, caching filesystem resolution.

    One instance per run (the cache assumes the filesystem does not change meanwhile);
    :func:`classify` makes a fresh one per call.
    """

    def __init__(self, roots: MemoryRoots, *, home: str | None = None):
        self.roots = _compile(roots)
        self.default_home = posixpath.normpath(home or os.path.expanduser("~"))
        self._dir_cache: dict[str, str] = {}
        self._cache: dict[tuple[str | None, str, str], str] = {}

    # -- filesystem ----------------------------------------------------------------------
    def _real_dir(self, path: str) -> str:
        cached = self._dir_cache.get(path)
        if cached is not None:
            return cached
        if path == "/" or os.path.lexists(path):
            real = os.path.realpath(path)
        else:
            parent = posixpath.dirname(path)
            real = posixpath.join(self._real_dir(parent), posixpath.basename(path))
        self._dir_cache[path] = real
        return real

    def real_path(self, path: str) -> str:
        """Nearest existing real path of an absolute, normalised path (no strictness)."""
        if path == "/":
            return "/"
        parent = self._real_dir(posixpath.dirname(path))
        candidate = posixpath.join(parent, posixpath.basename(path))
        if os.path.islink(candidate):
            candidate = os.path.realpath(candidate)
        return candidate

    def real_root(self, root: str, folder: bool) -> str:
        """Real location of a root: a folder root is followed through symlinks (the folder is
        the user's container, e.g. ``~/.claude`` linked to a dotfiles repo); a file root keeps
        its own name (only its directories are resolved), so a memory *file* that is a symlink
        leaves its root and is ``escape`` (``CLAUDE.md -> AGENTS.md`` is not protected)."""
        if folder or root == "/":
            return self.real_path(root)
        return posixpath.join(self._real_dir(posixpath.dirname(root)), posixpath.basename(root))

    # -- matching ------------------------------------------------------------------------
    def _expand(self, path: str, home: str) -> str:
        if path == "~" or path.startswith("~/"):
            return home + path[1:]
        if path.startswith("~"):
            return posixpath.join(posixpath.dirname(home), path[1:])
        return path

    def _match(self, parts: tuple[str, ...], cwd_parts: tuple[str, ...] | None,
               home_parts: tuple[str, ...], *, literal: bool) -> tuple[str, str, bool] | None:
        """(class, concrete root path, folder) of the best root containing ``parts``."""
        for root in self.roots:
            if root.anchored:
                rparts = home_parts + root.parts[1:] if root.parts[0] == "~" else root.parts
                hit = self._match_at(parts, 0, rparts, root.folder, literal)
                if hit is not None:
                    return root.cls, _join_parts(hit), root.folder
                continue
            size = len(root.parts)
            for start in range(0, len(parts) - size + 1):
                prefix = parts[:start]
                if ".." in prefix:
                    break
                if cwd_parts is not None and parts[:1] == ("/",) and not _related(prefix,
                                                                                  cwd_parts):
                    continue
                hit = self._match_at(parts, start, root.parts, root.folder, literal)
                if hit is not None:
                    return root.cls, _join_parts(hit), root.folder
        return None

    @staticmethod
    def _match_at(parts: tuple[str, ...], start: int, rparts: tuple[str, ...], folder: bool,
                  literal: bool) -> tuple[str, ...] | None:
        end = start + len(rparts)
        if end > len(parts):
            return None
        window = parts[start:end]
        for have, want in zip(window, rparts):
            if have == ".." or (want != "*" and have != want):
                return None
        if end < len(parts) and not folder and not literal:
            return None
        return parts[:end]

    # -- public --------------------------------------------------------------------------
    def classify(self, path: str, *, cwd: str | None, home: str | None = None) -> str:
        home_n = posixpath.normpath(home) if home else self.default_home
        key = (cwd, path, home_n)
        cached = self._cache.get(key)
        if cached is None:
            cached = self._classify(path, cwd, home_n)
            self._cache[key] = cached
        return cached

    def _classify(self, path: str, cwd: str | None, home: str) -> str:
        if not path:
            return NONE
        cwd_abs = posixpath.normpath(self._expand(cwd, home)) if cwd else None
        expanded = self._expand(path, home)
        joined = expanded if posixpath.isabs(expanded) or not cwd_abs else \
            posixpath.join(cwd_abs, expanded)
        lexical = posixpath.normpath(joined)
        cwd_parts = _components(cwd_abs) if cwd_abs else None
        home_parts = _components(home)

        claim = self._match(_components(joined), cwd_parts, home_parts, literal=True)
        lex = self._match(_components(lexical), cwd_parts, home_parts, literal=False)
        absolute = posixpath.isabs(lexical)
        real = self.real_path(lexical) if absolute else lexical

        if claim is not None:
            cls_name, root, folder = claim
            if not _inside(lexical, root, folder):
                return ESCAPE
            if absolute and not _inside(real, self.real_root(root, folder), folder):
                return ESCAPE
            return cls_name
        if lex is not None:
            cls_name, root, folder = lex
            if absolute and not _inside(real, self.real_root(root, folder), folder):
                return ESCAPE
            return cls_name
        if absolute and real != lexical:
            real_cwd = _components(self.real_path(cwd_abs)) if cwd_abs and \
                posixpath.isabs(cwd_abs) else cwd_parts
            into = self._match(_components(real), real_cwd,
                               _components(self.real_path(home)), literal=False)
            if into is not None:
                return into[0]
        return NONE


def _related(prefix: tuple[str, ...], cwd_parts: tuple[str, ...]) -> bool:
    """A project directory must be the cwd, an ancestor of it or inside it."""
    size = min(len(prefix), len(cwd_parts))
    return prefix[:size] == cwd_parts[:size]


def classify(path: str, *, cwd: str | None, roots: MemoryRoots, home: str | None = None) -> str:
    """Memory class of ``path`` (``project``/``user``/``team``/``none``/``escape``).

    ``home`` defaults to :func:`home_for_cwd` of ``cwd``, then to ``os.path.expanduser("~")``.
    Pure apart from reading the filesystem (``lexists``/``realpath``); uncached.
    """
    home = home or home_for_cwd(cwd)
    return Classifier(roots, home=home).classify(path, cwd=cwd)
