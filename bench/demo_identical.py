"""Check that the `make demo` outputs are byte-identical to a recorded manifest.

Runs the demo job exactly as `make demo` does (``ctxlake --lake L demo --size 20MB --seed 7
--out A``) in a fixed scratch folder, then lists every output file with a sha256: the demo
archive, the pruned transcripts, the store, the summaries, the reports. Plain files are hashed
as they are (with the scratch folder's path replaced by ``<ROOT>``). Parquet tables are hashed
over their sorted rows, with the values that name the run (run ids, wall-clock timestamps,
durations) replaced by a placeholder: two runs of the unchanged code differ only there.
The DuckDB catalogue file and the lake lock are left out (a database file is not
byte-stable; the views it holds are checked by the tests).

Usage:
    .venv/bin/python bench/demo_identical.py --record   # write bench/demo_manifest.json
    .venv/bin/python bench/demo_identical.py            # compare; exit 1 on any difference
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq

HERE = Path(__file__).resolve().parent
MANIFEST = HERE / "demo_manifest.json"
# A folder of this checkout. The lake records absolute source paths and source ids derived from
# them: both are replaced (the folder by <ROOT>, an id by its file's path in the archive), so the
# manifest holds in any folder.
SCRATCH = Path(os.environ.get("CTXLAKE_DEMO_SCRATCH", HERE.parent / "data" / "demo-identical"))
RUN_ID = re.compile(r"\d{8}T\d{6,12}")
# Values that name the moment of the run rather than the input (found by running the unchanged
# code twice: run ids, clocks, pid, inode/ctime of the new files, stage timings, and the ledger
# fingerprints, which hash upstream run ids and absolute paths): normalised before hashing.
VOLATILE_COLUMNS = re.compile(r"(^|_)(run_id|run|seconds|elapsed|started|finished|started_at|"
                              r"finished_at|written_at|created_at|updated_at|ingested_at|"
                              r"committed_at|at|wall|duration|duration_s|pid|host|inode|ctime_ns|stages_json|input_fp|settings_fp)$")
# The catalogue file and its fingerprint of the view SQL (which names absolute paths); the
# usage summary's commit stamp (the SHA-256 of sources.parquet, whose run ids vary).
SKIP_NAMES = {"ctxlake.duckdb", "ctxlake.duckdb.wal", ".ctxlake.duckdb.views", ".lock", "lake.lock",
              "summary-commit.txt"}


def run_demo(root: Path) -> None:
    if root.exists():
        shutil.rmtree(root)
    root.mkdir(parents=True)
    exe = Path(sys.executable).with_name("ctxlake")
    env = {k: v for k, v in os.environ.items() if not k.startswith("CTXLAKE_")}
    env.update(HOME=str(root / "home"), TZ="UTC", XDG_DATA_HOME=str(root / "home" / "data"),
               XDG_CONFIG_HOME=str(root / "home" / "config"))
    (root / "home").mkdir()
    subprocess.run([str(exe), "--lake", str(root / "lake"), "demo", "--size", "20MB", "--seed", "7",
                    "--out", str(root / "archive"), "--json"], check=True, cwd=root, env=env,
                   stdout=subprocess.DEVNULL)


class Normaliser:
    """Replaces the scratch folder, run ids and source ids in a value."""

    def __init__(self, root: Path):
        self.root = str(root)
        sources = pq.read_table(root / "lake" / "sources.parquet", columns=["source_id", "rel_path", "format"])
        self.ids = {row["source_id"]: f"<SRC:{row['format']}:{row['rel_path']}>" for row in sources.to_pylist()}
        self.pattern = re.compile("|".join(sorted(map(re.escape, self.ids), key=len, reverse=True)))

    def text(self, value: str) -> str:
        value = RUN_ID.sub("<RUN>", value.replace(self.root, "<ROOT>"))
        return self.pattern.sub(lambda m: self.ids[m.group(0)], value) if self.ids else value


def _normal(value, norm: Normaliser):
    if isinstance(value, str):
        return norm.text(value)
    if isinstance(value, bytes):
        return value.replace(norm.root.encode(), b"<ROOT>").hex()
    if isinstance(value, (dt.datetime, dt.date, dt.time, dt.timedelta)):
        return value.isoformat() if hasattr(value, "isoformat") else str(value)
    if isinstance(value, dict):
        return {k: _normal(v, norm) for k, v in value.items()}
    if isinstance(value, list):
        return [_normal(v, norm) for v in value]
    return value


def parquet_digest(path: Path, norm: Normaliser) -> str:
    table = pq.read_table(path)
    volatile = [name for name in table.column_names if VOLATILE_COLUMNS.search(name)]
    rows = []
    for row in table.to_pylist():
        for name in volatile:
            row[name] = "<VOLATILE>"
        rows.append(json.dumps(_normal(row, norm), sort_keys=True, default=str))
    rows.sort()
    head = json.dumps([str(f) for f in table.schema], sort_keys=True)
    return hashlib.sha256("\n".join([head, *rows]).encode()).hexdigest()


def manifest(root: Path) -> dict[str, str]:
    out: dict[str, str] = {}
    norm = Normaliser(root)
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root).as_posix()
        if rel.startswith("home/") or not path.is_file() or path.name in SKIP_NAMES:
            continue
        key = norm.text(rel)
        if path.suffix == ".parquet":
            digest = "rows:" + parquet_digest(path, norm)
        else:
            data = path.read_bytes()
            if rel.startswith("lake/") and path.suffix in {".json", ".md", ".html", ".txt", ".views"}:
                data = norm.text(data.decode("utf-8", "surrogateescape")).encode("utf-8", "surrogateescape")
            else:
                data = data.replace(norm.root.encode(), b"<ROOT>")
            digest = hashlib.sha256(data).hexdigest()
        # Two files that differ only by their run id in the name are listed under one key.
        while key in out:
            key += "+"
        out[key] = digest
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--record", action="store_true", help="write the manifest instead of comparing")
    parser.add_argument("--manifest", type=Path, default=MANIFEST)
    args = parser.parse_args()
    run_demo(SCRATCH)
    now = manifest(SCRATCH)
    if args.record:
        args.manifest.write_text(json.dumps(now, indent=1, sort_keys=True) + "\n")
        print(f"recorded {len(now)} files in {args.manifest}")
        return 0
    before = json.loads(args.manifest.read_text())
    missing = sorted(set(before) - set(now))
    extra = sorted(set(now) - set(before))
    changed = sorted(k for k in set(before) & set(now) if before[k] != now[k])
    for label, keys in (("missing", missing), ("new", extra), ("changed", changed)):
        for key in keys:
            print(f"{label}: {key}")
    if missing or extra or changed:
        print(f"DIFFERENT: {len(missing)} missing, {len(extra)} new, {len(changed)} changed "
              f"of {len(before)} files")
        return 1
    print(f"identical: {len(now)} files match {args.manifest.name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
