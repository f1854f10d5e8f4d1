"""Object-store lake bench: what ``--lake s3://...`` (a local mirror pulled and pushed,
pipeline/core/remote.py) costs over a local lake, against moto's S3 server on this machine.

Each figure is a whole CLI process (imports included), wall time, on the demo archive:

- ``run`` cold (empty lake / empty bucket), ``run`` again with nothing new, ``report daily``;
- on the s3 lake also: ``report daily`` from a fresh mirror (a second machine: the whole lake
  is downloaded), and the push of the cold run (objects and bytes uploaded).

moto's server is in-process Python on loopback: S3 proper has more latency per request and
more bandwidth, so read the per-request counts as well as the seconds.

Usage: ``.venv/bin/python bench/remote_bench.py [--size 20MB] [--seed 7] [--workdir DIR]``.
Writes ``bench/results/remote.json``.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import folder_bytes, machine_info, write_demo, write_result  # noqa: E402

CTXLAKE = str(Path(sys.executable).with_name("ctxlake"))


def _seconds(args: list[str], env: dict) -> float:
    started = time.perf_counter()
    subprocess.run([CTXLAKE, "--quiet", *args], check=True, env=env, stdout=subprocess.DEVNULL)
    return round(time.perf_counter() - started, 2)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", default="20MB")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--workdir", type=Path, default=None)
    options = parser.parse_args()
    size = int(options.size.upper().removesuffix("MB")) * 1_000_000

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    import pyarrow.fs as pafs
    from moto.server import ThreadedMotoServer

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    fs = pafs.S3FileSystem(endpoint_override=f"127.0.0.1:{port}", scheme="http",
                           access_key="bench", secret_key="bench", region="us-east-1",
                           allow_bucket_creation=True)
    fs.create_dir("bench")
    env = {**os.environ, "AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench",
           "AWS_REGION": "us-east-1", "AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}"}

    work = Path(options.workdir or tempfile.mkdtemp(prefix="ctxlake-remote-bench-"))
    archive = work / "archive"
    if not archive.exists():
        write_demo(archive, size, options.seed)
    for name in ("local", "m1", "m2"):
        shutil.rmtree(work / name, ignore_errors=True)
    url = "s3://bench/lake"
    run = ["run", str(archive), "--tz", "UTC"]
    report = ["report", "daily", "--json"]
    local = ["--lake", str(work / "local")]
    s3 = ["--lake", url, "--mirror", str(work / "m1")]
    figures = {
        "local": {"run_cold": _seconds([*local, *run], env),
                  "run_nothing_new": _seconds([*local, *run], env),
                  "report_daily": _seconds([*local, *report], env)},
        "s3": {"run_cold": _seconds([*s3, *run], env)},
    }
    manifest = json.loads(fs.open_input_stream("bench/lake/manifest.json").read())
    objects = {e["sha256"]: e["size"] for e in manifest["files"].values()}
    figures["s3"].update(
        run_nothing_new=_seconds([*s3, *run], env),
        report_daily=_seconds([*s3, *report], env),
        report_daily_fresh_mirror=_seconds(["--lake", url, "--mirror", str(work / "m2"),
                                            *report], env),
        files=len(manifest["files"]), objects=len(objects), object_bytes=sum(objects.values()),
        manifest_bytes=fs.get_file_info("bench/lake/manifest.json").size)
    figures["lake_bytes"] = folder_bytes(work / "local")
    for key in ("run_cold", "run_nothing_new", "report_daily"):
        figures.setdefault("ratio", {})[key] = round(figures["s3"][key] / figures["local"][key], 2)
    server.stop()
    result = {"bench": "remote", "size": options.size, "seed": options.seed, **figures,
              "machine": machine_info()}
    print(json.dumps(result, indent=1))
    write_result(Path(__file__).resolve().parent / "results" / "remote.json", result)


if __name__ == "__main__":
    main()
