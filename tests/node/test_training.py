"""Training for real on the real node, through the train step (`train_tf` / `train_mpi`, what
`vpipe train` calls), with the images built from images/: pods fetch the examples over HTTP
from a server on the bridge, find each other by the headless service names Volcano's `svc`
plugin makes (CoreDNS), read the data from a data PVC and write to a log PVC.

The PVCs are hostPath PVs on this one node backed by directories of the test GlusterFS
volume's FUSE mount; the data PVC is filled by the sync step from the test HDFS."""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import pytest

from tests.helpers.training import QUIET_TF, Volumes, placement, toleration
from volcano_pipelines.images import MPI_TRAINER_IMAGE, TENSORBOARD_IMAGE, TF_TRAINER_IMAGE
from volcano_pipelines.steps import Connection, Placement, tensorboard, train_mpi, train_tf

pytestmark = [pytest.mark.integration, pytest.mark.realnode, pytest.mark.containers,
              pytest.mark.hdfs, pytest.mark.gluster]


class PodClock:
    """Watches pods in a namespace and records, per pod, when its containers terminated (from
    the kubelet's status) and when the pod was deleted: the parameter server's linger is the
    completion task's finish to the PS pod's end, measured on real pods."""

    def __init__(self, cluster: Any, namespace: str) -> None:
        from kubernetes import client, watch

        self.finished: dict[str, float] = {}
        self.deleted: dict[str, float] = {}
        self._watch = watch.Watch()
        core = client.CoreV1Api(cluster.api_client())
        self._thread = threading.Thread(target=self._run, args=(core, namespace), daemon=True)
        self._thread.start()

    def _run(self, core: Any, namespace: str) -> None:
        for event in self._watch.stream(core.list_namespaced_pod, namespace, timeout_seconds=900):
            pod = event["object"]
            name = pod.metadata.name
            if event["type"] == "DELETED" or pod.metadata.deletion_timestamp:
                self.deleted.setdefault(name, time.time())
            for status in pod.status.container_statuses or []:
                if status.state and status.state.terminated and status.state.terminated.finished_at:
                    self.finished.setdefault(name, status.state.terminated.finished_at.timestamp())

    def stop(self) -> None:
        self._watch.stop()


def test_tf2_parameter_servers_find_each_other_and_complete_job_ends_the_ps(
    cluster: Any, namespace: str, node: Any, code_url: str, volumes: Volumes
) -> None:
    clock = PodClock(cluster, namespace)
    started = time.monotonic()
    result = train_tf(
        "ps2", connection=Connection(str(cluster.kubeconfig)), namespace=namespace, image=TF_TRAINER_IMAGE,
        ps=2, workers=2, chief=True, code_url=f"{code_url}/tf-ps/", data_pvc=volumes.data_pvc,
        log_pvc=volumes.log_pvc, args=["--api=tf2", "--steps=60", "--threads=1", "--log_every=20",
                                       "--checkpoint_every=30"],
        env={"": QUIET_TF}, timeout=600, **placement(node),
    )
    seconds = time.monotonic() - started
    clock.stop()
    assert result.succeeded and result.phase == "Completed", result.to_dict()
    # The chief trained through the PS and workers, checkpointed and exported on the log PVC.
    metrics = json.loads((volumes.log_dir / "metrics.json").read_text())
    assert metrics["global_step"] >= 60
    assert list((volumes.log_dir / "export").glob("*/*/saved_model.pb"))
    # The PS never ends by itself: it outlived the chief and was ended by CompleteJob.
    chief_done = clock.finished["ps2-chief-0"]
    # Two parameter servers, each started with its own sparse view of the cluster (itself and
    # the chief): the coordinator's cluster file told them the rest.
    ps_end = clock.deleted.get("ps2-ps-0") or clock.finished.get("ps2-ps-0")
    assert ps_end is not None and ps_end >= chief_done
    linger = ps_end - chief_done
    print(f"\nreal node: TF2 PS job Completed in {seconds:.1f} s; PS outlived the chief by {linger:.2f} s")
    assert result.tasks["chief"]["succeeded"] == 1


def test_tf1_between_graph_with_run_sh_flags(cluster: Any, namespace: str, node: Any, code_url: str,
                                             volumes: Volumes) -> None:
    result = train_tf(
        "ps1", connection=Connection(str(cluster.kubeconfig)), namespace=namespace, image=TF_TRAINER_IMAGE,
        ps=2, workers=2, code_url=f"{code_url}/tf-ps/", data_pvc=volumes.data_pvc, log_pvc=volumes.log_pvc,
        args=["--api=tf1", "--steps=60", "--threads=1", "--log_every=20", "--checkpoint_every=30"],
        env={"": QUIET_TF}, timeout=600, **placement(node),
    )
    assert result.succeeded and result.phase == "Completed", result.to_dict()
    assert result.tasks["worker"]["succeeded"] == 2
    assert list((volumes.log_dir / "export").glob("*/*/saved_model.pb"))


def test_mpi_allreduce_over_ssh_between_pods(cluster: Any, namespace: str, node: Any, code_url: str,
                                             volumes: Volumes) -> None:
    from kubernetes import client

    result = train_mpi(
        "lr", connection=Connection(str(cluster.kubeconfig)), namespace=namespace, image=MPI_TRAINER_IMAGE,
        workers=2, code_url=f"{code_url}/mpi/", data_pvc=volumes.data_pvc, log_pvc=volumes.log_pvc,
        command=["python3", "train.py", "--steps=50"], mpiexec_args=["--display-map"], timeout=600,
        **placement(node),
    )
    assert result.succeeded and result.phase == "Completed", result.to_dict()
    # mpiexec mapped one rank to each worker pod (reached over ssh through the hostfile), and
    # the ranks' Allreduce made them agree on the weights.
    log = client.CoreV1Api(cluster.api_client()).read_namespaced_pod_log("lr-mpimaster-0", namespace)
    assert "lr-mpiworker-0" in log and "lr-mpiworker-1" in log, log
    results = [dict(kv.split("=", 1) for kv in line.split()[1:]) for line in log.splitlines() if line.startswith("RESULT")]
    assert sorted(r["rank"] for r in results) == ["0", "1"] and {r["size"] for r in results} == {"2"}, log
    assert len({r["checksum"] for r in results}) == 1
    assert json.loads((volumes.log_dir / "mpi-result.json").read_text())["ranks"] == 2


def test_failing_worker_reports_pod_exit_code_and_log(cluster: Any, namespace: str, node: Any,
                                                      code_url: str, volumes: Volumes) -> None:
    result = train_tf(
        "boom", connection=Connection(str(cluster.kubeconfig)), namespace=namespace, image=TF_TRAINER_IMAGE,
        ps=1, workers=1, code_url=f"{code_url}/fail/", data_pvc=volumes.data_pvc, log_pvc=volumes.log_pvc,
        max_retry=1, timeout=300, **placement(node),
    )
    # max_retry=1: the first failed pod reaches it, and the job fails without a restart
    # (Volcano's retryCount counts that failure too; retries counts the restarts made, d80c044).
    assert not result.succeeded and result.phase == "Failed", result.to_dict()
    assert result.retries == 0, result.to_dict()
    assert result.failure is not None
    assert result.failure["pod"] == "boom-worker-0" and result.failure["exit_code"] == 3
    # The real last lines of the container's log, read back through the API server.
    assert "worker 0 giving up: exit 3" in result.failure["log_tail"]


def test_tensorboard_answers_through_the_service_proxy(cluster: Any, namespace: str, node: Any,
                                                       volumes: Volumes) -> None:
    from kubernetes import client

    (volumes.log_dir / "train").mkdir()
    out = tensorboard("tb", connection=Connection(str(cluster.kubeconfig)), namespace=namespace, log_pvc=volumes.log_pvc,
                      image=TENSORBOARD_IMAGE, service_type="ClusterIP", timeout=300,
                      placement=Placement(node_selector={node.label: node.label_value}, tolerations=[toleration(node)]))
    assert out.ready, out
    # What the step reports as the API server's proxy URL is what a user opens: fetch it.
    proxy = out.urls["api_proxy"]
    assert proxy.startswith(str(cluster.api_client().configuration.host))
    api = cluster.api_client()
    path = proxy.removeprefix(api.configuration.host) + "data/environment"
    deadline = time.monotonic() + 120
    while True:
        try:
            body, status, _ = api.call_api(path, "GET", auth_settings=["BearerToken"], _preload_content=False,
                                           _return_http_data_only=False)
            break
        except client.ApiException:
            if time.monotonic() > deadline:
                raise
            time.sleep(2)
    assert status == 200
    environment = json.loads(body.data)
    assert environment["data_location"] == "/logs" and environment["version"] == "2.21.0"
