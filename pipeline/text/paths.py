"""Request-side paths of a tool call, for every transcript format (pure functions, no I/O).

:func:`request_paths` returns the file paths a call *asks for* (what it reads, edits or names),
read from the call's input only, never from its result. Paths are made absolute against the
call's working directory and lexically normalised with ``posixpath.normpath`` (no filesystem
access: archives come from other machines). The order is the order of discovery; duplicates
are dropped.

What is extracted
-----------------
- JSON keys ``file_path``, ``path``, ``absolute_path``, ``notebook_path``, ``filePath`` (string
  values) and ``paths`` (a list of strings) at the top level of the input object. This covers
  Claude Code (Read/Write/Edit/MultiEdit/NotebookEdit/Grep/Glob/LS), Gemini CLI and Qwen Code
  (read_file, write_file, replace, list_directory, glob, grep_search), SWE-agent
  (str_replace_editor, open, create) and MCP tools that use those names.
- Gemini ``read_many_files``: entries of ``paths`` and ``include``.
- Codex ``apply_patch``: the file headers ``*** Update File: x``, ``*** Add File: x``,
  ``*** Delete File: x`` and ``*** Move to: x``. The patch is the raw input of a
  ``custom_tool_call`` (stored as a JSON string, or as text that is not JSON), the ``input``
  (or ``patch``) key of ``function_call`` arguments, or the second word of a shell command
  ``["apply_patch", "<patch>"]``.
- Plain paths in *simple* shell commands, from ``command`` (Claude Bash, Gemini/Qwen
  ``run_shell_command``, SWE-agent ``bash``, Codex ``shell``/``shell_command``/``exec_command``
  as a string, or as a list: ``["bash", "-lc", "<script>"]`` (also ``sh``/``zsh`` with
  ``-c``/``-lc``) is a script, any other list is an argv used as is), and ``cmd`` for
  ``exec_command``. Codex's ``workdir`` (made absolute against the call's cwd) is the base
  for relative paths of that call.

What the shell tokenizer accepts (everything else yields NO path)
------------------------------------------------------------------
A script is split with ``shlex`` (POSIX rules, quotes honoured). It is *simple* when it is ONE
command: no ``|``, ``&``, ``;``, ``<``, ``>``, backquote, ``$`` (variables, ``$(...)``),
``(``/``)``, ``{``/``}`` or newline anywhere in it (even quoted: conservative), shlex accepts
it, and its first word (basename, so ``/bin/cat`` counts) is one of ``cat``, ``head``,
``tail``, ``less``, ``more``, ``wc``, ``nl``, ``sed`` (only with ``-n`` and without ``-i``:
the first non-option word is the script unless ``-e``/``-f`` gave it), or SWE-agent's
``open <path> [line]`` / ``create <path>`` (first operand only). Leading/trailing whitespace
(SWE-agent's trailing newline) is stripped first. Option words (starting
with ``-``) are skipped, with the value of ``head``/``tail`` ``-n``/``-c``, ``nl`` options
that take a value (``-b -d -f -h -i -l -n -s -v -w``) and ``sed`` ``-e``/``-f``/``-l``
consumed; ``--`` ends the options. Remaining words are paths, except words holding a glob
character (``*?[``) or an ``=``-assignment prefix. Not extracted: ``cd x && cat y``
(compound), redirections, pipes, ``grep``/``rg``/``find``/``ls`` (their operands are patterns
or directories to scan, not files read), ``python x.py``, editors, heredocs.

Other decisions
---------------
- Glob patterns (``*``, ``?``, ``[``) are not paths and are dropped everywhere (Gemini
  ``read_many_files`` often passes ``src/**/*.ts``).
- A path starting with ``~`` expands to ``home`` when the caller passes one (correlate passes
  the home the session cwd implies, :func:`pipeline.text.memory.home_for_cwd`); otherwise it is
  kept as is (not joined with the cwd).
- Without a cwd, a relative path stays relative (normalised).
- URLs (``scheme://``) are not paths.
- POSIX paths only: a Windows path (``C:\\x``) is not recognised as absolute.
"""

from __future__ import annotations

import posixpath
import re
import shlex
from typing import Any, Callable, NamedTuple

import orjson

__all__ = ["CANDIDATE_PATTERN", "RequestPath", "request_paths", "request_path_entries", "shell_command_paths",
           "patch_paths", "resolve_path"]

PATH_KEYS = ("file_path", "path", "absolute_path", "notebook_path", "filePath")
LIST_KEYS = ("paths",)
READ_MANY_KEYS = ("paths", "include")
PATCH_TOOLS = frozenset({"apply_patch", "applypatch"})
SHELL_WRAPPERS = frozenset({"bash", "sh", "zsh", "dash"})
SHELL_SCRIPT_FLAGS = frozenset({"-c", "-lc", "-cl", "-ic"})

# A necessary condition for a call's input to name a path (bound into
# sql/select_tool_call_inputs.sql so correlate parses only these inputs in Python): a key this
# module reads, or an apply_patch file header (raw custom-tool input).
CANDIDATE_PATTERN = (r'"(file_path|path|absolute_path|notebook_path|filePath|paths|include|'
                     r'command|cmd|input|patch)"\s*:|\*\*\* (Update File|Add File|Delete File|'
                     r'Move to):')

_PATCH_HEADER = re.compile(r"^\*\*\* (?:Update File|Add File|Delete File|Move to): (.+?)\s*$",
                           re.MULTILINE)
_UNSAFE_SHELL = re.compile(r"[|&;<>`$(){}\n\r]")
_GLOB = re.compile(r"[*?\[]")
_BLANKS = re.compile(r"[ \t]+")  # shlex's whitespace minus the newlines rejected before
_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")

# command -> options whose value is the next word (when not attached, e.g. -n5)
_READ_COMMANDS: dict[str, frozenset[str]] = {
    "cat": frozenset(),
    "head": frozenset({"-n", "-c", "--lines", "--bytes"}),
    "tail": frozenset({"-n", "-c", "--lines", "--bytes", "-s", "--sleep-interval", "--pid"}),
    "less": frozenset({"-b", "-h", "-j", "-k", "-o", "-O", "-p", "-P", "-t", "-T", "-x", "-y",
                       "-z", "-#"}),
    "more": frozenset({"-n"}),
    "wc": frozenset(),
    "nl": frozenset({"-b", "-d", "-f", "-h", "-i", "-l", "-n", "-s", "-v", "-w"}),
    "sed": frozenset({"-e", "-f", "-l", "--expression", "--file", "--line-length"}),
}
# SWE-agent commands (their input is ``{"command": "open <path> [line]"}``): first operand only.
_FIRST_OPERAND_COMMANDS = frozenset({"open", "create"})
_KNOWN_COMMANDS = frozenset(_READ_COMMANDS) | _FIRST_OPERAND_COMMANDS


class RequestPath(NamedTuple):
    """One request-side path: ``path`` normalised; ``raw`` joined with the cwd but with its
    ``.``/``..`` components kept (the memory classifier needs them to see a ``..`` escape)."""

    path: str
    raw: str


def resolve_path(value: str, base: str | None, home: str | None = None) -> RequestPath | None:
    """Join ``value`` with ``base`` (when relative) and normalise lexically; None if not a path.

    ``~`` and ``~/x`` expand to ``home`` when it is given; otherwise they are kept as is.
    """
    value = value.strip()
    if not value or "\x00" in value or _URL.match(value) or _GLOB.search(value):
        return None
    if home and (value == "~" or value.startswith("~/")):
        value = home.rstrip("/") + value[1:]
    if value.startswith("~"):
        raw = value
    elif posixpath.isabs(value) or not base:
        raw = value
    else:
        raw = posixpath.join(base, value)
    path = posixpath.normpath(raw)
    if path.startswith("//") and not path.startswith("///"):
        path = path[1:]  # normpath keeps a leading '//' (POSIX leaves it implementation-defined)
    return RequestPath(path, raw)


def patch_paths(patch: str) -> list[str]:
    """File names in a Codex ``apply_patch`` body (Update/Add/Delete File, Move to), in order."""
    return [m.group(1).strip() for m in _PATCH_HEADER.finditer(patch)]


def _split_script(script: str) -> list[str] | None:
    """Words of a simple script whose first word is a known read command; else None.

    Fast paths (same result as ``shlex.split`` on what they accept): a script whose first word
    is not a known command is rejected before tokenising (a quoted command name is rejected
    too: conservative), and a script with no quote, backslash or ``#`` splits on whitespace.
    """
    script = script.strip()  # SWE-agent commands end with a newline
    first = script.split(None, 1)[0] if script else ""
    if posixpath.basename(first) not in _KNOWN_COMMANDS or _UNSAFE_SHELL.search(script):
        return None
    if not any(ch in script for ch in "'\"\\#"):
        return [word for word in _BLANKS.split(script) if word]
    try:
        return shlex.split(script, posix=True)
    except ValueError:
        return None


def shell_command_paths(argv: list[str]) -> list[str]:
    """Operands of a simple read command (see the module docstring), unresolved."""
    if not argv:
        return []
    command = posixpath.basename(argv[0])
    if command in _FIRST_OPERAND_COMMANDS:
        operands = [word for word in argv[1:] if not word.startswith("-")]
        return operands[:1]
    takes_value = _READ_COMMANDS.get(command)
    if takes_value is None:
        return []
    words = argv[1:]
    if command == "sed":
        return _sed_paths(words)
    operands = _operand_words(words, lambda word: word in takes_value) or []
    return [word for word in operands if word != "-"]  # "-": stdin


def _operand_words(words: list[str], option: Callable[[str], bool | None]) -> list[str] | None:
    """The operand words of a command's arguments (``-`` included), in order.

    Until ``--``, a word starting with ``-`` (other than ``-``) is an option: ``option(word)``
    answers True when the next word is the option's value (skipped), False when it is not, and
    None when the option makes the command something else than a plain read (then None)."""
    operands: list[str] = []
    options_done = False
    skip_next = False
    for word in words:
        if skip_next:
            skip_next = False
            continue
        if not options_done and word == "--":
            options_done = True
            continue
        if not options_done and word.startswith("-") and word != "-":
            takes_value = option(word)
            if takes_value is None:
                return None
            skip_next = takes_value
            continue
        operands.append(word)
    return operands


def _sed_paths(words: list[str]) -> list[str]:
    quiet = False
    script_given = False

    def option(word: str) -> bool | None:
        nonlocal quiet, script_given
        if word.startswith("--"):
            if word in ("--quiet", "--silent"):
                quiet = True
            elif word.startswith("--in-place"):
                return None
            elif word in ("--expression", "--file"):
                script_given = True
                return True
            elif word.startswith(("--expression=", "--file=")):
                script_given = True
            return False
        letters = word[1:]
        for index, letter in enumerate(letters):
            if letter == "i":
                return None  # in-place edit: not a plain read
            if letter == "n":
                quiet = True
            elif letter in "efl":
                if letter in "ef":
                    script_given = True
                return index == len(letters) - 1    # the letter's value is the next word
        return False

    operands = _operand_words(words, option)
    if operands is None or not quiet:
        return []
    if not script_given:
        operands = operands[1:]
    return [word for word in operands if word != "-"]


def _script_argv(command: Any) -> list[str] | None:
    """argv of a simple command from a ``command`` value (string script or list argv)."""
    if isinstance(command, str):
        return _split_script(command)
    if isinstance(command, list) and command and all(isinstance(w, str) for w in command):
        head = posixpath.basename(command[0])
        if head in SHELL_WRAPPERS and len(command) == 3 and command[1] in SHELL_SCRIPT_FLAGS:
            return _split_script(command[2])
        return list(command)  # an argv runs without a shell: no operators to fear
    return None


def _parse_input(input_json: str | None) -> Any:
    if input_json is None:
        return None
    try:
        return orjson.loads(input_json)
    except orjson.JSONDecodeError:
        return input_json  # a custom tool's raw text input


def _raw_values(tool_name: str | None, obj: Any) -> tuple[list[str], str | None]:
    """(unresolved path strings, workdir) of one parsed input."""
    name = tool_name or ""
    values: list[str] = []
    workdir = None
    if isinstance(obj, str):
        if name in PATCH_TOOLS or "*** Begin Patch" in obj:
            values.extend(patch_paths(obj))
        return values, None
    if not isinstance(obj, dict):
        return values, None
    if isinstance(obj.get("workdir"), str):
        workdir = obj["workdir"]
    for key in PATH_KEYS:
        value = obj.get(key)
        if isinstance(value, str):
            values.append(value)
    keys = READ_MANY_KEYS if name == "read_many_files" else LIST_KEYS
    for key in keys:
        value = obj.get(key)
        if isinstance(value, list):
            values.extend(v for v in value if isinstance(v, str))
    if name in PATCH_TOOLS:
        for key in ("input", "patch"):
            if isinstance(obj.get(key), str):
                values.extend(patch_paths(obj[key]))
    for key in ("command", "cmd"):
        command = obj.get(key)
        if command is None:
            continue
        if isinstance(command, list) and len(command) >= 2 and isinstance(command[0], str) \
                and posixpath.basename(command[0]) in PATCH_TOOLS and isinstance(command[1], str):
            values.extend(patch_paths(command[1]))
            continue
        argv = _script_argv(command)
        if argv:
            values.extend(shell_command_paths(argv))
        break
    return values, workdir


def request_path_entries(tool_name: str | None, input_json: str | None, cwd: str | None, *,
                         format: str | None = None, home: str | None = None) -> list[RequestPath]:
    """Like :func:`request_paths` but each entry also keeps the joined, un-normalised form."""
    obj = _parse_input(input_json)
    values, workdir = _raw_values(tool_name, obj)
    if not values:
        return []
    base = cwd or None
    if workdir:
        joined = resolve_path(workdir, base, home) if not _GLOB.search(workdir) else None
        if joined is not None and not joined.path.startswith("~"):
            base = joined.path
    seen: set[str] = set()
    out: list[RequestPath] = []
    for value in values:
        entry = resolve_path(value, base, home)
        if entry is None or entry.path in seen:
            continue
        seen.add(entry.path)
        out.append(entry)
    return out


def request_paths(tool_name: str | None, input_json: str | None, cwd: str | None, *,
                  format: str | None = None, home: str | None = None) -> list[str]:
    """The request-side paths of one call (normalised, absolute when ``cwd`` is known).

    ``input_json`` is ``tool_calls.input_json``; ``format`` is accepted for callers that know
    it (the extraction does not depend on it today: key names and tool names suffice).
    ``home``, when given, expands a leading ``~`` (see :func:`pipeline.text.memory.home_for_cwd`).
    """
    return [entry.path for entry in request_path_entries(tool_name, input_json, cwd,
                                                         format=format, home=home)]
