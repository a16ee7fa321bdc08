"""Connecting to the cluster: kubeconfig / in-cluster / context (with the context's namespace),
the API groups the steps use, and the one retry policy every call goes through."""

from __future__ import annotations

import json
import logging
import os
import time
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, TypeVar, cast
from urllib.parse import urlsplit

import urllib3
import yaml
from kubernetes import client, config
from kubernetes.client.rest import ApiException
from kubernetes.config.config_exception import ConfigException

from volcano_pipelines import __version__
from volcano_pipelines.errors import ClusterError
from volcano_pipelines.k8s import retry
from volcano_pipelines.k8s.errors import BadAnswer, OutOfTime
# The one reader of the namespace a request given none goes to (dry runs and render use it too).
from volcano_pipelines.k8s.kubeconfig import DEFAULT_NAMESPACE, IN_CLUSTER_NAMESPACE_FILE, check_named, default_namespace
from volcano_pipelines.k8s.kubeconfig import context_namespace as _context_namespace
from volcano_pipelines.k8s.kubeconfig import read_text as _read_text

__all__ = ["REQUEST_TIMEOUT_ENV", "BoundedApiClient", "Cluster", "IN_CLUSTER_NAMESPACE_FILE", "connect", "default_namespace"]

log = logging.getLogger(__name__)
T = TypeVar("T")

USER_AGENT = "vpipe"
# Seconds one request may take to connect, and then between bytes of the answer, unless the
# call sets its own (watches do). Without it a server that accepts and never answers holds a
# step forever: the client library's default is no limit at all.
REQUEST_TIMEOUT_SECONDS = 20.0
REQUEST_TIMEOUT_ENV = "VPIPE_REQUEST_TIMEOUT"
# Answers that are not objects and so carry no metadata (discovery, Status).
_NO_METADATA_KINDS = frozenset({"APIGroupList", "APIGroup", "APIResourceList", "APIVersions", "Status"})


class BoundedApiClient(client.ApiClient):  # type: ignore[misc]  # the client library is untyped
    """The client library's ApiClient with two guarantees it lacks: every request has a time
    limit (and none outlives `deadline`, the step's own limit), and every answer is checked
    to be what a Kubernetes API server sends (JSON with a `kind`) before anyone reads it: a
    kubeconfig pointing at a web page, another service or a binary port gets `BadAnswer`
    instead of an AttributeError / KeyError / UnicodeDecodeError deep inside a step."""

    def __init__(self, configuration: client.Configuration, request_timeout: float = REQUEST_TIMEOUT_SECONDS) -> None:
        super().__init__(configuration)
        self.request_timeout = request_timeout
        self.deadline: float | None = None  # time.monotonic() value; None: no step limit
        self.deadline_what = ""

    def request(self, method: str, url: str, query_params: Any = None, headers: Any = None, post_params: Any = None,
                body: Any = None, _preload_content: bool = True, _request_timeout: Any = None) -> Any:
        timeout = self._timeout(method, url, _request_timeout)
        try:
            response = super().request(method, url, query_params=query_params, headers=headers,
                                       post_params=post_params, body=body, _preload_content=_preload_content,
                                       _request_timeout=timeout)
        except UnicodeDecodeError:  # the library decodes every answer as UTF-8 before looking at it
            raise self._bad(method, url, "a binary answer (not UTF-8 text)") from None
        except ApiException as err:
            _check_error_answer(self, method, url, err)
            raise
        _check_answer(self, method, url, response, _preload_content)
        return response

    def _timeout(self, method: str, url: str, asked: Any) -> tuple[float, float]:
        """(connect, read) seconds. The library takes an int or a pair and silently ignores a
        float (no limit at all), so the pair is always given."""
        if isinstance(asked, tuple) and len(asked) == 2:
            connect, read = float(asked[0]), float(asked[1])
        elif isinstance(asked, (int, float)) and not isinstance(asked, bool) and asked > 0:
            connect, read = min(float(asked), self.request_timeout), float(asked)
        else:
            connect, read = self.request_timeout, self.request_timeout
        if self.deadline is not None:
            left = self.deadline - time.monotonic()
            if left <= 0:
                raise OutOfTime(f"{self.deadline_what} ran out before {method} {_path(url)} was answered by the "
                                f"API server at {self.configuration.host}")
            connect, read = min(connect, left), min(read, left)
        return connect, read

    def _bad(self, method: str, url: str, what: str) -> BadAnswer:
        return BadAnswer(f"the server at {self.configuration.host} is not answering like a Kubernetes API server: "
                         f"{method} {_path(url)} got {what}; check the kubeconfig's server address")


def _path(url: str) -> str:
    return urlsplit(url).path or "/"


def _check_answer(api: BoundedApiClient, method: str, url: str, response: Any, preloaded: bool) -> None:
    """A 2xx answer (errors were raised as ApiException already) must be JSON; a preloaded one
    must be an object with a `kind` (and metadata where objects have it). A pod's log and a
    service reached through the API server's proxy answer whatever they answer."""
    path = _path(url)
    if "/proxy/" in path or path.endswith("/proxy") or path.endswith("/log"):
        return
    headers = response.getheaders() if preloaded else response.headers
    kind_of_content = str((headers or {}).get("Content-Type") or "")
    if not preloaded:  # a watch stream: only its declared type can be checked before reading
        if "json" not in kind_of_content.lower():
            raise api._bad(method, url, f"HTTP {response.status} with Content-Type {kind_of_content or 'missing'!r}")
        return
    text = response.data if isinstance(response.data, str) else ""
    try:
        data = json.loads(text)
    except ValueError:
        raise api._bad(method, url, f"HTTP {response.status} {kind_of_content or 'without Content-Type'}: "
                       f"{_excerpt(text)}") from None
    if not isinstance(data, dict) or not isinstance(data.get("kind"), str) or (
            data["kind"] not in _NO_METADATA_KINDS and not isinstance(data.get("metadata"), dict)):
        raise api._bad(method, url, f"HTTP {response.status} JSON that is not a Kubernetes object: {_excerpt(text)}")


# The API server's own answer for a path no API group serves (e.g. a CRD not installed): plain
# text, not a Status. Any other refusal from a Kubernetes API server is a JSON Status.
_APISERVER_PLAIN_404 = "404 page not found"
# Refusals that mean the same from any server in front of the API (a login page, a proxy's
# throttling or gateway page): left to the status code (Forbidden, retried as transient).
_ANY_SERVER_STATUSES = frozenset({401, 403, 408, 429})


def _check_error_answer(api: BoundedApiClient, method: str, url: str, err: ApiException) -> None:
    """A 4xx must come as a Kubernetes Status: a web server's "404 Not Found" page read as
    "that PVC does not exist" would blame the user's input (exit 2) for a wrong server."""
    status = int(err.status or 0)
    if not 400 <= status < 500 or status in _ANY_SERVER_STATUSES:
        return
    body = err.body.decode("utf-8", "replace") if isinstance(err.body, bytes) else str(err.body or "")
    if status == 404 and body.strip() == _APISERVER_PLAIN_404:
        return
    try:
        data = json.loads(body)
    except ValueError:
        data = None
    if isinstance(data, dict) and data.get("kind") == "Status":
        return
    content = str((err.headers or {}).get("Content-Type") or "without Content-Type")
    raise api._bad(method, url, f"HTTP {status} {content}: {_excerpt(body)}") from None


def _excerpt(text: str) -> str:
    flat = " ".join(text.split())
    return repr(flat[:80] + ("..." if len(flat) > 80 else "")) if flat else "an empty body"


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
        try:
            return retry.call(action, fn, host=self.host, policy=self.policy, sleep=self.sleep)
        except (BadAnswer, OutOfTime) as err:
            if err.action:
                raise
            raise type(err)(f"{err} (while trying to {action})", status=err.status, action=action) from None

    @contextmanager
    def within(self, seconds: float | None, what: str) -> Iterator[None]:
        """Every request made inside ends by `seconds` from now (a step's --timeout): a slow
        or silent API server cannot hold the step past its own limit."""
        api = self.api
        if seconds is None or not isinstance(api, BoundedApiClient):
            yield
            return
        saved = api.deadline, api.deadline_what
        api.deadline, api.deadline_what = time.monotonic() + seconds, what
        try:
            yield
        finally:
            api.deadline, api.deadline_what = saved

    def to_dict(self, obj: object) -> dict[str, Any]:
        """Typed client models to the plain camelCase dicts the pure layer reads."""
        return cast(dict[str, Any], self.api.sanitize_for_serialization(obj))


def connect(kubeconfig: str | None = None, context: str | None = None) -> Cluster:
    """A kubeconfig named explicitly, else in-cluster config inside a pod, else the default
    kubeconfig ($KUBECONFIG or ~/.kube/config). The namespace is the context's, as kubectl
    does (the pod's own inside a cluster), else `default`."""
    configuration = client.Configuration()
    namespace = DEFAULT_NAMESPACE
    check_named(kubeconfig, context)  # a file or context that is not there: bad input, as render says it
    try:
        if not kubeconfig and os.environ.get("KUBERNETES_SERVICE_HOST") and not context:
            config.load_incluster_config(client_configuration=configuration)
            namespace = _read_text(IN_CLUSTER_NAMESPACE_FILE) or namespace
        else:
            if not kubeconfig:
                _check_default_kubeconfig()
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
    api = BoundedApiClient(configuration, _request_timeout())
    # Lets operators (and our benchmarks) tell this tool's requests apart in audit logs.
    api.user_agent = f"{USER_AGENT}/{__version__}"
    return Cluster(api=api, host=configuration.host, namespace=namespace)


def _request_timeout() -> float:
    raw = os.environ.get(REQUEST_TIMEOUT_ENV, "").strip()
    if not raw:
        return REQUEST_TIMEOUT_SECONDS
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not 0 < value <= 3600:
        from volcano_pipelines.errors import InputError

        raise InputError(REQUEST_TIMEOUT_ENV, raw, "seconds per API request, more than 0 and at most 3600")
    return value


def _check_default_kubeconfig() -> None:
    """The library says "Invalid kube-config file. No configuration found." for a file that is
    simply not there: say what is missing and how to name one."""
    paths = [p for p in os.environ.get("KUBECONFIG", "").split(os.pathsep) if p]
    if not paths:
        paths = [os.path.expanduser("~/.kube/config")]
    if not any(os.path.exists(p) for p in paths):
        named = " nor ".join(repr(p) for p in paths)
        where = f"$KUBECONFIG names {named}" if os.environ.get("KUBECONFIG") else f"the default kubeconfig {named}"
        raise ClusterError(f"no Kubernetes configuration: {where}, which does not exist, and this is not a pod in a "
                           "cluster (KUBERNETES_SERVICE_HOST is not set); name a kubeconfig with --kubeconfig")


def _config_path(kubeconfig: str | None) -> str:
    if kubeconfig:
        return kubeconfig
    return os.environ.get("KUBECONFIG", "").split(os.pathsep)[0] or os.path.expanduser("~/.kube/config")


def _yaml_where(err: yaml.YAMLError) -> str:
    mark = getattr(err, "problem_mark", None)
    problem = getattr(err, "problem", None) or str(err).splitlines()[0]
    return f"line {mark.line + 1}, column {mark.column + 1}: {problem}" if mark is not None else str(problem)
