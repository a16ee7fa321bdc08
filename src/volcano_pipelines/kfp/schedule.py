"""Scheduled retraining on KFP: a recurring run of a compiled pipeline. The request is built
by pure functions (file text and flags in, a dict shaped like kfp_server_api's
V2beta1RecurringRun out) so every choice is testable without a KFP server: a cron of six
fields, one run at a time, no catch-up after a pause, no cached steps. `create` is the only
part that talks to a server."""

from __future__ import annotations

import json
import re
import warnings
from collections.abc import Mapping
from typing import Any

import yaml

from volcano_pipelines.errors import ClusterError, InputError

__all__ = ["CRON_FIELD", "arguments_for", "create", "cron_expression", "load_pipeline", "recurring_run_request", "to_model"]

CRON_FIELD = re.compile(r"^[0-9A-Za-z*/,?#\-]+$")
CRON_HELP = ("a cron expression of 5 fields (minute hour day-of-month month day-of-week) or 6 (seconds first, "
             "as KFP takes it), e.g. '0 2 * * *'")
_BOOLEANS = {"true": True, "false": False}


def cron_expression(raw: str) -> str:
    """KFP's scheduler takes six fields, seconds first; the usual five get '0' seconds."""
    fields = raw.split()
    if len(fields) not in (5, 6) or not all(CRON_FIELD.match(field) for field in fields):
        raise InputError("cron", raw, CRON_HELP)
    return " ".join(["0", *fields] if len(fields) == 5 else fields)


def load_pipeline(text: str, source: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """A compiled pipeline file (IR YAML: the pipeline spec, then an optional platform spec)
    -> (pipeline_spec, platform_spec), both checked against KFP's own schema."""
    from google.protobuf import json_format
    from kfp.pipeline_spec import pipeline_spec_pb2

    allowed = "a compiled KFP pipeline (IR YAML, as `vpipe compile` writes pipelines/*.yaml)"
    try:
        docs = [doc for doc in yaml.safe_load_all(text) if doc is not None]
    except yaml.YAMLError as err:
        raise InputError("pipeline-file", source, f"{allowed}; it is not valid YAML: {str(err).splitlines()[0]}") from None
    if not docs or not isinstance(docs[0], dict) or "root" not in docs[0] or "pipelineInfo" not in docs[0]:
        raise InputError("pipeline-file", source, f"{allowed}; it has no pipelineInfo / root (a component file?)")
    platform: dict[str, Any] = {}
    for doc in docs[1:]:
        if not isinstance(doc, dict):
            raise InputError("pipeline-file", source, f"{allowed}; a document after the first is not a mapping")
        platform.update(doc)
    try:
        json_format.ParseDict(docs[0], pipeline_spec_pb2.PipelineSpec())
        json_format.ParseDict(platform, pipeline_spec_pb2.PlatformSpec())
    except json_format.ParseError as err:
        raise InputError("pipeline-file", source, f"{allowed}; {err}") from None
    return docs[0], platform


def _parameter_value(name: str, kind: str, raw: str) -> Any:
    """A --param value as the pipeline parameter's type."""
    flag = f"{name}={raw}"
    if kind == "STRING":
        return raw
    if kind == "BOOLEAN":
        if raw.lower() not in _BOOLEANS:
            raise InputError("param", flag, f"{name} is a boolean: true or false")
        return _BOOLEANS[raw.lower()]
    if kind == "NUMBER_INTEGER":
        try:
            return int(raw)
        except ValueError:
            raise InputError("param", flag, f"{name} is an integer") from None
    if kind == "NUMBER_DOUBLE":
        try:
            return float(raw)
        except ValueError:
            raise InputError("param", flag, f"{name} is a number") from None
    want = {"LIST": list, "STRUCT": dict}.get(kind)
    if want is None:
        raise InputError("param", flag, f"{name} has the type {kind}, which cannot be given on a command line")
    try:
        value = json.loads(raw)
    except json.JSONDecodeError:
        value = None
    if not isinstance(value, want):
        raise InputError("param", flag, f"{name} is a JSON {'list' if want is list else 'object'}, e.g. "
                         + ('["a", "b"]' if want is list else '{"worker": "4"}'))
    return value


def arguments_for(pipeline_spec: Mapping[str, Any], raw: Mapping[str, str]) -> dict[str, Any]:
    """NAME=VALUE texts -> the run's parameters, typed by the pipeline's inputs; every
    required input must be given."""
    definitions: dict[str, Any] = ((pipeline_spec.get("root") or {}).get("inputDefinitions") or {}).get("parameters") or {}
    out: dict[str, Any] = {}
    for name, text in raw.items():
        if name not in definitions:
            raise InputError("param", f"{name}={text}", "a parameter of the pipeline: " + ", ".join(sorted(definitions)))
        out[name] = _parameter_value(name, definitions[name].get("parameterType", "STRING"), text)
    missing = sorted(name for name, spec in definitions.items() if not spec.get("isOptional") and name not in out)
    if missing:
        raise InputError("param", ", ".join(missing), "a value for every required parameter of the pipeline "
                         "(--param NAME=VALUE); missing: " + ", ".join(missing))
    return out


def _without_cache(pipeline_spec: dict[str, Any]) -> dict[str, Any]:
    """Every task of every DAG (the root's and nested ones, e.g. inside the exit handler)
    with caching off: a cached step would skip the new data or the retraining."""
    spec: dict[str, Any] = json.loads(json.dumps(pipeline_spec))  # a copy: the caller's dict stays as read
    dags = [spec.get("root", {}).get("dag")] + [c.get("dag") for c in (spec.get("components") or {}).values()]
    for dag in dags:
        for task in ((dag or {}).get("tasks") or {}).values():
            task["cachingOptions"] = {"enableCache": False}
    return spec


def recurring_run_request(
    *,
    pipeline_text: str,
    pipeline_source: str,
    cron: str,
    display_name: str | None = None,
    description: str | None = None,
    experiment_id: str | None = None,
    parameters: Mapping[str, str] | None = None,
    service_account: str | None = None,
    pipeline_root: str | None = None,
    enabled: bool = True,
) -> dict[str, Any]:
    """The body of KFP's CreateRecurringRun (v2beta1), field names as kfp_server_api's
    V2beta1RecurringRun spells them. experiment_id is filled in by `create` when None."""
    schedule = cron_expression(cron)
    pipeline_spec, platform_spec = load_pipeline(pipeline_text, pipeline_source)
    arguments = arguments_for(pipeline_spec, parameters or {})
    spec = _without_cache(pipeline_spec)
    # What kfp.Client sends: the bare spec, or both specs when there are platform settings.
    body_spec: dict[str, Any] = {"pipeline_spec": spec, "platform_spec": platform_spec} if platform_spec else spec
    runtime_config: dict[str, Any] = {"parameters": arguments}
    if pipeline_root:
        runtime_config["pipeline_root"] = pipeline_root
    request: dict[str, Any] = {
        "display_name": display_name or pipeline_spec["pipelineInfo"]["name"],
        "pipeline_spec": body_spec,
        "runtime_config": runtime_config,
        "trigger": {"cron_schedule": {"cron": schedule}},
        "max_concurrency": "1",  # int64 travels as a string; one retraining at a time
        "no_catchup": True,  # after a pause, run once, not once per missed slot
        "mode": "ENABLE" if enabled else "DISABLE",
    }
    for key, value in (("description", description), ("experiment_id", experiment_id),
                       ("service_account", service_account)):
        if value:
            request[key] = value
    return request


def to_model(request: Mapping[str, Any], model: str = "V2beta1RecurringRun") -> Any:
    """The request as kfp_server_api models (nested ones too): a field the API does not know
    fails here, before anything is sent."""
    import kfp_server_api

    cls = getattr(kfp_server_api, model)
    values: dict[str, Any] = {}
    for key, value in request.items():
        kind = cls.openapi_types.get(key)
        if kind is None:
            raise TypeError(f"{model} has no field {key!r}")
        if kind.startswith("V2beta1") and isinstance(value, Mapping):
            value = to_model(value, kind)
        values[key] = value
    return cls(**values)


def create(request: dict[str, Any], *, host: str, experiment: str, namespace: str | None = None,
           token: str | None = None) -> Any:
    """Send the request to the KFP API at `host` (finding or creating the experiment first).
    Not testable here: there is no KFP server in the test environment."""
    import kfp
    import kfp_server_api
    import urllib3

    try:
        with warnings.catch_warnings():
            # "This client only works with KFP v2.0.0-beta.2 and later": true, and not news to users.
            warnings.simplefilter("ignore", FutureWarning)
            client = kfp.Client(host=host, existing_token=token, namespace=namespace)
        if "experiment_id" not in request:
            request = {**request, "experiment_id": client.create_experiment(experiment, namespace=namespace).experiment_id}
        # kfp.Client.create_recurring_run reads a file and rewrites caching itself; send our body as built.
        return client._recurring_run_api.recurring_run_service_create_recurring_run(recurring_run=to_model(request))
    except kfp_server_api.ApiException as err:
        raise ClusterError(f"the KFP API at {host} refused the recurring run: {err.status} {err.reason}: "
                           f"{(err.body or '').strip()[:500]}") from None
    except (OSError, ValueError, urllib3.exceptions.HTTPError) as err:  # connection refused, bad URL, TLS
        raise ClusterError(f"cannot reach the KFP API at {host}: {err}") from None
