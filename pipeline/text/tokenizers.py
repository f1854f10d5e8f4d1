"""Real tokenizers, offline: OpenAI ``o200k_base``/``cl100k_base`` and Claude's legacy tokenizer.

Optional extra ``ctxlake[tokenizers]`` (bpe-openai, tiktoken, tokenizers, anthropic==0.34.0).
Nothing is downloaded, ever:

- OpenAI encodings: the ``bpe-openai`` wheel ships ``bpe_openai/data/<name>.tiktoken.gz``.
  We gunzip it, check its sha256 against the hash tiktoken itself expects for that encoding
  (``tiktoken_ext.openai_public``; the same constants are pinned in :data:`EXPECTED_SHA256`),
  and build a ``tiktoken.Encoding`` from tiktoken's own constructor (regex, special tokens)
  with its loader swapped for one that serves the wheel's file. tiktoken's
  ``get_encoding`` is never called: it would fetch the file by URL (and fails here).
- Claude: ``anthropic==0.34.0`` (MIT) ships the legacy ``anthropic/tokenizer.json``, loaded with
  ``tokenizers.Tokenizer.from_file``. It is the pre-Claude-3 vocabulary: an approximation for
  current models, useful to compare with the heuristic, not the billing count.

Which encoding is a model's exact tokenizer: :func:`encoding_for_model` (OpenAI models only;
with ``approximate=True`` Claude models get the legacy ``claude`` vocabulary too).

Package files are located with ``importlib.util.find_spec`` so neither ``anthropic`` (which
imports an HTTP client) nor ``bpe_openai`` (a 74 MB extension) is imported.
"""

from __future__ import annotations

import binascii
import functools
import gzip
import hashlib
import importlib.util
import json
import os
import re
import sys
import threading
import types
import unicodedata
from pathlib import Path
from typing import Any, Sequence

from pipeline.core.errors import TokenizerUnavailableError, UsageError

ENCODINGS = ("o200k_base", "cl100k_base", "claude")
INSTALL_HINT = "pip install 'ctxlake[tokenizers]'"
# sha256 of the uncompressed BPE files, as declared by tiktoken_ext.openai_public.
EXPECTED_SHA256 = {
    "o200k_base": "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d",
    "cl100k_base": "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7",
}
_LOCK = threading.Lock()
# The one place that says which shipped encoding is a model's exact tokenizer (after
# tiktoken's ``tiktoken.model`` tables, first match wins). Only OpenAI models: GPT-4o, 4.1,
# 4.5, GPT-5 (incl. codex variants), o1/o3/o4-mini and codex-mini use o200k_base (gpt-oss's
# o200k_harmony is o200k_base plus special tokens, the same for ordinary text); GPT-4 and
# GPT-3.5 use cl100k_base. Anything else (Claude: "claude" here is the pre-Claude-3
# vocabulary, an approximation; Gemini, DeepSeek, ...) has no exact tokenizer shipped.
MODEL_ENCODINGS = (
    (re.compile(r"(o1|o3|o4-mini|codex-mini)(-.*)?|(gpt-(5|4\.5|4\.1|4o|oss)|chatgpt-4o).*"),
     "o200k_base"),
    (re.compile(r"gpt-(4|3\.5|35)(-.*)?"), "cl100k_base"),
)
# Models whose tokenizer does not ship but whose family's older vocabulary does: Claude 3 and
# later (and Claude 2) are counted with the legacy "claude" vocabulary, an approximation. On
# the real samples it counts Claude's visible output within 0-4% on text-only replies, and
# within ~2% once tool calls are written in Claude's own syntax (pipeline.text.written_output).
APPROXIMATE_MODEL_ENCODINGS = (
    (re.compile(r"claude-.*"), "claude"),
)


def _package_dir(package: str) -> Path:
    """The folder of an installed package, without importing it."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise TokenizerUnavailableError(
            f"the real tokenizers need the package '{package}', which is not installed",
            hint=f"install the optional extra: {INSTALL_HINT}")
    return Path(next(iter(spec.submodule_search_locations)))


def _require(module: str) -> Any:
    try:
        return importlib.import_module(module)
    except ImportError:
        raise TokenizerUnavailableError(
            f"the real tokenizers need the package '{module.split('.')[0]}', which is not installed",
            hint=f"install the optional extra: {INSTALL_HINT}") from None


def bpe_file(name: str) -> Path:
    """The ``<name>.tiktoken.gz`` file shipped inside the bpe-openai wheel."""
    path = _package_dir("bpe_openai") / "data" / f"{name}.tiktoken.gz"
    if not path.is_file():
        raise TokenizerUnavailableError(f"the bpe-openai package has no {path.name}",
                                        path=str(path), hint=f"reinstall: {INSTALL_HINT}")
    return path


def load_bpe_ranks(name: str, expected_hash: str | None = None) -> dict[bytes, int]:
    """Mergeable ranks of an OpenAI encoding from the wheel, after checking its sha256.

    ``expected_hash`` defaults to :data:`EXPECTED_SHA256`; a mismatch is an error (a corrupt
    or different file must not silently count tokens). The format is tiktoken's: one
    ``<base64 token> <rank>`` per line.
    """
    expected = expected_hash or EXPECTED_SHA256[name]
    path = bpe_file(name)
    data = gzip.decompress(path.read_bytes())
    actual = hashlib.sha256(data).hexdigest()
    if actual != expected:
        raise TokenizerUnavailableError(
            f"{path.name} has sha256 {actual}, tiktoken expects {expected}", path=str(path),
            hint=f"reinstall the extra: {INSTALL_HINT}")
    # the pinned file is pairs of whitespace-free fields: split once, decode with binascii
    # (half the time of a b64decode per line: 0.15 s against 0.29 s for o200k_base)
    fields = data.split()
    return dict(zip(map(binascii.a2b_base64, fields[0::2]), map(int, fields[1::2])))


@functools.cache
def _tiktoken_encoding(name: str) -> Any:
    tiktoken = _require("tiktoken")
    openai_public = _require("tiktoken_ext.openai_public")
    constructor = getattr(openai_public, name)

    def local_loader(blobpath: str, expected_hash: str | None = None, **_: Any) -> dict[bytes, int]:
        if not blobpath.endswith(f"/{name}.tiktoken"):
            raise TokenizerUnavailableError(f"tiktoken asked for {blobpath}; only {name} is shipped")
        if expected_hash is not None and expected_hash != EXPECTED_SHA256[name]:
            raise TokenizerUnavailableError(
                f"tiktoken expects sha256 {expected_hash} for {name}, ctxlake pins "
                f"{EXPECTED_SHA256[name]}", hint="update EXPECTED_SHA256 in pipeline/text/tokenizers.py")
        return load_bpe_ranks(name, expected_hash)

    # tiktoken's own constructor (regex and special tokens), run with a copy of its module
    # globals in which load_tiktoken_bpe serves the wheel's file: the module is not modified.
    local_globals = dict(vars(openai_public), load_tiktoken_bpe=local_loader)
    offline_constructor = types.FunctionType(constructor.__code__, local_globals, name)
    return tiktoken.Encoding(**offline_constructor())


@functools.cache
def _claude_tokenizer() -> Any:
    tokenizers = _require("tokenizers")
    path = _package_dir("anthropic") / "tokenizer.json"
    if not path.is_file():
        raise TokenizerUnavailableError(
            "this anthropic package has no tokenizer.json (it shipped up to 0.34.0)",
            path=str(path), hint=f"install the extra, which pins anthropic==0.34.0: {INSTALL_HINT}")
    return tokenizers.Tokenizer.from_file(str(path))


# The GPT-2 split of Hugging Face's ``ByteLevel`` pre-tokenizer (``use_regex``), as tiktoken
# writes it: what the legacy Claude tokenizer runs BPE on, after NFKC.
BYTE_LEVEL_SPLIT = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""


def _byte_of_char() -> dict[str, int]:
    """GPT-2's byte-to-character table, reversed: a ByteLevel vocabulary entry to its bytes."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1),
                 *range(ord("®"), ord("ÿ") + 1)]
    chars = printable[:]
    extra = 0
    for byte in range(256):
        if byte not in printable:
            printable.append(byte)
            chars.append(256 + extra)
            extra += 1
    return {chr(char): byte for byte, char in zip(printable, chars)}


@functools.cache
def _claude_counter() -> tuple[Any, "re.Pattern[str]"] | None:
    """The legacy Claude vocabulary as a ``tiktoken.Encoding`` and the pattern of its added
    tokens, for counting: ~9x faster than the ``tokenizers`` library, which also builds
    offsets and token strings nobody reads. Its counts equal that tokenizer's (a GPT-2-style
    byte-level BPE whose merges are in id order: tiktoken's ranks are those ids; checked on
    every real sample and demo format, ``tests/test_tokenizers.py``). None when the file is
    not of that shape; the ``tokenizers`` library counts then."""
    tiktoken = _require("tiktoken")
    data = json.loads((_package_dir("anthropic") / "tokenizer.json").read_bytes())
    model = data.get("model") or {}
    pre = data.get("pre_tokenizer") or {}
    if model.get("type") != "BPE" or (data.get("normalizer") or {}).get("type") != "NFKC" \
            or pre.get("type") != "ByteLevel" or pre.get("add_prefix_space") \
            or not pre.get("use_regex", True):
        return None
    vocab: dict[str, int] = model["vocab"]
    added = {token["content"] for token in data.get("added_tokens", [])}
    merged = [vocab.get("".join(merge.split(" ")) if isinstance(merge, str) else "".join(merge))
              for merge in model["merges"]]
    if None in merged or merged != sorted(merged):
        return None
    # each character of an entry stands for one byte: translated to that byte's Latin-1
    # character, the entry encodes to its bytes (a character outside the table: not this shape)
    byte_of = _byte_of_char()
    tokens = [token for token in vocab if token not in added]
    if not set("".join(tokens)) <= byte_of.keys():
        return None
    to_latin1 = str.maketrans({char: chr(byte) for char, byte in byte_of.items()})
    ranks = {token.translate(to_latin1).encode("latin-1"): vocab[token] for token in tokens}
    encoding = tiktoken.Encoding(name="claude-legacy", pat_str=BYTE_LEVEL_SPLIT,
                                 mergeable_ranks=ranks, special_tokens={})
    specials = re.compile("(" + "|".join(re.escape(t) for t in sorted(added, key=len, reverse=True))
                          + ")") if added else re.compile("(?!)")
    return encoding, specials


@functools.lru_cache(maxsize=65536)
def _unassigned(char: str) -> bool:
    """Whether this Python's Unicode database does not know ``char``: a text holding one is
    counted by the ``tokenizers`` library itself (its NFKC and regex tables may be newer)."""
    return unicodedata.category(char) == "Cn"


def _counted_in_slices(encoding: Any, pieces: list[str]) -> list[int]:
    """``len(encoding.encode_ordinary(piece))`` of each piece, a slice of pieces per thread
    (tiktoken releases the GIL while it encodes; one future per piece would cost more than
    the counting)."""
    from concurrent.futures import ThreadPoolExecutor

    def count(part: list[str]) -> list[int]:
        return [len(encoding.encode_ordinary(piece)) for piece in part]

    size = 2 * BATCH_TEXTS
    parts = [pieces[i:i + size] for i in range(0, len(pieces), size)]
    if len(parts) < 2:
        return count(pieces)
    with ThreadPoolExecutor(max_workers=min(len(parts), os.cpu_count() or 1)) as pool:
        return [n for part in pool.map(count, parts) for n in part]


def _claude_counts(texts: list[str]) -> list[int] | None:
    """Claude legacy counts of ``texts`` through :func:`_claude_counter` (None: not usable).
    Added-token strings in a text count one each, as the ``tokenizers`` library matches them
    before normalising; the rest is NFKC-normalised and split like its ByteLevel step."""
    try:
        counter = _claude_counter()
    except TokenizerUnavailableError:
        return None     # no tiktoken: the tokenizers library counts (or says what is missing)
    if counter is None:
        return None
    encoding, specials = counter
    counts = [0] * len(texts)
    owner: list[int] = []
    pieces: list[str] = []
    slow: list[int] = []
    for index, text in enumerate(texts):
        if not text:
            continue
        if not text.isascii() and any(_unassigned(char) for char in set(text) if char > "\x7f"):
            slow.append(index)
            continue
        for position, piece in enumerate(specials.split(text)):
            if position % 2:
                counts[index] += 1
            elif piece:
                owner.append(index)
                pieces.append(unicodedata.normalize("NFKC", piece))
    for index, n in zip(owner, _counted_in_slices(encoding, pieces)):
        counts[index] += n
    if slow:
        tokenizer = _claude_tokenizer()
        for index, encoded in zip(slow, tokenizer.encode_batch([texts[i] for i in slow],
                                                               add_special_tokens=False)):
            counts[index] = len(encoded.ids)
    return counts


@functools.cache
def available(encoding: str) -> bool:
    """Whether ``encoding`` can be counted here: its packages and data file are installed.
    Checked without loading the tokenizer (0.3-0.7 s each), which happens on first use."""
    if any(name in sys.modules and sys.modules[name] is None for name in ("tiktoken", "tokenizers")
           if (name == "tokenizers") == (encoding == "claude")):
        return False    # imports blocked (a test's stand-in for the missing extra)
    try:
        if encoding == "claude":
            _package_dir("tokenizers")
            return (_package_dir("anthropic") / "tokenizer.json").is_file()
        _package_dir("tiktoken")
        bpe_file(encoding)
    except TokenizerUnavailableError:
        return False
    return importlib.util.find_spec("tiktoken_ext.openai_public") is not None


def get_tokenizer(encoding: str) -> Any:
    """The loaded tokenizer object (``tiktoken.Encoding`` or ``tokenizers.Tokenizer``), cached."""
    if encoding not in ENCODINGS:
        raise UsageError(f"unknown encoding '{encoding}'", hint="choose one of: " + ", ".join(ENCODINGS))
    with _LOCK:
        return _claude_tokenizer() if encoding == "claude" else _tiktoken_encoding(encoding)


def count_tokens(text: str | None, encoding: str = "o200k_base") -> int:
    """Tokens of ``text`` under a real tokenizer, offline; 0 for ``None``/empty.

    Special-token strings in the text (``<|endoftext|>``) are counted as ordinary text, as a
    transcript holds them as text.
    """
    if encoding == "claude":    # one counting path for Claude: the batch's (see _claude_counts)
        return count_tokens_batch([text], encoding)[0]
    tokenizer = get_tokenizer(encoding)
    return len(tokenizer.encode_ordinary(text)) if text else 0


BATCH_TEXTS = 1000   # texts per call to a batch encoder (bounds its memory, keeps its threads busy)


def count_tokens_batch(texts: Sequence[str | None], encoding: str = "o200k_base") -> list[int]:
    """:func:`count_tokens` of each text, counted in one call to the tokenizer's batch
    encoder (tiktoken's threads, the Rust ``tokenizers`` pool): several times faster than a
    loop when there are many texts."""
    items = [text or "" for text in texts]
    if encoding == "claude" and available(encoding):
        fast = _claude_counts(items)
        if fast is not None:
            return fast
    tokenizer = get_tokenizer(encoding)
    counts: list[int] = []
    # in slices: an encoding holds ids, offsets and token strings per token (~30x the text),
    # so the whole batch at once would hold hundreds of MB only to be counted
    for start in range(0, len(items), BATCH_TEXTS):
        part = items[start:start + BATCH_TEXTS]
        if encoding == "claude":
            counts += [len(e.ids) for e in tokenizer.encode_batch(part, add_special_tokens=False)]
        else:
            counts += [len(ids) for ids in tokenizer.encode_ordinary_batch(part)]
    return counts


def encoding_for_model(model: str | None, *, approximate: bool = False) -> str | None:
    """The shipped encoding that is ``model``'s exact tokenizer, or None (see
    :data:`MODEL_ENCODINGS`); with ``approximate``, also its family's older vocabulary where
    only that ships (:data:`APPROXIMATE_MODEL_ENCODINGS`: Claude). Case-insensitive; a
    provider prefix (``openai/gpt-4o``, ``anthropic/claude-...``) and a fine-tune prefix
    (``ft:gpt-4o-mini:org::id``) are ignored."""
    name = (model or "").strip().lower().rsplit("/", 1)[-1]
    name = name.removeprefix("ft:")
    for pattern, encoding in MODEL_ENCODINGS + (APPROXIMATE_MODEL_ENCODINGS if approximate else ()):
        if pattern.fullmatch(name):
            return encoding
    return None
