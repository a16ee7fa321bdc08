"""Exit codes in the post-mortem record (issue 42): a container that exited 0 keeps
`exit_code: 0` (0 is an exit code, not a missing one) and the summary never says
"exit code None"."""

from __future__ import annotations

from typing import Any

from tests.helpers.postmortem import JOB, pod
from volcano_pipelines.postmortem.markdown import markdown
from volcano_pipelines.postmortem.record import build_record


def with_init(p: dict[str, Any], terminated: dict[str, Any]) -> dict[str, Any]:
    p["status"]["initContainerStatuses"] = [{"name": "fetch-code", "restartCount": 0, "state": {"terminated": terminated}}]
    return p


def test_an_exit_code_of_0_is_kept_and_shown() -> None:
    failed = with_init(pod("worker", 1, phase="Failed", exit_code=1),
                       {"exitCode": 0, "reason": "Completed", "startedAt": "2026-01-01T00:00:11Z",
                        "finishedAt": "2026-01-01T00:00:14Z"})
    done = pod("worker", 0, phase="Succeeded", exit_code=0, reason="Completed")
    rec = build_record(JOB, [failed, done], [], {}, collected_at="2026-01-01T00:02:01Z")
    by_name = {p["name"]: p for p in rec["pods"]}
    init = by_name["mnist-worker-1"]["containers"][0]
    assert (init["name"], init["init"], init["state"]["exit_code"]) == ("fetch-code", True, 0)
    assert by_name["mnist-worker-0"]["containers"][0]["state"]["exit_code"] == 0
    assert by_name["mnist-worker-0"]["outcome"] == "succeeded" and not by_name["mnist-worker-0"]["failed"]
    text = markdown(rec)
    assert ("- container `fetch-code`: exit code 0, reason Completed, 2026-01-01T00:00:11Z - 2026-01-01T00:00:14Z"
            in text), text
    assert "None" not in text


def test_a_terminated_state_without_an_exit_code_is_not_called_none() -> None:
    failed = with_init(pod("worker", 1, phase="Failed", exit_code=1), {"reason": "ContainerStatusUnknown"})
    text = markdown(build_record(JOB, [failed], [], {}, collected_at="2026-01-01T00:02:01Z"))
    assert "- container `fetch-code`: reason ContainerStatusUnknown, ? - ?" in text and "None" not in text
