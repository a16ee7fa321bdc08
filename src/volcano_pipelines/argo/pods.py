"""What every step pod of the Argo templates gets, whatever the step: its program, its
retries, the restricted Pod Security settings, its own pod name, and how long pods and
workflows are kept."""

from __future__ import annotations

from hera.workflows import RetryStrategy
from hera.workflows.models import (
    Backoff,
    Metadata,
    Capabilities,
    EmptyDirVolumeSource,
    EnvVar,
    EnvVarSource,
    IntOrString,
    ObjectFieldSelector,
    PodGC,
    PodSecurityContext,
    Quantity,
    ResourceRequirements,
    PersistentVolumeClaimVolumeSource,
    SeccompProfile,
    SecurityContext,
    TTLStrategy,
    Volume,
    VolumeMount,
)

from volcano_pipelines.objects.podspec import mesh_opt_out
from volcano_pipelines.labels import POD_NAME_ENV
from volcano_pipelines.steps.pipelines import LOG_MOUNT, POST_MORTEM_VOLUME_DIR, POST_MORTEM_VOLUME_DIR_ENV

__all__ = ["CONTAINER_SECURITY", "LOG_MOUNTS", "POD_GC", "POD_METADATA", "POD_NAME", "POD_SECURITY", "POST_MORTEM_COPY",
           "RETRY", "RUN_COMMAND", "TTL", "log_volume", "resources"]

# Retried: a lost pod (an Error node: the pod was deleted, evicted or lost with its node;
# Argo gives such a node no exit code, or -1) and exit code 3 (a cluster / remote-system
# problem: unreachable API server or NameNode; also what a step exits with when SIGTERM came
# because its own pod was being deleted). Safe, because a retried step attaches to the job of its
# run ({{workflow.uid}}) and sync is incremental. Exit 1 (the work failed) and 2 (bad input)
# are final. retryPolicy Always: OnFailure never retries an Error node.
RETRY = RetryStrategy(limit="3", retry_policy="Always",
                      expression='lastRetry.status == "Error" || asInt(lastRetry.exitCode) == 3',
                      backoff=Backoff(duration="10s", factor=IntOrString(root="2")))
# The container's only program (argo/run.py): turns SPEC VALUE pairs (argo/inputs.py) into
# vpipe's argv, runs vpipe (which takes SIGTERM itself), writes the output files. No shell.
RUN_COMMAND = ["python3", "-m", "volcano_pipelines.argo.run"]
# The restricted Pod Security level: the runtime image's user (images/runtime: uid 1000), no
# privilege escalation, no capabilities, the runtime's default seccomp profile. The pod-level
# part covers Argo's own init and wait containers too (their container-level settings come
# from the controller's `executor.securityContext`, docs/argo.md).
# fsGroup: a fresh volume is often root-owned (mode 755); the kubelet gives volumes that support
# ownership management (most block and local volumes; not NFS-like ones, docs/argo.md) the
# group and group write, so the sync step can create its dataset directory on the first run.
# OnRootMismatch: only when the volume's root does not already have it (a recursive change of a
# large dataset on every pod start would take minutes).
RUNTIME_UID = 1000
POD_SECURITY = PodSecurityContext(run_as_non_root=True, run_as_user=RUNTIME_UID, run_as_group=RUNTIME_UID,
                                  fs_group=RUNTIME_UID, fs_group_change_policy="OnRootMismatch",
                                  seccomp_profile=SeccompProfile(type="RuntimeDefault"))
CONTAINER_SECURITY = SecurityContext(allow_privilege_escalation=False, capabilities=Capabilities(drop=["ALL"]),
                                     run_as_non_root=True, seccomp_profile=SeccompProfile(type="RuntimeDefault"))
# Every step pod stays out of a service mesh (a multi-user KFP profile namespace is labelled
# istio-injection=enabled): a sidecar would keep the pod running after the step and Argo's wait
# container; KFP opts its own pods out the same way.
POD_METADATA = Metadata(labels=mesh_opt_out(False), annotations=mesh_opt_out(False))
# The step's own pod name: a SIGTERM while it is being deleted means a lost pod (on_pod_deleted).
POD_NAME = EnvVar(name=POD_NAME_ENV, value_from=EnvVarSource(field_ref=ObjectFieldSelector(field_path="metadata.name")))
# Workflow pods are deleted when the workflow succeeds (a failed one keeps them for its logs);
# workflows are deleted a day after success, a week after failure (which also deletes, through
# the ownerReference, the Volcano Jobs they created).
POD_GC = PodGC(strategy="OnWorkflowSuccess")
TTL = TTLStrategy(seconds_after_success=86400, seconds_after_failure=7 * 86400)


def resources(requests: dict[str, str]) -> ResourceRequirements:
    """Requests, and memory's as the limit (CPU is not limited: a CPU limit throttles)."""
    return ResourceRequirements(requests={k: Quantity(root=v) for k, v in requests.items()},
                                limits={"memory": Quantity(root=requests["memory"])})


# The run's log PVC in the train step pods, where the step keeps a copy of its post-mortem record
# next to the run's logs (steps/pipelines.py). The template only mounts a volume of this name;
# the workflow running it says what it is (Argo takes a mount's volume from the template, else
# from the running workflow's spec.volumes, also for a templateRef): the pipelines bind it to
# their `log-pvc`, the step's own WorkflowTemplate to an emptyDir (there the log PVC is optional,
# and an empty claim name would fail the pod), so run alone the copy goes with the pod.
LOG_VOLUME = "vpipe-logs"
LOG_MOUNTS = [VolumeMount(name=LOG_VOLUME, mount_path=LOG_MOUNT)]
POST_MORTEM_COPY = EnvVar(name=POST_MORTEM_VOLUME_DIR_ENV, value=POST_MORTEM_VOLUME_DIR)


def log_volume(claim: str | None) -> Volume:
    """The workflow-level volume behind LOG_MOUNTS: the PVC `claim` (a parameter reference), or
    an emptyDir when None."""
    if claim is None:
        return Volume(name=LOG_VOLUME, empty_dir=EmptyDirVolumeSource())
    return Volume(name=LOG_VOLUME, persistent_volume_claim=PersistentVolumeClaimVolumeSource(claim_name=claim))
