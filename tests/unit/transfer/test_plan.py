"""Pure planner: filters, names, decisions, shards."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from volcano_pipelines.transfer.plan import (
    Action,
    Entry,
    build_plan,
    check_glob,
    full_unsafe_reason,
    is_temp_name,
    PlanItem,
    parent_dirs,
    plainly_safe,
    same_mtime,
    selected,
    shard_by_bytes,
    shard_file_name,
    temp_name,
    transfer_order,
    unsafe_reason,
)


def E(path: str, size: int = 10, mtime: int = 1_000) -> Entry:
    return Entry(path, size, mtime)


def actions(plan) -> dict[str, str]:  # type: ignore[no-untyped-def]
    return {i.path: i.action.value for i in plan.items}


@pytest.mark.parametrize(
    "path,include,exclude,want",
    [
        ("a/b/c.txt", [], [], True),
        ("a/b/c.txt", ["*.txt"], [], True),  # no '/': matches the base name anywhere
        ("a/b/c.txt", ["*.bin"], [], False),
        ("a/b/c.txt", ["a/*.txt"], [], False),  # '*' does not cross '/'
        ("a/b/c.txt", ["a/**.txt"], [], True),
        ("a/b/c.txt", ["a/**/c.txt"], [], True),
        ("a/c.txt", ["a/**/c.txt"], [], True),  # '**/' matches zero directories
        ("a/b/c.txt", ["a/"], [], True),  # trailing '/' = everything below
        ("a/b/c.txt", [], ["a/b/"], False),
        ("a/b/c.txt", ["**"], ["*.txt"], False),
        ("x/part-0001", ["part-000[0-9]"], [], True),
        ("x/part-000a", ["part-000[!0-9]"], [], True),
        ("x/f?.csv", ["f?.csv"], [], True),
        ("/abs", ["/abs"], [], False),
        ("abs", ["/abs"], [], True),  # a leading '/' anchors at the source root
        ("d/abs", ["/abs"], [], False),
    ],
)
def test_globs(path: str, include: list[str], exclude: list[str], want: bool) -> None:
    assert selected(path, include, exclude) is want


def test_check_glob() -> None:
    assert check_glob("") is not None
    assert check_glob("ok/**/*.txt") is None


@pytest.mark.parametrize(
    "path",
    ["", "/etc/passwd", "../x", "a/../../x", "a/./b", "a//b", "a\\b", "new\nline", "tab\there",
     ".vpipe/shards/x", "d/.f.vpipe-tmp-0123abcd", "x" * 256],
)
def test_unsafe_names(path: str) -> None:
    assert unsafe_reason(path) is not None


@pytest.mark.parametrize("path", ["a", "a/b.c", ".hidden", "dir/.vpipe/ok", "ünï/cödé", "a b/c"])
def test_safe_names(path: str) -> None:
    assert unsafe_reason(path) is None


def test_temp_names_round_trip_and_stay_short() -> None:
    assert is_temp_name(temp_name("data.bin", "0123456789abcdef"))
    assert not is_temp_name("data.bin")
    long = temp_name("é" * 200, "0123456789abcdef")
    assert len(long.encode()) <= 255 and is_temp_name(long)


def test_decisions_by_size_and_mtime() -> None:
    src = [E("new"), E("same"), E("bigger", size=11), E("touched", mtime=2_000)]
    dst = [E("same"), E("bigger"), E("touched"), E("extra")]
    plan = build_plan(src, dst)
    assert actions(plan) == {"new": "copy", "same": "skip", "bigger": "copy", "touched": "copy"}
    assert plan.bytes_to_copy == 10 + 11 + 10


def test_checksum_compares_equal_sizes_only() -> None:
    plan = build_plan([E("a"), E("b", size=5)], [E("a", mtime=5), E("b", size=6)], checksum=True)
    assert actions(plan) == {"a": "compare", "b": "copy"}


def test_delete_is_opt_in_and_respects_filters() -> None:
    src = [E("keep.txt")]
    dst = [E("keep.txt"), E("gone.txt"), E("logs/x.log")]
    assert Action.DELETE not in {i.action for i in build_plan(src, dst).items}
    plan = build_plan(src, dst, delete=True, exclude=["*.log"])
    assert actions(plan) == {"keep.txt": "skip", "gone.txt": "delete"}  # excluded files are protected


def test_file_in_the_way_of_a_directory_is_replaced_even_without_delete() -> None:
    plan = build_plan([E("a/b/c")], [E("a")])
    assert actions(plan) == {"a/b/c": "copy", "a": "delete"}


def test_temps_are_cleaned_and_rejects_reported() -> None:
    plan = build_plan(
        [E("ok"), E("bad\nname")], [], dest_temps=["d/.x.vpipe-tmp-00ff00ff"], rejected=[("link", "symbolic link")]
    )
    assert actions(plan) == {"ok": "copy", "bad\nname": "reject", "link": "reject", "d/.x.vpipe-tmp-00ff00ff": "cleanup"}
    assert [e.path for e in plan.selected] == ["ok"]


def test_same_mtime_tolerates_whole_second_file_systems() -> None:
    assert same_mtime(1_500, 1_500)
    assert same_mtime(1_000, 1_999)
    assert not same_mtime(1_001, 1_002)
    assert not same_mtime(1_000, 2_000)


def test_parent_dirs_parents_first() -> None:
    assert parent_dirs(["a/b/c", "a/d", "e"]) == ["a", "a/b"]


@given(st.lists(st.integers(min_value=0, max_value=10_000), min_size=0, max_size=200), st.integers(1, 16))
def test_shards_cover_everything_once_and_balance(sizes: list[int], n: int) -> None:
    entries = [E(f"f{i:04d}", size=s) for i, s in enumerate(sizes)]
    shards = shard_by_bytes(entries, n)
    assert len(shards) == n
    names = [p for s in shards for p in s.paths]
    assert sorted(names) == sorted(e.path for e in entries)
    loads = [s.bytes for s in shards]
    assert max(loads) - min(loads) <= max(sizes, default=0)
    assert shard_by_bytes(entries, n)[0].paths == shards[0].paths  # deterministic


def test_shard_file_name() -> None:
    assert shard_file_name(3, 10) == "shard-00003-of-00010.txt"


# ---------------------------------------------------------------------------- fast paths

_NAME_CHARS = st.sampled_from(list("ab./\\\x00\x1f\x7f é-_") + ["\udc80", "\u2028", ".vpipe", ".vpipe-tmp-", "0123456789abcdef"])


@given(st.lists(_NAME_CHARS, max_size=30).map("".join))
def test_the_fast_name_check_never_passes_a_name_the_full_checks_refuse(path: str) -> None:
    assert unsafe_reason(path) == (None if plainly_safe(path) else full_unsafe_reason(path))
    if plainly_safe(path):
        assert full_unsafe_reason(path) is None


def test_fast_name_check_sends_dot_components_and_long_names_to_the_full_checks() -> None:
    for path in (".vpipe/x", "a/.hidden", "./a", "a//b", "a/", "/a", "a\\b", "x" * 256, "é" * 128, "a\x7f", ""):
        assert not plainly_safe(path), path
    assert plainly_safe("d000/f000001.bin") and plainly_safe("x/a..b")
    assert unsafe_reason("a/.hidden") is None  # not plain, still safe


def test_skip_needs_equal_size_and_mtime_fast_path_matches_slow_rules() -> None:
    src = [E("a", 10, 5_123), E("b", 10, 5_123), E("c", 10, 5_123), E("d", 10, 5_400)]
    dst = [E("a", 10, 5_123), E("b", 11, 5_123), E("c", 10, 5_124), E("d", 10, 5_000)]
    # d: a destination that keeps whole seconds: a sub-second difference still matches.
    assert actions(build_plan(src, dst)) == {"a": "skip", "b": "copy", "c": "copy", "d": "skip"}
    assert actions(build_plan(src, dst, checksum=True))["a"] == "compare"


# ---------------------------------------------------------------------------- transfer order


def _item(path: str, size: int) -> PlanItem:
    return PlanItem(Action.COPY, path, "new", size, 0)


def test_transfer_order_takes_one_file_per_directory_in_turn() -> None:
    items = [_item(f"d{d}/f{i}", 4096) for d in range(3) for i in range(3)]
    order = [i.path for i in transfer_order(items)]
    assert order == ["d0/f0", "d1/f0", "d2/f0", "d0/f1", "d1/f1", "d2/f1", "d0/f2", "d1/f2", "d2/f2"]


def test_transfer_order_starts_with_big_files_and_keeps_every_item() -> None:
    items = [_item("small/a", 10), _item("big/x", 1 << 30), _item("small/b", 12), _item("mid/y", 1 << 20), _item("top", 5)]
    order = transfer_order(items)
    assert [i.path for i in order[:2]] == ["big/x", "mid/y"]
    assert sorted(order) == sorted(items)


@given(st.lists(st.tuples(st.sampled_from(["", "a", "a/b", "c"]), st.integers(0, 1 << 40)), max_size=40))
def test_transfer_order_is_a_permutation(spec: list[tuple[str, int]]) -> None:
    items = [_item(f"{d}/f{i}" if d else f"f{i}", size) for i, (d, size) in enumerate(spec)]
    order = transfer_order(items)
    assert sorted(order) == sorted(items)
    sizes = [i.size.bit_length() for i in order]
    assert sizes == sorted(sizes, reverse=True)


# ---------------------------------------------------------------------------- gaps found by mutation testing (scripts/mutation)


def test_component_length_limits_are_in_bytes() -> None:
    assert full_unsafe_reason("x" * 255) is None and unsafe_reason("d/" + "é" * 127 + "x") is None  # 255 bytes
    assert unsafe_reason("d/" + "x" * 100) is None  # long in characters, short in bytes
    assert unsafe_reason("d/" + "😀" * 64) is not None  # 64 characters, 256 bytes
    assert unsafe_reason("d/" + "é" * 128) is not None  # 256 bytes


def test_temp_name_keeps_the_name_and_cuts_long_ones_at_200_bytes() -> None:
    assert temp_name("data.bin", "0123456789abcdef") == ".data.bin.vpipe-tmp-0123456789abcdef"
    exact = "x" * 200
    assert temp_name(exact, "00ff00ff") == f".{exact}.vpipe-tmp-00ff00ff"
    assert temp_name(exact + "y", "00ff00ff") == f".{exact}.vpipe-tmp-00ff00ff"
    odd = temp_name("x" + "é" * 150, "00ff00ff")  # the cut at 200 bytes falls inside a character
    assert odd == ".x" + "é" * 99 + ".vpipe-tmp-00ff00ff"


def test_same_mtime_whole_second_on_either_side() -> None:
    assert same_mtime(1_999, 1_000) and same_mtime(1_000, 1_999)
    assert not same_mtime(1_500, 1_001) and not same_mtime(1_001, 1_500)


def test_plan_items_carry_size_mtime_and_reasons() -> None:
    """The executor sets the copy's mtime from the plan item, and a dry run shows the
    reasons: a plan item without them would copy every file again on the next run."""
    plan = build_plan(
        [E("new", 7, 5_000), E("bad\nname", 3, 4_000)],
        [E("gone"), E("a")],
        delete=True,
        dest_temps=["d/.x.vpipe-tmp-00ff00ff"],
        rejected=[("link", "symbolic link (not followed)")],
    )
    items = {i.path: i for i in plan.items}
    assert items["new"] == PlanItem(Action.COPY, "new", "new", 7, 5_000)
    assert items["bad\nname"] == PlanItem(Action.REJECT, "bad\nname", "control character in name", 3, 4_000)
    assert items["link"].reason == "symbolic link (not followed)"
    assert items["gone"].reason == "not in source" and items["a"].reason == "not in source"
    assert items["d/.x.vpipe-tmp-00ff00ff"].reason == "temporary file of an interrupted run"


def test_filters_select_source_files_and_rejected_entries() -> None:
    src = [E("a.txt"), E("b.log"), E("c.txt"), E("d/e.log")]
    plan = build_plan(src, [], exclude=["*.log"], rejected=[("l.log", "symbolic link"), ("l.txt", "symbolic link")])
    assert actions(plan) == {"a.txt": "copy", "c.txt": "copy", "l.txt": "reject"}
    plan = build_plan(src, [], include=["*.log"], rejected=[("l.log", "symbolic link"), ("l.txt", "symbolic link")])
    assert actions(plan) == {"b.log": "copy", "d/e.log": "copy", "l.log": "reject"}


def test_a_rejected_entry_that_is_also_listed_does_not_stop_the_plan() -> None:
    plan = build_plan([E("a"), E("b"), E("c")], [], rejected=[("a", "symbolic link")])
    assert actions(plan) == {"a": "reject", "b": "copy", "c": "copy"}


def test_delete_with_include_protects_what_the_include_does_not_select() -> None:
    plan = build_plan([E("x.txt")], [E("x.txt"), E("old.txt"), E("notes.md")], include=["*.txt"], delete=True)
    assert actions(plan) == {"x.txt": "skip", "old.txt": "delete"}


def test_a_nested_file_in_the_way_of_a_source_directory_is_replaced() -> None:
    plan = build_plan([E("a/b/c")], [E("a/b"), E("a/x")])
    assert actions(plan) == {"a/b/c": "copy", "a/b": "delete"}


def test_transfer_order_groups_by_full_directory_and_top_level_files_together() -> None:
    items = [_item("f0", 100), _item("f1", 100), _item("a/b/x", 100), _item("a/c/y", 100), _item("a/b/z", 100)]
    order = [i.path for i in transfer_order(items)]
    # turn 0: one file from each of "", "a/b", "a/c" (by directory name); turn 1: the rest
    assert order == ["f0", "a/b/x", "a/c/y", "f1", "a/b/z"]


def test_transfer_order_bigger_first_within_a_size_class() -> None:
    order = [i.path for i in transfer_order([_item("d/a", 5), _item("d/b", 7), _item("e/c", 6)])]
    assert order == ["d/b", "e/c", "d/a"]


def test_shards_are_assigned_largest_first_and_count_their_bytes() -> None:
    shards = shard_by_bytes([E("a", 1), E("b", 1), E("c", 1), E("d", 3)], 2)
    assert [(s.paths, s.bytes) for s in shards] == [(["d"], 3), (["a", "b", "c"], 3)]
    many = shard_by_bytes([E(f"f{i}", i) for i in range(1, 20)], 3)
    assert sum(s.bytes for s in many) == sum(range(1, 20))
    assert [s.bytes for s in many] == [sum(int(p[1:]) for p in s.paths) for s in many]


def test_names_with_spaces_do_not_look_like_directories_in_the_way() -> None:
    # "a b/c d" needs the directory "a b"; the file "a b/c" is not in its way.
    plan = build_plan([E("a b/c d")], [E("a b/c")])
    assert actions(plan) == {"a b/c d": "copy"}
