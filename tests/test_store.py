"""The payload store: content addressing, modes, exclusive create, symlink refusal, failures."""

from __future__ import annotations

import errno
import hashlib
import os
import stat

import pytest

from pipeline.core import store as store_module
from pipeline.core.errors import StoreError
from pipeline.core.lake import atomic_write_bytes
from pipeline.core.store import PayloadStore


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def test_a_payload_is_stored_under_its_sha256_with_private_modes(tmp_path):
    with PayloadStore.for_lake(tmp_path) as store:
        digest = store.put(b"hello payload")
    assert digest == _sha(b"hello payload")
    target = tmp_path / "store" / f"{digest}.payload"
    assert target.read_bytes() == b"hello payload"
    assert stat.S_IMODE(target.stat().st_mode) == 0o600
    assert stat.S_IMODE((tmp_path / "store").stat().st_mode) == 0o700
    assert sorted(p.name for p in (tmp_path / "store").iterdir()) == [f"{digest}.payload"]


def test_storing_identical_bytes_again_is_a_no_op(tmp_path):
    with PayloadStore.for_lake(tmp_path) as store:
        digest = store.put(b"same")
        target = tmp_path / "store" / f"{digest}.payload"
        before = target.stat()
        assert store.put(b"same") == digest
        assert (store.stored, store.reused) == (1, 1)
    after = target.stat()
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)


def test_an_existing_store_file_with_different_bytes_is_an_error(tmp_path):
    digest = _sha(b"original")
    folder = tmp_path / "store"
    folder.mkdir(mode=0o700)
    (folder / f"{digest}.payload").write_bytes(b"tampered")
    with PayloadStore.for_lake(tmp_path) as store, \
            pytest.raises(StoreError, match="different bytes") as caught:
        store.put(b"original")
    assert caught.value.path == str(folder / f"{digest}.payload")
    assert (folder / f"{digest}.payload").read_bytes() == b"tampered"


def test_a_symlink_planted_at_the_store_folder_is_refused(tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    lake = tmp_path / "lake"
    lake.mkdir()
    (lake / "store").symlink_to(elsewhere, target_is_directory=True)
    with PayloadStore.for_lake(lake) as store, pytest.raises(StoreError, match="symlink"):
        store.put(b"secret")
    assert list(elsewhere.iterdir()) == []


def test_a_symlink_planted_at_the_manifests_folder_is_refused(tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / "store").mkdir(mode=0o700)
    (tmp_path / "store" / "manifests").symlink_to(elsewhere, target_is_directory=True)
    with PayloadStore.for_lake(tmp_path) as store, pytest.raises(StoreError, match="symlink"):
        store.put_manifest("a" * 64, b"{}")
    assert list(elsewhere.iterdir()) == []


def test_a_symlink_planted_at_a_payload_path_is_refused_even_to_identical_bytes(tmp_path):
    data = b"payload bytes"
    digest = _sha(data)
    decoy = tmp_path / "decoy"
    decoy.write_bytes(data)
    (tmp_path / "store").mkdir(mode=0o700)
    (tmp_path / "store" / f"{digest}.payload").symlink_to(decoy)
    with PayloadStore.for_lake(tmp_path) as store:
        with pytest.raises(StoreError, match="symlink"):
            store.put(data)
        with pytest.raises(StoreError, match="symlink"):
            store.get(digest)
    assert decoy.read_bytes() == data


def test_a_dangling_symlink_at_a_payload_path_is_refused_and_not_created_through(tmp_path):
    data = b"payload bytes"
    digest = _sha(data)
    target = tmp_path / "would-be-created"
    (tmp_path / "store").mkdir(mode=0o700)
    (tmp_path / "store" / f"{digest}.payload").symlink_to(target)
    with PayloadStore.for_lake(tmp_path) as store, pytest.raises(StoreError, match="symlink"):
        store.put(data)
    assert not target.exists()


def test_a_file_where_the_store_folder_should_be_is_a_clear_error(tmp_path):
    (tmp_path / "store").write_text("not a folder")
    with PayloadStore.for_lake(tmp_path) as store, pytest.raises(StoreError, match="not a folder"):
        store.put(b"x")


def test_get_rechecks_the_hash_of_what_it_reads(tmp_path):
    with PayloadStore.for_lake(tmp_path) as store:
        digest = store.put(b"good bytes")
    path = tmp_path / "store" / f"{digest}.payload"
    path.write_bytes(b"bad bytes!")
    with PayloadStore.for_lake(tmp_path) as store:
        with pytest.raises(StoreError, match="does not match its hash"):
            store.get(digest)
        with pytest.raises(StoreError, match="missing"):
            store.get("0" * 64)


def test_a_full_disk_while_writing_leaves_no_payload_and_no_temp_file(tmp_path, monkeypatch):
    real_write = store_module._write_all
    calls = []

    def full_disk(fd, data):
        calls.append(len(data))
        if len(calls) == 2:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        real_write(fd, data)

    monkeypatch.setattr(store_module, "_write_all", full_disk)
    with PayloadStore.for_lake(tmp_path) as store:
        with pytest.raises(StoreError, match="No space left") as caught:
            store.put(b"0123456789")
    assert caught.value.path.endswith(f"{_sha(b'0123456789')}.payload")
    assert list((tmp_path / "store").iterdir()) == []


def test_temp_files_of_a_killed_run_are_removed(tmp_path):
    with PayloadStore.for_lake(tmp_path) as store:
        digest = store.put(b"kept")
        store.put_manifest("b" * 64, b"{}\n")
    (tmp_path / "store" / ".tmp-123-abc").write_bytes(b"half")
    (tmp_path / "store" / "manifests" / ".tmp-9-x").write_bytes(b"half")
    with PayloadStore.for_lake(tmp_path) as store:
        assert store.remove_temps() == 2
    assert sorted(p.name for p in (tmp_path / "store").iterdir()) == [f"{digest}.payload",
                                                                      "manifests"]
    assert [p.name for p in (tmp_path / "store" / "manifests").iterdir()] == ["b" * 64 + ".json"]


def test_an_existing_store_folder_with_loose_permissions_is_tightened(tmp_path):
    (tmp_path / "store").mkdir()
    os.chmod(tmp_path / "store", 0o755)
    with PayloadStore.for_lake(tmp_path) as store:
        store.put(b"x")
    assert stat.S_IMODE((tmp_path / "store").stat().st_mode) == 0o700


def test_a_store_can_be_opened_from_its_folder_alone(tmp_path):
    with PayloadStore.for_lake(tmp_path / "lake") as store:
        digest = store.put(b"portable")
    moved = tmp_path / "copy-of-store"
    os.rename(tmp_path / "lake" / "store", moved)
    with PayloadStore.at(moved) as store:
        assert store.get(digest) == b"portable"


def _count_durability(monkeypatch) -> dict:
    calls = {"fsync": [], "syncfs": 0}
    real_fsync = os.fsync

    def fsync(fd):
        calls["fsync"].append(os.readlink(f"/proc/self/fd/{fd}"))
        real_fsync(fd)

    def syncfs(paths):
        calls["syncfs"] += 1

    monkeypatch.setattr(store_module.os, "fsync", fsync)
    monkeypatch.setattr(store_module, "sync_filesystems", syncfs)
    monkeypatch.setenv("CTXLAKE_FSYNC", "1")      # the suite runs without (tests/conftest.py)
    return calls


def test_a_few_files_stored_without_fsync_are_made_durable_one_by_one_with_their_folders(
        tmp_path, monkeypatch):
    with PayloadStore.for_lake(tmp_path, fsync_each=False) as store:
        digests = [store.put(f"payload {i}".encode()) for i in range(3)]
        store.put_manifest(digests[0], b"{}")
        unsynced = store.take_unsynced()
    assert sorted(unsynced) == sorted([str(store.payload_path(d)) for d in digests]
                                      + [str(store.manifest_path(digests[0]))])
    calls = _count_durability(monkeypatch)
    store_module.sync_files(unsynced, [tmp_path])
    assert calls["syncfs"] == 0
    assert sorted(calls["fsync"]) == sorted(unsynced + [str(tmp_path / "store"),
                                                        str(tmp_path / "store" / "manifests")])


def test_many_files_are_made_durable_by_one_flush_of_the_filesystem(tmp_path, monkeypatch):
    calls = _count_durability(monkeypatch)
    files = [str(tmp_path / f"f{i}") for i in range(store_module.FEW_FILES + 1)]
    store_module.sync_files(files, [tmp_path])     # never opened: the flush covers them
    assert calls == {"fsync": [], "syncfs": 1}
    store_module.sync_files([], [tmp_path])        # nothing written: nothing to flush
    assert calls == {"fsync": [], "syncfs": 1}


def test_with_fsync_off_nothing_is_flushed_and_the_files_are_still_published(tmp_path, monkeypatch):
    calls = _count_durability(monkeypatch)
    monkeypatch.setenv("CTXLAKE_FSYNC", "0")
    with PayloadStore.for_lake(tmp_path) as store:           # fsync_each: off by the switch
        digest = store.put(b"throwaway")
    store_module.sync_files([str(store.payload_path(digest))], [tmp_path])
    store_module.sync_files([str(tmp_path / f"f{i}") for i in range(store_module.FEW_FILES + 1)],
                            [tmp_path])
    atomic_write_bytes(tmp_path / "note.txt", b"kept")
    assert calls == {"fsync": [], "syncfs": 0}
    with PayloadStore.for_lake(tmp_path) as store:
        assert store.get(digest) == b"throwaway"
    assert (tmp_path / "note.txt").read_bytes() == b"kept"
