"""ctxlake.toml: defaults equal docs/policies.md, named policies, chains, inline parameters,
config hash, and errors that name the key and the file."""

from __future__ import annotations

import pytest

from pipeline.core.config import Config, config_from_dict, load_config, parse_policy_spec, policy_key
from pipeline.core.errors import ConfigError

CONFIG = """
ignore_patterns = ["^warmup$", "run the linter"]

[memory]
project = ["docs/agent-notes/"]

[policies.microcompact]
idle_minutes = 30

[policies.quick_mc]
policy = "microcompact"
keep_recent = 2

[policies.prune_then_mc]
chain = ["payload_prune(max_bytes=8192)", "quick_mc"]

[sweeps]
masking = ["observation_masking(window=5)", "observation_masking(window=10)"]
"""


def params(config: Config, spec: str, step: int = 0):
    return config.resolve(spec).steps[step].params


def test_built_in_defaults_are_the_numbers_of_policies_md():
    c = Config()
    mc = params(c, "microcompact")
    assert (mc.idle_minutes, mc.size_chars, mc.keep_recent) == (60, 500_000, 5)
    assert {"Read", "Bash", "Grep", "Glob", "WebFetch", "Edit", "MultiEdit", "Write",
            "read_file", "run_shell_command", "grep_search", "glob", "web_fetch", "replace",
            "write_file", "shell", "shell_command", "apply_patch"} <= set(mc.compactable_tools)
    pp = params(c, "payload_prune")
    assert (pp.max_bytes, pp.head_chars, pp.tail_chars) == (16384, 2048, 512)
    tp = params(c, "tail_protect")
    assert (tp.tail_pairs, tp.min_user_chars, tp.min_assistant_chars, tp.block_tokens) == \
        (3, 10, 20, 150)
    ce = params(c, "context_editing")
    assert (ce.trigger, ce.trigger_type, ce.keep, ce.clear_at_least, ce.exclude_tools,
            ce.clear_tool_inputs) == (100_000, "input_tokens", 3, 0, (), False)
    assert params(c, "observation_masking").window == 10
    st = params(c, "strategic")
    assert (st.threshold, st.cooldown_minutes) == (50, 10)
    assert st.weights == {"read": 0.5, "glob": 0.3, "search": 0.3, "web": 0.5}
    assert st.default_weight == 1.0


def test_a_config_file_defines_variants_chains_filters_and_sweeps(tmp_path):
    path = tmp_path / "ctxlake.toml"
    path.write_text(CONFIG)
    c = load_config(path)
    assert c.ignore_patterns == ("^warmup$", "run the linter")
    assert params(c, "microcompact").idle_minutes == 30          # override of a built-in
    quick = params(c, "quick_mc")
    assert (quick.keep_recent, quick.idle_minutes) == (2, 30)    # variant inherits the override
    chain = c.resolve("prune_then_mc")
    assert [s.policy for s in chain.steps] == ["payload_prune", "microcompact"]
    assert chain.steps[0].params.max_bytes == 8192 and chain.steps[1].params.keep_recent == 2
    assert c.sweeps["masking"] == ("observation_masking(window=5)", "observation_masking(window=10)")
    assert "docs/agent-notes/" in c.memory_roots().project


def test_inline_parameters_and_chains_in_a_policy_spec():
    assert parse_policy_spec("observation_masking(window=5)") == ("observation_masking",
                                                                  {"window": 5})
    assert parse_policy_spec('context_editing(exclude_tools=["Read", "Grep"], keep=1)') == \
        ("context_editing", {"exclude_tools": ["Read", "Grep"], "keep": 1})
    assert parse_policy_spec("none") == ("none", {})
    resolved = Config().resolve("payload_prune + microcompact(keep_recent=3)")
    assert resolved.name == "payload_prune + microcompact(keep_recent=3)"
    assert [s.policy for s in resolved.steps] == ["payload_prune", "microcompact"]
    assert resolved.steps[1].params.keep_recent == 3
    assert policy_key("microcompact") == "microcompact"
    key = policy_key("observation_masking(window=5)")
    assert key.startswith("observation_masking_window_5-") and "/" not in key


def test_the_config_hash_covers_the_resolved_parameters(tmp_path):
    c = Config()
    assert c.resolve("microcompact").config_hash == c.resolve("microcompact").config_hash
    assert c.resolve("microcompact").config_hash == \
        c.resolve("microcompact(keep_recent=5)").config_hash
    assert c.resolve("microcompact").config_hash != \
        c.resolve("microcompact(keep_recent=4)").config_hash
    path = tmp_path / "ctxlake.toml"
    path.write_text(CONFIG)
    assert load_config(path).resolve("microcompact").config_hash != \
        c.resolve("microcompact").config_hash           # idle 30 + ignore patterns + memory


@pytest.mark.parametrize("text, message", [
    ("colour = 1", r"unknown key 'colour'"),
    ("[policies.microcompact]\nkeep_recnt = 3", r"policies\.microcompact\.keep_recnt: unknown parameter"),
    ("[policies.microcompact]\nkeep_recent = \"5\"",
     r"policies\.microcompact\.keep_recent: expected an integer, got string"),
    ("[policies.microcompact]\nkeep_recent = true",
     r"policies\.microcompact\.keep_recent: expected an integer, got boolean"),
    ("[policies.microcompact]\nkeep_recent = 2.5",
     r"policies\.microcompact\.keep_recent: expected an integer, got number"),
    ("[policies.microcompact]\nkeep_recent = 0", r"policies\.microcompact\.keep_recent: must be at least 1"),
    ("[policies.context_editing]\nexclude_tools = \"Read\"",
     r"policies\.context_editing\.exclude_tools: expected a list of strings"),
    ("[policies.context_editing]\nexclude_tools = [\"Read\", 3]",
     r"policies\.context_editing\.exclude_tools\[1\]: expected a string"),
    ("ignore_patterns = \"x\"", r"ignore_patterns: expected a list of strings"),
    ("[memory]\nprojects = []", r"memory\.projects: unknown key"),
    ("[memory]\nuser = [\"../x\"]", r"memory\.user\[0\]: a memory root may not contain '\.\.'"),
    ("[policies.mine]\nkeep_recent = 1", r"policies\.mine: not a built-in policy"),
    ("[policies.mine]\npolicy = \"microcompactt\"", r"policies\.mine\.policy: unknown policy"),
    ("[policies.c]\nchain = [\"none\"]\nkeep_recent = 1", r"policies\.c\.keep_recent: a chain takes no"),
    ("[policies.c]\nchain = [\"nonee\"]", r"unknown policy 'nonee'"),
    ("[sweeps]\nmasking = [\"observation_masking(window=0)\"]",
     r"observation_masking\(window=0\)\.window: must be at least 1"),
    ("[policies.microcompact\n", r"not valid TOML"),
])
def test_bad_configs_raise_errors_naming_the_key_and_the_file(tmp_path, text, message):
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=message) as caught:
        load_config(path)
    assert caught.value.path == str(path)
    assert str(path) in str(caught.value)


@pytest.mark.parametrize("spec, message", [
    ("microcompact(keep_recent=0)", r"microcompact\(keep_recent=0\)\.keep_recent: must be at least 1"),
    ("observation_masking(window=\"5\")", r"\.window: expected an integer, got string"),
    # past the lake's 64-bit columns, and floats that are not finite: said, not a traceback
    ("observation_masking(window=99999999999999999999999)", r"\.window: expected an integer of at most 64 bits"),
    ("microcompact(idle_minutes=1e999)", r"\.idle_minutes: expected a finite number, got number inf"),
    ("microcompact(idle_minutes=nan)", r"\.idle_minutes: expected a finite number, got number nan"),
    ("microcompact(idle_minutes=" + "9" * 400 + ")", r"\.idle_minutes: expected a finite number"),
    ("context_editing(trigger_type=\"bytes\")", r"\.trigger_type: must be"),
    ("microcompact(keep_recent=)", r"cannot read the parameters"),
    ("micro compact", r"cannot read policy spec"),
    ("payload_prune++microcompact", r"has an empty step"),
    ("nonexistent", r"unknown policy 'nonexistent'"),
])
def test_bad_policy_specs_raise_config_errors(spec, message):
    with pytest.raises(ConfigError, match=message):
        Config().resolve(spec)


def test_where_the_config_is_found(tmp_path, monkeypatch):
    monkeypatch.delenv("CTXLAKE_CONFIG", raising=False)
    monkeypatch.chdir(tmp_path)
    assert load_config(None).path is None                        # defaults
    (tmp_path / "ctxlake.toml").write_text('ignore_patterns = ["local"]')
    assert load_config(None).ignore_patterns == ("local",)       # ./ctxlake.toml
    other = tmp_path / "other.toml"
    other.write_text('ignore_patterns = ["from env"]')
    monkeypatch.setenv("CTXLAKE_CONFIG", str(other))
    assert load_config(None).ignore_patterns == ("from env",)    # $CTXLAKE_CONFIG wins
    explicit = tmp_path / "explicit.toml"
    explicit.write_text('ignore_patterns = ["explicit"]')
    assert load_config(explicit).ignore_patterns == ("explicit",)
    with pytest.raises(ConfigError, match="config file not found"):
        load_config(tmp_path / "missing.toml")
    monkeypatch.setenv("CTXLAKE_CONFIG", str(tmp_path / "gone.toml"))
    with pytest.raises(ConfigError, match="config file not found"):
        load_config(None)


def test_config_from_a_dict_is_validated_like_a_file():
    c = config_from_dict({"policies": {"observation_masking": {"window": 4}}})
    assert params(c, "observation_masking").window == 4
    with pytest.raises(ConfigError, match=r"policies\.observation_masking\.windows"):
        config_from_dict({"policies": {"observation_masking": {"windows": 4}}})


def test_the_policy_catalog_is_typed_and_its_json_form_keeps_the_keys(tmp_path):
    from pipeline.core.config import PolicyParam, load_config, policy_catalog

    path = tmp_path / "c.toml"
    path.write_text('[policies.microcompact]\nkeep_recent = 2\n[sweeps]\nsmall = ["microcompact"]\n',
                    encoding="utf-8")
    catalog = policy_catalog(load_config(path))
    micro = next(p for p in catalog.builtins if p.policy == "microcompact")
    keep = next(p for p in micro.params if p.name == "keep_recent")
    assert keep == PolicyParam("keep_recent", "integer", 5, 2, True)
    assert (catalog.config, catalog.named, catalog.sweeps["small"]) == (str(path), [],
                                                                        ["microcompact"])
    as_json = catalog.to_dict()
    assert sorted(as_json) == ["builtins", "config", "named", "sweeps"]
    assert sorted(as_json["builtins"][0]) == ["params", "policy", "summary"]
