"""Every validation rule: the error names the field, carries the value, says what is allowed."""

from __future__ import annotations

from typing import Any

import pytest

from volcano_pipelines.errors import InputError
from volcano_pipelines.volcano.mpi import build_mpi_job
from volcano_pipelines.volcano.spec import CodeSource, JobOptions, MPIJobSpec, Resources, Role, Storage, TFJobSpec
from volcano_pipelines.volcano.tf import build_tf_job


def tf(**overrides: Any) -> TFJobSpec:
    job_fields = {k[4:]: overrides.pop(k) for k in list(overrides) if k.startswith("job_")}
    base: dict[str, Any] = {"job": JobOptions(**{"name": "mnist", **job_fields})}
    base.update(overrides)
    return TFJobSpec(**base)


def rejects(build: Any, spec: Any, field: str, value: Any = None) -> InputError:
    with pytest.raises(InputError) as info:
        build(spec)
    err = info.value
    assert err.field == field, str(err)
    if value is not None:
        assert err.value == value
    assert err.allowed and field in str(err)
    return err


@pytest.mark.parametrize("name", ["Mnist", "1mnist", "mnist-", "mn_ist", "", "a" * 64, "mnist.v2"])
def test_job_name_must_be_dns_1035(name: str) -> None:
    rejects(build_tf_job, tf(job_name=name), "job.name", name)


def test_one_job_name_limit_leaves_room_for_what_volcano_appends() -> None:
    """One limit, stated once, whatever the job's tasks and replicas: room for the longest
    `-<task>-<index>` (`-mpiworker-s9-99999`, a role split over tasks: volcano/slices.py) within a
    63-character hostname. A name at 63 used to be refused as `at most 54` (TF workers), 52 or
    51 (an evaluator, MPI) after the help's 63."""
    from volcano_pipelines.volcano.validate import MAX_JOB_NAME

    assert MAX_JOB_NAME == 63 - len("-mpiworker-s9-99999") == 44
    longest = "a" * MAX_JOB_NAME
    build_tf_job(tf(job_name=longest, worker=Role(replicas=100), evaluator=Role(replicas=1)))
    # Past one task's limit at this length (about 1,200 hosts) the role is split: every pod
    # name Volcano will make is still a hostname.
    for job in (build_tf_job(tf(job_name=longest, worker=Role(replicas=3000), chief=Role())),
                build_mpi_job(mpi(job=JobOptions(name=longest), worker=Role(replicas=3000)))):
        tasks = job["spec"]["tasks"]
        assert len(tasks) >= 4, [t["name"] for t in tasks]
        assert max(len(f"{longest}-{t['name']}-{t['replicas'] - 1}") for t in tasks) <= 63
    for length in (MAX_JOB_NAME + 1, 54, 63):
        for build, spec in ((build_tf_job, tf(job_name="a" * length)),
                            (build_tf_job, tf(job_name="a" * length, evaluator=Role(replicas=1))),
                            (build_mpi_job, mpi(job=JobOptions(name="a" * length)))):
            err = rejects(build, spec, "job.name", "a" * length)
            assert err.allowed.startswith("at most 44 characters of lowercase letters"), err.allowed
            assert "<name>-<task>-<index>, a hostname of at most 63" in err.allowed


@pytest.mark.parametrize("role", ["ps", "worker"])
@pytest.mark.parametrize("replicas", [0, -1])
def test_replicas_at_least_one(role: str, replicas: int) -> None:
    rejects(build_tf_job, tf(**{role: Role(replicas=replicas)}), f"{role}.replicas", replicas)


def test_single_chief_and_evaluator() -> None:
    rejects(build_tf_job, tf(chief=Role(replicas=2)), "chief.replicas", 2)
    rejects(build_tf_job, tf(evaluator=Role(replicas=3)), "evaluator.replicas", 3)


def test_min_available_bounds() -> None:
    rejects(build_tf_job, tf(job_min_available=3), "job.min_available", 3)  # 1 ps + 1 worker
    rejects(build_tf_job, tf(job_min_available=0), "job.min_available", 0)
    assert build_tf_job(tf(job_min_available=2))["spec"]["minAvailable"] == 2


def test_min_available_must_hold_every_ps_and_chief_plus_one_worker() -> None:
    big = {"ps": Role(replicas=2), "worker": Role(replicas=5), "chief": Role()}
    err = rejects(build_tf_job, tf(job_min_available=3, **big), "job.min_available", 3)
    assert "between 4" in err.allowed
    build_tf_job(tf(job_min_available=4, **big))
    rejects(build_mpi_job, mpi(job=JobOptions(name="h", min_available=1)), "job.min_available", 1)


@pytest.mark.parametrize("value", [0, -1])
def test_max_retry_at_least_one(value: int) -> None:
    # Volcano's webhook turns 0 into 3; clusters without it would fail at once: refuse both.
    err = rejects(build_tf_job, tf(job_max_retry=value), "job.max_retry", value)
    assert "restart on pod failure" in err.allowed


def test_ttl_non_negative() -> None:
    rejects(build_tf_job, tf(job_ttl=-5), "job.ttl", -5)


@pytest.mark.parametrize("cpu", ["2x", "-1", "one", "1.2.3", ""])
def test_cpu_quantity(cpu: str) -> None:
    rejects(build_tf_job, tf(worker=Role(resources=Resources(cpu=cpu))), "worker.resources.cpu", cpu)


@pytest.mark.parametrize("memory", ["4GB", "4 Gi", "Gi"])
def test_memory_quantity(memory: str) -> None:
    rejects(build_tf_job, tf(ps=Role(resources=Resources(memory=memory))), "ps.resources.memory", memory)


@pytest.mark.parametrize("quantity", ["500m", "2", "1.5", "4Gi", "512Mi", "1e3", "0.5", "100k"])
def test_valid_quantities(quantity: str) -> None:
    build_tf_job(tf(worker=Role(resources=Resources(cpu=quantity, memory=quantity))))


def test_gpu_non_negative_integer() -> None:
    rejects(build_tf_job, tf(worker=Role(resources=Resources(gpu=-1))), "worker.resources.gpu", -1)


@pytest.mark.parametrize("url", ["ftp://h/x", "files.example/mnist/", "http://", "http://h/a b", "file:///etc/passwd"])
def test_code_url_http(url: str) -> None:
    rejects(build_tf_job, tf(code=CodeSource(url=url)), "code.url", url)


@pytest.mark.parametrize("digest", ["abc", "g" * 64, "a" * 63])
def test_sha256_hex(digest: str) -> None:
    rejects(build_tf_job, tf(code=CodeSource(url="http://h/c.tgz", sha256=digest)), "code.sha256", digest)


def test_sha256_needs_a_file_url() -> None:
    rejects(build_tf_job, tf(code=CodeSource(url="http://h/dir/", sha256="a" * 64)), "code.sha256")
    rejects(build_tf_job, tf(code=CodeSource(path="/code", sha256="a" * 64)), "code.sha256")


def test_code_url_or_path_not_both_and_pvc_needs_path() -> None:
    rejects(build_tf_job, tf(code=CodeSource(url="http://h/x/", path="/code")), "code.url")
    rejects(build_tf_job, tf(code=CodeSource(pvc="code")), "code.pvc", "code")
    rejects(build_tf_job, tf(code=CodeSource(path="relative/dir")), "code.path")


@pytest.mark.parametrize("entry", ["/abs/run.sh", "../run.sh", "a/../../b", ""])
def test_entry_relative(entry: str) -> None:
    rejects(build_tf_job, tf(code=CodeSource(entry=entry)), "code.entry", entry)


def test_storage_rules() -> None:
    rejects(build_tf_job, tf(storage=Storage(data_pvc="Data_PVC")), "storage.data_pvc", "Data_PVC")
    rejects(build_tf_job, tf(storage=Storage(log_dir="logs")), "storage.log_dir", "logs")
    rejects(build_tf_job, tf(storage=Storage(data_dir="/")), "storage.data_dir", "/")
    rejects(build_tf_job, tf(storage=Storage(data_dir="/x", log_dir="/x/")), "storage.log_dir")
    rejects(build_tf_job, tf(storage=Storage(log_dir="/vpipe/logs")), "storage.log_dir")
    rejects(build_tf_job, tf(storage=Storage(data_dir="/etc/volcano")), "storage.data_dir")
    for subpath in ("/abs", "a/../b", "..", ""):
        rejects(build_tf_job, tf(storage=Storage(data_pvc="d", data_subpath=subpath)), "storage.data_subpath", subpath)
    rejects(build_tf_job, tf(storage=Storage(data_subpath="mnist")), "storage.data_subpath", "mnist")


@pytest.mark.parametrize("name", ["TF_CONFIG", "VK_TASK_INDEX", "VPIPE_ROLE"])
def test_reserved_env(name: str) -> None:
    rejects(build_tf_job, tf(worker=Role(env={name: "x"})), "worker.env name", name)


@pytest.mark.parametrize("name", ["1A", "A=B", "", "A B"])
def test_env_names(name: str) -> None:
    rejects(build_tf_job, tf(ps=Role(env={name: "x"})), "ps.env name", name)


def test_nul_cannot_reach_a_process() -> None:
    rejects(build_tf_job, tf(args=("ok", "bad\x00")), "args[1]", "bad\x00")
    rejects(build_tf_job, tf(worker=Role(env={"A": "x\x00"})), "worker.env[A]")


def test_labels_and_selectors() -> None:
    rejects(build_tf_job, tf(job_labels={"bad key!": "v"}), "job.labels['bad key!']")
    rejects(build_tf_job, tf(job_labels={"k": "v" * 64}), "job.labels['k']")
    rejects(build_tf_job, tf(worker=Role(node_selector={"k": "bad value"})), "worker.node_selector['k']")
    build_tf_job(tf(job_labels={"example.com/team": "ml-1", "empty": ""}))


def test_tolerations() -> None:
    rejects(build_tf_job, tf(worker=Role(tolerations=({"key": "a", "operator": "Maybe"},))), "worker.tolerations[0].operator")
    rejects(build_tf_job, tf(worker=Role(tolerations=({"key": "a", "effect": "Never"},))), "worker.tolerations[0].effect")
    rejects(build_tf_job, tf(worker=Role(tolerations=({"kee": "a"},))), "worker.tolerations[0]")


@pytest.mark.parametrize("image", ["", "repo/img:1 ; rm", "a\nb"])
def test_image_reference(image: str) -> None:
    rejects(build_tf_job, tf(job_image=image), "job.image", image)


def test_misc_names() -> None:
    rejects(build_tf_job, tf(job_namespace="Team"), "job.namespace", "Team")
    rejects(build_tf_job, tf(job_queue="Q"), "job.queue", "Q")
    rejects(build_tf_job, tf(job_priority_class="High"), "job.priority_class", "High")
    rejects(build_tf_job, tf(job_image_pull_secrets=("ok", "Bad")), "job.image_pull_secrets[1]", "Bad")
    rejects(build_tf_job, tf(job_service_account="SA"), "job.service_account", "SA")
    rejects(build_tf_job, tf(job_run_id="run id with spaces"), "job.run_id")
    rejects(build_tf_job, tf(port=0), "port", 0)
    rejects(build_tf_job, tf(port=70000), "port", 70000)


def mpi(**overrides: Any) -> MPIJobSpec:
    base: dict[str, Any] = {"job": JobOptions(name="hello"), "command": ("hello",)}
    base.update(overrides)
    return MPIJobSpec(**base)


def test_mpi_rules() -> None:
    rejects(build_mpi_job, mpi(command=()), "command")
    rejects(build_mpi_job, mpi(worker=Role(replicas=0)), "mpiworker.replicas", 0)
    rejects(build_mpi_job, mpi(master=Role(replicas=2)), "mpimaster.replicas", 2)
    rejects(build_mpi_job, mpi(slots_per_worker=0), "slots_per_worker", 0)
    rejects(build_mpi_job, mpi(command=("a", "b\x00")), "command[1]")
    rejects(build_mpi_job, mpi(job=JobOptions(name="h" * 51), worker=Role(replicas=100)), "job.name")


def test_error_message_is_one_line_with_field_value_allowed() -> None:
    err = rejects(build_tf_job, tf(worker=Role(replicas=0)), "worker.replicas", 0)
    assert str(err) == "invalid worker.replicas=0: an integer >= 1"
