"""The exit handler (`finish_run`) of both pipelines, in the compiled IR: it must act on the
job in the namespace the run form names, with the run's kubeconfig and on_failure, and the
run identity train used. A parameter left unwired compiles fine and only shows at run time
(the exit handler then looks for the job in the step pod's own namespace)."""

from __future__ import annotations

import pytest
import yaml

from tests.helpers.renders import kfp_pipeline
from volcano_pipelines.kfp import pipelines

# libyaml's safe loader where PyYAML has it: the same objects, a tenth of the pure-Python parser's CPU.
SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


@pytest.mark.parametrize("kind", pipelines.KINDS)
def test_finish_run_gets_the_runs_namespace_kubeconfig_and_on_failure(kind: str) -> None:
    spec = next(yaml.load_all(kfp_pipeline(kind), Loader=SAFE_LOADER))  # compile_text(train_and_serve(kind)), once per session
    finish = spec["root"]["dag"]["tasks"]["finish-run"]["inputs"]["parameters"]
    for name in ("namespace", "kubeconfig", "on_failure"):
        assert finish[name] == {"componentInputParameter": name}, (name, finish.get(name))
    train = next(t for n, t in _all_tasks(spec).items() if n.startswith("train-"))["inputs"]["parameters"]
    # The same namespace parameter reaches train (inside the exit handler's group).
    assert train["namespace"] == {"componentInputParameter": "pipelinechannel--namespace"}
    assert finish["run_id"] == train["run_id"]


def _all_tasks(spec: dict) -> dict:
    tasks = dict(spec["root"]["dag"]["tasks"])
    for component in spec["components"].values():
        tasks.update((component.get("dag") or {}).get("tasks") or {})
    return tasks
