"""Real tokenizers from files shipped in wheels, with no network (the extra is part of `dev`)."""

from __future__ import annotations

import inspect
import socket
import sys

import pytest

from tests.helpers.lake import REAL
from pipeline.text import tokenizers as real
from pipeline.core.errors import TokenizerUnavailableError, UsageError


@pytest.fixture
def fresh_caches():
    caches = (real._tiktoken_encoding, real._claude_tokenizer, real._claude_counter, real.available)
    for cache in caches:
        cache.cache_clear()
    yield
    for cache in caches:
        cache.cache_clear()


def test_known_token_ids_of_hello_world():
    # cl100k_base/o200k_base ids of "hello world" as published by OpenAI's tiktoken examples
    assert real.get_tokenizer("cl100k_base").encode_ordinary("hello world") == [15339, 1917]
    assert real.get_tokenizer("o200k_base").encode_ordinary("hello world") == [24912, 2375]
    assert real.count_tokens("hello world", "claude") == 2
    assert real.count_tokens("", "o200k_base") == 0
    assert real.count_tokens(None, "claude") == 0


def test_special_token_text_counts_as_ordinary_text():
    assert real.count_tokens("<|endoftext|>", "cl100k_base") > 1


def test_the_pinned_hashes_are_the_ones_tiktoken_expects():
    import tiktoken_ext.openai_public as openai_public

    for name, digest in real.EXPECTED_SHA256.items():
        assert f'expected_hash="{digest}"' in inspect.getsource(getattr(openai_public, name))


# bpe_openai itself still uses importlib.resources.open_binary (deprecated in 3.11)
@pytest.mark.filterwarnings("ignore:open_binary is deprecated:DeprecationWarning")
def test_tiktoken_counts_agree_with_the_bpe_openai_rust_tokenizer_on_real_text():
    import bpe_openai

    texts = [p.read_text(encoding="utf-8")[i:i + 3000]
             for p in sorted(REAL.rglob("*.json*")) for i in (0, 5000)]
    texts += ["中文テキスト ＦＵＬＬ 😀👍🏽 e\u0301", "def f(x):\n    return x ** 2\n"]
    for name in ("cl100k_base", "o200k_base"):
        reference = bpe_openai.get_encoding(name)
        ours = real.get_tokenizer(name)
        assert [ours.encode_ordinary(t) for t in texts] == [reference.encode(t) for t in texts]


def test_a_changed_bpe_file_is_refused():
    with pytest.raises(TokenizerUnavailableError, match="sha256"):
        real.load_bpe_ranks("cl100k_base", expected_hash="0" * 64)


def test_an_unknown_encoding_is_a_usage_error():
    with pytest.raises(UsageError, match="o200k_base, cl100k_base, claude"):
        real.count_tokens("x", "p50k_base")


def test_nothing_is_downloaded_or_cached(monkeypatch, tmp_path, fresh_caches):
    cache = tmp_path / "tiktoken-cache"
    cache.mkdir()
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    attempts = []

    def refuse(*args, **kwargs):
        attempts.append(args)
        raise OSError("network disabled in this test")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setattr(socket, "getaddrinfo", refuse)
    counts = {name: real.count_tokens("offline, always", name) for name in real.ENCODINGS}
    assert all(n > 0 for n in counts.values()), counts
    assert attempts == []
    assert list(cache.iterdir()) == []


@pytest.mark.parametrize("missing, encoding", [("tiktoken", "o200k_base"), ("tokenizers", "claude")])
def test_without_the_extra_the_error_names_it(monkeypatch, fresh_caches, missing, encoding):
    monkeypatch.setitem(sys.modules, missing, None)   # import fails as if not installed
    with pytest.raises(TokenizerUnavailableError) as info:
        real.count_tokens("x", encoding)
    assert "pip install 'ctxlake[tokenizers]'" in str(info.value)
    assert missing in str(info.value)


def test_without_the_bpe_openai_wheel_the_error_names_the_extra(monkeypatch, fresh_caches):
    original = real.importlib.util.find_spec
    monkeypatch.setattr(real.importlib.util, "find_spec",
                        lambda name, *a: None if name == "bpe_openai" else original(name, *a))
    with pytest.raises(TokenizerUnavailableError, match=r"bpe_openai.*\n.*ctxlake\[tokenizers\]"):
        real.count_tokens("x", "cl100k_base")


@pytest.mark.parametrize("model, encoding", [
    # OpenAI's own names (tiktoken.model's tables): GPT-4o/4.1/4.5/5, o-series, codex
    ("gpt-5.1-codex-max", "o200k_base"), ("gpt-5", "o200k_base"), ("gpt-5-mini", "o200k_base"),
    ("gpt-4o", "o200k_base"), ("gpt-4o-mini-2024-07-18", "o200k_base"),
    ("chatgpt-4o-latest", "o200k_base"), ("gpt-4.1-nano", "o200k_base"),
    ("gpt-4.5-preview", "o200k_base"), ("o1", "o200k_base"), ("o1-preview", "o200k_base"),
    ("o3-mini", "o200k_base"), ("o4-mini", "o200k_base"), ("codex-mini-latest", "o200k_base"),
    ("gpt-oss-120b", "o200k_base"),
    ("gpt-4", "cl100k_base"), ("gpt-4-turbo-2024-04-09", "cl100k_base"),
    ("gpt-3.5-turbo", "cl100k_base"), ("gpt-35-turbo", "cl100k_base"),
    # a provider prefix, a fine-tune, another case
    ("openai/gpt-4.1", "o200k_base"), ("ft:gpt-4o-mini:acme::abc123", "o200k_base"),
    ("GPT-4O", "o200k_base"),
    # no exact tokenizer shipped: Claude (the shipped vocabulary is pre-Claude-3), the rest
    ("claude-sonnet-4-5-20250929", None), ("anthropic/claude-sonnet-4-5-20250929", None),
    ("gemini-2.5-pro", None), ("google/gemini-3-pro-preview", None), ("deepseek-chat", None),
    ("text-davinci-003", None), ("o10", None), ("gpt-40", None), ("", None), (None, None),
])
def test_each_openai_model_maps_to_its_shipped_encoding_and_others_to_none(model, encoding):
    assert real.encoding_for_model(model) == encoding


@pytest.mark.parametrize("model,encoding", [
    # an exact tokenizer stays the one counted
    ("gpt-5.1-codex-max", "o200k_base"), ("gpt-4", "cl100k_base"),
    # Claude models: the legacy vocabulary, whatever the version, prefix or case
    ("claude-sonnet-4-5-20250929", "claude"), ("anthropic/claude-opus-4-1", "claude"),
    ("Claude-3-Haiku-20240307", "claude"),
    # nothing ships for the rest
    ("gemini-2.5-pro", None), ("deepseek-chat", None), ("claude", None), (None, None),
])
def test_an_approximate_encoding_is_given_only_when_asked_and_only_for_claude(model, encoding):
    assert real.encoding_for_model(model, approximate=True) == encoding
    if encoding == "claude":
        assert real.encoding_for_model(model) is None


@pytest.mark.parametrize("encoding", real.ENCODINGS)
def test_a_batch_counts_each_text_as_one_call_would(encoding):
    texts = ["Hello world", "", None, "def f(x):\n    return x  # 中文 😀", "x" * 5000,
             "<|endoftext|> as text"]
    assert real.count_tokens_batch(texts, encoding) == [real.count_tokens(t, encoding) for t in texts]
    assert real.count_tokens_batch([], encoding) == []


@pytest.mark.parametrize("encoding", ["o200k_base", "claude"])
def test_batch_counts_over_several_slices_equal_the_counts_of_each_text(encoding):
    words = (REAL / "SOURCES.md").read_text(encoding="utf-8").split()
    texts = [" ".join(words[i:i + 1 + i % 7]) for i in range(2 * real.BATCH_TEXTS + 17)]
    texts[5] = None
    counts = real.count_tokens_batch(texts, encoding)
    assert len(counts) == len(texts) and counts[5] == 0
    assert counts == [real.count_tokens(text, encoding) for text in texts]


def _strings(value):
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)


def test_claude_counts_through_tiktoken_equal_the_tokenizers_library_on_every_real_string():
    import json

    texts = []
    for path in sorted(REAL.rglob("*")):
        if path.suffix in (".jsonl", ".json", ".traj"):
            lines = path.read_text(encoding="utf-8").splitlines() if path.suffix == ".jsonl" \
                else [path.read_text(encoding="utf-8")]
            for line in lines:
                texts += [t for t in _strings(json.loads(line)) if t]
    texts += [
        "<EOT>", "a<META>b<META_START>c<META_END> <SOS>", "<META_STARTx", "ﬁle ﬂow ＡＢＣ①½",
        "e\u0301 Å Ω", "日本語のテキストと한국어", "emoji 👩\u200d💻🚀 and \ufe0f", "tabs\t\t  \r\n\n  end  ",
        "x" * 5000, "it's we're they'll I'd", "\u0378 unassigned \U000e0fff", "\U0010fffd private",
    ]
    expected = [len(e.ids) for e in real._claude_tokenizer().encode_batch(
        texts, add_special_tokens=False)]
    assert real._claude_counter() is not None
    assert len(texts) > 2000
    assert real.count_tokens_batch(texts, "claude") == expected
    assert [real.count_tokens(t, "claude") for t in texts[-12:]] == expected[-12:]
