"""`--max-delete` at its edges: 0 and 0% mean "delete nothing" (not "no limit"), and a
limit is a bound on this plan's deletions, checked exactly at the boundary."""

from __future__ import annotations

import pytest

from volcano_pipelines.transfer.plan import DeleteLimit, Entry, build_plan, check_deletions, parse_max_delete


def _plan(keep: int, dest: int):
    """A --delete plan that keeps `keep` of `dest` destination files (deletes the rest)."""
    return build_plan([Entry(f"f{i}", 10, 1_000) for i in range(keep)],
                      [Entry(f"f{i}", 10, 1_000) for i in range(dest)], delete=True)


@pytest.mark.parametrize("text", ["0%", "0", "0.0%"])
def test_zero_allows_no_deletion_at_all(text: str) -> None:
    limit = parse_max_delete(text)
    assert limit is not None
    refusal = check_deletions(_plan(keep=9, dest=10), 10, limit)  # one file of ten
    assert refusal is not None and (refusal.deletes, refusal.dest_files, refusal.empty_source) == (1, 10, False)
    # One file of 200 (0.5 %, under any rounding to a whole percent) is still one too many.
    few = check_deletions(_plan(keep=199, dest=200), 200, limit)
    assert few is not None and (few.deletes, few.dest_files) == (1, 200)
    # Nothing to delete: nothing to refuse, whatever the limit.
    assert check_deletions(_plan(keep=10, dest=10), 10, limit) is None


def test_an_empty_source_is_refused_under_any_limit_saying_what_would_go() -> None:
    refusal = check_deletions(_plan(keep=0, dest=3), 3, DeleteLimit(percent=100.0))
    assert refusal is not None and (refusal.deletes, refusal.dest_files, refusal.empty_source) == (3, 3, True)


@pytest.mark.parametrize(("limit", "deletes", "refused"), [
    (DeleteLimit(percent=10.0), 1, False),  # exactly 10 % of 10
    (DeleteLimit(percent=10.0), 2, True),
    (DeleteLimit(percent=9.9), 1, True),
    (DeleteLimit(percent=100.0), 9, False),
    (DeleteLimit(count=1), 1, False),
    (DeleteLimit(count=1), 2, True),
])
def test_limits_at_their_boundary(limit: DeleteLimit, deletes: int, refused: bool) -> None:
    refusal = check_deletions(_plan(keep=10 - deletes, dest=10), 10, limit)
    assert (refusal is not None) is refused
    if refusal is not None:
        assert refusal.deletes == deletes and not refusal.empty_source
