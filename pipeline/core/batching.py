"""Cutting an ordered sequence into contiguous runs of bounded size (ingest chunks, plan batches)."""

from __future__ import annotations

from typing import Callable, Iterable, TypeVar

T = TypeVar("T")


def contiguous_runs(items: Iterable[T], size: Callable[[T], int],
                    limit: int | Callable[[int], int]) -> list[list[T]]:
    """Contiguous runs of ``items``, each closed before an item would take it over its limit
    (an item bigger than the limit stands alone), so memory per run stays bounded.

    ``limit`` is a number, or a function of the bytes not yet in a closed run (guided sizes:
    runs shrink towards the end so parallel workers finish together)."""
    ordered = list(items)
    remaining = sum(size(item) for item in ordered) if callable(limit) else 0
    runs: list[list[T]] = []
    current: list[T] = []
    used = 0
    for item in ordered:
        cap = limit(remaining) if callable(limit) else limit
        n = size(item)
        if current and used + n > cap:
            runs.append(current)
            remaining -= used
            current, used = [], 0
        current.append(item)
        used += n
    if current:
        runs.append(current)
    return runs
