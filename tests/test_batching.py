"""contiguous_runs: the one way ingest chunks and plan batches are cut."""

from pipeline.core.batching import contiguous_runs


def test_a_run_closes_before_an_item_would_take_it_over_the_limit():
    assert contiguous_runs([3, 3, 3, 9, 1], lambda n: n, 6) == [[3, 3], [3], [9], [1]]


def test_a_guided_limit_sees_the_bytes_not_yet_in_a_closed_run():
    seen = []

    def limit(remaining):
        seen.append(remaining)
        return max(2, remaining // 4)

    assert contiguous_runs([8, 4, 4, 2, 2], lambda n: n, limit) == [[8], [4], [4], [2], [2]]
    assert seen == [20, 20, 12, 8, 4]
