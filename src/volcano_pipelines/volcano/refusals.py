"""Why a job ended before any of its pods ran, in one line: the queue, the job's state message,
the controller's newest warning, and the namespace's Pod Security admission refusing the pods
(the API server's error as Volcano's FailedCreate event repeats it). Pure: the job and its
events in, the line out."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from volcano_pipelines.volcano.completion import newest_warning

__all__ = ["ended_before_start", "pod_security_refusal"]


def ended_before_start(job: Mapping[str, Any], events: Iterable[Mapping[str, Any]], queue: str | None) -> str:
    """Why a job that Volcano ended before any pod ran ended (issue 28, item 9): the queue
    problem where known (`queue`: e.g. "queue vpipe does not exist"), the job's state message,
    and the controller's newest warning event (e.g. `SyncJob ... retry limit reached`)."""
    state = ((job.get("status") or {}).get("state") or {})
    warnings = [e for e in events if e.get("type") == "Warning"]
    for text in [state.get("message"), *(e.get("message") for e in warnings)]:
        refused = pod_security_refusal(job, text)
        if refused is not None:  # one line, not the API server's error as Volcano dumps it
            return "no pod ever ran: " + refused
    parts = []
    if queue:
        parts.append(queue)
    if state.get("message"):
        parts.append(str(state["message"]))
    text = newest_warning(warnings)
    if text is not None and text not in parts:
        parts.append(f"Volcano: {text}")
    if not parts:
        parts.append("Volcano gave no reason (no event or state message)")
    return "no pod ever ran: " + "; ".join(parts)


# The API server's PodSecurity admission refusing a pod, as Volcano's FailedCreate event repeats
# it (the error's text, or a Go dump of it with every quote escaped).
_POD_SECURITY = re.compile(r'violates PodSecurity "(?P<level>[a-z]+)(?::[^"]*)?"(?::\s*(?P<checks>.*))?')


def pod_security_refusal(job: Mapping[str, Any], text: str | None) -> str | None:
    """`text` (an event's or the job's message) as one line when it says the namespace's Pod
    Security level refused the job's pods: which level, the checks that failed, and what to do
    (--pod-security restricted, its pipeline input, a non-root image) when the job was not built
    for the restricted level; None for any other text."""
    found = _POD_SECURITY.search((text or "").replace('\\"', '"'))
    if found is None:
        return None
    level = found.group("level")
    # The failed checks' names without their advice: `runAsNonRoot != true (pod or container ...)`.
    checks = re.split(r'", Reason:|"}|\]$', found.group("checks") or "")[0]
    names = [part.split(" (", 1)[0].strip() for part in re.split(r"\),\s*", checks) if part.strip()]
    where = f'namespace {(job.get("metadata") or {}).get("namespace") or "?"}'
    refused = f'{where} enforces Pod Security "{level}" and refused the job\'s pods' + (
        f" ({', '.join(names)})" if names else "")
    if _built_restricted(job):
        return f"{refused}, although they were built for the restricted level: {checks.strip()}"
    return (f"{refused}: rerun with --pod-security restricted (pipelines: the input pod_security, Argo's "
            "pod-security, set to restricted), with an image that runs as a numeric non-root user")


def _built_restricted(job: Mapping[str, Any]) -> bool:
    """Whether every task's pod template asks for what the restricted level checks."""
    tasks = (job.get("spec") or {}).get("tasks") or []
    return bool(tasks) and all(
        ((((t.get("template") or {}).get("spec") or {}).get("securityContext") or {}).get("runAsNonRoot") is True)
        for t in tasks)
