"""Scheduled retraining on KFP: a recurring run of a compiled pipeline. The request is built
by pure functions (file text and flags in, a dict shaped like kfp_server_api's
V2beta1RecurringRun out) so every choice is testable without a KFP server: a cron of six
fields, one run at a time, no catch-up after a pause, no cached steps. `create` is the only
part that talks to a server."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

import yaml

from volcano_pipelines.errors import InputError
from volcano_pipelines.kfp.rest import KfpApi, check_host, create  # the part that talks to a server

__all__ = ["CRON_FIELD", "KfpApi", "arguments_for", "check_host", "check_step_rules", "create", "cron_expression", "load_pipeline",
           "recurring_run_request", "to_model"]

CRON_FIELD = re.compile(r"^[0-9A-Za-z*/,?\-]+$")
CRON_HELP = ("a cron expression of 5 fields (minute hour day-of-month month day-of-week) or 6 (seconds first, "
             "as KFP takes it), each a number in its range, a range a-b, a step */n or a-b/n, or a list of them, "
             "e.g. '0 2 * * *'")
_BOOLEANS = {"true": True, "false": False}
_MONTHS = ("JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC")
_DAYS = ("SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT")
# The six fields KFP's scheduler reads (robfig/cron with seconds): name, lowest, highest,
# names for the values (from the lowest), and whether '?' (no specific value) is allowed.
_CRON_FIELDS: tuple[tuple[str, int, int, tuple[str, ...], bool], ...] = (
    ("second", 0, 59, (), False),
    ("minute", 0, 59, (), False),
    ("hour", 0, 23, (), False),
    ("day of month", 1, 31, (), True),
    ("month", 1, 12, _MONTHS, False),
    ("day of week", 0, 6, _DAYS, True),
)


def _cron_value(text: str, low: int, high: int, names: tuple[str, ...]) -> int | None:
    if text.isdigit():
        value = int(text)
    elif text.upper() in names:
        value = names.index(text.upper()) + low
    else:
        return None
    return value if low <= value <= high else None


def _cron_field_problem(field: str, name: str, low: int, high: int, names: tuple[str, ...], question: bool) -> str | None:
    if field == "?":
        return None if question else f"'?' is only allowed for the day of month or week, not the {name}"
    for item in field.split(","):
        span, slash, step = item.partition("/")
        if slash and not (step.isdigit() and 1 <= int(step) <= high - low + 1):
            return f"the {name} step {step!r} is not a number from 1 to {high - low + 1}"
        if span == "*":
            continue
        first, dash, last = span.partition("-")
        a = _cron_value(first, low, high, names)
        b = _cron_value(last, low, high, names) if dash else a
        if a is None or b is None or a > b:
            what = f" or {names[0]}-{names[-1]}" if names else ""
            return f"the {name} {span!r} is not a value or range within {low}-{high}{what}"
    return None


def cron_expression(raw: str) -> str:
    """KFP's scheduler takes six fields, seconds first; the usual five get '0' seconds. Each
    field is checked against its range: KFP would otherwise accept the recurring run and
    fail to schedule it, or never run it."""
    fields = raw.split()
    if len(fields) not in (5, 6) or not all(CRON_FIELD.match(field) for field in fields):
        raise InputError("cron", raw, CRON_HELP)
    six = ["0", *fields] if len(fields) == 5 else fields
    for field, (name, low, high, names, question) in zip(six, _CRON_FIELDS, strict=True):
        problem = _cron_field_problem(field, name, low, high, names, question)
        if problem:
            raise InputError("cron", raw, f"{problem}; {CRON_HELP}")
    return " ".join(six)


def load_pipeline(text: str, source: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """A compiled pipeline file (IR YAML: the pipeline spec, then an optional platform spec)
    -> (pipeline_spec, platform_spec), both checked against KFP's own schema."""
    from google.protobuf import json_format
    from kfp.pipeline_spec import pipeline_spec_pb2

    allowed = "a compiled KFP pipeline (IR YAML, as `vpipe compile` writes pipelines/*.yaml)"
    try:
        # libyaml's parser where PyYAML has it (the same safe loading): a compiled pipeline
        # (~100 KB) takes 0.15 s of CPU in the pure-Python parser, 0.02 s in C.
        docs = [doc for doc in yaml.load_all(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader)) if doc is not None]
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


# The pipeline parameters naming a PVC that KFP mounts into a step pod itself (kfp-kubernetes
# mount_pvc: the sync step's data PVC).
MOUNTED_BY_KFP = ("data_pvc",)
DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")


def check_step_rules(pipeline_spec: Mapping[str, Any], arguments: Mapping[str, Any]) -> None:
    """What the training step would refuse at 2 a.m. (`workers=-5`, a model name that is not a
    DNS label), refused now: for this project's pipelines the training step's dry run (pure:
    it renders the job and contacts nothing) gets the values the pipeline would give it, the
    pipeline's defaults filled in. The other steps' values are checked for their types only."""
    from volcano_pipelines.kfp.pipelines import PIPELINE_NAMES, inputs_of
    from volcano_pipelines.kfp.runtime import step_arguments, step_function

    name = (pipeline_spec.get("pipelineInfo") or {}).get("name")
    kind = next((k for k, pipeline in PIPELINE_NAMES.items() if pipeline == name), None)
    if kind is None:
        return
    train = "train_tf" if kind == "tf" else "train_mpi"
    definitions = ((pipeline_spec.get("root") or {}).get("inputDefinitions") or {}).get("parameters") or {}
    values = {key: spec["defaultValue"] for key, spec in definitions.items() if "defaultValue" in spec}
    values.update(arguments)
    for pvc in MOUNTED_BY_KFP:
        # KFP names the sync pod's volume after the PVC and a volume name is a DNS label: a PVC
        # name with a dot (valid for a PVC) would make a pod the API server refuses at 2 a.m.
        value = values.get(pvc)
        if isinstance(value, str) and value and not DNS_LABEL.fullmatch(value):
            raise InputError("param", f"{pvc}={value}", "a PVC name that is a DNS label (lower case letters, digits "
                             "and '-', at most 63): KFP names the step pod's volume after the PVC")
    feeds: dict[str, Any] = {}
    pipeline_name_of: dict[str, str] = {}
    for item in inputs_of(kind):
        for component, param in item.feeds:
            if component == train and item.name in values:
                feeds[param] = values[item.name]
                pipeline_name_of[param] = item.name
    fn = step_function(train)
    try:
        fn(**step_arguments(fn, feeds), run_id="scheduled", dry_run=True)
    except InputError as err:
        # The step names its own argument (or a field of the job, e.g. job.name): say which
        # --param it came from.
        step_field = err.field.split(".")[-1].replace("-", "_")
        source = pipeline_name_of.get(err.field) or pipeline_name_of.get(step_field) or (
            "model_name" if step_field == "name" else None)
        shown = f"{source}={arguments[source]}" if source is not None and source in arguments else (source or err.field)
        raise InputError("param", shown, f"a value the {train} step accepts: {err}") from None
    except (TypeError, ValueError) as err:  # a value of the right KFP type that the step cannot take
        raise InputError("param", ", ".join(f"{k}={v}" for k, v in sorted(arguments.items())),
                         f"values the {train} step accepts: {err}") from None


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
    check_step_rules(pipeline_spec, arguments)
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
