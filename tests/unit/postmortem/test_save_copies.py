"""The post-mortem record in more than one place (issue 30): in a pipeline, the step's usual
directory (the KFP artifact) and a copy on the run's logs volume. A copy that cannot be
written is a note, never a failed step; the single-directory callers are unchanged."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from volcano_pipelines.postmortem.save import VOLUME_DIR_ENV, copy_directories, load_post_mortem, write_record

RECORD: dict[str, Any] = {"job": {"namespace": "team-a", "name": "mnist", "phase": "Failed"}, "pods": [],
                          "bytes": 10, "notes": ["logs of pod mnist-ps-0 not read: forbidden"]}


def _files(directory: Path) -> dict[str, str]:
    return {p.name: p.read_text() for p in sorted((directory / "team-a").iterdir())}


def test_a_record_written_to_two_directories_is_the_same_in_both(tmp_path: Path) -> None:
    artifact, volume = tmp_path / "artifact", tmp_path / "logs" / "post-mortem"
    (tmp_path / "logs").mkdir()  # the volume's mount point
    saved = write_record(RECORD, artifact, [volume])
    assert _files(artifact) == _files(volume)
    assert set(_files(volume)) == {"mnist.json", "mnist.md"}  # no temporary file left behind
    assert saved["json"] == str(artifact / "team-a" / "mnist.json")
    assert saved["copies"] == [{"json": str(volume / "team-a" / "mnist.json"),
                                "markdown": str(volume / "team-a" / "mnist.md")}]
    assert saved["notes"] == RECORD["notes"]
    # Either copy reads back as the record (`vpipe status --post-mortem` with VPIPE_POST_MORTEM_DIR).
    loaded = load_post_mortem("team-a", "mnist", volume)
    assert loaded is not None and loaded[0] == RECORD


def test_a_copy_that_cannot_be_written_is_a_note_and_the_step_keeps_its_record(tmp_path: Path) -> None:
    # A directory that cannot be made on the mounted volume (a file in the way): a root-owned
    # volume fails a non-root step pod the same way (EACCES), and this fails whoever runs it.
    artifact, volume = tmp_path / "artifact", tmp_path / "volume" / "post-mortem"
    (tmp_path / "volume").mkdir()
    volume.write_text("not a directory")
    saved = write_record(RECORD, artifact, [volume])
    assert saved["copies"] == []
    note = saved["notes"][-1]
    assert note.startswith(f"the copy under {volume} was not written: ") and saved["notes"][:-1] == RECORD["notes"]
    # The record the step keeps says so too, in its JSON and its Markdown (and so in the summary).
    record = json.loads((artifact / "team-a" / "mnist.json").read_text())
    assert record["notes"][-1] == note
    assert note in (artifact / "team-a" / "mnist.md").read_text() and note in saved["summary"]
    assert RECORD["notes"] == ["logs of pod mnist-ps-0 not read: forbidden"]  # the caller's record is untouched


def test_no_copy_where_the_volume_is_not_mounted(tmp_path: Path) -> None:
    """The mount point is never made by the step: a pod that has the variable but not the
    volume (kfp.local applies a task's env, not its mounts) writes nothing into its own disk."""
    saved = write_record(RECORD, tmp_path / "artifact", [tmp_path / "logs" / "post-mortem"])
    assert saved["copies"] == [] and not (tmp_path / "logs").exists()
    assert saved["notes"][-1] == (f"the copy under {tmp_path / 'logs' / 'post-mortem'} was not written: "
                                  f"{tmp_path / 'logs'} does not exist (is the volume mounted?)")


def test_one_directory_as_before_and_the_copies_come_from_the_pipelines_variable(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(VOLUME_DIR_ENV, raising=False)
    assert copy_directories() == ()
    monkeypatch.setenv(VOLUME_DIR_ENV, str(tmp_path / "logs" / "post-mortem"))
    assert copy_directories() == (tmp_path / "logs" / "post-mortem",)
    # write_record's callers that name one directory (the local backend, tests) get one.
    saved = write_record(RECORD, tmp_path / "local")
    assert saved["copies"] == [] and not (tmp_path / "logs").exists()
    assert set(_files(tmp_path / "local")) == {"mnist.json", "mnist.md"}


def test_save_post_mortem_copies_onto_the_volume_the_pipeline_names_and_never_fails_for_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """What the train step and the exit handler call: the copy goes where the pipeline's
    variable says; a volume that cannot be written leaves the step's own record and a note."""
    from volcano_pipelines.postmortem import save
    from volcano_pipelines.postmortem.reads import Collected

    job = {"metadata": {"name": "mnist", "namespace": "team-a", "uid": "j"}, "spec": {"tasks": []},
           "status": {"state": {"phase": "Failed"}}}
    monkeypatch.setattr(save.collect, "read_state", lambda *a, **k: Collected(job=job))
    monkeypatch.setattr(save.collect, "read_logs", lambda *a, **k: {})
    monkeypatch.setenv(save.DIR_ENV, str(tmp_path / "artifact"))
    monkeypatch.setenv(VOLUME_DIR_ENV, str(tmp_path / "logs" / "post-mortem"))
    (tmp_path / "logs").mkdir()
    saved = save.save_post_mortem(object(), "team-a", "mnist")  # type: ignore[arg-type]
    assert "error" not in saved, saved
    assert _files(tmp_path / "artifact") == _files(tmp_path / "logs" / "post-mortem")
    (tmp_path / "ro").mkdir()
    (tmp_path / "ro" / "post-mortem").write_text("")  # in the way, as an unwritable volume would be
    monkeypatch.setenv(VOLUME_DIR_ENV, str(tmp_path / "ro" / "post-mortem"))
    saved = save.save_post_mortem(object(), "team-a", "mnist")  # type: ignore[arg-type]
    assert "error" not in saved and saved["copies"] == [] and "was not written" in saved["notes"][-1]
    assert Path(saved["json"]).is_file()
