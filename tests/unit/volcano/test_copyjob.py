"""The copy job of a sync over several pods (volcano/copyjob.py) and where a step pod's
destination volume is (objects/podspec.py mounted_claim): values asserted, not text."""

from __future__ import annotations

from typing import Any

from volcano_pipelines.objects.podspec import mounted_claim, mounted_config
from volcano_pipelines.labels import RUN_LABEL, STEP_LABEL
from volcano_pipelines.volcano.copyjob import DEST_DIR, CopyJobSpec, build_copy_job, copy_job_name
from volcano_pipelines.volcano.spec import JobOptions, Resources, Role


def job(**extra: Any) -> dict[str, Any]:
    options = JobOptions(copy_job_name("run-1"), namespace="ns", image="img:1", queue="q", max_retry=4, run_id="run-1",
                         pod_security="restricted")
    role = Role(resources=Resources(cpu="2", memory="3Gi"), node_selector={"pool": "io"},
                tolerations=({"key": "k", "operator": "Exists", "effect": "NoSchedule"},))
    spec = {"job": options, "workers": 3, "claim": "data", "subpath": "/sets/a/", "role": role, **extra}
    return build_copy_job(CopyJobSpec(**spec))


def test_three_copy_pods_of_one_task_each_told_the_run_and_mounting_the_destination() -> None:
    manifest = job()
    spec = manifest["spec"]
    assert manifest["metadata"]["name"] == copy_job_name("run-1") and manifest["metadata"]["namespace"] == "ns"
    assert manifest["metadata"]["labels"][RUN_LABEL] == "run-1" and manifest["metadata"]["labels"][STEP_LABEL] == "sync"
    [copy] = spec["tasks"]
    assert copy["name"] == "copy" and copy["replicas"] == 3 and copy["minAvailable"] == 1 and spec["minAvailable"] == 1
    assert spec["plugins"] == {"env": []} and spec["queue"] == "q" and spec["maxRetry"] == 4
    assert {p["event"]: p["action"] for p in spec["policies"]} == {"PodEvicted": "RestartJob", "PodFailed": "RestartJob"}
    pod = copy["template"]["spec"]
    [container] = pod["containers"]
    assert container["image"] == "img:1"
    assert container["command"][-1] == "volcano_pipelines.transfer.worker"
    assert container["args"] == ["--root", DEST_DIR, "--run-id", "run-1"]
    assert container["volumeMounts"] == [{"name": "vpipe-dest", "mountPath": DEST_DIR, "subPath": "sets/a"}]
    assert pod["volumes"] == [{"name": "vpipe-dest", "persistentVolumeClaim": {"claimName": "data"}}]
    assert container["resources"]["requests"] == {"cpu": "2", "memory": "3Gi"}
    assert pod["nodeSelector"] == {"pool": "io"} and pod["tolerations"][0]["key"] == "k"
    assert pod["restartPolicy"] == "Never" and pod["securityContext"]["runAsNonRoot"] is True
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    assert "affinity" not in pod


def test_spread_prefers_one_copy_pod_per_node_and_no_subpath_mounts_the_claims_root() -> None:
    pod = job(spread=True, subpath=None)["spec"]["tasks"][0]["template"]["spec"]
    [term] = pod["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    assert term["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"
    assert term["podAffinityTerm"]["labelSelector"]["matchLabels"] == {"volcano.sh/job-name": copy_job_name("run-1")}
    assert "subPath" not in pod["containers"][0]["volumeMounts"][0]


def test_the_copy_job_is_named_by_its_run_alone() -> None:
    assert copy_job_name("a") == copy_job_name("a") != copy_job_name("b")
    assert len(copy_job_name("x" * 128)) <= 63


def pod(*mounts: tuple[str, str, str | None]) -> dict[str, Any]:
    return {"spec": {
        "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "vpipe-data"}},
                    {"name": "inner", "persistentVolumeClaim": {"claimName": "other"}},
                    {"name": "scratch", "emptyDir": {}}],
        "containers": [{"name": "wait", "image": "argoexec"}, {"name": "main", "image": "rt:2", "volumeMounts": [
            {"name": name, "mountPath": path, **({"subPath": sub} if sub else {})} for name, path, sub in mounts]}],
    }}


def test_the_claim_a_step_pod_mounts_at_or_above_the_destination() -> None:
    assert mounted_claim(pod(("data", "/data", None)), "/data/mnist") == ("vpipe-data", "mnist", "rt:2")
    assert mounted_claim(pod(("data", "/data", None)), "/data") == ("vpipe-data", "", "rt:2")
    assert mounted_claim(pod(("data", "/data/", "teams/a")), "/data/mnist/v2") == ("vpipe-data", "teams/a/mnist/v2", "rt:2")
    # The deepest mount wins; a mount that is no claim, or a sibling path, is not it.
    assert mounted_claim(pod(("data", "/data", None), ("inner", "/data/in", None)), "/data/in/x") == ("other", "x", "rt:2")
    assert mounted_claim(pod(("scratch", "/data", None)), "/data/x") is None
    assert mounted_claim(pod(("data", "/data", None)), "/database/x") is None


def test_the_step_pods_secret_and_config_map_volumes_that_hold_client_files_are_found_and_mounted_alike() -> None:
    step = pod(("data", "/data", None))
    step["spec"]["volumes"] += [{"name": "krb", "secret": {"secretName": "etl-keytab"}},
                                {"name": "conf", "configMap": {"name": "hadoop-conf"}}]
    step["spec"]["containers"][1]["volumeMounts"] += [{"name": "krb", "mountPath": "/vpipe/kerberos"},
                                                      {"name": "conf", "mountPath": "/vpipe/hadoop-conf"}]
    keytab = mounted_config(step, "/vpipe/kerberos/etl.keytab")
    assert keytab == ({"name": "krb", "secret": {"secretName": "etl-keytab"}},
                      {"name": "krb", "mountPath": "/vpipe/kerberos", "readOnly": True})
    assert mounted_config(step, "/vpipe/hadoop-conf")[0]["configMap"] == {"name": "hadoop-conf"}  # type: ignore[index]
    assert mounted_config(step, "/data/mnist") is None  # a claim, not a Secret or ConfigMap
    assert mounted_config(step, "/etc/hadoop") is None  # in the image
    pod_spec = job(config=(keytab,))["spec"]["tasks"][0]["template"]["spec"]
    assert {"name": "krb", "secret": {"secretName": "etl-keytab"}} in pod_spec["volumes"]
    assert {"name": "krb", "mountPath": "/vpipe/kerberos", "readOnly": True} in pod_spec["containers"][0]["volumeMounts"]
