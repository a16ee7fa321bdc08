"""The local backend's pure planning: from a rendered Job to each replica's argv, environment,
directories and ports; Kubernetes' `$(VAR)` expansion; Volcano's svc files."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest

from volcano_pipelines.backends.local import tail
from volcano_pipelines.errors import InputError
from volcano_pipelines.localjob.plan import (
    TF_ADDRESSES_FILE,
    tf_addresses,
    LOCAL_ADDRESS,
    POD_UID_ENV,
    PRTE_MAPPING_ENV,
    Layout,
    expand,
    host_rewriter,
    nodes_file,
    plan_job,
    remap_path,
    svc_files,
)
from volcano_pipelines.localjob.runner import validate
from volcano_pipelines.volcano.entrypoint import CODE_DIR
from volcano_pipelines.volcano.mpi import build_mpi_job
from volcano_pipelines.volcano.spec import CodeSource, JobOptions, MPIJobSpec, Role, Storage, TFJobSpec
from volcano_pipelines.volcano.tf import build_tf_job

LAYOUT = Layout(data_dir="/local/data", log_dir="/local/logs", pvc_root="/local/pvc", svc_dir="/local/job/etc",
                pods_dir="/local/job/pods")


def plan(job: dict) -> list:
    ports = itertools.count(40000)
    names = [f"{job['metadata']['name']}-{t['name']}-{i}" for t in job["spec"]["tasks"] for i in range(t["replicas"])]
    return plan_job(job, LAYOUT, pod_uids={n: f"uid-{n}" for n in names}, base_env={"PATH": "/venv/bin:/usr/bin", "HOME": "/root"},
                    python="/venv/bin/python", sshd_standin="/pkg/sshd_standin.py", allocate_port=lambda: next(ports))


def tf_job(**kw) -> dict:
    spec = TFJobSpec(job=JobOptions(name="mnist"), code=CodeSource(url="http://files/code/"), worker=Role(replicas=2),
                     chief=Role(), storage=Storage(data_pvc="data", log_pvc="logs"), **kw)
    return build_tf_job(spec)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("$(A)/x", "1/x"),
        ("$$(A)", "$(A)"),  # escaped
        ("$(MISSING)", "$(MISSING)"),  # unknown: unchanged
        ("$((n + 1)) $(pwd)", "$((n + 1)) $(pwd)"),  # shell syntax in a script survives
        ("a$", "a$"),
        ("$(A", "$(A"),
        ("$B $(A)$(A)", "$B 11"),
    ],
)
def test_expand_follows_kubernetes(text: str, expected: str) -> None:
    assert expand(text, {"A": "1"}) == expected


def test_host_rewriter_maps_each_pod_and_port_to_its_own_local_port() -> None:
    job = build_tf_job(TFJobSpec(job=JobOptions(name="j"), worker=Role(replicas=11)))
    ports: dict[tuple[str, int], int] = {}

    def port_of(pod: str, port: int) -> int:
        return ports.setdefault((pod, port), 50000 + len(ports))

    rewrite = host_rewriter(job, port_of)
    assert rewrite("j-worker-1.j:2222,j-worker-10.j:2222") == "127.0.0.1:50000,127.0.0.1:50001"
    assert ports == {("j-worker-1", 2222): 50000, ("j-worker-10", 2222): 50001}
    assert rewrite("j-worker-1.j:2222") == "127.0.0.1:50000"  # stable
    assert rewrite("j-ps-0.j.default.svc.cluster.local:2222") == "127.0.0.1:50002"
    assert rewrite('["j-ps-0.j"]') == '["127.0.0.1"]'
    # Not this job's pods: left alone.
    for other in ("k-ps-0.k:2222", "j-ps-0.jx:2222", "xj-ps-0.j:2222", "j-ps-7.j:2222", "j-ps-0.j.example.com"):
        assert rewrite(other) == other


def test_remap_path_takes_the_longest_mount() -> None:
    mounts = [("/data", "/local/data"), ("/data/cache", "/local/cache"), ("/", "/local/root")]
    assert remap_path("/data", mounts) == "/local/data"
    assert remap_path("/data/x/y", mounts) == "/local/data/x/y"
    assert remap_path("/data/cache/z", mounts) == "/local/cache/z"
    assert remap_path("/database", mounts) == "/local/root/database"
    assert remap_path("relative/data", mounts) == "relative/data"


def test_svc_files_are_volcanos_configmap() -> None:
    files = svc_files(build_mpi_job(MPIJobSpec(job=JobOptions(name="m"), command=("hostname",), worker=Role(replicas=3))))
    assert files["mpiworker.host"] == "127.0.0.1\n127.0.0.1\n127.0.0.1"  # no newline after the last, like Volcano
    assert files["mpimaster.host"] == "127.0.0.1"
    assert files["VC_MPIWORKER_HOSTS"] == "127.0.0.1,127.0.0.1,127.0.0.1" and files["VC_MPIWORKER_NUM"] == "3"
    assert nodes_file() == "127.0.0.1\n"


def test_tf_plan_rewrites_the_cluster_and_maps_volumes() -> None:
    plans = {p.pod: p for p in plan(tf_job(args=("--pod=$(HOSTNAME)", "--role=$(VPIPE_ROLE)", "$$(VPIPE_ROLE)")))}
    assert sorted(plans) == ["mnist-chief-0", "mnist-ps-0", "mnist-worker-0", "mnist-worker-1"]
    # Pods have no DNS names here: every task's address (this machine, a port per pod) is in
    # one file the entry point reads instead of the svc plugin's host files.
    files = tf_addresses(list(plans.values()))
    cluster = json.loads(files[TF_ADDRESSES_FILE])
    addresses = [a for hosts in cluster.values() for a in hosts]
    assert len(set(addresses)) == 4 and all(a.startswith(f"{LOCAL_ADDRESS}:") for a in addresses)
    for pod, p in plans.items():
        task, index = pod.split("-")[1], int(pod.split("-")[2])
        assert p.env["VPIPE_TF_ADDRESSES"] == f"/local/job/etc/{TF_ADDRESSES_FILE}"
        assert f"{LOCAL_ADDRESS}:{p.ports[2222]}" == cluster[task][index]
        assert p.env["VK_TASK_INDEX"] == p.env["VC_TASK_INDEX"] == str(index)
        assert p.env["VC_WORKER_HOSTS"] == "127.0.0.1,127.0.0.1" and p.env["VC_CHIEF_NUM"] == "1"
        assert p.env["VPIPE_CODE_DIR"] == f"/local/job/pods/{pod}/volumes/vpipe-code" != CODE_DIR
        assert p.env["VPIPE_DATA_DIR"] == "/local/data" and p.env["VPIPE_LOG_DIR"] == "/local/logs"
        assert p.env["HOSTNAME"] == pod and p.env[POD_UID_ENV] == f"uid-{pod}"
        assert p.env["PATH"] == "/venv/bin:/usr/bin" and p.env["HOME"] == "/root"
        assert p.code_url == "http://files/code/" and p.entry == "run.sh" and p.standin is None
        assert p.cwd == f"/local/job/pods/{pod}/work" and p.cwd in p.dirs
        # Its own /tmp (the MPI master's mktemp hostfile must not land in this machine's).
        assert p.env["TMPDIR"] == p.tmp_dir == f"/local/job/pods/{pod}/tmp" and p.tmp_dir in p.dirs
        # Args arrive exactly as the user gave them: the builder escaped every $ for the
        # kubelet's $(VAR) expansion, and the local backend expands as the kubelet does.
        assert p.argv[:2] == ("bash", "-c") and p.argv[-3:] == ("--pod=$(HOSTNAME)", "--role=$(VPIPE_ROLE)", "$$(VPIPE_ROLE)")
    # Parameter servers get no data volume, but our contract's data directory still maps.
    assert "/local/data" in plans["mnist-worker-0"].dirs and "/local/logs" in plans["mnist-ps-0"].dirs


def test_a_data_subpath_maps_to_that_directory_of_the_local_data_volume() -> None:
    spec = TFJobSpec(job=JobOptions(name="mnist"), code=CodeSource(url="http://files/code/"), worker=Role(replicas=1),
                     storage=Storage(data_pvc="data", data_subpath="mnist/v2", log_pvc="logs"))
    plans = {p.pod: p for p in plan(build_tf_job(spec))}
    assert plans["mnist-worker-0"].env["VPIPE_DATA_DIR"] == "/local/data/mnist/v2"
    assert "/local/data/mnist/v2" in plans["mnist-worker-0"].dirs


def test_mpi_plan_stands_in_for_sshd_and_points_mpiexec_at_this_machine() -> None:
    plans = {p.pod: p for p in plan(build_mpi_job(MPIJobSpec(job=JobOptions(name="m"), command=("python3", "t.py"),
                                                             worker=Role(replicas=2))))}
    master, w0, w1 = plans["m-mpimaster-0"], plans["m-mpiworker-0"], plans["m-mpiworker-1"]
    port = master.env["VPIPE_SSH_PORT"]
    for worker in (w0, w1):
        assert worker.standin == "sshd"
        assert worker.argv == ("/venv/bin/python", "/pkg/sshd_standin.py", "--address", LOCAL_ADDRESS, "--port", port)
    assert master.env["VPIPE_WORKER_HOSTFILE"] == "/local/job/etc/nodes"
    assert master.env[PRTE_MAPPING_ENV] == ":oversubscribe"
    assert master.entry is None and master.argv[-2:] == ("python3", "t.py")


def test_unsupported_manifests_are_refused_naming_the_field() -> None:
    job = tf_job()
    job["spec"]["tasks"][0]["policies"] = [{"event": "TaskCompleted", "action": "RestartTask"}]
    with pytest.raises(InputError) as err:
        validate(job)
    assert err.value.field == "spec.tasks[0].policies.action" and err.value.value == "RestartTask"
    job = tf_job()
    container = job["spec"]["tasks"][1]["template"]["spec"]["containers"][0]
    container["env"].append({"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}})
    with pytest.raises(InputError) as err:
        validate(job)
    assert err.value.field == "spec.tasks[1].template.spec.containers[0].env[TOKEN]"


def test_tail_reads_the_last_lines(tmp_path: Path) -> None:
    log = tmp_path / "pod.log"
    assert tail(log, 3) is None
    log.write_text("".join(f"line {i}\n" for i in range(5000)))
    assert tail(log, 3) == "line 4997\nline 4998\nline 4999"
    log.write_text("only")
    assert tail(log, 3) == "only"


def test_a_tf_job_with_parameter_servers_and_no_chief_is_warned_about() -> None:
    """Issue 33, item 7: TF2 code without a coordinator waits for ever; the local backend says so."""
    from volcano_pipelines.localjob.plan import coordinator_note
    from volcano_pipelines.steps import render_tf

    without = render_tf("nochief", ps=1, workers=2, code_url="http://files.example/m/")
    note = coordinator_note(without)
    assert note is not None and "no chief" in note and "--chief" in note and "--timeout" in note
    assert coordinator_note(render_tf("chief", ps=1, workers=2, chief=True, code_url="http://files.example/m/")) is None
    from volcano_pipelines.steps import render_mpi

    assert coordinator_note(render_mpi("mpi", workers=2, command=["python3", "train.py"])) is None
