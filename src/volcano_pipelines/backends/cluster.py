"""The cluster backend: a Kubernetes API server with Volcano, through the generic client."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from typing import Any

from volcano_pipelines.backends.base import Job, Pod, Scheduling
from volcano_pipelines.k8s import pods as k8s_pods
from volcano_pipelines.k8s import volcano as k8s_volcano
from volcano_pipelines.k8s.client import Cluster
from volcano_pipelines.k8s.errors import Forbidden, NotFound
from volcano_pipelines.labels import POD_NAME_ENV
from volcano_pipelines.postmortem.save import save_post_mortem
from volcano_pipelines.volcano.completion import newest_warning
from volcano_pipelines.volcano.refusals import ended_before_start
from volcano_pipelines.volcano.status import (
    podgroup_name,
    podgroup_phase,
    scheduling_problem,
    scheduling_problem_from_events,
)

__all__ = ["ClusterBackend", "ClusterSession"]


class ClusterBackend:
    name = "cluster"

    def __init__(self, cluster: Cluster, submit_timeout: float | None = None) -> None:
        self.cluster = cluster
        # The step's --timeout: submitting (queue check, create) must fit in it too.
        self.submit_timeout = submit_timeout

    def submit(self, manifest: Job) -> tuple[Job, bool]:
        with self.cluster.within(self.submit_timeout, f"the step's timeout of {self.submit_timeout:g}s"
                                 if self.submit_timeout else ""):
            return k8s_volcano.create_or_attach(self.cluster, manifest)

    def get(self, namespace: str, name: str) -> Job | None:
        job = k8s_volcano.get_job(self.cluster, namespace, name)
        if job is None:
            k8s_volcano.check_api(self.cluster)
        return job

    def session(self, job: Job, log_lines: int, *, watch_pods: bool = True) -> ClusterSession:
        return ClusterSession(self.cluster, job, log_lines, watch_pods=watch_pods)

    def own_pod_deleted(self) -> bool:
        """Whether the step's own pod ($VPIPE_POD_NAME, in the pod's namespace) is being
        deleted: a SIGTERM then means the pod was lost (evicted, drained, deleted), not that the
        run was cancelled. False outside such a pod."""
        name = os.environ.get(POD_NAME_ENV)
        if not name:
            return False
        return k8s_pods.pod_being_deleted(self.cluster, self.cluster.namespace, name)


class ClusterSession:
    def __init__(self, cluster: Cluster, job: Job, log_lines: int, *, watch_pods: bool = True) -> None:
        meta = job["metadata"]
        self.cluster = cluster
        self.job = job
        self.namespace: str = meta["namespace"]
        self.name: str = meta["name"]
        self._missing = k8s_pods.MissingInfo()
        # Never started when not watching: it then has seen nothing (no failed or gone pods,
        # no kept logs), and a one-look reader lists the pods once instead of twice at a time.
        self._watcher = k8s_pods.FailedPodWatcher(cluster, self.namespace, self.name, log_lines, self._missing)
        self._watch_pods = watch_pods

    def __enter__(self) -> ClusterSession:
        if self._watch_pods:
            self._watcher.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._watch_pods:
            self._watcher.__exit__(*exc)

    def watch(self, window: Callable[[], float]) -> Iterator[Job | None]:
        for update in k8s_volcano.watch_job(self.cluster, self.namespace, self.name, window):
            if update is not None:
                self.job = update
            yield update

    def scheduling(self) -> Scheduling:
        group_name = podgroup_name(self.job)
        try:
            group = k8s_volcano.get_podgroup(self.cluster, self.namespace, group_name)
        except Forbidden:
            self._missing.denied("get", "podgroups.scheduling.volcano.sh", "the scheduler's reason for waiting")
            group = None
        problem = scheduling_problem(group) or scheduling_problem_from_events(
            k8s_pods.job_events(self.cluster, self.namespace, group_name, self._missing)
        )
        return Scheduling(problem=problem, admitted=podgroup_phase(group) == "Inqueue")

    def nudge(self) -> None:
        k8s_volcano.send_command(self.cluster, self.job, "SyncJob", "PendingAfterInqueue")

    def controller_warning(self) -> str | None:
        return newest_warning(k8s_pods.job_events(self.cluster, self.namespace, self.name, self._missing))

    def restart(self, reason: str) -> None:
        """Volcano restarts the job (every pod deleted and created again, retryCount + 1): a
        RestartJob Command, what `vcctl job restart` creates (--on-stall restart)."""
        k8s_volcano.send_command(self.cluster, self.job, "RestartJob", reason)

    def abort(self, reason: str) -> str:
        return k8s_volcano.abort_job(self.cluster, self.job, reason)

    def delete(self) -> None:
        k8s_volcano.delete_job(self.cluster, self.namespace, self.name)

    def failed_pods(self) -> list[Pod]:
        return self._watcher.failed_pods()

    def pods(self) -> list[Pod]:
        return k8s_pods.job_pods(self.cluster, self.namespace, self.name)

    def log_tail(self, pod: str, lines: int) -> str | None:
        return self._watcher.log_tail(pod) or k8s_pods.pod_log_tail(self.cluster, self.namespace, pod, lines, self._missing)

    def missing(self) -> list[str]:
        return self._missing.notes()

    def progress_log(self, pod: str, lines: int) -> str | None:
        """The tail of the reporting pod's current log (steps/_follow.py): one read, never the
        copy kept of a failed pod."""
        return k8s_pods.pod_log_tail(self.cluster, self.namespace, pod, lines, self._missing)

    def annotate(self, annotations: dict[str, str]) -> None:
        """Publish the training's progress on the job (steps/_follow.py)."""
        try:
            k8s_volcano.patch_job_annotations(self.cluster, self.namespace, self.name, annotations)
        except Forbidden:
            self._missing.denied("patch", "jobs.batch.volcano.sh", "the job's progress annotations")

    def linger_seconds(self) -> float | None:
        # Volcano deletes the parameter servers on CompleteJob; the pods' own timestamps do not
        # record when. The wait reads it from the job's Completing -> Completed transition
        # (steps/_waiting.completing_seconds); the reap step measures what it reaps itself.
        return None

    # --- what happened (issues 29, 30; 28 item 9): used by steps/_restarts.py where present

    def post_mortem(self, restarts: list[dict[str, Any]], stalled: dict[str, Any] | None = None,
                    cancelled: str | None = None) -> dict[str, Any]:
        """Save the job's post-mortem record (postmortem/save.py), with the pods the watch
        saw that are gone by now and the log lines it read from them while they existed."""
        return save_post_mortem(self.cluster, self.namespace, self.name, seen_pods=self._watcher.seen_pods(),
                                deleted=self._watcher.deleted_uids(), restarts=restarts,
                                kept_logs=self._watcher.kept_logs(), lost_logs=self._watcher.lost_logs(),
                                missing=self._missing, stalled=stalled,
                                cancelled=cancelled)

    def why_no_pods(self) -> str:
        """Why Volcano ended the job before any pod ran: its queue, its state message, the
        controller's newest warning event about the job or its PodGroup."""
        queue = (self.job.get("spec") or {}).get("queue") or "default"
        events = k8s_pods.job_events(self.cluster, self.namespace, self.name, self._missing)
        if (self.job.get("metadata") or {}).get("uid"):
            events += k8s_pods.job_events(self.cluster, self.namespace, podgroup_name(self.job), self._missing)
        return ended_before_start(self.job, events, queue_problem(self.cluster, queue))


def queue_problem(cluster: Cluster, queue: str) -> str | None:
    """What is wrong with `queue` (missing, not Open), or that it cannot be read; None when it
    is fine. One read."""
    try:
        found = cluster.call(f"read queue {queue}", lambda: cluster.custom.get_cluster_custom_object(
            k8s_volcano.SCHEDULING_GROUP, k8s_volcano.SCHEDULING_VERSION, "queues", queue))
    except NotFound:
        return f"queue {queue} does not exist"
    except Forbidden:
        return (f"queue {queue} could not be read ({k8s_volcano.QUEUE_GRANT}); it may not exist")
    except Exception as err:  # noqa: BLE001 - only decorates the message
        return f"queue {queue} could not be read: {err}"
    state = (found.get("status") or {}).get("state")
    if state and state != "Open":
        return f"queue {queue} is {state}"
    return None
