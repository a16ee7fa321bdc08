"""What a step learns from the KFP pod it runs in when its pipeline gave it nothing: the run's
id and the run's Argo Workflow. KFP's backend labels every pod of a run with the run id
(`pipeline/runid`, set by its API server since 2.0), tells each step container its pod's name
(`KFP_POD_NAME`, the v2 compiler's common env), and the pod belongs (ownerReference) to the
Argo Workflow that runs the pipeline. A component cannot take the run id as a default: KFP's
driver fills `{{$.pipeline_job_uuid}}` only into a value a pipeline passes, and its launcher
hands defaults over as written (kubeflow/pipelines backend/src/v2: driver/resolve.go,
component/launcher_v2.go)."""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from volcano_pipelines.errors import VpipeError
from volcano_pipelines.k8s.connection import Connection

__all__ = ["KFP_POD_NAME_ENV", "KFP_RUN_ID_LABEL", "KfpPod", "kfp_pod", "owner_in", "workflow_owner"]

log = logging.getLogger(__name__)

KFP_POD_NAME_ENV = "KFP_POD_NAME"
KFP_RUN_ID_LABEL = "pipeline/runid"
_WORKFLOW = ("argoproj.io/v1alpha1", "Workflow")


@dataclass(frozen=True)
class KfpPod:
    namespace: str
    name: str
    run_id: str | None  # the KFP run id; None: the pod has no pipeline/runid label
    workflow: str | None  # the run's Workflow as API_VERSION/KIND/NAME/UID (an `owner` value); None: none owns the pod


def kfp_pod(connection: Connection = Connection()) -> KfpPod | None:
    """The KFP pod this process runs in, read in the pod's namespace with the `list` on pods
    every step has. None outside a KFP pod ($KFP_POD_NAME unset) or when the pod cannot be
    read (said in the log)."""
    from volcano_pipelines.k8s.pods import pod_metadata

    name = os.environ.get(KFP_POD_NAME_ENV)
    if not name:
        return None
    try:
        cluster = connection.connect()
    except VpipeError as err:
        log.warning("cannot read the KFP pod %s: %s", name, err)
        return None
    meta = pod_metadata(cluster, cluster.namespace, name)
    if meta is None:
        return None
    return KfpPod(cluster.namespace, name, (meta.get("labels") or {}).get(KFP_RUN_ID_LABEL) or None,
                  workflow_owner(meta))


def workflow_owner(meta: Mapping[str, Any]) -> str | None:
    """The Argo Workflow that owns a pod (its metadata), as an `owner` value
    (API_VERSION/KIND/NAME/UID); None when none does. Argo's controller makes every step pod
    of a Workflow its dependent, under KFP and alone."""
    owners = [o for o in meta.get("ownerReferences") or [] if (o.get("apiVersion"), o.get("kind")) == _WORKFLOW]
    return "/".join((*_WORKFLOW, owners[0]["name"], owners[0]["uid"])) if owners else None


def owner_in(workflow: str | None, pod_namespace: str | None, namespace: str | None) -> str | None:
    """The step pod's Workflow as the owner of an object the step makes in `namespace` (None:
    the pod's own), or None: an owner in another namespace counts as absent, and the garbage
    collector would delete the object at once."""
    return workflow if namespace in (None, pod_namespace) else None
