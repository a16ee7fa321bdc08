"""A role past one Volcano task's svc limit, split over several tasks (volcano/slices.py): the
seed's size (1,000 parameter servers + 10,000 workers, MPI's 10,000 workers) renders, every pod
of it could start under Volcano's plugins (their objects and the environment they give, made
here as Volcano makes them, and started by the real kernel), and the limits left are refused
with the most that fits."""

from __future__ import annotations

import errno
import json
import os
import subprocess
from collections.abc import Callable
from typing import Any

import pytest

from tests.unit.volcano.volcano_plugins import ssh_config, svc_configmap, svc_env, template_env
from volcano_pipelines.errors import InputError
from volcano_pipelines.objects.validate import MAX_EXEC_STRING
from volcano_pipelines.localjob import runner as local_runner
from volcano_pipelines.volcano.mpi import build_mpi_job
from volcano_pipelines.volcano.slices import (
    MAX_PLUGIN_OBJECT,
    SSH_KEYS_BYTES,
    TASK_OFFSET_ENV,
    most_replicas,
    plan_slices,
    role_of,
    ssh_secret_size,
    svc_configmap_size,
    svc_env_string,
    svc_hosts_size,
)
from volcano_pipelines.volcano.spec import JobOptions, MPIJobSpec, Role, TFJobSpec
from volcano_pipelines.volcano.status import TaskCounts, counts_from_pods, job_status
from volcano_pipelines.volcano.summary import abnormal_pods
from volcano_pipelines.volcano.tf import build_tf_job

FOUR_KIB_PAGES = pytest.mark.skipif(os.sysconf("SC_PAGE_SIZE") != 4096,
                                    reason="MAX_ARG_STRLEN is 32 pages: 128 KiB with 4 KiB pages")
# For job name "trainjob01": 3,887 workers' VC_WORKER_HOSTS fit 128 KiB, 3,888 do not
# (TESTING.md measured 4,000 at 134,889 bytes: "Argument list too long").
MOST_WORKERS = 3887


def tf(name: str = "trainjob01", *, ps: int = 1, workers: int = 1, chief: bool = True) -> TFJobSpec:
    return TFJobSpec(job=JobOptions(name=name), ps=Role(replicas=ps), worker=Role(replicas=workers),
                     chief=Role() if chief else None)


def mpi(name: str = "trainjob01", *, workers: int = 1) -> MPIJobSpec:
    return MPIJobSpec(job=JobOptions(name=name), worker=Role(replicas=workers), command=("hello",))


def error_of(call: Callable[[], Any]) -> InputError:
    with pytest.raises(InputError) as info:
        call()
    return info.value


def role_indices(job: dict[str, Any], role: str) -> list[tuple[str, int]]:
    """(pod name, role index) of every pod of a role, as the entry point computes the index:
    the task's offset plus Volcano's VK_TASK_INDEX."""
    name = job["metadata"]["name"]
    result = []
    for task in job["spec"]["tasks"]:
        env = template_env(task)
        if env.get("VPIPE_ROLE") != role:
            continue
        offset = int(env.get(TASK_OFFSET_ENV, "0"))
        result += [(f"{name}-{task['name']}-{i}", offset + i) for i in range(int(task["replicas"]))]
    return result


def start(env: dict[str, str]) -> int:
    return subprocess.run(["/bin/true"], env=env).returncode


# The sizes are Volcano's: each computed size equals the object made as the plugins make it.


@pytest.mark.parametrize(("task", "replicas"), [("worker", 0), ("worker", 1), ("ps", 9), ("worker-s1", 10), ("ps", 1001)])
def test_svc_hosts_size_is_the_joined_list(task: str, replicas: int) -> None:
    hosts = ",".join(f"trainjob01-{task}-{i}.trainjob01" for i in range(replicas))
    assert svc_hosts_size("trainjob01", task, replicas) == len(hosts)


@pytest.mark.parametrize("build", [lambda: build_tf_job(tf(ps=1000, workers=10000)),
                                   lambda: build_mpi_job(mpi(workers=10000)),
                                   lambda: build_tf_job(tf(ps=3, workers=7))])
def test_the_plugin_object_sizes_are_those_volcano_makes(build: Callable[[], dict[str, Any]]) -> None:
    job = build()
    tasks = {t["name"]: int(t["replicas"]) for t in job["spec"]["tasks"]}
    assert svc_configmap_size("trainjob01", tasks) == sum(len(v) for v in svc_configmap(job).values())
    assert ssh_secret_size("trainjob01", tasks) == SSH_KEYS_BYTES + len(ssh_config(job))
    for task, n in tasks.items():
        key = task.replace("-", "_").upper()
        assert svc_env_string("trainjob01", task, n) == len(f"VC_{key}_HOSTS={svc_env(job)[f'VC_{key}_HOSTS']}") + 1


@FOUR_KIB_PAGES
def test_one_task_holds_what_the_kernel_allows_and_one_more_is_a_second_task() -> None:
    """The bound is the kernel's: the svc variable of the most workers one task holds starts a
    real process, one more does not (E2BIG); one more worker renders as two tasks."""
    assert most_replicas("trainjob01", "worker") == MOST_WORKERS
    job = build_tf_job(tf(workers=MOST_WORKERS))
    assert [t["name"] for t in job["spec"]["tasks"]] == ["chief", "ps", "worker"]
    [(name, value)] = [(k, v) for k, v in svc_env(job).items() if k == "VC_WORKER_HOSTS"]
    assert start({name: value}) == 0
    with pytest.raises(OSError) as info:
        start({name: value + ",trainjob01-worker-3887.trainjob01"})
    assert info.value.errno == errno.E2BIG
    job = build_tf_job(tf(workers=MOST_WORKERS + 1))
    assert [(t["name"], t["replicas"]) for t in job["spec"]["tasks"]] == [
        ("chief", 1), ("ps", 1), ("worker", 1944), ("worker-s1", 1944)]


def test_slices_are_even_and_their_names_fit_their_sizes() -> None:
    for name, role, n in (("trainjob01", "worker", 10000), ("trainjob01", "ps", 4000), ("a" * 44, "mpiworker", 4000),
                          ("j", "worker", 20000), ("trainjob01", "worker", 2)):
        slices = plan_slices(name, role, n)
        assert sum(s.replicas for s in slices) == n
        assert [s.offset for s in slices] == [sum(x.replicas for x in slices[:k]) for k in range(len(slices))]
        assert max(s.replicas for s in slices) - min(s.replicas for s in slices) <= 1
        assert [s.task for s in slices] == [role] + [f"{role}-s{k}" for k in range(1, len(slices))]
        assert all(svc_env_string(name, s.task, s.replicas) <= MAX_EXEC_STRING for s in slices)
        # The fewest: one slice fewer would not fit.
        if len(slices) > 1:
            fewer = -(-n // (len(slices) - 1))
            assert svc_env_string(name, f"{role}-s{len(slices) - 2}", fewer) > MAX_EXEC_STRING


# The seed's size.


@FOUR_KIB_PAGES
def test_the_seeds_tf_job_renders_and_every_pod_of_it_could_start() -> None:
    """1,000 parameter servers, 10,000 workers and a chief: the workers are three tasks; every
    worker index 0..9,999 is one pod's; the svc plugin's ConfigMap fits the API server; and
    the whole environment a container gets (the template's and both variables of every task,
    128 KiB-bounded strings in a 2 MiB total) starts a real process."""
    job = build_tf_job(tf(ps=1000, workers=10000))
    assert [(t["name"], t["replicas"]) for t in job["spec"]["tasks"]] == [
        ("chief", 1), ("ps", 1000), ("worker", 3334), ("worker-s1", 3333), ("worker-s2", 3333)]
    assert sorted(i for _, i in role_indices(job, "worker")) == list(range(10000))
    assert ("trainjob01-worker-s2-3332", 9999) in role_indices(job, "worker")
    assert sum(len(v) for v in svc_configmap(job).values()) <= MAX_PLUGIN_OBJECT
    assert len(json.dumps(job)) < 200_000  # no host list in the job: the slices add a template each
    [completing] = [t["name"] for t in job["spec"]["tasks"] if t.get("policies")]
    assert completing == "chief"
    assert job["spec"]["minAvailable"] == sum(t["minAvailable"] for t in job["spec"]["tasks"]) == 11001
    for task in job["spec"]["tasks"]:
        env = {**template_env(task), **svc_env(job), "VK_TASK_INDEX": str(int(task["replicas"]) - 1)}
        assert start(env) == 0, task["name"]


@FOUR_KIB_PAGES
def test_the_seeds_mpi_job_renders_and_its_master_reads_every_worker_task() -> None:
    job = build_mpi_job(mpi(workers=10000))
    names = [t["name"] for t in job["spec"]["tasks"]]
    assert names == ["mpimaster", "mpiworker", "mpiworker-s1", "mpiworker-s2", "mpiworker-s3"]
    master = template_env(job["spec"]["tasks"][0])
    assert master["VPIPE_WORKER_HOSTFILE"].split() == [f"/etc/volcano/{n.replace('-', '_')}.host" for n in names[1:]]
    assert all(f"{n.replace('-', '_')}.host" in svc_configmap(job) for n in names[1:])
    assert sorted(i for _, i in role_indices(job, "mpiworker")) == list(range(10000))
    assert SSH_KEYS_BYTES + len(ssh_config(job)) <= MAX_PLUGIN_OBJECT
    assert start({**master, **svc_env(job)}) == 0


def test_without_a_chief_split_workers_complete_the_job_by_its_min_success() -> None:
    """Volcano completes a job by one task's TaskCompleted policy: split workers would end it at
    the first task's end. Without a chief, the job completes once as many pods succeeded as there
    are workers (minSuccess; parameter servers never succeed) and Volcano then ends the rest.
    An evaluator would be counted in: that job is refused, saying to add a chief."""
    job = build_tf_job(tf(ps=1000, workers=10000, chief=False))  # the issue's own command
    assert len(json.dumps(job)) < 200_000
    assert [t["name"] for t in job["spec"]["tasks"]] == ["ps", "worker", "worker-s1", "worker-s2"]
    assert job["spec"]["minSuccess"] == 10000 and not [t for t in job["spec"]["tasks"] if t.get("policies")]
    one_task = build_tf_job(tf(workers=MOST_WORKERS, chief=False))  # unsplit: as before
    assert "minSuccess" not in one_task["spec"]
    assert [t["name"] for t in one_task["spec"]["tasks"] if t.get("policies")] == ["worker"]
    assert "minSuccess" not in build_tf_job(tf(ps=1000, workers=10000))["spec"]  # the chief ends it
    with pytest.raises(InputError) as info:  # the local backend runs task policies only
        local_runner.validate(job)
    assert info.value.field == "spec.minSuccess"
    spec = TFJobSpec(job=JobOptions(name="trainjob01"), ps=Role(), worker=Role(replicas=10000), evaluator=Role())
    err = error_of(lambda: build_tf_job(spec))
    assert (err.field, err.value) == ("worker.replicas", 10000)
    assert f"at most {MOST_WORKERS} workers with an evaluator and no chief" in err.allowed and "--chief" in err.allowed


@pytest.mark.parametrize(("build", "field", "what"), [
    (lambda n: build_tf_job(tf(ps=1000, workers=n)), "worker.replicas", "svc plugin's ConfigMap"),
    (lambda n: build_tf_job(tf("a" * 44, ps=100, workers=n)), "worker.replicas", "svc plugin's ConfigMap"),
    (lambda n: build_mpi_job(mpi(workers=n)), "mpiworker.replicas", "ssh plugin's Secret"),
])
def test_past_the_plugins_objects_the_error_names_the_most_that_fit(
        build: Callable[[int], dict[str, Any]], field: str, what: str) -> None:
    err = error_of(lambda: build(50000))
    assert (err.field, err.value) == (field, 50000) and what in err.allowed and "1048576" in err.allowed
    most = int(err.allowed.split("at most ")[1].split()[0])
    job = build(most)  # the most it names renders, and Volcano's objects for it fit
    assert sum(len(v) for v in svc_configmap(job).values()) <= MAX_PLUGIN_OBJECT
    assert SSH_KEYS_BYTES + len(ssh_config(job)) <= MAX_PLUGIN_OBJECT or "mpi" not in field
    assert error_of(lambda: build(most + 1)).field == field


# Every display reads roles.


def test_role_of_folds_only_slices() -> None:
    assert [role_of(t) for t in ("worker", "worker-s1", "mpiworker-s12", "ps-s3", "chief")] == [
        "worker", "worker", "mpiworker", "ps", "chief"]
    assert [role_of(t) for t in ("worker-s0", "worker-s", "worker-1", "my-s1-s2")] == [
        "worker-s0", "worker-s", "worker-1", "my-s1"]
    assert role_of("custom-s1", ("worker",)) == "custom-s1"


def test_counts_are_per_role_from_the_job_and_from_the_pods() -> None:
    job = build_tf_job(tf(ps=10, workers=10000))
    job["status"] = {"state": {"phase": "Running"}, "taskStatusCount": {
        "worker": {"phase": {"Running": 3000, "Pending": 334}}, "worker-s1": {"phase": {"Running": 3333}},
        "worker-s2": {"phase": {"Succeeded": 3333}}, "ps": {"phase": {"Running": 10}}}}
    status = job_status(job)
    assert set(status.tasks) == {"chief", "ps", "worker"}
    assert status.tasks["worker"] == TaskCounts(pending=334, running=6333, succeeded=3333)
    pods = [{"metadata": {"annotations": {"volcano.sh/task-spec": task}}, "status": {"phase": phase}}
            for task, phase in (("worker", "Running"), ("worker-s2", "Failed"), ("worker-s1", "Running"), ("ps", "Running"))]
    assert counts_from_pods(pods) == {"worker": TaskCounts(running=2, failed=1), "ps": TaskCounts(running=1)}


def test_pods_that_are_not_as_they_should_be_are_named_by_role_index() -> None:
    """`vpipe status` of the seed's job named `worker-s1[1354]`: pod 1354 of the second worker
    task is worker 3334 + 1354."""
    job = build_tf_job(tf(ps=1000, workers=10000))

    def pod(task: str, index: int, phase: str) -> dict[str, Any]:
        return {"metadata": {"name": f"trainjob01-{task}-{index}", "annotations": {"volcano.sh/task-spec": task}},
                "status": {"phase": phase}}

    pods = [pod("worker", 7, "Pending"), pod("worker-s1", 1354, "Pending"), pod("worker-s2", 0, "Pending"),
            pod("ps", 3, "Running")]
    assert abnormal_pods(pods, "Running", job) == {"pending": {"worker": "7,4688,6667"}}
    assert abnormal_pods(pods, "Running") == {"pending": {"worker": "7", "worker-s1": "1354", "worker-s2": "0"}}
