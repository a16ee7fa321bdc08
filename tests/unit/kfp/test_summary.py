"""The Markdown and metrics the KFP UI shows: pure functions of the step results."""

from __future__ import annotations

from volcano_pipelines.kfp import summary
from volcano_pipelines.steps._results import TrainResult


def _failed() -> dict:
    return TrainResult(
        name="mnist", namespace="ml", run_id="r1", phase="Failed", succeeded=False, duration_seconds=42.0, retries=3,
        tasks={"ps": {"pending": 0, "running": 0, "succeeded": 0, "failed": 0},
               "worker": {"pending": 0, "running": 1, "succeeded": 0, "failed": 2}},
        failure={"pod": "mnist-worker-1", "task": "worker", "exit_code": 137, "reason": "OOMKilled",
                 "message": "limit | 8Gi\nexceeded", "log_tail": "step 10\n```\nKilled"},
        message="job ml/mnist Failed after 3 restart(s)", missing=["pod logs (forbidden)"],
    ).to_dict()


def test_train_markdown_has_the_status_table_failure_and_log_tail() -> None:
    text = summary.train_markdown(_failed())
    assert text.startswith("## Training job `ml/mnist`: Failed (did not succeed)")
    assert "| worker | 0 | 1 | 0 | 2 |" in text
    assert "| exit code | 137 |" in text and "| reason | OOMKilled |" in text
    # A pipe or a line break inside a value must not break the table row.
    assert "| message | limit \\| 8Gi exceeded |" in text
    # The log tail holds a ``` line: the fence around it must be longer.
    assert "````\nstep 10\n```\nKilled\n````" in text
    assert "- pod logs (forbidden)" in text
    assert summary.AFTER_TRAINING in text


def test_train_metrics_only_what_is_known() -> None:
    assert summary.train_metrics(_failed()) == {"retries": 3.0, "duration_seconds": 42.0}
    done = {**_failed(), "ps_linger_seconds": 1.5, "duration_seconds": None}
    assert summary.train_metrics(done) == {"retries": 3.0, "ps_linger_seconds": 1.5}


def test_finish_markdown_with_and_without_a_job() -> None:
    with_job = summary.finish_markdown({"run_id": "r1", "pipeline_state": "FAILED", "error_message": "train failed",
                                        "namespace": "ml", "job": _failed(), "cleanup": "deleted"})
    assert with_job.startswith("## Run `r1`: FAILED")
    assert "| cleanup of the training job | deleted |" in with_job
    assert "### Training job `ml/mnist`" in with_job
    without = summary.finish_markdown({"run_id": "r2", "pipeline_state": "FAILED", "error_message": None,
                                       "namespace": "ml", "job": None, "cleanup": "none"})
    assert "no training job" in without and "| error |" not in without


def test_sync_markdown_lists_failures_and_shards() -> None:
    text = summary.sync_markdown({"src": "hdfs://nn/d", "dst": "/data", "dry_run": False, "copied": 1, "failed": 1,
                                  "throughput_mb_s": 12.345, "failures": [{"path": "a|b", "error": "checksum"}],
                                  "shard_manifests": ["/data/.vpipe/shards/shard-0-of-2"]})
    assert "some files failed" in text and "| a\\|b | checksum |" in text
    assert "12.3 MB/s" in text and "shard-0-of-2" in text


def test_finish_markdown_says_when_an_unknown_state_kept_the_job() -> None:
    text = summary.finish_markdown({"run_id": "r3", "pipeline_state": "RUNNING", "error_message": None,
                                    "namespace": "ml", "job": _failed(), "cleanup": "kept", "outcome": "unknown"})
    assert "| outcome | unknown state: the training job was kept, not cleaned up |" in text
    failed = summary.finish_markdown({"run_id": "r4", "pipeline_state": "CANCELED", "error_message": None,
                                      "namespace": "ml", "job": None, "cleanup": "none", "outcome": "failed"})
    assert "| outcome | failed |" in failed
