"""The TF builder: every branch of the Job it renders."""

from __future__ import annotations

from typing import Any

import pytest

from volcano_pipelines.localjob.plan import expand
from volcano_pipelines.volcano.spec import CodeSource, JobOptions, Resources, Role, Storage, TFJobSpec
from volcano_pipelines.volcano.tf import build_tf_job


def spec(**overrides: Any) -> TFJobSpec:
    base: dict[str, Any] = {"job": JobOptions(name="mnist", namespace="team-a", run_id="run-1"),
                            "code": CodeSource(url="http://files.example/mnist/")}
    base.update(overrides)
    return TFJobSpec(**base)


def tasks(job: dict) -> dict[str, dict]:
    return {t["name"]: t for t in job["spec"]["tasks"]}


def container(job: dict, task: str) -> dict:
    return tasks(job)[task]["template"]["spec"]["containers"][0]


def env(job: dict, task: str) -> dict[str, str]:
    return {e["name"]: e["value"] for e in container(job, task)["env"]}


def test_quickstart_job_shape() -> None:
    job = build_tf_job(spec(worker=Role(replicas=10), ps=Role(replicas=1)))
    assert job["apiVersion"] == "batch.volcano.sh/v1alpha1" and job["kind"] == "Job"
    assert job["metadata"] == {
        "name": "mnist",
        "namespace": "team-a",
        "labels": {
            "app.kubernetes.io/managed-by": "volcano-pipelines",
            "volcano-pipelines/step": "train",
            "volcano-pipelines/run": "run-1",
        },
    }
    s = job["spec"]
    assert s["schedulerName"] == "volcano"
    assert s["minAvailable"] == 11  # gang: every replica
    assert s["queue"] == "default"
    assert s["maxRetry"] == 3
    assert s["ttlSecondsAfterFinished"] == 3600
    assert s["plugins"] == {"env": [], "svc": []}
    assert {"event": "PodEvicted", "action": "RestartJob"} in s["policies"]
    assert {"event": "PodFailed", "action": "RestartJob"} in s["policies"]
    assert [t["name"] for t in s["tasks"]] == ["ps", "worker"]
    assert tasks(job)["ps"]["replicas"] == 1 and tasks(job)["worker"]["replicas"] == 10


def test_workers_complete_the_job_without_chief() -> None:
    job = build_tf_job(spec())
    assert tasks(job)["worker"]["policies"] == [{"event": "TaskCompleted", "action": "CompleteJob"}]
    assert "policies" not in tasks(job)["ps"]


def test_chief_completes_the_job_when_present() -> None:
    job = build_tf_job(spec(chief=Role(), evaluator=Role()))
    t = tasks(job)
    assert list(t) == ["chief", "ps", "worker", "evaluator"]
    assert t["chief"]["policies"] == [{"event": "TaskCompleted", "action": "CompleteJob"}]
    assert "policies" not in t["worker"] and "policies" not in t["evaluator"]
    assert job["spec"]["minAvailable"] == 4


def test_the_job_carries_task_counts_and_the_port_not_hosts() -> None:
    """Each task builds its cluster at start (tf_cluster.py): no host list in any pod template."""
    job = build_tf_job(spec(ps=Role(replicas=2), worker=Role(replicas=3), chief=Role(), evaluator=Role()))
    for task in ("chief", "ps", "worker", "evaluator"):
        e = env(job, task)
        assert e["VPIPE_TF_TASKS"] == "chief=1,ps=2,worker=3,evaluator=1" and e["VPIPE_TF_PORT"] == "2222"
        assert e["VPIPE_NUM_SHARDS"] == "3" and e["VPIPE_ROLE"] == task
        assert not any("mnist-ps-0" in value for value in e.values())
    assert job["spec"]["plugins"] == {"env": [], "svc": []}  # the svc plugin's host files are the source


def test_custom_port_everywhere() -> None:
    job = build_tf_job(spec(port=5000))
    assert container(job, "ps")["ports"] == [{"name": "tfjob-port", "containerPort": 5000, "protocol": "TCP"}]
    assert env(job, "ps")["VPIPE_TF_PORT"] == "5000"


def test_roles_get_their_own_resources_image_env_scheduling() -> None:
    toleration = {"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}
    job = build_tf_job(
        spec(
            job=JobOptions(name="mnist", image="base:1"),
            worker=Role(replicas=2, image="gpu:1", resources=Resources(cpu="4", memory="16Gi", gpu=2),
                        env={"A": "1"}, node_selector={"accel": "v100"}, tolerations=(toleration,),
                        labels={"team": "x"}, annotations={"note": "hi"}),
        )
    )
    w = tasks(job)["worker"]["template"]
    c = w["spec"]["containers"][0]
    assert c["image"] == "gpu:1"
    assert container(job, "ps")["image"] == "base:1"
    assert c["resources"] == {
        "requests": {"cpu": "4", "memory": "16Gi", "nvidia.com/gpu": "2"},
        "limits": {"memory": "16Gi", "nvidia.com/gpu": "2"},
    }
    assert container(job, "ps")["resources"] == {"requests": {"cpu": "1", "memory": "2Gi"}, "limits": {"memory": "2Gi"}}
    assert env(job, "worker")["A"] == "1" and "A" not in env(job, "ps")
    assert w["spec"]["nodeSelector"] == {"accel": "v100"}
    assert w["spec"]["tolerations"] == [toleration]
    assert w["metadata"]["labels"]["team"] == "x"
    assert w["metadata"]["annotations"] == {"sidecar.istio.io/inject": "false", "note": "hi"}
    assert "nodeSelector" not in tasks(job)["ps"]["template"]["spec"]


def test_default_image_and_no_cpu_request_when_unset() -> None:
    job = build_tf_job(spec(ps=Role(resources=Resources(cpu=None, memory=None))))
    assert container(job, "ps")["image"].startswith("tensorflow/tensorflow:")
    assert "resources" not in container(job, "ps") or container(job, "ps")["resources"] == {}


def test_pods_never_restart_locally_and_carry_identity_labels() -> None:
    job = build_tf_job(spec(job=JobOptions(name="mnist", run_id="r", labels={"team": "ml"})))
    for t in tasks(job).values():
        assert t["template"]["spec"]["restartPolicy"] == "Never"
        labels = t["template"]["metadata"]["labels"]
        assert labels["volcano-pipelines/run"] == "r"
        assert labels["app.kubernetes.io/managed-by"] == "volcano-pipelines"
        assert labels["team"] == "ml"
    assert job["metadata"]["labels"]["team"] == "ml"


def test_no_run_label_without_run_id() -> None:
    job = build_tf_job(spec(job=JobOptions(name="mnist")))
    assert "volcano-pipelines/run" not in job["metadata"]["labels"]


def test_job_options_map_to_spec() -> None:
    job = build_tf_job(
        spec(job=JobOptions(name="mnist", queue="research", priority_class="high", max_retry=1,
                            ttl=None, service_account="trainer", restart_on_failure=False))
    )
    s = job["spec"]
    assert s["queue"] == "research" and s["priorityClassName"] == "high"
    assert s["maxRetry"] == 1 and "ttlSecondsAfterFinished" not in s
    assert s["policies"] == [{"event": "PodEvicted", "action": "RestartJob"}, {"event": "PodFailed", "action": "TerminateJob"}]
    pod = tasks(job)["ps"]["template"]["spec"]
    assert pod["serviceAccountName"] == "trainer" and pod["priorityClassName"] == "high"
    assert all(t["maxRetry"] == 1 for t in s["tasks"])


def test_full_gang_sets_every_task_min_available() -> None:
    job = build_tf_job(spec(ps=Role(replicas=2), worker=Role(replicas=4), chief=Role(), evaluator=Role()))
    assert {n: t["minAvailable"] for n, t in tasks(job).items()} == {"chief": 1, "ps": 2, "worker": 4, "evaluator": 1}
    assert job["spec"]["minAvailable"] == 8


def test_elastic_gang_gives_up_workers_then_evaluator_never_ps_or_chief() -> None:
    def mins(min_available: int) -> dict[str, int]:
        job = build_tf_job(spec(job=JobOptions(name="m", min_available=min_available), ps=Role(replicas=2),
                                worker=Role(replicas=4), chief=Role(), evaluator=Role()))
        assert job["spec"]["minAvailable"] == min_available
        found = {n: t["minAvailable"] for n, t in tasks(job).items()}
        assert sum(found.values()) == min_available
        return found

    assert mins(4) == {"chief": 1, "ps": 2, "worker": 1, "evaluator": 0}
    assert mins(7) == {"chief": 1, "ps": 2, "worker": 4, "evaluator": 0}
    assert mins(8) == {"chief": 1, "ps": 2, "worker": 4, "evaluator": 1}


def test_pull_secrets_force_always_pull() -> None:
    job = build_tf_job(spec(job=JobOptions(name="mnist", image_pull_secrets=("regcred", "other"))))
    pod = tasks(job)["worker"]["template"]["spec"]
    assert pod["imagePullSecrets"] == [{"name": "regcred"}, {"name": "other"}]
    assert pod["containers"][0]["imagePullPolicy"] == "Always"
    plain = tasks(build_tf_job(spec()))["worker"]["template"]["spec"]
    assert "imagePullSecrets" not in plain and "imagePullPolicy" not in plain["containers"][0]


def volumes_by_name(job: dict, task: str) -> tuple[dict[str, dict], dict[str, dict]]:
    pod = tasks(job)[task]["template"]["spec"]
    return {v["name"]: v for v in pod["volumes"]}, {m["name"]: m for m in pod["containers"][0]["volumeMounts"]}


def test_data_read_only_on_workers_chief_evaluator_logs_everywhere() -> None:
    job = build_tf_job(spec(chief=Role(), evaluator=Role(),
                            storage=Storage(data_pvc="data", data_dir="/mnt/data", log_pvc="logs", log_dir="/mnt/logs")))
    for task in ("worker", "chief", "evaluator"):
        volumes, mounts = volumes_by_name(job, task)
        assert volumes["vpipe-data"] == {"name": "vpipe-data", "persistentVolumeClaim": {"claimName": "data", "readOnly": True}}
        assert mounts["vpipe-data"] == {"name": "vpipe-data", "mountPath": "/mnt/data", "readOnly": True}
    for task in ("ps", "worker", "chief", "evaluator"):
        volumes, mounts = volumes_by_name(job, task)
        assert volumes["vpipe-logs"]["persistentVolumeClaim"] == {"claimName": "logs"}
        assert mounts["vpipe-logs"] == {"name": "vpipe-logs", "mountPath": "/mnt/logs"}
        assert mounts["vpipe-code"]["mountPath"] == "/vpipe/code"
    ps_volumes, _ = volumes_by_name(job, "ps")
    assert "vpipe-data" not in ps_volumes
    assert env(job, "worker")["VPIPE_DATA_DIR"] == "/mnt/data" and env(job, "ps")["VPIPE_LOG_DIR"] == "/mnt/logs"


def test_data_subpath_mounts_one_directory_of_the_data_pvc() -> None:
    job = build_tf_job(spec(storage=Storage(data_pvc="data", data_subpath="mnist/v2/")))
    _, mounts = volumes_by_name(job, "worker")
    assert mounts["vpipe-data"] == {"name": "vpipe-data", "mountPath": "/data", "readOnly": True, "subPath": "mnist/v2"}
    assert env(job, "worker")["VPIPE_DATA_DIR"] == "/data"  # the code sees its dataset where it always does


def test_no_pvcs_no_pvc_volumes() -> None:
    volumes, _ = volumes_by_name(build_tf_job(spec()), "worker")
    assert set(volumes) == {"vpipe-code"}


def test_code_sources() -> None:
    url = env(build_tf_job(spec(code=CodeSource(url="https://h/c.tgz", sha256="A" * 64))), "worker")
    assert url["VPIPE_CODE_URL"] == "https://h/c.tgz" and url["VPIPE_CODE_SHA256"] == "a" * 64
    pvc_job = build_tf_job(spec(code=CodeSource(path="/code/mnist", pvc="code", entry="train.py")))
    e = env(pvc_job, "worker")
    assert e["VPIPE_CODE_PATH"] == "/code/mnist" and e["VPIPE_ENTRY"] == "train.py" and "VPIPE_CODE_URL" not in e
    volumes, mounts = volumes_by_name(pvc_job, "worker")
    assert volumes["vpipe-code-pvc"]["persistentVolumeClaim"] == {"claimName": "code", "readOnly": True}
    assert mounts["vpipe-code-pvc"]["mountPath"] == "/code/mnist"
    image_job = env(build_tf_job(spec(code=CodeSource(path="/app"))), "worker")
    assert image_job["VPIPE_CODE_PATH"] == "/app"
    assert "vpipe-code-pvc" not in volumes_by_name(build_tf_job(spec(code=CodeSource(path="/app"))), "worker")[0]


def test_user_args_are_container_args_and_script_is_constant() -> None:
    hostile = ("--lr=0.1", "$(rm -rf /)", "`id`", "a'b\"c", "; echo pwned")
    a = build_tf_job(spec(args=hostile))
    b = build_tf_job(spec(args=("plain",)))
    ca, cb = container(a, "worker"), container(b, "worker")
    # Escaped for the kubelet's $(VAR) expansion, so they arrive as typed.
    assert [expand(arg, {}) for arg in ca["args"]] == list(hostile)
    assert ca["args"][1] == "$$(rm -rf /)"
    assert ca["command"] == cb["command"]  # user data never reaches the script text
    assert ca["env"][0] == cb["env"][0] and ca["env"][0]["name"] == "VPIPE_ENTRY_SCRIPT"
    assert ca["command"][:2] == ["bash", "-c"]


@pytest.mark.parametrize("role", ["ps", "worker"])
def test_role_env_is_task_type(role: str) -> None:
    assert env(build_tf_job(spec()), role)["VPIPE_ROLE"] == role
