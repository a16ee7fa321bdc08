"""The strace parser and the durability-order check used by
tests/integration/test_sync_durability.py, on traces written out here (the shape of
`strace -f -yy -qq -s 0` output: threads interleaved, calls split into unfinished /
resumed halves)."""

from __future__ import annotations

import pytest

from tests.storage.strace import durability_problems, parse

GOOD = """\
101 openat(AT_FDCWD</v>, "/v/d/.a.vpipe-tmp-00112233aabbccdd", O_WRONLY|O_CREAT|O_EXCL|O_NOFOLLOW|O_CLOEXEC, 0644) = 7</v/d/.a.vpipe-tmp-00112233aabbccdd>
102 openat(AT_FDCWD</v>, "/v/d/.b.vpipe-tmp-44556677eeff0011", O_WRONLY|O_CREAT|O_EXCL|O_NOFOLLOW|O_CLOEXEC, 0644) = 8</v/d/.b.vpipe-tmp-44556677eeff0011>
101 write(7</v/d/.a.vpipe-tmp-00112233aabbccdd>, ""..., 8388608 <unfinished ...>
102 write(8</v/d/.b.vpipe-tmp-44556677eeff0011>, ""..., 3) = 3
101 <... write resumed>)          = 8388608
101 write(7</v/d/.a.vpipe-tmp-00112233aabbccdd>, ""..., 10) = 10
102 fsync(8</v/d/.b.vpipe-tmp-44556677eeff0011> <unfinished ...>
101 fsync(7</v/d/.a.vpipe-tmp-00112233aabbccdd>) = 0
102 <... fsync resumed>)              = 0
101 close(7</v/d/.a.vpipe-tmp-00112233aabbccdd>) = 0
102 close(8</v/d/.b.vpipe-tmp-44556677eeff0011>) = 0
101 rename("/v/d/.a.vpipe-tmp-00112233aabbccdd", "/v/d/a" <unfinished ...>
102 renameat(AT_FDCWD</v>, "/v/d/.b.vpipe-tmp-44556677eeff0011", AT_FDCWD</v>, "/v/d/b") = 0
101 <... rename resumed>) = 0
101 +++ exited with 0 +++
100 openat(AT_FDCWD</v>, "/v/d", O_RDONLY|O_CLOEXEC|O_DIRECTORY) = 9</v/d>
100 fsync(9</v/d>)                 = 0
100 close(9</v/d>) = 0
"""


def _without(trace: str, needle: str) -> str:
    return "".join(line for line in trace.splitlines(keepends=True) if needle not in line)


def test_parse_joins_unfinished_and_resumed_halves() -> None:
    calls = parse(GOOD.splitlines())
    assert [c.name for c in calls].count("rename") == 1 and [c.name for c in calls].count("renameat") == 1
    rename = next(c for c in calls if c.name == "rename")
    assert rename.rename_paths() == ("/v/d/.a.vpipe-tmp-00112233aabbccdd", "/v/d/a")
    assert rename.result == "0" and rename.start < rename.end
    first_write = next(c for c in calls if c.name == "write" and c.tid == 101)
    assert first_write.result == "8388608" and first_write.fd_path() == "/v/d/.a.vpipe-tmp-00112233aabbccdd"
    opened = next(c for c in calls if c.name == "openat")
    assert opened.result_fd() == (7, "/v/d/.a.vpipe-tmp-00112233aabbccdd")


def test_parse_unescapes_paths_and_keeps_failed_calls_apart() -> None:
    calls = parse([
        '5 rename("/v/x\\"y", "/v/a b") = 0',
        '5 renameat2(3</v/dir>, "rel", AT_FDCWD</>, "/v/abs", RENAME_NOREPLACE) = -1 EEXIST (File exists)',
    ])
    assert calls[0].rename_paths() == ('/v/x"y', "/v/a b") and calls[0].ok
    assert calls[1].rename_paths() == ("/v/dir/rel", "/v/abs") and not calls[1].ok


def test_a_good_trace_passes() -> None:
    assert durability_problems(parse(GOOD.splitlines()), "/v", {"d/a", "d/b"}) == []


@pytest.mark.parametrize(
    "broken, expect",
    [
        (_without(GOOD, "fsync(7<"), "d/a: temporary file /v/d/.a.vpipe-tmp-00112233aabbccdd was never fsynced"),
        (_without(GOOD, "fsync(9<"), "/v/d: no fsync of the directory after the renames into it"),
        (GOOD.replace("100 fsync(9</v/d>)                 = 0\n", "").replace("101 openat(", "100 fsync(9</v/d>) = 0\n101 openat(", 1),
         "/v/d: no fsync of the directory after the renames into it"),
        (GOOD.replace("101 close(7</v/d/.a.vpipe-tmp-00112233aabbccdd>) = 0\n",
                      "101 write(7</v/d/.a.vpipe-tmp-00112233aabbccdd>, \"\"..., 5) = 5\n101 close(7</v/d/.a.vpipe-tmp-00112233aabbccdd>) = 0\n"),
         "d/a: temporary file /v/d/.a.vpipe-tmp-00112233aabbccdd: written after its fsync"),
        (_without(GOOD, '"/v/d/b") = 0'), "d/b: no rename gave it its final name"),
        (GOOD.replace("O_WRONLY|O_CREAT|O_EXCL|O_NOFOLLOW|O_CLOEXEC, 0644) = 7", "O_WRONLY|O_CREAT|O_TRUNC, 0644) = 7"),
         "not created with O_CREAT|O_EXCL"),
    ],
    ids=["file fsync missing", "directory fsync missing", "directory fsync before the renames", "write after fsync",
         "no rename", "not exclusive"],
)
def test_a_broken_order_is_reported(broken: str, expect: str) -> None:
    problems = durability_problems(parse(broken.splitlines()), "/v", {"d/a", "d/b"})
    assert any(expect in p for p in problems), problems


def test_a_read_back_of_the_temporary_file_before_the_rename_is_fine() -> None:
    """--checksum reads the written file back (a read-only open) before renaming it."""
    trace = GOOD.replace(
        "101 close(7</v/d/.a.vpipe-tmp-00112233aabbccdd>) = 0\n",
        "101 close(7</v/d/.a.vpipe-tmp-00112233aabbccdd>) = 0\n"
        '101 openat(AT_FDCWD</v>, "/v/d/.a.vpipe-tmp-00112233aabbccdd", O_RDONLY|O_NOFOLLOW|O_CLOEXEC) = 7</v/d/.a.vpipe-tmp-00112233aabbccdd>\n'
        "101 close(7</v/d/.a.vpipe-tmp-00112233aabbccdd>) = 0\n",
    )
    assert "O_RDONLY" in trace
    assert durability_problems(parse(trace.splitlines()), "/v", {"d/a", "d/b"}) == []


def test_a_rename_that_started_before_the_fsync_returned_is_reported() -> None:
    trace = GOOD.replace(
        "101 fsync(7</v/d/.a.vpipe-tmp-00112233aabbccdd>) = 0\n", "101 fsync(7</v/d/.a.vpipe-tmp-00112233aabbccdd> <unfinished ...>\n"
    ).replace("101 <... rename resumed>) = 0\n", "101 <... rename resumed>) = 0\n101 <... fsync resumed>) = 0\n")
    # (not something one thread can do; the check must still not take it for durable)
    problems = durability_problems(parse(trace.splitlines()), "/v", {"d/a"})
    assert problems
