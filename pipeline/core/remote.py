"""Object-store lakes (``s3://bucket/prefix``, ``gs://bucket/prefix``) through a local mirror.

A lake needs POSIX semantics that object stores lack: the lake lock (``flock``), the payload
store's exclusive create (``O_CREAT | O_EXCL`` to a temp name, then ``link``) and its refusal
of symlinks on every path segment (``O_NOFOLLOW``), and the atomic rename by which every part,
derived file and output appears. So a command on an object-store lake works on a private local
copy, the mirror (default ``$XDG_CACHE_HOME/ctxlake/mirrors/<hash of the URL>``), where every
one of those rules applies exactly as on a local lake, and the bucket holds *commits* of it:

    <prefix>/objects/<sha256[:2]>/<sha256>   one object per distinct file content (immutable)
    <prefix>/manifest.json                   the commit: relative path -> sha256, size, mode
    <prefix>/lease.json                      the writer's lease (run token, host, pid, expiry)

- **Pull** (before every command): one GET of ``manifest.json``; when its commit number is the
  one the mirror last synced, nothing else is read. Otherwise the files whose content differs
  are downloaded (each to a temp name, hash checked, then renamed into place: never half a
  file, never through a symlink) and the files the commit no longer has are deleted, so the
  mirror equals the commit. Content objects never change, so most of a lake is fetched once.
- **Push** (when the outermost lake lock of a command that finished is let go): the objects of
  the new contents are uploaded first, then ``manifest.json`` is written (one PUT: atomic, and
  read-after-write consistent on S3 and GCS), and only then are objects deleted: those the
  previous commit named and the new one does not, and unnamed leftovers older than
  :data:`GC_GRACE_S` (a killed push's). A reader, or a push killed midway, therefore always sees a whole commit: the
  previous one until the manifest is written. A mirror whose push was interrupted still holds
  the new state, so the next writing command there pushes it (objects already up are not sent
  again). A command that changed nothing uploads nothing.
- **Lease** (object stores have no ``flock``, and pyarrow exposes no conditional put): a
  writing command (the first time it takes the lake lock) reads ``lease.json``; a live lease of
  another run is a :class:`~pipeline.core.errors.LakeLockedError` (exit 75, "lake busy"). It
  then writes its own lease, waits :data:`LEASE_SETTLE_S` and reads it back: another token
  means another writer won. Race window: two writers that both read "free" and whose PUTs land
  more than the settle time apart in the wrong order (A reads back before B's PUT arrives) can
  both believe they won. The push narrows what that can break: it re-reads the lease and the
  manifest before committing and refuses when either moved, so the loser's changes stay in its
  mirror instead of overwriting the winner's commit. What remains: the lease check and the
  manifest PUT are two requests, so two pushes interleaving within those milliseconds while the
  lease flips could both commit: the later manifest wins, the earlier commit's changes are
  lost, and in the worst case the later one names an object the other push collected (its
  previous commit's), which a pull then reports as missing. A lease is renewed while the command runs
  and expires :data:`LEASE_TTL_S` after its last renewal (a killed run's lease blocks others
  until then; on its own host a lease whose pid is dead is taken over at once).

Credentials and endpoints come from pyarrow's standard chain (``AWS_ACCESS_KEY_ID`` /
``AWS_SECRET_ACCESS_KEY`` / ``AWS_SESSION_TOKEN``, ``~/.aws``, instance roles; Google's
application default credentials), plus the endpoint variables the AWS and Google SDKs read
and pyarrow does not (``AWS_ENDPOINT_URL_S3`` / ``AWS_ENDPOINT_URL``, ``STORAGE_EMULATOR_HOST``)
and the region (``AWS_REGION`` / ``AWS_DEFAULT_REGION``). ctxlake writes no secret anywhere.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import hashlib
import json
import os
import secrets
import socket
import stat
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from pipeline.core.crash import crash_point
from pipeline.core.errors import LakeLockedError, RemoteError, UnsafePathError, UsageError
from pipeline.core.locations import URL, is_url, user_cache_dir
from pipeline.core.ledger import CHECKED_SUFFIX
from pipeline.core.store import file_sha256, fsync
from pipeline.core.lake import (FILE_MODE, LOCK_HOOKS, TEMP_NAME, Lake, atomic_write_bytes,
                                private_dirs, refuse_symlinks)

__all__ = ["RemoteLocation", "Mirror", "parse_url", "is_url", "filesystem", "default_mirror",
           "open_mirror", "pull_mirror", "PullResult", "PushResult"]

SCHEMES = {"s3": "s3", "gs": "gs", "gcs": "gs"}
# query options a lake URL may carry (never a secret: credentials come from the environment)
URL_OPTIONS = {"endpoint_override", "scheme", "region"}
MANIFEST_FORMAT = "ctxlake-remote-lake/1"
LEASE_TTL_S = 300.0          # a lease not renewed for this long is free
LEASE_RENEW_S = 60.0         # how often a running command renews its lease
LEASE_SETTLE_S = 0.5         # wait between writing the lease and reading it back
TRANSFER_THREADS = 8         # objects moved at once
GC_GRACE_S = 3600.0          # an object no commit names is collected once this old
CHUNK = 1 << 20
# files of the mirror that stay on this machine: the local lock, the DuckDB file for
# external clients (its views name the mirror's absolute paths) and its stamp, and the
# ledger's notes of outputs found whole (``*.checked.json``: this machine's inodes and mtimes)
LOCAL_ONLY = {".lock", "ctxlake.duckdb", ".ctxlake.duckdb.views", ".ctxlake.duckdb.tmp"}


def local_only(rel: str) -> bool:
    """Whether the mirror's file ``rel`` (a path below the lake, ``/``-separated) stays on
    this machine (see ``LOCAL_ONLY``)."""
    return rel in LOCAL_ONLY or rel.endswith(CHECKED_SUFFIX)


@dataclasses.dataclass(frozen=True)
class RemoteLocation:
    scheme: str                  # "s3" or "gs"
    bucket: str
    prefix: str                  # no leading or trailing "/" ("" is the bucket's root)
    options: tuple[tuple[str, str], ...] = ()

    @property
    def url(self) -> str:
        return f"{self.scheme}://{self.bucket}" + (f"/{self.prefix}" if self.prefix else "")

    def key(self, name: str) -> str:
        """The filesystem path (``bucket/prefix/name``) of an object of this lake."""
        return "/".join(p for p in (self.bucket, self.prefix, name) if p)


def parse_url(text: str | os.PathLike) -> RemoteLocation:
    """``s3://bucket/prefix`` or ``gs://bucket/prefix`` (``gcs://`` too), with optional
    ``?endpoint_override=HOST:PORT&scheme=http&region=R``. Any other scheme, a missing bucket,
    a secret or an unknown option in the URL is a :class:`UsageError`."""
    raw = os.fspath(text)
    match = URL.match(raw)
    if not match:
        raise UsageError(f"the lake '{raw}' is not an object-store URL")
    name = match.group(1).lower()
    if name not in SCHEMES:
        raise UsageError(f"the lake '{raw}' is an object-store URL ({name}://) of a kind ctxlake "
                         "does not support", hint="use s3://BUCKET/PREFIX or gs://BUCKET/PREFIX, "
                         "or a POSIX path (a shared filesystem or a mounted bucket)")
    rest = raw[match.end() - 1:]
    slashes = len(rest) - len(rest.lstrip("/"))
    rest = rest.lstrip("/") if slashes <= 2 else ""    # "s3:/b" is pathlib's "s3://b"
    parts = urlsplit(f"{name}://{rest}")
    bucket, prefix = parts.netloc, parts.path.strip("/")
    if not bucket or "@" in bucket or ":" in bucket:
        raise UsageError(f"the lake '{raw}' names no bucket", hint=f"{name}://BUCKET/PREFIX")
    if any(p in ("", ".", "..") for p in prefix.split("/")) and prefix:
        raise UsageError(f"the lake '{raw}' has an empty, '.' or '..' segment in its prefix")
    options = tuple(sorted(parse_qsl(parts.query, keep_blank_values=True)))
    unknown = sorted({k for k, _ in options} - URL_OPTIONS)
    if unknown:
        raise UsageError(f"the lake URL '{raw}' has unknown options: {', '.join(unknown)}",
                         hint="allowed: endpoint_override, scheme, region; credentials come from "
                              "the environment (AWS_ACCESS_KEY_ID, ..., never the URL)")
    return RemoteLocation(SCHEMES[name], bucket, prefix, options)


def _endpoint(value: str) -> tuple[str, str | None]:
    """``http://host:port`` -> (``host:port``, ``http``); a bare ``host:port`` has no scheme."""
    if "://" in value:
        parts = urlsplit(value)
        return parts.netloc + parts.path.rstrip("/"), parts.scheme
    return value, None


def filesystem(location: RemoteLocation, env: dict | None = None):
    """The pyarrow filesystem of ``location``: ``S3FileSystem`` or ``GcsFileSystem``, with the
    URL's options, else the endpoint and region variables of the environment."""
    import pyarrow.fs as pafs

    env = os.environ if env is None else env
    options = dict(location.options)
    kwargs: dict[str, Any] = {}
    if location.scheme == "s3":
        endpoint = options.get("endpoint_override") or env.get("AWS_ENDPOINT_URL_S3") \
            or env.get("AWS_ENDPOINT_URL")
        region = options.get("region") or env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION")
        if region:
            kwargs["region"] = region
        factory = pafs.S3FileSystem
    else:
        endpoint = options.get("endpoint_override") or env.get("STORAGE_EMULATOR_HOST")
        factory = pafs.GcsFileSystem
    if endpoint:
        host, scheme = _endpoint(endpoint)
        kwargs["endpoint_override"] = host
        if scheme:
            kwargs["scheme"] = scheme
    if options.get("scheme"):
        kwargs["scheme"] = options["scheme"]
    return factory(**kwargs)


def default_mirror(location: RemoteLocation) -> Path:
    """The mirror folder of a lake URL: one per URL (options included) under the cache."""
    name = location.url + ("?" + "&".join(f"{k}={v}" for k, v in location.options)
                           if location.options else "")
    digest = hashlib.sha256(name.encode()).hexdigest()[:16]
    return user_cache_dir() / "mirrors" / digest


@dataclasses.dataclass
class PullResult:
    commit: int
    downloaded: int = 0          # files written into the mirror
    bytes: int = 0
    removed: int = 0             # files the commit no longer has
    discarded: int = 0           # unpushed local changes dropped because the lake moved on
    skipped: str | None = None   # why the mirror was left as it is


@dataclasses.dataclass
class PushResult:
    commit: int
    uploaded: int = 0            # objects PUT
    bytes: int = 0
    deleted: int = 0             # objects no commit names any more
    changed: bool = False        # a new commit was written


def _safe_rel(rel: str) -> bool:
    """A manifest path ctxlake may write: relative, POSIX, no empty, '.' or '..' segment."""
    parts = rel.split("/")
    return bool(rel) and "\\" not in rel and "\0" not in rel and \
        all(p not in ("", ".", "..") for p in parts)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@contextlib.contextmanager
def _store_errors(location: RemoteLocation):
    """An I/O error of the object store (or of the mirror's disk) as a :class:`RemoteError`."""
    try:
        yield
    except OSError as exc:
        raise RemoteError(str(exc), path=location.url,
                          hint="check the credentials (AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY "
                               "or Google's default credentials), the endpoint (AWS_ENDPOINT_URL, "
                               "STORAGE_EMULATOR_HOST), the region and that the bucket exists"
                          ) from None


class _Missing(Exception):
    """An object of the commit being pulled is gone (a newer commit collected it)."""


class Mirror:
    """The local mirror of one object-store lake: ``<folder>/lake`` is the lake every stage
    works on, ``<folder>/state.json`` what was last synced, ``<folder>/sync.lock`` serialises
    pulls and pushes on this machine. Folders 0700, files 0600 (or the mode the lake wrote)."""

    def __init__(self, location: RemoteLocation, folder: str | Path, fs=None):
        self.location = location
        self.folder = Path(os.path.abspath(os.path.expanduser(str(folder))))
        self.fs = fs if fs is not None else filesystem(location)
        self.token = secrets.token_hex(16)
        self.host = socket.gethostname()     # the host its lease names
        self._lease_held = False
        self._renewer: threading.Thread | None = None
        self._stop = threading.Event()
        self._pid = os.getpid()
        self.last_pull: PullResult | None = None

    # -- local state ------------------------------------------------------------------
    @property
    def lake_root(self) -> Path:
        return self.folder / "lake"

    @property
    def state_path(self) -> Path:
        return self.folder / "state.json"

    def _prepare(self) -> None:
        if os.path.islink(self.folder):
            raise UnsafePathError("refusing a symlink as the mirror folder", path=str(self.folder),
                                  hint="pass a real folder with --mirror")
        private_dirs(self.folder)
        refuse_symlinks(self.folder, self.lake_root, what="mirror")
        private_dirs(self.lake_root)

    def _load_state(self) -> dict:
        try:
            fd = os.open(self.state_path, os.O_RDONLY | os.O_NOFOLLOW)
        except FileNotFoundError:
            return {"commit": 0, "files": {}, "stat": {}}
        with os.fdopen(fd, "rb") as handle:
            state = json.loads(handle.read())
        if state.get("url") != self.location.url:
            return {"commit": 0, "files": {}, "stat": {}}
        return state

    def _save_state(self, commit: int, files: dict, stats: dict) -> None:
        text = json.dumps({"url": self.location.url, "commit": commit, "files": files,
                           "stat": stats}, sort_keys=True, separators=(",", ":"))
        atomic_write_bytes(self.state_path, text.encode())

    @contextlib.contextmanager
    def _sync_lock(self):
        fd = os.open(self.folder / "sync.lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, FILE_MODE)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def _local_writer_running(self) -> bool:
        """Another process of this machine holds the mirror's lake lock (a run writing it)."""
        path = self.lake_root / ".lock"
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
        except OSError:
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        finally:
            os.close(fd)
        return False

    def scan(self, stats: dict | None = None) -> tuple[dict, dict]:
        """The mirror's lake files ``{rel: {sha256, size, mode}}`` and their stat cache (a file
        whose size, mtime and inode are those cached is not hashed again). A symlink anywhere
        in the mirror is refused."""
        stats = stats or {}
        files: dict[str, dict] = {}
        new_stats: dict[str, list] = {}
        root = str(self.lake_root)
        for dirpath, dirnames, names in os.walk(root):
            for name in [*dirnames, *names]:
                if os.path.islink(os.path.join(dirpath, name)):
                    raise UnsafePathError("refusing a symlink in the mirror",
                                          path=os.path.join(dirpath, name),
                                          hint="the mirror holds only ctxlake's files; remove it")
            dirnames.sort()
            for name in sorted(names):
                rel = os.path.relpath(os.path.join(dirpath, name), root).replace(os.sep, "/")
                if local_only(rel) or TEMP_NAME.match(name) or name.startswith(".tmp-"):
                    continue
                st = os.lstat(os.path.join(dirpath, name))
                if not stat.S_ISREG(st.st_mode):
                    continue
                key = [st.st_size, st.st_mtime_ns, st.st_ino]
                cached = stats.get(rel)
                sha = cached[3] if cached and cached[:3] == key else file_sha256(
                    os.path.join(dirpath, name))
                files[rel] = {"sha256": sha, "size": st.st_size, "mode": st.st_mode & 0o777}
                new_stats[rel] = [*key, sha]
        return files, new_stats

    # -- remote objects ---------------------------------------------------------------
    def _read_json(self, name: str, *, attempts: int = 5) -> dict | None:
        """The object ``name`` as JSON (None: there is none). An object store replaces an
        object whole, but a filesystem behind pyarrow (a shared folder, a test bucket) may
        show another host's write half done: such bytes are read again a few times."""
        import time

        import pyarrow as pa

        for attempt in range(attempts):
            try:
                with self.fs.open_input_stream(self.location.key(name)) as stream:
                    data = stream.read()
            except FileNotFoundError:
                return None
            except (OSError, pa.ArrowException) as exc:
                if "NoSuchKey" in str(exc) or "not found" in str(exc).lower():
                    return None
                raise
            try:
                return json.loads(data)
            except ValueError:     # not JSON yet, or not even UTF-8 (cut inside a character)
                if attempt == attempts - 1:
                    raise
                time.sleep(0.05 * (attempt + 1))
        return None

    def _write_json(self, name: str, value: dict) -> None:
        data = json.dumps(value, sort_keys=True, indent=1).encode()
        with self.fs.open_output_stream(self.location.key(name)) as stream:
            stream.write(data)

    def read_manifest(self) -> dict:
        manifest = self._read_json("manifest.json")
        if manifest is None:
            return {"format": MANIFEST_FORMAT, "commit": 0, "files": {}}
        if manifest.get("format") != MANIFEST_FORMAT:
            raise UsageError(f"{self.location.url}/manifest.json is not a ctxlake lake "
                             f"manifest ({manifest.get('format')!r})",
                             hint="point --lake at the prefix a ctxlake run wrote")
        return manifest

    def _object_key(self, sha: str) -> str:
        return self.location.key(f"objects/{sha[:2]}/{sha}")

    def _present_objects(self) -> dict[str, float]:
        """The content objects in the bucket: sha256 -> last modified (epoch seconds)."""
        import pyarrow.fs as pafs

        selector = pafs.FileSelector(self.location.key("objects"), recursive=True,
                                     allow_not_found=True)
        return {info.base_name: info.mtime.timestamp() if info.mtime else 0.0
                for info in self.fs.get_file_info(selector) if info.type == pafs.FileType.File}

    def _download(self, rel: str, entry: dict) -> int:
        """One file of the commit into the mirror: temp name (O_EXCL, O_NOFOLLOW), hash and size
        checked, mode set, renamed into place. Returns its size."""
        target = self.lake_root / rel
        refuse_symlinks(self.lake_root, target.parent, what="mirror")
        private_dirs(target.parent)
        refuse_symlinks(self.lake_root, target.parent, what="mirror")
        tmp = target.parent / f".{target.name}.{secrets.token_hex(4)}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, FILE_MODE)
        digest, size = hashlib.sha256(), 0
        try:
            with os.fdopen(fd, "wb") as out:
                try:
                    stream = self.fs.open_input_stream(self._object_key(entry["sha256"]))
                except FileNotFoundError:
                    raise _Missing(rel) from None
                with stream:
                    while chunk := stream.read(CHUNK):
                        digest.update(chunk)
                        size += len(chunk)
                        out.write(chunk)
                out.flush()
                fsync(out.fileno())
            if digest.hexdigest() != entry["sha256"] or size != entry["size"]:
                raise UsageError(f"{self.location.url}: the object of {rel} does not hold the "
                                 "bytes its commit names (sha256 or size differs)",
                                 path=rel, hint="the bucket was changed by hand; restore it")
            os.chmod(tmp, entry.get("mode", FILE_MODE) & 0o777)
            os.replace(tmp, target)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
            raise
        return size

    def _upload(self, rel: str, entry: dict) -> int:
        path = self.lake_root / rel
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
        with os.fdopen(fd, "rb") as handle, \
                self.fs.open_output_stream(self._object_key(entry["sha256"])) as stream:
            while chunk := handle.read(CHUNK):
                stream.write(chunk)
        crash_point("remote:push:object")
        return entry["size"]

    # -- pull / push ------------------------------------------------------------------
    def pull(self) -> PullResult:
        """Make the mirror equal the bucket's commit (nothing read past the manifest when the
        mirror already synced that commit; a local run writing the mirror is left alone)."""
        self._prepare()
        with self._sync_lock(), _store_errors(self.location):
            if self._local_writer_running():
                return PullResult(self._load_state()["commit"],
                                  skipped="a ctxlake run on this machine is writing the mirror")
            for _attempt in range(5):
                try:
                    return self._pull_once()
                except _Missing:
                    continue      # a newer commit collected an object: pull that one
            raise RemoteError("objects the bucket's commit names are missing (5 reads of "
                              "its manifest)", path=self.location.url,
                              hint="the bucket was edited by hand, or two writers raced past "
                                   "the lease (README, 'Object stores'); restore the objects")

    def _pull_once(self) -> PullResult:
        manifest = self.read_manifest()
        state = self._load_state()
        commit = manifest["commit"]
        if commit == state["commit"]:
            return PullResult(commit)
        local, stats = self.scan(state.get("stat"))
        remote = manifest["files"]
        bad = sorted(rel for rel in remote if not _safe_rel(rel) or local_only(rel))
        if bad:
            raise UnsafePathError(f"{self.location.url}/manifest.json names a path outside the "
                                  f"lake: {bad[0]!r}", hint="the manifest was changed by hand")
        synced = state["files"]
        result = PullResult(commit)
        result.discarded = sum(1 for rel, entry in local.items()
                               if synced.get(rel) != entry and remote.get(rel) != entry)
        wanted = sorted(rel for rel, entry in remote.items()
                        if (local.get(rel) or {}).get("sha256") != entry["sha256"])
        with ThreadPoolExecutor(TRANSFER_THREADS) as pool:
            sizes = list(pool.map(lambda rel: self._download(rel, remote[rel]), wanted))
        result.downloaded, result.bytes = len(wanted), sum(sizes)
        for rel, entry in remote.items():          # same bytes, other mode
            path = self.lake_root / rel
            if rel not in wanted and local[rel]["mode"] != entry.get("mode", FILE_MODE):
                os.chmod(path, entry["mode"] & 0o777, follow_symlinks=False)
        for rel in sorted(set(local) - set(remote)):
            os.unlink(self.lake_root / rel)
            result.removed += 1
        _, stats = self.scan(stats)
        self._save_state(commit, remote, stats)
        return result

    def push(self) -> PushResult:
        """Commit the mirror to the bucket when it differs from what was last synced: new
        objects, then the manifest, then the collection of objects no commit names."""
        with self._sync_lock(), _store_errors(self.location):
            state = self._load_state()
            local, stats = self.scan(state.get("stat"))
            if local == state["files"]:
                self._save_state(state["commit"], state["files"], stats)
                return PushResult(state["commit"])
            manifest = self.read_manifest()
            if manifest["commit"] != state["commit"]:
                raise LakeLockedError(
                    f"{self.location.url} moved to commit {manifest['commit']} while this run "
                    f"wrote (it started from commit {state['commit']}): not pushed",
                    path=str(self.lake_root),
                    hint="another writer held the lake (an expired or raced lease); this run's "
                         "changes stay in the mirror and the next command replaces them with the "
                         "bucket's commit: run it again")
            self._check_lease()
            present = self._present_objects()
            needed: dict[str, str] = {}
            for rel, entry in sorted(local.items()):
                if entry["sha256"] not in present:
                    needed.setdefault(entry["sha256"], rel)
            with ThreadPoolExecutor(TRANSFER_THREADS) as pool:
                sizes = list(pool.map(lambda item: self._upload(item[1], local[item[1]]),
                                      sorted(needed.items())))
            crash_point("remote:push:objects")
            self._check_lease()
            commit = state["commit"] + 1
            self._write_json("manifest.json", {
                "format": MANIFEST_FORMAT, "commit": commit, "files": local,
                "written_by": {"host": socket.gethostname(), "pid": os.getpid(),
                               "token": self.token}})
            self._save_state(commit, local, stats)
            crash_point("remote:push:committed")
            referenced = {entry["sha256"] for entry in local.values()}
            # collected: what the previous commit named and this one does not, and objects no
            # commit names that are older than GC_GRACE_S (a killed push's leftovers; a younger
            # one may belong to a push under way that raced this one's lease)
            dropped = {e["sha256"] for e in state["files"].values()} - referenced
            stale = {sha for sha, mtime in present.items()
                     if mtime < time.time() - GC_GRACE_S}
            garbage = sorted((dropped | stale) - referenced)
            for sha in garbage:
                with contextlib.suppress(FileNotFoundError):
                    self.fs.delete_file(self._object_key(sha))
            return PushResult(commit, len(needed), sum(sizes), len(garbage), True)

    # -- lease ------------------------------------------------------------------------
    def read_lease(self) -> dict | None:
        return self._read_json("lease.json")

    def leased_elsewhere(self) -> bool:
        """Whether another command (on this host or another) holds the lake's lease now."""
        with _store_errors(self.location):
            return self._live_other(self.read_lease())

    def _live_other(self, lease: dict | None) -> bool:
        if not lease or lease.get("token") == self.token:
            return False
        if lease.get("expires_at", 0) <= time.time():
            return False
        same_host = lease.get("host") == self.host
        return not (same_host and not _pid_alive(int(lease.get("pid", 0))))

    def _busy(self, lease: dict) -> LakeLockedError:
        until = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(lease.get("expires_at", 0)))
        return LakeLockedError(
            f"another ctxlake run holds the lease of {self.location.url} (host "
            f"{lease.get('host')}, pid {lease.get('pid')}, until {until})",
            path=self.location.url,
            hint="wait for it to finish; a lease left by a killed run expires at that time "
                 "(on its own host a lease whose process is dead is taken over at once)")

    def _write_lease(self) -> None:
        now = time.time()
        self._write_json("lease.json", {"token": self.token, "host": self.host,
                                        "pid": os.getpid(), "renewed_at": now,
                                        "expires_at": now + LEASE_TTL_S})

    def acquire_lease(self) -> None:
        """Take the lake's lease or raise :class:`LakeLockedError` (see the module's notes on
        the race window), then keep it renewed until :meth:`release_lease`."""
        with _store_errors(self.location):
            self._take_lease()

    def _take_lease(self) -> None:
        current = self.read_lease()
        if self._live_other(current):
            raise self._busy(current)
        self._write_lease()
        time.sleep(LEASE_SETTLE_S)
        back = self.read_lease()
        if not back or back.get("token") != self.token:
            raise self._busy(back or {})
        self._lease_held = True
        self._stop.clear()
        self._renewer = threading.Thread(target=self._renew, name="ctxlake-lease", daemon=True)
        self._renewer.start()

    def _renew(self) -> None:
        while not self._stop.wait(LEASE_RENEW_S):
            with contextlib.suppress(Exception):
                if (self.read_lease() or {}).get("token") == self.token:
                    self._write_lease()

    def _check_lease(self) -> None:
        lease = self.read_lease()
        if not lease or lease.get("token") != self.token:
            raise LakeLockedError(
                f"this run lost the lease of {self.location.url} before committing: not pushed",
                path=str(self.lake_root),
                hint="another writer took the lake (the lease expired or raced); run again")

    def release_lease(self) -> None:
        if not self._lease_held:
            return
        self._stop.set()
        if self._renewer is not None:
            self._renewer.join()
        self._lease_held = False
        with contextlib.suppress(Exception):
            if (self.read_lease() or {}).get("token") == self.token:
                self.fs.delete_file(self.location.key("lease.json"))

    # -- the lake lock's hooks ----------------------------------------------------------
    def _mine(self, lake: Lake) -> bool:
        return os.getpid() == self._pid and Path(lake.root) == self.lake_root

    def acquired(self, lake: Lake) -> None:
        """The command took the mirror's lake lock: it writes. Take the lease, then pull what
        another machine committed since the command's first pull."""
        if not self._mine(lake):
            return
        self.acquire_lease()
        try:
            with self._sync_lock(), _store_errors(self.location):
                for _attempt in range(5):
                    with contextlib.suppress(_Missing):
                        self._pull_once()
                        break
        except BaseException:
            self.release_lease()
            raise

    def released(self, lake: Lake, finished: bool) -> None:
        """The command let the lock go: push when it finished (a failed command's changes stay
        in the mirror, like a local lake's, for the next run), then free the lease."""
        if not self._mine(lake):
            return
        try:
            if finished and self._lease_held:
                self.push()
        finally:
            self.release_lease()

    def close(self) -> None:
        with contextlib.suppress(ValueError):
            LOCK_HOOKS.remove(self)
        self.release_lease()


def pull_mirror(url: str | os.PathLike, mirror: str | os.PathLike | None = None,
                fs=None) -> Mirror:
    """The mirror of an object-store lake, pulled (for reading: nothing is registered).
    ``mirror``: its folder (default ``$CTXLAKE_MIRROR``, else :func:`default_mirror`)."""
    location = parse_url(url)
    folder = mirror or os.environ.get("CTXLAKE_MIRROR") or default_mirror(location)
    if is_url(folder):
        raise UsageError(f"the mirror '{folder}' must be a local folder")
    remote = Mirror(location, folder, fs=fs)
    remote.last_pull = remote.pull()
    return remote


def open_mirror(url: str | os.PathLike, mirror: str | os.PathLike | None = None,
                fs=None) -> Mirror:
    """:func:`pull_mirror`, with the mirror's lock hooks registered: a command that takes the
    lake lock takes the lease and pushes when it lets go (:meth:`Mirror.close` unregisters)."""
    remote = pull_mirror(url, mirror, fs)
    LOCK_HOOKS.append(remote)
    return remote
