"""The tensorboard step: TensorBoard over the training logs on the log PVC, and the URL to
open. Re-running it updates the same objects in place (server-side apply); its lifetime is its
owners' (the pipeline run's Workflow, the training job: ownerReferences, deleted once all are
gone) or a TTL the reap sweeper enforces."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime, timedelta, timezone
from typing import Any, ClassVar, Literal, get_args

from volcano_pipelines.errors import InputError
from volcano_pipelines.steps._service_groups import ImagePullSecrets, ObjectLabels, Placement
from volcano_pipelines.steps._service_checks import check_common, require_pvc
from volcano_pipelines.steps.registry import WHOLE, Output
from volcano_pipelines.k8s.connection import Connection, Namespace
from volcano_pipelines.interface.params import check_types
from volcano_pipelines.objects.tensorboard import (
    STEP,
    TENSORBOARD_IMAGE,
    TENSORBOARD_PORT,
    TensorboardSpec,
    build_tensorboard,
    selector,
)
from volcano_pipelines.lifecycle.reap import format_time
from volcano_pipelines.objects.rollout import TEMPLATE_HASH_ANNOTATION
from volcano_pipelines.progress import Progress
from volcano_pipelines.objects.validate import (
    check_dns_label,
    check_dns_subdomain,
    check_positive_seconds,
    check_relative_path,
    owner_reference,
)

__all__ = ["SERVICE_TYPES", "TensorboardResult", "tensorboard"]

ServiceType = Literal["NodePort", "ClusterIP"]
SERVICE_TYPES: tuple[str, ...] = get_args(ServiceType)
NOT_WAITED = "applied; not waited for"
_HOST = re.compile(r"[A-Za-z0-9]([A-Za-z0-9.:-]*[A-Za-z0-9])?|\[[0-9A-Fa-f:]+\]")
_PATH = re.compile(r"/[A-Za-z0-9._~/-]*")


@dataclass
class TensorboardResult:
    # The KFP component's output parameters (steps/registry.py).
    OUTPUTS: ClassVar[tuple[Output, ...]] = (
        Output("url", "the URL to open (Ingress, else node port, else in-cluster)", missing=""),
        Output("name", "name of the TensorBoard Deployment and Service"),
        Output("namespace", "namespace of TensorBoard"),
        Output("ready", "TensorBoard is ready"),
        Output("result", "the whole step result (TensorboardResult.to_dict())", WHOLE),
    )

    name: str
    namespace: str
    url: str | None  # what a user opens: the Ingress URL, else node address + node port, else the in-cluster URL
    ready: bool
    created: bool = False  # False: an existing TensorBoard was updated in place
    service_type: str = "NodePort"
    node_port: int | None = None
    node_port_allocated: bool = False  # True: the API server chose the node port
    urls: dict[str, str] = field(default_factory=dict)  # node_port, ingress, cluster, api_proxy
    owner_job: str | None = None
    expires_at: str | None = None
    message: str | None = None
    manifests: list[dict[str, Any]] | None = None  # dry run: what would be applied

    @property
    def succeeded(self) -> bool:
        return self.ready or self.manifests is not None or self.message == NOT_WAITED

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        if self.manifests is None:
            del out["manifests"]
        return out


def tensorboard(
    name: str,
    *,
    log_pvc: str,
    logdir: str = "",
    namespace: Namespace = None,
    job: str | None = None,
    owner: str | None = None,
    ttl: float | None = None,
    service_type: ServiceType = "NodePort",
    node_port: int | None = None,
    node_address: str | None = None,
    ingress_path: str | None = None,
    ingress_host: str | None = None,
    ingress_class: str | None = None,
    image: str = TENSORBOARD_IMAGE,
    cpu: str = "100m",
    memory: str = "512Mi",
    image_pull_secrets: ImagePullSecrets = None,
    placement: Placement = Placement(),
    object_labels: ObjectLabels = ObjectLabels(),
    timeout: float = 300,
    wait: bool = True,
    dry_run: bool = False,
    connection: Connection = Connection(),
    progress: Progress | None = None,
) -> TensorboardResult:
    """Start (or update) TensorBoard over the training logs and report the URL to open: a
    Deployment mounting the log PVC read-only at the log sub-path, a Service, an optional
    Ingress. Waits until TensorBoard is ready.

    Args:
        name: name of the Deployment, Service and Ingress (DNS label, starting with a letter)
        log_pvc: PVC holding the training logs (mounted read-only)
        logdir: sub-path of the log PVC that TensorBoard reads (default: the PVC's root)
        job: Volcano Job whose lifetime TensorBoard shares (deleted with it, or with owner, whichever goes last)
        owner: owner of TensorBoard, API_VERSION/KIND/NAME/UID in its namespace (e.g. the pipeline run's Argo Workflow): deleted with it (or with job, whichever goes last)
        ttl: seconds TensorBoard lives; the reap sweeper deletes it afterwards
        service_type: NodePort or ClusterIP
        node_port: NodePort to use (default: the API server allocates one)
        node_address: node address for the URL (default: the address of the node running TensorBoard)
        ingress_path: also expose it through an Ingress under this path prefix (TensorBoard's --path_prefix)
        ingress_host: host name of the Ingress rule
        ingress_class: IngressClass of the Ingress
        image: TensorBoard image (runs the tensorboard command)
        cpu: CPU request
        memory: memory request and limit
        timeout: seconds to wait for TensorBoard to be ready
        wait: wait until TensorBoard is ready (false: apply and return)
        dry_run: print the objects; create nothing
    """
    check_types(tensorboard, locals())
    progress = progress or Progress()
    check_common(name=name, namespace=namespace, pvc_field="log_pvc", pvc=log_pvc, image=image, cpu=cpu, memory=memory,
                 image_pull_secrets=image_pull_secrets, timeout=timeout)
    run_id, labels, istio_sidecar = object_labels.checked()
    if isinstance(logdir, str) and logdir.startswith("/"):
        # The log PVC is mounted in the pod: /abs would silently have meant <pvc>/abs.
        raise InputError("logdir", logdir, "a path relative to the log PVC's root, e.g. runs/mnist ('' for the root)")
    if logdir.strip("/"):
        check_relative_path("logdir", logdir.strip("/"))
    if job is not None:
        check_dns_label("job", job)
    owners = (owner_reference("owner", owner),) if owner is not None else ()
    node_selector, tolerations = placement.checked()
    if ttl is not None:
        check_positive_seconds("ttl", ttl)
        if job is not None:  # two owners of one lifetime: the usage says they exclude each other
            raise InputError("ttl", ttl, "either `job` (TensorBoard lives as long as the job) or `ttl`, not both")
    if service_type not in SERVICE_TYPES:
        raise InputError("service_type", service_type, f"one of {', '.join(SERVICE_TYPES)}")
    if node_port is not None:
        if service_type != "NodePort":
            raise InputError("node_port", node_port, "only with service_type NodePort")
        if isinstance(node_port, bool) or not isinstance(node_port, int) or not 1 <= node_port <= 65535:
            raise InputError("node_port", node_port, "a port number (the cluster's NodePort range, 30000-32767 by default)")
    if node_address is not None and not _HOST.fullmatch(node_address):
        raise InputError("node_address", node_address, "a host name or IP address")
    if ingress_path is not None and (not _PATH.fullmatch(ingress_path) or ingress_path.rstrip("/") == "" or "//" in ingress_path):
        raise InputError("ingress_path", ingress_path, "a URL path other than '/', e.g. /tensorboard/mnist")
    for flag, value in (("ingress_host", ingress_host), ("ingress_class", ingress_class)):
        if value is not None:
            check_dns_subdomain(flag, value)
        if value is not None and ingress_path is None:
            raise InputError(flag, value, "only with ingress_path")
    spec = TensorboardSpec(
        name=name, namespace=namespace or "default", log_pvc=log_pvc, logdir=logdir, image=image,
        service_type=service_type, node_port=node_port, ingress_path=ingress_path, ingress_host=ingress_host,
        ingress_class=ingress_class, cpu=cpu, memory=memory, run_id=run_id, labels=labels,
        image_pull_secrets=tuple(image_pull_secrets or ()),
        node_selector=node_selector, tolerations=tolerations,
        expires_at=format_time(datetime.now(timezone.utc) + timedelta(seconds=ttl)) if ttl else None,
        owners=owners, istio_sidecar=istio_sidecar,
    )
    if dry_run:
        if namespace is None:  # where the real one would go: the context's namespace
            spec = replace(spec, namespace=connection.default_namespace())
        return TensorboardResult(name=name, namespace=spec.namespace, url=None, ready=False, service_type=service_type,
                                 owner_job=job, expires_at=spec.expires_at, manifests=build_tensorboard(spec),
                                 message="dry run: nothing was created")

    from volcano_pipelines.k8s import apps
    cluster = connection.connect()
    spec = replace(spec, namespace=namespace or cluster.namespace)
    require_pvc(cluster, spec.namespace, "log_pvc", log_pvc)
    if job is not None:
        spec = replace(spec, owners=(*spec.owners, apps.owner_of(_volcano_job(cluster, spec.namespace, job))))
    apps.check_all(cluster, build_tensorboard(spec))
    existing = apps.get(cluster, "apps/v1", "Deployment", spec.namespace, name)
    existed = existing is not None
    if existing is None:
        # The Service first: what only its allocation can refuse (a node port out of the
        # cluster's range or taken; a server-side dry run allocates nothing) comes before
        # anything else exists. Re-applied with its owner once the Deployment has a uid.
        apps.apply(cluster, build_tensorboard(spec)[1])
    deployment = apps.apply(cluster, build_tensorboard(spec)[0])
    applied = [apps.apply(cluster, obj) for obj in build_tensorboard(spec, apps.owner_of(deployment))[1:]]
    service = applied[0]
    ingress = applied[1] if len(applied) > 1 else None
    progress.note(f"tensorboard {spec.namespace}/{name}: {'updated' if existed else 'created'}")
    ready = False
    message = None
    if wait:
        rollout = apps.wait_for_rollout(
            cluster, spec.namespace, name, selector=selector(name),
            template_hash=deployment["spec"]["template"]["metadata"]["annotations"][TEMPLATE_HASH_ANNOTATION],
            timeout=timeout, on_change=lambda line: progress.note(line))
        ready = rollout.done
        message = None if ready else rollout.message
    ports = (service.get("spec") or {}).get("ports") or []
    allocated = ports[0].get("nodePort") if ports and service_type == "NodePort" else None
    urls = tensorboard_urls(cluster, spec.namespace, name, service, ingress, prefix=(ingress_path or "").rstrip("/"),
                            node_address=node_address, ingress_host=ingress_host)
    url = urls.get("ingress") or urls.get("node_port") or urls["cluster"]
    return TensorboardResult(
        name=name, namespace=spec.namespace, url=url, ready=ready, created=not existed, service_type=service_type,
        node_port=allocated, node_port_allocated=bool(allocated) and node_port is None, urls=urls, owner_job=job,
        expires_at=spec.expires_at, message=message or (None if wait else NOT_WAITED),
    )


def tensorboard_urls(cluster: Any, namespace: str, name: str, service: Mapping[str, Any],
                     ingress: Mapping[str, Any] | None, *, prefix: str, node_address: str | None = None,
                     ingress_host: str | None = None) -> dict[str, str]:
    """Every way into TensorBoard `name`: in-cluster, through the API server's proxy, a node
    port (on the node that runs it) and the Ingress (its host, else the address it got)."""
    urls = {
        "cluster": f"http://{name}.{namespace}.svc:{TENSORBOARD_PORT}{prefix}/",
        "api_proxy": f"{cluster.host}/api/v1/namespaces/{namespace}/services/http:{name}:{TENSORBOARD_PORT}/proxy{prefix}/",
    }
    ports = (service.get("spec") or {}).get("ports") or []
    allocated = ports[0].get("nodePort") if ports and (service.get("spec") or {}).get("type") == "NodePort" else None
    if allocated:
        address = node_address or _node_address(cluster, namespace, name)
        if address:
            urls["node_port"] = f"http://{address}:{allocated}{prefix}/"
    if ingress is not None:
        address = ingress_host or _ingress_address(ingress)
        if address:
            urls["ingress"] = f"http://{address}{prefix}/"
    return urls


def run_tensorboard(cluster: Any, namespace: str, run_id: str) -> dict[str, Any] | None:
    """The TensorBoard a pipeline run started ({name, url, urls}), found by the run's labels
    on its Service; None when the run started none. For the exit handler's summary, so one
    page has the run's TensorBoard beside what happened to its job."""
    from volcano_pipelines.k8s import apps
    from volcano_pipelines.labels import run_selector

    selector = run_selector(run_id, STEP)
    # Two lists whatever they find: the permissions a run needs do not depend on its TensorBoard.
    services, _ = apps.list_objects(cluster, apps.collection_path("v1", "services", namespace), label_selector=selector)
    ingresses, _ = apps.list_objects(cluster, apps.collection_path("networking.k8s.io/v1", "ingresses", namespace),
                                     label_selector=selector)
    if not services:
        return None
    service = services[0]
    name = str(service["metadata"]["name"])
    ingress = next((i for i in ingresses if (i.get("metadata") or {}).get("name") == name), None)
    prefix = ""
    if ingress is not None:
        for rule in (ingress.get("spec") or {}).get("rules") or []:
            for path in ((rule.get("http") or {}).get("paths") or []):
                prefix = str(path.get("path") or "").rstrip("/")
        host = next((str(r["host"]) for r in (ingress.get("spec") or {}).get("rules") or [] if r.get("host")), None)
    else:
        host = None
    urls = tensorboard_urls(cluster, namespace, name, service, ingress, prefix=prefix, ingress_host=host)
    return {"name": name, "url": urls.get("ingress") or urls.get("node_port") or urls["cluster"], "urls": urls}


def _volcano_job(cluster: Any, namespace: str, name: str) -> dict[str, Any]:
    from volcano_pipelines.k8s import volcano as k8s_volcano

    job = k8s_volcano.get_job(cluster, namespace, name)
    if job is None:
        raise InputError("job", name, f"an existing Volcano Job in namespace {namespace}")
    return job


def _node_address(cluster: Any, namespace: str, name: str) -> str | None:
    """The node running a TensorBoard pod (a NodePort answers on every node; this one is
    known without reading Nodes, which are cluster-scoped)."""
    from volcano_pipelines.k8s import apps

    pods, _ = apps.list_objects(cluster, apps.collection_path("v1", "pods", namespace),
                                label_selector=apps.label_selector_text(selector(name)))
    running = [p for p in pods if (p.get("status") or {}).get("hostIP") and not (p.get("metadata") or {}).get("deletionTimestamp")]
    running.sort(key=lambda p: (p.get("status") or {}).get("phase") != "Running")
    return (running[0].get("status") or {}).get("hostIP") if running else None


def _ingress_address(ingress: Mapping[str, Any]) -> str | None:
    for entry in ((ingress.get("status") or {}).get("loadBalancer") or {}).get("ingress") or []:
        if entry.get("hostname") or entry.get("ip"):
            return str(entry.get("hostname") or entry.get("ip"))
    return None
