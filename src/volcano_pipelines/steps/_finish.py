"""The exit handler's work: say how a pipeline run ended and what its training job did, and
when the run did not succeed, clean the job up (a step pod that died without SIGTERM leaves
its job running; a failed job keeps its name taken until its ttl). A step like the others
(flat, typed, one docstring): the KFP exit handler calls it, and so can an Argo onExit.

The word the handler is handed is often not the run's end. KFP's backend hands the exit
handler the ML Metadata state of the exit handler's group, which only a launcher that finishes
a step normally moves to COMPLETE or FAILED (KFP 2.17: metadata/client.go
UpdateDAGExecutionsState, called from launcher_v2.go). A terminated run (the launcher killed),
an evicted, OOM-killed or lost step pod, a failed driver, a cached task or a condition that
evaluates false (driver/dag.go records it CANCELED and stops) never update it: the handler then
sees RUNNING. So a word that is not an end state is decided from the job itself (`decide`)."""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass
from collections.abc import Iterable
from typing import Any, ClassVar

from volcano_pipelines.backends.base import OnCancel
from volcano_pipelines.errors import InputError
from volcano_pipelines.labels import TRAIN_STEP
from volcano_pipelines.steps.registry import WHOLE, Output
from volcano_pipelines.k8s.connection import Connection, Namespace
from volcano_pipelines.interface.params import check_types
from volcano_pipelines.steps._results import TrainResult
from volcano_pipelines.volcano.status import FAILED_PHASES, SUCCEEDED_PHASES

log = logging.getLogger("volcano_pipelines.finish")

__all__ = ["FAILED_STATES", "SUCCEEDED", "SUCCEEDED_STATES", "Decision", "RunReport", "decide", "finish_run",
           "run_outcome"]

SUCCEEDED = "SUCCEEDED"  # kfp.local's PipelineTaskFinalStatus.state of a run whose tasks all succeeded
# The exit handler is handed a state in one of several vocabularies. KFP's backend passes the
# ML Metadata execution state of the exit handler's group: COMPLETE (or CACHED) after a
# successful run, FAILED, CANCELED (KFP's sample pipeline_with_input_status_state.py asserts
# COMPLETE), and RUNNING in the cases above; kfp.local passes SUCCEEDED / FAILED;
# PipelineTaskFinalStatus's docstring names CANCELLED; an Argo onExit passes {{workflow.status}}:
# Succeeded, Failed, Error. Compared case-insensitively.
SUCCEEDED_STATES = frozenset({"SUCCEEDED", "COMPLETE", "CACHED"})
FAILED_STATES = frozenset({"FAILED", "FAILURE", "CANCELED", "CANCELLED", "ERROR"})


@dataclass(frozen=True)
class Decision:
    """How the run ended and whether its job is cleaned up, with the rule that said so."""

    outcome: str  # succeeded | failed | unknown
    clean_up: bool  # the job is cleaned up per on_failure
    rule: str  # which rule fired, in words (the report carries it)


# Job phases that mean the job's own work is done and succeeded: Completing is Volcano ending the
# remaining pods (parameter servers) after the completion task finished.
_DONE_PHASES = SUCCEEDED_PHASES | {"Completing"}


def decide(pipeline_state: str, job_phase: str | None) -> Decision:
    """The run's outcome from the word the exit handler got and, where the word is not an end
    state, from the run's training job (`job_phase`; None: the run has none). Pure.

    - a success word (COMPLETE, CACHED, SUCCEEDED, Succeeded): succeeded, the job is kept;
    - a failure word (FAILED, CANCELED, Failed, Error, ...): failed, cleaned up per on_failure;
    - any other word (RUNNING, empty, unknown): the job decides. A finished job says what
      happened (Completed: succeeded; Failed, Aborted, Terminated: failed, cleaned up); a job
      not finished at the exit handler means the run failed or was cancelled before the train
      step saw its end (the train step waits for it), so it is cleaned up; no job: unknown,
      nothing to clean up."""
    word = (pipeline_state or "").strip()
    outcome = run_outcome(word)
    if outcome == "succeeded":
        return Decision("succeeded", False, f"state {word}: the run's tasks succeeded")
    if outcome == "failed":
        return Decision("failed", True, f"state {word}: the run failed or was cancelled")
    said = f"state {word!r} is not an end state" if word else "no state was handed over"
    if job_phase is None:
        return Decision("unknown", False, f"{said}, and the run has no training job to decide from")
    if job_phase in _DONE_PHASES:
        return Decision("succeeded", False, f"{said}; its training job is {job_phase}: the run succeeded")
    if job_phase in FAILED_PHASES:
        return Decision("failed", True, f"{said}; its training job is {job_phase}: the run failed")
    return Decision("failed", True, f"{said}; its training job is {job_phase or 'in no phase yet'}, unfinished at the "
                                    "exit handler: the run failed or was cancelled")


@dataclass
class RunReport:
    # The KFP component's output parameters (steps/registry.py).
    OUTPUTS: ClassVar[tuple[Output, ...]] = (
        Output("pipeline_state",
               "how the pipeline's tasks ended (COMPLETE, CACHED, FAILED, CANCELED; SUCCEEDED under kfp.local)"),
        Output("job_phase", "phase of the run's training job (NotFound when it has none)"),
        Output("cleanup", "what was done to the job: deleted, aborted, kept or none"),
        Output("result", "the whole report", WHOLE),
    )

    run_id: str
    pipeline_state: str
    error_message: str | None
    namespace: str
    job: dict[str, Any] | None  # TrainResult.to_dict() of the run's training job, None when it has none
    cleanup: str  # deleted | aborted | kept | none
    outcome: str = "succeeded"  # succeeded | failed | unknown (decide())
    rule: str = ""  # which rule decided the outcome (decide())
    # The job's post-mortem record, saved before the cleanup when the run did not succeed
    # (postmortem/save.py save_post_mortem: where, how big, a short summary).
    post_mortem: dict[str, Any] | None = None
    tensorboard: dict[str, Any] | None = None  # the run's TensorBoard {name, url, urls}, when it started one
    # The run's sync copy job (`sync` with workers above 1): {name, namespace, phase, cleanup}, or
    # {namespace, error} when it could not be looked up or cleaned up; None when the run has none.
    copy_job: dict[str, Any] | None = None

    @property
    def job_phase(self) -> str:
        return str(self.job["phase"]) if self.job else "NotFound"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def run_outcome(pipeline_state: str) -> str:
    """succeeded, failed or unknown: what the word the exit handler got says on its own."""
    state = (pipeline_state or "").strip().upper()
    if state in SUCCEEDED_STATES:
        return "succeeded"
    if state in FAILED_STATES:
        return "failed"
    return "unknown"


def finish_run(
    run_id: str,
    *,
    pipeline_state: str = SUCCEEDED,
    error_message: str | None = None,
    namespace: Namespace = None,
    connection: Connection = Connection(),
    on_failure: OnCancel = "delete",
    log_lines: int = 20,
) -> RunReport:
    """Report how a pipeline run ended and what its training job did; when the run failed or
    was cancelled, clean up the run's training job per on_failure. A state that is not an end
    state (KFP's backend hands RUNNING after a terminate, an evicted or lost step pod, a skipped
    or cached last task) is decided from the job: finished, it says how the run ended;
    unfinished at the exit handler, the run failed or was cancelled. A copy job of the run's sync
    step (workers above 1) unfinished at the exit handler is cleaned up per on_failure too,
    whatever the state: the sync step waits for it, so nothing waits for it any more (the files
    it finished stay; the next sync skips them).

    Args:
        run_id: run identity of the pipeline run (the training job carries it as a label)
        pipeline_state: how the run's tasks ended: COMPLETE, CACHED or SUCCEEDED; FAILED or CANCELED; any other word (RUNNING) is decided from the job
        error_message: why the run failed, when it did
        on_failure: what happens to the run's training job when the run failed or was cancelled (and to its sync copy job when unfinished): delete, abort or keep
        log_lines: last log lines of a failed pod to report
    """
    check_types(finish_run, locals())
    from volcano_pipelines.k8s import volcano as k8s_volcano
    from volcano_pipelines.postmortem.save import save_post_mortem
    from volcano_pipelines.steps._train import status
    from volcano_pipelines.backends.base import ON_CANCEL_CHOICES

    if not run_id:
        raise InputError("run_id", run_id, "the run's identity (the KFP run id)")
    if on_failure not in ON_CANCEL_CHOICES:
        raise InputError("on_failure", on_failure, f"one of {', '.join(ON_CANCEL_CHOICES)}")
    cluster = connection.connect()
    namespace = namespace or cluster.namespace
    job = k8s_volcano.find_run_job(cluster, namespace, run_id, TRAIN_STEP)
    result: TrainResult | None = None
    if job is not None:
        result = status(job["metadata"]["name"], namespace=namespace, connection=connection, log_lines=log_lines)
        if result.phase == "NotFound":  # deleted since it was found
            job, result = None, None
    decision = decide(pipeline_state, result.phase if result is not None else None)
    report = RunReport(run_id=run_id, pipeline_state=pipeline_state, error_message=error_message or None,
                       namespace=namespace, job=result.to_dict() if result is not None else None, cleanup="none",
                       outcome=decision.outcome, rule=decision.rule)
    log.info("run %s: %s", run_id, decision.rule)
    report.tensorboard = _run_tensorboard(cluster, namespace, run_id)
    # The sync step's copy job is where that step ran (the pipeline's namespace) unless given one.
    report.copy_job = _settle_copy_job(cluster, dict.fromkeys((namespace, cluster.namespace)), run_id, on_failure)
    if job is None or result is None:
        return report
    name = job["metadata"]["name"]
    if decision.outcome != "succeeded":
        # What happened to every pod, written before anything below deletes them.
        report.post_mortem = save_post_mortem(cluster, namespace, name, job=job)
    if not decision.clean_up:
        return report
    report.cleanup = _clean_up(cluster, job, result.phase, on_failure)
    log.info("run %s: job %s/%s %s (on_failure=%s)", run_id, namespace, name, report.cleanup, on_failure)
    return report


def _clean_up(cluster: Any, job: dict[str, Any], phase: str, on_failure: str) -> str:
    """What on_failure does to a run's job: deleted, aborted (pods deleted, the job kept as
    Aborted) or kept; a job already over is not aborted again."""
    from volcano_pipelines.k8s import volcano as k8s_volcano
    from volcano_pipelines.volcano.status import FINAL_PHASES

    meta = job["metadata"]
    if on_failure == "delete":
        k8s_volcano.delete_job(cluster, meta["namespace"], meta["name"])
        return "deleted"
    if on_failure == "abort" and phase not in FINAL_PHASES:
        return k8s_volcano.abort_job(cluster, job, "PipelineFailed")
    return "kept"


def _settle_copy_job(cluster: Any, namespaces: Iterable[str], run_id: str, on_failure: str) -> dict[str, Any] | None:
    """The run's sync copy job, cleaned up per on_failure when it has not finished; a failed
    lookup or cleanup is reported, never raised (the training job's report stands)."""
    from volcano_pipelines.errors import VpipeError
    from volcano_pipelines.k8s import volcano as k8s_volcano
    from volcano_pipelines.volcano.copyjob import SYNC_STEP
    from volcano_pipelines.volcano.status import FINAL_PHASES

    for namespace in namespaces:
        try:
            job = k8s_volcano.find_run_job(cluster, namespace, run_id, SYNC_STEP)
            if job is None:
                continue
            name = job["metadata"]["name"]
            phase = str(((job.get("status") or {}).get("state") or {}).get("phase") or "")
            found = {"name": name, "namespace": namespace, "phase": phase or "Pending"}
            if phase in FINAL_PHASES or phase == "Completing":
                return {**found, "cleanup": "none"}
            cleanup = _clean_up(cluster, job, phase, on_failure)
            log.info("run %s: copy job %s/%s %s: %s at the exit handler, its sync step no longer waits for it "
                     "(on_failure=%s)", run_id, namespace, name, cleanup, found["phase"], on_failure)
            return {**found, "cleanup": cleanup}
        except VpipeError as err:
            log.warning("run %s: cannot settle its sync copy job in %s: %s", run_id, namespace, err)
            return {"namespace": namespace, "error": str(err)}
    return None


def _run_tensorboard(cluster: Any, namespace: str, run_id: str) -> dict[str, Any] | None:
    """The run's TensorBoard for the report; a failed lookup costs the link, never the cleanup."""
    from volcano_pipelines.errors import VpipeError
    from volcano_pipelines.steps._tensorboard import run_tensorboard

    try:
        return run_tensorboard(cluster, namespace, run_id)
    except VpipeError as err:
        log.warning("run %s: cannot look up its TensorBoard: %s", run_id, err)
        return None
