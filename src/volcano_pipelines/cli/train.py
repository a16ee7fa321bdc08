"""`vpipe render tf|mpi`, `vpipe train tf|mpi`, `vpipe status`: arguments in, step call, output."""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from collections import defaultdict
from dataclasses import replace
from typing import Any

from volcano_pipelines.cli.output import ProgressPrinter, configure_logging
from volcano_pipelines.errors import EXIT_FAILED, EXIT_OK, InputError
from volcano_pipelines.manifest import to_yaml
from volcano_pipelines.steps import train as train_step
from volcano_pipelines.volcano.spec import (
    CodeSource,
    JobOptions,
    MPIJobSpec,
    Resources,
    Role,
    Storage,
    TFJobSpec,
)

TF_ROLES = ("ps", "worker", "chief", "evaluator")
MPI_ROLES = ("mpimaster", "mpiworker")
ALL_TASKS = "*"


def register(subparsers: argparse._SubParsersAction) -> None:
    render = subparsers.add_parser("render", help="print the Volcano Job YAML for a training job")
    render_kinds = render.add_subparsers(dest="kind", required=True)
    train = subparsers.add_parser("train", help="submit a training job and wait for it to finish")
    train_kinds = train.add_subparsers(dest="kind", required=True)
    for kinds, submit in ((render_kinds, False), (train_kinds, True)):
        tf = kinds.add_parser("tf", help="distributed TensorFlow: parameter servers + workers (+ chief, evaluator)")
        _add_job_flags(tf, TF_ROLES)
        _add_tf_flags(tf)
        mpi = kinds.add_parser("mpi", help="MPI: one mpimaster running mpiexec over N mpiworkers")
        _add_job_flags(mpi, MPI_ROLES)
        _add_mpi_flags(mpi)
        for parser, kind in ((tf, "tf"), (mpi, "mpi")):
            if submit:
                _add_run_flags(parser)
            parser.set_defaults(handler=_train if submit else _render, spec_kind=kind)
    status = subparsers.add_parser("status", help="show a training job's phase and per-task counts")
    status.add_argument("job", help="job name")
    status.add_argument("-n", "--namespace", default="default")
    status.add_argument("--kubeconfig")
    status.add_argument("--context")
    status.add_argument("--json", action="store_true", help="print the result as JSON on stdout")
    status.set_defaults(handler=_status)


def _add_job_flags(parser: argparse.ArgumentParser, roles: tuple[str, ...]) -> None:
    job = parser.add_argument_group("job")
    job.add_argument("--name", required=True, help="job name (DNS label); pods are <name>-<task>-<index>")
    job.add_argument("-n", "--namespace", default="default")
    job.add_argument("--image", help="image for every task (per task: --<task>-image)")
    job.add_argument("--queue", default="default", help="Volcano queue")
    job.add_argument("--priority-class", help="PriorityClass of the job and its pods")
    job.add_argument("--min-available", type=int, help="gang size (default: every replica)")
    job.add_argument("--max-retry", type=int, default=3, help="job restarts before it is Failed (default 3)")
    job.add_argument("--ttl", type=int, default=3600, dest="ttl", help="seconds a finished job is kept (default 3600)")
    job.add_argument("--no-restart-on-failure", action="store_true", help="a failed pod ends the job (Terminated) instead of restarting it")
    job.add_argument("--image-pull-secret", action="append", default=[], metavar="SECRET")
    job.add_argument("--service-account")
    job.add_argument("--run-id", help="run identity: a re-run with the same id attaches instead of creating")
    job.add_argument("--label", action="append", default=[], metavar="KEY=VALUE", help="label on the job and its pods")
    code = parser.add_argument_group("code (entry point gets --job_name, --task_index, hosts, dirs, shards)")
    code.add_argument("--code-url", help="http(s) URL: a directory ending in '/', an archive, or one file")
    code.add_argument("--code-sha256", help="expected SHA-256 of the file or archive at --code-url")
    code.add_argument("--code-path", help="code directory inside the image, or on --code-pvc")
    code.add_argument("--code-pvc", help="PVC holding --code-path")
    code.add_argument("--entry", default="run.sh", help="entry point inside the code directory (default run.sh)")
    storage = parser.add_argument_group("storage")
    storage.add_argument("--data-pvc", help="PVC with the training data (read-only on workers, chief, evaluator)")
    storage.add_argument("--data-dir", default="/data")
    storage.add_argument("--log-pvc", help="PVC for logs and checkpoints (every task)")
    storage.add_argument("--log-dir", default="/logs")
    per_task = parser.add_argument_group(f"per task ({', '.join(roles)}); TASK: may be left out to mean every task")
    per_task.add_argument("--env", action="append", default=[], metavar="[TASK:]NAME=VALUE")
    per_task.add_argument("--pod-label", action="append", default=[], metavar="[TASK:]KEY=VALUE")
    per_task.add_argument("--pod-annotation", action="append", default=[], metavar="[TASK:]KEY=VALUE")
    per_task.add_argument("--node-selector", action="append", default=[], metavar="[TASK:]KEY=VALUE")
    per_task.add_argument(
        "--toleration", action="append", default=[], metavar="[TASK:]KEY[=VALUE]:EFFECT",
        help="like a kubectl taint: key=value:NoSchedule (Equal) or key:NoSchedule (Exists)",
    )
    for role in roles:
        group = parser.add_argument_group(f"{role} resources")
        worker_aliases = role in ("worker", "mpiworker")
        group.add_argument(f"--{role}-image", dest=f"{role}_image", help=f"image of {role} (default --image)")
        cpu_flags = [f"--{role}-cpu"] + (["--cpu-per-worker"] if worker_aliases else [])
        memory_flags = [f"--{role}-memory"] + (["--memory-per-worker"] if worker_aliases else [])
        gpu_flags = [f"--{role}-gpus"] + (["--gpus-per-worker"] if worker_aliases else [])
        group.add_argument(*cpu_flags, dest=f"{role}_cpu", help="CPU request, e.g. 2 or 500m")
        group.add_argument(*memory_flags, dest=f"{role}_memory", help="memory request and limit, e.g. 4Gi")
        group.add_argument(*gpu_flags, dest=f"{role}_gpus", type=int, default=0, help="nvidia.com/gpu per pod")


def _add_tf_flags(parser: argparse.ArgumentParser) -> None:
    tf = parser.add_argument_group("tensorflow")
    tf.add_argument("--ps", type=int, default=1, help="parameter servers (default 1)")
    tf.add_argument("--workers", type=int, default=1, help="workers (default 1)")
    tf.add_argument("--chief", action="store_true", help="add a chief; the job completes when it does")
    tf.add_argument("--evaluator", action="store_true", help="add an evaluator (outside the cluster spec)")
    tf.add_argument("--port", type=int, default=2222, help="gRPC port of every task (default 2222)")
    tf.add_argument("args", nargs="*", metavar="-- ARG", help="extra arguments for the entry point, verbatim")


def _add_mpi_flags(parser: argparse.ArgumentParser) -> None:
    mpi = parser.add_argument_group("mpi")
    mpi.add_argument("--workers", type=int, default=2, help="mpiworker pods (default 2)")
    mpi.add_argument("--slots-per-worker", type=int, default=1, help="MPI slots per worker (default 1)")
    mpi.add_argument("--command", help="program for mpiexec, split like a shell line (or give it after --)")
    mpi.add_argument("--mpiexec-arg", action="append", default=[], metavar="ARG", help="extra mpiexec option, verbatim")
    mpi.add_argument("args", nargs="*", metavar="-- PROGRAM ARG", help="program and arguments, verbatim")


def _add_run_flags(parser: argparse.ArgumentParser) -> None:
    run = parser.add_argument_group("run")
    run.add_argument("--kubeconfig", help="kubeconfig file (default: in-cluster, then $KUBECONFIG / ~/.kube/config)")
    run.add_argument("--context", help="kubeconfig context")
    run.add_argument("--timeout", type=float, help="seconds to wait before the job is aborted and the step fails")
    run.add_argument("--on-cancel", choices=train_step.ON_CANCEL_CHOICES, default="delete",
                     help="what SIGTERM / Ctrl-C does to the job (default delete)")
    run.add_argument("--dry-run", action="store_true", help="print what would be created; create nothing")
    run.add_argument("--no-wait", action="store_true", help="submit and return without waiting")
    run.add_argument("--json", action="store_true", help="print the result as JSON on stdout")
    run.add_argument("-q", "--quiet", action="store_true", help="no progress lines")


def _split_task(flag: str, raw: str, roles: tuple[str, ...]) -> tuple[str, str]:
    """'[TASK:]REST' -> (task or '*', REST). A prefix that is not a task name is part of REST."""
    head, sep, rest = raw.partition(":")
    if sep and head in roles:
        return head, rest
    if sep and head and "=" not in head and flag != "--toleration":
        raise InputError(flag, raw, f"[TASK:]KEY=VALUE where TASK is one of {', '.join(roles)}")
    return ALL_TASKS, raw


def _key_value(flag: str, raw: str) -> tuple[str, str]:
    key, sep, value = raw.partition("=")
    if not sep or not key:
        raise InputError(flag, raw, "KEY=VALUE")
    return key, value


def _per_task_pairs(flag: str, values: list[str], roles: tuple[str, ...]) -> dict[str, dict[str, str]]:
    by_task: dict[str, dict[str, str]] = defaultdict(dict)
    for raw in values:
        task, rest = _split_task(flag, raw, roles)
        key, value = _key_value(flag, rest)
        by_task[task][key] = value
    return by_task


def _toleration(raw: str) -> dict[str, Any]:
    spec, sep, effect = raw.rpartition(":")
    if not sep or not spec:
        raise InputError("--toleration", raw, "KEY[=VALUE]:EFFECT, e.g. gpu=true:NoSchedule or dedicated:NoExecute")
    key, eq, value = spec.partition("=")
    if eq:
        return {"key": key, "operator": "Equal", "value": value, "effect": effect}
    return {"key": key, "operator": "Exists", "effect": effect}


def _roles(args: argparse.Namespace, roles: tuple[str, ...], replicas: dict[str, int]) -> dict[str, Role]:
    env = _per_task_pairs("--env", args.env, roles)
    labels = _per_task_pairs("--pod-label", args.pod_label, roles)
    annotations = _per_task_pairs("--pod-annotation", args.pod_annotation, roles)
    selectors = _per_task_pairs("--node-selector", args.node_selector, roles)
    tolerations: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for raw in args.toleration:
        task, rest = _split_task("--toleration", raw, roles)
        tolerations[task].append(_toleration(rest))
    defaults = Resources()
    built = {}
    for role, count in replicas.items():
        built[role] = Role(
            replicas=count,
            image=getattr(args, f"{role}_image"),
            resources=Resources(
                cpu=getattr(args, f"{role}_cpu") or defaults.cpu,
                memory=getattr(args, f"{role}_memory") or defaults.memory,
                gpu=getattr(args, f"{role}_gpus"),
            ),
            env={**env[ALL_TASKS], **env[role]},
            labels={**labels[ALL_TASKS], **labels[role]},
            annotations={**annotations[ALL_TASKS], **annotations[role]},
            node_selector={**selectors[ALL_TASKS], **selectors[role]},
            tolerations=tuple(tolerations[ALL_TASKS] + tolerations[role]),
        )
    return built


def _job_options(args: argparse.Namespace) -> JobOptions:
    return JobOptions(
        name=args.name,
        namespace=args.namespace,
        image=args.image,
        queue=args.queue,
        priority_class=args.priority_class,
        min_available=args.min_available,
        max_retry=args.max_retry,
        ttl_seconds_after_finished=args.ttl,
        image_pull_secrets=tuple(args.image_pull_secret),
        service_account=args.service_account,
        run_id=getattr(args, "run_id", None),
        labels=dict(_key_value("--label", raw) for raw in args.label),
        restart_on_pod_failure=not args.no_restart_on_failure,
    )


def _common(args: argparse.Namespace) -> tuple[CodeSource, Storage]:
    code = CodeSource(url=args.code_url, sha256=args.code_sha256, path=args.code_path, pvc=args.code_pvc, entry=args.entry)
    storage = Storage(data_pvc=args.data_pvc, data_dir=args.data_dir, log_pvc=args.log_pvc, log_dir=args.log_dir)
    return code, storage


def tf_spec(args: argparse.Namespace) -> TFJobSpec:
    replicas = {"ps": args.ps, "worker": args.workers}
    if args.chief:
        replicas["chief"] = 1
    if args.evaluator:
        replicas["evaluator"] = 1
    roles = _roles(args, TF_ROLES, replicas)
    code, storage = _common(args)
    return TFJobSpec(
        job=_job_options(args), code=code, storage=storage, ps=roles["ps"], worker=roles["worker"],
        chief=roles.get("chief"), evaluator=roles.get("evaluator"), args=tuple(args.args), port=args.port,
    )


def mpi_spec(args: argparse.Namespace) -> MPIJobSpec:
    if args.command and args.args:
        raise InputError("--command", args.command, "either --command or a program after --, not both")
    try:
        command = tuple(shlex.split(args.command)) if args.command else tuple(args.args)
    except ValueError as err:
        raise InputError("--command", args.command, f"a command line with balanced quotes ({err})") from None
    roles = _roles(args, MPI_ROLES, {"mpimaster": 1, "mpiworker": args.workers})
    master = roles["mpimaster"]
    if not args.mpimaster_cpu and not args.mpimaster_memory:
        master = replace(master, resources=replace(master.resources, cpu="500m", memory="512Mi"))
    code, storage = _common(args)
    return MPIJobSpec(
        job=_job_options(args), command=command, code=code, storage=storage, master=master,
        worker=roles["mpiworker"], slots_per_worker=args.slots_per_worker, mpiexec_args=tuple(args.mpiexec_arg),
    )


# Spec fields as users typed them: errors name the flag, not only the spec path.
_FIELD_FLAGS = {
    "job.name": "--name", "job.namespace": "--namespace", "job.image": "--image", "job.queue": "--queue",
    "job.priority_class": "--priority-class", "job.min_available": "--min-available", "job.max_retry": "--max-retry",
    "job.ttl_seconds_after_finished": "--ttl", "job.image_pull_secrets": "--image-pull-secret",
    "job.service_account": "--service-account", "job.run_id": "--run-id", "job.labels": "--label",
    "code.url": "--code-url", "code.sha256": "--code-sha256", "code.path": "--code-path", "code.pvc": "--code-pvc",
    "code.entry": "--entry", "storage.data_pvc": "--data-pvc", "storage.data_dir": "--data-dir",
    "storage.log_pvc": "--log-pvc", "storage.log_dir": "--log-dir", "ps.replicas": "--ps",
    "worker.replicas": "--workers", "mpiworker.replicas": "--workers", "slots_per_worker": "--slots-per-worker",
    "port": "--port", "command": "--command", "mpiexec_args": "--mpiexec-arg", "timeout_seconds": "--timeout",
    "args": "arguments after --",
}
_ROLE_FIELD_FLAGS = {
    "resources.cpu": "cpu", "resources.memory": "memory", "resources.gpu": "gpus", "image": "image",
}
_ROLE_LIST_FLAGS = {
    "env": "--env", "labels": "--pod-label", "annotations": "--pod-annotation",
    "node_selector": "--node-selector", "tolerations": "--toleration",
}


def flag_for(field: str) -> str | None:
    base = field.split("[", 1)[0].split(" ", 1)[0]
    if base in _FIELD_FLAGS:
        return _FIELD_FLAGS[base]
    role, _, rest = base.partition(".")
    if role in TF_ROLES + MPI_ROLES:
        if rest in _ROLE_FIELD_FLAGS:
            return f"--{role}-{_ROLE_FIELD_FLAGS[rest]}"
        return _ROLE_LIST_FLAGS.get(rest)
    return None


def _with_flag(build: Any, args: argparse.Namespace) -> Any:
    try:
        return build(args)
    except InputError as err:
        flag = flag_for(err.field)
        if flag is None or err.field.startswith("--"):
            raise
        raise InputError(f"{flag} ({err.field})", err.value, err.allowed) from None


def _render(args: argparse.Namespace) -> int:
    if args.spec_kind == "tf":
        manifest = _with_flag(lambda a: train_step.render_tf(tf_spec(a)), args)
    else:
        manifest = _with_flag(lambda a: train_step.render_mpi(mpi_spec(a)), args)
    sys.stdout.write(to_yaml(manifest))
    return EXIT_OK


def _train(args: argparse.Namespace) -> int:
    configure_logging(quiet=args.quiet)
    options = train_step.RunOptions(
        kubeconfig=args.kubeconfig, context=args.context, timeout_seconds=args.timeout,
        on_cancel=args.on_cancel, dry_run=args.dry_run, wait=not args.no_wait,
    )
    progress = None if args.quiet else ProgressPrinter(sys.stderr)
    if args.spec_kind == "tf":
        result = _with_flag(lambda a: train_step.train_tf(tf_spec(a), options, progress), args)
    else:
        result = _with_flag(lambda a: train_step.train_mpi(mpi_spec(a), options, progress), args)
    if progress is not None:
        progress.close()
    if result.manifest is not None and not args.json:
        sys.stdout.write(to_yaml(result.manifest))
    _report(result, as_json=args.json)
    return EXIT_OK if result.succeeded else EXIT_FAILED


def _status(args: argparse.Namespace) -> int:
    result = train_step.job_result(args.namespace, args.job, kubeconfig=args.kubeconfig, context=args.context)
    _report(result, as_json=args.json)
    if not args.json:
        for task, counts in result.tasks.items():
            print(f"  {task}: " + ", ".join(f"{n} {state}" for state, n in counts.items()))
    return EXIT_OK if result.phase != "NotFound" else EXIT_FAILED


def _report(result: train_step.TrainResult, *, as_json: bool) -> None:
    if as_json:
        out = result.as_dict()
        if result.manifest is not None:
            out["manifest"] = result.manifest
        print(json.dumps(out, indent=2, sort_keys=True))
        return
    line = f"job {result.namespace}/{result.name}: {result.phase}"
    if result.duration_seconds is not None:
        line += f" in {result.duration_seconds:.0f}s"
    if result.retries:
        line += f", {result.retries} restart(s)"
    print(line)
    if result.message:
        print(result.message, file=sys.stderr if not result.succeeded else sys.stdout)
    if result.failure and result.failure.get("log_tail"):
        print(f"last log lines of {result.failure['pod']}:\n{result.failure['log_tail']}", file=sys.stderr)
