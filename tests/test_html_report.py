"""The static HTML report (``ctxlake report html``): pages, escaping, paging, incremental
refresh, determinism; then the same report opened in a real headless Chromium.

Lakes: the real samples (nightly job + an ``observation_masking`` plan and a replay), a
~2 MB demo (nightly job, so ``payload_prune`` evictions with stored payloads, + a replay), and
a tiny Claude Code session whose text tries to inject markup. Screenshots of every page type
go to ``tests/.artifacts/html/`` (git-ignored).
"""

from __future__ import annotations

import json
import re
import shutil
import tempfile
from datetime import date
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlparse

import pytest
from click.testing import CliRunner

from pipeline.cli import cli
from pipeline.core.config import config_from_dict
from pipeline.core.errors import ConfigError, UsageError
from pipeline.reports.html import render_html, session_slug
from pipeline.reports.html import build as html_build
from pipeline.core.lake import Lake

from browser import Browser, chromium_path
from tests.helpers.lake import REAL

ARTIFACTS = Path(__file__).resolve().parent / ".artifacts" / "html"
MASKING = "observation_masking(window=10)"
INJECTED = "<script>window.__pwned=1</script>"
CJK_EMOJI = "日本語のテキスト、中文，한국어 🎉👩‍💻"
SESSION = "9d0f3c1e-0000-4000-8000-00000000abcd"
CHILD = f"{SESSION}/agent-a1b2c3d4"


# ---------------------------------------------------------------------------------------
# Lakes
# ---------------------------------------------------------------------------------------
def _nightly(archive: Path, lake_dir: Path) -> Lake:
    from pipeline.stages.nightly import run_nightly

    lake = Lake(lake_dir)
    run_nightly([archive], lake=lake, tz="UTC", workers=1)
    return lake


@pytest.fixture(scope="module")
def real_lake(tmp_path_factory) -> Lake:
    from pipeline.stages.plan import plan_many
    from pipeline.stages.replay import replay

    lake = _nightly(REAL, tmp_path_factory.mktemp("real") / "lake")
    plan_many(lake, policies=[MASKING])
    replay(lake, policies=["microcompact", MASKING], workers=1)
    return lake


@pytest.fixture(scope="module")
def demo_lake(tmp_path_factory) -> Lake:
    from pipeline.demo.archive import write_demo_archive
    from pipeline.stages.replay import replay

    root = tmp_path_factory.mktemp("demo")
    write_demo_archive(root / "archive", size_bytes=2_000_000, seed=7)
    lake = _nightly(root / "archive", root / "lake")
    replay(lake, policies=["payload_prune", MASKING], workers=1)
    return lake


def _claude_line(**fields) -> str:
    base = {"parentUuid": None, "isSidechain": False, "userType": "external",
            "cwd": "/work/inject", "sessionId": SESSION, "version": "2.0.28",
            "gitBranch": "main"}
    base.update(fields)
    return json.dumps(base, ensure_ascii=False) + "\n"


def write_injection_archive(archive: Path) -> Path:
    """A Claude Code session (and one sub-agent) whose text tries to inject markup, with CJK
    and emoji; every hostile string must reach the page as text."""
    folder = archive / "-work-inject"
    folder.mkdir(parents=True)
    lines = [
        _claude_line(type="user", uuid="u1", timestamp="2026-11-02T10:00:00.000Z",
                     message={"role": "user", "content": f"{INJECTED} {CJK_EMOJI} \"quotes\" & 'apostrophes'"}),
        _claude_line(type="assistant", uuid="a1", parentUuid="u1",
                     timestamp="2026-11-02T10:00:05.000Z", requestId="req_1",
                     message={"model": "claude-sonnet-4-5-20250929", "id": "msg_1", "type": "message",
                              "role": "assistant",
                              "content": [{"type": "thinking", "thinking": "thinking </details><script>window.__pwned=2</script>", "signature": "x"},
                                          {"type": "tool_use", "id": "toolu_1", "name": "Bash",
                                           "input": {"command": "echo '<img src=x onerror=\"window.__pwned=3\">'"}}],
                              "usage": {"input_tokens": 10, "output_tokens": 20,
                                        "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}}),
        _claude_line(type="user", uuid="u2", parentUuid="a1", timestamp="2026-11-02T10:00:06.000Z",
                     message={"role": "user", "content": [
                         {"type": "tool_result", "tool_use_id": "toolu_1",
                          "content": "</pre><script>window.__pwned=4</script><a href=\"javascript:alert(1)\">x</a>"}]}),
        _claude_line(type="assistant", uuid="a2", parentUuid="u2",
                     timestamp="2026-11-02T10:00:09.000Z", requestId="req_2",
                     message={"model": "claude-sonnet-4-5-20250929", "id": "msg_2", "type": "message",
                              "role": "assistant",
                              "content": [{"type": "text", "text": f"Done ✅ {CJK_EMOJI}"}],
                              "usage": {"input_tokens": 30, "output_tokens": 5,
                                        "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}}),
    ]
    (folder / f"{SESSION}.jsonl").write_text("".join(lines), encoding="utf-8")
    agent = [_claude_line(type="user", uuid="s1", isSidechain=True, agentId="a1b2c3d4",
                          timestamp="2026-11-02T10:00:02.000Z",
                          message={"role": "user", "content": "Warmup <b>bold?</b>"})]
    (folder / "agent-a1b2c3d4.jsonl").write_text("".join(agent), encoding="utf-8")
    return archive


@pytest.fixture(scope="module")
def injection_lake(tmp_path_factory) -> Lake:
    root = tmp_path_factory.mktemp("inject")
    return _nightly(write_injection_archive(root / "archive"), root / "lake")


def _files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file()}


def _session_page(out: Path, session_id: str, page: str = "index.html") -> Path:
    return out / "sessions" / session_slug(session_id) / page


# ---------------------------------------------------------------------------------------
# Pages and their content
# ---------------------------------------------------------------------------------------
def test_the_report_over_the_real_samples_has_an_overview_a_list_policies_and_one_page_per_session(
        real_lake, tmp_path):
    out = tmp_path / "html"
    summary = render_html(real_lake, out, policy=MASKING)
    sessions = [s for (s,) in real_lake.connect().execute(
        "SELECT session_id FROM sessions ORDER BY 1").fetchall()]
    # SOURCES.md: 10 files, one session each, plus the 1.0.108 file's two inline sidechain
    # threads, sub-agent sessions of their own
    assert summary.sessions == len(sessions) == 12
    assert summary.sessions_rendered == 12
    assert (out / "index.html").is_file() and (out / "sessions.html").is_file()
    assert (out / "policies.html").is_file()
    for session_id in sessions:
        assert _session_page(out, session_id).is_file(), session_id
    listing = (out / "sessions.html").read_text(encoding="utf-8")
    # the sub-agent row follows its parent's row, in the parent's group
    parent = "7f2abd2d-7cfc-4447-9ddd-3ca8d14e02e9"
    rows = re.findall(r'<tr data-group="([^"]+)"( class="child")?>', listing)
    index = rows.index((parent, ""))
    assert rows[index + 1] == (parent, ' class="child"')
    overview = (out / "index.html").read_text(encoding="utf-8")
    assert "Tools that fill the context" in overview and "Latest runs" in overview
    con = real_lake.connect()
    latest = con.execute("SELECT run_id, command, status FROM runs "
                         "ORDER BY started_at DESC, run_id DESC LIMIT 1").fetchone()
    con.close()
    assert f"<tr><td>{latest[0]}</td><td>{latest[1]}</td><td>{latest[2]}" in overview
    # tokens and cost per day, per model, project, agent, tools
    assert overview.count('<svg class="chart"') == 6
    policies = (out / "policies.html").read_text(encoding="utf-8")
    assert MASKING in policies and "at-risk" in policies
    assert policies.count('<svg class="chart"') == 3


def test_a_session_page_shows_evictions_where_they_happen_with_reason_tokens_and_item_links(
        real_lake, tmp_path):
    out = tmp_path / "html"
    render_html(real_lake, out, policy=MASKING)
    con = real_lake.connect()
    session_id, at_seq, seq, before, after = con.execute(
        "SELECT session_id, at_seq, seq, tokens_before, tokens_after FROM evictions "
        "WHERE policy = ? ORDER BY session_id, at_seq, seq LIMIT 1", [MASKING]).fetchone()
    con.close()
    text = _session_page(out, session_id).read_text(encoding="utf-8")
    box = text.index(f'id="e{at_seq}"')
    item = text.index(f'id="m{seq}"')
    assert f"{before:,} → {after:,} tokens" in text
    assert f'href="#m{seq}"' in text                      # the box links to the evicted item
    assert f'href="#e{at_seq}"' in text                   # and the item back to the box
    assert item < box                                     # the item came before its eviction
    assert "Context per turn" in text and "Recovery document" in text
    assert "Daily-log entry" in text


def test_pruned_payloads_link_to_a_page_read_back_from_the_store(demo_lake, tmp_path):
    from pipeline.core.store import PayloadStore

    out = tmp_path / "html"
    summary = render_html(demo_lake, out)
    con = demo_lake.connect()
    session_id, sha = con.execute(
        "SELECT session_id, payload_sha256 FROM evictions WHERE locator IS NOT NULL "
        "AND policy = 'payload_prune+microcompact' ORDER BY 1, 2 LIMIT 1").fetchone()
    stored = con.execute("SELECT count(DISTINCT payload_sha256) FROM evictions "
                         "WHERE locator IS NOT NULL AND policy = 'payload_prune+microcompact'").fetchone()[0]
    con.close()
    assert summary.payload_pages == stored > 0
    page = (out / "payloads" / f"{sha}.html").read_text(encoding="utf-8")
    original = PayloadStore.for_lake(demo_lake.root).get(sha).decode("utf-8")
    from html import escape
    assert escape(original, quote=True) in page
    assert f'href="../../payloads/{sha}.html"' in _session_page(out, session_id).read_text(encoding="utf-8")


def test_transcript_text_is_escaped_everywhere(injection_lake, tmp_path):
    out = tmp_path / "html"
    render_html(injection_lake, out)
    for name, data in _files(out).items():
        text = data.decode("utf-8")
        for n in range(1, 5):
            assert f"<script>window.__pwned={n}</script>" not in text, name
        assert "<img src=x" not in text, name
        assert 'href="javascript:' not in text, name
    page = _session_page(out, SESSION).read_text(encoding="utf-8")
    assert "&lt;script&gt;window.__pwned=1&lt;/script&gt;" in page
    assert "&lt;/pre&gt;&lt;script&gt;window.__pwned=4&lt;/script&gt;" in page
    assert CJK_EMOJI in page                              # UTF-8 as is, not mangled
    assert "&quot;quotes&quot; &amp; &#x27;apostrophes&#x27;" in page
    listing = (out / "sessions.html").read_text(encoding="utf-8")
    assert "&lt;script&gt;window.__pwned=1&lt;/script&gt;" in listing   # the topic column
    assert "No replay in this lake yet" in (out / "policies.html").read_text(encoding="utf-8")


def test_every_page_allows_only_its_own_inlined_script():
    from pipeline.reports.html.page import asset, page

    html = page("t", "<p>x</p>").decode("utf-8")
    from html import unescape

    csp = unescape(re.search(r'http-equiv="Content-Security-Policy" content="([^"]+)"', html).group(1))
    assert "default-src 'none'" in csp and "script-src 'sha256-" in csp
    assert "http" not in html.replace('http-equiv', '').replace('http://www.w3.org', '')
    assert asset("report.js") in html and asset("report.css") in html


def test_long_sessions_are_paged_and_links_reach_the_right_page(real_lake, tmp_path, monkeypatch):
    monkeypatch.setattr(html_build, "PAGE_ROWS", 20)
    out = tmp_path / "html"
    render_html(real_lake, out, policy=MASKING)
    folder = _session_page(out, "pvlib__pvlib-python-1606@mini_swe_agent").parent
    con = real_lake.connect()
    rows = con.execute("SELECT count(*) FROM _messages_current WHERE session_id = "
                       "'pvlib__pvlib-python-1606@mini_swe_agent'").fetchone()[0]
    con.close()
    pages = sorted(p.name for p in folder.iterdir())
    expected = -(-rows // 20)
    assert pages == sorted(["index.html"] + [f"{n}.html" for n in range(2, expected + 1)])
    _assert_links_resolve(out)
    # fewer pages next time: the extra pages are deleted
    monkeypatch.setattr(html_build, "PAGE_ROWS", 400)
    summary = render_html(real_lake, out, policy=MASKING)
    assert sorted(p.name for p in folder.iterdir()) == ["index.html"]
    assert summary.pages_removed >= expected - 1


def test_a_page_ends_before_it_holds_more_than_page_chars_of_text(real_lake, tmp_path,
                                                                 monkeypatch):
    monkeypatch.setattr(html_build, "PAGE_CHARS", 50_000)
    out = tmp_path / "html"
    render_html(real_lake, out)
    con = real_lake.connect()
    texts = [t or "" for (t,) in con.execute(
        "SELECT text FROM _messages_current WHERE session_id = 'pvlib__pvlib-python-1606@mini_swe_agent' "
        "ORDER BY seq").fetchall()]
    con.close()
    expected, chars = 1, 0
    for text in texts:
        if chars and chars + len(text) > 50_000:
            expected, chars = expected + 1, 0
        chars += len(text)
    folder = _session_page(out, "pvlib__pvlib-python-1606@mini_swe_agent").parent
    assert len(list(folder.glob("*.html"))) == expected > 1


class _Links(HTMLParser):
    def __init__(self):
        super().__init__()
        self.hrefs: list[str] = []
        self.ids: set[str] = set()

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "a" and "href" in attrs:
            self.hrefs.append(attrs["href"])
        if "id" in attrs:
            self.ids.add(attrs["id"])


def _parse(path: Path) -> _Links:
    parser = _Links()
    parser.feed(path.read_text(encoding="utf-8"))
    return parser


def _assert_links_resolve(out: Path) -> int:
    """Every href of every page is a file of the report (and its #anchor exists there)."""
    parsed: dict[Path, _Links] = {}
    checked = 0
    for page in sorted(out.rglob("*.html")):
        for href in _parse(page).hrefs:
            target, _, anchor = href.partition("#")
            assert ":" not in target, f"{page}: external link {href}"
            path = (page.parent / unquote(target)).resolve() if target else page.resolve()
            assert path.is_file(), f"{page}: broken link {href}"
            assert path.is_relative_to(out.resolve()), f"{page}: link leaves the report {href}"
            if anchor:
                parsed.setdefault(path, _parse(path))
                assert anchor in parsed[path].ids, f"{page}: missing anchor {href}"
            checked += 1
    return checked


def test_every_internal_link_resolves_in_the_demo_and_real_reports(real_lake, demo_lake, tmp_path):
    render_html(real_lake, tmp_path / "real", policy=MASKING)
    render_html(demo_lake, tmp_path / "demo")
    assert _assert_links_resolve(tmp_path / "real") > 100
    assert _assert_links_resolve(tmp_path / "demo") > 100


# ---------------------------------------------------------------------------------------
# Determinism and the incremental contract
# ---------------------------------------------------------------------------------------
def test_the_same_lake_gives_the_same_bytes_and_a_second_render_rewrites_nothing(demo_lake, tmp_path):
    first = render_html(demo_lake, tmp_path / "a")
    render_html(demo_lake, tmp_path / "b")
    assert _files(tmp_path / "a") == _files(tmp_path / "b")
    stamps = {p: p.stat().st_mtime_ns for p in (tmp_path / "a").rglob("*.html")}
    again = render_html(demo_lake, tmp_path / "a")
    assert again.pages_written == 0 and again.pages_removed == 0
    assert again.pages_unchanged == first.pages_written - first.payload_pages
    assert {p: p.stat().st_mtime_ns for p in (tmp_path / "a").rglob("*.html")} == stamps
    mode = (tmp_path / "a" / "index.html").stat().st_mode & 0o777
    assert mode == 0o600
    assert (tmp_path / "a" / "sessions").stat().st_mode & 0o777 == 0o700
    assert (tmp_path / "a").stat().st_mode & 0o777 == 0o700


def test_a_refresh_renders_only_the_given_sessions_and_deletes_pages_of_removed_ones(tmp_path):
    from pipeline.stages.ingest import ingest

    archive = tmp_path / "archive"
    archive.mkdir()
    shutil.copy2(REAL / "claude_code" / "1af7fc5e-8455-4414-9ccd-011d40f70b2a.jsonl", archive)
    lake = _nightly(archive, tmp_path / "lake")
    out = tmp_path / "html"
    render_html(lake, out)
    old_page = _session_page(out, "1af7fc5e-8455-4414-9ccd-011d40f70b2a")
    old_stamp = old_page.stat().st_mtime_ns
    stale = out / "sessions" / "no-longer-in-the-lake"
    stale.mkdir()
    (stale / "index.html").write_text("old", encoding="utf-8")

    shutil.copy2(REAL / "claude_code" / "5c0375b4-57a5-4f26-b12d-d022ee4e51b7.jsonl", archive)
    ingest([archive], lake=lake, workers=1)
    summary = render_html(lake, out, sessions=["5c0375b4-57a5-4f26-b12d-d022ee4e51b7"])
    # the 1.0.108 file is its session and two inline sidechain sub-agent sessions
    assert summary.sessions == 4 and summary.sessions_rendered == 1
    assert _session_page(out, "5c0375b4-57a5-4f26-b12d-d022ee4e51b7").is_file()
    assert old_page.stat().st_mtime_ns == old_stamp
    assert not stale.exists()
    assert "5c0375b4-57a5-4f26-b12d-d022ee4e51b7" in (out / "sessions.html").read_text(encoding="utf-8")
    # a session that leaves the report (here: filtered out) loses its pages
    render_html(lake, out, sessions=[], since=date(2025, 9, 5))
    assert not old_page.parent.exists()


def test_a_sub_agent_refresh_also_renders_its_parent_page(injection_lake, tmp_path):
    out = tmp_path / "html"
    render_html(injection_lake, out)
    summary = render_html(injection_lake, out, sessions=[CHILD])
    assert summary.sessions_rendered == 2
    parent = _session_page(out, SESSION).read_text(encoding="utf-8")
    assert f'href="../../sessions/{session_slug(CHILD)}/index.html"' in parent


def test_filters_restrict_the_overview_and_the_list(real_lake, tmp_path):
    out = tmp_path / "html"
    summary = render_html(real_lake, out, project="/testbed")
    assert summary.sessions == 2
    assert sorted(p.name for p in (out / "sessions").iterdir()) == [
        "django__django-14155@mini_swe_agent", "pvlib__pvlib-python-1606@mini_swe_agent"]
    assert "project /testbed" in (out / "index.html").read_text(encoding="utf-8")
    with pytest.raises(UsageError, match="after --until"):
        render_html(real_lake, out, since=date(2026, 1, 2), until=date(2026, 1, 1))


def test_a_symlinked_report_folder_is_refused_and_links_inside_are_replaced_not_followed(
        real_lake, tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / "link").symlink_to(elsewhere)
    with pytest.raises(UsageError, match="symlink"):
        render_html(real_lake, tmp_path / "link")
    out = tmp_path / "html"
    render_html(real_lake, out)
    victim = tmp_path / "victim.txt"
    victim.write_text("keep", encoding="utf-8")
    (out / "index.html").unlink()
    (out / "index.html").symlink_to(victim)
    render_html(real_lake, out)
    assert victim.read_text(encoding="utf-8") == "keep"
    assert not (out / "index.html").is_symlink()


def test_the_report_html_config_key_is_read_and_checked():
    assert config_from_dict({}).report_html is False
    assert config_from_dict({"report": {"html": True}}).report_html is True
    with pytest.raises(ConfigError, match="report.html: expected true or false"):
        config_from_dict({"report": {"html": "yes"}})
    with pytest.raises(ConfigError, match="report.colour: unknown key"):
        config_from_dict({"report": {"colour": True}})


def test_the_report_html_command_prints_where_the_report_is_and_json(real_lake, tmp_path):
    runner = CliRunner()
    out = tmp_path / "html"
    result = runner.invoke(cli, ["--lake", str(real_lake.root), "report", "html", "--out",
                                 str(out)], catch_exceptions=False)
    assert result.exit_code == 0
    assert result.output.startswith(f"report: {out / 'index.html'} (12 sessions; ")
    result = runner.invoke(cli, ["--lake", str(real_lake.root), "report", "html", "--out",
                                 str(out), "--json"], catch_exceptions=False)
    data = json.loads(result.output)
    assert data["pages_written"] == 0 and data["sessions"] == 12
    result = runner.invoke(cli, ["--lake", str(real_lake.root), "report", "html", "--since",
                                 "2026-02-01", "--until", "2026-01-01"], catch_exceptions=False)
    assert result.exit_code == 2 and "after --until" in result.output


def test_the_wheel_ships_the_report_assets(tmp_path):
    import zipfile
    import subprocess
    import sys

    repo = Path(__file__).resolve().parent.parent
    subprocess.run([sys.executable, "-m", "hatchling", "build", "-t", "wheel", "-d", str(tmp_path)],
                   cwd=repo, check=True, capture_output=True)
    wheel = next(tmp_path.glob("*.whl"))
    names = set(zipfile.ZipFile(wheel).namelist())
    assert {"pipeline/reports/html/assets/report.css", "pipeline/reports/html/assets/report.js",
            "pipeline/sql/select_html_sessions.sql"} <= names


# ---------------------------------------------------------------------------------------
# In a real browser
# ---------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def browser():
    executable = chromium_path()
    if executable is None:
        pytest.skip("no chromium on this machine: `make browser` (as root) installs Debian's "
                    "chromium")
    profile = Path(tempfile.mkdtemp(prefix="ctxlake-chromium-"))
    instance = Browser(executable, profile)
    try:
        yield instance
    finally:
        instance.close()
        shutil.rmtree(profile, ignore_errors=True)


CHARTS_DRAWN = ("[...document.querySelectorAll('svg.chart')]"
                ".map(s => s.querySelectorAll('rect,polyline,circle,path').length)")
LINKS = "[...document.querySelectorAll('a[href]')].map(a => a.href)"


def _check_in_browser(tab, path: Path, out: Path, shot: str | None = None) -> dict:
    load = tab.load(path)
    assert load.errors == [], f"{path}: {load.errors}"
    assert load.failed_requests == [], f"{path}: {load.failed_requests}"
    assert load.requests == [path.resolve().as_uri()], f"{path}: fetched {load.requests}"
    drawn = tab.evaluate(CHARTS_DRAWN)
    for href in tab.evaluate(LINKS):
        url = urlparse(href)
        assert url.scheme == "file", f"{path}: {href}"
        target = Path(unquote(url.path))
        assert target.is_file() and target.is_relative_to(out.resolve()), f"{path}: {href}"
        if url.fragment:
            ids = _parse(target).ids
            assert url.fragment in ids, f"{path}: {href}"
    if shot:
        tab.screenshot(ARTIFACTS / shot, full_page=True)
    return {"charts": drawn}


def test_every_page_type_loads_in_chromium_without_errors_and_draws_its_charts(
        browser, demo_lake, real_lake, tmp_path):
    demo_out, real_out = tmp_path / "demo", tmp_path / "real"
    render_html(demo_lake, demo_out)
    render_html(real_lake, real_out, policy=MASKING)
    con = demo_lake.connect()
    session_id, sha = con.execute(
        "SELECT session_id, payload_sha256 FROM evictions WHERE locator IS NOT NULL "
        "AND policy = 'payload_prune+microcompact' ORDER BY 1, 2 LIMIT 1").fetchone()
    con.close()
    with browser.tab() as tab:
        overview = _check_in_browser(tab, demo_out / "index.html", demo_out, "overview.png")
        assert len(overview["charts"]) == 6 and all(overview["charts"])
        listing = _check_in_browser(tab, demo_out / "sessions.html", demo_out, "sessions.png")
        assert listing["charts"] == []
        assert tab.evaluate("document.querySelectorAll('#sessions tbody tr').length") == 29
        policies = _check_in_browser(tab, demo_out / "policies.html", demo_out, "policies.png")
        assert len(policies["charts"]) == 3 and all(policies["charts"])
        session = _check_in_browser(tab, _session_page(demo_out, session_id), demo_out,
                                    "session.png")
        assert len(session["charts"]) == 1 and all(session["charts"])
        _check_in_browser(tab, demo_out / "payloads" / f"{sha}.html", demo_out, "payload.png")
        real = _check_in_browser(tab, _session_page(real_out, "7f2abd2d-7cfc-4447-9ddd-3ca8d14e02e9"),
                                 real_out, "session_real.png")
        assert all(real["charts"])
        _check_in_browser(tab, real_out / "index.html", real_out)
        _check_in_browser(tab, real_out / "policies.html", real_out)


def test_an_injected_script_shows_as_text_and_cjk_and_emoji_survive_in_chromium(
        browser, injection_lake, tmp_path):
    out = tmp_path / "html"
    render_html(injection_lake, out)
    with browser.tab() as tab:
        _check_in_browser(tab, _session_page(out, SESSION), out, "session_injected.png")
        assert tab.evaluate("typeof window.__pwned") == "undefined"
        assert tab.evaluate("document.querySelectorAll('main script, main img').length") == 0
        shown = tab.evaluate("document.body.innerText")
        assert INJECTED in shown
        assert CJK_EMOJI in shown
        # folded parts are text too once opened
        tab.evaluate("document.querySelectorAll('details').forEach(d => d.open = true)")
        shown = tab.evaluate("document.body.innerText")
        assert "</pre><script>window.__pwned=4</script>" in shown
        assert "thinking </details><script>window.__pwned=2</script>" in shown
        assert tab.evaluate("typeof window.__pwned") == "undefined"
        _check_in_browser(tab, out / "sessions.html", out)
        assert tab.evaluate("typeof window.__pwned") == "undefined"


def test_the_session_list_sorts_and_filters_in_the_page_keeping_sub_agents_under_their_parent(
        browser, real_lake, tmp_path):
    out = tmp_path / "html"
    render_html(real_lake, out)
    parent = "7f2abd2d-7cfc-4447-9ddd-3ca8d14e02e9"
    order = ("[...document.querySelectorAll('#sessions tbody tr')].filter(r => !r.hidden)"
             ".map(r => r.cells[1].textContent)")
    with browser.tab() as tab:
        _check_in_browser(tab, out / "sessions.html", out)
        # sort by est. tokens (column 8), twice: ascending then descending
        tab.click("#sessions thead th:nth-child(8)")
        ascending = tab.evaluate(order)
        tab.click("#sessions thead th:nth-child(8)")
        descending = tab.evaluate(order)
        assert ascending[0] != descending[0]
        assert descending[0] == "pvlib__pvlib-python-1606@mini_swe_agent"    # the largest session
        for listing in (ascending, descending):
            assert listing[listing.index(parent) + 1] == f"{parent}/agent-0c4c3cf8"
        tab.evaluate("const f = document.querySelector('input[data-filter]');"
                     "f.value = 'codex_cli'; f.dispatchEvent(new Event('input'))")
        assert tab.evaluate(order) == ["019b04ae-b1c6-7c72-a134-a4c2de66058c"]
        assert tab.evaluate("document.getElementById('sessions-count').textContent") == "1 shown"
        # a filter that matches only the sub-agent keeps its parent row with it
        tab.evaluate("const g = document.querySelector('input[data-filter]');"
                     "g.value = 'agent-0c4c3cf8'; g.dispatchEvent(new Event('input'))")
        assert tab.evaluate(order) == [parent, f"{parent}/agent-0c4c3cf8"]
