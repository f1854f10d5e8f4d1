"""Token usage as an API would have counted it for the content written: a tokenizer per model
family relative to docs/policies.md's heuristic, and :class:`Meter`, the usage of one
conversation derived from what its transcript shows.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from pipeline.demo.context import Draws
from pipeline.text.tokens import text_counts

UNPRICED_MODEL = "acme-internal-coder-v3"     # a model no price table knows: reports show "unpriced"


@dataclasses.dataclass(frozen=True)
class Tokenizer:
    """How a model family's tokenizer counts, relative to the heuristic of docs/policies.md
    (``ceil(len / 4)`` plus 1.5 per CJK character): a factor for prose, one for code (tool
    inputs and results) and one for CJK, and the tokens of the syntax a model writes around
    each tool call (name, id, delimiters: in the count, never in a transcript's text)."""

    prose: float
    code: float
    cjk: float
    framing: int


# (part of the model name, tokenizer): the first match wins; a vendor's models share one.
# The factors are what real BPE tokenizers give on this archive's text: its prose is common
# English words (~6 characters a token, well under the heuristic's 4), its code and logs
# near 4; "gpt" is o200k_base's ratio and "claude" the legacy Claude vocabulary's (its tool
# calls counted as Claude writes them, pipeline.text.written_output: the tags are most of the
# framing, 3 tokens are left), measured, so that a real-tokenizer basis fits these models as
# it does real usage.
_TOKENIZERS = (
    ("claude", Tokenizer(prose=0.69, code=1.20, cjk=0.96, framing=3)),
    ("gemini", Tokenizer(prose=0.68, code=1.02, cjk=0.62, framing=12)),
    ("gpt", Tokenizer(prose=0.67, code=1.03, cjk=0.78, framing=18)),
    ("deepseek", Tokenizer(prose=0.70, code=1.08, cjk=0.66, framing=21)),
)
_OTHER_TOKENIZER = Tokenizer(prose=0.80, code=1.10, cjk=1.10, framing=14)
# A real tokenizer's count of one text strays from its class factor (digits, punctuation,
# rare words): each piece of content gets its own deviation, drawn once, so the same text
# costs the same in every later prompt.
_PIECE_SPREAD = 0.03


def tokenizer_for(model: str) -> Tokenizer:
    return next((tok for part, tok in _TOKENIZERS if part in model), _OTHER_TOKENIZER)


def text_of(content: Any) -> str:
    """The text of a message or tool-result content (a string or a list of text blocks)."""
    if isinstance(content, str):
        return content
    return "\n".join(block.get("text", "") for block in content or [])


class Meter:
    """The usage an API records for one conversation, derived from what the transcript shows.

    Every piece of content is counted once, when it is written (:meth:`count`: the model's
    class factor times the heuristic, with the piece's own deviation). The prompt of a call is
    the session's ``overhead`` (system prompt and tool definitions: constant, never in the
    transcript) plus every piece before the call; thinking counts only within the current
    turn (the APIs drop earlier turns' thinking), :meth:`new_turn` starts one. The output of a
    call is what it wrote (:meth:`write`, :meth:`call` with the tool-call framing, thinking
    the transcript shows in full) plus a stop token or two; hidden reasoning
    (:meth:`hidden`) is recorded apart by the formats that record it. All draws come from
    the meter's own generator, so usage never shifts the content of the archive.
    """

    def __init__(self, seed: str, model: str, overhead: tuple[int, int]):
        self.rng = Draws(seed)
        self.tokenizer = tokenizer_for(model)
        self.overhead = self.rng.randrange(*overhead)
        self.context = 0            # the pieces so far, earlier turns' thinking left out
        self.thinking = 0           # thinking of the current turn
        self.written = 0            # the output of the call being written

    def count(self, text: str, *, code: bool = False) -> int:
        if not text:
            return 0
        cjk, units = text_counts(text)
        tok = self.tokenizer
        plain = (units - cjk) / 4 * (tok.code if code else tok.prose)
        return max(1, round(plain * self.rng.gauss(1.0, _PIECE_SPREAD) + cjk * 1.5 * tok.cjk))

    def add(self, text: str, *, code: bool = False) -> None:
        """Content the model reads (prompts, tool results, injected context)."""
        self.context += self.count(text, code=code)

    def new_turn(self) -> None:
        self.thinking = 0

    def reset(self) -> None:
        """A compaction: the conversation restarts from its summary (added next)."""
        self.context = self.thinking = 0

    def state(self) -> tuple[int, int]:
        return self.context, self.thinking

    def restore(self, state: tuple[int, int]) -> None:
        self.context, self.thinking = state

    def prompt(self) -> int:
        """The whole prompt of a call made now (cached parts included)."""
        return self.overhead + self.context + self.thinking

    def write(self, text: str) -> None:
        n = self.count(text)
        self.context += n
        self.written += n

    def call(self, input_text: str) -> None:
        n = self.count(input_text, code=True) + self.tokenizer.framing
        self.context += n
        self.written += n

    def think(self, text: str, *, shown: bool) -> int:
        """A thinking row: output when the transcript shows the thinking itself (``shown``),
        else a summary of hidden reasoning (see :meth:`hidden`). Its tokens."""
        n = self.count(text)
        self.thinking += n
        if shown:
            self.written += n
        return n

    def hidden(self, summary_tokens: int) -> int:
        """Hidden reasoning behind a summary of ``summary_tokens`` (0: none)."""
        if not summary_tokens:
            return 0
        return round(summary_tokens * self.rng.uniform(1.5, 5.0)) + self.rng.randrange(20, 200)

    def output(self) -> int:
        """The visible output of the call just written (then the next call starts)."""
        n = self.written + self.rng.choice((1, 1, 2))       # the stop token(s)
        self.written = 0
        return max(1, n)


def prefix_cached(prompt: int, previous: int | None, unit: int) -> int:
    """The part of ``prompt`` an automatic prefix cache serves: the previous prompt of the
    conversation (None: cold), in whole cache blocks of ``unit`` tokens."""
    if not previous:
        return 0
    return min(prompt, previous) // unit * unit
