"""The two renderings of each pipeline (steps/pipelines.py): the KFP IR a user uploads
(pipelines/*.yaml) and the Argo WorkflowTemplate (pipelines/argo/*.yaml) offer the same run
parameters with the same defaults, and the same steps in the same order. Read from the shipped
files (test_golden / `vpipe compile --check` keep them fresh), so a default changed on one side
only fails here."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from volcano_pipelines.steps import registry
from volcano_pipelines.interface.params import params
from volcano_pipelines.steps.pipelines import PIPELINES, RunInput, run_inputs, spelled
from volcano_pipelines.interface.spelling import flag_spec

ROOT = Path(__file__).resolve().parents[2]
# libyaml's safe loader where PyYAML has it: the same objects, a tenth of the pure-Python parser's CPU.
SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
# The run parameters Argo does not offer, each because the Argo front end fixes what it feeds
# (every other run input of steps/pipelines.py is an Argo parameter, named after the step
# parameter it feeds first: `spelled`).
ARGO_FIXES = {
    "namespace": "the train templates run the job in the workflow's namespace (its ServiceAccount's Role is namespaced)",
    "kubeconfig": "Argo's step pods always use their in-cluster identity",
    "on_failure": "feeds KFP's exit handler (finish_run); Argo's always deletes the run's jobs when the run did not "
                  "succeed",
}


def _kfp(kind: str) -> dict[str, Any]:
    ir = next(yaml.load_all((ROOT / "pipelines" / f"{PIPELINES[kind].name}.yaml").read_text(), Loader=SAFE_LOADER))
    out: dict[str, Any] = {}
    for name, spec in ir["root"]["inputDefinitions"]["parameters"].items():
        out[name] = spec.get("defaultValue") if spec.get("isOptional") else None
    return out


def _argo(kind: str) -> dict[str, Any]:
    template = yaml.load((ROOT / "pipelines" / "argo" / f"{PIPELINES[kind].name}.yaml").read_text(), Loader=SAFE_LOADER)
    return {p["name"]: p.get("value") for p in template["spec"]["arguments"]["parameters"]}


def _argo_names(item: RunInput, kind: str) -> list[str]:
    """The Argo parameters of a run input: the step parameter it feeds first, spelled as a run
    parameter and dashed; a per-task setting (one dict in KFP) is one parameter per task."""
    if item.switch:
        return [item.name.replace("_", "-")]
    step, param = item.feeds[0]
    name = spelled(step, param).replace("_", "-")
    if flag_spec(next(p for p in params(registry.step(step).function()) if p.name == param)).kind == "task_value":
        return [f"{task}-{name}" for task in registry.step(step).tasks]
    return [name]


def _as_argo_text(value: Any) -> str | None:
    """How Argo writes a KFP default: booleans lower case, whole numbers without '.0', an empty
    list or dict (KFP's "not set") as ''."""
    if value is None:
        return None
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, (list, dict)):
        return json.dumps(value) if value else ""
    return str(value)


@pytest.mark.parametrize("kind", list(PIPELINES))
def test_kfp_and_argo_offer_the_same_parameters_with_the_same_defaults(kind: str) -> None:
    kfp, argo = _kfp(kind), _argo(kind)
    inputs = run_inputs(kind)
    assert set(kfp) == {item.name for item in inputs}
    offered = {item.name: _argo_names(item, kind) for item in inputs if item.name not in ARGO_FIXES}
    missing = sorted(name for name, names in offered.items() if not set(names) <= set(argo))
    assert not missing, f"KFP parameters with no Argo counterpart: {missing}"
    # Argo offers none of what it fixes (on_failure feeds a step Argo does not run at all).
    fixed = [_input(inputs, name) for name in ARGO_FIXES if name != "on_failure"]
    assert not {name for item in fixed for name in _argo_names(item, kind)} & set(argo)
    disagree = {name: (kfp[name], [argo[n] for n in names]) for name, names in offered.items()
                if any(_as_argo_text(kfp[name]) != argo[n] for n in names)}
    assert not disagree, f"defaults that differ (KFP, Argo): {disagree}"


def _input(inputs: tuple[RunInput, ...], name: str) -> RunInput:
    return next(item for item in inputs if item.name == name)


@pytest.mark.parametrize("kind", list(PIPELINES))
def test_the_shared_cluster_defaults_hold_in_both(kind: str) -> None:
    """What steps/pipelines.py says a shared cluster needs, read back from each file."""
    kfp, argo = _kfp(kind), _argo(kind)
    for name, value in (("queue", "vpipe"), ("tensorboard_service_type", "ClusterIP"), ("data_pvc", "vpipe-data"),
                        ("log_pvc", "vpipe-logs"), ("timeout", 86400)):
        assert _as_argo_text(kfp[name]) == str(value), name
        (argo_name,) = _argo_names(_input(run_inputs(kind), name), kind)
        assert argo[argo_name] == str(value), name


@pytest.mark.parametrize("kind", list(PIPELINES))
def test_both_run_the_same_steps_in_the_same_order(kind: str) -> None:
    shape = PIPELINES[kind]
    template = yaml.load((ROOT / "pipelines" / "argo" / f"{shape.name}.yaml").read_text(), Loader=SAFE_LOADER)
    main = next(t for t in template["spec"]["templates"] if t["name"] == "main")
    argo_order = [task["templateRef"]["template"] for task in main["dag"]["tasks"]]
    assert argo_order == ["sync", shape.train.replace("_", "-"), *shape.after]
    ir = next(yaml.load_all((ROOT / "pipelines" / f"{shape.name}.yaml").read_text(), Loader=SAFE_LOADER))
    inner = ir["components"]["comp-exit-handler-1"]["dag"]["tasks"]

    def step_of(name: str) -> str:
        # A condition's group (serve under serve_model) stands for the one task inside it.
        if name.startswith("condition-"):
            (only,) = ir["components"][inner[name]["componentRef"]["name"]]["dag"]["tasks"]
            return str(only)
        return name

    # Follow the dependencies (order and data): each task waits for the one before it, and for
    # nothing that comes after it.
    after = {name: set(task.get("dependentTasks", [])) for name, task in inner.items()}
    order = [next(name for name, deps in after.items() if not deps)]
    while len(order) < len(after):
        (following,) = [name for name, deps in after.items()
                        if name not in order and order[-1] in deps and deps <= set(order)]
        order.append(following)
    assert [step_of(name) for name in order] == ["sync", shape.train.replace("_", "-"), *shape.after]


@pytest.mark.parametrize("kind", list(PIPELINES))
def test_a_run_cannot_stall_for_ever(kind: str) -> None:
    """Issue 28 item 6: every Argo pipeline and the nightly CronWorkflow have a workflow deadline
    (past it the exit handler still runs); KFP, which has no run deadline, bounds the sync step's
    pod (the training step has its timeout)."""
    from volcano_pipelines.steps.pipelines import DEADLINE_SECONDS, SYNC_DEADLINE_SECONDS

    template = yaml.load((ROOT / "pipelines" / "argo" / f"{PIPELINES[kind].name}.yaml").read_text(), Loader=SAFE_LOADER)
    assert template["spec"]["activeDeadlineSeconds"] == DEADLINE_SECONDS
    assert template["spec"]["onExit"] == "exit-handler"
    (cron,) = [d for d in yaml.load_all((ROOT / "pipelines" / "argo" / "nightly-retrain.yaml").read_text(), Loader=SAFE_LOADER) if d]
    assert 0 < cron["spec"]["workflowSpec"]["activeDeadlineSeconds"] < 24 * 3600  # ends before the next night
    docs = list(yaml.load_all((ROOT / "pipelines" / f"{PIPELINES[kind].name}.yaml").read_text(), Loader=SAFE_LOADER))
    executors = docs[1]["platforms"]["kubernetes"]["deploymentSpec"]["executors"]
    assert int(executors["exec-sync"]["activeDeadlineSeconds"]) == SYNC_DEADLINE_SECONDS
    assert _kfp(kind)["timeout"] == 86400
