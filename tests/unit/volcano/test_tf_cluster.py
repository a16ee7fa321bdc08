"""Each task's view of the TF cluster, built at container start by the entry point's own
script (volcano/tf_cluster.py CLUSTER_PY), run for real: what each role gets in TF_CONFIG and
the flags, at a few tasks and at the seed's size (1,000 parameter servers, 10,000 workers),
where every file it writes must still let a process start (Linux's 128 KiB per string)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from volcano_pipelines.objects.validate import MAX_EXEC_STRING
from volcano_pipelines.volcano.slices import plan_slices
from volcano_pipelines.volcano.tf_cluster import CLUSTER_PY


def view(tmp: Path, counts: dict[str, int], role: str, index: int, *, name: str = "trainjob01",
         port: int = 2222) -> dict[str, Any]:
    """Runs the script for one task over svc-plugin host files, one per Volcano task as the
    rendered job has them (a role past one task's limit is several: volcano/slices.py);
    returns what it wrote."""
    svc = tmp / "etc-volcano"
    svc.mkdir(exist_ok=True)
    for each, n in counts.items():
        for part in plan_slices(name, each, n):
            hosts = (f"{name}-{part.task}-{i}.{name}" for i in range(part.replicas))
            (svc / f"{part.task.replace('-', '_')}.host").write_text("\n".join(hosts))
    out = tmp / f"cluster-{role}-{index}"
    env = {"PATH": os.environ["PATH"], "VPIPE_CLUSTER_DIR": str(out), "VPIPE_ROLE": role,
           "VPIPE_TASK_INDEX": str(index), "VPIPE_TF_PORT": str(port), "VPIPE_SVC_DIR": str(svc),
           "VPIPE_TF_TASKS": ",".join(f"{t}={n}" for t, n in counts.items())}
    proc = subprocess.run([sys.executable, "-S", "-c", CLUSTER_PY], env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return {
        "tf_config": json.loads((out / "tf_config.json").read_text()),
        "cluster": json.loads((out / "cluster.json").read_text()),
        "ps_flag": (out / "ps_hosts.flag").read_text(),
        "worker_flag": (out / "worker_hosts.flag").read_text(),
        "dir": out,
    }


SMALL = {"chief": 1, "ps": 2, "worker": 3, "evaluator": 1}


def test_small_job_views_per_role(tmp_path: Path) -> None:
    ps = ["trainjob01-ps-0.trainjob01:2222", "trainjob01-ps-1.trainjob01:2222"]
    workers = [f"trainjob01-worker-{i}.trainjob01:2222" for i in range(3)]
    chief = ["trainjob01-chief-0.trainjob01:2222"]
    whole = {"chief": chief, "ps": ps, "worker": workers}
    got = view(tmp_path, SMALL, "chief", 0)
    assert got["tf_config"] == {"cluster": whole, "task": {"type": "chief", "index": 0}}
    assert got["cluster"] == whole  # the evaluator stays outside, as TensorFlow wants
    got = view(tmp_path, SMALL, "worker", 1)
    assert got["tf_config"]["cluster"] == {"chief": chief, "ps": ps, "worker": {"1": workers[1]}}
    assert (got["ps_flag"], got["worker_flag"]) == (",".join(ps), ",".join(workers))
    got = view(tmp_path, SMALL, "ps", 1)
    assert got["tf_config"] == {"cluster": {"chief": chief, "ps": {"1": ps[1]}}, "task": {"type": "ps", "index": 1}}
    got = view(tmp_path, SMALL, "evaluator", 0)
    assert got["tf_config"]["cluster"] == whole and got["tf_config"]["task"] == {"type": "evaluator", "index": 0}


def test_a_missing_or_short_host_file_stops_the_task_saying_why(tmp_path: Path) -> None:
    env = {"PATH": os.environ["PATH"], "VPIPE_CLUSTER_DIR": str(tmp_path / "out"), "VPIPE_ROLE": "worker",
           "VPIPE_TASK_INDEX": "0", "VPIPE_TF_PORT": "2222", "VPIPE_SVC_DIR": str(tmp_path), "VPIPE_TF_TASKS": "ps=2,worker=1"}
    proc = subprocess.run([sys.executable, "-S", "-c", CLUSTER_PY], env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0 and "cannot read the ps hosts that Volcano's svc plugin mounts" in proc.stderr
    (tmp_path / "ps.host").write_text("j-ps-0.j")
    (tmp_path / "worker.host").write_text("j-worker-0.j")
    proc = subprocess.run([sys.executable, "-S", "-c", CLUSTER_PY], env=env, capture_output=True, text=True, timeout=60)
    # Short of the count, it looks for the role's next task (ps-s1) before giving up.
    assert proc.returncode != 0 and "cannot read the ps hosts" in proc.stderr and "ps_s1.host" in proc.stderr
    (tmp_path / "ps.host").write_text("j-ps-0.j\nj-ps-1.j\nj-ps-2.j")
    proc = subprocess.run([sys.executable, "-S", "-c", CLUSTER_PY], env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0 and "3 ps hosts, expected 2" in proc.stderr


SEED = {"chief": 1, "ps": 1000, "worker": 10000}


@pytest.fixture(scope="module")
def seed_views(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    tmp = tmp_path_factory.mktemp("seed")
    return {role: view(tmp, SEED, role, index) for role, index in (("chief", 0), ("ps", 999), ("worker", 9999))}


@pytest.mark.skipif(os.sysconf("SC_PAGE_SIZE") != 4096, reason="MAX_ARG_STRLEN is 32 pages: 128 KiB with 4 KiB pages")
def test_at_the_seeds_size_every_role_starts_a_process(seed_views: dict[str, dict[str, Any]]) -> None:
    """What the entry point exports and passes (TF_CONFIG, --ps_hosts, --worker_hosts) starts a
    real process for each role: the kernel is the judge, not our arithmetic."""
    for role, got in seed_views.items():
        tf_config = json.dumps(got["tf_config"], separators=(",", ":"), sort_keys=True)
        argv = ["/bin/true", f"--ps_hosts={got['ps_flag']}", f"--worker_hosts={got['worker_flag']}"]
        assert subprocess.run(argv, env={"TF_CONFIG": tf_config}).returncode == 0, role
        assert len(f"TF_CONFIG={tf_config}".encode()) < MAX_EXEC_STRING


def test_at_the_seeds_size_each_role_gets_what_it_needs(seed_views: dict[str, dict[str, Any]]) -> None:
    chief, ps, worker = seed_views["chief"], seed_views["ps"], seed_views["worker"]
    # Every task's file holds the whole cluster; the coordinator reads it (vpipe_cluster).
    assert [len(chief["cluster"][t]) for t in ("chief", "ps", "worker")] == [1, 1000, 10000]
    # The chief's TF_CONFIG cannot hold 11,000 addresses: the chief and every parameter server.
    assert sorted(chief["tf_config"]["cluster"]) == ["chief", "ps"] and len(chief["tf_config"]["cluster"]["ps"]) == 1000
    # The workers are three Volcano tasks (worker, worker-s1, worker-s2), read in order: the
    # last worker is the last pod of the third.
    workers = chief["cluster"]["worker"]
    assert workers[0] == "trainjob01-worker-0.trainjob01:2222"
    assert workers[3334] == "trainjob01-worker-s1-0.trainjob01:2222"
    assert workers[9999] == "trainjob01-worker-s2-3332.trainjob01:2222"
    # A worker: every parameter server (TF1 device filters) and itself.
    assert worker["tf_config"]["cluster"]["worker"] == {"9999": workers[9999]}
    assert len(worker["tf_config"]["cluster"]["ps"]) == 1000
    assert ps["tf_config"]["cluster"]["ps"] == {"999": "trainjob01-ps-999.trainjob01:2222"}
    # 1,000 parameter servers fit one flag; 10,000 workers do not, and the flag names the file.
    assert worker["ps_flag"].count(",") == 999
    assert worker["worker_flag"] == "@" + str(worker["dir"] / "worker_hosts")
    assert len((worker["dir"] / "worker_hosts").read_text().split(",")) == 10000


def test_the_resolver_module_reads_the_file_and_a_flag_naming_it(seed_views: dict[str, dict[str, Any]]) -> None:
    worker = seed_views["worker"]
    code = ("import vpipe_cluster, sys; c = vpipe_cluster.cluster(); "
            "h = vpipe_cluster.hosts(sys.argv[1]); print(len(c['worker']), len(h), h[-1])")
    env = {"PATH": os.environ["PATH"], "PYTHONPATH": str(worker["dir"]),
           "VPIPE_CLUSTER_FILE": str(worker["dir"] / "cluster.json")}
    proc = subprocess.run([sys.executable, "-S", "-c", code, worker["worker_flag"]], env=env, capture_output=True,
                          text=True, timeout=60)
    assert proc.stdout.split() == ["10000", "10000", "trainjob01-worker-s2-3332.trainjob01:2222"], proc.stderr
