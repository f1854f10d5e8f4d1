"""Restore a pruned transcript byte-for-byte, and verify the store and the outputs.

``restore`` needs only the pruned file and the store (see :mod:`pipeline.stages.apply` for the
design): the sha256 of the pruned file names its restore manifest
(``store/manifests/<sha256>.json``), which lists each replaced span (offset and length in the
pruned file) and the stored bytes it came from (``raw``, or a text re-encoded as a JSON string:
``json`` / ``json_ascii``). The rebuilt bytes must hash to the manifest's
``original_sha256``; anything else is an error, never a silently different file.

``verify`` recomputes the hash of every store file, checks every manifest, and for every file
under the outputs folder checks that its restore manifest exists, that the original rebuilds
(same sha256 as recorded) and that every ``compaction://<sha256>`` locator in it resolves to a
sound store file. Each problem is listed; the CLI exits 1 when there is any.
"""

from __future__ import annotations

import dataclasses
import os
import stat
from pathlib import Path

import orjson

from pipeline.stages.apply import LOCATOR, OUTPUT_TEMP, encode_json_string
from pipeline.core.errors import LakeNotFoundError, StoreError
from pipeline.core.lake import OUTPUT_MARKER, Lake, atomic_write_bytes
from pipeline.core.store import (
    MANIFEST_DIR, MANIFEST_SUFFIX, PAYLOAD_SUFFIX, SHA256_NAME, TEMP_PREFIX, PayloadStore,
    sha256_hex,
)

__all__ = ["restore", "RestoreResult", "verify", "VerifyReport"]


@dataclasses.dataclass
class RestoreResult:
    original_sha256: str
    original_size: int
    edits: int
    data: bytes | None = None      # the original bytes when no ``out`` was given
    out: str | None = None


def _span_bytes(store: PayloadStore, sha: str, codec: str) -> bytes:
    blob = store.get(sha)
    if codec == "raw":
        return blob
    if codec in ("json", "json_ascii"):
        return encode_json_string(blob.decode("utf-8"), ascii_only=codec == "json_ascii")
    raise StoreError(f"unknown codec {codec!r} in a restore manifest")


def _load_manifest(store: PayloadStore, pruned_sha: str, shown: str) -> dict:
    raw = store.get_manifest(pruned_sha)
    if raw is None:
        raise StoreError(f"no restore manifest for this file (sha256 {pruned_sha})", path=shown,
                         hint="the file was changed after `ctxlake apply`, was not written by "
                              "it, or belongs to another lake's store (--lake / --store)")
    try:
        manifest = orjson.loads(raw)
    except orjson.JSONDecodeError:
        raise StoreError("restore manifest is not valid JSON",
                         path=str(store.manifest_path(pruned_sha))) from None
    if not isinstance(manifest, dict) or manifest.get("pruned_sha256") != pruned_sha \
            or not isinstance(manifest.get("edits"), list):
        raise StoreError("restore manifest does not describe this file",
                         path=str(store.manifest_path(pruned_sha)))
    return manifest


def rebuild(pruned: bytes, store: PayloadStore, *, shown: str = "") -> tuple[bytes, dict]:
    """The original bytes of ``pruned`` (checked against the manifest's sha256), and the
    manifest."""
    pruned_sha = sha256_hex(pruned)
    manifest = _load_manifest(store, pruned_sha, shown)
    pieces = []
    cursor = 0
    for entry in manifest["edits"]:
        try:
            at, length, sha, codec = entry
        except (TypeError, ValueError):
            raise StoreError("malformed edit in a restore manifest",
                             path=str(store.manifest_path(pruned_sha))) from None
        if not (isinstance(at, int) and isinstance(length, int) and cursor <= at
                and at + length <= len(pruned)):
            raise StoreError("restore manifest edits do not fit the file",
                             path=str(store.manifest_path(pruned_sha)))
        pieces.append(pruned[cursor:at])
        pieces.append(_span_bytes(store, sha, codec))
        cursor = at + length
    pieces.append(pruned[cursor:])
    original = b"".join(pieces)
    if sha256_hex(original) != manifest.get("original_sha256"):
        raise StoreError("restored bytes do not match the original sha256 recorded at apply",
                         path=shown, hint="run `ctxlake verify` to find the damaged store file")
    return original, manifest


def restore(pruned_file: Path | str, *, store: PayloadStore | Path | str,
            out: Path | str | None = None) -> RestoreResult:
    """Rebuild the original of ``pruned_file`` byte-for-byte from it and the store alone.

    With ``out`` the original is written there atomically (it may be ``pruned_file`` itself);
    otherwise it is returned in ``RestoreResult.data``.
    """
    pruned_path = Path(pruned_file)
    try:
        pruned = pruned_path.read_bytes()
        mode = pruned_path.stat().st_mode & 0o777
    except OSError as exc:
        raise StoreError(f"cannot read the pruned file: {exc.strerror or exc}",
                         path=str(pruned_path)) from None
    owned = not isinstance(store, PayloadStore)
    payloads = PayloadStore.at(store) if owned else store
    try:
        original, manifest = rebuild(pruned, payloads, shown=str(pruned_path))
    finally:
        if owned:
            payloads.close()
    result = RestoreResult(original_sha256=manifest["original_sha256"],
                           original_size=len(original), edits=len(manifest["edits"]))
    if out is None:
        result.data = original
    else:
        atomic_write_bytes(Path(out), original, mode=mode)
        result.out = str(out)
    return result


# --------------------------------------------------------------------------------------
# verify
# --------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class VerifyProblem:
    """A store file, manifest, output or locator that does not check."""

    kind: str
    path: str
    detail: str


@dataclasses.dataclass
class VerifyReport:
    store: str
    out: str
    payloads: int = 0              # store files whose hash was recomputed
    manifests: int = 0
    outputs: int = 0               # output files checked
    outputs_restorable: int = 0    # of which rebuild to their recorded original
    locators: int = 0              # compaction:// locators found in outputs
    problems: list[VerifyProblem] = dataclasses.field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    def to_dict(self) -> dict:
        data = dataclasses.asdict(self)
        data["ok"] = self.ok
        return data


def verify(lake: Lake, *, out: Path | str | None = None) -> VerifyReport:
    """Check every store file's hash, every manifest, and every output under ``out``
    (default ``<lake>/out``): a restore manifest, a byte-exact restore, resolving locators."""
    if not lake.exists():
        raise LakeNotFoundError("no lake here yet: nothing to verify", path=str(lake.root),
                                hint="pass --lake DIR (or set CTXLAKE_HOME) for an existing lake")
    out_root = Path(out) if out is not None else lake.root / "out"
    report = VerifyReport(store=str(lake.store_dir), out=str(out_root))

    def problem(kind: str, path: Path | str, detail: str) -> None:
        report.problems.append(VerifyProblem(kind=kind, path=str(path), detail=detail))

    for damage in lake.damage():
        problem("lake", lake.root, damage)
    for part in sorted(lake.lost_parts()):
        table, _, name = part.partition("/")
        problem("lake", lake.table_dir(table) / f"{name}.parquet",
                "missing: its rows are not in the tables; the next `ctxlake run` (or ingest) "
                "reads again the files whose rows it held")

    sound: set[str] = set()
    with PayloadStore.for_lake(lake.root) as store:
        try:
            entries = list(store.entries())
        except StoreError as exc:
            problem("store", exc.path or lake.store_dir, exc.message)
            entries = []
        for name, st in entries:
            path = store.root / name
            if name.startswith(TEMP_PREFIX):
                continue  # left by a killed run; removed by the next apply
            if name == MANIFEST_DIR:
                if not stat.S_ISDIR(st.st_mode):
                    problem("store", path, "manifests is not a folder")
                continue
            if stat.S_ISLNK(st.st_mode):
                problem("store", path, "symlink in the store")
                continue
            sha = name[:-len(PAYLOAD_SUFFIX)] if name.endswith(PAYLOAD_SUFFIX) else ""
            if not SHA256_NAME.match(sha) or not stat.S_ISREG(st.st_mode):
                problem("store", path, "unexpected entry in the store")
                continue
            report.payloads += 1
            data = store.read_entry("", name)
            if data is None or sha256_hex(data) != sha:
                problem("hash", path, "store file does not match its hash (changed after it "
                        "was written)")
                continue
            if stat.S_IMODE(st.st_mode) & 0o077:
                problem("mode", path, f"store file mode is {stat.S_IMODE(st.st_mode):04o}, "
                        "expected 0600")
            sound.add(sha)
        manifests: dict[str, dict] = {}
        try:
            manifest_entries = list(store.entries(MANIFEST_DIR))
        except StoreError as exc:
            problem("store", exc.path or store.root / MANIFEST_DIR, exc.message)
            manifest_entries = []
        for name, st in manifest_entries:
            path = store.root / MANIFEST_DIR / name
            if name.startswith(TEMP_PREFIX):
                continue
            sha = name[:-len(MANIFEST_SUFFIX)] if name.endswith(MANIFEST_SUFFIX) else ""
            if stat.S_ISLNK(st.st_mode) or not SHA256_NAME.match(sha) \
                    or not stat.S_ISREG(st.st_mode):
                problem("store", path, "unexpected entry among the manifests")
                continue
            report.manifests += 1
            try:
                manifest = orjson.loads(store.read_entry(MANIFEST_DIR, name) or b"")
                edits = manifest["edits"]
                if manifest.get("pruned_sha256") != sha:
                    raise ValueError("names another file")
            except (orjson.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
                problem("manifest", path, f"unreadable restore manifest ({exc})")
                continue
            manifests[sha] = manifest
            for edit in edits:
                ref = edit[2] if isinstance(edit, list) and len(edit) == 4 else None
                if ref not in sound:
                    problem("manifest", path, f"refers to payload {ref}, which is missing or "
                            "damaged")
        if out_root.is_dir():
            for dirpath, dirnames, names in os.walk(out_root):
                dirnames.sort()
                for name in sorted(names):
                    if OUTPUT_TEMP.match(name) or name == OUTPUT_MARKER:
                        continue
                    _verify_output(Path(dirpath) / name, store, manifests, sound, report,
                                   problem)
    report.problems.sort(key=lambda p: (p.path, p.kind, p.detail))
    return report


def _verify_output(path: Path, store: PayloadStore, manifests: dict, sound: set[str],
                   report: VerifyReport, problem) -> None:
    report.outputs += 1
    if path.is_symlink() or not path.is_file():
        problem("output", path, "not a regular file")
        return
    data = path.read_bytes()
    for match in LOCATOR.finditer(data.decode("utf-8", errors="replace")):
        report.locators += 1
        if match.group(1) not in sound:
            problem("locator", path, f"locator compaction://{match.group(1)} does not resolve "
                    "to a sound store file")
    sha = sha256_hex(data)
    if sha not in manifests:
        problem("output", path, "no restore manifest for these bytes (edited after apply, or "
                "not written by ctxlake apply)")
        return
    try:
        _original, _ = rebuild(data, store, shown=str(path))
    except StoreError as exc:
        problem("restore", path, exc.message)
        return
    report.outputs_restorable += 1
