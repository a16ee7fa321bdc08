"""Rendered YAML for representative jobs, compared with the committed files in tests/golden/.
A change to a builder shows up here as a readable diff; `VPIPE_UPDATE_GOLDEN=1` accepts it."""

from __future__ import annotations

from typing import Any

import pytest

from tests.golden_files import GOLDEN_DIR, check_golden
from volcano_pipelines.manifest import to_yaml
from volcano_pipelines.steps._train import render_mpi, render_tf

CASES: dict[str, Any] = {
    "tf-quickstart": lambda: render_tf("mnist", workers=10, code_url="http://files.example/mnist/", run_id="golden"),
    "tf-chief-evaluator-gpus-pvcs": lambda: render_tf(
        "resnet", namespace="ml", ps=2, workers=4, chief=True, evaluator=True, image="registry.example/tf:2.16",
        task_images={"worker": "registry.example/tf:2.16-gpu"}, gpus={"worker": 2, "chief": 1},
        cpu={"ps": "2", "worker": "8"}, memory={"": "8Gi", "ps": "16Gi"}, data_pvc="imagenet", log_pvc="runs",
        image_pull_secrets=["regcred"], service_account="trainer", queue="gpu", priority_class="high",
        min_available=6, max_retry=2, ttl=600, labels={"team": "vision"}, run_id="golden",
        code_url="https://files.example/resnet.tgz", code_sha256="a" * 64,
        env={"": {"LOG_LEVEL": "info"}, "worker": {"NCCL_DEBUG": "WARN"}},
        node_selector={"worker": {"gpu": "a100"}}, tolerations={"worker": ["nvidia.com/gpu=present:NoSchedule"]},
        pod_annotations={"": {"example.com/owner": "vision"}}, args=["--epochs", "90"],
    ),
    "tf-code-on-pvc-no-restart": lambda: render_tf(
        "between-graph", ps=1, workers=2, code_path="/code/mnist", code_pvc="code", entry="train.py",
        restart_on_failure=False, run_id="golden",
    ),
    "mpi": lambda: render_mpi(
        "allreduce", command=["python3", "allreduce.py", "--steps", "100"], workers=3, slots_per_worker=2,
        mpiexec_args=["-x", "OMP_NUM_THREADS=1"], code_url="http://files.example/mpi/", log_pvc="runs",
        run_id="golden",
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_rendered_job_matches_golden_file(case: str) -> None:
    check_golden(GOLDEN_DIR / f"{case}.yaml", to_yaml(CASES[case]()))
