"""ignore_patterns: case-insensitive regexes on the first real user message (not meta, not a
tool result, not a slash-command wrapper); matching sessions are skipped and counted."""

from __future__ import annotations

import json

import pytest

from tests.helpers.lake import ingest_paths
from pipeline.core.config import config_from_dict
from pipeline.core.errors import ConfigError, IgnorePatternWarning
from pipeline.stages.plan import plan
from pipeline.policies.base import ParamError
from pipeline.policies.ignore_patterns import compile_patterns, matching_pattern


def test_patterns_are_case_insensitive_searches():
    compiled = compile_patterns(["^warmup$", "lint"])
    assert matching_pattern("Warmup", compiled) == "^warmup$"
    assert matching_pattern("please run the LINTER", compiled) == "lint"
    assert matching_pattern("warm up", compiled) is None
    assert matching_pattern(None, compiled) is None


def test_an_invalid_regex_is_dropped_with_a_warning_naming_its_position_and_text():
    with pytest.warns(IgnorePatternWarning,
                      match=r"ignore_patterns\[1\]: invalid regex '\[oops' .*dropped"):
        compiled = compile_patterns(["fine", "[oops", "other"])
    assert [p.pattern for p in compiled] == ["fine", "other"]
    with pytest.warns(IgnorePatternWarning, match=r"ignore_patterns\[1\]: invalid regex '\[oops'"):
        config = config_from_dict({"ignore_patterns": ["fine", "[oops"]})
    assert config.ignore_patterns == ("fine", "[oops")


def test_a_non_string_pattern_is_still_a_config_error():
    with pytest.raises(ParamError) as caught:
        compile_patterns(["fine", 3])
    assert caught.value.key == "ignore_patterns[1]"
    with pytest.raises(ConfigError, match=r"ignore_patterns\[1\]: must be a string"):
        config_from_dict({"ignore_patterns": ["fine", 3]})


@pytest.mark.parametrize("pattern, text, matches", [
    (r"^(?<kind>cron|warmup)\b", "CRON: nightly sync", True),        # JS named group
    (r"^(?<w>\w+) \k<w>$", "hello hello", True),                      # JS named backreference
    (r"^(?<w>\w+) \k<w>$", "hello world", False),
    (r"^\[CRON\]", "[cron] rotate logs", True),
    (r"job$", "nightly job\n", False),          # JS $ without m: the very end only
    (r"job$", "nightly job", True),
    (r"^a.b$", "a\rb", False),                  # JS . excludes \r (and \n, U+2028/9)
    (r"^\d+$", "\u0663\u0664", False),          # JS \d is ASCII digits only
    (r"^\s$", "\ufeff", True),                   # JS \s includes U+FEFF
    (r"^x[^]y$", "x\ny", True),                  # [^] is any character
    (r"x[]", "x", False),                        # [] matches nothing
    (r"^a{,2}$", "a{,2}", True),                 # not a quantifier in JS: literal
    (r"^\A$", "a", True),                        # identity escape: the letter (case-insensitive)
    (r"[[]x", "[x", True),                       # '[' inside a class is a literal
    (r"^\/tmp\/", "/tmp/x", True),
    (r"^\x41\u0042\cJ", "ab\n", True),
])
def test_patterns_follow_javascript_regex_semantics(pattern, text, matches):
    assert (matching_pattern(text, compile_patterns([pattern])) == pattern) is matches


@pytest.mark.parametrize("pattern", [
    r"(?P<name>x)",           # Python's spelling is a syntax error in JavaScript
    r"(?i)x",                 # inline flags too
    r"(?<=a+)b",              # JavaScript allows it, Python's re cannot express it
    r"(unclosed",
    "x\\",                   # a trailing backslash
])
def test_patterns_javascript_rejects_or_python_cannot_express_are_dropped(pattern):
    with pytest.warns(IgnorePatternWarning, match=r"ignore_patterns\[0\]: invalid regex"):
        assert compile_patterns([pattern]) == []


def test_the_cli_prints_the_warning_once_and_the_run_goes_on(tmp_path):
    from click.testing import CliRunner

    from pipeline.cli import cli

    folder = tmp_path / "archive" / "projects" / "-w"
    folder.mkdir(parents=True)
    (folder / "s-ignore.jsonl").write_text(line(1, "Nightly lint run: fix every warning") + "\n")
    config = tmp_path / "ctxlake.toml"
    config.write_text('ignore_patterns = ["(?<broken", "^nightly (?<what>lint)"]\n')
    result = CliRunner().invoke(cli, ["--lake", str(tmp_path / "lake"), "run",
                                      str(tmp_path / "archive"), "--config", str(config),
                                      "--tz", "UTC", "--json"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    warnings = [l for l in result.stderr.splitlines() if l.startswith("warning: ")]
    assert warnings == ["warning: ignore_patterns[0]: invalid regex '(?<broken' (invalid "
                        "capture group name): dropped, the other patterns still apply"]
    summary = json.loads(result.stdout)
    assert summary["plans"][0]["sessions_ignored"] == 1


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
