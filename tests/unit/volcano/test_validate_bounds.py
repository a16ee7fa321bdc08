"""Validation hardening: whole-value matching (no trailing newline slips through), bounds on
replicas and sizes, tolerations, resource quantities, job references."""

from __future__ import annotations

import errno
import json
import logging
import os
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from volcano_pipelines.errors import InputError
from volcano_pipelines.volcano.mpi import build_mpi_job
from volcano_pipelines.volcano.spec import CodeSource, JobOptions, MPIJobSpec, Resources, Role, Storage, TFJobSpec
from volcano_pipelines.volcano.tf import build_tf_job
from volcano_pipelines.objects.validate import (
    MAX_ANNOTATIONS_BYTES,
    MAX_EXEC_STRING,
    MAX_MANIFEST_BYTES,
    check_manifest_size,
    check_tolerations,
    parse_toleration,
)
from volcano_pipelines.volcano.validate import check_job_ref, validate_mpi, validate_tf

LOGGER = "volcano_pipelines.objects.validate"


def tf(**overrides: Any) -> TFJobSpec:
    job_fields = {k[4:]: overrides.pop(k) for k in list(overrides) if k.startswith("job_")}
    base: dict[str, Any] = {"job": JobOptions(**{"name": "mnist", **job_fields})}
    base.update(overrides)
    return TFJobSpec(**base)


def mpi(**overrides: Any) -> MPIJobSpec:
    base: dict[str, Any] = {"job": JobOptions(name="hello"), "command": ("hello",)}
    base.update(overrides)
    return MPIJobSpec(**base)


def error_of(call: Callable[[], Any]) -> InputError:
    with pytest.raises(InputError) as info:
        call()
    assert info.value.allowed
    return info.value


# Item 8: every validated name-like field, matched as a whole.


@dataclass(frozen=True)
class Field:
    """A validated field: a valid value for it, and how to make a spec (or call) with a value."""

    valid: str
    use: Callable[[str], Callable[[], Any]]
    field: Callable[[str], str]


def build(make: Callable[[str], TFJobSpec]) -> Callable[[str], Callable[[], Any]]:
    return lambda value: lambda: build_tf_job(make(value))


def named(name: str) -> Callable[[str], str]:
    return lambda value: name


def keyed(prefix: str) -> Callable[[str], str]:
    return lambda value: f"{prefix}[{value!r}]"


def worker(**role: Any) -> TFJobSpec:
    return tf(worker=Role(**role))


FIELDS: dict[str, Field] = {
    "job.name": Field("mnist", build(lambda v: tf(job_name=v)), named("job.name")),
    "job.namespace": Field("team-a", build(lambda v: tf(job_namespace=v)), named("job.namespace")),
    "job.queue": Field("default", build(lambda v: tf(job_queue=v)), named("job.queue")),
    "job.priority_class": Field("high", build(lambda v: tf(job_priority_class=v)), named("job.priority_class")),
    "job.service_account": Field("trainer", build(lambda v: tf(job_service_account=v)), named("job.service_account")),
    "job.image_pull_secrets": Field("regcred", build(lambda v: tf(job_image_pull_secrets=("ok", v))),
                                    named("job.image_pull_secrets[1]")),
    "job.run_id": Field("run-1", build(lambda v: tf(job_run_id=v)), named("job.run_id")),
    "job.image": Field("registry.example:5000/tf:2.16", build(lambda v: tf(job_image=v)), named("job.image")),
    "job.labels key": Field("example.com/team", build(lambda v: tf(job_labels={v: "ml"})), keyed("job.labels")),
    "job.labels value": Field("ml", build(lambda v: tf(job_labels={"team": v})), named("job.labels['team']")),
    "worker.image": Field("tf:2", build(lambda v: worker(image=v)), named("worker.image")),
    "worker.resources.cpu": Field("500m", build(lambda v: worker(resources=Resources(cpu=v))),
                                  named("worker.resources.cpu")),
    "worker.resources.memory": Field("4Gi", build(lambda v: worker(resources=Resources(memory=v))),
                                     named("worker.resources.memory")),
    "worker.env name": Field("FOO", build(lambda v: worker(env={v: "v"})), named("worker.env name")),
    "worker.node_selector key": Field("gpu", build(lambda v: worker(node_selector={v: "v100"})),
                                      keyed("worker.node_selector")),
    "worker.node_selector value": Field("v100", build(lambda v: worker(node_selector={"gpu": v})),
                                        named("worker.node_selector['gpu']")),
    "worker.labels key": Field("app", build(lambda v: worker(labels={v: "x"})), keyed("worker.labels")),
    "worker.labels value": Field("x", build(lambda v: worker(labels={"app": v})), named("worker.labels['app']")),
    "worker.annotations key": Field("note", build(lambda v: worker(annotations={v: "any text"})),
                                    keyed("worker.annotations")),
    "worker.tolerations key": Field("gpu", build(lambda v: worker(tolerations=({"key": v, "operator": "Exists"},))),
                                    named("worker.tolerations[0].key")),
    "worker.tolerations value": Field("true", build(lambda v: worker(tolerations=({"key": "gpu", "value": v},))),
                                      named("worker.tolerations[0].value")),
    "worker.tolerations effect": Field("NoSchedule", build(lambda v: worker(tolerations=({"key": "g", "effect": v},))),
                                       named("worker.tolerations[0].effect")),
    "worker.tolerations operator": Field("Exists", build(lambda v: worker(tolerations=({"key": "g", "operator": v},))),
                                         named("worker.tolerations[0].operator")),
    "code.url": Field("http://files.example/code.tgz", build(lambda v: tf(code=CodeSource(url=v))), named("code.url")),
    "code.sha256": Field("a" * 64, build(lambda v: tf(code=CodeSource(url="http://h/c.tgz", sha256=v))),
                         named("code.sha256")),
    "code.pvc": Field("code", build(lambda v: tf(code=CodeSource(path="/code", pvc=v))), named("code.pvc")),
    "storage.data_pvc": Field("data", build(lambda v: tf(storage=Storage(data_pvc=v))), named("storage.data_pvc")),
    "storage.log_pvc": Field("logs", build(lambda v: tf(storage=Storage(log_pvc=v))), named("storage.log_pvc")),
    "toleration": Field("gpu=true:NoSchedule", lambda v: lambda: parse_toleration(v), named("toleration")),
    "namespace": Field("default", lambda v: lambda: check_job_ref(v, "mnist"), named("namespace")),
    "job": Field("mnist", lambda v: lambda: check_job_ref("default", v), named("job")),
}
# Not in FIELDS on purpose: values that reach the process verbatim (args, env values,
# annotation values, data / log / code paths, the entry point, MPI command) may hold any
# text but NUL; test_entrypoint.py::test_user_strings_arrive_verbatim covers them.


@pytest.mark.parametrize("name", sorted(FIELDS))
def test_every_field_accepts_its_valid_value(name: str) -> None:
    spec = FIELDS[name]
    spec.use(spec.valid)()


@pytest.mark.parametrize("name", sorted(FIELDS))
def test_trailing_newline_is_refused(name: str) -> None:
    # The reproducer: `--name $'j\n'` rendered `name: "j\n"` with exit 0.
    spec = FIELDS[name]
    value = spec.valid + "\n"
    err = error_of(spec.use(value))
    assert (err.field, err.value) == (spec.field(value), value)


# Whitespace, control and format characters: none belongs in a name, a label, a quantity, ...
blank_or_control = st.text(st.characters(categories=("Cc", "Cf", "Zs", "Zl", "Zp")), min_size=1, max_size=3)


@settings(max_examples=300, deadline=None)
@given(name=st.sampled_from(sorted(FIELDS)), before=blank_or_control | st.just(""), after=blank_or_control | st.just(""))
def test_whitespace_or_control_characters_around_any_field_are_refused(name: str, before: str, after: str) -> None:
    if not before and not after:
        after = "\n"
    spec = FIELDS[name]
    value = before + spec.valid + after
    err = error_of(spec.use(value))
    assert err.field == spec.field(value), f"{name}: {err}"


@pytest.mark.parametrize("image", ["tensorflow/tensorflow:2.16.1", "registry.example.com:5000/team/img:v1", "localhost/x",
                                   "[::1]:5000/x:1", "img@sha256:" + "a" * 64, "my_org/my-img__x:1.0-rc_1", "gpu:1"])
def test_image_references(image: str) -> None:
    build_tf_job(tf(job_image=image))


@pytest.mark.parametrize("image", ["img\x7f", "img:", ":tag", "img:tag:more", "/img", "img/", "img@sha256:abc",
                                   "UPPER/Case:1/x", "a" * 256, "img:" + "t" * 129])
def test_bad_image_references(image: str) -> None:
    err = error_of(lambda: build_tf_job(tf(job_image=image)))
    assert err.field == "job.image"


# Item 9: bounds on replicas, sizes, and the rendered manifest.


# The svc plugin's limits and the slices past them: tests/unit/volcano/test_slices.py.


def test_absurd_replicas_are_refused_by_validation_before_anything_is_built() -> None:
    # `--workers 99999999999999999999999` ate memory until killed: the builder allocates per replica.
    err = error_of(lambda: validate_tf(tf(worker=Role(replicas=10**23))))
    assert (err.field, err.value) == ("worker.replicas", 10**23)
    err = error_of(lambda: validate_mpi(mpi(worker=Role(replicas=10**23))))
    assert err.field == "mpiworker.replicas"


def test_the_job_does_not_grow_with_the_replicas() -> None:
    """No host list in the job: 1,000 PS + 3,800 workers render to the bytes of 1 + 1 (give or
    take the digits of the counts), far under the API server's limit."""
    def size(ps: int, workers: int) -> int:
        job = build_tf_job(tf(job_name="trainjob01", ps=Role(replicas=ps), worker=Role(replicas=workers), chief=Role()))
        return len(json.dumps(job, separators=(",", ":")))

    small, large = size(1, 1), size(1000, 3800)
    assert large - small < 100 and large < 200_000, (small, large)


@pytest.mark.skipif(os.sysconf("SC_PAGE_SIZE") != 4096, reason="MAX_ARG_STRLEN is 32 pages: 128 KiB with 4 KiB pages")
def test_exec_string_limit_is_the_kernels() -> None:
    """The bound is the real one: a NAME=value of exactly MAX_EXEC_STRING bytes (NUL included)
    starts a process, one byte more does not."""
    fits = "V" * (MAX_EXEC_STRING - len("X=") - 1)
    assert subprocess.run(["/bin/true"], env={"X": fits}).returncode == 0
    with pytest.raises(OSError) as info:
        subprocess.run(["/bin/true"], env={"X": fits + "V"})
    assert info.value.errno == errno.E2BIG


def test_env_values_and_args_fit_the_exec_limit() -> None:
    fits = "v" * (MAX_EXEC_STRING - len("BIG=") - 1)
    build_tf_job(tf(worker=Role(env={"BIG": fits})))
    err = error_of(lambda: build_tf_job(tf(worker=Role(env={"BIG": fits + "v"}))))
    assert (err.field, err.value) == ("worker.env[BIG] size", MAX_EXEC_STRING + 1)
    err = error_of(lambda: build_tf_job(tf(args=("ok", "é" * (MAX_EXEC_STRING // 2)))))  # bytes, not characters
    assert err.field == "args[1] size"
    err = error_of(lambda: build_mpi_job(mpi(command=("prog", "x" * MAX_EXEC_STRING))))
    assert err.field == "command[1] size"
    err = error_of(lambda: build_mpi_job(mpi(mpiexec_args=("x" * MAX_EXEC_STRING,))))
    assert err.field == "mpiexec_args[0] size"


def test_annotations_are_bounded_per_object() -> None:
    # The reproducer: three 100 KB --pod-annotation values rendered 615 KB.
    big = {f"note-{i}": "x" * 100_000 for i in range(3)}
    err = error_of(lambda: build_tf_job(tf(worker=Role(annotations=big))))
    assert err.field == "worker.annotations size" and err.value > MAX_ANNOTATIONS_BYTES
    build_tf_job(tf(worker=Role(annotations={"note": "x" * (MAX_ANNOTATIONS_BYTES - len("note"))})))


def test_rendered_manifest_size_is_checked() -> None:
    # Each argument fits the exec limit; all of them, on ps and worker, do not fit the API server.
    args = tuple("a" * 100_000 for _ in range(6))
    err = error_of(lambda: build_tf_job(tf(args=args)))
    assert err.field == "manifest size" and err.value > MAX_MANIFEST_BYTES and "API server" in err.allowed
    err = error_of(lambda: build_mpi_job(mpi(command=("prog", *args[:3]), mpiexec_args=args[3:],
                                                 worker=Role(annotations={"n": "x" * 250_000}),
                                                 master=Role(annotations={"n": "x" * 250_000}))))
    assert err.field == "manifest size"


def test_check_manifest_size_pure() -> None:
    check_manifest_size({"metadata": {"name": "x"}, "spec": {"blob": "a" * (MAX_MANIFEST_BYTES - 100)}})
    err = error_of(lambda: check_manifest_size({"spec": {"blob": "é" * (MAX_MANIFEST_BYTES // 2)}}))
    assert err.field == "manifest size" and err.value > MAX_MANIFEST_BYTES


@pytest.mark.parametrize("slots", [0, 1025, 10**23])
def test_slots_per_worker_bounded(slots: int) -> None:
    err = error_of(lambda: build_mpi_job(mpi(slots_per_worker=slots)))
    assert (err.field, err.value) == ("slots_per_worker", slots)


# Item 11: tolerations.


@pytest.mark.parametrize(
    ("toleration", "field"),
    [
        ({"key": "bogus:k", "operator": "Equal", "value": "v", "effect": "NoExecute"}, "key"),
        ({"key": "a b", "operator": "Exists", "effect": "NoSchedule"}, "key"),
        ({"key": "$(id)", "operator": "Exists", "effect": "NoSchedule"}, "key"),
        ({"key": "/gpu", "operator": "Exists"}, "key"),
        ({"key": 7, "operator": "Exists"}, "key"),
        ({"key": "", "operator": "Equal", "value": "v"}, "key"),  # only Exists may match every key
        ({"key": "gpu", "value": "a b", "effect": "NoSchedule"}, "value"),
        ({"key": "gpu", "operator": "Exists", "value": "true"}, "value"),
        ({"key": "gpu", "operator": "Maybe"}, "operator"),
        ({"key": "gpu", "effect": "Never"}, "effect"),
        ({"key": "gpu", "effect": None}, "effect"),
        ({"key": "gpu", "effect": "NoSchedule", "tolerationSeconds": 60}, "tolerationSeconds"),
        ({"key": "gpu", "effect": "NoExecute", "tolerationSeconds": True}, "tolerationSeconds"),
    ],
)
def test_bad_tolerations(toleration: dict[str, Any], field: str) -> None:
    err = error_of(lambda: build_tf_job(tf(worker=Role(tolerations=({"key": "ok", "operator": "Exists"}, toleration)))))
    assert err.field == f"worker.tolerations[1].{field}"


def test_good_tolerations() -> None:
    good = (
        {"key": "example.com/gpu", "operator": "Equal", "value": "a100", "effect": "NoSchedule"},
        {"key": "dedicated", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
        {"key": "spot", "value": "", "effect": "PreferNoSchedule"},
        {"key": "gpu", "value": "true"},  # every effect
        {"operator": "Exists"},  # every taint
    )
    check_tolerations("worker.tolerations", good)
    job = build_tf_job(tf(worker=Role(tolerations=good)))
    worker_spec = next(t for t in job["spec"]["tasks"] if t["name"] == "worker")["template"]["spec"]
    assert worker_spec["tolerations"] == list(good)


@pytest.mark.parametrize(
    ("raw", "toleration"),
    [
        ("gpu=true:NoSchedule", {"key": "gpu", "operator": "Equal", "value": "true", "effect": "NoSchedule"}),
        ("dedicated:NoExecute", {"key": "dedicated", "operator": "Exists", "effect": "NoExecute"}),
        ("example.com/spot=:PreferNoSchedule",
         {"key": "example.com/spot", "operator": "Equal", "value": "", "effect": "PreferNoSchedule"}),
    ],
)
def test_parse_toleration(raw: str, toleration: dict[str, Any]) -> None:
    assert parse_toleration(raw) == toleration


@pytest.mark.parametrize("raw", ["bogus:k=v:NoExecute", "a b:NoSchedule", "$(id):NoSchedule", "justkey", "gpu=true",
                                 "gpu=true:Never", "=v:NoSchedule", ":NoSchedule", "gpu=a b:NoSchedule", "gpu=true:",
                                 "gpu=x=y:NoSchedule", "", "gpu:NoSchedule\n"])
def test_parse_toleration_refuses(raw: str) -> None:
    err = error_of(lambda: parse_toleration(raw))
    assert (err.field, err.value) == ("toleration", raw) and "KEY[=VALUE]:EFFECT" in err.allowed


# Item 12: resource quantities.


@pytest.mark.parametrize("quantity", ["", "0", "0m", "0.0", "+0", "0Gi", "0e3", ".0", "1e999999999999999999999"])
@pytest.mark.parametrize("resource", ["cpu", "memory"])
def test_empty_zero_or_unrepresentable_quantities_are_refused(resource: str, quantity: str) -> None:
    err = error_of(lambda: build_tf_job(tf(worker=Role(resources=Resources(**{resource: quantity})))))
    assert (err.field, err.value) == (f"worker.resources.{resource}", quantity)


@pytest.mark.parametrize(("resource", "quantity"), [("cpu", "1m"), ("cpu", "0.005"), ("cpu", "9m"), ("cpu", "100u"),
                                                    ("memory", "512"), ("memory", "16Mi"), ("memory", "1k"),
                                                    ("memory", "33554431")])
def test_tiny_quantities_warn(caplog: pytest.LogCaptureFixture, resource: str, quantity: str) -> None:
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        build_tf_job(tf(ps=Role(resources=Resources(**{resource: quantity}))))
    warnings = [r for r in caplog.records if r.name == LOGGER and r.levelno == logging.WARNING]
    assert len(warnings) == 1 and f"ps.resources.{resource}={quantity!r}" in warnings[0].getMessage()


@pytest.mark.parametrize(("resource", "quantity"), [("cpu", "10m"), ("cpu", "0.01"), ("cpu", "4"), ("memory", "32Mi"),
                                                    ("memory", "33554432"), ("memory", "1e9"), ("memory", "64M")])
def test_ordinary_quantities_do_not_warn(caplog: pytest.LogCaptureFixture, resource: str, quantity: str) -> None:
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        build_tf_job(tf(ps=Role(resources=Resources(**{resource: quantity}))))
    assert [r for r in caplog.records if r.name == LOGGER] == []


# Item 13: a job named by a user (`vpipe status NAME -n NAMESPACE`).


@pytest.mark.parametrize(("namespace", "name", "field"), [
    ("", "mnist", "namespace"), ("Team", "mnist", "namespace"), ("a/b", "mnist", "namespace"), ("a" * 64, "j", "namespace"),
    ("default", "", "job"), ("default", "a/b", "job"), ("default", "..", "job"), ("default", "j?watch=1", "job"),
    ("default", "Mnist", "job"), ("default", "j" * 64, "job"),
])
def test_check_job_ref_refuses(namespace: str, name: str, field: str) -> None:
    err = error_of(lambda: check_job_ref(namespace, name))
    assert (err.field, err.value) == (field, namespace if field == "namespace" else name)


@pytest.mark.parametrize(("namespace", "name"), [("default", "mnist"), ("kube-system", "0job"), ("team-a", "a" * 63)])
def test_check_job_ref_accepts(namespace: str, name: str) -> None:
    check_job_ref(namespace, name)


# Item 20 (validation side): credentials in a code URL work, and are stored in the Job.


def test_code_url_credentials_are_accepted_with_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        build_tf_job(tf(code=CodeSource(url="https://user:s3cret@files.example/code.tgz")))
    messages = [r.getMessage() for r in caplog.records if r.name == LOGGER]
    assert len(messages) == 1 and "code.url carries credentials" in messages[0] and "s3cret" not in messages[0]


@pytest.mark.parametrize("url", ["http://h:99999/x", "http://h:0/x", "http://h:port/x", "http://h/x\x7f", "http://h/\u00a0"])
def test_code_url_port_and_invisible_characters(url: str) -> None:
    err = error_of(lambda: build_tf_job(tf(code=CodeSource(url=url))))
    assert err.field == "code.url"


@pytest.mark.parametrize("url", ["http://[::1/x", "http://u:p@[zz]/x", "http://h]/x"])
def test_code_url_that_urllib_cannot_parse_is_an_input_error(url: str) -> None:
    err = error_of(lambda: build_tf_job(tf(code=CodeSource(url=url))))
    assert err.field == "code.url"


@pytest.mark.parametrize("url", ["http://ml:s3cret@h:99999/x", "http://ml:s3cret@[zz]/x", "ftp://ml:s3cret@h/x",
                                 "http://ml:s3cret@h/a b"])
def test_code_url_errors_do_not_show_the_password(url: str) -> None:
    err = error_of(lambda: build_tf_job(tf(code=CodeSource(url=url))))
    assert err.field == "code.url" and "s3cret" not in str(err) and "ml:***@" in str(err)
