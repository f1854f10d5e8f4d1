"""Object-store lakes (``--lake s3://bucket/prefix``) against a real S3 API: moto's server on a
free port, reached through pyarrow's S3FileSystem with the standard AWS_* variables.

A command works on a local mirror of the lake (pipeline/core/remote.py): pulled before, pushed
(objects, then the manifest) when a writing command lets the lake lock go, under a lease."""

from __future__ import annotations

import hashlib
import json
import os
import socket
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from pipeline.cli import cli
from pipeline.core import remote
from pipeline.core.errors import UnsafePathError, UsageError
from tests.helpers.lake import REAL, assert_same_lake, file_hashes, view_rows
from tests.helpers.s3 import bucket, s3_endpoint  # noqa: F401 (fixtures)

pafs = pytest.importorskip("pyarrow.fs")

def invoke(*args: str, code: int = 0) -> str:
    result = CliRunner().invoke(cli, list(args), catch_exceptions=False)
    assert result.exit_code == code, result.output
    return result.output


def manifest(fs, bucket_name: str) -> dict:
    with fs.open_input_stream(f"{bucket_name}/lake/manifest.json") as stream:
        return json.loads(stream.read())


def objects(fs, bucket_name: str) -> list[str]:
    selector = pafs.FileSelector(f"{bucket_name}/lake/objects", recursive=True)
    return sorted(i.base_name for i in fs.get_file_info(selector) if i.type == pafs.FileType.File)


def synced_files(root: Path) -> dict[str, str]:
    """sha256 of every file of a mirror's lake that the bucket holds (all but the local-only
    lock, DuckDB file and ledger notes)."""
    return {rel: sha for rel, sha in file_hashes_all(root).items() if not remote.local_only(rel)}


def file_hashes_all(root: Path) -> dict[str, str]:
    return {p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture
def archive(tmp_path) -> Path:
    """The real samples and a small demo archive, side by side."""
    from pipeline.demo.archive import write_demo_archive

    import shutil
    shutil.copytree(REAL, tmp_path / "archive" / "real")
    write_demo_archive(tmp_path / "archive" / "demo", size_bytes=600_000, seed=7)
    return tmp_path / "archive"


def test_a_run_into_an_s3_lake_matches_a_local_lake_and_a_second_machine_reports_the_same_usage(
        tmp_path, bucket, archive):
    name, fs = bucket
    url = f"s3://{name}/lake"
    invoke("--lake", str(tmp_path / "local"), "run", str(archive), "--tz", "UTC")
    invoke("--lake", url, "--mirror", str(tmp_path / "m1"), "run", str(archive), "--tz", "UTC")
    assert_same_lake(tmp_path / "local", tmp_path / "m1" / "lake")
    assert len(view_rows(tmp_path / "m1" / "lake")["sessions"]) > 12

    # the bucket: one commit, every file of the mirror as a content object, nothing else
    commit = manifest(fs, name)
    assert commit["commit"] == 1
    mirrored = synced_files(tmp_path / "m1" / "lake")
    assert {rel: e["sha256"] for rel, e in commit["files"].items()} == mirrored
    assert objects(fs, name) == sorted(set(mirrored.values()))
    assert not fs.get_file_info(f"{name}/lake/lease.json").type == pafs.FileType.File

    # a second machine: a fresh mirror pulls the same files and reports the same usage
    report = invoke("--lake", str(tmp_path / "local"), "report", "daily", "--json")
    assert invoke("--lake", url, "--mirror", str(tmp_path / "m2"), "report", "daily",
                  "--json") == report
    assert synced_files(tmp_path / "m2" / "lake") == mirrored
    assert file_hashes(tmp_path / "m2" / "lake") == file_hashes(tmp_path / "local")
    assert manifest(fs, name)["commit"] == 1                 # a report pushes nothing

    # the pulled payload store restores every pruned transcript byte for byte
    out = next(iter((tmp_path / "m2" / "lake" / "out").iterdir()))
    pruned = sorted(p for p in out.rglob("*") if p.is_file() and p.name != ".ctxlake-output")
    changed = 0
    for path in pruned:
        source = archive / path.relative_to(out)
        invoke("--lake", url, "--mirror", str(tmp_path / "m2"), "restore", str(path),
               "--out", str(tmp_path / "restored"))
        assert (tmp_path / "restored").read_bytes() == source.read_bytes()
        changed += source.read_bytes() != path.read_bytes()
    assert len(pruned) >= 12 and changed >= 1

    # the mirror is private: folders 0700, files without group or other bits
    for path in [tmp_path / "m2", *(tmp_path / "m2").rglob("*")]:
        mode = stat.S_IMODE(path.lstat().st_mode)
        assert mode & 0o077 == 0, (path, oct(mode))
        if path.is_dir():
            assert mode == 0o700


def test_a_second_run_with_nothing_new_uploads_only_its_run_log_and_a_report_uploads_nothing(
        tmp_path, bucket, monkeypatch):
    name, fs = bucket
    url = f"s3://{name}/lake"
    mirror = ("--lake", url, "--mirror", str(tmp_path / "m1"))
    invoke(*mirror, "run", str(REAL), "--tz", "UTC")
    before = manifest(fs, name)
    puts: list[str] = []
    upload, write_json = remote.Mirror._upload, remote.Mirror._write_json
    monkeypatch.setattr(remote.Mirror, "_upload",
                        lambda self, rel, entry: puts.append(rel) or upload(self, rel, entry))
    monkeypatch.setattr(remote.Mirror, "_write_json",
                        lambda self, key, value: puts.append(key) or write_json(self, key, value))

    invoke(*mirror, "report", "daily", "--json")
    invoke(*mirror, "status")
    assert puts == []                      # read-only commands: no lease, no object, no commit

    invoke(*mirror, "run", str(REAL), "--tz", "UTC")
    after = manifest(fs, name)
    # a run is always logged (runs.parquet, as in a local lake): that one object and the
    # commit are the only data PUTs; the lease is written once and deleted at the end
    assert puts == ["lease.json", "runs.parquet", "manifest.json"]
    assert after["commit"] == before["commit"] + 1
    changed = sorted(rel for rel in after["files"]
                     if after["files"][rel] != before["files"].get(rel))
    assert changed == ["runs.parquet"]
    assert set(after["files"]) == set(before["files"])
    assert fs.get_file_info(f"{name}/lake/lease.json").type == pafs.FileType.NotFound


def ctxlake_process(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    ctxlake = Path(sys.executable).with_name("ctxlake")
    return subprocess.run([str(ctxlake), *args], capture_output=True, text=True,
                          env={**os.environ, **(env or {})})


def test_a_push_killed_midway_leaves_the_bucket_at_the_previous_commit_and_the_next_run_finishes_it(
        tmp_path, bucket, monkeypatch):
    name, fs = bucket
    url = f"s3://{name}/lake"
    first = tmp_path / "first"
    (first / "claude_code").mkdir(parents=True)
    for path in sorted((REAL / "claude_code").iterdir())[:2]:
        (first / "claude_code" / path.name).write_bytes(path.read_bytes())
    invoke("--lake", url, "--mirror", str(tmp_path / "m1"), "run", str(first), "--tz", "UTC")
    committed_rows = view_rows(tmp_path / "m1" / "lake")
    committed_files = synced_files(tmp_path / "m1" / "lake")

    # the whole archive, killed after the third object of the push
    done = ctxlake_process("--lake", url, "--mirror", str(tmp_path / "m1"), "run", str(REAL),
                           "--tz", "UTC", env={"CTXLAKE_CRASH_AT": "remote:push:object@3"})
    assert done.returncode == -9, done.stderr
    assert manifest(fs, name)["commit"] == 1
    assert len(objects(fs, name)) > len(set(committed_files.values()))   # some objects went up

    # another machine sees the previous commit, whole
    invoke("--lake", url, "--mirror", str(tmp_path / "m2"), "status")
    assert synced_files(tmp_path / "m2" / "lake") == committed_files
    assert view_rows(tmp_path / "m2" / "lake") == committed_rows

    # the next run on the first machine (its lease's process is dead: taken over) pushes it;
    # the killed push's leftovers count as old (they are collected after GC_GRACE_S)
    monkeypatch.setattr(remote, "GC_GRACE_S", 0.0)
    invoke("--lake", url, "--mirror", str(tmp_path / "m1"), "run", str(REAL), "--tz", "UTC")
    assert manifest(fs, name)["commit"] == 2
    invoke("--lake", url, "--mirror", str(tmp_path / "m3"), "status")
    assert synced_files(tmp_path / "m3" / "lake") == synced_files(tmp_path / "m1" / "lake")
    assert len(view_rows(tmp_path / "m3" / "lake")["sessions"]) == 12
    # the objects no commit names were collected
    assert objects(fs, name) == sorted(set(synced_files(tmp_path / "m1" / "lake").values()))
    # the second machine's next pull moves it to the new commit
    invoke("--lake", url, "--mirror", str(tmp_path / "m2"), "status")
    assert synced_files(tmp_path / "m2" / "lake") == synced_files(tmp_path / "m1" / "lake")


def test_the_python_api_opens_an_s3_lake_through_its_own_mirror(tmp_path, bucket):
    from pipeline import open_lake

    name, _ = bucket
    invoke("--lake", f"s3://{name}/lake", "--mirror", str(tmp_path / "m1"), "run",
           str(REAL / "codex"), str(REAL / "gemini"), "--tz", "UTC")
    frames = open_lake(f"s3://{name}/lake", mirror=tmp_path / "m2")
    assert frames.root == tmp_path / "m2" / "lake"
    assert sorted(frames.read_sessions()["format"].to_list()) == ["codex_cli", "gemini_cli"]


def test_status_of_an_s3_lake_shows_its_url_as_the_lake_and_the_mirror_folder_apart(
        tmp_path, bucket, monkeypatch):
    from pipeline.reports.render import human_bytes

    name, _ = bucket
    url = f"s3://{name}/lake"
    mirror = ("--lake", url, "--mirror", str(tmp_path / "m1"))
    ingested = json.loads(invoke(*mirror, "ingest", str(REAL / "codex"), str(REAL / "gemini"),
                                 "--json"))
    # every command's JSON names the lake as status does: by its URL, the mirror apart
    assert (ingested["lake"], ingested["mirror"], ingested["files"]) == (url, str(tmp_path / "m1"), 2)
    status = json.loads(invoke(*mirror, "status", "--tz", "UTC", "--json"))
    assert (status["lake"], status["mirror"]) == (url, str(tmp_path / "m1"))
    local = json.loads(invoke("--lake", str(tmp_path / "local"), "ingest", str(REAL / "codex"),
                              "--json"))
    assert (local["lake"], "mirror" in local) == (str(tmp_path / "local"), False)
    assert (status["files"], status["sessions"], status["busy"]) == (2, 2, False)
    lines = invoke(*mirror, "status", "--tz", "UTC").splitlines()
    assert lines[:2] == [f"lake:     {url} ({human_bytes(status['size_bytes'])}, 2 files, "
                         "2 sessions)",
                         f"mirror:   {tmp_path / 'm1'}"]
    assert lines[2].startswith("config:   ")
    # a second machine's default mirror (under the cache folder) is the one it names
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    other = json.loads(invoke("--lake", url, "status", "--tz", "UTC", "--json"))
    assert (other["lake"], other["mirror"]) == (
        url, str(remote.default_mirror(remote.parse_url(url))))
    assert Path(other["mirror"]).parent == tmp_path / "cache" / "ctxlake" / "mirrors"
    assert (other["files"], other["sessions"]) == (2, 2)


def write_lease(fs, bucket_name: str, **fields) -> None:
    lease = {"token": "someone-else", "host": "build-7", "pid": 4242,
             "expires_at": time.time() + 600, **fields}
    with fs.open_output_stream(f"{bucket_name}/lake/lease.json") as stream:
        stream.write(json.dumps(lease).encode())


def test_a_live_lease_makes_a_writing_run_exit_busy_and_an_expired_one_is_taken_over(
        tmp_path, bucket):
    name, fs = bucket
    url = f"s3://{name}/lake"
    mirror = ("--lake", url, "--mirror", str(tmp_path / "m1"))
    invoke(*mirror, "run", str(REAL / "codex"), "--tz", "UTC")
    write_lease(fs, name)
    result = CliRunner().invoke(cli, [*mirror, "run", str(REAL), "--tz", "UTC"],
                                catch_exceptions=False)
    assert result.exit_code == 75
    assert f"another ctxlake run holds the lease of {url} (host build-7, pid 4242, until " \
        in result.output
    assert "a lease left by a killed run expires at that time" in result.output
    assert manifest(fs, name)["commit"] == 1
    assert len(view_rows(tmp_path / "m1" / "lake")["sessions"]) == 1   # nothing was written
    # reading needs no lease
    assert '"rows"' in invoke(*mirror, "report", "daily", "--json")
    # a lease of this host whose process is gone, or one past its expiry, is free
    for stale in ({"host": socket.gethostname(), "pid": 2 ** 22 + 1},
                  {"expires_at": time.time() - 1}):
        write_lease(fs, name, **stale)
        invoke(*mirror, "run", str(REAL / "gemini"), "--tz", "UTC")
    assert manifest(fs, name)["commit"] == 3
    assert len(view_rows(tmp_path / "m1" / "lake")["sessions"]) == 2


def test_gs_and_s3_urls_parse_and_choose_their_pyarrow_filesystem(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    gs = remote.parse_url("gs://team-bucket/agents/lake/")
    assert (gs.scheme, gs.bucket, gs.prefix, gs.url) == ("gs", "team-bucket", "agents/lake",
                                                         "gs://team-bucket/agents/lake")
    assert gs.key("manifest.json") == "team-bucket/agents/lake/manifest.json"
    assert remote.parse_url("gcs://team-bucket").url == "gs://team-bucket"
    # pathlib folds "//": such a path still reads as the URL
    assert remote.parse_url(Path("s3://b/p")).url == "s3://b/p"
    assert remote.is_url("s3://b") and not remote.is_url("/srv/lake")
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", "http://127.0.0.1:4443")
    assert isinstance(remote.filesystem(gs), pafs.GcsFileSystem)
    s3 = remote.parse_url("s3://b/p?endpoint_override=127.0.0.1:9000&scheme=http&region=eu-west-1")
    fs = remote.filesystem(s3, env={})
    assert isinstance(fs, pafs.S3FileSystem) and fs.region == "eu-west-1"
    assert isinstance(remote.filesystem(remote.parse_url("s3://b"),
                                        env={"AWS_ENDPOINT_URL": "http://127.0.0.1:9000",
                                             "AWS_REGION": "us-west-2"}), pafs.S3FileSystem)
    # one mirror per URL, under the user's cache folder
    assert remote.default_mirror(gs).parent == tmp_path / "cache" / "ctxlake" / "mirrors"
    assert remote.default_mirror(gs) != remote.default_mirror(remote.parse_url("s3://team-bucket/agents/lake"))


@pytest.mark.parametrize("url, message", [
    ("hdfs://namenode/lake", "is an object-store URL (hdfs://) of a kind ctxlake does not support"),
    ("s3:///lake", "names no bucket"),
    ("s3://b/lake?access_key=AKIA", "has unknown options: access_key"),
])
def test_an_unsupported_or_secret_bearing_lake_url_is_a_usage_error(tmp_path, monkeypatch,
                                                                    url, message):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(UsageError, match=None) as info:
        remote.parse_url(url)
    assert message in info.value.message
    result = CliRunner().invoke(cli, ["--lake", url, "sql", "SELECT 1"], catch_exceptions=False)
    assert result.exit_code == 2
    assert message in result.output
    assert list(tmp_path.iterdir()) == []


def test_a_manifest_naming_a_path_outside_the_lake_is_refused_and_nothing_is_written(
        tmp_path, bucket):
    name, fs = bucket
    with fs.open_output_stream(f"{name}/lake/manifest.json") as stream:
        stream.write(json.dumps({"format": remote.MANIFEST_FORMAT, "commit": 1, "files": {
            "../escaped": {"sha256": "0" * 64, "size": 1, "mode": 0o600}}}).encode())
    mirror = remote.Mirror(remote.parse_url(f"s3://{name}/lake"), tmp_path / "m")
    with pytest.raises(UnsafePathError, match="names a path outside the lake: '../escaped'"):
        mirror.pull()
    assert not (tmp_path / "m" / "escaped").exists()
    assert list((tmp_path / "m" / "lake").iterdir()) == []


def test_a_commit_whose_object_is_gone_is_a_clear_error_naming_the_lake(tmp_path, bucket):
    name, fs = bucket
    url = f"s3://{name}/lake"
    invoke("--lake", url, "--mirror", str(tmp_path / "m1"), "ingest", str(REAL / "codex"))
    sha = manifest(fs, name)["files"]["sources.parquet"]["sha256"]
    fs.delete_file(f"{name}/lake/objects/{sha[:2]}/{sha}")
    result = CliRunner().invoke(cli, ["--lake", url, "--mirror", str(tmp_path / "m2"), "status"],
                                catch_exceptions=False)
    assert result.exit_code == 1
    assert f"{url}: objects the bucket's commit names are missing" in result.output
    assert "restore the objects" in result.output
    assert not (tmp_path / "m2" / "lake" / "sources.parquet").exists()


def test_a_pull_leaves_the_mirror_alone_while_a_run_on_this_machine_writes_it(tmp_path, bucket):
    import fcntl

    name, fs = bucket
    url = f"s3://{name}/lake"
    invoke("--lake", url, "--mirror", str(tmp_path / "m1"), "ingest", str(REAL / "codex"))
    invoke("--lake", url, "--mirror", str(tmp_path / "m2"), "ingest", str(REAL / "gemini"))
    assert manifest(fs, name)["commit"] == 2
    before = synced_files(tmp_path / "m1" / "lake")
    with open(tmp_path / "m1" / "lake" / ".lock", "r+") as held:   # another process's run
        fcntl.flock(held, fcntl.LOCK_EX)
        result = remote.pull_mirror(url, tmp_path / "m1").last_pull
    assert result.skipped == "a ctxlake run on this machine is writing the mirror"
    assert synced_files(tmp_path / "m1" / "lake") == before
    assert remote.pull_mirror(url, tmp_path / "m1").last_pull.downloaded > 0
    assert synced_files(tmp_path / "m1" / "lake") == synced_files(tmp_path / "m2" / "lake")


def test_unpushed_changes_of_a_mirror_give_way_to_a_newer_commit_with_a_warning(tmp_path, bucket):
    name, fs = bucket
    url = f"s3://{name}/lake"
    invoke("--lake", url, "--mirror", str(tmp_path / "m1"), "ingest", str(REAL / "codex"))
    (tmp_path / "m1" / "lake" / "derived").mkdir(exist_ok=True)
    (tmp_path / "m1" / "lake" / "derived" / "unpushed.parquet").write_bytes(b"never pushed")
    invoke("--lake", url, "--mirror", str(tmp_path / "m2"), "ingest", str(REAL / "gemini"))
    result = CliRunner().invoke(cli, ["--lake", url, "--mirror", str(tmp_path / "m1"), "status"],
                                catch_exceptions=False)
    assert result.exit_code == 0
    assert f"warning: 1 unpushed change(s) in the mirror {tmp_path / 'm1'} were replaced by " \
        f"{url}'s newer commit 2" in result.stderr
    assert synced_files(tmp_path / "m1" / "lake") == synced_files(tmp_path / "m2" / "lake")


def test_the_mirror_refuses_to_push_a_symlink(tmp_path, bucket):
    name, fs = bucket
    url = f"s3://{name}/lake"
    invoke("--lake", url, "--mirror", str(tmp_path / "m1"), "ingest", str(REAL / "codex"))
    (tmp_path / "secret").write_text("not the lake's")
    (tmp_path / "m1" / "lake" / "planted").symlink_to(tmp_path / "secret")
    result = CliRunner().invoke(cli, ["--lake", url, "--mirror", str(tmp_path / "m1"), "ingest",
                                      str(REAL / "gemini")], catch_exceptions=False)
    assert result.exit_code == 1
    assert "refusing a symlink in the mirror" in result.output
    assert manifest(fs, name)["commit"] == 1


def test_a_long_writer_renews_its_lease_so_another_host_stays_busy_past_the_ttl_and_gets_in_after(
        tmp_path, bucket, monkeypatch):
    from pipeline.core.lake import Lake

    name, fs = bucket
    url = f"s3://{name}/lake"
    invoke("--lake", url, "--mirror", str(tmp_path / "m1"), "ingest", str(REAL / "codex"))
    monkeypatch.setattr(remote, "LEASE_TTL_S", 2.0)
    monkeypatch.setattr(remote, "LEASE_RENEW_S", 0.1)
    second = ("--lake", url, "--mirror", str(tmp_path / "m2"), "ingest", str(REAL / "gemini"))
    first = remote.open_mirror(url, tmp_path / "m1")
    first.host = "build-a"          # another host: its lease is free only once it expires
    try:
        with Lake(first.lake_root).lock():             # a long command of the first host
            taken = first.read_lease()
            assert (taken["token"], taken["host"], taken["pid"]) == (first.token, "build-a",
                                                                     os.getpid())
            while time.time() < taken["expires_at"] + 0.5:     # past the TTL of its first write
                time.sleep(0.1)
            renewed = first.read_lease()
            assert renewed["token"] == first.token
            assert renewed["expires_at"] > taken["expires_at"] + 0.5
            assert renewed["expires_at"] > time.time()
            status = CliRunner().invoke(cli, ["--lake", url, "--mirror", str(tmp_path / "m3"),
                                              "status", "--json"], catch_exceptions=False)
            assert json.loads(status.stdout)["busy"] is True    # held on another host
            result = CliRunner().invoke(cli, list(second), catch_exceptions=False)
            assert result.exit_code == 75
            assert f"another ctxlake run holds the lease of {url} (host build-a, pid " \
                   f"{os.getpid()}, until " in result.output
            assert first.read_lease()["token"] == first.token
    finally:
        first.close()
    assert fs.get_file_info(f"{name}/lake/lease.json").type == pafs.FileType.NotFound
    assert manifest(fs, name)["commit"] == 1         # the first command changed nothing
    status = CliRunner().invoke(cli, ["--lake", url, "--mirror", str(tmp_path / "m3"), "status",
                                      "--json"], catch_exceptions=False)
    assert json.loads(status.stdout)["busy"] is False
    invoke(*second)
    assert manifest(fs, name)["commit"] == 2
    assert len(view_rows(tmp_path / "m2" / "lake")["sessions"]) == 2   # codex and gemini
    assert fs.get_file_info(f"{name}/lake/lease.json").type == pafs.FileType.NotFound


def test_an_object_read_half_written_even_inside_a_character_is_read_again():
    # a filesystem behind pyarrow may show another host's write as it comes: bytes cut inside
    # a UTF-8 character fail to decode before they fail to parse
    import io
    from types import SimpleNamespace

    reads = iter([b'{"token": "t\xf7', b'{"token": "t', b'{"token": "tok"}'])
    fake = SimpleNamespace(fs=SimpleNamespace(open_input_stream=lambda key: io.BytesIO(next(reads))),
                           location=SimpleNamespace(key=lambda name: name))
    assert remote.Mirror._read_json(fake, "lease.json") == {"token": "tok"}
