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


def test_finish_markdown_says_which_rule_decided_and_when_nothing_could() -> None:
    text = summary.finish_markdown({"run_id": "r3", "pipeline_state": "RUNNING", "error_message": None,
                                    "namespace": "ml", "job": None, "cleanup": "none", "outcome": "unknown",
                                    "rule": "state 'RUNNING' is not an end state, and the run has no training job"})
    assert "| outcome | unknown: nothing to decide from, nothing cleaned up |" in text
    assert "| decided by | state 'RUNNING' is not an end state, and the run has no training job |" in text
    failed = summary.finish_markdown({"run_id": "r4", "pipeline_state": "CANCELED", "error_message": None,
                                      "namespace": "ml", "job": None, "cleanup": "none", "outcome": "failed"})
    assert "| outcome | failed |" in failed


def _trained() -> dict[str, object]:
    return {**_failed(), "phase": "Completed", "succeeded": True, "failure": None, "message": None,
            "progress": {"step": 6000, "total": 6000, "loss": 0.2314, "examples_per_second": 812.5,
                         "eta_seconds": 0.0},
            "last_checkpoint": {"step": 6000, "time": "2026-01-01T00:10:00Z", "path": "/logs/run/ckpt-6000"},
            "resumed_from_step": 700}


def test_train_metrics_carry_the_reported_progress_and_resumed_step() -> None:
    metrics = summary.train_metrics(_trained())
    assert metrics == {"retries": 3.0, "duration_seconds": 42.0, "resumed_from_step": 700.0, "final_step": 6000.0,
                       "total_steps": 6000.0, "final_loss": 0.2314, "examples_per_second": 812.5,
                       "last_checkpoint_step": 6000.0}


def test_train_markdown_shows_the_progress_or_that_none_was_reported() -> None:
    text = summary.train_markdown(_trained())
    assert "| training progress | step 6000 of 6000, loss 0.2314, 812.5 examples/s |" in text
    assert "| last checkpoint | step 6000 at 2026-01-01T00:10:00Z, `/logs/run/ckpt-6000` |" in text
    assert "| resumed from step | 700 |" in text
    silent = summary.train_markdown({**_trained(), "progress": None, "last_checkpoint": None,
                                     "resumed_from_step": None})
    assert "| training progress | no progress reported |" in silent and "resumed from step" not in silent
def test_train_summary_carries_restart_causes_and_the_post_mortem() -> None:
    result = {"name": "j", "namespace": "ns", "phase": "Completed", "succeeded": True, "retries": 2,
              "restarts": [{"number": 1, "cause": "evicted", "pod": "j-ps-0", "task": "ps", "at": "t1",
                            "reason": "EvictionByEvictionAPI"},
                           {"number": 2, "cause": "exit code 1", "pod": "j-worker-1", "task": "worker", "at": "t2"}],
              "post_mortem": {"json": "/pm/ns/j.json", "markdown": "/pm/ns/j.md", "bytes": 1234, "pods": 3,
                              "summary": "# Post-mortem: job ns/j\n\n## Pods\n"}}
    metrics = summary.train_metrics(result)
    assert metrics["restarts_evicted"] == 1.0 and metrics["restarts_exit_code_1"] == 1.0 and metrics["retries"] == 2.0
    text = summary.train_markdown(result)
    assert "| 1 | evicted | j-ps-0 | ps | t1 | EvictionByEvictionAPI |" in text
    assert "Saved as `/pm/ns/j.json` (1234 bytes, 3 pods)" in text
    assert "#### Post-mortem: job ns/j" in text and "##### Pods" in text  # below the step's own headings
    assert "Copied to" not in text
    # In a pipeline, the copy on the run's log PVC is named too (issue 30).
    copy = {"json": "/vpipe/logs/post-mortem/ns/j.json", "markdown": "/vpipe/logs/post-mortem/ns/j.md"}
    text = summary.train_markdown({**result, "post_mortem": {**result["post_mortem"], "copies": [copy]}})
    assert "Copied to `/vpipe/logs/post-mortem/ns/j.json` and `/vpipe/logs/post-mortem/ns/j.md`." in text


def test_finish_markdown_puts_the_tensorboard_link_beside_the_post_mortem() -> None:
    saved = {"json": "/out/ml/mnist.json", "markdown": "/out/ml/mnist.md", "bytes": 5120, "pods": 3,
             "summary": "## Post-mortem of job `ml/mnist`\n\n| pod | exit code |\n|---|---|\n| mnist-worker-0 | 3 |\n"}
    text = summary.finish_markdown({
        "run_id": "r5", "pipeline_state": "RUNNING", "error_message": None, "namespace": "ml", "job": _failed(),
        "cleanup": "deleted", "outcome": "failed", "rule": "the job had not finished",
        "tensorboard": {"name": "mnist-tensorboard", "url": "http://10.0.0.5:30606/", "urls": {}},
        "post_mortem": saved})
    assert "| TensorBoard | [http://10.0.0.5:30606/](http://10.0.0.5:30606/) |" in text
    assert "Saved as `/out/ml/mnist.json` (5120 bytes, 3 pods)" in text
    # The record's own heading sits below the report's headings, and its table comes along.
    assert "##### Post-mortem of job `ml/mnist`" in text and "| mnist-worker-0 | 3 |" in text
    assert text.index("TensorBoard") < text.index("Post-mortem")
    plain = summary.finish_markdown({"run_id": "r6", "pipeline_state": "COMPLETE", "namespace": "ml",
                                     "job": _trained(), "cleanup": "none", "outcome": "succeeded"})
    assert "| TensorBoard |" not in plain and "Post-mortem" not in plain


def test_a_result_with_no_summary_of_its_own_shows_its_fields() -> None:
    text = summary.result_markdown({"greeting": "hello | world", "count": 2, "ok": True, "missing": None,
                                    "items": [{"a": 1}], "empty": {}})
    assert text.startswith("## Result\n")
    assert "| greeting | hello \\| world |" in text and "| count | 2 |" in text and "| ok | True |" in text
    assert "missing" not in text  # None: nothing to show
    assert '"items": [' in text and '"empty": {}' in text  # the rest as JSON, in a fenced block
    assert text.count("```") == 2
