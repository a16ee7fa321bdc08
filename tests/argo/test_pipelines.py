"""The shipped `vpipe-train-and-serve` WorkflowTemplate end to end under Argo v4.0.5's real
controller, every pod on the real node:

* sync from HDFS (WebHDFS, the MiniDFSCluster of `hdfs_for_pods`, known to the pods by a DNS
  name) onto a GlusterFS-backed data PVC -> train (1 PS + 2 workers + chief, real TensorFlow
  in the trainer image, examples/tf-ps) -> reap -> TensorBoard (our image, ready) -> serve
  (the TF Serving stand-in image, images/tfserving-standin) -> exit handler. The Workflow
  Succeeds; its outputs carry the job's phase, the parameter servers' linger, the TensorBoard
  URL and the served version (the one the chief exported); the data was really synced, the
  stand-in really got the status and :predict requests; every step pod ran on the real node
  as `vpipe-runner` with the pod's own credentials, and every request of the step pods and of
  argoexec was granted (audit log).
* At the same time, the same pipeline with a worker that exits 3 (a run.sh that fails as a
  user's program does): the Workflow fails, the train node's message names the pod, the exit
  code and the last log line, and the exit handler's cleanup leaves no Volcano Job and no
  training pod.

Test-only settings: placement on the real node (selector + toleration, for the job's pods,
TensorBoard and serving too), small CPU and memory requests, a short training run, the
serving image (the stand-in) and `serving-rest-url`: the test node has no kube-proxy, so the
serve step reaches its Service through a forwarder on the node's gateway that sends each
connection to the Service's ready endpoint (support.service_forwarder), not at the ClusterIP."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from tests.argo import support
from tests.helpers.argo_pipelines import follow, pipeline_parameters, placed, stage_dataset, storage, submit_pipeline, task_nodes
from tests.helpers.rbac import created_by_apply, granted
from tests.helpers.training import toleration
from tests.helpers.workflows import GROUP, VERSION, _why, jobs, placement, submit_from_template, training_pods, workflow
from tests.integration.waiting import wait_for
from volcano_pipelines.images import MPI_TRAINER_IMAGE
from volcano_pipelines.volcano.copyjob import copy_job_name

pytestmark = [pytest.mark.integration, pytest.mark.realnode, pytest.mark.containers, pytest.mark.hdfs,
              pytest.mark.gluster, pytest.mark.timeout(1200)]

STEPS = ("sync", "train", "reap", "tensorboard", "serve")
# Granted by manifests/base to vpipe-runner for paths these runs do not take; each is used, with a
# real token, by tests/integration/test_rbac.py or test_rbac_lifecycle.py.
NOT_ON_THESE_PATHS = {
    ("create", "bus.volcano.sh", "commands", ""),  # abort on a timeout; reap's CompleteJob
    ("create", "", "events", ""),  # reap's record of what it reaped
    ("list", "", "services", ""),  # the KFP exit handler (finish_run) finding the run's TensorBoard
    ("list", "networking.k8s.io", "ingresses", ""),  # the same
    ("list", "batch", "jobs", ""), ("watch", "batch", "jobs", ""),  # reap: the classic layout's workers
    ("patch", "apps", "deployments", "scale"),  # reap: the classic layout's PS Deployment
    ("delete", "apps", "deployments", ""),  # reap: a PS Deployment; an expired TensorBoard
    ("create", "networking.k8s.io", "ingresses", ""), ("patch", "networking.k8s.io", "ingresses", ""),  # TensorBoard ingress
    ("create", "", "configmaps", ""), ("patch", "", "configmaps", ""),  # serve: version policy all / specific
    ("get", "scheduling.volcano.sh", "podgroups", ""), ("list", "", "events", ""),  # a job still Pending (timing)
    ("list", "apps", "deployments", ""),  # the reap sweep: the classic layout's PS Deployments
    ("list", "scheduling.volcano.sh", "queues", ""),  # naming the queues there are, for a queue that is not
}


@pytest.fixture
def shipped(pipelines_shipped: Any) -> Any:
    """The pipeline's objects shipped to the namespace (tests/argo/conftest.py: pipelines_shipped)."""
    return pipelines_shipped


def nightly(node: Any, parameters: dict[str, str]) -> dict[str, Any]:
    """The shipped CronWorkflow with a schedule that comes due within a minute, the test's
    arguments instead of the example ones, and its pods on the real node."""
    (cron,) = support.load("pipelines/argo/nightly-retrain.yaml")
    cron["spec"]["schedules"] = ["* * * * *"]
    spec = cron["spec"]["workflowSpec"]
    spec["arguments"] = {"parameters": [{"name": k, "value": v} for k, v in parameters.items()]}
    spec.update(placement(node))
    return dict(cron)


def cron_runs(api: Any, namespace: str) -> list[dict[str, Any]]:
    found = client.CustomObjectsApi(api).list_namespaced_custom_object(
        GROUP, VERSION, namespace, "workflows", label_selector="workflows.argoproj.io/cron-workflow=vpipe-nightly-retrain")
    return sorted(found["items"], key=lambda w: w["metadata"]["creationTimestamp"])


def cron_status(api: Any, namespace: str) -> dict[str, Any]:
    cron = client.CustomObjectsApi(api).get_namespaced_custom_object(GROUP, VERSION, namespace, "cronworkflows",
                                                                     "vpipe-nightly-retrain")
    return dict(cron.get("status") or {})


def forbid_lines(argo: Any, namespace: str) -> int:
    """How often the controller logged that Forbid kept a run of the namespace's CronWorkflow
    from starting (workflow/cron/operator.go, enforceRuntimePolicy)."""
    log = argo.processes["workflow-controller"].log_path.read_text(errors="replace")
    return sum(1 for line in log.splitlines()
               if "'ConcurrencyPolicy: Forbid' and has an active Workflow so it was not run" in line and namespace in line)


def check_step_pods(plane: Any, namespace: str, node: Any, step_pods: list[dict[str, str]], at_least: int
                    ) -> set[Any]:
    """Every step pod ran on the real node as vpipe-runner, and every request of the
    ServiceAccount (the steps and argoexec) was granted; returns the granted accesses."""
    assert len(step_pods) >= at_least, step_pods
    assert all(p["service_account"] == "vpipe-runner" and p["node"] == node.name for p in step_pods), step_pods
    refused, allowed = support.service_account_accesses(plane.audit_log, namespace, "vpipe-runner")
    assert refused == [], f"refused: {refused}"
    return allowed


def workflow_outputs(wf: dict[str, Any]) -> dict[str, str]:
    """The workflow's outputs: those of its entrypoint, on the root node (id = the workflow's name)."""
    root = wf["status"]["nodes"][wf["metadata"]["name"]]
    return {p["name"]: p.get("value", "") for p in root.get("outputs", {}).get("parameters", [])}


def seconds(status: dict[str, Any]) -> float:
    """finishedAt - startedAt of a node or a workflow's status."""
    return support.parse_time(status["finishedAt"]) - support.parse_time(status["startedAt"])


def test_train_and_serve_succeeds_end_to_end_and_a_failing_worker_fails_it_with_cleanup(
        cluster: Any, namespace: str, pipeline_node: Any, code_url: str, hdfs_for_pods: Any, gluster: Any,
        argo: Any, shipped: Any, tmp_path: Path) -> None:
    plane = cluster.require_local()
    api, pvs = shipped
    real = pipeline_node
    dataset, src = stage_dataset(hdfs_for_pods, namespace, tmp_path)
    good, bad = (storage(api, pvs, namespace, gluster, real, tag) for tag in ("e2e", "boom"))

    with support.service_forwarder(api, namespace, "e2e-serving", "http", real.gateway_ip) as serving_url:
        # The nightly CronWorkflow, due every minute, runs the pipeline that succeeds; the one
        # whose worker fails is submitted at once, beside it.
        started = time.monotonic()
        cron = nightly(real, pipeline_parameters(real, "e2e", f"{code_url}/tf-ps/", src, good, serving_url))
        client.CustomObjectsApi(api).create_namespaced_custom_object(GROUP, VERSION, namespace, "cronworkflows", cron)
        boom = submit_pipeline(api, namespace, real, pipeline_parameters(
            real, "boom", f"{code_url}/fail/", src, bad, serving_url, **{"restart-on-failure": "false"}))
        fired = wait_for("the CronWorkflow to fire", lambda: cron_runs(api, namespace), timeout=90)
        first = fired[0]["metadata"]
        fired_after = time.monotonic() - started
        # Its next tick comes while that run still goes: Forbid makes the controller skip it.
        # (The controller creates the run first and records the time in the status after: CI
        # once read the status between the two.)
        scheduled = wait_for("the CronWorkflow to record its run",
                             lambda: cron_status(api, namespace).get("lastScheduledTime"), timeout=30)
        next_tick = support.parse_time(scheduled) + 60
        time.sleep(max(0.0, next_tick + 10 - time.time()))
        at_next_tick = {"runs": [w["metadata"]["name"] for w in cron_runs(api, namespace)],
                        "phase": workflow(api, namespace, first["name"]).get("status", {}).get("phase"),
                        "skipped": forbid_lines(argo, namespace)}
        client.CustomObjectsApi(api).patch_namespaced_custom_object(  # no third run: the test is over after this
            GROUP, VERSION, namespace, "cronworkflows", cron["metadata"]["name"], {"spec": {"suspend": True}})
        names = [first["name"], boom]
        finished, pods = follow(api, namespace, names, timeout=1200)
        wall = time.monotonic() - started
    ok, failed = (finished[n] for n in names)
    core = client.CoreV1Api(api)

    # --- the pipeline that succeeds ---------------------------------------------------------
    assert ok["status"]["phase"] == "Succeeded", _why(ok)
    nodes = task_nodes(ok)
    assert all(nodes[step]["phase"] == "Succeeded" for step in (*STEPS, "report")), \
        {k: n["phase"] for k, n in nodes.items()}
    assert nodes["cleanup"]["phase"] == "Skipped"  # the workflow succeeded: nothing to clean up
    outputs = workflow_outputs(ok)
    assert outputs["phase"] == "Completed" and outputs["succeeded"] == "true", outputs
    assert float(outputs["ps-linger-seconds"]) >= 0, outputs
    assert outputs["tensorboard-url"] == f"http://e2e-tensorboard.{namespace}.svc:6006/", outputs
    exported = sorted(int(p.parent.name) for p in (good.log_dir / "export" / "e2e").glob("*/saved_model.pb"))
    assert exported and outputs["served-version"] == str(exported[-1]), (outputs, exported)
    # sync really copied the dataset from HDFS onto the GlusterFS volume, into the model's own
    # directory (the one directory of the data PVC the training pods mount).
    assert {p.name: p.read_bytes() for p in (good.data_dir / "e2e").iterdir() if p.is_file()} == dataset
    # The stand-in was asked for the model's status and the smoke test's :predict.
    (serving,) = core.list_namespaced_pod(namespace, label_selector="app.kubernetes.io/instance=e2e-serving").items
    assert serving.spec.node_name == real.name
    served = core.read_namespaced_pod_log(serving.metadata.name, namespace)
    assert "GET /v1/models/e2e 200" in served and "POST /v1/models/e2e:predict 200" in served, served
    job = jobs(api, namespace)["e2e"]
    assert job["status"]["state"]["phase"] == "Completed"
    assert job["metadata"]["labels"]["volcano-pipelines/run"] == ok["metadata"]["uid"]

    # --- the CronWorkflow: it fired, and Forbid held at its next tick ------------------------
    assert at_next_tick["runs"] == [first["name"]] and at_next_tick["phase"] == "Running", at_next_tick
    assert at_next_tick["skipped"] >= 1, f"no Forbid skip in the controller's log: {at_next_tick}"
    assert first["labels"]["workflows.argoproj.io/cron-workflow"] == "vpipe-nightly-retrain"

    # --- the pipeline whose worker exits 3 -------------------------------------------------
    assert failed["status"]["phase"] == "Failed", _why(failed)
    bad_nodes = task_nodes(failed)
    train_pods = [n for n in failed["status"]["nodes"].values()
                  if n.get("type") == "Pod" and n["displayName"].startswith("train")]
    assert len(train_pods) == 1, [(n["displayName"], n["phase"]) for n in train_pods]  # exit 1 is final
    message = train_pods[0].get("message", "")
    assert "boom-worker-" in message and "exit code 3" in message and "giving up: exit 3" in message, message
    # The train step's post-mortem output (the record's summary, saved before anything deleted
    # the pods): the failed pod with its exit code and last log lines, and every other pod.
    post_mortem = {p["name"]: p.get("value", "") for p in
                   (train_pods[0].get("outputs") or {}).get("parameters") or []}.get("post-mortem", "")
    assert "# Post-mortem: job" in post_mortem and "exit code 3" in post_mortem, train_pods[0].get("outputs")
    assert "giving up: exit 3" in post_mortem, post_mortem
    assert all(f"| boom-{pod} |" in post_mortem for pod in ("ps-0", "chief-0", "worker-0", "worker-1")), post_mortem
    # The whole record on the run's log PVC, next to its logs (issue 30: the train step pod mounts
    # log-pvc at /vpipe/logs and copies it to <log PVC>/post-mortem/<namespace>/<job>.json).
    kept = json.loads((bad.log_dir / "post-mortem" / namespace / "boom.json").read_text())
    assert kept["job"]["name"] == "boom" and "boom-worker-0" in {p["name"] for p in kept["pods"]}, kept["job"]
    assert json.loads((good.log_dir / "post-mortem" / namespace / "e2e.json").read_text())["job"]["phase"] == "Completed"
    assert bad_nodes["cleanup"]["phase"] == "Succeeded" and bad_nodes["report"]["phase"] == "Succeeded", \
        {k: n["phase"] for k, n in bad_nodes.items()}
    wait_for("no job and no training pod of the failed pipeline",
             lambda: "boom" not in jobs(api, namespace) and not training_pods(core, namespace, "boom"), timeout=120)

    # --- every step in a pod on the real node, as vpipe-runner, every request granted ---------
    allowed = check_step_pods(plane, namespace, real, [p for p in pods.values() if p["workflow"] in names],
                              len(STEPS) + 3)  # + the report steps, the failed run's sync and train
    # What manifests/base + manifests/argo grant and neither pipeline used: only paths these runs
    # do not take (each covered by tests/integration/test_rbac*.py with a real token).
    roles = [o for o in support.base_objects(namespace) if o["kind"] in ("Role", "ClusterRole")]
    # A server-side apply that creates its object is a patch answered 201, authorized as a create too.
    allowed |= {("create", *access[1:]) for access in created_by_apply(plane.audit_log,
                                                                       f"system:serviceaccount:{namespace}:vpipe-runner")}
    unused = granted(roles) - allowed
    print(f"\ngranted to vpipe-runner and not used by these runs: {sorted(unused)}")
    assert unused <= NOT_ON_THESE_PATHS, sorted(unused - NOT_ON_THESE_PATHS)

    on_exit = next(n for n in ok["status"]["nodes"].values() if n.get("templateName") == "exit-handler")
    shares = ", ".join(f"{step} {seconds(nodes[step]):.0f} s" for step in STEPS) + f", exit handler {seconds(on_exit):.0f} s"
    print(f"\nCronWorkflow vpipe-nightly-retrain (schedule '* * * * *'): created {first['name']} at "
          f"{first['creationTimestamp']} (scheduled {scheduled}, {fired_after:.0f} s after the CronWorkflow was "
          f"created); at the next tick, {at_next_tick}: not run (Forbid)")
    print(f"train-and-serve: workflow {seconds(ok['status']):.0f} s (both pipelines done {wall:.0f} s after "
          f"submission); steps: {shares}; the failing pipeline {seconds(failed['status']):.0f} s: {message}")


def test_the_mpi_pipeline_syncs_trains_and_starts_tensorboard(
        cluster: Any, namespace: str, pipeline_node: Any, code_url: str, hdfs_for_pods: Any, gluster: Any,
        shipped: Any, tmp_path: Path) -> None:
    """vpipe-train-and-serve-mpi: sync from HDFS onto GlusterFS by two copy pods -> an MPI job (mpimaster + 2
    workers, mpiexec over ssh, the examples' allreduce training) -> TensorBoard."""
    plane = cluster.require_local()
    api, pvs = shipped
    real = pipeline_node
    dataset, src = stage_dataset(hdfs_for_pods, namespace, tmp_path)
    volumes = storage(api, pvs, namespace, gluster, real, "lr")
    small = {f"{task}-{what}": value for task in ("mpimaster", "mpiworker")
             for what, value in (("cpu", "250m"), ("memory", "512Mi"))}
    # The dataset is staged by two copy pods (sync --workers 2), placed on the real node too.
    copy_pods = {"sync-workers": "2", "sync-node-selector": f"{real.label}={real.label_value}",
                 "sync-tolerations": toleration(real), "sync-cpu": "100m", "sync-memory": "512Mi",
                 "sync-queue": "default"}
    name = submit_from_template(api, namespace, real, "vpipe-train-and-serve-mpi", "lr-", {
        "name": "lr", "timeout": "600", "sync-src": src, "data-pvc": volumes.data_pvc, "log-pvc": volumes.log_pvc,
        "image": MPI_TRAINER_IMAGE, "code-url": f"{code_url}/mpi/", "workers": "2",
        "command": "python3 train.py --steps=30", **placed(real), **small, **copy_pods,
    })
    finished, pods = follow(api, namespace, [name], timeout=900)
    done = finished[name]
    assert done["status"]["phase"] == "Succeeded", _why(done)
    nodes = task_nodes(done)
    assert [nodes[step]["phase"] for step in ("sync", "train", "tensorboard", "report")] == ["Succeeded"] * 4, nodes
    outputs = workflow_outputs(done)
    assert outputs["phase"] == "Completed" and outputs["tensorboard-url"] == f"http://lr-tensorboard.{namespace}.svc:6006/"
    assert {p.name: p.read_bytes() for p in (volumes.data_dir / "lr").iterdir() if p.is_file()} == dataset
    copy_job = jobs(api, namespace)[copy_job_name(done["metadata"]["uid"])]
    assert copy_job["spec"]["tasks"][0]["replicas"] == 2 and copy_job["status"]["state"]["phase"] == "Completed"
    # mpiexec ran a rank on each worker pod; they wrote their agreed result to the log PVC.
    assert json.loads((volumes.log_dir / "mpi-result.json").read_text())["ranks"] == 2
    check_step_pods(plane, namespace, real, [p for p in pods.values() if p["workflow"] == name], 4)
    shares = ", ".join(f"{step} {seconds(nodes[step]):.0f} s" for step in ("sync", "train", "tensorboard"))
    print(f"\ntrain-and-serve-mpi: workflow {seconds(done['status']):.0f} s; steps: {shares}")
