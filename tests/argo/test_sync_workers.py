"""`sync --workers 3` through the shipped `vpipe-sync` WorkflowTemplate under Argo's real
controller, every pod on the real node: the step pod lists HDFS (WebHDFS, `hdfs_for_pods`) and
the destination, plans once and writes three partitions under `<dst>/.vpipe/runs/<run-id>/`,
finds the destination's claim from its own pod, and starts one Volcano Job of three copy pods
(the runtime image, PodSecurity `restricted`) that mount that claim. Then three faults at once:
the step's own pod is deleted once the copy job exists (the step keeps the job and exits 3;
Argo runs the step again, which finds the run's plan and attaches to the same job), one copy
pod is evicted as soon as it runs (Volcano restarts the job), and a source file is rewritten
after the plan (its pod catches the change). The run converges: the destination equals the
source as it is at the end (the rewritten file as rewritten), every file is in exactly one
shard manifest, nothing temporary is left, and the step's report names the three pods."""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from tests.argo import support
from tests.argo.test_faults import jobs, step_pods, submit_from_template
from tests.argo.test_workflows import _why, wait_finished, workflow
from tests.helpers.evict import Evictor
from tests.integration.waiting import wait_for
from tests.node.test_training import _host_path_pvc, toleration
from tests.storage.fixtures import POD_HDFS_NAME
from tests.storage.trees import put_tree, read_tree, temp_files
from volcano_pipelines.transfer.partition import run_dir
from volcano_pipelines.volcano.copyjob import copy_job_name

pytestmark = [pytest.mark.integration, pytest.mark.realnode, pytest.mark.containers, pytest.mark.hdfs,
              pytest.mark.gluster, pytest.mark.timeout(900)]


CHANGED = "small/1/f005.txt"  # rewritten after the plan, before its pod copies it
REWRITTEN = b"rewritten after the plan\n" * 7


def dataset() -> dict[str, bytes]:
    """Large files (each pod's share takes a while) and small ones in a few directories."""
    files = {f"big/part-{i}.bin": os.urandom(12 << 20) for i in range(4)}
    files.update({f"small/{i % 4}/f{i:03d}.txt": os.urandom(1000 + i) for i in range(40)})
    return files


class ExitWatch:
    """The exit code of pod `name`'s main container, for the incarnation (uid) that runs when
    the watch starts: a watch from before the deletion sees every state up to the pod's removal
    (polling missed it in CI: the kubelet's last status and the removal came within one poll)."""

    def __init__(self, core: Any, namespace: str, name: str, uid: str) -> None:
        from kubernetes import watch

        self.code: int | None = None
        self._watch = watch.Watch()
        self._thread = threading.Thread(target=self._run, args=(core, namespace, name, uid), daemon=True)
        self._thread.start()

    def _run(self, core: Any, namespace: str, name: str, uid: str) -> None:
        for event in self._watch.stream(core.list_namespaced_pod, namespace, field_selector=f"metadata.name={name}",
                                        timeout_seconds=300):
            pod = event["object"]
            if pod.metadata.uid != uid:
                continue  # re-created under the same name
            for status in pod.status.container_statuses or []:
                if status.name == "main" and status.state and status.state.terminated is not None:
                    self.code = int(status.state.terminated.exit_code)
            if event["type"] == "DELETED" or self.code is not None:
                self._watch.stop()
                return

    def result(self, timeout: float = 120) -> int | None:
        self._thread.join(timeout)
        self._watch.stop()
        return self.code


def test_three_copy_pods_sync_hdfs_into_the_volume_and_an_evicted_one_restarts_without_loss(
        cluster: Any, namespace: str, real_node: Any, argo: Any, hdfs_for_pods: Any, gluster: Any) -> None:
    api = cluster.api_client()
    core = client.CoreV1Api(api)
    objects = support.base_objects(namespace)
    support.apply_objects(api, namespace, objects)
    support.apply_objects(api, namespace, support.load("pipelines/argo/sync.yaml"))
    support.external_name(api, namespace, POD_HDFS_NAME, real_node.gateway_ip, hdfs_for_pods.http_port)
    files = dataset()
    put_tree(hdfs_for_pods.client(), f"/datasets/{namespace}", files)
    volume = gluster.fresh_dir(f"{namespace}-workers")
    volume.chmod(0o777)  # the images' uid 1000 writes (a hostPath PV has no fsGroup)
    _host_path_pvc(core, namespace, "data", volume, real_node.name)
    evictor: Evictor | None = None
    try:
        name = submit_from_template(api, namespace, real_node, "vpipe-sync", "sync-workers-", {
            "src": f"webhdfs://{POD_HDFS_NAME}:{hdfs_for_pods.http_port}/datasets/{namespace}",
            "dst": "/data/ds", "data-pvc": "data", "workers": "3", "shards": "3",
            "node-selector": f"{real_node.label}={real_node.label_value}", "tolerations": toleration(real_node),
            "cpu": "100m", "memory": "512Mi", "queue": "default"})
        run_id = workflow(api, namespace, name)["metadata"]["uid"]
        job = copy_job_name(run_id)
        # Evicted the moment it runs: the partition is retried by Volcano's restart of the job.
        evictor = Evictor(cluster, namespace, f"{job}-copy-1", grace=0, after=0.0)
        def copy_job() -> dict[str, Any] | None:
            found = jobs(api, namespace).get(job)
            run = workflow(api, namespace, name)
            if found is None and run.get("status", {}).get("phase") in ("Failed", "Error"):
                raise AssertionError(f"the workflow ended before its copy job was made: {_why(run)}")
            return found

        first = wait_for(f"the copy job {job}", copy_job, timeout=240)
        # The plan (sizes and mtimes) is in the partitions now and the copy pods are only being
        # made: a source file rewritten here is caught by its pod (the size differs from the
        # plan's) and copied as the source holds it then, not as planned.
        put_tree(hdfs_for_pods.client(), f"/datasets/{namespace}", {CHANGED: REWRITTEN})
        files[CHANGED] = REWRITTEN
        [step] = [p for p in step_pods(core, namespace, name) if p.status.phase == "Running"]
        watched = ExitWatch(core, namespace, step.metadata.name, step.metadata.uid)
        time.sleep(1)  # the watch is open before the deletion
        core.delete_namespaced_pod(step.metadata.name, namespace)  # SIGTERM: the step keeps the job and exits 3
        lost = watched.result()
        finished = wait_finished(api, namespace, name, timeout=600)
        evictor.stop()
        assert finished["status"]["phase"] == "Succeeded", _why(finished)
        copied = jobs(api, namespace)[job]
        assert evictor.evicted, "copy pod 1 was never seen running"
        assert copied["status"]["state"]["phase"] == "Completed"
        assert copied["status"].get("retryCount", 0) >= 1, copied["status"]
        # The lost step kept the job (exit 3: retried); the step that ran again attached to it.
        # Argo re-creates a pod lost within 10 s of its node's start for the same node, and retries
        # one lost later as a new node (tests/argo/test_lost_pod.py): either way the step runs again.
        assert lost == 3, lost
        assert copied["metadata"]["uid"] == first["metadata"]["uid"]  # attached to, not made again
    finally:
        if evictor is not None:
            evictor.stop()
        support.delete_cluster_scoped(api, objects)
        core.delete_persistent_volume(f"{namespace}-data"[:63])
    dest = volume / "ds"
    assert read_tree(dest) == files
    assert temp_files(dest) == []
    assert not Path(run_dir(str(dest), run_id)).exists()
    # The attempt that succeeded (a lost pod retried as a new node leaves an attempt with empty outputs).
    [done] = [n for n in finished["status"]["nodes"].values() if n.get("type") == "Pod" and n["phase"] == "Succeeded"]
    result = json.loads({p["name"]: p.get("value") for p in done["outputs"]["parameters"]}["result"])
    assert result["copied"] == len(files) and result["skipped"] == 0 and result["failed"] == 0, result
    assert sorted(w["part"] for w in result["workers"]) == [0, 1, 2] and all(w["finished"] for w in result["workers"])
    assert {w["pod"] for w in result["workers"]} == {f"{job}-copy-{k}" for k in range(3)}
    # The manifests' paths as the step pod saw them (DST is /data/ds there).
    manifests = [dest / os.path.relpath(m, "/data/ds") for m in result["shard_manifests"]]
    listed = [line for manifest in manifests for line in manifest.read_text().split()]
    assert sorted(listed) == sorted(files)
