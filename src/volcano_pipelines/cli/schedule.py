"""`vpipe schedule kfp`: a recurring run of a compiled pipeline on a KFP server (scheduled
retraining). Flags in, a request built by volcano_pipelines.kfp.schedule, one API call."""

from __future__ import annotations

import argparse
import json

from volcano_pipelines.cli import command_help
from volcano_pipelines.errors import EXIT_OK, InputError

__all__ = ["register"]


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    schedule = subparsers.add_parser("schedule", help=command_help("schedule"))
    targets = schedule.add_subparsers(dest="target", required=True, parser_class=type(schedule))
    p = targets.add_parser(
        "kfp", help="create a KFP recurring run of a compiled pipeline",
        description="Create a Kubeflow Pipelines recurring run of a compiled pipeline (pipelines/*.yaml): one run "
        "at a time, no catch-up after a pause, caching off for every step.",
        usage="vpipe schedule kfp --host URL --pipeline-file FILE --cron EXPR [--param NAME=VALUE ...] [flags]",
    )
    p.add_argument("--host", required=True, metavar="URL", help="the KFP API, e.g. http://ml-pipeline.kubeflow:8888")
    p.add_argument("--pipeline-file", required=True, metavar="FILE", help="compiled pipeline, e.g. pipelines/train-and-serve.yaml")
    p.add_argument("--cron", required=True, metavar="EXPR",
                   help="when to run: 5 fields (minute hour day month weekday, e.g. '0 2 * * *') or KFP's 6 (seconds first)")
    p.add_argument("--param", action="append", default=[], metavar="NAME=VALUE",
                   help="a pipeline parameter (repeatable); lists and dicts as JSON")
    p.add_argument("--name", help="name of the recurring run (default: the pipeline's name)")
    p.add_argument("--description", help="description of the recurring run")
    p.add_argument("--experiment", default="Default", help="experiment the runs belong to; created if missing (default Default)")
    p.add_argument("--namespace", help="KFP namespace (multi-user installations)")
    p.add_argument("--service-account", help="ServiceAccount of the step pods (needs the vpipe-train Role, manifests/base)")
    p.add_argument("--pipeline-root", metavar="URI", help="where the runs' artifacts go (default: the server's)")
    p.add_argument("--token-file", metavar="PATH", help="file holding a bearer token for the KFP API")
    p.add_argument("--ca-file", metavar="PATH", help="CA certificate(s) to verify an https --host with (default: the system's)")
    p.add_argument("--request-timeout", type=float, default=30.0, metavar="SECONDS",
                   help="how long one request to the KFP API may wait for an answer (default 30)")
    p.add_argument("--disabled", action="store_true", help="create the recurring run paused")
    p.add_argument("--dry-run", action="store_true", help="print the request as JSON and send nothing")
    p.set_defaults(handler=_kfp, parser=p)


MAX_PIPELINE_BYTES = 16 * 1024 * 1024  # compiled pipelines are ~100 kB


def _read(flag: str, path: str, limit: int = MAX_PIPELINE_BYTES) -> str:
    """A regular file's text, at most `limit` bytes: a device (/dev/urandom, /dev/zero), a FIFO
    or a directory is refused instead of read for ever."""
    import os
    import stat

    try:
        with open(path, "rb") as handle:
            mode = os.fstat(handle.fileno()).st_mode
            if not stat.S_ISREG(mode):
                raise InputError(flag, path, "a regular file (this is a device, a pipe or a directory)")
            data = handle.read(limit + 1)
    except OSError as err:
        raise InputError(flag, path, f"a readable file ({err.strerror or err.__class__.__name__})") from None
    if len(data) > limit:
        raise InputError(flag, path, f"a file of at most {limit // (1024 * 1024)} MiB")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise InputError(flag, path, "a UTF-8 text file (this one holds binary data)") from None


def _check_ca_file(path: str) -> None:
    """The file must hold PEM certificates: another file (a key, /etc/passwd) would otherwise
    fail every TLS handshake and read as "cannot reach" the server (exit 3)."""
    import ssl

    try:
        ssl.create_default_context(cafile=path)
    except (ssl.SSLError, ValueError) as err:
        raise InputError("--ca-file", path, f"a PEM file of CA certificates ({getattr(err, 'reason', None) or err})") from None


def _params(raw: list[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in raw:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise InputError("--param", item, "NAME=VALUE")
        out[name] = value
    return out


def _kfp(args: argparse.Namespace) -> int:
    import math

    from volcano_pipelines.kfp import schedule

    if not (math.isfinite(args.request_timeout) and 0 < args.request_timeout <= 3600):
        raise InputError("--request-timeout", args.request_timeout, "seconds, more than 0 and at most 3600")
    try:
        host = schedule.check_host(args.host)
        request = schedule.recurring_run_request(
            pipeline_text=_read("--pipeline-file", args.pipeline_file), pipeline_source=args.pipeline_file,
            cron=args.cron, display_name=args.name, description=args.description, parameters=_params(args.param),
            service_account=args.service_account, pipeline_root=args.pipeline_root, enabled=not args.disabled,
        )
        schedule.to_model(request)  # a field the API does not know fails before anything is sent
    except InputError as err:
        flag = err.field if err.field.startswith("-") else f"--{err.field}"
        raise InputError(flag, err.value, err.allowed) from None
    if args.ca_file:  # checked in a dry run too: it is input like the rest
        _read("--ca-file", args.ca_file, 1024 * 1024)
        _check_ca_file(args.ca_file)
    if args.dry_run:
        print(json.dumps(request, indent=1, sort_keys=True))
        return EXIT_OK
    token = _read("--token-file", args.token_file, 64 * 1024).strip() if args.token_file else None
    created = schedule.create(request, host=host, experiment=args.experiment, namespace=args.namespace, token=token,
                              ca_file=args.ca_file, timeout=args.request_timeout)
    print(f"recurring run {created} ({request['display_name']}): cron "
          f"'{request['trigger']['cron_schedule']['cron']}', one run at a time, no catch-up, caching off")
    return EXIT_OK
