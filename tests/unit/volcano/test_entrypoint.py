"""The generated container command, executed for real under bash: code fetched from a local
HTTP server, the entry point run with the contract's arguments, and arbitrary user strings
(args, env values, paths) arriving verbatim. No container runtime: same argv, same env."""

from __future__ import annotations

import hashlib
import json
import socket
import subprocess
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from tests.helpers.entrypoint import container_process, received, run_container, svc_hosts, tf_job
from tests.helpers.http_server import Seen, basic, serve
from volcano_pipelines.volcano.mpi import build_mpi_job
from volcano_pipelines.volcano.slices import most_replicas
from volcano_pipelines.volcano.spec import CodeSource, JobOptions, MPIJobSpec, Role, Storage


def contract_argv(role: str, index: int, shard: int, job: dict, data_dir: str = "/data", log_dir: str = "/logs") -> list[str]:
    env = {e["name"]: e["value"] for e in job["spec"]["tasks"][0]["template"]["spec"]["containers"][0]["env"]}
    ps_hosts, worker_hosts = (",".join(f"{h}:{env['VPIPE_TF_PORT']}" for h in svc_hosts(job, t)) for t in ("ps", "worker"))
    return [
        f"--job_name={role}", f"--task_index={index}", f"--ps_hosts={ps_hosts}",
        f"--worker_hosts={worker_hosts}", f"--data_dir={data_dir}", f"--log_dir={log_dir}",
        f"--shard_index={shard}", f"--num_shards={env['VPIPE_NUM_SHARDS']}",
    ]


def test_worker_gets_contract_args_tf_config_and_fetched_directory(file_server: tuple[str, Path], tmp_path: Path) -> None:
    base, _ = file_server
    job = tf_job(base, args=("--epochs=3",))
    proc = run_container(job, "worker", tmp_path, task_index=2)
    assert proc.returncode == 0, proc.stderr.decode()
    got = received(tmp_path)
    assert got["argv"] == contract_argv("worker", 2, 2, job) + ["--epochs=3"]
    assert got["cwd"] == str(tmp_path / "code")
    assert (tmp_path / "code" / "lib" / "model.py").read_text() == "MODEL = 1\n"  # recursive directory fetch
    tf_config = json.loads(got["env"]["TF_CONFIG"])
    assert tf_config["task"] == {"type": "worker", "index": 2}
    # A worker's view: every parameter server and itself only (a sparse job).
    assert tf_config["cluster"] == {"ps": ["mnist-ps-0.mnist:2222", "mnist-ps-1.mnist:2222"],
                                    "worker": {"2": "mnist-worker-2.mnist:2222"}}
    whole = json.loads(Path(got["env"]["VPIPE_CLUSTER_FILE"]).read_text())
    assert whole == {"ps": ["mnist-ps-0.mnist:2222", "mnist-ps-1.mnist:2222"],
                     "worker": [f"mnist-worker-{i}.mnist:2222" for i in range(3)]}
    assert "VPIPE_ENTRY_SCRIPT" not in got["env"]  # the entry script's text is not the user's


def test_ps_in_the_pod_shows_one_short_line_while_the_code_is_fetched(tmp_path: Path) -> None:
    """Issue 42, item 17: `ps` showed the 150-line entry script as every task's command while
    it fetched the code. A server that accepts and never answers keeps the fetch going while
    the container's command line is read."""
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        job = tf_job(f"http://127.0.0.1:{silent.getsockname()[1]}/mnist/", args=("--epochs=3",))
        argv, env = container_process(job, "worker", tmp_path, task_index=1)
        proc = subprocess.Popen(argv, env=env, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            silent.settimeout(30)
            connection, _ = silent.accept()  # the fetch has begun: the script is running
            shown = Path(f"/proc/{proc.pid}/cmdline").read_bytes().split(b"\0")[:-1]
            connection.close()
        finally:
            proc.kill()
            proc.wait()
    line = b" ".join(shown).decode()
    assert b"\n" not in b"".join(shown) and len(line) < 160, line
    assert shown[:2] == [b"bash", b"-c"] and shown[3:] == [b"vpipe-entry", b"--epochs=3"]


def test_a_worker_of_a_later_task_of_its_role_is_numbered_from_the_tasks_offset(
        file_server: tuple[str, Path], tmp_path: Path) -> None:
    """Workers past one Volcano task's limit are several tasks (volcano/slices.py): pod 5 of
    `worker-s1` is worker offset + 5 in its flags, its TF_CONFIG and its data shard, and its
    address is that pod's."""
    base, _ = file_server
    workers = most_replicas("mnist", "worker") + 1
    job = tf_job(base, worker=Role(replicas=workers), chief=Role())
    [offset] = [int(e["value"]) for t in job["spec"]["tasks"] if t["name"] == "worker-s1"
                for e in t["template"]["spec"]["containers"][0]["env"] if e["name"] == "VPIPE_TASK_OFFSET"]
    assert offset == (workers + 1) // 2
    proc = run_container(job, "worker-s1", tmp_path, task_index=5)
    assert proc.returncode == 0, proc.stderr.decode()
    got = received(tmp_path)
    index = offset + 5
    assert f"--task_index={index}" in got["argv"] and f"--shard_index={index}" in got["argv"]
    tf_config = json.loads(got["env"]["TF_CONFIG"])
    assert tf_config["task"] == {"type": "worker", "index": index}
    assert tf_config["cluster"]["worker"] == {str(index): "mnist-worker-s1-5.mnist:2222"}
    whole = json.loads(Path(got["env"]["VPIPE_CLUSTER_FILE"]).read_text())
    assert len(whole["worker"]) == workers and whole["worker"][offset - 1] == f"mnist-worker-{offset - 1}.mnist:2222"


def test_ps_shard_zero_and_evaluator_outside_cluster(file_server: tuple[str, Path], tmp_path: Path) -> None:
    base, _ = file_server
    job = tf_job(base, evaluator=Role())
    proc = run_container(job, "ps", tmp_path, task_index=1)
    assert proc.returncode == 0, proc.stderr.decode()
    assert received(tmp_path)["argv"] == contract_argv("ps", 1, 0, job)
    proc = run_container(job, "evaluator", tmp_path, task_index=0)
    assert proc.returncode == 0, proc.stderr.decode()
    tf_config = json.loads(received(tmp_path)["env"]["TF_CONFIG"])
    assert tf_config["task"] == {"type": "evaluator", "index": 0}
    assert "evaluator" not in tf_config["cluster"] and len(tf_config["cluster"]["worker"]) == 3


def test_archive_with_matching_sha256(file_server: tuple[str, Path], tmp_path: Path) -> None:
    base, root = file_server
    digest = hashlib.sha256((root / "code.tgz").read_bytes()).hexdigest()
    job = tf_job(base, code=CodeSource(url=f"{base}/code.tgz", sha256=digest))
    proc = run_container(job, "worker", tmp_path)
    assert proc.returncode == 0, proc.stderr.decode()
    assert received(tmp_path)["argv"][0] == "--job_name=worker"


def test_sha256_mismatch_stops_before_running(file_server: tuple[str, Path], tmp_path: Path) -> None:
    base, _ = file_server
    job = tf_job(base, code=CodeSource(url=f"{base}/code.tgz", sha256="0" * 64))
    proc = run_container(job, "worker", tmp_path)
    assert proc.returncode != 0
    assert b"sha256" in proc.stderr and b"expected " + b"0" * 64 in proc.stderr
    assert not (tmp_path / "out.json").exists()


def test_archive_escaping_the_code_dir_is_refused(file_server: tuple[str, Path], tmp_path: Path) -> None:
    base, _ = file_server
    proc = run_container(tf_job(base, code=CodeSource(url=f"{base}/evil.tgz")), "worker", tmp_path)
    assert proc.returncode != 0 and b"refusing" in proc.stderr
    assert not (tmp_path / "escaped.sh").exists()


def test_download_failure_names_the_url_without_credentials(file_server: tuple[str, Path], tmp_path: Path) -> None:
    _, root = file_server
    with serve(root) as server:
        url = server.base.replace("http://", "http://user:s3cret@") + "/missing.tgz?token=hidden"
        proc = run_container(tf_job(server.base, code=CodeSource(url=url)), "worker", tmp_path)
    assert proc.returncode != 0
    # It failed because the right server answered 404 (not because 'user:s3cret@127.0.0.1' was
    # looked up as a host name), once (a 404 is not retried), with the credentials as Basic auth.
    assert server.requests == [Seen("/missing.tgz?token=hidden", basic("user:s3cret"))]
    assert f"cannot download {server.base}/missing.tgz: HTTP Error 404".encode() in proc.stderr
    assert b"s3cret" not in proc.stderr and b"hidden" not in proc.stderr and b"user" not in proc.stderr
    assert not (tmp_path / "out.json").exists()


def test_missing_entry_point(file_server: tuple[str, Path], tmp_path: Path) -> None:
    base, _ = file_server
    proc = run_container(tf_job(base, code=CodeSource(url=f"{base}/mnist/", entry="train.sh")), "worker", tmp_path)
    assert proc.returncode == 66 and b"train.sh" in proc.stderr


def test_code_path_from_image(file_server: tuple[str, Path], tmp_path: Path) -> None:
    _, root = file_server
    job = tf_job("http://unused", code=CodeSource(path=str(root / "mnist")))
    proc = run_container(job, "worker", tmp_path)
    assert proc.returncode == 0, proc.stderr.decode()
    assert received(tmp_path)["cwd"] == str(root / "mnist")


def test_bad_task_index_is_refused(file_server: tuple[str, Path], tmp_path: Path) -> None:
    base, _ = file_server
    proc = run_container(tf_job(base), "worker", tmp_path, extra_env={"VK_TASK_INDEX": "1;id"})
    assert proc.returncode == 64 and not (tmp_path / "out.json").exists()


# Anything a process can receive: every character but NUL (and lone surrogates, which no
# encoding can carry).
any_text = st.text(st.characters(blacklist_characters="\x00", blacklist_categories=("Cs",)), max_size=40)
abs_path = any_text.map(lambda s: "/" + s).filter(
    lambda p: p.rstrip("/") != "" and ".." not in p.split("/")
    and not any(p == m or p.startswith(m + "/") for m in ("/vpipe", "/etc/volcano", "/root/.ssh"))
)


# Each example runs the entry point as a process (0.3-0.4 s): the strings a shell would mangle
# are always tried (quotes, expansions, globs, newlines, a leading dash, non-ASCII), and the
# random ones explore around them.
@settings(max_examples=16, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(args=st.lists(any_text, max_size=6), value=any_text, data_dir=abs_path, log_dir=abs_path)
@example(args=["$(id)", "`id`", "a b", "'\"", "*", "-n", "--", ""], value="${HOME}\n;|&<>",
         data_dir="/data dir/$x", log_dir="/logs/*?[a]")
@example(args=["\\", "\t\r\n", "ünïcödé ✓", "~", "!!", "#c"], value="", data_dir="/-d", log_dir="/l\nx")
def test_user_strings_arrive_verbatim(file_server: tuple[str, Path], tmp_path_factory: pytest.TempPathFactory,
                                      args: list[str], value: str, data_dir: str, log_dir: str) -> None:
    if data_dir.rstrip("/") == log_dir.rstrip("/"):
        log_dir = log_dir + "-logs"
    base, _ = file_server
    tmp = tmp_path_factory.mktemp("run")
    job = tf_job(base, args=tuple(args), worker=Role(replicas=3, env={"USER_VALUE": value}),
                 storage=Storage(data_dir=data_dir, log_dir=log_dir))
    proc = run_container(job, "worker", tmp, task_index=1)
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")
    got = received(tmp)
    assert got["argv"] == contract_argv("worker", 1, 1, job, data_dir, log_dir) + args
    assert got["env"]["USER_VALUE"] == value


def test_url_with_shell_metacharacters_is_only_a_url(file_server: tuple[str, Path], tmp_path: Path) -> None:
    base, _ = file_server
    marker = tmp_path / "pwned"
    job = tf_job(base, code=CodeSource(url=f"{base}/mnist/?x=$(touch%20{marker})`touch${{IFS}}{marker}`;touch${{IFS}}{marker}"))
    proc = run_container(job, "worker", tmp_path)
    assert proc.returncode == 0, proc.stderr.decode()
    assert not marker.exists()


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(program=st.lists(any_text, min_size=1, max_size=5), extra=st.lists(any_text, max_size=3))
def test_mpi_master_runs_mpiexec_verbatim(fake_mpiexec: Path, tmp_path_factory: pytest.TempPathFactory,
                                          program: list[str], extra: list[str]) -> None:
    tmp = tmp_path_factory.mktemp("mpi")
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    hostfile = tmp / "mpiworker.host"
    hostfile.write_text("127.0.0.1\n127.0.0.1\n")  # what Volcano's svc plugin writes: one host per line
    job = build_mpi_job(MPIJobSpec(job=JobOptions(name="hello"), command=tuple(program), worker=Role(replicas=2),
                                   slots_per_worker=3, mpiexec_args=tuple(extra)))
    try:
        proc = run_container(job, "mpimaster", tmp, path_prefix=str(fake_mpiexec), extra_env={
            "VPIPE_WORKER_HOSTFILE": str(hostfile), "VPIPE_SSH_PORT": str(listener.getsockname()[1]),
            "VPIPE_ENTRY": "unused"})
    finally:
        listener.close()
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")
    got = received(tmp)
    hostfile_arg = got["argv"][got["argv"].index("--hostfile") + 1]
    assert got["argv"] == ["--allow-run-as-root", "--hostfile", hostfile_arg, "-np", "6", *extra, *program]
    assert got["hostfile"] == "127.0.0.1 slots=3\n127.0.0.1 slots=3\n"
