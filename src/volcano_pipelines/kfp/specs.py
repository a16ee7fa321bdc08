"""What each KFP component is: the step it calls and the output parameters it returns. Shared
by the generator (compile time) and the runtime (inside the step pod); imports neither kfp
nor the steps."""

from __future__ import annotations

from dataclasses import dataclass

from volcano_pipelines.images import RUNTIME_IMAGE  # the image every component runs in

__all__ = ["COMPONENTS", "RUNTIME_IMAGE", "STEP_FUNCTIONS", "ComponentSource"]


@dataclass(frozen=True)
class ComponentSource:
    """One component: its function name, the step it calls (a STEP_FUNCTIONS key), a one-line
    summary, the output parameters it returns (name, KFP type, help) and any extra inputs that
    stand for step parameters (`skip`)."""

    function: str
    step: str
    summary: str
    outputs: tuple[tuple[str, str, str], ...]
    extra_inputs: tuple[tuple[str, str, str], ...] = ()  # (name, annotation, help)
    skip: frozenset[str] = frozenset()


# "module:function" of each step a component calls.
STEP_FUNCTIONS = {
    "sync": "volcano_pipelines.steps.staging:sync",
    "train_tf": "volcano_pipelines.steps.train:train_tf",
    "train_mpi": "volcano_pipelines.steps.train:train_mpi",
    "finish_run": "volcano_pipelines.steps.finish:finish_run",
    "reap": "volcano_pipelines.steps.reaping:reap",
    "tensorboard": "volcano_pipelines.steps.boards:tensorboard",
    "serve": "volcano_pipelines.steps.serving:serve",
}

_TRAIN_OUTPUTS = (
    ("job_name", "str", "name of the Volcano Job"),
    ("job_namespace", "str", "namespace of the Volcano Job"),
    ("run_id", "str", "run identity the job is labelled with"),
    ("phase", "str", "final phase of the job (Completed; DryRun; Pending etc. without wait)"),
    ("succeeded", "bool", "the job completed"),
    ("duration_seconds", "float", "from creation to the final phase (0 when the job has not finished)"),
    ("retries", "int", "job restarts"),
    ("result", "dict", "the whole step result (TrainResult.to_dict())"),
)

COMPONENTS: dict[str, ComponentSource] = {
    "sync": ComponentSource(
        "sync", "sync",
        "Stage a dataset (HDFS, WebHDFS, a directory, any fsspec URL) into a mounted directory: "
        "incremental, parallel, atomic, verified.",
        (
            ("copied", "int", "files copied"),
            ("bytes_copied", "int", "bytes copied"),
            ("failed", "int", "files that failed (the step fails when any did)"),
            ("result", "dict", "the whole step result (SyncResult.to_dict())"),
        ),
    ),
    "train_tf": ComponentSource(
        "train_tf", "train_tf",
        "Run distributed TensorFlow as a Volcano Job (parameter servers + workers, + chief, evaluator) "
        "and wait for its end; the step fails with the reason when the job fails.",
        _TRAIN_OUTPUTS,
    ),
    "train_mpi": ComponentSource(
        "train_mpi", "train_mpi",
        "Run an MPI job as a Volcano Job (one mpimaster running mpiexec over N mpiworkers) and wait "
        "for its end; the step fails with the reason when the job fails.",
        _TRAIN_OUTPUTS,
    ),
    "finish_run": ComponentSource(
        "finish_run", "finish_run",
        "Exit handler: report how the run ended and what its training job did; when the run failed or was "
        "cancelled, clean up the run's training job per on_failure (an unknown state keeps it).",
        (
            ("pipeline_state", "str", "how the pipeline's tasks ended (COMPLETE, CACHED, FAILED, CANCELED; SUCCEEDED under kfp.local)"),
            ("job_phase", "str", "phase of the run's training job (NotFound when it has none)"),
            ("cleanup", "str", "what was done to the job: deleted, aborted, kept or none"),
            ("result", "dict", "the whole report"),
        ),
        extra_inputs=(("status", "PipelineTaskFinalStatus", "the final status of the pipeline's tasks (set by KFP)"),),
        skip=frozenset({"pipeline_state", "error_message"}),
    ),
    "reap": ComponentSource(
        "reap", "reap",
        "Finish a training job whose parameter servers still run after the completion task succeeded "
        "(a CompleteJob Command after the grace period) and report how long they lingered; or sweep a selector.",
        (
            ("succeeded", "bool", "the job ended (or had nothing to reap); false: its pods failed or the step timed out"),
            ("ps_linger_seconds", "float", "how long the parameter servers outlived the completion task (0 when unknown)"),
            ("message", "str", "what the step did"),
            ("result", "dict", "the whole step result (ReapResult.to_dict())"),
        ),
    ),
    "tensorboard": ComponentSource(
        "tensorboard", "tensorboard",
        "Start (or update) TensorBoard over the training logs on the log PVC and report the URL to open; "
        "it lives as long as the training job, or for a TTL.",
        (
            ("url", "str", "the URL to open (Ingress, else node port, else in-cluster)"),
            ("name", "str", "name of the TensorBoard Deployment and Service"),
            ("namespace", "str", "namespace of TensorBoard"),
            ("ready", "bool", "TensorBoard is ready"),
            ("result", "dict", "the whole step result (TensorboardResult.to_dict())"),
        ),
    ),
    "serve": ComponentSource(
        "serve", "serve",
        "Serve the exported model (<PVC>/export/<model>/<version>/) with TF Serving and wait until the "
        "version is AVAILABLE; roll back and fail when the rollout or the smoke test fails.",
        (
            ("rest_endpoint", "str", "in-cluster REST URL of the model"),
            ("grpc_endpoint", "str", "in-cluster gRPC host:port"),
            ("version", "int", "the newest version served (-1 when none, e.g. a dry run)"),
            ("succeeded", "bool", "the model is served"),
            ("result", "dict", "the whole step result (ServeResult.to_dict())"),
        ),
    ),
}
