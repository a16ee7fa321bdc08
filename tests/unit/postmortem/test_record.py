"""The post-mortem record (issue 30), pure: API-shaped dicts in, record and Markdown out,
compared with golden files; bounded in size with what was dropped said; no environment copied."""

from __future__ import annotations

import json
from typing import Any

from tests.golden_files import GOLDEN_DIR, check_golden
from tests.helpers.postmortem import JOB, SECRET, pod
from volcano_pipelines.postmortem.markdown import markdown
from volcano_pipelines.postmortem.record import Limits, build_record, log_pods, record_size
from volcano_pipelines.volcano.status import STOPPED_BY_JOB, pod_end


PODS = [pod("worker", 1, phase="Failed", exit_code=1), pod("ps", 0, phase="Failed", exit_code=137, deleting=True),
        pod("worker", 0, phase="Failed", exit_code=143, deleting=True)]
EVENTS = [
    {"involvedObject": {"kind": "Job", "name": "mnist"}, "type": "Normal", "reason": "ExecuteAction",
     "message": "Start to execute action TerminateJob", "count": 1, "lastTimestamp": "2026-01-01T00:01:50Z"},
    {"involvedObject": {"kind": "Pod", "name": "mnist-worker-1"}, "type": "Normal", "reason": "Started",
     "message": "Started container tensorflow", "count": 1, "lastTimestamp": "2026-01-01T00:00:20Z"},
]
LOGS = {"mnist-worker-1": {"tensorflow": "step 100 loss 0.3\nTraceback (most recent call last):\nValueError: bad shard\n"},
        "mnist-ps-0": {"tensorflow": "Started server\n"}}


def record(**kwargs: Any) -> dict[str, Any]:
    return build_record(JOB, PODS, EVENTS, LOGS, collected_at="2026-01-01T00:02:01Z", **kwargs)


def test_a_failed_worker_record_matches_its_golden_files() -> None:
    rec = record()
    check_golden(GOLDEN_DIR / "post-mortem" / "failed-worker.json", json.dumps(rec, indent=1, sort_keys=True) + "\n")
    check_golden(GOLDEN_DIR / "post-mortem" / "failed-worker.md", markdown(rec))


def test_the_record_names_the_failed_pod_and_lists_every_other_pod() -> None:
    rec = record()
    by_name = {p["name"]: p for p in rec["pods"]}
    assert list(by_name) == ["mnist-ps-0", "mnist-worker-0", "mnist-worker-1"]  # job's task order, then index
    failed = by_name["mnist-worker-1"]
    assert failed["failed"] and failed["outcome"] == "exit code 1" and failed["end"]["exit_code"] == 1
    assert failed["containers"][0]["log"][-1] == "ValueError: bad shard"
    # TerminateJob stopped the rest: named as such, not as failures.
    assert {by_name[n]["outcome"] for n in ("mnist-ps-0", "mnist-worker-0")} == {"stopped by the job"}
    assert [c["type"] for c in failed["conditions"]] == ["PodScheduled", "Ready"]
    assert SECRET not in json.dumps(rec) and '"env"' not in json.dumps(rec)
    assert "### mnist-worker-1 (worker): exit code 1" in markdown(rec)


def test_a_200_pod_record_stays_within_its_bound_and_says_what_it_dropped() -> None:
    big_log = "\n".join(f"step {i} " + "x" * 300 for i in range(200))
    pods = [pod("worker", i, phase="Running") for i in range(199)] + [pod("worker", 199, phase="Failed", exit_code=2)]
    logs = {p["metadata"]["name"]: {"tensorflow": big_log} for p in pods}
    limits = Limits(max_bytes=128 * 1024, log_lines=100, pods_per_task=5)
    rec = build_record(JOB, pods, EVENTS * 300, logs, collected_at="2026-01-01T00:02:01Z", limits=limits)
    assert record_size(rec) <= limits.max_bytes and rec["bytes"] == record_size(rec)
    assert len(rec["pods"]) == 200  # every pod listed, most without detail
    detailed = [p for p in rec["pods"] if p["detail"]]
    # The failed pod kept in detail first, then the first of the task; its log lines kept longest.
    assert [p["name"] for p in detailed] == ["mnist-worker-0", "mnist-worker-1", "mnist-worker-2", "mnist-worker-3",
                                             "mnist-worker-199"]
    assert detailed[-1]["containers"][0]["log"] and not detailed[0]["containers"][0]["log"]
    assert rec["dropped"]["log_lines"] > 0 and rec["dropped"]["pods_detail"] == 195
    assert any("log line(s) dropped" in n for n in rec["notes"]) and any("without detail" in n for n in rec["notes"])
    text = markdown(rec)
    # Past 50 pods the Markdown groups them (no row per pod) and names the failed one.
    assert "200 pods by task and what happened" in text and "| mnist-worker-" not in text.split("Failed pods (1):")[0]
    assert "| worker | Running | running | 199 | 0-198 |" in text
    assert "| mnist-worker-199 | worker |" in text.split("Failed pods (1):")[1]


def test_the_markdown_of_an_11000_pod_job_fits_a_screen_and_keeps_the_warning() -> None:
    """The seed's size (issue 41): groups by task and what happened, the failed pods named (the
    first 50), the logs of five of them, and the events grouped by reason with the warnings
    first (the newest 20 of 11,000 `Created` events would hide the one warning)."""
    failing = {17, 18, 19, 4000, 9999}
    pods = ([pod("ps", i, phase="Running") for i in range(1000)]
            + [pod("worker", i, phase="Failed" if i in failing else "Succeeded", exit_code=1 if i in failing else 0)
               for i in range(10_000)])
    logs = {p["metadata"]["name"]: {"tensorflow": "step 1\nValueError: bad shard"} for p in pods
            if p["status"]["phase"] == "Failed"}
    created = [{**EVENTS[0], "type": "Normal", "reason": "Created", "message": f"Created pod {i}",
                "involvedObject": {"kind": "Pod", "name": f"mnist-worker-{i}"}} for i in range(400)]
    warning = {**EVENTS[0], "type": "Warning", "reason": "FailedDeletePod", "message": "etcdserver: mvcc: database space exceeded",
               "involvedObject": {"kind": "Job", "name": "mnist"}}
    rec = build_record(JOB, pods, [warning, *created], logs, collected_at="2026-01-01T00:02:01Z",
                       limits=Limits(max_bytes=32 * 1024 * 1024))
    text = markdown(rec)
    assert len(text.splitlines()) < 120, text
    assert "11,000 pods by task and what happened" in text
    assert "| worker | Succeeded | succeeded | 9,995 | 0-16,20-3999,4001-9998 |" in text
    assert "| worker | Failed | exit code 1 | 5 | 17-19,4000,9999 |" in text
    assert "| ps | Running |" in text and "| 1,000 | 0-999 |" in text
    assert text.count("### mnist-worker-") == 5 and "Failed pods (5):" in text
    events = text.split("## Events (401, by reason)")[1]
    assert events.index("FailedDeletePod") < events.index("Created") and "| 400 |" in events


def test_a_small_job_keeps_a_row_per_pod_and_its_newest_events() -> None:
    text = markdown(build_record(JOB, PODS, EVENTS * 30, {}, collected_at="t"))
    assert "| mnist-worker-1 | worker |" in text and "by task and what happened" not in text
    assert "## Events (newest last)" in text and text.split("## Events (newest last)")[1].count("\n|") == 2 + 20


def test_long_lines_and_messages_are_cut() -> None:
    logs = {"mnist-worker-1": {"tensorflow": "y" * 5000}}
    rec = build_record(JOB, PODS[:1], [], logs, collected_at="t", limits=Limits(line_chars=100))
    [line] = rec["pods"][0]["containers"][0]["log"]
    assert line.startswith("y" * 100) and line.endswith("[4900 more characters]")


def test_log_pods_are_the_failed_ones_then_the_first_of_each_task() -> None:
    pods = [pod("worker", i, phase="Running") for i in range(10)] + [pod("worker", 10, phase="Failed", exit_code=1)]
    chosen = [p["metadata"]["name"] for p in log_pods(JOB, pods, Limits(pods_per_task=2))]
    assert chosen == ["mnist-worker-10", "mnist-worker-0", "mnist-worker-1"]


def killed(task: str, index: int, *, exit_code: int, finished: str, created: str, deleted_at: str | None,
           grace: int = 30) -> dict[str, Any]:
    """A pod as the API shows it once the job's restart deleted it: deletionTimestamp is the
    request's time plus the grace period."""
    p = pod(task, index, phase="Failed", exit_code=exit_code)
    p["metadata"].update({"uid": f"uid-{task}-{index}-{created}", "creationTimestamp": created})
    p["status"]["containerStatuses"][0]["state"]["terminated"]["finishedAt"] = finished
    if deleted_at is not None:
        p["metadata"].update({"deletionTimestamp": deleted_at, "deletionGracePeriodSeconds": grace})
    return p


def test_a_killed_pod_deleted_by_the_restart_it_caused_is_named_as_the_failure_with_its_run() -> None:
    """kill -9 of the chief (exit 137 in the second the restart asked for the deletions, then
    deleted with the rest): its own end, not 'stopped by the job'; the parameter server the
    restart stopped (SIGTERM, 143) is. Two runs of the same names: a run column."""
    job = {**JOB, "spec": {**JOB["spec"], "tasks": [{"name": "chief", "replicas": 1}, {"name": "ps", "replicas": 1}]},
           "status": {**JOB["status"], "state": {"phase": "Failed"}, "retryCount": 2}}
    job["spec"]["maxRetry"] = 2
    pods = [killed("chief", 0, exit_code=137, finished="2026-01-01T00:01:00Z", created="2026-01-01T00:00:10Z",
                   deleted_at="2026-01-01T00:01:30Z"),
            killed("ps", 0, exit_code=143, finished="2026-01-01T00:01:01Z", created="2026-01-01T00:00:10Z",
                   deleted_at="2026-01-01T00:01:30Z"),
            killed("chief", 0, exit_code=137, finished="2026-01-01T00:02:00Z", created="2026-01-01T00:01:20Z",
                   deleted_at="2026-01-01T00:02:31Z"),
            killed("ps", 0, exit_code=143, finished="2026-01-01T00:02:03Z", created="2026-01-01T00:01:20Z",
                   deleted_at="2026-01-01T00:02:31Z")]
    rec = build_record(job, pods, [], {}, collected_at="2026-01-01T00:03:00Z")
    rows = [(p["name"], p["run"], p["outcome"], p["failed"]) for p in rec["pods"]]
    assert rows == [("mnist-chief-0", 1, "exit code 137", True), ("mnist-chief-0", 2, "exit code 137", True),
                    ("mnist-ps-0", 1, "stopped by the job", False), ("mnist-ps-0", 2, "stopped by the job", False)]
    text = markdown(rec)
    assert "| pods | 4 (2 failed) |" in text and "| restarts | 1 (max_retry 2) |" in text
    assert "| pod | run | task | node | phase | what happened |" in text
    assert "| mnist-chief-0 | 2 | chief | node-1 | Failed | exit code 137 |" in text


def test_a_pod_deleted_while_it_ran_does_not_show_as_running() -> None:
    running = pod("worker", 0, phase="Running")
    rec = build_record(JOB, [running], [], {}, collected_at="2026-01-01T00:03:00Z", deleted=["uid-mnist-worker-0"])
    assert "| mnist-worker-0 | worker | node-1 | deleted while Running | stopped by the job |" in markdown(rec)


def test_a_parameter_server_stopped_by_complete_job_is_stopped_by_the_job_after_the_kubelets_last_delete() -> None:
    """Seen on the real node: once a deleted pod's containers stopped, the kubelet deletes it
    again with no grace period, and the API then shows deletionGracePeriodSeconds 0 and a
    deletionTimestamp after the container's end. That is no sign the container ended on its
    own: the parameter server SIGTERMed by CompleteJob (143) is stopped by the job."""
    ps = killed("ps", 0, exit_code=143, finished="2026-12-05T15:30:10Z", created="2026-12-05T15:29:00Z",
                deleted_at="2026-12-05T15:30:11Z", grace=0)
    end = pod_end(ps, job_phase="Completing", deleted=True)
    assert end is not None and end.cause == STOPPED_BY_JOB, end


def test_a_cancelled_step_says_so_beside_the_phase_the_job_had() -> None:
    """Issue 42 item 9: the record of a cancel showed `phase | Running` and no word of it."""
    rec = record(cancelled="cancelled by SIGINT: stopping the job (on_cancel=delete)")
    assert rec["cancelled"] == "cancelled by SIGINT: stopping the job (on_cancel=delete)"
    rows = [line for line in markdown(rec).splitlines() if line.startswith("| ")]
    assert rows[1:3] == [f"| phase | {JOB['status']['state']['phase']} |",
                         "| cancelled | cancelled by SIGINT: stopping the job (on_cancel=delete) |"], rows
    assert "cancelled" not in record() and "| cancelled |" not in markdown(record())


def test_a_record_that_must_drop_pods_still_counts_every_pod_in_its_groups() -> None:
    """At 11,001 pods the 1 MiB record kept 4,642 pods and its Markdown said '4,642 pods':
    the groups are made from every pod before the record shrinks."""
    pods = [pod("ps", i, phase="Running") for i in range(1000)] + [
        pod("worker", i, phase="Succeeded", exit_code=0) for i in range(10_000)]
    rec = build_record(JOB, pods, [], {}, collected_at="t", limits=Limits(max_bytes=256 * 1024))
    assert len(rec["pods"]) < 11_000 and rec["dropped"]["pods"] > 0
    assert sum(g["pods"] for g in rec["pod_groups"]) == 11_000
    assert {(g["task"], g["phase"], g["pods"], g["indices"]) for g in rec["pod_groups"]} == {
        ("ps", "Running", 1000, "0-999"), ("worker", "Succeeded", 10_000, "0-9999")}
    text = markdown(rec)
    assert f"11,000 pods by task and what happened ({len(rec['pods']):,} of them in the JSON record)" in text
    assert f"| pods | 11,000 (0 failed, {11_000 - len(rec['pods']):,} not in the record) |" in text
