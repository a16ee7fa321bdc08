"""`sync --workers 3` through the shipped `vpipe-sync` WorkflowTemplate under Argo's real
controller, every pod on the real node: the step pod lists HDFS over its RPC protocol
(`hdfs://`, `hdfs_for_pods`) and the destination, plans once and writes three partitions under
`<dst>/.vpipe/runs/<run-id>/`, finds the destination's claim and the Hadoop configuration's
ConfigMap from its own pod, and starts one Volcano Job of three copy pods (the runtime image,
PodSecurity `restricted`) that mount both and read the blocks from the DataNode. The Hadoop
configuration is what makes that work: the DataNode is 127.0.0.1 to the NameNode, and only
`dfs.client.use.datanode.hostname` (in the ConfigMap, given to the step as `--hadoop-conf-dir`)
sends the pods to its name, which resolves to this machine for them; a copy pod without it
could read nothing. (WebHDFS from copy pods: the MPI pipeline in test_pipelines.py.) Then
three faults at once:
the step's own pod is deleted once the copy job exists (the step keeps the job and exits 3;
Argo runs the step again, which finds the run's plan and attaches to the same job), the copy
pod whose partition holds a 256 MiB file is evicted with no grace period while that file exists
only under its temporary name, and is seen gone with the file still unfinished (killed
mid-file; Volcano restarts the job), and a source file is rewritten after the plan (its pod
catches the change). The run converges: the destination equals the
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
from tests.helpers.argo_pipelines import CONF_DIR, CONF_PATCH, sync_template_over_hdfs
from tests.helpers.evict import evict
from tests.helpers.training import _host_path_pvc, toleration
from tests.helpers.workflows import _why, jobs, step_pods, submit_from_template, wait_finished, workflow
from tests.integration.waiting import wait_for
from tests.storage.fixtures import POD_HDFS_NAME
from tests.storage.trees import put_tree, read_tree, temp_files
from volcano_pipelines.transfer.partition import load_part, run_dir
from volcano_pipelines.transfer.plan import is_temp_name
from volcano_pipelines.volcano.copyjob import copy_job_name

pytestmark = [pytest.mark.integration, pytest.mark.realnode, pytest.mark.containers, pytest.mark.hdfs,
              pytest.mark.gluster, pytest.mark.timeout(900)]


CHANGED = "small/1/f005.txt"  # rewritten after the plan, before its pod copies it
REWRITTEN = b"rewritten after the plan\n" * 7


HUGE = "huge/weights.bin"  # one partition's file, long enough in the copy to be caught half-way


def dataset() -> dict[str, bytes]:
    """A large file, middling ones and small ones in a few directories."""
    files = {HUGE: os.urandom(256 << 20)}
    files.update({f"big/part-{i}.bin": os.urandom(12 << 20) for i in range(4)})
    files.update({f"small/{i % 4}/f{i:03d}.txt": os.urandom(1000 + i) for i in range(40)})
    return files


def _size(path: Path) -> int:
    """Bytes allocated to `path` (the ranges written so far: the copy writes a large file's
    ranges in parallel, so its length is near the end from the start); -1 when it is gone."""
    try:
        return path.stat().st_blocks * 512
    except FileNotFoundError:
        return -1


class MidFileEvictor:
    """Evicts, with no grace period, the copy pod whose partition holds HUGE while that file is
    on the volume only under its temporary name, partly written, waits until that pod is gone, and
    then looks again: the file has no final name yet, so the pod died in the middle of it (its
    replacement cannot have started: Volcano's restart waits for the old pods to go)."""

    def __init__(self, core: Any, namespace: str, dest: Path, run_id: str, job: str, parts: int) -> None:
        self.core, self.namespace, self.dest, self.run_id, self.job, self.parts = core, namespace, dest, run_id, job, parts
        self.evicted: str | None = None  # the pod
        self.seen_temp: str | None = None  # HUGE's temporary file, present at the eviction
        self.temp_bytes: tuple[int, int] | None = None  # its bytes at the eviction and once the pod was gone
        self.unfinished_after: bool | None = None  # no final name once the pod was gone
        self.error: str | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _pod_of_huge(self) -> str | None:
        for index in range(self.parts):
            try:
                if any(item.path == HUGE for item in load_part(str(self.dest), self.run_id, index)):
                    return f"{self.job}-copy-{index}"
            except (OSError, ValueError):
                return None  # not written yet
        return None

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                folder = self.dest / Path(HUGE).parent
                # Written into, not only opened: some of its bytes are on the volume.
                temps = [n for n in os.listdir(folder) if is_temp_name(n) and _size(folder / n) > 0] \
                    if folder.is_dir() else []
                pod_name = self._pod_of_huge() if temps and not (self.dest / HUGE).exists() else None
                if pod_name is not None:
                    pod = self.core.read_namespaced_pod(pod_name, self.namespace)
                    if pod.status.phase == "Running" and not pod.metadata.deletion_timestamp:
                        before = _size(folder / temps[0])
                        evict(self.core, self.namespace, pod_name, 0)
                        self.evicted, self.seen_temp = pod_name, temps[0]
                        self._wait_gone(pod_name, pod.metadata.uid)
                        self.unfinished_after = not (self.dest / HUGE).exists()
                        self.temp_bytes = (before, _size(folder / temps[0]))
                        return
                time.sleep(0.05)
        except Exception as err:  # noqa: BLE001 - asserted by the test
            self.error = f"{type(err).__name__}: {err}"

    def _wait_gone(self, name: str, uid: str) -> None:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                pod = self.core.read_namespaced_pod(name, self.namespace)
            except client.ApiException as err:
                if err.status == 404:
                    return
                raise
            if pod.metadata.uid != uid or any(
                    st.state and st.state.terminated for st in pod.status.container_statuses or []):
                return
            time.sleep(0.05)
        raise TimeoutError(f"{name} still running 120 s after its eviction")

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=130)


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
    objects = sync_template_over_hdfs(api, namespace, real_node, hdfs_for_pods)
    files = dataset()
    put_tree(hdfs_for_pods.client(), f"/datasets/{namespace}", files)
    volume = gluster.fresh_dir(f"{namespace}-workers")
    volume.chmod(0o777)  # the images' uid 1000 writes (a hostPath PV has no fsGroup)
    _host_path_pvc(core, namespace, "data", volume, real_node.name)
    evictor: MidFileEvictor | None = None
    try:
        name = submit_from_template(api, namespace, real_node, "vpipe-sync", "sync-workers-", {
            "src": f"hdfs://{POD_HDFS_NAME}:{hdfs_for_pods.rpc_port}/datasets/{namespace}",
            "hadoop-conf-dir": CONF_DIR,
            "dst": "/data/ds", "data-pvc": "data", "workers": "3", "shards": "3",
            "node-selector": f"{real_node.label}={real_node.label_value}", "tolerations": toleration(real_node),
            "cpu": "100m", "memory": "512Mi", "queue": "default"}, podSpecPatch=json.dumps(CONF_PATCH))
        run_id = workflow(api, namespace, name)["metadata"]["uid"]
        job = copy_job_name(run_id)
        # Killed mid-file: the partition is retried by Volcano's restart of the job.
        evictor = MidFileEvictor(core, namespace, volume / "ds", run_id, job, parts=3)
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
        # The step made the job, so its container runs; the kubelet's status update saying so
        # can reach the API seconds later on a loaded machine (seen once: no pod Running yet).
        def running_step() -> Any:
            found = [p for p in step_pods(core, namespace, name) if p.status.phase == "Running"]
            return found[0] if len(found) == 1 else None

        step = wait_for("the sync step's pod Running", running_step, timeout=60)
        watched = ExitWatch(core, namespace, step.metadata.name, step.metadata.uid)
        time.sleep(1)  # the watch is open before the deletion
        core.delete_namespaced_pod(step.metadata.name, namespace)  # SIGTERM: the step keeps the job and exits 3
        lost = watched.result()
        finished = wait_finished(api, namespace, name, timeout=600)
        evictor.stop()
        assert finished["status"]["phase"] == "Succeeded", _why(finished)
        copied = jobs(api, namespace)[job]
        assert evictor.error is None, evictor.error
        assert evictor.evicted, f"no copy pod was seen writing {HUGE}"
        assert evictor.unfinished_after, f"{evictor.evicted} finished {HUGE} before it was gone"
        print(f"\n{evictor.evicted} evicted writing {HUGE} ({evictor.seen_temp}: {evictor.temp_bytes[0] if evictor.temp_bytes else '?'} "
              f"bytes allocated then, {evictor.temp_bytes[1] if evictor.temp_bytes else '?'} once the pod was gone, of {len(files[HUGE])})")
        assert copied["status"]["state"]["phase"] == "Completed"
        assert copied["status"].get("retryCount", 0) >= 1, copied["status"]
        # The lost step kept the job (exit 3: retried); the step that ran again attached to it.
        # Argo re-creates a pod lost within 10 s of its node's start for the same node, and retries
        # one lost later as a new node (tests/argo/test_lost_pod.py): either way the step runs again.
        assert lost == 3, lost
        assert copied["metadata"]["uid"] == first["metadata"]["uid"]  # attached to, not made again
        # The Workflow that owns the step's pod owns the copy job (the step read it from its pod):
        # deleting the Workflow deletes the copy pods, which the lost step had kept for its retry.
        owners = [(o["apiVersion"], o["kind"], o["name"], o["uid"]) for o in copied["metadata"].get("ownerReferences", [])]
        assert owners == [("argoproj.io/v1alpha1", "Workflow", name, run_id)], owners
        # The copy pods mount the step pod's ConfigMap where the step has it, read-only.
        [task] = copied["spec"]["tasks"]
        pod_spec = task["template"]["spec"]
        [conf] = [v for v in pod_spec.get("volumes", []) if (v.get("configMap") or {}).get("name") == "hadoop-conf"]
        mounts = [m for c in pod_spec["containers"] for m in c.get("volumeMounts", []) if m["name"] == conf["name"]]
        assert [(m["mountPath"], m.get("readOnly")) for m in mounts] == [(CONF_DIR, True)], mounts
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
