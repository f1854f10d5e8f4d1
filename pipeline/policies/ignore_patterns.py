"""``ignore_patterns``: a session filter, not a planning policy.

Case-insensitive regexes (Python ``re``, searched anywhere) matched against a session's first
real user message: the first ``is_prompt`` row outside sidechains (not meta, not a tool
result, not a slash-command wrapper). A matching session stays in the lake but is skipped by
planning (and summaries); the skip is counted. An invalid regex is a config error naming it.
"""

from __future__ import annotations

import re
from typing import Iterable

from pipeline.policies.base import ParamError

NAME = "ignore_patterns"


def compile_patterns(patterns: Iterable[str], *, key: str = "ignore_patterns") -> list[re.Pattern]:
    compiled = []
    for index, pattern in enumerate(patterns):
        if not isinstance(pattern, str):
            raise ParamError(f"{key}[{index}]", f"must be a string, got {type(pattern).__name__}")
        try:
            compiled.append(re.compile(pattern, re.IGNORECASE))
        except re.error as error:
            raise ParamError(f"{key}[{index}]", f"invalid regex {pattern!r}: {error}") from None
    return compiled


def matching_pattern(first_user_text: str | None, compiled: list[re.Pattern]) -> str | None:
    """The first pattern that matches the session's first real user message, else None."""
    if not first_user_text or not compiled:
        return None
    for pattern in compiled:
        if pattern.search(first_user_text):
            return pattern.pattern
    return None
