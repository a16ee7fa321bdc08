"""The shipped KFP pipelines with every component in a real container of the runtime image
(kfp.local's DockerRunner on podman, tests/kfp_docker/harness.py), against the test control
plane and the real node: sync from the test HDFS onto the GlusterFS-backed data directory,
training on real pods with real TensorFlow / MPI, reap, TensorBoard, and the exit handler.

What this stands in for: KFP's backend (API server, driver, launcher) cannot run here (no
registry carries it). kfp.local runs each component's compiled command and executor input in
the component's image, as the launcher would, but it ignores the kfp-kubernetes platform
settings (the data PVC mount of the sync pod, pull secrets): the test mounts the data
directory where the pipeline's sync step writes (/data) and the kubeconfig itself, and the
containers use the host network. Every pod the pipeline makes (training, TensorBoard) is
placed on the real node through the pipeline's own inputs: the PVCs are hostPath volumes there."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.training import QUIET_TF, Volumes, placement, toleration
from tests.kfp_docker.harness import bind, readable_kubeconfig, task_dirs, task_outputs

pytestmark = [pytest.mark.integration, pytest.mark.kfpdocker, pytest.mark.realnode, pytest.mark.containers, pytest.mark.hdfs,
              pytest.mark.gluster]

GROUP, VERSION = "batch.volcano.sh", "v1alpha1"


def _jobs(cluster: Any, namespace: str) -> list[dict[str, Any]]:
    from kubernetes import client

    custom = client.CustomObjectsApi(cluster.api_client())
    return list(custom.list_namespaced_custom_object(GROUP, VERSION, namespace, "jobs")["items"])


def test_a_component_that_exits_3_is_a_failed_task(kfp_docker: Any, tmp_path: Path,
                                                   capfd: pytest.CaptureFixture[str]) -> None:
    """kfp.local 2.17 alone reports this task as a SUCCESS (kubeflow/pipelines#13332): the
    harness reads the container's real exit status."""
    from volcano_pipelines.kfp import components

    unreachable = tmp_path / "kubeconfig"
    unreachable.mkdir(mode=0o755)
    (unreachable / "config").write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: x\n"
        "clusters: [{name: c, cluster: {server: 'https://127.0.0.1:1', insecure-skip-tls-verify: true}}]\n"
        "users: [{name: u, user: {token: t}}]\n"
        "contexts: [{name: x, context: {cluster: c, user: u, namespace: default}}]\n")
    (unreachable / "config").chmod(0o644)
    kfp_docker.mounts = [bind(unreachable, str(unreachable), read_only=True)]
    kfp_docker.raise_on_error(True)
    with pytest.raises(RuntimeError, match="FAILURE"):
        components.reap(job="nothing-here", kubeconfig=str(unreachable / "config"))
    assert kfp_docker.exit_codes == [3]  # vpipe's "cannot reach the API server"
    assert "cannot reach the Kubernetes API server" in capfd.readouterr().out


def _prepare(kfp_docker: Any, cluster: Any, namespace: str, storage: Volumes, hdfs: Any,
             tmp_path: Path) -> tuple[str, dict[str, bytes], Path]:
    """A dataset of its own in HDFS (the training data the fixture made, and a file more); the
    pipeline's sync step stages it into the model's own directory of the data PVC (mounted at
    /data in the sync container), beside what the fixture staged, and that directory is all
    the training pods see. Returns (its HDFS directory, the fixture's files, the kubeconfig
    the containers read)."""
    from tests.storage.trees import put_tree
    from volcano_pipelines.kfp.pipelines import DATA_MOUNT

    hdfs_dir = f"/kfp/{namespace}"
    dataset = {p.name: p.read_bytes() for p in storage.data_dir.iterdir() if p.is_file()}
    put_tree(hdfs.client(), hdfs_dir, {**dataset, "extra/part-0.csv": b"x,y\n1,2\n" * 100})
    # The runtime image runs as uid 1000 (a PVC would give it the group through fsGroup).
    subprocess.run(["chmod", "-R", "a+rwX", str(storage.data_dir)], check=True)
    kubeconfig = readable_kubeconfig(cluster, tmp_path)
    kfp_docker.mounts = [bind(kubeconfig.parent, str(kubeconfig.parent), read_only=True),
                         bind(storage.data_dir, DATA_MOUNT)]
    return hdfs_dir, dataset, kubeconfig


@pytest.mark.parametrize("kind", ["tf", "mpi"])
def test_the_shipped_pipeline_runs_in_the_runtime_image(
        kfp_docker: Any, cluster: Any, namespace: str, node: Any, code_url: str, volumes: Volumes,
        hdfs: Any, tmp_path: Path, kind: str) -> None:
    from volcano_pipelines.images import MPI_TRAINER_IMAGE, TENSORBOARD_IMAGE, TF_TRAINER_IMAGE
    from volcano_pipelines.kfp.pipelines import train_and_serve

    hdfs_dir, dataset, kubeconfig = _prepare(kfp_docker, cluster, namespace, volumes, hdfs, tmp_path)

    shape: dict[str, Any]
    if kind == "tf":
        shape = {"image": TF_TRAINER_IMAGE, "ps": 1, "workers": 2, "code_url": f"{code_url}/tf-ps/",
                 "args": ["--api=tf1", "--steps=40", "--threads=1", "--log_every=20", "--checkpoint_every=20"],
                 "env": {"": QUIET_TF}, "serve_model": False}
    else:
        shape = {"image": MPI_TRAINER_IMAGE, "workers": 2, "code_url": f"{code_url}/mpi/",
                 "command": ["python3", "train.py", "--steps=30"]}
    pipeline = train_and_serve(kind, step_retries=0)
    # Every pod on the real node: the PVCs are hostPath volumes of that node.
    board = {"tensorboard_image": TENSORBOARD_IMAGE, "tensorboard_node_selector": {node.label: node.label_value},
             "tensorboard_tolerations": [toleration(node)]}
    # queue: the test cluster has Volcano's own queues only, not the `vpipe` queue the pipelines default to.
    pipeline(model_name=f"kfpd-{kind}", dataset_url=f"{hdfs.url}{hdfs_dir}", data_pvc=volumes.data_pvc,
             log_pvc=volumes.log_pvc, kubeconfig=str(kubeconfig), namespace=namespace, queue="default", **shape,
             **placement(node), **board)

    root = kfp_docker.root
    # sync ran in its container and really staged the dataset from HDFS.
    synced = task_outputs(root, "sync")
    assert synced["copied"] == len(dataset) + 1 and synced["failed"] == 0
    own = volumes.data_dir / f"kfpd-{kind}"
    staged = sorted(str(p.relative_to(volumes.data_dir)) for p in volumes.data_dir.rglob("*"))
    assert f"kfpd-{kind}/extra/part-0.csv" in staged, staged
    assert (own / "extra" / "part-0.csv").read_bytes() == b"x,y\n1,2\n" * 100
    assert {name: (own / name).read_bytes() for name in dataset} == dataset
    # train submitted the job from its container and waited for real pods to finish it.
    trained = task_outputs(root, f"train-{kind}")
    assert trained["phase"] == "Completed" and trained["succeeded"] is True, trained
    jobs = _jobs(cluster, namespace)
    assert [job["metadata"]["name"] for job in jobs] == [f"kfpd-{kind}"]
    if kind == "tf":
        assert list((volumes.log_dir / "export").glob("*/*/saved_model.pb"))
        reaped = task_outputs(root, "reap")
        assert reaped["succeeded"] is True
    else:
        assert json.loads((volumes.log_dir / "mpi-result.json").read_text())["ranks"] == 2
    served = task_outputs(root, "tensorboard")
    assert served["name"] == f"kfpd-{kind}-tensorboard" and served["ready"] is True and served["url"]
    finished = task_outputs(root, "finish-run")
    assert finished["pipeline_state"] == "SUCCEEDED"
    assert (finished["job_phase"], finished["cleanup"]) == ("Completed", "none")
    # The train step's post_mortem artifact holds the record of every pod of its job; the exit
    # handler's summary links the run's TensorBoard (found by the run's labels).
    (train_dir,) = task_dirs(root, f"train-{kind}")
    record = json.loads((train_dir / "post_mortem" / namespace / f"kfpd-{kind}.json").read_text())
    assert record["job"]["phase"] == "Completed" and record["pods"], record["job"]
    assert all(pod["name"].startswith(f"kfpd-{kind}-") for pod in record["pods"]), record["pods"]
    (finish_dir,) = task_dirs(root, "finish-run")
    assert f"| TensorBoard | [{served['url']}]({served['url']}) |" in (finish_dir / "summary").read_text()
    assert jobs[0]["metadata"]["labels"]["volcano-pipelines/run"] == trained["run_id"]


def test_a_failing_worker_fails_the_run_and_the_exit_handler_keeps_the_post_mortem(
        kfp_docker: Any, cluster: Any, namespace: str, node: Any, code_url: str, volumes: Volumes,
        hdfs: Any, tmp_path: Path) -> None:
    from volcano_pipelines.images import TENSORBOARD_IMAGE, TF_TRAINER_IMAGE
    from volcano_pipelines.kfp.pipelines import train_and_serve

    hdfs_dir, _, kubeconfig = _prepare(kfp_docker, cluster, namespace, volumes, hdfs, tmp_path)
    pipeline = train_and_serve("tf", step_retries=0)
    # fail/: worker 0 prints a few lines and exits 3; max_retry 1 restarts the job once.
    pipeline(model_name="kfpd-boom", dataset_url=f"{hdfs.url}{hdfs_dir}", data_pvc=volumes.data_pvc,
             log_pvc=volumes.log_pvc, kubeconfig=str(kubeconfig), namespace=namespace, queue="default",
             image=TF_TRAINER_IMAGE, ps=1, workers=1, code_url=f"{code_url}/fail/", max_retry=1, serve_model=False,
             tensorboard_image=TENSORBOARD_IMAGE, tensorboard_node_selector={node.label: node.label_value},
             tensorboard_tolerations=[toleration(node)], **placement(node))

    root = kfp_docker.root
    # The train task failed (exit 1): KFP's executor wrote no executor_output.json for it.
    (train_dir,) = task_dirs(root, "train-tf")
    assert not (train_dir / "executor_output.json").exists() and 1 in kfp_docker.exit_codes, kfp_docker.exit_codes
    finished = task_outputs(root, "finish-run")
    assert finished["pipeline_state"] == "FAILED" and finished["cleanup"] == "deleted", finished
    assert _jobs(cluster, namespace) == []  # the exit handler deleted the job...
    # ...after saving what happened to its pods into its post_mortem artifact.
    (finish_dir,) = task_dirs(root, "finish-run")
    record = json.loads((finish_dir / "post_mortem" / namespace / "kfpd-boom.json").read_text())
    pods = {pod["name"]: pod for pod in record["pods"]}
    assert "kfpd-boom-worker-0" in pods, sorted(pods)
    worker = pods["kfpd-boom-worker-0"]
    assert (worker.get("end") or {}).get("exit_code") == 3, worker
    logs = [line for container in worker.get("containers") or [] for line in container.get("log") or []]
    assert any("worker 0 giving up: exit 3" in line for line in logs), worker
    summary = (finish_dir / "summary").read_text()
    assert "kfpd-boom-worker-0" in summary and "exit code 3" in summary and "giving up: exit 3" in summary, summary
