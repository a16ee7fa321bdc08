"""The sync step's copy-pod inputs (`workers` > 1): every bad value is refused before anything
is listed, created or written, naming the flag and what is allowed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from volcano_pipelines.cli import main
from volcano_pipelines.errors import InputError
from volcano_pipelines.steps import Connection, CopyPodOptions, sync

SRC = "webhdfs://127.0.0.1:9/data"  # never reached: every case fails before


@pytest.mark.parametrize(("kwargs", "field", "allowed"), [
    ({"workers": 0}, "workers", "from 1"),
    ({"workers": 1001}, "workers", "to 1000"),
    ({"dest_pvc": "data"}, "dest_pvc", "only with workers above 1"),
    ({"copy_pods": CopyPodOptions(spread=True)}, "spread", "only with workers above 1"),
    ({"workers": 2, "hadoop_conf_dir": "/etc/hadoop"}, "hadoop_conf_dir", "Secret or ConfigMap volume of a step pod"),
    ({"workers": 2, "kerberos_ccache": "/tmp/krb5cc"}, "kerberos_ccache", "Secret or ConfigMap volume of a step pod"),
    ({"workers": 2, "dest_subpath": "a"}, "dest_subpath", "only with dest_pvc"),
    ({"workers": 2, "dest_pvc": "d", "run_id": "../x"}, "run_id", "letters, digits"),
    ({"workers": 2, "dest_pvc": "d", "copy_pods": CopyPodOptions(cpu="lots")}, "cpu", ""),
    ({"workers": 2, "dest_pvc": "d", "copy_pods": CopyPodOptions(tolerations=["nope"])}, "tolerations", "KEY[=VALUE]:EFFECT"),
    ({"workers": 2, "dest_pvc": "d", "copy_pods": CopyPodOptions(max_retry=0)}, "max_retry", "from 1 to 100"),
    ({"workers": 2}, "dest_pvc", "PersistentVolumeClaim mounted at DST"),
    ({"workers": 2, "dest_pvc": " data"}, "dest_pvc", ""),
    ({"workers": 2, "dest_pvc": "data\n"}, "dest_pvc", ""),
    ({"workers": 2, "dest_pvc": "d", "dest_subpath": "../other"}, "dest_subpath", ""),
    ({"workers": 2, "dest_pvc": "d", "owner": "Workflow/run-1"}, "owner", "API_VERSION/KIND/NAME/UID"),
    ({"workers": 2, "dest_pvc": "d", "owner": "argoproj.io/v1alpha1/Workflow/Run_1/0b7a6a9e"}, "owner", ""),
    ({"workers": 2, "dest_pvc": "d", "owner": "v1/ConfigMap/x", "dry_run": True}, "owner", ""),
])
def test_bad_copy_pod_inputs_are_refused_before_anything_happens(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                 kwargs: dict[str, Any], field: str, allowed: str) -> None:
    monkeypatch.delenv("VPIPE_POD_NAME", raising=False)
    dst = tmp_path / "dst"
    with pytest.raises(InputError) as info:
        sync(SRC, str(dst), **kwargs)
    assert info.value.field == field and allowed in info.value.allowed
    assert not dst.exists()


def test_a_local_source_cannot_go_to_copy_pods(tmp_path: Path) -> None:
    (tmp_path / "src").mkdir()
    with pytest.raises(InputError) as info:
        sync(str(tmp_path / "src"), str(tmp_path / "dst"), workers=2, dest_pvc="d")
    assert info.value.field == "workers" and "local source" in info.value.allowed


def test_the_cli_names_the_flags(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv("VPIPE_POD_NAME", raising=False)
    assert main(["sync", SRC, str(tmp_path / "d"), "--workers", "3"]) == 2
    assert "--dest-pvc" in capsys.readouterr().err
    assert main(["sync", SRC, str(tmp_path / "d"), "--workers", "3", "--dest-pvc", "x", "--toleration", "bad"]) == 2
    assert "--toleration" in capsys.readouterr().err
    assert not (tmp_path / "d").exists()


def _help_sections(argv: list[str], capsys: pytest.CaptureFixture[str]) -> dict[str, list[str]]:
    """The flags under each heading of a command's --help."""
    with pytest.raises(SystemExit):
        main(argv)
    sections: dict[str, list[str]] = {}
    heading = ""
    for line in capsys.readouterr().out.splitlines():
        if line and not line.startswith(" ") and line.endswith(":"):
            heading = line[:-1]
            sections[heading] = []
        elif line.startswith("  --") and heading:
            sections[heading].append(line.split()[0])
    return sections


def test_sync_help_puts_the_copy_pod_flags_under_their_own_heading(capsys: pytest.CaptureFixture[str]) -> None:
    sections = _help_sections(["sync", "--help"], capsys)
    copy_pods = next(flags for heading, flags in sections.items() if heading.startswith("copy pods"))
    assert {"--workers", "--dest-pvc", "--queue", "--spread", "--max-retry"} <= set(copy_pods), sections
    cluster = next(flags for heading, flags in sections.items() if heading.startswith("cluster"))
    assert {"--kubeconfig", "--context"} <= set(cluster), sections
    assert "job" not in sections and "run" not in sections, list(sections)
    # The training commands keep theirs.
    assert "--queue" in _help_sections(["train", "tf", "--help"], capsys)["job"]


WORKFLOW = "argoproj.io/v1alpha1/Workflow/run-1/0b7a6a9e-2b1c-4c59-9d0d-3f9e9d1c1a11"


def test_the_copy_job_is_owned_as_given() -> None:
    from volcano_pipelines.steps._sync_workers import CopyPods, copy_job_manifest
    from volcano_pipelines.transfer.partition import RunRecord

    record = RunRecord(run_id="r1", src=SRC, user=None, options={}, parts=3, job="vpipe-sync-0123456789ab")
    owned = copy_job_manifest(CopyPods(namespace=None, claim="data", subpath=None, owner=WORKFLOW), record, "team-a")
    assert owned["metadata"]["ownerReferences"] == [{
        "apiVersion": "argoproj.io/v1alpha1", "kind": "Workflow", "name": "run-1",
        "uid": "0b7a6a9e-2b1c-4c59-9d0d-3f9e9d1c1a11", "controller": False, "blockOwnerDeletion": False}]
    assert owned["metadata"]["namespace"] == "team-a" and owned["spec"]["tasks"][0]["replicas"] == 3
    alone = copy_job_manifest(CopyPods(namespace=None, claim="data", subpath=None), record, "team-a")
    assert "ownerReferences" not in alone["metadata"]


def test_a_kfp_sync_step_takes_its_runs_workflow_as_the_copy_jobs_owner(monkeypatch: pytest.MonkeyPatch) -> None:
    """The KFP runtime fills `owner` of any step that has one (kfp/runtime.py), only where the copy
    job stays in the step pod's namespace."""
    from volcano_pipelines.kfp import runtime
    from volcano_pipelines.steps._identity import KfpPod

    pod = KfpPod("team-a", "sync-pod", "run-77", WORKFLOW)
    monkeypatch.setattr("volcano_pipelines.steps.kfp_pod", lambda *a, **k: pod, raising=False)
    same: dict[str, Any] = {"run_id": "run-77", "namespace": None}
    runtime._from_kfp_pod(sync, same)
    assert same["owner"] == WORKFLOW
    other: dict[str, Any] = {"run_id": "run-77", "namespace": "copiers"}
    runtime._from_kfp_pod(sync, other)
    assert other.get("owner") is None


def _step_pod(owners: list[dict[str, Any]]) -> dict[str, Any]:
    """A step pod that mounts claim `data` at /data and is owned by `owners`."""
    return {"metadata": {"name": "sync-pod", "ownerReferences": owners},
            "spec": {"volumes": [{"name": "d", "persistentVolumeClaim": {"claimName": "data"}}],
                     "containers": [{"name": "main", "image": "registry.example/vpipe:1",
                                     "volumeMounts": [{"name": "d", "mountPath": "/data"}]}]}}


ARGO_OWNER = {"apiVersion": "argoproj.io/v1alpha1", "kind": "Workflow", "name": "run-1",
              "uid": "0b7a6a9e-2b1c-4c59-9d0d-3f9e9d1c1a11", "controller": True, "blockOwnerDeletion": True}


@pytest.mark.parametrize(("owners", "workflow"), [
    ([ARGO_OWNER], WORKFLOW),
    ([{"apiVersion": "v1", "kind": "Node", "name": "n", "uid": "u"}, ARGO_OWNER], WORKFLOW),
    ([{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs", "uid": "u"}], None),
    ([], None),
])
def test_the_step_pod_is_read_for_its_workflow_and_namespace(monkeypatch: pytest.MonkeyPatch,
                                                             owners: list[dict[str, Any]], workflow: str | None) -> None:
    from types import SimpleNamespace

    from volcano_pipelines.steps import _sync_workers

    monkeypatch.setenv("VPIPE_POD_NAME", "sync-pod")
    monkeypatch.setattr("volcano_pipelines.k8s.client.connect", lambda *a: SimpleNamespace(namespace="team-a"))
    monkeypatch.setattr("volcano_pipelines.k8s.pods.pod_object", lambda cluster, ns, name: _step_pod(owners))
    found = _sync_workers.destination_claim("/data/ds", None, None, None, Connection())
    assert (found.claim, found.subpath, found.image) == ("data", "ds", "registry.example/vpipe:1")
    assert (found.pod_namespace, found.pod_workflow) == ("team-a", workflow)


@pytest.mark.parametrize(("given", "pod_workflow", "namespace", "owner"), [
    (None, WORKFLOW, None, WORKFLOW),  # the pod's namespace by default: the Workflow owns the copy job
    (None, WORKFLOW, "team-a", WORKFLOW),  # named, and the pod's
    (None, WORKFLOW, "copiers", None),  # another namespace: an owner there would have the job deleted at once
    (None, None, None, None),  # no Workflow owns the pod (a pod of a user's own)
    ("v1/ConfigMap/keep/u-1", WORKFLOW, None, "v1/ConfigMap/keep/u-1"),  # given: as given
    ("v1/ConfigMap/keep/u-1", WORKFLOW, "copiers", "v1/ConfigMap/keep/u-1"),
])
def test_the_copy_job_is_owned_by_the_step_pods_workflow_unless_given_or_elsewhere(
        given: str | None, pod_workflow: str | None, namespace: str | None, owner: str | None) -> None:
    from volcano_pipelines.steps._sync_workers import FromStepPod, copy_job_owner

    step_pod = FromStepPod("data", None, "img", pod_namespace="team-a", pod_workflow=pod_workflow)
    assert copy_job_owner(given, step_pod, namespace) == owner


def test_outside_a_step_pod_the_copy_job_has_no_owner_but_the_one_given(monkeypatch: pytest.MonkeyPatch) -> None:
    from volcano_pipelines.steps._sync_workers import copy_job_owner, destination_claim

    monkeypatch.delenv("VPIPE_POD_NAME", raising=False)
    found = destination_claim("/mnt/ds", "data", None, None, Connection())
    assert (found.pod_namespace, found.pod_workflow) == (None, None)
    assert copy_job_owner(None, found, None) is None
    assert copy_job_owner(WORKFLOW, found, "x") == WORKFLOW
