"""HTML report bench: ``ctxlake report html`` over the ~500 MB demo lake, full and incremental.

Targets (issue 18): the whole report for the 500 MB demo lake <= 30 s; the refresh after one
new session (``render_html(..., sessions=[new])``) <= 3 s.

Setup (cached under ``--workdir``, not timed; ``--rebuild`` starts over): the archive is
``pipeline.demo.archive.write_demo_archive(size_bytes, seed)``, ingested, then the nightly job runs on
it (correlate, calibrate, plan and apply ``payload_prune+microcompact``, summarize), and a
replay of ``payload_prune`` and ``observation_masking(window=10)`` fills the policies page.

Measured:
- ``full_s``: ``render_html`` into an empty folder (every page written);
- ``again_s``: the same again into that folder (every page rendered, none rewritten);
- ``refresh_s``: on a copy of the lake, one new Claude Code session (a real sample under a new
  id) is ingested (``ingest_new_s``, not part of the figure), then
  ``render_html(..., sessions=[new id])`` on the report folder: overview, list and policies
  pages plus the new session's pages.
- ``big_session``: a 20 MB Claude Code session (tool results of 10 KB, CJK and emoji in its
  text) is ingested into the copy and refreshed: its render time, pages and largest page,
  and, when Debian's chromium is installed, the time each of its pages takes to load
  headless (navigation to the load event, median and max over its pages).

Usage: ``.venv/bin/python bench/html_bench.py [--size-mb 500] [--workdir DIR]``.
Prints the figures and writes ``bench/results/html.json``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import (  # noqa: E402
    REPO, RESULTS, cached_lake, folder_bytes, folder_usage, machine_info, target_verdict, timed,
    write_result,
)
from pipeline.reports.html import render_html  # noqa: E402
from pipeline.core.lake import Lake  # noqa: E402

FULL_TARGET_S = 30.0
REFRESH_TARGET_S = 3.0
SAMPLE = REPO.parent / "shared" / "data" / "real" / "claude_code" / "5c0375b4-57a5-4f26-b12d-d022ee4e51b7.jsonl"
NEW_SESSION = "b3e1c0de-0018-4000-8000-000000000018"


def _after_ingest(archive: Path):
    def run(lake_dir: Path) -> dict:
        from pipeline.stages.nightly import run_nightly
        from pipeline.stages.replay import replay

        lake = Lake(lake_dir)
        nightly_s, _summary = timed(lambda: run_nightly([archive], lake=lake, tz="UTC"))
        replay_s, _result = timed(lambda: replay(lake, policies=["payload_prune",
                                                                 "observation_masking(window=10)"]))
        return {"nightly_s": round(nightly_s, 2), "replay_s": round(replay_s, 2)}
    return run


def write_big_session(folder: Path, size_bytes: int) -> str:
    """A Claude Code session of about ``size_bytes``: tool calls and 10 KB results."""
    import json

    session = "b3e1c0de-0018-4000-8000-00000000b160"

    def line(n: int, **fields) -> str:
        base = {"parentUuid": None, "isSidechain": False, "userType": "external",
                "cwd": "/work/big", "sessionId": session, "version": "2.0.28",
                "gitBranch": "main", "uuid": f"u{n}",
                "timestamp": f"2026-11-20T{10 + n // 36000:02d}:{n // 600 % 60:02d}:{n // 10 % 60:02d}.000Z"}
        base.update(fields)
        return json.dumps(base, ensure_ascii=False) + "\n"

    chunk = ("日本語の行 🎉 " + "payload line of a long tool result " * 3 + "\n") * 90
    lines = [line(0, type="user", message={"role": "user", "content": "Read every file 📂"})]
    total, n = len(lines[0]), 1
    while total < size_bytes:
        call = f"toolu_{n:06d}"
        lines.append(line(n, type="assistant", requestId=f"req_{n}", message={
            "model": "claude-sonnet-4-5-20250929", "id": f"msg_{n}", "type": "message",
            "role": "assistant", "content": [{"type": "tool_use", "id": call, "name": "Read",
                                              "input": {"file_path": f"/work/big/f{n}.txt"}}],
            "usage": {"input_tokens": 10, "output_tokens": 20, "cache_creation_input_tokens": 0,
                      "cache_read_input_tokens": 1000 + n}}))
        lines.append(line(n + 1, type="user", message={"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": call, "content": chunk}]}))
        total += len(lines[-1].encode()) + len(lines[-2].encode())
        n += 2
    (folder / f"{session}.jsonl").write_text("".join(lines), encoding="utf-8")
    return session


def browser_loads(pages: list[Path]) -> dict | None:
    """Median and max seconds from navigation to the load event, per page, in chromium."""
    import statistics
    import time

    sys.path.insert(0, str(REPO / "tests"))
    from browser import Browser, chromium_path

    executable = chromium_path()
    if executable is None:
        return None
    with tempfile.TemporaryDirectory(prefix="ctxlake-chromium-") as profile:
        browser = Browser(executable, Path(profile))
        try:
            times, errors = [], 0
            with browser.tab() as tab:
                for page in pages:
                    started = time.perf_counter()
                    load = tab.load(page)
                    times.append(time.perf_counter() - started - 0.3)   # minus the settle time
                    errors += len(load.errors) + len(load.failed_requests)
        finally:
            browser.close()
    return {"pages": len(times), "load_median_s": round(statistics.median(times), 3),
            "load_max_s": round(max(times), 3), "errors": errors}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mb", type=int, default=500)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/ctxlake-bench-html"))
    parser.add_argument("--rebuild", action="store_true")
    args = parser.parse_args()

    workdir = args.workdir / f"{args.size_mb}mb"
    built = cached_lake(workdir, size_mb=args.size_mb, seed=args.seed, rebuild=args.rebuild,
                        after_ingest=_after_ingest(workdir / "archive"))
    lake = Lake(workdir / "lake")
    size = folder_bytes(workdir / "archive")
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="ctxlake-html-bench-") as scratch:
        scratch = Path(scratch)
        out = scratch / "html"
        full_s, full = timed(lambda: render_html(lake, out))
        again_s, again = timed(lambda: render_html(lake, out))
        report_bytes, report_files = folder_usage(out)

        copy = Lake(scratch / "lake")
        shutil.copytree(lake.root, copy.root, symlinks=True)
        extra = scratch / "extra"
        extra.mkdir()
        text = SAMPLE.read_text(encoding="utf-8").replace(
            "5c0375b4-57a5-4f26-b12d-d022ee4e51b7", NEW_SESSION)
        (extra / f"{NEW_SESSION}.jsonl").write_text(text, encoding="utf-8")
        from pipeline.stages.ingest import ingest

        ingest_s, _ingested = timed(lambda: ingest([extra], lake=copy))
        refresh_s, refresh = timed(lambda: render_html(copy, out, sessions=[NEW_SESSION]))

        big = scratch / "big"
        big.mkdir()
        big_id = write_big_session(big, 20 * 1024 * 1024)
        big_bytes = folder_bytes(big)
        ingest([big], lake=copy)
        big_s, big_summary = timed(lambda: render_html(copy, out, sessions=[big_id]))
        from pipeline.reports.html import session_slug

        pages = sorted((out / "sessions" / session_slug(big_id)).glob("*.html"))
        big_session = {"archive_mb": round(big_bytes / 1024 / 1024, 1), "render_s": round(big_s, 2),
                       "pages": len(pages),
                       "largest_page_mb": round(max(p.stat().st_size for p in pages) / 1024 / 1024, 2),
                       "browser": browser_loads(pages)}

    result = {
        "archive_bytes": size, "archive_mb": round(size / 1024 / 1024, 1), "build": built,
        "sessions": full.sessions,
        "full_s": round(full_s, 2), "full": full.to_dict(),
        "again_s": round(again_s, 2), "again": again.to_dict(),
        "report_mb": round(report_bytes / 1024 / 1024, 1), "report_files": report_files,
        "ingest_new_s": round(ingest_s, 2),
        "refresh_s": round(refresh_s, 2), "refresh": refresh.to_dict(),
        "full_target_s": FULL_TARGET_S, "full_within_target": full_s <= FULL_TARGET_S,
        "refresh_target_s": REFRESH_TARGET_S, "refresh_within_target": refresh_s <= REFRESH_TARGET_S,
        "big_session": big_session,
        "machine": machine_info(load_avg_1m=[round(load_before, 2), round(os.getloadavg()[0], 2)]),
    }
    print(f"demo archive: {result['archive_mb']} MB, {full.sessions:,} sessions; report "
          f"{result['report_mb']} MB in {report_files:,} files")
    print(f"full report:   {full_s:.2f} s ({full.pages_written:,} pages written) "
          f"{target_verdict(full_s, FULL_TARGET_S)}")
    print(f"again:         {again_s:.2f} s ({again.pages_written:,} written, "
          f"{again.pages_unchanged:,} unchanged)")
    print(f"refresh after one new session: {refresh_s:.2f} s ({refresh.sessions_rendered} "
          f"session rendered, {refresh.pages_written} pages written) "
          f"{target_verdict(refresh_s, REFRESH_TARGET_S)}")
    browser = big_session["browser"]
    print(f"20 MB session: {big_session['archive_mb']} MB -> {big_session['pages']} pages "
          f"(largest {big_session['largest_page_mb']} MB) rendered in {big_session['render_s']:.2f} s"
          + (f"; chromium loads a page in {browser['load_median_s']:.2f} s median, "
             f"{browser['load_max_s']:.2f} s max ({browser['errors']} errors)" if browser
             else "; chromium not installed: no load times"))
    write_result(RESULTS / "html.json", result)


if __name__ == "__main__":
    main()
