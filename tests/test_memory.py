"""Managed-memory classification: roots, realpath safety, archives from other machines."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from pipeline.text.memory import Classifier, MemoryRoots, classify, home_for_cwd

ROOTS = MemoryRoots()


@pytest.fixture
def tree(tmp_path: Path) -> dict[str, Path]:
    """home/me with user memory, home/me/proj with project and team memory, and outside files."""
    home = tmp_path / "home" / "me"
    proj = home / "proj"
    (proj / ".qwen" / "team-memory").mkdir(parents=True)
    (proj / ".claude").mkdir()
    (proj / "src").mkdir()
    (home / ".claude").mkdir()
    (home / ".gemini").mkdir()
    (home / ".qwen" / "memories").mkdir(parents=True)
    (home / ".qwen" / "projects" / "-home-me-proj" / "memory").mkdir(parents=True)
    for file in (proj / "CLAUDE.md", proj / ".claude" / "CLAUDE.md", proj / "GEMINI.md",
                 proj / ".qwen" / "team-memory" / "notes.md", proj / "src" / "app.py",
                 home / ".claude" / "CLAUDE.md", home / ".gemini" / "GEMINI.md",
                 home / ".qwen" / "memories" / "facts.md",
                 home / ".qwen" / "projects" / "-home-me-proj" / "memory" / "m.md",
                 tmp_path / "secret.txt"):
        file.write_text("x\n")
    return {"root": tmp_path, "home": home, "proj": proj}


def _classify(tree, path, cwd=None):
    return classify(str(path), cwd=str(cwd or tree["proj"]), roots=ROOTS, home=str(tree["home"]))


def test_project_memory_files_are_project(tree):
    proj = tree["proj"]
    assert [_classify(tree, proj / name) for name in
            ("CLAUDE.md", ".claude/CLAUDE.md", "GEMINI.md")] == ["project"] * 3
    assert _classify(tree, tree["home"] / ".qwen/projects/-home-me-proj/memory/m.md") == "project"


def test_user_memory_files_are_user(tree):
    home = tree["home"]
    assert _classify(tree, home / ".claude" / "CLAUDE.md") == "user"
    assert _classify(tree, home / ".gemini" / "GEMINI.md") == "user"
    assert _classify(tree, home / ".qwen" / "memories" / "facts.md") == "user"
    assert _classify(tree, "~/.claude/CLAUDE.md") == "user"


def test_team_memory_folder_is_team_including_a_file_named_like_project_memory(tree):
    team = tree["proj"] / ".qwen" / "team-memory"
    assert _classify(tree, team / "notes.md") == "team"
    (team / "CLAUDE.md").write_text("x")
    assert _classify(tree, team / "CLAUDE.md") == "team"


def test_files_outside_every_root_are_none(tree):
    assert _classify(tree, tree["proj"] / "src" / "app.py") == "none"
    assert _classify(tree, tree["root"] / "secret.txt") == "none"
    assert _classify(tree, "/etc/hosts") == "none"


def test_a_claude_md_in_an_unrelated_directory_is_not_this_sessions_memory(tree):
    other = tree["root"] / "elsewhere"
    other.mkdir()
    (other / "CLAUDE.md").write_text("x")
    assert _classify(tree, other / "CLAUDE.md") == "none"
    assert _classify(tree, other / "CLAUDE.md", cwd=other) == "project"


def test_a_symlink_inside_a_root_pointing_outside_is_escape(tree):
    link = tree["proj"] / ".qwen" / "team-memory" / "link.md"
    os.symlink(tree["root"] / "secret.txt", link)
    assert _classify(tree, link) == "escape"
    replaced = tree["proj"] / "CLAUDE.md"
    replaced.unlink()
    os.symlink(tree["root"] / "secret.txt", replaced)
    assert _classify(tree, replaced) == "escape"


def test_a_symlinked_parent_directory_that_leaves_a_root_is_escape(tree):
    outside = tree["root"] / "outside"
    outside.mkdir()
    (outside / "x.md").write_text("x")
    os.symlink(outside, tree["proj"] / ".qwen" / "team-memory" / "sub")
    assert _classify(tree, tree["proj"] / ".qwen/team-memory/sub/x.md") == "escape"
    # a file that does not exist below the symlinked folder resolves through it too
    assert _classify(tree, tree["proj"] / ".qwen/team-memory/sub/new.md") == "escape"


def test_a_symlinked_root_itself_is_followed_not_escaped(tree):
    dotfiles = tree["root"] / "dotfiles" / "claude"
    dotfiles.mkdir(parents=True)
    (dotfiles / "CLAUDE.md").write_text("x")
    claude_dir = tree["home"] / ".claude"
    (claude_dir / "CLAUDE.md").unlink()
    claude_dir.rmdir()
    os.symlink(dotfiles, claude_dir)
    assert _classify(tree, "~/.claude/CLAUDE.md") == "user"


def test_dot_dot_that_leaves_a_root_is_escape(tree):
    team = tree["proj"] / ".qwen" / "team-memory"
    assert _classify(tree, f"{team}/../../src/app.py") == "escape"
    assert _classify(tree, f"{team}/../../../../secret.txt") == "escape"
    # leaving one root for another is still leaving it
    assert _classify(tree, f"{team}/../../CLAUDE.md") == "escape"


def test_dot_dot_that_enters_a_root_is_that_root(tree):
    assert _classify(tree, tree["proj"] / "src" / ".." / "CLAUDE.md") == "project"


def test_relative_paths_resolve_against_the_cwd(tree):
    assert _classify(tree, "CLAUDE.md") == "project"
    assert _classify(tree, ".qwen/team-memory/notes.md") == "team"
    assert _classify(tree, "src/app.py") == "none"
    assert _classify(tree, "../.claude/CLAUDE.md") == "user"
    assert _classify(tree, "CLAUDE.md", cwd=tree["proj"] / "src") == "project"  # in an ancestor
    assert _classify(tree, "../CLAUDE.md", cwd=tree["proj"] / ".qwen" / "team-memory") == "escape"


def test_non_existent_paths_from_another_machine_classify_lexically(tree):
    cwd = "/Users/alice/work/app"
    assert classify("CLAUDE.md", cwd=cwd, roots=ROOTS) == "project"
    assert classify("/Users/alice/.claude/CLAUDE.md", cwd=cwd, roots=ROOTS) == "user"
    assert classify("~/.gemini/GEMINI.md", cwd=cwd, roots=ROOTS) == "user"
    assert classify(".qwen/team-memory/a/b.md", cwd=cwd, roots=ROOTS) == "team"
    assert classify("src/main.rs", cwd=cwd, roots=ROOTS) == "none"
    assert classify(".qwen/team-memory/../../../x", cwd=cwd, roots=ROOTS) == "escape"
    # a not-yet-existing file in an existing memory folder is still in it
    assert _classify(tree, tree["proj"] / ".qwen" / "team-memory" / "new.md") == "team"
    # a project folder under tmp_path that does not exist (an existing ancestor is resolved)
    gone = tree["root"] / "gone" / "proj"
    assert _classify(tree, "CLAUDE.md", cwd=gone) == "project"
    assert _classify(tree, ".qwen/team-memory/../../x", cwd=gone) == "escape"
    assert _classify(tree, "src/x.py", cwd=gone) == "none"


def test_home_is_inferred_from_a_transcript_cwd():
    assert home_for_cwd("/Users/test_user/agent-sample") == "/Users/test_user"
    assert home_for_cwd("/home/bob") == "/home/bob"
    assert home_for_cwd("/root/x") == "/root"
    assert home_for_cwd("/srv/app") is None
    assert home_for_cwd(None) is None


def test_config_roots_add_to_the_defaults(tree):
    (tree["proj"] / "docs").mkdir()
    (tree["proj"] / "docs" / "MEMORY.md").write_text("x")
    (tree["root"] / "shared-team").mkdir()
    roots = MemoryRoots.from_config({"project": ["docs/MEMORY.md"],
                                     "team": [str(tree["root"] / "shared-team") + "/"],
                                     "user": ["notes/"]})
    classifier = Classifier(roots, home=str(tree["home"]))
    cwd = str(tree["proj"])
    assert classifier.classify(str(tree["proj"] / "docs" / "MEMORY.md"), cwd=cwd) == "project"
    assert classifier.classify(str(tree["root"] / "shared-team" / "t.md"), cwd=cwd) == "team"
    assert classifier.classify(str(tree["home"] / "notes" / "n.md"), cwd=cwd) == "user"
    assert classifier.classify(str(tree["proj"] / "CLAUDE.md"), cwd=cwd) == "project"
    with pytest.raises(ValueError, match="unknown"):
        MemoryRoots.from_config({"projects": ["x"]})
