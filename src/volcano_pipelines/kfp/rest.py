"""KFP's REST API (v2beta1), the two calls scheduled retraining needs, made directly with a
time limit on every request and a check of every answer: kfp.Client waits for ever on a server
that never answers, retries errors with tracebacks, and takes any JSON (or an HTML login page)
as success. No KFP server can run here: the tests drive this against local servers that
answer as KFP's REST API documents, and as hostile ones do."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from volcano_pipelines.errors import ClusterError, InputError

__all__ = ["HOST_HELP", "REQUEST_TIMEOUT_SECONDS", "KfpApi", "check_host", "create"]

REQUEST_TIMEOUT_SECONDS = 30.0
MAX_ANSWER_BYTES = 4 * 1024 * 1024  # an experiment or recurring run is a few kB
HOST_HELP = "the KFP API's URL: http:// or https://, a host name and an optional port (1-65535), e.g. http://ml-pipeline.kubeflow:8888"


def check_host(host: str) -> str:
    """The --host URL, without a trailing slash; refused before anything is sent (an empty
    host would otherwise mean localhost:80 to the client library)."""
    from urllib.parse import urlsplit

    text = host.strip() if isinstance(host, str) else ""
    try:
        parts = urlsplit(text)
        port = parts.port  # ValueError: not a number, or outside 0-65535
    except ValueError:
        raise InputError("host", host, HOST_HELP) from None
    if parts.scheme not in ("http", "https") or not parts.hostname or port == 0 or parts.query or parts.fragment \
            or any(c.isspace() for c in text):
        raise InputError("host", host, HOST_HELP)
    return text.rstrip("/")


class KfpApi:
    """The two calls scheduling needs, made directly on KFP's REST API (v2beta1) with a time
    limit on every request and a check of every answer: kfp.Client waits for ever on a server
    that never answers, retries errors with tracebacks, and takes any JSON (or an HTML login
    page) as success."""

    def __init__(self, host: str, *, token: str | None = None, ca_file: str | None = None,
                 timeout: float = REQUEST_TIMEOUT_SECONDS) -> None:
        import urllib3

        self.host = check_host(host)
        self.timeout = timeout
        self.headers = {"Accept": "application/json", "Content-Type": "application/json"}
        if token:
            self.headers["Authorization"] = f"Bearer {token}"
        kwargs: dict[str, Any] = {"retries": False, "timeout": urllib3.Timeout(connect=min(10.0, timeout), read=timeout)}
        if ca_file:
            kwargs["ca_certs"] = ca_file
        self.pool = urllib3.PoolManager(**kwargs)

    def call(self, action: str, method: str, path: str, *, query: Mapping[str, str] | None = None,
             body: Any = None) -> dict[str, Any]:
        """One request; the JSON object answered. Anything else is a ClusterError (exit 3) that
        names the host and what was being done."""
        import time
        from urllib.parse import urlencode

        import urllib3

        url = self.host + path + (f"?{urlencode(dict(query))}" if query else "")
        where = f"the KFP API at {self.host}"
        deadline = time.monotonic() + self.timeout * 2
        try:
            response = self.pool.request(method, url, headers=self.headers, preload_content=False,
                                         body=None if body is None else json.dumps(body).encode())
            try:
                data = b""
                for chunk in response.stream(65536):
                    data += chunk
                    if len(data) > MAX_ANSWER_BYTES or time.monotonic() > deadline:
                        raise ClusterError(f"{where} sent more than it should to {action} "
                                           f"({len(data)} bytes in {self.timeout * 2:g}s); is it the KFP API?")
            finally:
                response.release_conn()
        except urllib3.exceptions.NewConnectionError as err:  # refused, no such host (a subclass of timeouts)
            raise ClusterError(f"cannot reach {where} to {action}: {err}") from None
        except urllib3.exceptions.TimeoutError:
            raise ClusterError(f"{where} did not answer within {self.timeout:g}s while trying to {action}") from None
        except urllib3.exceptions.HTTPError as err:  # refused, DNS, TLS, a dropped connection
            reason = getattr(err, "reason", None) or err
            raise ClusterError(f"cannot reach {where} to {action}: {reason}") from None
        text = data.decode("utf-8", "replace")
        if response.status in (401, 403):
            raise ClusterError(f"{where} refused to {action} (HTTP {response.status}): permission denied; "
                               f"check --token-file and --namespace. It said: {_excerpt(text)}")
        if not 200 <= response.status <= 299:
            raise ClusterError(f"{where} could not {action} (HTTP {response.status}): {_excerpt(text)}")
        try:
            answer = json.loads(text)
        except ValueError:
            answer = None
        if not isinstance(answer, dict):
            kind = response.headers.get("Content-Type") or "no Content-Type"
            raise ClusterError(f"{where} did not answer like the KFP API while trying to {action}: HTTP "
                               f"{response.status} {kind}: {_excerpt(text)}; check --host (the ml-pipeline "
                               "service, port 8888, or the API's path behind your gateway)")
        return answer

    def experiment_id(self, name: str, namespace: str | None) -> str:
        """The experiment named `name` (created when there is none), as kfp.Client does it."""
        query = {"filter": json.dumps({"predicates": [{"operation": "EQUALS", "key": "display_name",
                                                         "stringValue": name}]})}
        if namespace:
            query["namespace"] = namespace
        found = self.call(f"find experiment {name!r}", "GET", "/apis/v2beta1/experiments", query=query)
        experiments = found.get("experiments", [])
        if not isinstance(experiments, list) or not all(isinstance(e, dict) for e in experiments):
            raise ClusterError(f"the KFP API at {self.host} answered the experiment list with something else: "
                               f"{_excerpt(json.dumps(found))}")
        if len(experiments) > 1:
            raise ClusterError(f"the KFP API at {self.host} has {len(experiments)} experiments named {name!r}; "
                               "name one that is unique with --experiment")
        if experiments:
            return _field(experiments[0], "experiment_id", f"experiment {name!r}", self.host)
        body: dict[str, Any] = {"display_name": name}
        if namespace:
            body["namespace"] = namespace
        created = self.call(f"create experiment {name!r}", "POST", "/apis/v2beta1/experiments", body=body)
        return _field(created, "experiment_id", f"the new experiment {name!r}", self.host)

    def create_recurring_run(self, request: Mapping[str, Any]) -> str:
        created = self.call("create the recurring run", "POST", "/apis/v2beta1/recurringruns", body=dict(request))
        return _field(created, "recurring_run_id", "the new recurring run", self.host)


def _field(answer: Mapping[str, Any], key: str, what: str, host: str) -> str:
    value = answer.get(key)
    if not isinstance(value, str) or not value.strip():
        raise ClusterError(f"the KFP API at {host} answered without the {key} of {what}: "
                           f"{_excerpt(json.dumps(answer))}; is --host the KFP API?")
    return value


def _excerpt(text: str) -> str:
    flat = " ".join(text.split())
    return repr(flat[:200] + ("..." if len(flat) > 200 else "")) if flat else "an empty body"


def create(request: dict[str, Any], *, host: str, experiment: str, namespace: str | None = None,
           token: str | None = None, ca_file: str | None = None, timeout: float = REQUEST_TIMEOUT_SECONDS) -> str:
    """Send the request to the KFP API at `host` (finding or creating the experiment first);
    returns the recurring run's id. No KFP server can run here: the tests drive this against
    local servers that answer as KFP's REST API documents, and as hostile ones do."""
    api = KfpApi(host, token=token, ca_file=ca_file, timeout=timeout)
    if "experiment_id" not in request:
        request = {**request, "experiment_id": api.experiment_id(experiment, namespace)}
    return api.create_recurring_run(request)
