"""``ignored`` is decided once, by the flags stage, and read by plan, summarize and replay.

After the nightly job flagged the lake, the stages read ``session_flags`` (the matcher is not
run again: it is patched to raise); when the flags are not current (other patterns, or the
lake changed since), they decide through the flags stage's own function.
"""

from __future__ import annotations

import pyarrow as pa
import pytest

from pipeline.core.config import config_from_dict
from pipeline.core.lake import Lake
from pipeline.stages import flags
from pipeline.stages.flags import SESSION_FLAGS, flags_current
from pipeline.stages.nightly import run_nightly
from pipeline.stages.plan import plan
from pipeline.stages.replay import replay
from pipeline.stages.summarize import summarize
from tests.helpers.lake import copy_real, ingest_paths, rows

PATTERN = "^ADD MYAPP"     # both samples start with "add myapp directory ..."
CONFIG = config_from_dict({"ignore_patterns": [PATTERN]})


@pytest.fixture
def flagged(tmp_path) -> tuple[Lake, dict[str, str]]:
    """A lake the nightly job flagged (both sessions ignored), and its sessions by format."""
    archive = copy_real(tmp_path, "claude_code/claude_session.jsonl", "codex/codex_session.jsonl")
    config = tmp_path / "ctxlake.toml"
    config.write_text(f'ignore_patterns = ["{PATTERN}"]\n', encoding="utf-8")
    lake = Lake(tmp_path / "lake")
    assert run_nightly([archive], lake=lake, workers=1, tz="UTC", config_path=config).sessions_ignored == 2
    by_format = dict(rows(lake, "SELECT format, session_id FROM sessions ORDER BY format"))
    return lake, by_format


def _no_matching(monkeypatch) -> None:
    def refuse(*args, **kwargs):
        raise AssertionError("the ignore patterns were matched again")
    monkeypatch.setattr(flags, "first_prompt_matches", refuse)


def _flag_only(lake: Lake, session_id: str) -> None:
    """Rewrite session_flags by hand (the ledger still calls them current): only one session
    ignored, so a stage that reads the table can be told from one that matches again."""
    table = pa.Table.from_pylist([{"session_id": session_id, "ignored": True, "ignored_by": PATTERN}],
                                 schema=SESSION_FLAGS)
    lake.write_session_rows("session_flags", "all", table, None, sort_by=["session_id"])


def test_plan_and_summarize_read_the_flags_the_nightly_job_wrote_without_matching_again(
        flagged, monkeypatch):
    lake, sessions = flagged
    assert flags_current(lake, [PATTERN])
    _flag_only(lake, sessions["codex_cli"])
    _no_matching(monkeypatch)
    summary = plan(lake, policy="none", config=CONFIG)
    assert (summary.sessions, summary.sessions_ignored) == (1, 1)
    summarized = summarize(lake, tz="UTC", ignore_patterns=[PATTERN])
    assert summarized.ignored_session_ids == [sessions["codex_cli"]]


def test_replay_reads_the_flags_when_its_patterns_are_the_lakes(flagged, monkeypatch):
    lake, sessions = flagged
    _flag_only(lake, sessions["claude_code"])
    _no_matching(monkeypatch)
    result = replay(lake, policies=["none"], config=CONFIG, write=False)
    assert (result.sessions, result.sessions_ignored) == (1, 1)


def test_other_patterns_than_the_flags_were_written_with_are_matched_again(flagged):
    lake, _sessions = flagged
    assert not flags_current(lake, [])
    assert plan(lake, policy="none", config=config_from_dict({})).sessions_ignored == 0
    other = config_from_dict({"ignore_patterns": ["^add myapp directory"]})
    assert not flags_current(lake, other.ignore_patterns)
    assert plan(lake, policy="none", config=other).sessions_ignored == 2
    # replay with its own ignore config than the lake's keeps deciding with it
    assert replay(lake, policies=["none"], config=config_from_dict({}), write=False).sessions_ignored == 0
    assert summarize(lake, tz="UTC", ignore_patterns=[]).sessions_ignored == 0


def test_flags_are_stale_once_the_lake_changed_and_the_stages_match_again(flagged, tmp_path):
    lake, sessions = flagged
    _flag_only(lake, sessions["codex_cli"])
    more = copy_real(tmp_path / "more", "swe_agent/pydicom__pydicom-1458.traj")
    ingest_paths(tmp_path, more)
    assert not flags_current(lake, [PATTERN])
    # decided again by the flags stage's rule: both "add myapp" sessions, not the new one
    summary = plan(lake, policy="none", config=CONFIG)
    assert (summary.sessions, summary.sessions_ignored) == (1, 2)


def test_a_lake_never_flagged_is_decided_by_the_flags_stage_rule(tmp_path):
    archive = copy_real(tmp_path, "claude_code/claude_session.jsonl")
    lake, _ = ingest_paths(tmp_path, archive)
    assert not flags_current(lake, [PATTERN])
    assert plan(lake, policy="none", config=CONFIG).sessions_ignored == 1
