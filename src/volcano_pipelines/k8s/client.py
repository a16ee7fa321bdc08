"""Connecting to the cluster: kubeconfig / in-cluster / context (with the context's namespace),
the API groups the steps use, and the one retry policy every call goes through."""

from __future__ import annotations

import logging
import os
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar, cast

import urllib3
import yaml
from kubernetes import client, config
from kubernetes.config.config_exception import ConfigException

from volcano_pipelines import __version__
from volcano_pipelines.errors import ClusterError
from volcano_pipelines.k8s import retry

__all__ = ["Cluster", "IN_CLUSTER_NAMESPACE_FILE", "connect"]

log = logging.getLogger(__name__)
T = TypeVar("T")

USER_AGENT = "vpipe"
DEFAULT_NAMESPACE = "default"
IN_CLUSTER_NAMESPACE_FILE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"


@dataclass
class Cluster:
    api: client.ApiClient
    host: str
    namespace: str = DEFAULT_NAMESPACE  # the context's (or the pod's) namespace: used when none is given
    policy: retry.RetryPolicy = field(default_factory=retry.RetryPolicy)
    sleep: Callable[[float], None] = time.sleep

    @property
    def core(self) -> client.CoreV1Api:
        return client.CoreV1Api(self.api)

    @property
    def apps(self) -> client.AppsV1Api:
        return client.AppsV1Api(self.api)

    @property
    def batch(self) -> client.BatchV1Api:
        return client.BatchV1Api(self.api)

    @property
    def networking(self) -> client.NetworkingV1Api:
        return client.NetworkingV1Api(self.api)

    @property
    def custom(self) -> client.CustomObjectsApi:
        return client.CustomObjectsApi(self.api)

    def call(self, action: str, fn: Callable[[], T]) -> T:
        """One API call under the retry policy; errors are typed (k8s.errors)."""
        return retry.call(action, fn, host=self.host, policy=self.policy, sleep=self.sleep)

    def to_dict(self, obj: object) -> dict[str, Any]:
        """Typed client models to the plain camelCase dicts the pure layer reads."""
        return cast(dict[str, Any], self.api.sanitize_for_serialization(obj))


def connect(kubeconfig: str | None = None, context: str | None = None) -> Cluster:
    """A kubeconfig named explicitly, else in-cluster config inside a pod, else the default
    kubeconfig ($KUBECONFIG or ~/.kube/config). The namespace is the context's, as kubectl
    does (the pod's own inside a cluster), else `default`."""
    configuration = client.Configuration()
    namespace = DEFAULT_NAMESPACE
    try:
        if kubeconfig and not os.path.exists(kubeconfig):
            raise ClusterError(f"kubeconfig {kubeconfig!r} does not exist")
        if not kubeconfig and os.environ.get("KUBERNETES_SERVICE_HOST") and not context:
            config.load_incluster_config(client_configuration=configuration)
            namespace = _read_text(IN_CLUSTER_NAMESPACE_FILE) or namespace
        else:
            config.load_kube_config(config_file=kubeconfig, context=context, client_configuration=configuration)
            namespace = _context_namespace(kubeconfig, context) or namespace
    except yaml.YAMLError as err:
        raise ClusterError(f"kubeconfig {_config_path(kubeconfig)!r} is not valid YAML: {_yaml_where(err)}") from None
    except (ConfigException, OSError, TypeError, AttributeError) as err:
        raise ClusterError(f"cannot load Kubernetes configuration from {_config_path(kubeconfig)!r}: {err}") from None
    # Retries are ours (one policy, typed errors); the client's pool would retry silently.
    configuration.retries = 0
    if not configuration.verify_ssl:
        # Say it once in our words instead of urllib3's warning on every request.
        log.warning("TLS verification is off for %s (insecure-skip-tls-verify in the kubeconfig)", configuration.host)
        warnings.simplefilter("ignore", urllib3.exceptions.InsecureRequestWarning)
    api = client.ApiClient(configuration)
    # Lets operators (and our benchmarks) tell this tool's requests apart in audit logs.
    api.user_agent = f"{USER_AGENT}/{__version__}"
    return Cluster(api=api, host=configuration.host, namespace=namespace)


def _config_path(kubeconfig: str | None) -> str:
    if kubeconfig:
        return kubeconfig
    return os.environ.get("KUBECONFIG", "").split(os.pathsep)[0] or os.path.expanduser("~/.kube/config")


def _context_namespace(kubeconfig: str | None, context: str | None) -> str | None:
    contexts, active = config.list_kube_config_contexts(config_file=kubeconfig)
    chosen = next((c for c in contexts if c.get("name") == context), None) if context else active
    return ((chosen or {}).get("context") or {}).get("namespace") or None


def _read_text(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read().strip() or None
    except OSError:
        return None


def _yaml_where(err: yaml.YAMLError) -> str:
    mark = getattr(err, "problem_mark", None)
    problem = getattr(err, "problem", None) or str(err).splitlines()[0]
    return f"line {mark.line + 1}, column {mark.column + 1}: {problem}" if mark is not None else str(problem)
