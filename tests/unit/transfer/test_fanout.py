"""A sync over several pods (`--workers N`), coordinator and copy pods, on local directories:
the coordinator (transfer/fanout.py) plans and partitions, the copy pods' program
(transfer/part.py) runs in threads, one per partition, in place of the Volcano Job the step
starts (that launcher is tested on a real node: tests/node/test_sync_workers.py)."""

from __future__ import annotations

import dataclasses
import os
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.helpers.trees import write_tree
from tests.storage.trees import read_tree, temp_files
from volcano_pipelines.transfer import engine, partition
from volcano_pipelines.transfer.executor import Options
from volcano_pipelines.transfer.part import run_part
from volcano_pipelines.transfer.plan import RESERVED_DIR, Action, PlanItem, parse_max_delete, temp_name
from volcano_pipelines.transfer.progress import Progress
from volcano_pipelines.transfer.result import SyncFailed
from volcano_pipelines.transfer.sources import Auth
from volcano_pipelines.transfer.urls import parse_source

RUN = "run-1"


def tree(files: int = 12) -> dict[str, bytes]:
    return {f"d{i % 3}/f{i:02d}.bin": os.urandom(1000 * (i + 1)) for i in range(files)}


def threads(root: str, fail: Callable[[int], bool] = lambda k: False) -> Callable[[partition.RunRecord], str | None]:
    """A launcher running every partition in a thread of its own, as the job's pods would."""
    def launch(record: partition.RunRecord) -> str | None:
        errors: list[str] = []

        def one(k: int) -> None:
            if fail(k):
                errors.append(f"pod {k} failed")
                return
            run_part(root, record.run_id, k, pod=f"copy-{k}", every=0.05)

        workers = [threading.Thread(target=one, args=(k,)) for k in range(record.parts)]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        return "; ".join(errors) or None
    return launch


def request(src: Path, dst: Path, workers: int = 3, launcher: object = None, **extra: object) -> engine.SyncRequest:
    return engine.SyncRequest(src=str(src), location=parse_source(str(src)), root=str(dst),
                              options=Options(transfers=4), workers=workers, run_id=RUN, job_name="sync-x",
                              launcher=launcher or threads(str(dst)), **extra)  # type: ignore[arg-type]


def test_three_pods_copy_everything_once_and_the_run_directory_goes(tmp_path: Path) -> None:
    src, dst = tmp_path / "src", tmp_path / "dst"
    write_tree(src, tree())
    seen: list[partition.RunRecord] = []
    inner = threads(str(dst))

    def launch(record: partition.RunRecord) -> str | None:
        seen.append(record)
        parts = [partition.load_part(str(dst), RUN, k) for k in range(record.parts)]
        paths = [i.path for part in parts for i in part]
        assert sorted(paths) == sorted(tree_paths(src)) and len(set(paths)) == len(paths)
        return inner(record)

    result = engine.run(request(src, dst, launcher=launch, shards=2,
                                auth=Auth("etl", "etl@R", "/k/etl.keytab")), Progress())
    assert read_tree(dst) == read_tree(src)
    assert result.copied == 12 and result.failed == 0 and result.bytes_copied == sum(len(b) for b in read_tree(src).values())
    assert [w["pod"] for w in result.workers] == ["copy-0", "copy-1", "copy-2"]
    assert sum(w["copied"] for w in result.workers) == 12 and all(w["finished"] for w in result.workers)
    assert seen[0].parts == 3 and seen[0].job == "sync-x"
    # What the pods need to reach the source travels in run.json (the paths are theirs too).
    assert (seen[0].user, seen[0].kerberos_principal, seen[0].kerberos_keytab) == ("etl", "etl@R", "/k/etl.keytab")
    assert not os.path.exists(partition.run_dir(str(dst), RUN)) and temp_files(dst) == []
    manifests = [(dst / p).read_text().split() for p in result.shard_manifests]
    assert sorted(sum(manifests, [])) == sorted(tree_paths(src))


def tree_paths(root: Path) -> list[str]:
    return [str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()]


def test_a_failed_pod_keeps_the_run_and_the_rerun_resumes_without_planning_again(tmp_path: Path) -> None:
    src, dst = tmp_path / "src", tmp_path / "dst"
    write_tree(src, tree())
    with pytest.raises(SyncFailed, match="did not finish: pod 1 failed.*resumes it") as info:
        engine.run(request(src, dst, launcher=threads(str(dst), fail=lambda k: k == 1)), Progress())
    first = info.value.result
    assert first.workers[1] == {"part": 1, "pod": None, "finished": False}
    assert os.path.exists(os.path.join(partition.run_dir(str(dst), RUN), "run.json"))
    copied_first = {p: os.stat(dst / p).st_ino for p in read_tree(dst)}
    assert first.copied == len(copied_first) > 0
    # A file of the source added meanwhile is not copied: the run resumes the plan it made.
    (src / "late.bin").write_bytes(b"late")
    again = engine.run(request(src, dst), Progress())
    # The run copied every file once: the first attempt's files were found in place, not copied again.
    assert again.copied == 12 and again.skipped == 0
    assert sum(w["copied_before"] for w in again.workers) == len(copied_first)
    assert {p: os.stat(dst / p).st_ino for p in copied_first} == copied_first
    assert not (dst / "late.bin").exists()
    assert not os.path.exists(partition.run_dir(str(dst), RUN))
    assert read_tree(dst) == {k: v for k, v in read_tree(src).items() if k != "late.bin"}


def test_a_killed_pods_temporary_file_is_removed_and_its_file_copied_on_the_retry(tmp_path: Path) -> None:
    src, dst = tmp_path / "src", tmp_path / "dst"
    write_tree(src, tree(4))
    attempts: list[int] = []

    def launch(record: partition.RunRecord) -> str | None:
        # The first attempt of partition 0 "dies" mid-file: a temporary file, no result.
        item = partition.load_part(str(dst), RUN, 0)[0]
        (dst / os.path.dirname(item.path) / temp_name(os.path.basename(item.path), "00112233aabbccdd")).write_bytes(b"x")
        attempts.append(1)
        for k in range(record.parts):
            run_part(str(dst), RUN, k, pod=f"copy-{k}", every=0.05)  # Volcano's restart: every pod again
        return None

    result = engine.run(request(src, dst, workers=2, launcher=launch), Progress())
    assert result.copied == 4 and result.cleaned == 1 and temp_files(dst) == [] and read_tree(dst) == read_tree(src)


def test_deletions_wait_for_the_copy_and_follow_the_plan(tmp_path: Path) -> None:
    src, dst = tmp_path / "src", tmp_path / "dst"
    write_tree(src, tree(6))
    write_tree(dst, {"old/gone.txt": b"old", "keep-me.txt": b"k"})
    order: list[str] = []

    def launch(record: partition.RunRecord) -> str | None:
        order.append("copy")
        assert (dst / "old/gone.txt").exists()  # not deleted before the pods are done
        assert record.deletes == [["keep-me.txt", "not in source"], ["old/gone.txt", "not in source"]]
        return threads(str(dst))(record)

    result = engine.run(request(src, dst, launcher=launch, delete=True, limit=parse_max_delete("100%")), Progress())
    assert order == ["copy"] and result.deleted == 2 and read_tree(dst) == read_tree(src)


def test_the_delete_bound_is_checked_for_the_whole_run_before_any_pod(tmp_path: Path) -> None:
    src, dst = tmp_path / "src", tmp_path / "dst"
    write_tree(src, {"a": b"a"})
    write_tree(dst, {f"x{i}": b"x" for i in range(5)})

    def launch(record: partition.RunRecord) -> str | None:
        raise AssertionError("no pod may start")

    with pytest.raises(engine.DeletionRefused):
        engine.run(request(src, dst, launcher=launch, delete=True), Progress())
    assert not os.path.exists(os.path.join(dst, RESERVED_DIR, "runs"))


def test_nothing_to_copy_starts_no_pod(tmp_path: Path) -> None:
    src, dst = tmp_path / "src", tmp_path / "dst"
    write_tree(src, tree(3))
    engine.run(request(src, dst), Progress())

    def launch(record: partition.RunRecord) -> str | None:
        raise AssertionError("no pod may start")

    again = engine.run(request(src, dst, launcher=launch), Progress())
    assert again.skipped == 3 and again.copied == 0 and again.workers == []


def test_the_coordinators_progress_sums_the_pods(tmp_path: Path) -> None:
    src, dst = tmp_path / "src", tmp_path / "dst"
    write_tree(src, tree(6))
    progress = Progress()
    engine.run(request(src, dst), progress)
    assert progress.files_total == 6 and progress.files_done == 6
    assert progress.bytes_done == progress.bytes_total == sum(len(b) for b in read_tree(src).values())


def test_split_balances_bytes_and_places_each_file_once() -> None:
    work = [PlanItem(Action.COPY, f"f{i}", "new", size) for i, size in enumerate([100, 90, 50, 40, 30, 5, 5])]
    parts = partition.split(work, 3)
    assert sorted(i.path for p in parts for i in p) == sorted(i.path for i in work)
    sizes = [b for _, b in partition.part_sizes(parts)]
    assert max(sizes) - min(sizes) <= 100 and sum(sizes) == 320
    assert len(partition.split(work[:2], 5)) == 2  # never more partitions than files


def test_a_pod_skips_only_files_complete_in_place(tmp_path: Path) -> None:
    from volcano_pipelines.transfer.part import in_place

    (tmp_path / "a").write_bytes(b"12345")
    os.utime(tmp_path / "a", ns=(7_000_000_000, 7_000_000_000))
    same = PlanItem(Action.COPY, "a", "new", 5, 7000)
    assert in_place(str(tmp_path), same).action is Action.SKIP
    assert in_place(str(tmp_path), same._replace(size=6)).action is Action.COPY
    assert in_place(str(tmp_path), same._replace(mtime_ms=9000)).action is Action.COPY
    assert in_place(str(tmp_path), same._replace(path="missing")).action is Action.COPY
    assert in_place(str(tmp_path), same._replace(action=Action.COMPARE)).action is Action.COMPARE


def test_run_ids_that_cannot_name_a_directory_are_refused() -> None:
    assert partition.check_run_id("0f9c2c1e-8a7b-4c1d-9e2f-1a2b3c4d5e6f") is None
    for bad in ("", "..", ".hidden", "a/b", "x" * 129, "sp ace"):
        assert partition.check_run_id(bad) is not None


def test_a_step_stopped_while_its_pods_run_cleans_nothing_and_keeps_the_run(tmp_path: Path) -> None:
    from volcano_pipelines.errors import ClusterError

    src, dst = tmp_path / "src", tmp_path / "dst"
    write_tree(src, tree(3))

    def launch(record: partition.RunRecord) -> str | None:
        # A pod still writing when this step's own pod is deleted (the job is kept).
        (dst / "d0" / temp_name("f00.bin", "00112233aabbccdd")).write_bytes(b"in flight")
        raise ClusterError("this step's pod was deleted; job kept")

    with pytest.raises(SyncFailed, match="pod was deleted.*resumes it") as info:
        engine.run(request(src, dst, launcher=launch), Progress())
    assert info.value.exit_code == ClusterError.exit_code
    assert len(temp_files(dst)) == 1  # not removed from under a pod that may still write it
    assert os.path.exists(os.path.join(partition.run_dir(str(dst), RUN), "run.json"))


def test_a_source_file_changed_after_the_plan_is_caught_by_its_pod_and_copied_as_it_is_then(tmp_path: Path) -> None:
    src, dst = tmp_path / "src", tmp_path / "dst"
    write_tree(src, tree(6))
    changed = "d1/f04.bin"

    def launch(record: partition.RunRecord) -> str | None:
        # Between the plan (size and mtime recorded in the partition) and the pod's copy.
        (src / changed).write_bytes(b"rewritten after the plan")
        os.utime(src / changed, ns=(9_000_000_000_000_000, 9_000_000_000_000_000))
        return threads(str(dst))(record)

    result = engine.run(request(src, dst, launcher=launch), Progress())
    assert (dst / changed).read_bytes() == b"rewritten after the plan"
    assert result.retried == 1 and result.failed == 0 and read_tree(dst) == read_tree(src)
    assert os.stat(dst / changed).st_mtime_ns == 9_000_000_000_000_000  # the mtime of what was copied


def test_a_file_a_pod_failed_is_named_with_its_pod_and_left_out_of_the_shard_manifests(tmp_path: Path) -> None:
    """As one process does: a file that failed is not in the destination, so no manifest lists it."""
    src, dst = tmp_path / "src", tmp_path / "dst"
    write_tree(src, tree())
    inner = threads(str(dst))
    broken: list[str] = []

    def launch(record: partition.RunRecord) -> str | None:
        # After the plan, one planned file becomes unreadable as a file (a directory in its place).
        item = partition.load_part(str(dst), RUN, 1)[0]
        (src / item.path).unlink()
        (src / item.path).mkdir()
        broken.append(item.path)
        return inner(record)

    with pytest.raises(SyncFailed, match="1 file") as info:
        engine.run(request(src, dst, launcher=launch, shards=2), Progress())
    result = info.value.result
    [path] = broken
    assert result.failed == 1 and result.copied == 11, result
    [failure] = result.failures
    assert (failure["path"], failure["pod"]) == (path, "copy-1"), failure
    listed = [line for p in result.shard_manifests for line in (dst / p).read_text().split()]
    assert sorted(listed) == sorted(p for p in tree_paths(dst) if not p.startswith(RESERVED_DIR)), listed
    assert path not in listed and len(listed) == 11


def test_a_file_in_the_way_of_a_source_directory_is_removed_once_before_the_pods(tmp_path: Path) -> None:
    """The coordinator removes it (the pods then copy into the directory in its place); it is
    not among the --delete deletions carried out after the copy."""
    src, dst = tmp_path / "src", tmp_path / "dst"
    write_tree(src, tree())
    write_tree(dst, {"d1": b"a file where the source has a directory"})
    seen: list[partition.RunRecord] = []
    inner = threads(str(dst))

    def launch(record: partition.RunRecord) -> str | None:
        seen.append(record)
        assert (dst / "d1").is_dir()  # already made room for before any pod runs
        return inner(record)

    result = engine.run(request(src, dst, launcher=launch), Progress())
    assert seen[0].deletes == [] and result.deleted == 1 and result.failed == 0, result
    assert read_tree(dst) == read_tree(src)


def test_a_run_id_of_another_unfinished_run_is_refused_and_nothing_is_touched(tmp_path: Path) -> None:
    from volcano_pipelines.errors import InputError

    src, other, dst = tmp_path / "src", tmp_path / "other", tmp_path / "dst"
    write_tree(src, tree(3))
    write_tree(other, {"o.bin": b"other"})
    with pytest.raises(SyncFailed):
        engine.run(request(src, dst, launcher=threads(str(dst), fail=lambda k: True)), Progress())
    before = {p: os.stat(dst / p).st_mtime_ns for p in tree_paths(dst)}
    launched: list[str] = []
    with pytest.raises(InputError, match=f"invalid run_id='{RUN}': a run id of its own.*from {src}") as info:
        engine.run(request(other, dst, launcher=lambda record: launched.append(record.run_id)), Progress())
    assert info.value.exit_code == 2 and launched == []
    assert {p: os.stat(dst / p).st_mtime_ns for p in tree_paths(dst)} == before  # the run is kept as it was
    # Its own source resumes it.
    assert engine.run(request(src, dst), Progress()).copied == 3


def test_with_checksum_same_size_files_are_compared_by_the_pods_and_the_different_ones_copied(tmp_path: Path) -> None:
    """--workers N --checksum: a destination file of the listed size (same mtime or not) needs its
    content compared (COMPARE), and only a pod can do it. Each is in exactly one partition; the
    pods copy the ones that differ and leave the same ones (skipped). Had they been left out of
    every partition, the stale contents would stay and the run would still report success."""
    src, dst = tmp_path / "src", tmp_path / "dst"
    files = tree(12)
    write_tree(src, files)
    stale = sorted(files)[:4]  # same size, other bytes; two of them with the source's mtime too
    same = sorted(files)[4:8]  # same bytes
    write_tree(dst, {p: bytes(b ^ 0xFF for b in files[p]) for p in stale} | {p: files[p] for p in same})
    for p in stale[:2] + same:
        st = os.stat(src / p)
        os.utime(dst / p, ns=(st.st_atime_ns, st.st_mtime_ns))
    inner = threads(str(dst))
    compared: list[str] = []

    def launch(record: partition.RunRecord) -> str | None:
        parts = [partition.load_part(str(dst), RUN, k) for k in range(record.parts)]
        compared.extend(i.path for part in parts for i in part if i.action is Action.COMPARE)
        return inner(record)

    checked = dataclasses.replace(request(src, dst, launcher=launch), options=Options(transfers=4, checksum=True))
    result = engine.run(checked, Progress())
    assert sorted(compared) == sorted(stale + same)  # each once, in some partition
    assert read_tree(dst) == read_tree(src)
    assert (result.copied, result.skipped, result.failed) == (8, 4, 0)  # 4 new + 4 stale; the 4 same ones skipped
