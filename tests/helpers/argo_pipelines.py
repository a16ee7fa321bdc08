"""The Argo pipeline on the real node: its WorkflowTemplates, data and log directories on
GlusterFS as hostPath PVCs, the pipeline's parameters, submitting and following it, and the sync
template reading from the test HDFS."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kubernetes import client

from images.build import STAND_INS
from tests.helpers.training import EXAMPLES, _host_path_pvc, toleration
from tests.helpers.workflows import _why, submit_from_template, workflow
from tests.integration.waiting import wait_for
from tests.storage.fixtures import POD_HDFS_NAME
from tests.storage.trees import put_tree
from volcano_pipelines.images import TENSORBOARD_IMAGE, TF_TRAINER_IMAGE
from tests.argo import support

STANDIN = STAND_INS["tfserving-standin"]
TEMPLATES = ("sync", "train-tf", "train-mpi", "reap", "tensorboard", "serve", "train-and-serve", "train-and-serve-mpi")


@dataclass(frozen=True)
class Storage:
    data_pvc: str
    log_pvc: str
    data_dir: Path  # on the host: directories of the GlusterFS FUSE mount
    log_dir: Path


def storage(api: Any, pvs: list[str], namespace: str, gluster: Any, node: Any, tag: str) -> Storage:
    """An empty data and log directory on GlusterFS as hostPath PVCs of the real node,
    writable by the images' uid 1000 (a hostPath PV has no fsGroup)."""
    root = gluster.fresh_dir(f"{namespace}-{tag}")
    data_dir, log_dir = root / "data", root / "logs"
    core = client.CoreV1Api(api)
    for path, pvc in ((data_dir, f"{tag}-data"), (log_dir, f"{tag}-logs")):
        path.mkdir()
        path.chmod(0o777)
        _host_path_pvc(core, namespace, pvc, path, node.name)
        pvs.append(f"{namespace}-{pvc}"[:63])
    return Storage(f"{tag}-data", f"{tag}-logs", data_dir, log_dir)


def stage_dataset(hdfs: Any, namespace: str, tmp_path: Path) -> tuple[dict[str, bytes], str]:
    """examples/data's dataset in HDFS; (its files, the URL the pods' sync reads it from)."""
    made = tmp_path / "dataset"
    subprocess.run([sys.executable, str(EXAMPLES / "data" / "make_dataset.py"), str(made), "--shards", "2"],
                   check=True, capture_output=True)
    dataset = {p.name: p.read_bytes() for p in made.iterdir()}
    put_tree(hdfs.client(), f"/datasets/{namespace}", dataset)
    return dataset, f"webhdfs://{POD_HDFS_NAME}:{hdfs.http_port}/datasets/{namespace}"


def placed(node: Any) -> dict[str, str]:
    """The pipeline parameters that put TensorBoard and the job's pods on the real node."""
    selector, taint = f"{node.label}={node.label_value}", toleration(node)
    return {"node-selector": selector, "tolerations": taint, "tensorboard-image": TENSORBOARD_IMAGE,
            "tensorboard-node-selector": selector, "tensorboard-tolerations": taint, "tensorboard-cpu": "50m",
            "queue": "default"}


def pipeline_parameters(node: Any, name: str, code: str, src: str, volumes: Storage, serving_url: str,
                        **extra: str) -> dict[str, str]:
    selector, taint = f"{node.label}={node.label_value}", toleration(node)
    small = {f"{task}-{what}": value for task in ("ps", "worker", "chief")
             for what, value in (("cpu", "250m"), ("memory", "1536Mi"))}
    return {
        "name": name, "timeout": "900", "sync-src": src, "data-pvc": volumes.data_pvc, "log-pvc": volumes.log_pvc,
        "image": TF_TRAINER_IMAGE, "code-url": code, "ps": "1", "workers": "2", "chief": "true",
        "args": "\n".join(["--api=tf2", "--steps=40", "--threads=1", "--log_every=20", "--checkpoint_every=20",
                           f"--model_name={name}"]),
        "env": "TF_CPP_MIN_LOG_LEVEL=2", **placed(node), **small,
        "serving-image": STANDIN, "serving-node-selector": selector, "serving-tolerations": taint,
        "serving-cpu": "50m", "serving-memory": "128Mi", "serving-rest-url": serving_url,
        "serving-smoke-payload": json.dumps({"instances": [[0.5] * 8]}),
        **extra,
    }


def submit_pipeline(api: Any, namespace: str, node: Any, parameters: dict[str, str], **spec: Any) -> str:
    return submit_from_template(api, namespace, node, "vpipe-train-and-serve", f"{parameters['name']}-", parameters,
                                **spec)


def follow(api: Any, namespace: str, names: list[str], timeout: float) -> tuple[dict[str, dict[str, Any]],
                                                                               dict[str, dict[str, str]]]:
    """Poll the workflows until all have finished; meanwhile record every step pod seen
    (ServiceAccount, node): podGC deletes them once a workflow succeeds."""
    core = client.CoreV1Api(api)
    pods: dict[str, dict[str, str]] = {}
    finished: dict[str, dict[str, Any]] = {}

    def done() -> bool:
        for pod in core.list_namespaced_pod(namespace, label_selector="workflows.argoproj.io/workflow").items:
            pods[pod.metadata.name] = {"workflow": pod.metadata.labels["workflows.argoproj.io/workflow"],
                                       "service_account": pod.spec.service_account_name or "",
                                       "node": pod.spec.node_name or ""}
        for name in names:
            if name not in finished:
                wf = workflow(api, namespace, name)
                if wf.get("status", {}).get("phase") in ("Succeeded", "Failed", "Error"):
                    finished[name] = wf
        return len(finished) == len(names)

    wait_for("the pipelines to finish", done, timeout=timeout, interval=1.0,
             explain=lambda: "; ".join(_why(workflow(api, namespace, n)) for n in names if n not in finished))
    return finished, pods


def task_nodes(wf: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The DAG's task nodes (and the exit handler's steps) by display name."""
    return {n["displayName"]: n for n in wf["status"]["nodes"].values() if n.get("type") in ("Retry", "Pod", "Skipped")
            and "(" not in n["displayName"]}


CONF_DIR = "/etc/hadoop/conf"  # where the step pod mounts the ConfigMap (and the copy pods, from it)
HDFS_SITE = """<?xml version="1.0"?>
<configuration>
  <property><name>dfs.client.use.datanode.hostname</name><value>true</value></property>
</configuration>
"""
# The step pod's ConfigMap volume, added to the shipped template's pod (Argo's podSpecPatch).
CONF_PATCH = {"volumes": [{"name": "hadoop-conf", "configMap": {"name": "hadoop-conf"}}],
              "containers": [{"name": "main", "volumeMounts": [{"name": "hadoop-conf", "mountPath": CONF_DIR,
                                                                  "readOnly": True}]}]}


def sync_template_over_hdfs(api: Any, namespace: str, real_node: Any, hdfs_for_pods: Any) -> list[dict[str, Any]]:
    """The shipped `vpipe-sync` template and what its pods need to reach HDFS over `hdfs://`
    (the name POD_HDFS_NAME for the test's HDFS, the ConfigMap `hadoop-conf` for CONF_PATCH);
    returns the base objects, cluster-scoped ones included, for support.delete_cluster_scoped."""
    objects = support.base_objects(namespace)
    support.apply_objects(api, namespace, objects)
    support.apply_objects(api, namespace, support.load("pipelines/argo/sync.yaml"))
    support.external_name(api, namespace, POD_HDFS_NAME, real_node.gateway_ip, hdfs_for_pods.rpc_port)
    client.CoreV1Api(api).create_namespaced_config_map(namespace, {"metadata": {"name": "hadoop-conf"},
                                                                   "data": {"hdfs-site.xml": HDFS_SITE}})
    return objects
