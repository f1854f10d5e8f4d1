"""The payload store: content-addressed files holding every byte a pruned transcript removed.

Layout (under the lake, docs/policies.md ``payload_prune``)::

    store/<sha256>.payload              the bytes whose sha256 is the name (mode 0600)
    store/manifests/<sha256>.json       restore manifest of the pruned file with that sha256

Safety rules, all enforced here:

- Folders are mode 0700 and files 0600 (set explicitly, whatever the umask).
- Symlinks are refused on EVERY path segment below the lake root: each folder is opened with
  ``O_NOFOLLOW | O_DIRECTORY`` relative to its parent's descriptor (``openat``), and files are
  created and read with ``O_NOFOLLOW`` relative to the folder's descriptor, so a symlink planted
  at ``store``, ``store/manifests`` or ``store/<sha>.payload`` is an error, never followed. The
  lake root itself is the user's choice and may be a symlink (e.g. to a bigger disk).
- Exclusive create: bytes are written to a fresh temporary name (``O_CREAT | O_EXCL |
  O_NOFOLLOW``), fsynced (or, with ``fsync_each=False``, flushed later in a batch by
  :func:`sync_files`), then hard-linked to the final name (``link`` fails if the name
  exists, so nothing is ever overwritten) and the temporary name removed. A process killed
  mid-write leaves only a ``.tmp-*`` file (removed by :meth:`PayloadStore.remove_temps` at the
  next apply), never a half-written payload under its final name.
- An existing file with identical bytes is reused (a no-op); different bytes raise
  :class:`~pipeline.core.errors.StoreError`. Reads re-check the hash. One exception, for
  manifests only (:func:`settle_manifest`): two originals can leave the same pruned bytes
  when one of them IS the other's pruned output (a pruned copy put back into the archive):
  the manifest that removes something wins over the one that removes nothing, whichever
  came first (an identity manifest is atomically replaced; it holds nothing a restore needs).

``crash_point`` is a test hook: with ``CTXLAKE_TEST_CRASH_AT=N`` in the environment (read by
:func:`arm_crash_points`), the N-th write step of a run (a store write, link, or an output
write/rename in ``apply``) kills the process with SIGKILL, so the crash test can stop ``apply``
at every kind of point deterministically.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import hashlib
import os
import re
import secrets
import signal
import stat
from pathlib import Path
from typing import Iterator

from pipeline.core.errors import StoreError

__all__ = ["PayloadStore", "StoreError", "crash_point", "arm_crash_points", "crash_points_passed",
           "SHA256_NAME", "sync_files", "sync_filesystems"]

SHA256_NAME = re.compile(r"^[0-9a-f]{64}$")
PAYLOAD_SUFFIX = ".payload"
MANIFEST_DIR = "manifests"
MANIFEST_SUFFIX = ".json"
TEMP_PREFIX = ".tmp-"
DIR_MODE = 0o700
FILE_MODE = 0o600

_O_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
# O_NONBLOCK: a FIFO planted in the store is refused (not a regular file) instead of
# waiting for a writer forever; it changes nothing for a regular file
_O_READ = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
_O_CREATE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)

# --------------------------------------------------------------------------------------
# crash points (test hook)
# --------------------------------------------------------------------------------------
_crash = {"at": 0, "count": 0}


def arm_crash_points() -> None:
    """Reset the write-step counter and read ``CTXLAKE_TEST_CRASH_AT`` (0 or unset: never)."""
    raw = os.environ.get("CTXLAKE_TEST_CRASH_AT", "")
    _crash["at"] = int(raw) if raw.strip().isdigit() else 0
    _crash["count"] = 0


def crash_point() -> None:
    """Count one write step; SIGKILL this process when it is the armed one."""
    _crash["count"] += 1
    if _crash["at"] and _crash["count"] == _crash["at"]:
        os.kill(os.getpid(), signal.SIGKILL)


def crash_points_passed() -> int:
    """Write steps counted since the last :func:`arm_crash_points` (for the crash test)."""
    return _crash["count"]


def _write_all(fd: int, data: bytes | memoryview) -> None:
    """Write every byte to ``fd`` (a separate function so tests can simulate a full disk)."""
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def durable_writes() -> bool:
    """Whether writes are flushed to disk before they are published (the default). With
    ``CTXLAKE_FSYNC=0`` in the environment, no fsync or syncfs is made: for a throwaway
    lake (a test suite, a CI job, a bench of CPU cost), where a crash of the machine, not
    only of the process, may then lose the last writes. A killed process loses nothing
    either way (what it wrote is in the page cache); the commit order is the same."""
    return os.environ.get("CTXLAKE_FSYNC", "1") != "0"


def fsync(fd: int) -> None:
    """``os.fsync(fd)`` unless writes are not made durable (:func:`durable_writes`)."""
    if durable_writes():
        os.fsync(fd)


def _syncfs():
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.syncfs
    except (OSError, AttributeError):
        return None


_SYNCFS = _syncfs()


def sync_filesystems(paths: list[Path]) -> None:
    """Flush the filesystems holding ``paths`` to disk (``syncfs``; ``sync`` where missing).

    One flush per batch replaces an fsync per file: the guarantee "data on disk before the
    rename that publishes it" is the same, at a fraction of the cost for thousands of files.
    """
    if not durable_writes():
        return
    devices: dict[int, Path] = {}
    for path in paths:
        probe = Path(path)
        while not probe.exists() and probe != probe.parent:
            probe = probe.parent
        devices.setdefault(probe.stat().st_dev, probe if probe.is_dir() else probe.parent)
    for folder in devices.values():
        if _SYNCFS is None:
            os.sync()
            return
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
        try:
            if _SYNCFS(fd) != 0:
                err = ctypes.get_errno()
                raise OSError(err, os.strerror(err), str(folder))
        finally:
            os.close(fd)


# Up to this many files, a batch is made durable file by file (an fsync of each and of its
# folder: the cost of what was written); above it, one syncfs per filesystem (whose cost is
# every dirty page of the filesystem, whoever wrote it: a fixed price worth paying for
# thousands of files, not for a night's handful).
FEW_FILES = 64


def sync_files(files: list[Path], roots: list[Path]) -> None:
    """Make ``files``, written without their own fsync, durable: each and its folder when
    they are few (:data:`FEW_FILES`), else the filesystems holding ``roots`` at once
    (:func:`sync_filesystems`). Nothing to do when nothing was written."""
    if not durable_writes():
        return
    if len(files) > FEW_FILES:
        sync_filesystems(roots)
        return
    folders: set[str] = set()
    for path in files:
        for target, flags in ((path, os.O_RDONLY | os.O_NOFOLLOW),
                              (os.path.dirname(path), os.O_RDONLY | os.O_DIRECTORY)):
            if flags & os.O_DIRECTORY:
                if target in folders:
                    continue
                folders.add(target)
            fd = os.open(target, flags)
            try:
                os.fsync(fd)            # durable writes: checked once above
            finally:
                os.close(fd)


def sha256_hex(data: bytes | memoryview) -> str:
    return hashlib.sha256(data).hexdigest()


def file_sha256(path: str | Path) -> str:
    """The sha256 (hex) of a file's bytes, read in blocks, never through a symlink."""
    digest = hashlib.sha256()
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    with os.fdopen(fd, "rb") as handle:
        while block := handle.read(1 << 22):
            digest.update(block)
    return digest.hexdigest()


class PayloadStore:
    """The store folder ``<anchor>/<segments...>``, opened without following any symlink.

    ``PayloadStore.for_lake(lake_root)`` is ``<lake>/store``; ``PayloadStore.at(folder)`` is any
    store folder (``restore`` uses it with nothing but the store). Use as a context manager or
    call :meth:`close`: the folder descriptors are kept open for the store's lifetime, so a
    symlink swapped in mid-run cannot redirect writes.
    """

    def __init__(self, anchor: Path, segments: tuple[str, ...], *, fsync_each: bool = True):
        if not segments:
            raise ValueError("a store needs at least one folder below its anchor")
        self.anchor = Path(anchor)
        self.segments = segments
        self.fsync_each = fsync_each
        self._fds: dict[str, int] = {}
        self._known: set[str] = set()   # payload names written or verified by this object
        self.stored = 0          # payload files created by this object
        self.reused = 0          # payload writes that found identical bytes already there
        self.bytes_added = 0
        self.unsynced: list[str] = []   # files created without fsync_each (see sync_files)

    @classmethod
    def for_lake(cls, lake_root: Path | str, *, fsync_each: bool = True) -> "PayloadStore":
        """``<lake>/store``. ``fsync_each=False`` leaves durability to the caller, which must
        call :meth:`sync` (or :func:`sync_files` with :meth:`take_unsynced`) before relying on what it stored."""
        return cls(Path(lake_root), ("store",), fsync_each=fsync_each)

    @classmethod
    def at(cls, folder: Path | str) -> "PayloadStore":
        folder = Path(os.path.abspath(folder))
        return cls(folder.parent, (folder.name,))

    @property
    def root(self) -> Path:
        return self.anchor.joinpath(*self.segments)

    def payload_path(self, sha256: str) -> Path:
        return self.root / f"{sha256}{PAYLOAD_SUFFIX}"

    def manifest_path(self, sha256: str) -> Path:
        return self.root / MANIFEST_DIR / f"{sha256}{MANIFEST_SUFFIX}"

    def __enter__(self) -> "PayloadStore":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        for fd in self._fds.values():
            with contextlib.suppress(OSError):
                os.close(fd)
        self._fds.clear()

    # -- folders ------------------------------------------------------------------------
    def _open_child_dir(self, parent_fd: int, name: str, shown: Path, create: bool) -> int | None:
        try:
            fd = os.open(name, _O_DIR, dir_fd=parent_fd)
        except FileNotFoundError:
            if not create:
                return None
            try:
                os.mkdir(name, DIR_MODE, dir_fd=parent_fd)
            except FileExistsError:
                pass
            except OSError as exc:
                raise StoreError(f"cannot create store folder: {exc.strerror or exc}",
                                 path=str(shown)) from None
            return self._open_child_dir(parent_fd, name, shown, create=False)
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.ENOTDIR, errno.EMLINK):
                self._refuse_non_dir(parent_fd, name, shown)
            raise StoreError(f"cannot open store folder: {exc.strerror or exc}",
                             path=str(shown)) from None
        st = os.fstat(fd)
        if stat.S_IMODE(st.st_mode) != DIR_MODE and create:
            try:
                os.fchmod(fd, DIR_MODE)
            except OSError as exc:
                os.close(fd)
                raise StoreError(f"cannot set store folder mode 0700: {exc.strerror or exc}",
                                 path=str(shown)) from None
        return fd

    @staticmethod
    def _refuse_non_dir(parent_fd: int, name: str, shown: Path) -> None:
        try:
            st = os.lstat(name, dir_fd=parent_fd)
        except OSError:
            return
        if stat.S_ISLNK(st.st_mode):
            raise StoreError("refusing a symlink in the store path", path=str(shown),
                             hint="the payload store never follows symlinks; remove it")
        raise StoreError("store path is not a folder", path=str(shown),
                         hint="move the file away so the store can create its folder")

    def _dir_fd(self, sub: str = "", *, create: bool) -> int | None:
        """Descriptor of the store folder (or its ``sub`` folder), walked segment by segment."""
        key = sub
        if key in self._fds:
            return self._fds[key]
        if sub:
            parent = self._dir_fd("", create=create)
            if parent is None:
                return None
            fd = self._open_child_dir(parent, sub, self.root / sub, create)
            if fd is not None:
                self._fds[key] = fd
            return fd
        try:
            fd = os.open(self.anchor, os.O_RDONLY | os.O_DIRECTORY | getattr(os, "O_CLOEXEC", 0))
        except FileNotFoundError:
            if not create:
                return None
            try:
                self.anchor.mkdir(parents=True, exist_ok=True)
                fd = os.open(self.anchor, os.O_RDONLY | os.O_DIRECTORY)
            except OSError as exc:
                raise StoreError(f"cannot create the folder holding the store: "
                                 f"{exc.strerror or exc}", path=str(self.anchor)) from None
        except OSError as exc:
            raise StoreError(f"cannot open the folder holding the store: {exc.strerror or exc}",
                             path=str(self.anchor)) from None
        shown = self.anchor
        try:
            for name in self.segments:
                shown = shown / name
                child = self._open_child_dir(fd, name, shown, create)
                os.close(fd)
                if child is None:
                    return None
                fd = child
        except BaseException:
            with contextlib.suppress(OSError):
                os.close(fd)
            raise
        self._fds[key] = fd
        return fd

    # -- files --------------------------------------------------------------------------
    def _read_named(self, dir_fd: int, name: str, shown: Path) -> bytes | None:
        try:
            fd = os.open(name, _O_READ, dir_fd=dir_fd)
        except FileNotFoundError:
            return None
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.EMLINK):
                raise StoreError("refusing a symlink in the store", path=str(shown),
                                 hint="the payload store never follows symlinks; remove it") from None
            raise StoreError(f"cannot read store file: {exc.strerror or exc}",
                             path=str(shown)) from None
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise StoreError("store entry is not a regular file", path=str(shown))
            chunks = []
            while True:
                block = os.read(fd, 1 << 22)
                if not block:
                    break
                chunks.append(block)
            return b"".join(chunks)
        finally:
            os.close(fd)

    def _put_named(self, sub: str, name: str, data: bytes, settle=None) -> bool:
        """Create ``name`` holding ``data`` exclusively; True when created, False when reused.
        ``settle(existing, data)``, for a name that holds other bytes: "keep" (reuse the
        existing file), "replace" (atomically put ``data`` in its place) or None (a
        :class:`StoreError`)."""
        dir_fd = self._dir_fd(sub, create=True)
        shown = (self.root / sub / name) if sub else (self.root / name)
        if not sub and name in self._known:   # content-addressed: same name, same bytes
            self.reused += 1
            return False
        existing = self._read_named(dir_fd, name, shown)
        replace = False
        if existing is not None and existing != data:
            verdict = settle(existing, data) if settle else None
            if verdict is None:
                raise StoreError("store file exists with different bytes", path=str(shown),
                                 hint="the store is corrupt or was edited; run `ctxlake verify`")
            replace = verdict == "replace"
        if existing is not None and not replace:
            self.reused += 1
            if not sub:
                self._known.add(name)
            return False
        tmp = f"{TEMP_PREFIX}{os.getpid()}-{secrets.token_hex(6)}"
        try:
            fd = os.open(tmp, _O_CREATE, FILE_MODE, dir_fd=dir_fd)
        except OSError as exc:
            raise StoreError(f"cannot create store file: {exc.strerror or exc}",
                             path=str(shown)) from None
        try:
            try:
                os.fchmod(fd, FILE_MODE)
                half = len(data) // 2
                _write_all(fd, memoryview(data)[:half])
                crash_point()
                _write_all(fd, memoryview(data)[half:])
                if self.fsync_each:
                    fsync(fd)
            finally:
                os.close(fd)
            try:
                if replace:
                    os.replace(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
                else:
                    os.link(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd, follow_symlinks=False)
            except FileExistsError:
                again = self._read_named(dir_fd, name, shown)
                if again != data:
                    # another writer's file came first: settled as above, once more
                    if not settle or settle(again, data) is None:
                        raise StoreError("store file exists with different bytes",
                                         path=str(shown)) from None
                    if settle(again, data) == "replace":
                        os.replace(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
                        self.stored += 1
                        return True
                self.reused += 1
                return False
            crash_point()
            if self.fsync_each:
                fsync(dir_fd)
        except OSError as exc:
            raise StoreError(f"cannot write store file: {exc.strerror or exc}",
                             path=str(shown)) from None
        finally:
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=dir_fd)
        self.stored += 1
        self.bytes_added += len(data)
        if not self.fsync_each:
            self.unsynced.append(str(shown))
        if not sub:
            self._known.add(name)
        return True

    # -- public -------------------------------------------------------------------------
    def put(self, data: bytes) -> str:
        """Store ``data`` under its sha256 (no-op when identical bytes are there); the hash."""
        digest = sha256_hex(data)
        self._put_named("", f"{digest}{PAYLOAD_SUFFIX}", bytes(data))
        return digest

    def has(self, sha256: str) -> bool:
        dir_fd = self._dir_fd("", create=False)
        if dir_fd is None:
            return False
        try:
            st = os.lstat(f"{sha256}{PAYLOAD_SUFFIX}", dir_fd=dir_fd)
        except FileNotFoundError:
            return False
        return stat.S_ISREG(st.st_mode)

    def get(self, sha256: str) -> bytes:
        """The bytes stored under ``sha256``; StoreError when missing or when they no longer
        hash to their name."""
        if not SHA256_NAME.match(sha256 or ""):
            raise StoreError(f"not a sha256 locator: {sha256!r}")
        shown = self.payload_path(sha256)
        dir_fd = self._dir_fd("", create=False)
        data = None if dir_fd is None else self._read_named(dir_fd, f"{sha256}{PAYLOAD_SUFFIX}", shown)
        if data is None:
            raise StoreError("payload missing from the store", path=str(shown),
                             hint="restore needs the store the pruned file was written with")
        if sha256_hex(data) != sha256:
            raise StoreError("store file does not match its hash (changed after it was written)",
                             path=str(shown))
        return data

    def put_manifest(self, pruned_sha256: str, data: bytes) -> bool:
        return self._put_named(MANIFEST_DIR, f"{pruned_sha256}{MANIFEST_SUFFIX}", data,
                               settle=settle_manifest)

    def get_manifest(self, pruned_sha256: str) -> bytes | None:
        dir_fd = self._dir_fd(MANIFEST_DIR, create=False)
        if dir_fd is None:
            return None
        return self._read_named(dir_fd, f"{pruned_sha256}{MANIFEST_SUFFIX}",
                                self.manifest_path(pruned_sha256))

    def sync(self) -> None:
        """Make everything stored so far durable (file data and folder entries)."""
        sync_filesystems([self.root])

    def take_unsynced(self) -> list[str]:
        """The files created since the last call without their own fsync (the caller makes
        them durable with :func:`sync_files`)."""
        taken, self.unsynced = self.unsynced, []
        return taken

    def remove_temps(self) -> int:
        """Delete ``.tmp-*`` files left by a killed run (call under the lake lock)."""
        removed = 0
        for sub in ("", MANIFEST_DIR):
            dir_fd = self._dir_fd(sub, create=False)
            if dir_fd is None:
                continue
            for name in os.listdir(dir_fd):
                if name.startswith(TEMP_PREFIX):
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(name, dir_fd=dir_fd)
                        removed += 1
        return removed

    def entries(self, sub: str = "") -> Iterator[tuple[str, os.stat_result]]:
        """(name, lstat) of every entry of the store folder (or ``sub``), sorted."""
        dir_fd = self._dir_fd(sub, create=False)
        if dir_fd is None:
            return
        for name in sorted(os.listdir(dir_fd)):
            try:
                yield name, os.lstat(name, dir_fd=dir_fd)
            except FileNotFoundError:
                continue

    def read_entry(self, sub: str, name: str) -> bytes | None:
        dir_fd = self._dir_fd(sub, create=False)
        if dir_fd is None:
            return None
        shown = (self.root / sub / name) if sub else (self.root / name)
        return self._read_named(dir_fd, name, shown)


def settle_manifest(existing: bytes, new: bytes) -> str | None:
    """Two restore manifests for the same pruned bytes: "keep" the existing one, "replace"
    it by ``new``, or None (a conflict: the store was edited).

    Same pruned bytes from two originals happen when one original is the other's pruned
    output (a pruned copy put back into the archive, or a backup of the outputs ingested):
    the copy removes nothing (its manifest has no edits and names itself as the original),
    the other removes payloads. The manifest with edits is the one a restore needs (the
    identity one only says "this file is its own original"), so it wins in either order:
    restoring that content gives back the fuller original. Two manifests that both remove
    something are never settled (placeholders name their payload's sha256, so they cannot
    leave the same bytes unless the store was edited)."""
    import orjson

    try:
        old, fresh = orjson.loads(existing), orjson.loads(new)
    except orjson.JSONDecodeError:
        return None
    if not (isinstance(old, dict) and isinstance(fresh, dict)) \
            or old.get("pruned_sha256") != fresh.get("pruned_sha256"):
        return None

    def identity(manifest: dict) -> bool:
        return manifest.get("edits") == [] \
            and manifest.get("original_sha256") == manifest.get("pruned_sha256")

    if identity(fresh) and not identity(old) and old.get("edits"):
        return "keep"
    if identity(old) and not identity(fresh) and fresh.get("edits"):
        return "replace"
    return None
