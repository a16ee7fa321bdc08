"""The reap step: finish training jobs whose parameter servers keep running after the work
is done. `reap(job)` follows one Volcano Job (a pipeline step after training); `reap(selector=...)`
sweeps every matching Volcano Job and classic group (workers as batch/v1 Jobs, parameter
servers as Deployments) in a namespace or the whole cluster, forever or `once` (a CronJob).

This module checks the arguments and runs the sweeper (lifecycle/sweep.py: the event-driven
loop and its actions) under the step's signal handling; the decisions are the pure rule in
lifecycle/reap.py."""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Literal, get_args

from volcano_pipelines.errors import InputError
from volcano_pipelines.k8s.connection import Connection, Namespace
from volcano_pipelines.interface.params import check_types
from volcano_pipelines.lifecycle import reap as rule
from volcano_pipelines.lifecycle.sweep import ReapedUnit, ReapResult, Sweep
from volcano_pipelines.progress import Progress
from volcano_pipelines.signals import stop_signals_handled_by
from volcano_pipelines.objects.validate import (
    check_dns_label,
    check_label_key,
    check_label_value,
    check_positive_seconds,
)

__all__ = ["ON_FAILURE_CHOICES", "ReapResult", "ReapedUnit", "check_selector", "reap"]

OnFailure = Literal["report", "abort"]
ON_FAILURE_CHOICES: tuple[str, ...] = get_args(OnFailure)

_REQUIREMENT = re.compile(
    r"(?P<neg>!)?\s*(?P<key>[^\s!=(),]+)\s*"
    r"(?:(?P<op>==|=|!=)\s*(?P<value>[^\s!=(),]*)|\s+(?P<set>in|notin)\s*\((?P<values>[^()]*)\))?"
)


def check_selector(field_name: str, text: str) -> None:
    """A label selector as kubectl takes it (`a=b,c!=d,e in (f,g),!h`), checked here so a typo
    is bad input (exit 2), not an API error."""
    if not isinstance(text, str) or not text.strip():
        raise InputError(field_name, text, "a non-empty label selector, e.g. app=mnist or team=ml,run in (a,b)")
    for part in rule.split_selector(text):
        match = _REQUIREMENT.fullmatch(part)
        if not part or match is None or (match["neg"] and (match["op"] or match["set"])):
            raise InputError(field_name, text, f"a label selector: {part!r} is not KEY, !KEY, KEY=VALUE, KEY!=VALUE, "
                                               "KEY in (V1,V2) or KEY notin (V1,V2)")
        check_label_key(field_name, match["key"])
        values = [match["value"]] if match["op"] else [v.strip() for v in (match["values"] or "").split(",")] if match["set"] else []
        for value in values:
            check_label_value(field_name, value)


def reap(
    job: str | None = None,
    *,
    selector: str | None = None,
    namespace: Namespace = None,
    all_namespaces: bool = False,
    grace: float = 30,
    on_failure: OnFailure = "report",
    completion_task: str | None = None,
    group_label: str | None = None,
    delete_deployment: bool = False,
    delete_namespace: bool = False,
    once: bool = False,
    dry_run: bool = False,
    timeout: float | None = None,
    connection: Connection = Connection(),
    progress: Progress | None = None,
) -> ReapResult:
    """Finish training jobs whose parameter servers still run after the work is done: when the
    completion task (chief if present, else mpimaster, else every worker) has Succeeded and
    other pods still run after the grace period, send the Volcano Job a CompleteJob Command;
    for the classic layout (workers as batch/v1 Jobs, parameter servers as Deployments) scale
    the Deployments to zero. A Kubernetes Event records it. Jobs whose pods failed are never
    reaped (reported; on_failure=abort aborts them).

    Args:
        job: one Volcano Job to follow until its parameter servers are gone (a pipeline step after training)
        selector: sweep every Volcano Job and classic group whose objects carry these labels (instead of one job)
        all_namespaces: sweep every namespace (needs cluster-wide permissions)
        grace: seconds parameter servers may outlive the completion task before they are ended
        on_failure: what to do with a job whose pods failed: report (leave it alone) or abort
        completion_task: the task whose success ends training (default: chief, else mpimaster, else worker)
        group_label: classic layout: group batch/v1 Jobs and Deployments by this label's value (default: one group per namespace)
        delete_deployment: classic layout: delete the parameter server Deployments instead of scaling them to zero
        delete_namespace: classic layout: delete the whole namespace, refused if it holds anything not labelled with the selector
        once: one sweep: reap what is due (or comes due within the grace period), then exit (for a CronJob)
        dry_run: say what would be done; change nothing
        timeout: seconds to wait for the job (sweeper: to run) before stopping
    """
    check_types(reap, locals())
    _check(job, selector, namespace, all_namespaces, grace, on_failure, completion_task, group_label,
           delete_deployment, delete_namespace, once, timeout)
    cluster = connection.connect()
    scope_namespace = None if all_namespaces else (namespace or cluster.namespace)
    sweep = Sweep(cluster, namespace=scope_namespace, job=job, selector=selector, grace=float(grace),
                   on_failure=on_failure, completion_task=completion_task, group_label=group_label,
                   delete_deployment=delete_deployment, delete_namespace=delete_namespace, once=once,
                   dry_run=dry_run, timeout=timeout, progress=progress or Progress())
    with _stop_on_signals(sweep.stop):
        return sweep.run()


def _check(job: str | None, selector: str | None, namespace: str | None, all_namespaces: bool, grace: float,
           on_failure: str, completion_task: str | None, group_label: str | None, delete_deployment: bool,
           delete_namespace: bool, once: bool, timeout: float | None) -> None:
    """Everything, before the first request."""
    if (job is None) == (selector is None):
        raise InputError("job", job, "either a job name or a selector (not both, not neither)")
    if job is not None:
        check_dns_label("job", job)
        for flag, value in (("once", once), ("all_namespaces", all_namespaces), ("delete_deployment", delete_deployment),
                            ("delete_namespace", delete_namespace)):
            if value:
                raise InputError(flag, value, "only with a selector (a sweep), not with one job")
        if group_label is not None:
            raise InputError("group_label", group_label, "only with a selector (classic layout groups)")
    else:
        check_selector("selector", selector or "")
    if namespace is not None:
        check_dns_label("namespace", namespace)
        if all_namespaces:
            raise InputError("all_namespaces", all_namespaces, "either a namespace or all namespaces, not both")
    if isinstance(grace, bool) or not isinstance(grace, (int, float)) or not 0 <= grace <= 7 * 24 * 3600:
        raise InputError("grace", grace, "a number of seconds from 0 to 604800")
    if on_failure not in ON_FAILURE_CHOICES:
        raise InputError("on_failure", on_failure, f"one of {', '.join(ON_FAILURE_CHOICES)}")
    if completion_task is not None:
        check_dns_label("completion_task", completion_task)
    if group_label is not None:
        check_label_key("group_label", group_label)
        if delete_namespace:
            raise InputError("group_label", group_label, "no group label with delete_namespace (one namespace is one group)")
    if delete_deployment and delete_namespace:
        raise InputError("delete_deployment", delete_deployment, "either delete_deployment or delete_namespace, not both")
    if timeout is not None:
        check_positive_seconds("timeout", timeout)


@contextmanager
def _stop_on_signals(stop: threading.Event) -> Iterator[None]:
    """SIGTERM (a pod being stopped, a cancelled pipeline) and Ctrl-C end the step cleanly with
    its result so far; only possible from the main thread."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(_signum: int, _frame: object) -> None:
        stop.set()

    with stop_signals_handled_by(handler):
        yield
