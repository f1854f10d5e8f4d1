"""Request-side paths of tool calls across formats (pure: no filesystem)."""

from __future__ import annotations

import json

import pytest

from pipeline.text.paths import request_path_entries, request_paths

CWD = "/work/app"


def paths(tool, obj, cwd=CWD):
    return request_paths(tool, obj if isinstance(obj, str) and not obj.startswith("{")
                         else json.dumps(obj) if not isinstance(obj, str) else obj, cwd)


def test_claude_code_path_keys_resolve_against_the_cwd():
    assert paths("Read", {"file_path": "/abs/a.py"}) == ["/abs/a.py"]
    assert paths("Read", {"file_path": "src/./b.py"}) == ["/work/app/src/b.py"]
    assert paths("Grep", {"pattern": "x", "path": "src"}) == ["/work/app/src"]
    assert paths("NotebookEdit", {"notebook_path": "nb.ipynb"}) == ["/work/app/nb.ipynb"]
    assert paths("read_file", {"absolute_path": "/w/x.md"}) == ["/w/x.md"]


def test_paths_lists_keep_order_and_drop_duplicates_and_globs():
    assert paths("x", {"paths": ["b", "a", "./b", "src/*.py"]}) == ["/work/app/b", "/work/app/a"]


def test_gemini_read_many_files_reads_paths_and_include():
    assert paths("read_many_files", {"paths": ["docs/a.md"], "include": ["README.md", "**/*.ts"],
                                     "exclude": ["x.md"]}) == ["/work/app/docs/a.md",
                                                               "/work/app/README.md"]


def test_codex_custom_apply_patch_headers_in_order():
    patch = ("*** Begin Patch\n*** Update File: src/a.py\n@@\n-x\n+y\n*** Move to: src/b.py\n"
             "*** Add File: new.txt\n+hi\n*** Delete File: /abs/old.txt\n*** End Patch")
    expected = ["/work/app/src/a.py", "/work/app/src/b.py", "/work/app/new.txt", "/abs/old.txt"]
    assert request_paths("apply_patch", json.dumps(patch), CWD) == expected  # JSON string
    assert request_paths("apply_patch", patch, CWD) == expected              # raw text
    assert paths("apply_patch", {"input": patch}) == expected                # function_call
    assert paths("shell", {"command": ["apply_patch", patch]}) == expected   # via shell argv


def test_codex_shell_command_lists_and_workdir():
    assert paths("shell", {"command": ["bash", "-lc", "cat README.md"]}) == ["/work/app/README.md"]
    assert paths("shell", {"command": ["sed", "-n", "1,20p", "x.py"]}) == ["/work/app/x.py"]
    assert paths("shell_command", {"command": "head -n 5 a.txt b.txt", "workdir": "sub"}) == [
        "/work/app/sub/a.txt", "/work/app/sub/b.txt"]
    assert paths("shell_command", {"command": "cat x", "workdir": "/elsewhere"}) == ["/elsewhere/x"]


@pytest.mark.parametrize("command, expected", [
    ("cat a.txt", ["a.txt"]),
    ("cat -n 'with space.txt'", ["with space.txt"]),
    ("/bin/cat a", ["a"]),
    ("head -n 20 a", ["a"]),
    ("head -20 a", ["a"]),
    ("tail -n5 -f log.txt", ["log.txt"]),
    ("wc -l a b", ["a", "b"]),
    ("nl -ba x.py", ["x.py"]),
    ("less x", ["x"]),
    ("sed -n '10,20p' src/m.py", ["src/m.py"]),
    ("sed -n -e 1p -e 2p f", ["f"]),
    ("cat -- -weird", ["-weird"]),
    ("sed 's/a/b/' f", []),          # not a read (prints everything): only sed -n
    ("sed -i 's/a/b/' f", []),       # in-place edit
    ("sed -ni 1p f", []),
    ("cat a | head", []),
    ("cat a > b", []),
    ("cat a; cat b", []),
    ("cd src && cat a", []),
    ("cat $HOME/x", []),
    ("cat $(ls)", []),
    ("cat `ls`", []),
    ("(cat a)", []),
    ("cat a\ncat b", []),
    ("cat 'unterminated", []),
    ("cat *.py", []),
    ("grep -n foo a.py", []),
    ("ls src", []),
    ("python run.py", []),
    ("FOO=1 cat a", []),
    ("open pydicom/x.py 293\n", ["pydicom/x.py"]),   # SWE-agent
    ("create reproduce.py\n", ["reproduce.py"]),
    ("cat a\n", ["a"]),
])
def test_simple_shell_reads_are_extracted_and_everything_else_is_not(command, expected):
    got = request_paths("Bash", json.dumps({"command": command}), None)
    assert got == expected


def test_gemini_and_swe_agent_shapes():
    assert paths("run_shell_command", {"command": "cat GEMINI.md"}) == ["/work/app/GEMINI.md"]
    assert paths("write_file", {"content": "x", "file_path": "myapp/hoge.py"}) == [
        "/work/app/myapp/hoge.py"]
    assert paths("str_replace_editor", {"command": "view", "path": "/repo/a.py"}) == ["/repo/a.py"]


def test_tilde_urls_and_missing_cwd():
    assert paths("Read", {"file_path": "~/.claude/CLAUDE.md"}) == ["~/.claude/CLAUDE.md"]
    assert paths("WebFetch", {"url": "https://x", "path": "https://x/y"}) == []
    assert request_paths("Read", json.dumps({"file_path": "a/../b"}), None) == ["b"]
    assert request_paths("Read", None, CWD) == []
    assert request_paths("Read", "not json at all", CWD) == []
    assert request_paths("Read", "[1, 2]", CWD) == []


def test_entries_keep_the_raw_joined_form_for_escape_detection():
    entries = request_path_entries("Read", json.dumps({"file_path": "m/../../x"}), CWD)
    assert [(e.path, e.raw) for e in entries] == [("/work/x", "/work/app/m/../../x")]


def test_a_given_home_expands_the_tilde():
    got = request_paths("Glob", json.dumps({"path": "~/.claude/commands"}), CWD, home="/Users/u")
    assert got == ["/Users/u/.claude/commands"]


def test_the_fast_split_agrees_with_shlex_on_simple_scripts():
    import random
    import shlex

    from pipeline.text.paths import _split_script

    rng = random.Random(3)
    words = ["cat", "head", "-n", "5", "a.py", "src/b c.txt", "x\\ y", "'q r'", '"d e"', "#c",
             "\u00a0nb", "\tt", "--", "-"]
    for _ in range(2000):
        script = " ".join(rng.choice(words) for _ in range(rng.randint(1, 6)))
        got = _split_script(script)
        if got is None:
            continue
        assert got == shlex.split(script.strip(), posix=True), script
