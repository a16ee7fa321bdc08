"""The step pods' Kubernetes settings, through kfp-kubernetes: the data PVC the sync step
writes into, the log PVC the train steps and the exit handler copy post-mortem records into, pull secrets for the runtime image, node selector and tolerations. These shape
only the pod KFP starts for a step; the training pods the train step creates are shaped by
the step's own inputs (image_pull_secrets, node_selector, tolerations, data_pvc, ...).
The step pods' ServiceAccount is a run setting in KFP v2 (kfp-kubernetes has no helper for
it): `vpipe schedule kfp --service-account`, or the run's service account in the UI."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from kfp import kubernetes

from volcano_pipelines.errors import InputError

from volcano_pipelines.objects.validate import parse_toleration
from volcano_pipelines.labels import POD_NAME_ENV
from volcano_pipelines.steps.pipelines import LOG_MOUNT, POST_MORTEM_VOLUME_DIR, POST_MORTEM_VOLUME_DIR_ENV

__all__ = ["HADOOP_CONF_MOUNT", "KERBEROS_MOUNT", "StepPod", "mount_data", "mount_logs", "mount_sync_config",
           "set_deadline", "shape"]

# Where the sync step pod gets the Kerberos Secret and the Hadoop configuration (StepPod).
KERBEROS_MOUNT = "/etc/vpipe/kerberos"
HADOOP_CONF_MOUNT = "/etc/hadoop/conf"
_NAME = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


@dataclass(frozen=True)
class StepPod:
    """Compile-time settings of every step pod of a pipeline."""

    image_pull_secrets: tuple[str, ...] = ()
    node_selector: Mapping[str, str] = field(default_factory=dict)
    tolerations: tuple[str, ...] = ()  # KEY[=VALUE]:EFFECT, as kubectl taint writes them
    # The sync step pod only: a Secret with the Kerberos keytab, read-only at KERBEROS_MOUNT
    # (pass `kerberos_principal` and `kerberos_keytab=/etc/vpipe/kerberos/<key>` in the run), and a
    # ConfigMap with core-site.xml / hdfs-site.xml (HA nameservices, viewfs mounts) at
    # HADOOP_CONF_MOUNT, which becomes the pod's HADOOP_CONF_DIR.
    kerberos_secret: str = ""
    hadoop_conf_config_map: str = ""

    def __post_init__(self) -> None:
        # A string where a list is meant would be split into characters ("registry" -> eight
        # pull secrets), so the shapes are checked before anything reads them.
        for field_name, example in (("image_pull_secrets", '("registry",)'), ("tolerations", '("k=v:NoSchedule",)')):
            value = getattr(self, field_name)
            if isinstance(value, (str, bytes)) or not isinstance(value, (list, tuple)) or not all(
                    isinstance(item, str) for item in value):
                raise InputError(f"StepPod.{field_name}", value, f"a list or tuple of strings, e.g. {example}")
            object.__setattr__(self, field_name, tuple(value))
        for name in self.image_pull_secrets:
            if len(name) > 253 or not _NAME.fullmatch(name):
                raise InputError("StepPod.image_pull_secrets", name, "the name of a Secret (DNS subdomain)")
        for raw in self.tolerations:
            try:
                parse_toleration(raw)
            except InputError as err:
                raise InputError("StepPod.tolerations", raw, err.allowed) from None
        selector = self.node_selector
        if not isinstance(selector, Mapping) or not all(
                isinstance(k, str) and isinstance(v, str) for k, v in selector.items()):
            raise InputError("StepPod.node_selector", selector, 'a mapping of label to value, e.g. {"pool": "system"}')
        for field_name in ("kerberos_secret", "hadoop_conf_config_map"):
            value = getattr(self, field_name)
            if value and (len(value) > 253 or not _NAME.fullmatch(value)):
                raise InputError(f"StepPod.{field_name}", value, "the name of a Kubernetes object (DNS subdomain)")


def shape(task: Any, pod: StepPod) -> Any:
    """Apply `pod` to one pipeline task (a step pod)."""
    if pod.image_pull_secrets:
        kubernetes.set_image_pull_secrets(task, list(pod.image_pull_secrets))
    for key, value in sorted(pod.node_selector.items()):
        kubernetes.add_node_selector(task, label_key=key, label_value=value)
    for raw in pod.tolerations:
        toleration = parse_toleration(raw)
        kubernetes.add_toleration(task, key=toleration["key"], operator=toleration["operator"],
                                  value=toleration.get("value"), effect=toleration["effect"])
    return task


def mount_sync_config(task: Any, pod: StepPod) -> Any:
    """The Kerberos Secret and the Hadoop configuration ConfigMap of `pod`, on the sync step."""
    if pod.kerberos_secret:
        kubernetes.use_secret_as_volume(task, secret_name=pod.kerberos_secret, mount_path=KERBEROS_MOUNT)
    if pod.hadoop_conf_config_map:
        kubernetes.use_config_map_as_volume(task, config_map_name=pod.hadoop_conf_config_map,
                                            mount_path=HADOOP_CONF_MOUNT)
        task.set_env_variable("HADOOP_CONF_DIR", HADOOP_CONF_MOUNT)
    return task


def name_the_pod(task: Any) -> Any:
    """$VPIPE_POD_NAME: the step pod's own name (the downward API), as the Argo templates set it."""
    return kubernetes.use_field_path_as_env(task, env_name=POD_NAME_ENV, field_path="metadata.name")


def set_deadline(task: Any, seconds: int) -> Any:
    """The step pod's activeDeadlineSeconds: the kubelet ends it (SIGTERM, then SIGKILL after the
    grace period) this long after the pod started, volume attachment included."""
    return kubernetes.set_timeout(task, seconds)


def mount_data(task: Any, pvc_name: Any, mount_path: str) -> Any:
    """Mount the data PVC (a pipeline parameter) into the step pod at `mount_path`."""
    return kubernetes.mount_pvc(task, pvc_name=pvc_name, mount_path=mount_path)


def mount_logs(task: Any, pvc_name: Any) -> Any:
    """Mount the run's log PVC (a pipeline parameter) into the step pod at LOG_MOUNT and have
    the step copy its post-mortem records there, next to the run's logs (steps/pipelines.py)."""
    kubernetes.mount_pvc(task, pvc_name=pvc_name, mount_path=LOG_MOUNT)
    task.set_env_variable(POST_MORTEM_VOLUME_DIR_ENV, POST_MORTEM_VOLUME_DIR)
    return task
