"""Where a step's run identity comes from when its caller gave none, inside an orchestrator's
pod: KFP's backend labels every pod of a run with the run id (`pipeline/runid`, set by its API
server since 2.0) and tells each step container its pod's name (`KFP_POD_NAME`, the v2
compiler's common env). A component cannot take the run id as a default: KFP's driver fills
`{{$.pipeline_job_uuid}}` only into a value a pipeline passes, and its launcher hands defaults
over as written (kubeflow/pipelines backend/src/v2: driver/resolve.go, component/launcher_v2.go)."""

from __future__ import annotations

import logging
import os

from volcano_pipelines.errors import VpipeError

__all__ = ["KFP_POD_NAME_ENV", "KFP_RUN_ID_LABEL", "kfp_run_id"]

log = logging.getLogger(__name__)

KFP_POD_NAME_ENV = "KFP_POD_NAME"
KFP_RUN_ID_LABEL = "pipeline/runid"


def kfp_run_id(kubeconfig: str | None = None, context: str | None = None) -> str | None:
    """The id of the KFP run this process's pod belongs to (its `pipeline/runid` label, read
    in the pod's namespace), so a retried step attaches to what its first attempt created.
    None outside a KFP pod, or when the label cannot be read (said in the log)."""
    from volcano_pipelines.k8s.client import connect
    from volcano_pipelines.k8s.pods import pod_labels

    pod = os.environ.get(KFP_POD_NAME_ENV)
    if not pod:
        return None
    try:
        cluster = connect(kubeconfig, context)
    except VpipeError as err:
        log.warning("run_id not given and the KFP run id cannot be read (%s): a retried step will not re-attach", err)
        return None
    run_id = (pod_labels(cluster, cluster.namespace, pod) or {}).get(KFP_RUN_ID_LABEL) or None
    if run_id is None:
        log.warning("run_id not given and pod %s/%s has no %s label: a retried step will not re-attach",
                    cluster.namespace, pod, KFP_RUN_ID_LABEL)
    else:
        log.info("run_id not given: the KFP run id %s (label %s of pod %s)", run_id, KFP_RUN_ID_LABEL, pod)
    return run_id
