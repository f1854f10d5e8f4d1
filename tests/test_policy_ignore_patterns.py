"""ignore_patterns: case-insensitive regexes on the first real user message (not meta, not a
tool result, not a slash-command wrapper); matching sessions are skipped and counted."""

from __future__ import annotations

import json

import pytest

from conftest import ingest_paths
from pipeline.config import config_from_dict
from pipeline.errors import ConfigError
from pipeline.plan import plan
from pipeline.policies.base import ParamError
from pipeline.policies.ignore_patterns import compile_patterns, matching_pattern


def test_patterns_are_case_insensitive_searches():
    compiled = compile_patterns(["^warmup$", "lint"])
    assert matching_pattern("Warmup", compiled) == "^warmup$"
    assert matching_pattern("please run the LINTER", compiled) == "lint"
    assert matching_pattern("warm up", compiled) is None
    assert matching_pattern(None, compiled) is None


def test_an_invalid_regex_names_its_position():
    with pytest.raises(ParamError) as caught:
        compile_patterns(["fine", "[oops"])
    assert caught.value.key == "ignore_patterns[1]"
    with pytest.raises(ConfigError, match=r"ignore_patterns\[1\]: invalid regex '\[oops'"):
        config_from_dict({"ignore_patterns": ["fine", "[oops"]})


def line(n: int, content, **extra) -> str:
    return json.dumps({"type": "user", "sessionId": "s-ignore", "uuid": f"u{n}",
                       "parentUuid": None, "timestamp": f"2026-01-05T09:0{n}:00.000Z",
                       "cwd": "/w", "message": {"role": "user", "content": content}, **extra})


def test_the_first_real_user_message_decides(tmp_path):
    folder = tmp_path / "archive" / "projects" / "-w"
    folder.mkdir(parents=True)
    (folder / "s-ignore.jsonl").write_text("\n".join([
        line(1, "<command-name>/review</command-name>"),                  # slash-command wrapper
        line(2, "Caveat: the messages below were generated locally", isMeta=True),
        line(3, "Nightly lint run: fix every warning"),                    # the first real prompt
        line(4, "and also the typos"),
    ]) + "\n")
    lake, _ = ingest_paths(tmp_path, tmp_path / "archive")
    for patterns, ignored in ((["^nightly lint"], 1), (["review"], 0), (["caveat"], 0),
                              (["typos"], 0), ([], 0)):
        summary = plan(lake, policy="none", config=config_from_dict({"ignore_patterns": patterns}))
        assert (summary.sessions, summary.sessions_ignored) == (1 - ignored, ignored), patterns
