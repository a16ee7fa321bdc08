"""Pieces every Volcano Job of ours shares: identity labels, pod templates, volumes, the
job envelope. Pure functions, dict in / dict out."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from volcano_pipelines.objects import podspec
from volcano_pipelines.objects.validate import owner_reference
from volcano_pipelines.labels import identity_labels
from volcano_pipelines.volcano.entrypoint import CODE_DIR
from volcano_pipelines.volcano.spec import CodeSource, JobOptions, Role, Storage

API_VERSION = "batch.volcano.sh/v1alpha1"
KIND = "Job"

CODE_VOLUME = "vpipe-code"
DATA_VOLUME = "vpipe-data"
LOG_VOLUME = "vpipe-logs"
CODE_PVC_VOLUME = "vpipe-code-pvc"


def host(job_name: str, task: str, index: int, port: int | None = None) -> str:
    """A pod's stable DNS name from Volcano's svc plugin: pod `<job>-<task>-<i>` under the
    headless Service `<job>`."""
    name = f"{job_name}-{task}-{index}.{job_name}"
    return f"{name}:{port}" if port is not None else name


def code_env(code: CodeSource) -> list[dict[str, str]]:
    env = [{"name": "VPIPE_ENTRY", "value": code.entry}, {"name": "VPIPE_CODE_DIR", "value": CODE_DIR}]
    if code.url is not None:
        env.append({"name": "VPIPE_CODE_URL", "value": code.url})
        if code.sha256:
            env.append({"name": "VPIPE_CODE_SHA256", "value": code.sha256.lower()})
    if code.path is not None:
        env.append({"name": "VPIPE_CODE_PATH", "value": code.path})
    return env


def storage_env(storage: Storage) -> list[dict[str, str]]:
    return [
        {"name": "VPIPE_DATA_DIR", "value": storage.data_dir},
        {"name": "VPIPE_LOG_DIR", "value": storage.log_dir},
    ]


def volumes_and_mounts(
    code: CodeSource, storage: Storage, *, mount_data: bool
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    volumes: list[dict[str, Any]] = [{"name": CODE_VOLUME, "emptyDir": {}}]
    mounts: list[dict[str, Any]] = [{"name": CODE_VOLUME, "mountPath": CODE_DIR}]
    if code.pvc is not None and code.path is not None:
        volumes.append({"name": CODE_PVC_VOLUME, "persistentVolumeClaim": {"claimName": code.pvc, "readOnly": True}})
        mounts.append({"name": CODE_PVC_VOLUME, "mountPath": code.path, "readOnly": True})
    if mount_data and storage.data_pvc is not None:
        volumes.append({"name": DATA_VOLUME, "persistentVolumeClaim": {"claimName": storage.data_pvc, "readOnly": True}})
        data_mount: dict[str, Any] = {"name": DATA_VOLUME, "mountPath": storage.data_dir, "readOnly": True}
        if storage.data_subpath:
            data_mount["subPath"] = storage.data_subpath.strip("/")
        mounts.append(data_mount)
    if storage.log_pvc is not None:
        volumes.append({"name": LOG_VOLUME, "persistentVolumeClaim": {"claimName": storage.log_pvc}})
        mounts.append({"name": LOG_VOLUME, "mountPath": storage.log_dir})
    return volumes, mounts


def container_resources(role: Role) -> dict[str, dict[str, str]]:
    return podspec.resources(role.resources.cpu, role.resources.memory, role.resources.gpu)


def pod_template(
    *,
    job: JobOptions,
    step: str,
    role: Role,
    image: str,
    container_name: str,
    command: Sequence[str],
    args: Sequence[str],
    env: Sequence[Mapping[str, str]],
    volumes: Sequence[Mapping[str, Any]],
    mounts: Sequence[Mapping[str, Any]],
    ports: Sequence[Mapping[str, Any]] = (),
) -> dict[str, Any]:
    container = podspec.container(
        name=container_name,
        image=image,
        command=command,
        args=args,
        env=[*env, *podspec.env_list(role.env)],
        resources=container_resources(role),
        mounts=mounts,
        ports=ports,
        pull_always=bool(job.image_pull_secrets),
    )
    spec = podspec.pod_spec(
        [container],
        volumes=volumes,
        # Failures must reach Volcano's policies (bounded by maxRetry), not be hidden by kubelet restarts.
        restart_policy="Never",
        image_pull_secrets=job.image_pull_secrets or (),
        service_account=job.service_account,
        node_selector=role.node_selector,
        tolerations=role.tolerations,
        priority_class=job.priority_class,
    )
    if job.deadline is not None:
        spec["activeDeadlineSeconds"] = job.deadline
    if job.pod_security == "restricted":
        spec["securityContext"] = dict(podspec.RESTRICTED_POD)
        for each in spec["containers"] + spec.get("initContainers", []):
            each["securityContext"] = dict(podspec.RESTRICTED_CONTAINER)
    # The mesh opt-out first: a label or annotation of the user's own overrides it.
    mesh = podspec.mesh_opt_out(job.istio_sidecar)
    metadata: dict[str, Any] = {"labels": {**mesh, **(job.labels or {}), **role.labels, **identity_labels(step, job.run_id)}}
    if role.annotations or mesh:
        metadata["annotations"] = {**mesh, **role.annotations}
    return {"metadata": metadata, "spec": spec}


def task_min_available(
    replicas: Mapping[str, int], min_available: int | None, elastic: str, optional: tuple[str, ...] = ()
) -> dict[str, int]:
    """Per-task gang sizes. Volcano's webhook would set each to `replicas` when absent, so
    they are always explicit. With a job `min_available` below the total, only the `elastic`
    task (workers) and then the `optional` ones (evaluator) give up members: parameter
    servers, chief and MPI master are always needed. Validation guarantees the fixed tasks
    plus one elastic member fit in `min_available`."""
    if min_available is None:
        return dict(replicas)
    fixed = {name: n for name, n in replicas.items() if name != elastic and name not in optional}
    remaining = min_available - sum(fixed.values())
    mins = dict(fixed)
    mins[elastic] = min(replicas[elastic], remaining)
    remaining -= mins[elastic]
    for name in optional:
        if name in replicas:
            mins[name] = min(replicas[name], remaining)
            remaining -= mins[name]
    return mins


def task(
    name: str, replicas: int, template: Mapping[str, Any], *, min_available: int, max_retry: int, completes_job: bool
) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "name": name,
        "replicas": replicas,
        "minAvailable": min_available,
        "maxRetry": max_retry,
        "template": dict(template),
    }
    if completes_job:
        entry["policies"] = [{"event": "TaskCompleted", "action": "CompleteJob"}]
    return entry


def job_envelope(
    job: JobOptions, *, step: str, plugins: Mapping[str, list[str]], tasks: Sequence[Mapping[str, Any]]
) -> dict[str, Any]:
    total = sum(int(t["replicas"]) for t in tasks)
    # Without a PodFailed policy a failed worker never completes its task and the parameter
    # servers keep the job Running forever: either restart it or end it, never neither.
    policies = [
        {"event": "PodEvicted", "action": "RestartJob"},
        {"event": "PodFailed", "action": "RestartJob" if job.restart_on_failure else "TerminateJob"},
    ]
    spec: dict[str, Any] = {
        "schedulerName": "volcano",
        "minAvailable": job.min_available if job.min_available is not None else total,
        "queue": job.queue,
        "maxRetry": job.max_retry,
        "plugins": {k: list(v) for k, v in plugins.items()},
        "policies": policies,
        "tasks": [dict(t) for t in tasks],
    }
    if job.ttl is not None:
        spec["ttlSecondsAfterFinished"] = job.ttl
    if job.priority_class:
        spec["priorityClassName"] = job.priority_class
    metadata: dict[str, Any] = {
        "name": job.name,
        "namespace": job.namespace,
        "labels": {**(job.labels or {}), **identity_labels(step, job.run_id)},
    }
    if job.owner is not None:
        metadata["ownerReferences"] = [owner_reference("job.owner", job.owner)]
    return {"apiVersion": API_VERSION, "kind": KIND, "metadata": metadata, "spec": spec}
