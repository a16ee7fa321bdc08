"""Connecting to the cluster and turning client exceptions into the package's error types."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass

import urllib3
from kubernetes import client, config
from kubernetes.client.rest import ApiException
from kubernetes.config.config_exception import ConfigException

from volcano_pipelines import __version__
from volcano_pipelines.errors import ClusterError, VpipeError, WorkFailed

USER_AGENT = "vpipe"

# Errors that mean "the API server is not answering right now" (restarting, network blip).
TRANSIENT_ERRORS: tuple[type[BaseException], ...] = (
    urllib3.exceptions.HTTPError,  # MaxRetryError, ProtocolError, ReadTimeoutError, ...
    ConnectionError,
    TimeoutError,
)
TRANSIENT_STATUS = frozenset({429, 500, 502, 503, 504})


@dataclass
class Cluster:
    api: client.ApiClient
    core: client.CoreV1Api
    custom: client.CustomObjectsApi
    host: str

    def to_dict(self, obj: object) -> dict:
        """Typed client models to the plain camelCase dicts the pure layer reads."""
        return self.api.sanitize_for_serialization(obj)


def connect(kubeconfig: str | None = None, context: str | None = None) -> Cluster:
    """A kubeconfig named explicitly, else in-cluster config inside a pod, else the default
    kubeconfig ($KUBECONFIG or ~/.kube/config)."""
    configuration = client.Configuration()
    try:
        if kubeconfig:
            if not os.path.exists(kubeconfig):
                raise ClusterError(f"kubeconfig {kubeconfig!r} does not exist")
            config.load_kube_config(config_file=kubeconfig, context=context, client_configuration=configuration)
        elif os.environ.get("KUBERNETES_SERVICE_HOST") and not context:
            config.load_incluster_config(client_configuration=configuration)
        else:
            config.load_kube_config(context=context, client_configuration=configuration)
    except (ConfigException, OSError) as err:
        raise ClusterError(f"cannot load Kubernetes configuration: {err}") from err
    # The default pool of 1 retry hides outages from our own resume logic; keep retries ours.
    configuration.retries = 0
    api = client.ApiClient(configuration)
    # Lets operators (and our benchmarks) tell this tool's requests apart in audit logs.
    api.user_agent = f"{USER_AGENT}/{__version__}"
    return Cluster(api=api, core=client.CoreV1Api(api), custom=client.CustomObjectsApi(api), host=configuration.host)


def is_transient(err: BaseException) -> bool:
    if isinstance(err, ApiException):
        return err.status in TRANSIENT_STATUS or err.status == 0
    return isinstance(err, TRANSIENT_ERRORS)


def api_error(err: BaseException, action: str, cluster: Cluster | None = None) -> VpipeError:
    """One clear sentence for what went wrong talking to the API server."""
    where = f" at {cluster.host}" if cluster else ""
    if isinstance(err, ApiException):
        detail = _api_message(err)
        if err.status in (401, 403):
            return ClusterError(f"permission denied to {action}{where} (HTTP {err.status}): {detail}")
        if err.status == 404:
            return ClusterError(f"not found while trying to {action}{where}: {detail} (are Volcano's CRDs installed?)")
        if err.status == 422:
            return WorkFailed(f"the API server rejected the object while trying to {action}: {detail}")
        return ClusterError(f"cannot {action}{where} (HTTP {err.status}): {detail}")
    return ClusterError(f"cannot reach the Kubernetes API server{where} to {action}: {err}")


def _api_message(err: ApiException) -> str:
    try:
        body = json.loads(err.body or "{}")
        return str(body.get("message") or err.reason)
    except (ValueError, TypeError):
        return str(err.reason)
