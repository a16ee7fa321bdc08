"""The KFP `sync` component with `workers=3` in a real container of the runtime image
(kfp.local's DockerRunner on podman, tests/kfp_docker/harness.py): the step plans in its
container and starts one Volcano Job of three copy pods on the real node, which read the
dataset over WebHDFS (`hdfs_for_pods`) and write into a GlusterFS directory that is both the
container's /data and the PersistentVolumeClaim the step is given (`dest_pvc`).

The fault is the one KFP's backend causes: the step's container is killed outright (SIGKILL;
on KFP a SIGTERM reaches the launcher, which exits at once, and the kernel kills the step with
it: docs/kfp.md), so the step cleans nothing up and its copy job runs on. The component run
again with the same run id (what a KFP retry does: RUN_ID is the run's) finds the plan under
the destination's .vpipe/ and attaches to the same job, and the run converges.

What this does not cover, and where it is: the pipeline's sync step finds its claim from its own
pod (KFP's step pod; kfp.local's container is not a pod): tests/argo/test_sync_workers.py, the
same discovery under Argo's real controller."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from tests.argo import support
from tests.helpers.training import _host_path_pvc, toleration
from tests.kfp_docker.harness import bind, outputs_in, readable_kubeconfig, task_dirs
from tests.storage.fixtures import POD_HDFS_NAME
from tests.storage.trees import put_tree, read_tree, temp_files

pytestmark = [pytest.mark.integration, pytest.mark.kfpdocker, pytest.mark.realnode, pytest.mark.containers,
              pytest.mark.hdfs, pytest.mark.gluster, pytest.mark.timeout(600)]

GROUP, VERSION = "batch.volcano.sh", "v1alpha1"
DST = "/data/ds"  # in the step's container; the claim's directory "ds"


def _dataset() -> dict[str, bytes]:
    files = {f"big/part-{i}.bin": os.urandom(16 << 20) for i in range(4)}
    files.update({f"small/{i % 3}/f{i:03d}.txt": os.urandom(500 + i) for i in range(30)})
    return files


class ContainerKiller:
    """Kills (SIGKILL) the running containers of the runtime image once the copy job exists,
    and keeps the job as it was then."""

    def __init__(self, custom: Any, namespace: str, job: str) -> None:
        self.custom, self.namespace, self.job = custom, namespace, job
        self.seen: dict[str, Any] | None = None
        self.killed: list[str] = []
        self.error: str | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        import docker
        from kubernetes.client import ApiException

        engine = docker.DockerClient(base_url=os.environ["DOCKER_HOST"], timeout=30)
        try:
            while not self._stop.is_set():
                try:
                    self.seen = self.custom.get_namespaced_custom_object(GROUP, VERSION, self.namespace, "jobs", self.job)
                except ApiException as err:
                    if err.status != 404:
                        raise
                if self.seen is not None:
                    for container in engine.containers.list():
                        container.kill()  # SIGKILL: the step gets no chance to clean up
                        self.killed.append(container.name)
                    return
                time.sleep(0.1)
        except Exception as err:  # noqa: BLE001 - asserted by the test
            self.error = f"{type(err).__name__}: {err}"
        finally:
            engine.close()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=60)


def test_the_sync_component_runs_copy_pods_and_a_killed_step_run_again_attaches(
        kfp_docker: Any, cluster: Any, namespace: str, real_node: Any, images: Any, hdfs_for_pods: Any,
        gluster: Any, tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    from kubernetes import client

    from volcano_pipelines.kfp import components
    from volcano_pipelines.transfer.partition import run_dir
    from volcano_pipelines.volcano.copyjob import copy_job_name

    real_node.import_image(images.archive("runtime"))  # the copy pods' image
    api = cluster.api_client()
    core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
    # WebHDFS sends the copy pods to the DataNode by its name: it resolves to this machine for them.
    support.external_name(api, namespace, POD_HDFS_NAME, real_node.gateway_ip, hdfs_for_pods.http_port)
    files = _dataset()
    put_tree(hdfs_for_pods.client(), f"/datasets/{namespace}", files)
    volume = gluster.fresh_dir(f"{namespace}-kfp-workers")
    volume.chmod(0o777)  # the runtime image's uid 1000 writes (a hostPath PV has no fsGroup)
    _host_path_pvc(core, namespace, "data", volume, real_node.name)
    kubeconfig = readable_kubeconfig(cluster, tmp_path)
    kfp_docker.mounts = [bind(kubeconfig.parent, str(kubeconfig.parent), read_only=True), bind(volume, "/data")]
    run_id = f"kfpd-{namespace}"[:40]
    job = copy_job_name(run_id)
    # The NameNode by the real node's gateway address (the step's container uses the host network).
    arguments = {
        "src": f"webhdfs://{real_node.gateway_ip}:{hdfs_for_pods.http_port}/datasets/{namespace}", "dst": DST,
        "workers": 3, "shards": 3, "run_id": run_id, "dest_pvc": "data", "dest_subpath": "ds",
        "namespace": namespace, "kubeconfig": str(kubeconfig), "queue": "default", "cpu": "100m", "memory": "512Mi",
        "node_selector": {real_node.label: real_node.label_value}, "tolerations": [toleration(real_node)],
    }
    killer = ContainerKiller(custom, namespace, job)
    try:
        components.sync(**arguments)  # killed once its copy job exists
        killer.stop()
        assert killer.error is None, killer.error
        assert killer.seen is not None and killer.killed, "the step ended before its copy job was seen"
        assert kfp_docker.exit_codes == [137], kfp_docker.exit_codes
        # Nothing cleaned up: the plan is kept and the job runs on.
        assert Path(run_dir(str(volume / "ds"), run_id)).is_dir()
        kept = custom.get_namespaced_custom_object(GROUP, VERSION, namespace, "jobs", job)
        assert kept["metadata"]["uid"] == killer.seen["metadata"]["uid"]
        capfd.readouterr()
        components.sync(**arguments)  # the retry: the same run id
        again = capfd.readouterr().out
        assert kfp_docker.exit_codes == [137, 0], kfp_docker.exit_codes
        copied = custom.get_namespaced_custom_object(GROUP, VERSION, namespace, "jobs", job)
    finally:
        killer.stop()
        core.delete_persistent_volume(f"{namespace}-data"[:63])
    assert f"resuming run {run_id}" in again, again
    # Attached to the job the killed step made, which ran its three pods to the end.
    assert copied["metadata"]["uid"] == killer.seen["metadata"]["uid"]
    assert copied["status"]["state"]["phase"] == "Completed" and copied["spec"]["tasks"][0]["replicas"] == 3
    dest = volume / "ds"
    assert read_tree(dest) == files
    assert temp_files(dest) == []
    assert not Path(run_dir(str(dest), run_id)).exists()
    result = outputs_in(task_dirs(kfp_docker.root, "sync")[-1])["result"]
    assert result["copied"] == len(files) and result["failed"] == 0, result
    assert {w["pod"] for w in result["workers"]} == {f"{job}-copy-{k}" for k in range(3)}, result["workers"]
    # Every file in exactly one shard manifest (their paths as the step saw them: DST is /data/ds there).
    listed = [line for m in result["shard_manifests"] for line in (dest / os.path.relpath(m, DST)).read_text().split()]
    assert sorted(listed) == sorted(files)
    shown = [line for line in again.splitlines() if "resuming run" in line or "copy job" in line or "copied" in line]
    print(f"\nkilled {killer.killed} with job {job} {(killer.seen.get('status') or {}).get('state', {}).get('phase', 'new')}; "
          f"the step run again:\n  " + "\n  ".join(shown[-6:]))
