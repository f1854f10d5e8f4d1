"""ctxlake writes and deletes only in folders of its own: never in the archive it reads, a
folder of the lake's other than ``<lake>/out``, a folder of the user's, or through a symlink.

Before, ``run --out ARCHIVE`` wrote its output marker into a folder of the archive: the next
night skipped that folder's transcripts as ctxlake's outputs and overwrote one of them; a
symlink planted at ``<lake>/out`` was followed; ``--out <lake>/tables`` was taken and every
later night crashed; ``report html --out DIR`` replaced and removed the user's files in DIR.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from click.testing import CliRunner

from pipeline.cli import cli
from pipeline.stages.apply import policy_key
from tests.helpers.lake import copy_real

SAMPLE = "codex/codex_session.jsonl"
POLICY = "payload_prune+microcompact"


def _run(*args: str) -> object:
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def _tree(root: Path) -> dict[str, str]:
    """Every file below ``root`` (links as their target's name), with its sha256."""
    found = {}
    for dirpath, dirs, names in os.walk(root):
        for name in names + [d for d in dirs if os.path.islink(os.path.join(dirpath, d))]:
            path = Path(dirpath) / name
            rel = str(path.relative_to(root))
            found[rel] = ("-> " + os.readlink(path) if path.is_symlink()
                          else hashlib.sha256(path.read_bytes()).hexdigest())
    return found


def _error(result) -> dict:
    return json.loads(result.output)["error"]


def test_an_output_folder_in_the_archive_is_refused_before_anything_is_written(tmp_path):
    archive = copy_real(tmp_path, SAMPLE)
    # a folder of the archive named as the policy's output folder, holding a transcript
    inner = archive / policy_key(POLICY) / "codex"
    inner.mkdir(parents=True)
    (inner / "codex_session.jsonl").write_bytes((archive / SAMPLE).read_bytes())
    before = _tree(archive)
    lake = tmp_path / "lake"
    for out in (archive, archive / "outputs", inner):
        result = _run("--lake", str(lake), "run", str(archive), "--tz", "UTC", "--out", str(out),
                      "--policy", POLICY, "--json")
        assert result.exit_code == 2
        assert _error(result)["message"] == "the output folder overlaps the archive being read"
        assert _tree(archive) == before
    # a mistyped archive is said as such (not as an output folder beside it), and no lake is
    # made for it, by run or by ingest
    for command in (["run", str(tmp_path / "typo"), "--out", str(tmp_path / "out")],
                    ["ingest", str(tmp_path / "typo")]):
        result = _run("--lake", str(lake), *command, "--json")
        assert (result.exit_code, _error(result)["message"]) == (2, f"no such file or folder: {tmp_path / 'typo'}")
    assert not lake.exists()
    # the lake's own output folder is taken, and the archive is read whole
    result = _run("--lake", str(lake), "run", str(archive), "--tz", "UTC", "--policy", POLICY, "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["ingest"]["files_new"] == 2
    assert _tree(archive) == before


def test_an_output_folder_holding_a_source_is_refused_by_apply(tmp_path):
    archive = copy_real(tmp_path, SAMPLE)
    lake = tmp_path / "lake"
    assert _run("--lake", str(lake), "run", str(archive), "--tz", "UTC", "--policy", POLICY,
                "--quiet").exit_code == 0
    before = _tree(archive)
    # the archive moved to where apply --out would put the policy's outputs, and read there
    out = tmp_path / "elsewhere"
    out.mkdir()
    os.rename(archive, out / policy_key(POLICY))
    moved = out / policy_key(POLICY)
    assert _run("--lake", str(lake), "ingest", str(moved), "--quiet").exit_code == 0
    result = _run("--lake", str(lake), "apply", "--policy", POLICY, "--out", str(out), "--json")
    assert result.exit_code == 2
    assert _error(result)["message"] == "the output folder holds a source transcript of the lake"
    assert _tree(moved) == before


def test_an_output_folder_inside_the_lake_is_refused_and_later_nights_still_run(tmp_path):
    archive = copy_real(tmp_path, SAMPLE)
    lake = tmp_path / "lake"
    assert _run("--lake", str(lake), "run", str(archive), "--tz", "UTC", "--quiet").exit_code == 0
    for out in (lake, lake / "tables", lake / "derived"):
        result = _run("--lake", str(lake), "run", str(archive), "--tz", "UTC", "--out", str(out), "--json")
        assert result.exit_code == 2
        assert _error(result)["message"] == "the output folder overlaps the lake"
    result = _run("--lake", str(lake), "apply", "--policy", POLICY, "--out", str(lake / "tables"), "--json")
    assert result.exit_code == 2
    assert _error(result)["message"] == "the output folder overlaps the lake"
    assert _run("--lake", str(lake), "run", str(archive), "--tz", "UTC", "--quiet").exit_code == 0
    assert _run("--lake", str(lake), "verify", "--quiet").exit_code == 0


def test_a_symlink_planted_at_the_lakes_output_folder_fails_apply_and_nothing_is_written_through_it(tmp_path):
    archive = copy_real(tmp_path, SAMPLE)
    lake = tmp_path / "lake"
    assert _run("--lake", str(lake), "run", str(archive), "--tz", "UTC", "--quiet").exit_code == 0
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "keep.txt").write_text("precious")
    os.rename(lake / "out", tmp_path / "out.orig")
    (lake / "out").symlink_to(elsewhere, target_is_directory=True)
    path = archive / SAMPLE
    path.write_bytes(path.read_bytes() + path.read_bytes().splitlines(keepends=True)[-1])
    result = _run("--lake", str(lake), "run", str(archive), "--tz", "UTC", "--json")
    assert result.exit_code == 1
    night = json.loads(result.output)
    failed = {s["stage"]: s["error"] for s in night["stages"] if s["status"] == "failed"}
    assert sorted(failed) == [f"apply:{p}" for p in sorted(night["settings"]["policies"])]
    assert all(e.startswith(f"UnsafePathError: {lake / 'out'}: the output folder is a symlink")
               for e in failed.values())
    assert {s["stage"] for s in night["stages"] if s["status"] == "ok"} >= {"summarize", "usage"}
    assert _tree(elsewhere) == {"keep.txt": hashlib.sha256(b"precious").hexdigest()}
    # a user's --out that is a symlink is refused the same way, before the night starts
    link = tmp_path / "outlink"
    link.symlink_to(elsewhere, target_is_directory=True)
    result = _run("--lake", str(lake), "run", str(archive), "--tz", "UTC", "--out", str(link), "--json")
    assert result.exit_code == 1
    assert _error(result)["message"] == "the output folder is a symlink"
    assert _tree(elsewhere) == {"keep.txt": hashlib.sha256(b"precious").hexdigest()}


def test_apply_and_the_html_report_never_take_over_a_folder_of_the_users(tmp_path):
    archive = copy_real(tmp_path, SAMPLE)
    lake = tmp_path / "lake"
    assert _run("--lake", str(lake), "run", str(archive), "--tz", "UTC", "--quiet").exit_code == 0
    mine = tmp_path / "mine"
    (mine / policy_key(POLICY) / "sessions").mkdir(parents=True)
    (mine / policy_key(POLICY) / "notes.txt").write_text("mine")
    (mine / "index.html").write_text("<p>my index</p>")
    (mine / "sessions" / "a.html").parent.mkdir()
    (mine / "sessions" / "a.html").write_text("mine")
    before = _tree(mine)
    result = _run("--lake", str(lake), "apply", "--policy", POLICY, "--out", str(mine), "--json")
    assert result.exit_code == 2
    assert _error(result)["message"] == "the output folder already holds files that ctxlake did not write"
    result = _run("--lake", str(lake), "report", "html", "--out", str(mine), "--json")
    assert result.exit_code == 2
    assert _error(result)["message"] == "the report folder already holds files that ctxlake did not write"
    assert _tree(mine) == before
    # a new folder is taken, marked, and taken again by the next render
    report = tmp_path / "report"
    for _ in range(2):
        result = _run("--lake", str(lake), "report", "html", "--out", str(report), "--json")
        assert result.exit_code == 0, result.output
    assert (report / ".ctxlake-html").is_file()
    # a report written before the marker (its three pages there) is still taken
    (report / ".ctxlake-html").unlink()
    assert _run("--lake", str(lake), "report", "html", "--out", str(report), "--quiet").exit_code == 0
