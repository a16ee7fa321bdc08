"""The serve step: TF Serving for the exported model. Checks the export layout when it can
see the model directory, applies the Deployment (rolling update, maxUnavailable 0) and
Service, waits until the rollout is done AND the version is AVAILABLE in TF Serving (its REST
status, through the API server's service proxy unless a URL is given), optionally smoke-tests
:predict, and on any failure re-applies the previous pod template (apps/v1 has no rollback
API) and fails. `target="kserve"` renders a KServe InferenceService instead."""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any, ClassVar, Literal, get_args

from volcano_pipelines.deadline import Deadline
from volcano_pipelines.errors import InputError
from volcano_pipelines.steps.registry import WHOLE, Output
from volcano_pipelines.k8s.connection import Connection, Namespace
from volcano_pipelines.interface.params import check_types
from volcano_pipelines.objects.serving import (
    GRPC_PORT,
    REST_PORT,
    VersionPolicy,
    ServingSpec,
    build_inference_service,
    build_serving,
    selector,
)
from volcano_pipelines.objects.rollout import TEMPLATE_HASH_ANNOTATION
from volcano_pipelines.lifecycle.tfserving import (
    ModelStatus,
    check_export_layout,
    model_readiness,
    versions_to_prune,
)
from volcano_pipelines.progress import Progress
from volcano_pipelines.steps._service_groups import ImagePullSecrets, ObjectLabels, Placement
from volcano_pipelines.steps._service_checks import check_common, require_pvc
from volcano_pipelines.objects.validate import (
    check_bounded,
    check_http_url,
    check_relative_path,
)

__all__ = ["TARGETS", "ServeResult", "local_listing", "serve", "smoke_test", "wait_model_available"]

log = logging.getLogger(__name__)

Target = Literal["deployment", "kserve"]
TARGETS: tuple[str, ...] = get_args(Target)
MODEL_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,199}")
STATUS_INTERVAL_SECONDS = 2.0
ROLLBACK_WAIT_SECONDS = 120.0

Fetch = Callable[[str, str, Any], tuple[int, str]]  # (method, path under the REST root, JSON body) -> (status, text)


@dataclass
class ServeResult:
    # The KFP component's output parameters (steps/registry.py); -1: no version served.
    OUTPUTS: ClassVar[tuple[Output, ...]] = (
        Output("rest_endpoint", "in-cluster REST URL of the model", missing=""),
        Output("grpc_endpoint", "in-cluster gRPC host:port", missing=""),
        Output("version", "the newest version served (-1 when none, e.g. a dry run)", missing=-1),
        Output("succeeded", "the model is served"),
        Output("result", "the whole step result (ServeResult.to_dict())", WHOLE),
    )

    name: str
    namespace: str
    model_name: str
    succeeded: bool
    target: str = "deployment"
    created: bool = False  # False: an existing Deployment was updated
    rest_endpoint: str | None = None  # in-cluster REST URL of the model
    grpc_endpoint: str | None = None  # in-cluster gRPC host:port
    served_versions: list[int] = field(default_factory=list)
    version: int | None = None  # the newest version served
    rolled_back: bool = False
    smoke_test: dict[str, Any] | None = None  # status, ok, detail
    pruned: list[int] = field(default_factory=list)  # version directories deleted (keep_versions)
    warnings: list[str] = field(default_factory=list)
    message: str | None = None
    manifests: list[dict[str, Any]] | None = None  # dry run / kserve: what would be applied

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        if self.manifests is None:
            del out["manifests"]
        return out


def local_listing(path: str) -> dict[str, list[str] | None] | None:
    """A directory as check_export_layout reads it: entry -> its entries (None for files).
    None when the directory does not exist."""
    if not os.path.isdir(path):
        return None
    out: dict[str, list[str] | None] = {}
    for entry in os.scandir(path):
        if entry.is_dir(follow_symlinks=False):
            try:
                out[entry.name] = sorted(os.listdir(entry.path))
            except OSError:
                out[entry.name] = []
        else:
            out[entry.name] = None
    return out


def wait_model_available(fetch: Fetch, model_name: str, want: Sequence[int] | None, timeout: float, *,
                         clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep,
                         interval: float = STATUS_INTERVAL_SECONDS,
                         on_change: Callable[[str], None] | None = None) -> ModelStatus:
    """Ask TF Serving for the model's status until the wanted versions (None: any version)
    are AVAILABLE, a wanted version failed to load, or `timeout` seconds pass. TF Serving
    answers while a version still loads: only the state counts."""
    deadline = Deadline.after(timeout, clock)
    last = ""
    while True:
        status, text = fetch("GET", f"v1/models/{model_name}", None)
        try:
            body: Any = json.loads(text) if text else {}
        except ValueError:
            body = {"error": f"HTTP {status}: {text[:200]}"}
        if status == 0 or (status >= 500 and not isinstance(body, Mapping)):
            body = {"error": f"no answer (HTTP {status}): {text[:200]}"}
        state = model_readiness(body, want)
        if state.message != last and on_change is not None:
            on_change(f"model {model_name}: {state.message}")
        last = state.message
        if state.ready or state.failed:
            return state
        if deadline.expired():
            return ModelStatus(False, True, state.served, f"not AVAILABLE after {timeout:g}s: {state.message}")
        sleep(deadline.clamp(interval))


def smoke_test(fetch: Fetch, model_name: str, payload: Mapping[str, Any]) -> dict[str, Any]:
    """One REST :predict with `payload`: ok when TF Serving answers 200 with predictions."""
    status, text = fetch("POST", f"v1/models/{model_name}:predict", dict(payload))
    try:
        body = json.loads(text) if text else {}
    except ValueError:
        body = {}
    ok = status == 200 and isinstance(body, Mapping) and ("predictions" in body or "outputs" in body)
    detail = "predictions returned" if ok else (str(body.get("error")) if isinstance(body, Mapping) and body.get("error")
                                                else text[:300] or "no answer")
    return {"status": status, "ok": ok, "detail": detail}


def serve(
    name: str,
    *,
    pvc: str,
    model_name: str | None = None,
    model_path: str | None = None,
    model_dir_local: str | None = None,
    namespace: Namespace = None,
    image: str | None = None,
    replicas: int = 1,
    cpu: str = "500m",
    memory: str = "1Gi",
    gpus: int = 0,
    version_policy: VersionPolicy = "latest",
    versions: Sequence[int] | None = None,
    smoke_payload: str | None = None,
    keep_versions: int | None = None,
    rest_url: str | None = None,
    target: Target = "deployment",
    timeout: float = 600,
    object_labels: ObjectLabels = ObjectLabels(),
    image_pull_secrets: ImagePullSecrets = None,
    placement: Placement = Placement(),
    dry_run: bool = False,
    connection: Connection = Connection(),
    progress: Progress | None = None,
) -> ServeResult:
    """Serve the exported model with TF Serving and wait until the version is AVAILABLE;
    smoke-test it if asked; on a failed rollout or smoke test, roll back to the previous
    revision and fail. Export contract: <pvc>/<model_path>/<integer version>/saved_model.pb.

    Args:
        name: name of the Deployment and Service (DNS label, starting with a letter)
        pvc: PVC holding the exported model (the log PVC; mounted read-only)
        model_name: name the model is served under (default: name)
        model_path: the model's base path on the PVC, holding numbered versions (default: export/<model_name>)
        model_dir_local: the same directory as this step sees it (a mounted path): check the export layout before deploying
        image: TF Serving image (default: tensorflow/serving, pinned; the -gpu variant with gpus)
        replicas: serving pods
        cpu: CPU request per pod
        memory: memory request and limit per pod
        gpus: nvidia.com/gpu per pod
        version_policy: which versions to serve: latest, all, or specific (with versions)
        versions: version_policy specific: the versions to serve
        smoke_payload: JSON body of a REST :predict request that must succeed after the rollout, e.g. {"instances": [[1.0]]}
        keep_versions: after a good rollout, delete all but the newest N version directories (needs model_dir_local)
        rest_url: base URL of TF Serving's REST API for the status and smoke test (default: the Service inside a cluster, else through the API server's service proxy)
        target: deployment (TF Serving Deployment + Service) or kserve (print a KServe InferenceService; nothing is applied)
        timeout: seconds for the rollout and the model to become AVAILABLE
        dry_run: print the objects; create nothing
    """
    check_types(serve, locals())
    progress = progress or Progress()
    model_name = model_name or name
    check_common(name=name, namespace=namespace, pvc_field="pvc", pvc=pvc, image=image, cpu=cpu, memory=memory,
                 image_pull_secrets=image_pull_secrets, timeout=timeout)
    run_id, labels, istio_sidecar = object_labels.checked()
    if not isinstance(model_name, str) or not MODEL_NAME.fullmatch(model_name):
        raise InputError("model_name", model_name, "letters, digits, '_', '.' and '-', starting with a letter or digit (at most 200)")
    model_path = model_path if model_path is not None else f"export/{model_name}"
    if isinstance(model_path, str) and model_path.startswith("/"):
        # The PVC is mounted in the pod: /etc would silently have meant <pvc>/etc.
        raise InputError("model_path", model_path, "a path relative to the PVC's root, e.g. export/mnist")
    check_relative_path("model_path", model_path)
    node_selector, tolerations = placement.checked()
    check_bounded("replicas", replicas, 1, 100)
    check_bounded("gpus", gpus, 0, 16)
    # target, version_policy and the versions' type: check_types above (their Literal / int hints).
    wanted = list(versions or ())
    if any(v < 0 for v in wanted):
        raise InputError("versions", versions, "integer version numbers >= 0")
    if version_policy == "specific" and not wanted:
        raise InputError("versions", versions, "at least one version with version_policy specific")
    if wanted and version_policy != "specific":
        raise InputError("versions", versions, "only with version_policy specific")
    payload = _payload(smoke_payload)
    if keep_versions is not None:
        check_bounded("keep_versions", keep_versions, 1, 10_000)
        if model_dir_local is None:
            raise InputError("keep_versions", keep_versions, "only with model_dir_local (the step must see the model directory)")
    if rest_url is not None:
        check_http_url("rest_url", rest_url)
    if target == "kserve":
        for flag, value in (("smoke_payload", smoke_payload), ("keep_versions", keep_versions), ("rest_url", rest_url)):
            if value is not None:
                raise InputError(flag, value, "not with target kserve (the InferenceService is only rendered)")
        if version_policy != "latest":
            raise InputError("version_policy", version_policy, "latest with target kserve")
    warnings: list[str] = []
    want: list[int] | None = wanted or None
    layout_versions: dict[int, str] = {}
    if model_dir_local is not None:
        layout = check_export_layout(model_dir_local, local_listing(model_dir_local))
        if not layout.ok:
            raise InputError("model_dir_local", model_dir_local, "a TF Serving model directory: " + "; ".join(layout.problems))
        warnings += layout.warnings
        for entry in os.listdir(model_dir_local):
            if entry.isascii() and entry.isdigit():
                layout_versions[int(entry)] = entry
        missing = [v for v in wanted if v not in layout.versions]
        if missing:
            raise InputError("versions", missing, f"exported versions (found {', '.join(map(str, layout.versions))})")
        if version_policy == "latest":
            want = [max(layout.versions)]
        elif version_policy == "all":
            want = list(layout.versions)
    for line in warnings:
        log.warning("%s", line)
    spec = ServingSpec(name=name, namespace=namespace or "default", model_name=model_name, pvc=pvc, model_path=model_path,
                       image=image, replicas=replicas, cpu=cpu, memory=memory, gpus=gpus, version_policy=version_policy,
                       versions=tuple(wanted), run_id=run_id, labels=labels,
                       image_pull_secrets=tuple(image_pull_secrets or ()),
                       node_selector=node_selector, tolerations=tolerations,
                       progress_deadline_seconds=max(60, int(timeout)), istio_sidecar=istio_sidecar)
    if (target == "kserve" or dry_run) and namespace is None:  # where the real one would go: the context's
        spec = replace(spec, namespace=connection.default_namespace())
    if target == "kserve":
        return ServeResult(name=name, namespace=spec.namespace, model_name=model_name, succeeded=True, target=target,
                           manifests=[build_inference_service(spec)], warnings=warnings,
                           message="rendered a KServe InferenceService; nothing was applied")
    if dry_run:
        return ServeResult(name=name, namespace=spec.namespace, model_name=model_name, succeeded=True,
                           manifests=build_serving(spec), warnings=warnings, message="dry run: nothing was created")

    from volcano_pipelines.k8s import apps
    cluster = connection.connect()
    spec = replace(spec, namespace=namespace or cluster.namespace)
    ns = spec.namespace
    require_pvc(cluster, ns, "pvc", pvc)
    apps.check_all(cluster, build_serving(spec))
    previous = apps.get(cluster, "apps/v1", "Deployment", ns, name)
    budget = Deadline.after(timeout, time.monotonic)
    objects = build_serving(spec)
    deployment = apps.apply(cluster, next(o for o in objects if o["kind"] == "Deployment"))
    for obj in build_serving(spec, apps.owner_of(deployment)):
        if obj["kind"] != "Deployment":
            apps.apply(cluster, obj)
    progress.note(f"serve {ns}/{name}: {'updated' if previous else 'created'} (model {model_name}, {model_path} on {pvc})")
    result = ServeResult(name=name, namespace=ns, model_name=model_name, succeeded=False, created=previous is None,
                         rest_endpoint=f"http://{name}.{ns}.svc:{REST_PORT}/v1/models/{model_name}",
                         grpc_endpoint=f"{name}.{ns}.svc:{GRPC_PORT}", warnings=warnings)
    template_hash = deployment["spec"]["template"]["metadata"]["annotations"][TEMPLATE_HASH_ANNOTATION]
    rollout = apps.wait_for_rollout(cluster, ns, name, selector=selector(name), template_hash=template_hash,
                                    timeout=timeout, on_change=progress.note)
    failure = None if rollout.done else f"rollout failed: {rollout.message}"
    if failure is None:
        direct = rest_url or _in_cluster_url(name, ns, connection)
        fetch = _direct_fetch(direct) if direct else _proxy_fetch(cluster, ns, name)
        remaining = max(1.0, budget.remaining())
        model = wait_model_available(fetch, model_name, want, remaining, on_change=progress.note)
        result.served_versions = list(model.served)
        result.version = max(model.served) if model.served else None
        if not model.ready:
            failure = f"model {model_name} is not served: {model.message}"
        elif payload is not None:
            result.smoke_test = smoke_test(fetch, model_name, payload)
            if not result.smoke_test["ok"]:
                failure = f"smoke test failed (HTTP {result.smoke_test['status']}): {result.smoke_test['detail']}"
    if failure is not None:
        result.message = failure + "; " + _roll_back(cluster, ns, name, previous, progress)
        result.rolled_back = previous is not None
        return result
    if keep_versions is not None and model_dir_local is not None:
        result.pruned = _prune(model_dir_local, layout_versions, keep_versions, result.served_versions)
    result.succeeded = True
    result.message = f"model {model_name} version {result.version} AVAILABLE at {result.rest_endpoint}"
    return result


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")  # Python's json takes NaN / Infinity; JSON (and TF Serving) does not


def _payload(text: str | None) -> dict[str, Any] | None:
    if text is None:
        return None
    try:
        value = json.loads(text, parse_constant=_no_constant)
    except ValueError as err:
        raise InputError("smoke_payload", text, f"a JSON object such as {{\"instances\": [[1.0, 2.0]]}} ({err})") from None
    if not isinstance(value, dict):
        raise InputError("smoke_payload", text, "a JSON object such as {\"instances\": [[1.0, 2.0]]}")
    return value


def _in_cluster_url(name: str, namespace: str, connection: Connection) -> str | None:
    """Inside a pod (in-cluster configuration, as connect() would choose it) the Service is
    reached directly: no API server proxy, and no permission on services/proxy needed."""
    if not connection.in_cluster:
        return None
    return f"http://{name}.{namespace}.svc:{REST_PORT}"


def _proxy_fetch(cluster: Any, namespace: str, service: str) -> Fetch:
    from volcano_pipelines.k8s import apps

    def fetch(method: str, path: str, body: Any) -> tuple[int, str]:
        return apps.proxy_request(cluster, namespace, service, REST_PORT, path, method=method, body=body)

    return fetch


def _direct_fetch(base: str) -> Fetch:
    def fetch(method: str, path: str, body: Any) -> tuple[int, str]:
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(f"{base.rstrip('/')}/{path}", data=data, method=method,
                                         headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                return int(response.status), response.read().decode("utf-8", "replace")
        except urllib.error.HTTPError as err:
            return int(err.code), err.read().decode("utf-8", "replace")
        except (urllib.error.URLError, OSError) as err:
            return 0, str(getattr(err, "reason", err))

    return fetch


def _roll_back(cluster: Any, namespace: str, name: str, previous: Mapping[str, Any] | None, progress: Progress) -> str:
    """Re-apply the pod template that ran before this step (the previous revision)."""
    from volcano_pipelines.k8s import apps

    if previous is None:
        return "no previous revision to roll back to: the Deployment is left as it is for inspection"
    template = previous["spec"]["template"]
    apps.patch(cluster, "apps/v1", "Deployment", namespace, name,
               [{"op": "replace", "path": "/spec/template", "value": template}], json_patch=True)
    progress.note(f"serve {namespace}/{name}: rolling back to the previous revision")
    old_hash = ((template.get("metadata") or {}).get("annotations") or {}).get(TEMPLATE_HASH_ANNOTATION, "")
    back = apps.wait_for_rollout(cluster, namespace, name, selector=selector(name), template_hash=old_hash,
                                 timeout=ROLLBACK_WAIT_SECONDS, on_change=progress.note)
    if back.done:
        return "rolled back to the previous revision"
    return f"rolled back to the previous revision, which is not ready yet: {back.message}"


def _prune(model_dir: str, names: Mapping[int, str], keep: int, served: Sequence[int]) -> list[int]:
    """Delete old numbered version directories, bounded by versions_to_prune: never a served
    one, never a symlink, never outside model_dir."""
    root = os.path.realpath(model_dir)
    pruned: list[int] = []
    for version in versions_to_prune(names, keep, served):
        path = os.path.join(model_dir, names[version])
        real = os.path.realpath(path)
        if os.path.islink(path) or os.path.dirname(real) != root or not os.path.isdir(real):
            log.warning("not pruning %s: not a version directory inside %s", path, model_dir)
            continue
        shutil.rmtree(real)
        pruned.append(version)
    return pruned
