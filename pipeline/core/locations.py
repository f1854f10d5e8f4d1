"""Where transcripts live: the folders ccusage discovers, for ``ctxlake ingest`` with no PATH
and for ``ctxlake status``.

- Claude Code: ``$CLAUDE_CONFIG_DIR`` (one folder or a comma-separated list; each folder's
  ``projects/``) when set, else both ``~/.config/claude/projects`` (newer Claude Code) and
  ``~/.claude/projects``: the same rule as ccusage.
- Codex CLI: ``$CODEX_HOME/sessions`` when ``CODEX_HOME`` is set, else ``~/.codex/sessions``.
- Gemini CLI: ``~/.gemini/tmp`` (its ``<project hash>/chats/`` session files).

Also where ctxlake's own things live (light, so the CLI finds them without importing the
lake): the lake (:func:`default_lake`) and the config file (:func:`default_config_path`).

Pure lookups: nothing is created, and a symlinked folder is reported as found (ingest itself
decides what it follows).
"""

from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

__all__ = ["Location", "discover_locations", "found_locations", "user_data_dir", "user_cache_dir",
           "default_lake", "user_config_path", "default_config_path", "is_url"]

CONFIG_NAME = "ctxlake.toml"
# an object-store lake URL (also as pathlib prints it: pathlib folds "s3://b" to "s3:/b")
URL = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]+):/")


def is_url(text: str | os.PathLike) -> bool:
    """Whether a lake location is a URL (``s3://...``): pipeline.core.remote handles it."""
    return bool(URL.match(os.fspath(text)))


@dataclass(frozen=True)
class Location:
    kind: str          # claude_code | codex_cli | gemini_cli
    path: str          # the folder ingest reads
    found: bool        # it exists and is a folder
    origin: str        # CLAUDE_CONFIG_DIR | CODEX_HOME | default

    def to_dict(self) -> dict:
        return {"kind": self.kind, "path": self.path, "found": self.found, "origin": self.origin}


def discover_locations(env: Mapping[str, str] | None = None,
                       home: str | Path | None = None) -> list[Location]:
    """Every standard transcript folder, found or not, in a fixed order (Claude, Codex, Gemini).

    ``env`` / ``home``: the environment and home folder to use (default: this process's).
    """
    env = os.environ if env is None else env
    home = Path(home) if home is not None else Path.home()
    candidates: list[tuple[str, Path, str]] = []
    claude_dirs = [part.strip() for part in env.get("CLAUDE_CONFIG_DIR", "").split(",") if part.strip()]
    if claude_dirs:
        candidates += [("claude_code", Path(part).expanduser() / "projects", "CLAUDE_CONFIG_DIR")
                       for part in claude_dirs]
    else:
        candidates += [("claude_code", home / ".config" / "claude" / "projects", "default"),
                       ("claude_code", home / ".claude" / "projects", "default")]
    codex_home = env.get("CODEX_HOME", "").strip()
    if codex_home:
        candidates.append(("codex_cli", Path(codex_home).expanduser() / "sessions", "CODEX_HOME"))
    else:
        candidates.append(("codex_cli", home / ".codex" / "sessions", "default"))
    candidates.append(("gemini_cli", home / ".gemini" / "tmp", "default"))
    out: list[Location] = []
    seen: set[str] = set()
    for kind, path, origin in candidates:
        if str(path) in seen:
            continue
        seen.add(str(path))
        out.append(Location(kind, str(path), path.is_dir(), origin))
    return out


def found_locations(env: Mapping[str, str] | None = None,
                    home: str | Path | None = None) -> list[Path]:
    """The folders of :func:`discover_locations` that exist (what ingest reads by default)."""
    return [Path(loc.path) for loc in discover_locations(env, home) if loc.found]


def _per_user(xdg_variable: str, macos: tuple[str, ...], other: tuple[str, ...]) -> Path:
    """``$<xdg_variable>/ctxlake`` when set to an absolute path, else ``~/<macos>/ctxlake`` on
    macOS, else ``~/<other>/ctxlake``."""
    xdg = os.environ.get(xdg_variable)
    if xdg and os.path.isabs(xdg):
        return Path(xdg) / "ctxlake"
    return Path.home().joinpath(*(macos if sys.platform == "darwin" else other), "ctxlake")


def user_data_dir() -> Path:
    """The platform's per-user data folder for ctxlake: ``$XDG_DATA_HOME/ctxlake``, else
    ``~/Library/Application Support/ctxlake`` on macOS, else ``~/.local/share/ctxlake``."""
    return _per_user("XDG_DATA_HOME", ("Library", "Application Support"), (".local", "share"))


def user_cache_dir() -> Path:
    """``$XDG_CACHE_HOME/ctxlake``, else ``~/Library/Caches/ctxlake`` on macOS, else
    ``~/.cache/ctxlake`` (object-store lakes' mirrors)."""
    return _per_user("XDG_CACHE_HOME", ("Library", "Caches"), (".cache",))


def default_lake(configured: str | Path | None = None) -> Path:
    """Where the lake lives when ``--lake`` is not given, whatever the current folder:
    ``$CTXLAKE_HOME``, else ``configured`` (the config file's ``lake``), else
    :func:`user_data_dir`. Absolute."""
    chosen = os.environ.get("CTXLAKE_HOME") or configured
    if chosen:
        return Path(os.path.abspath(os.path.expanduser(str(chosen))))
    return user_data_dir()


def user_config_path() -> Path:
    """The per-user config file: ``$XDG_CONFIG_HOME/ctxlake/ctxlake.toml``, else
    ``~/.config/ctxlake/ctxlake.toml``."""
    xdg = os.environ.get("XDG_CONFIG_HOME")
    base = Path(xdg) if xdg and os.path.isabs(xdg) else Path.home() / ".config"
    return base / "ctxlake" / CONFIG_NAME


def default_config_path() -> Path | None:
    """The config file in effect without ``--config``: ``$CTXLAKE_CONFIG``, else
    ``./ctxlake.toml`` when it exists, else :func:`user_config_path` when it exists."""
    env = os.environ.get("CTXLAKE_CONFIG")
    if env:
        return Path(env)
    local = Path(CONFIG_NAME)
    if local.is_file():
        return local
    user = user_config_path()
    return user if user.is_file() else None
