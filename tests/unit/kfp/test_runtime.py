"""What runs in the step pod: KFP values -> step arguments, the step really called, the
outputs (parameters, metrics, Markdown) written, and a failed step exits non-zero with the
step's own one-line error."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers.kfp_runtime import Markdown, Metrics, _outputs
from volcano_pipelines.kfp.runtime import run_step, step_arguments, step_function
from volcano_pipelines.kfp.specs import COMPONENTS
from volcano_pipelines.steps import Connection
from volcano_pipelines.steps._train import train_tf


def test_empty_ui_values_mean_not_set_only_where_the_default_is_none() -> None:
    got = step_arguments(train_tf, {"name": "m", "image": "", "args": [], "env": {}, "queue": "", "entry": "",
                                    "kubeconfig": "", "gpus": {"worker": 1.0, "": 2}, "workers": 3.0, "ttl": 60})
    assert got["image"] is None and got["args"] is None and got["env"] is None
    assert got["connection"] == Connection() and "kubeconfig" not in got  # the connection's fields as its group
    # Defaults that are not None keep what was given (the step decides whether '' is valid).
    assert got["queue"] == "" and got["entry"] == ""
    assert got["gpus"] == {"worker": 1, "": 2} and isinstance(got["gpus"]["worker"], int)
    assert got["workers"] == 3 and isinstance(got["workers"], int)
    assert got["ttl"] == 60
    assert "progress" not in got


def test_sync_runs_for_real_and_reports(tmp_path: Path) -> None:
    src = tmp_path / "src"
    (src / "sub").mkdir(parents=True)
    (src / "a.bin").write_bytes(b"x" * 1000)
    (src / "sub" / "b.bin").write_bytes(b"y" * 24)
    metrics, summary = Metrics(), Markdown(tmp_path / "summary.md")
    values = run_step("sync", {"src": str(src), "dst": str(tmp_path / "dst"), "include": [], "user": ""},
                      metrics=metrics, summary=summary)
    out = _outputs("sync", values)
    assert (out["copied"], out["bytes_copied"], out["failed"]) == (2, 1024, 0)
    assert (tmp_path / "dst" / "sub" / "b.bin").read_bytes() == b"y" * 24
    assert out["result"]["ok"] is True and "plan" not in out["result"]
    assert metrics.metadata["files_copied"] == 2 and metrics.metadata["bytes_copied"] == 1024
    assert "throughput_mb_s" in metrics.metadata
    text = Path(summary.path).read_text()
    assert "| files copied | 2 |" in text and "| bytes copied | 1024 |" in text

    # Again: nothing to copy (incremental), still a success.
    again = _outputs("sync", run_step("sync", {"src": str(src), "dst": str(tmp_path / "dst")}, metrics=Metrics(),
                                      summary=summary))
    assert again["copied"] == 0 and again["result"]["skipped"] == 2


def test_bad_input_exits_2_with_the_steps_message(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    summary = Markdown(tmp_path / "summary.md")
    with pytest.raises(SystemExit) as stopped:
        run_step("sync", {"src": str(tmp_path / "missing"), "dst": str(tmp_path / "dst")}, metrics=Metrics(),
                 summary=summary)
    assert stopped.value.code == 2
    err = capsys.readouterr().err
    assert "vpipe: error: invalid src=" in err and "Traceback" not in err
    assert "## sync: error" in Path(summary.path).read_text()


def test_train_dry_run_through_the_runtime(tmp_path: Path) -> None:
    metrics, summary = Metrics(), Markdown(tmp_path / "summary.md")
    values = run_step("train_tf", {"name": "mnist", "image": "tf:1", "workers": 2, "run_id": "run-1", "dry_run": True,
                                   "namespace": "team-a", "code_url": "", "gpus": {"worker": 1.0}},
                      metrics=metrics, summary=summary)
    out = _outputs("train_tf", values)
    assert (out["job_name"], out["job_namespace"], out["run_id"], out["phase"], out["succeeded"]) == \
        ("mnist", "team-a", "run-1", "DryRun", True)
    assert out["duration_seconds"] == 0.0  # not finished: nothing to measure
    manifest = out["result"]["manifest"]
    assert manifest["metadata"]["labels"]["volcano-pipelines/run"] == "run-1"
    workers = next(t for t in manifest["spec"]["tasks"] if t["name"] == "worker")
    assert workers["template"]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] in (1, "1")
    assert metrics.metadata == {"retries": 0.0}
    assert "DryRun" in Path(summary.path).read_text()


def test_train_bad_input_names_the_argument(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stopped:
        run_step("train_tf", {"name": "Not_A_DNS_Name", "dry_run": True}, metrics=Metrics(),
                 summary=Markdown(tmp_path / "s.md"))
    assert stopped.value.code == 2
    assert "name" in capsys.readouterr().err


def test_every_component_names_a_step_that_exists() -> None:
    for spec in COMPONENTS.values():
        assert callable(step_function(spec.step))


def test_the_post_mortem_artifact_is_where_the_step_saves_its_records(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    from volcano_pipelines.postmortem.save import default_directory, write_record

    monkeypatch.setenv("VPIPE_POST_MORTEM_DIR", str(tmp_path / "elsewhere"))  # restored after the test
    artifact = Markdown(tmp_path / "post_mortem")
    run_step("train_tf", {"name": "mnist", "image": "tf:1", "dry_run": True, "namespace": "team-a"},
             metrics=Metrics(), summary=Markdown(tmp_path / "summary.md"), post_mortem=artifact)
    # A dry run has no job: the artifact says so rather than being an empty directory.
    assert [p.name for p in Path(artifact.path).iterdir()] == ["README.md"]
    assert "No post-mortem record" in (Path(artifact.path) / "README.md").read_text()
    # What the step saves from here on lands in the artifact (a directory KFP uploads).
    assert default_directory() == Path(artifact.path)
    saved = write_record({"job": {"namespace": "team-a", "name": "mnist"}, "pods": [], "bytes": 10})
    assert Path(saved["json"]) == Path(artifact.path) / "team-a" / "mnist.json"
