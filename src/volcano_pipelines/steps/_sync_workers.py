"""The sync step's copy pods (`workers` > 1, docs/sync.md): where the destination's volume is
(the claim named, or the one the step's own pod mounts at the destination), and the launcher
that runs a run's partitions as one Volcano Job (volcano/copyjob.py) through the same wait loop
as training: create or attach by run id, follow to the end, restart on eviction within
max_retry, keep the job when the step's own pod is lost (the retried step attaches)."""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from volcano_pipelines.errors import InputError
from volcano_pipelines.images import RUNTIME_IMAGE
from volcano_pipelines.k8s.connection import Connection
from volcano_pipelines.objects.podspec import mounted_claim, mounted_config
from volcano_pipelines.objects.validate import checked_placement
from volcano_pipelines.labels import POD_NAME_ENV
from volcano_pipelines.progress import LineProgress
from volcano_pipelines.steps._identity import owner_in, workflow_owner
from volcano_pipelines.steps._sync import CopyPodOptions
from volcano_pipelines.transfer.partition import RunRecord
from volcano_pipelines.volcano.copyjob import CopyJobSpec, build_copy_job
from volcano_pipelines.volcano.spec import JobOptions, Resources, Role

__all__ = ["CopyPods", "copy_job_manifest", "copy_job_owner", "destination_claim", "launcher"]

log = logging.getLogger(__name__)

# The copy job's options that are the sync step's inputs of the same name.
_JOB_INPUTS = frozenset({"namespace", "image", "queue", "max_retry", "owner"})


@dataclass(frozen=True)
class CopyPods:
    """What the copy pods are given besides their partitions: the sync step's own inputs (how
    they run: `options`, the step's CopyPodOptions group as given)."""

    namespace: str | None
    claim: str
    subpath: str | None
    image: str = RUNTIME_IMAGE  # default: the step pod's own (destination_claim)
    config: tuple[tuple[dict[str, Any], dict[str, Any]], ...] = ()  # (volume, mount) of the client's files
    options: CopyPodOptions = CopyPodOptions()
    owner: str | None = None  # API_VERSION/KIND/NAME/UID in the job's namespace (KFP: the run's Workflow)
    connection: Connection = Connection()


@dataclass(frozen=True)
class FromStepPod:
    """What the copy pods take from the step: the destination's claim, the image, the Secret /
    ConfigMap volumes (with their mounts) that hold the HDFS client's files, and where the step's
    pod was read: its namespace and the Workflow that owns it (copy_job_owner)."""

    claim: str
    subpath: str | None
    image: str
    config: tuple[tuple[dict[str, Any], dict[str, Any]], ...] = ()
    pod_namespace: str | None = None  # None: no step pod was read
    pod_workflow: str | None = None  # the step pod's Workflow as API_VERSION/KIND/NAME/UID


def destination_claim(dst: str, claim: str | None, subpath: str | None, image: str | None, connection: Connection,
                      files: Mapping[str, str] | None = None) -> FromStepPod:
    """The copy pods' claim, image and client files: as given, else read from the step's own pod
    ($VPIPE_POD_NAME: the KFP and Argo step pods): the claim it mounts at or above `dst`, the
    image of the container that mounts it (a runtime image named at compile time reaches the
    copy pods too), else the runtime image of this version; of `files` (keytab, ticket cache,
    Hadoop configuration: parameter -> path), those on a Secret or ConfigMap volume of that pod
    (KFP's StepPod.kerberos_secret / hadoop_conf_config_map) are mounted in the copy pods at the
    same place; the others are taken to be in the image."""
    pod_name = os.environ.get(POD_NAME_ENV)
    if claim and not pod_name:
        return FromStepPod(claim, subpath, image or RUNTIME_IMAGE)  # the step refused `files` outside a pod
    if not pod_name:
        raise InputError("dest_pvc", claim, "the PersistentVolumeClaim mounted at DST, for the copy pods (with workers > 1 "
                                            f"outside a step pod, where ${POD_NAME_ENV} names the pod that mounts it)")
    from volcano_pipelines.k8s.pods import pod_object

    cluster = connection.connect()
    pod = pod_object(cluster, cluster.namespace, pod_name) or {}
    found = mounted_claim(pod, _normal(dst))
    if not claim and found is None:
        raise InputError("dest_pvc", claim, f"the PersistentVolumeClaim mounted at DST ({dst} is on no claim this pod "
                                            f"{pod_name} mounts)")
    config: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {}
    for path in (files or {}).values():
        # On no such volume: a file of the image, which the copy pods run too (by default).
        mounted = mounted_config(pod, _normal(path.removeprefix("FILE:")))
        if mounted is not None:
            config.setdefault(mounted[1]["mountPath"], mounted)
    default_image = found[2] if found else RUNTIME_IMAGE
    where = {"pod_namespace": cluster.namespace, "pod_workflow": workflow_owner(pod.get("metadata") or {})}
    if claim:
        return FromStepPod(claim, subpath, image or default_image, tuple(config.values()), **where)
    assert found is not None
    return FromStepPod(found[0], found[1] or None, image or default_image, tuple(config.values()), **where)


def copy_job_owner(given: str | None, step_pod: FromStepPod, namespace: str | None) -> str | None:
    """The copy job's owner: as given, else the Workflow that owns the step's pod (an Argo
    Workflow, or the one of a KFP run) when the job stays in that pod's namespace. Deleting the
    workflow deletes its step pod, and a step that loses its pod keeps the copy job for the
    retried step to attach to: without the owner, nothing would ever delete those copy pods. In
    another namespace an owner counts as absent and the garbage collector would delete the job
    at once, so none is set there."""
    if given is not None or step_pod.pod_workflow is None:
        return given
    if owner_in(step_pod.pod_workflow, step_pod.pod_namespace, namespace) is None:
        log.info("the copy job goes to namespace %s, not the step pod's (%s): not owned by the Workflow %s",
                 namespace, step_pod.pod_namespace, step_pod.pod_workflow.split("/")[2])
        return None
    log.info("the copy job is owned by the Workflow %s: deleting the workflow deletes the copy pods",
             step_pod.pod_workflow.split("/")[2])
    return step_pod.pod_workflow


def _normal(path: str) -> str:
    return os.path.normpath(os.path.abspath(path))


def copy_job_manifest(pods: CopyPods, record: RunRecord, namespace: str) -> dict[str, Any]:
    """The Volcano Job that copies `record`'s partitions, one pod each. Pure."""
    options = pods.options
    job = JobOptions(record.job, namespace=namespace, image=pods.image, queue=options.queue,
                     max_retry=options.max_retry, run_id=record.run_id, owner=pods.owner, pod_security="restricted")
    node_selector, tolerations = checked_placement(options.node_selector, options.tolerations)
    role = Role(resources=Resources(cpu=options.cpu, memory=options.memory), node_selector=node_selector,
                tolerations=tolerations)
    return build_copy_job(CopyJobSpec(job, workers=record.parts, claim=pods.claim, subpath=pods.subpath, role=role,
                                      spread=options.spread, config=pods.config))


def launcher(pods: CopyPods) -> Any:
    """The launcher transfer/fanout.py calls with a run's record."""

    def launch(record: RunRecord) -> str | None:
        from volcano_pipelines.backends.cluster import ClusterBackend
        from volcano_pipelines.steps._follow import FollowPolicy
        from volcano_pipelines.steps._waiting import WaitPolicy, run

        backend = ClusterBackend(pods.connection.connect())
        manifest = copy_job_manifest(pods, record, pods.namespace or backend.cluster.namespace)
        policy = WaitPolicy(on_cancel="delete", on_pod_deleted="keep", follow=FollowPolicy.every(0))
        try:
            result = run(backend, manifest, policy, LineProgress(sys.stderr))
        except InputError as err:  # what the cluster refuses (a missing queue) names the sync step's input
            name = err.field.removeprefix("job.")
            if name == err.field or name not in _JOB_INPUTS:
                raise
            raise InputError(name, err.value, err.allowed) from None
        if result.succeeded:
            return None
        return result.message or f"job {record.job} ended {result.phase}"

    return launch
