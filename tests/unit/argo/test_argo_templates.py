"""The generated Argo YAML: fresh, derived from the step signatures, and runnable: each step's
container command is run here by a real `sh` with this checkout's `vpipe` (dry run, so no
cluster is needed) and must hand the step exactly what the Python API would get."""

from __future__ import annotations

import argparse

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.golden_files import check_golden
from tests.helpers.renders import rendered
from tests.unit.argo import local_run
from tests.unit.argo.local_run import REPO, load, template
from volcano_pipelines.volcano.stalls import with_stall_timeout
from volcano_pipelines.argo import compile as argo_compile
from volcano_pipelines.argo import pipelines as argo_pipelines
from volcano_pipelines.argo import templates
from volcano_pipelines.argo.inputs import FIXED_BY_POD, output_names
from volcano_pipelines.argo.outputs import output_files, termination_message
from volcano_pipelines.interface.params import params
from volcano_pipelines.steps.pipelines import LEFT_OUT, WIRING, shared_defaults
from volcano_pipelines.steps.registry import ARGO, steps_for
from volcano_pipelines.steps._results import TrainResult
from volcano_pipelines.errors import InputError
from volcano_pipelines.steps._train import render_mpi, render_tf, train_tf

ARTIFACTS = rendered(argo_compile.__name__)  # argo_compile.artifacts(), rendered once per session


@pytest.mark.parametrize("path", sorted(ARTIFACTS))
def test_committed_argo_yaml_is_fresh(path: str) -> None:
    check_golden(REPO / path, ARTIFACTS[path])


def test_artifacts_are_the_argo_files() -> None:
    # One WorkflowTemplate per Argo step of the registry, one per pipeline, the schedule and the
    # kustomization that lists the templates (not the schedule: it is applied on its own).
    steps = {item.template for item in steps_for(ARGO)}
    pipelines = {"train-and-serve", "train-and-serve-mpi"}
    assert set(ARTIFACTS) == {f"pipelines/argo/{n}.yaml" for n in steps | pipelines | {"nightly-retrain", "kustomization"}}
    kustomization = yaml.safe_load(ARTIFACTS["pipelines/argo/kustomization.yaml"])
    assert kustomization["resources"] == sorted(f"{n}.yaml" for n in steps | pipelines)


# --- parameters come from the step signatures -----------------------------------------------


def command_parser(words: tuple[str, ...]) -> argparse.ArgumentParser:
    """The `vpipe` parser of a (sub)command: the templates are built without it (from the step
    declarations), so checking them against it shows the two agree."""
    from volcano_pipelines.cli import build_parser

    parser = build_parser(words[0])
    for word in words:
        sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        parser = sub.choices[word]
    return parser


@pytest.mark.parametrize("name", sorted(templates.STEPS))
def test_every_flag_of_the_step_is_a_parameter_with_the_signature_default(name: str) -> None:
    spec = templates.STEPS[name]
    tmpl = template(load(f"{name}.yaml"))
    inputs = {p["name"]: p for p in tmpl["inputs"]["parameters"]}
    parser = command_parser(spec.words)
    step_params = {p.name: p for p in params(spec.step)}
    flags_in_args = set(tmpl["container"]["args"])
    for action in parser._actions:
        base = action.dest.split(":")[0]
        if base not in step_params or base in FIXED_BY_POD:
            continue
        if action.option_strings:
            flag = next(f for f in action.option_strings if f.startswith("--"))
            assert {flag, "?" + flag, "!" + flag, "*" + flag, "#" + flag} & flags_in_args, f"{flag} is not passed by {name}"
        if ":" in action.dest or base == "run_id" or base in dict(spec.fixed):
            continue
        param = step_params[base]
        argo_name = base.replace("_", "-")
        assert argo_name in inputs, f"{base} is not a parameter of {name}"
        if param.required or base in spec.required:
            assert "default" not in inputs[argo_name], argo_name
        elif isinstance(param.default, bool):
            assert inputs[argo_name]["default"] == str(param.default).lower()
            assert inputs[argo_name]["enum"] == ["true", "false"]
        elif param.default is None:
            assert inputs[argo_name]["default"] == ""
        elif argo_name in templates.TEMPLATE_DEFAULTS:
            assert inputs[argo_name]["default"] == templates.TEMPLATE_DEFAULTS[argo_name]
        elif isinstance(param.default, (int, float, str)):
            assert inputs[argo_name]["default"] == str(param.default)
        if param.help:
            assert inputs[argo_name]["description"].startswith(param.help.split(", e.g. {")[0])


def test_a_new_step_argument_becomes_a_parameter() -> None:
    """Nothing in argo/ lists parameters or reads the CLI: a parameter the step gains appears
    in the template, spelled as interface/spelling.py says `vpipe` spells it."""

    def sync(src: str, dst: str, *, max_age: str | None = None, fast: bool = False) -> Any:
        """Sync.

        Args:
            src: source
            dst: destination
            max_age: only files younger than this
            fast: go fast
        """

    spec = templates.StepSpec("sync", sync, ("sync",), positional=("src", "dst"))
    cmd = templates.command(spec)
    assert cmd.input("max-age").spec == "--max-age"
    assert cmd.input("max-age").description == "only files younger than this"
    assert cmd.input("max-age").default == ""
    assert cmd.input("fast").spec == "?--fast" and cmd.input("fast").enum == ("true", "false")
    assert cmd.input("src").spec == "."


def test_argo_does_not_read_the_cli() -> None:
    import ast

    for path in (Path(templates.__file__).parent).glob("*.py"):
        tree = ast.parse(path.read_text())
        imported = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module}
        assert not {m for m in imported if m.startswith("volcano_pipelines.cli")}, path
        assert "_actions" not in path.read_text(), path


@pytest.mark.parametrize("name", ["train-tf", "train-mpi"])
def test_where_the_step_runs_is_fixed_by_the_pod_and_the_run_id_is_the_workflow_uid(name: str) -> None:
    tmpl = template(load(f"{name}.yaml"))
    names = {p["name"] for p in tmpl["inputs"]["parameters"]}
    # Nothing only the local backend uses, nothing the workflow decides (its namespace, its uid).
    assert not names & {"kubeconfig", "context", "backend", "local-dir", "local-data-dir", "local-log-dir", "run-id",
                        "namespace", "owner", "on-pod-deleted"}
    args = tmpl["container"]["args"]
    assert args[args.index("--run-id") + 2] == "{{workflow.uid}}"
    assert args[args.index("--namespace") + 2] == "{{workflow.namespace}}"
    # The Workflow owns the job (deleting it deletes the job), and a lost step pod keeps it.
    assert args[args.index("--owner") + 2] == "argoproj.io/v1alpha1/Workflow/{{workflow.name}}/{{workflow.uid}}"
    assert args[args.index("--on-pod-deleted") + 2] == "keep"
    assert {"name": "VPIPE_POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}} in \
        tmpl["container"]["env"]


def test_the_owner_becomes_an_owner_reference_that_needs_no_finalizer_right() -> None:
    manifest = render_tf("mnist", owner="argoproj.io/v1alpha1/Workflow/train-x7k2p/5b0c-11ee-9f3a")
    assert manifest["metadata"]["ownerReferences"] == [{
        "apiVersion": "argoproj.io/v1alpha1", "kind": "Workflow", "name": "train-x7k2p", "uid": "5b0c-11ee-9f3a",
        "controller": False, "blockOwnerDeletion": False}]
    assert "ownerReferences" not in render_tf("mnist")["metadata"]
    for bad in ("Workflow/x/uid", "argoproj.io/v1alpha1/workflow/x/uid", "argoproj.io/v1alpha1/Workflow/X_Y/uid",
                "argoproj.io/v1alpha1/Workflow/x/"):
        with pytest.raises(InputError) as info:
            render_tf("mnist", owner=bad)
        assert info.value.field == "owner", bad


@pytest.mark.parametrize("name", ["train-tf", "train-mpi", "reap"])
def test_argo_deadline_comes_after_the_step_timeout(name: str) -> None:
    """The step aborts its job at --timeout; Argo's deadline (which kills the pod) is later.
    The expression never fails to resolve: a timeout that is not whole seconds gives the
    margin alone, and the step refuses the value (exit 2: test below)."""
    tmpl = template(load(f"{name}.yaml"))
    timeout = next(p for p in tmpl["inputs"]["parameters"] if p["name"] == "timeout")
    assert "default" not in timeout  # Argo needs a finite deadline
    margin = templates.DEADLINE_MARGIN_SECONDS
    assert tmpl["activeDeadlineSeconds"] == (
        "{{=inputs.parameters.timeout matches '^[0-9]+$' ? asInt(inputs.parameters.timeout) + " + f"{margin} : {margin}" + "}}")
    assert "#--timeout" in tmpl["container"]["args"]


@pytest.mark.parametrize("value", ["1.5", "1h", "-5", " 60"])
def test_a_timeout_that_is_not_whole_seconds_is_bad_input(tmp_path: Path, value: str) -> None:
    run = local_run.run(template(load("train-tf.yaml")), {"name": "mnist", "timeout": value, "dry-run": "true"},
                        tmp_path)
    assert run.returncode == 2, run.stderr
    assert f"invalid --timeout={value}: whole seconds" in run.stderr
    assert run.outputs["phase"] == ""


def test_retries_lost_pods_and_cluster_problems_only() -> None:
    for name in templates.STEPS:
        retry = template(load(f"{name}.yaml"))["retryStrategy"]
        # OnFailure never retries an Error node (a deleted or evicted pod): Always, narrowed by
        # the expression to Error nodes and exit code 3.
        assert retry["retryPolicy"] == "Always", name
        assert retry["expression"] == 'lastRetry.status == "Error" || asInt(lastRetry.exitCode) == 3', name


@pytest.mark.parametrize(("status", "exit_code", "retried"), [
    ("Error", "-1", True), ("Error", "0", True), ("Failed", "3", True), ("Failed", "1", False),
    ("Failed", "2", False), ("Failed", "137", False)])
def test_retry_expression_reads_as_argo_evaluates_it(status: str, exit_code: str, retried: bool) -> None:
    """The expression in Python's reading of expr-lang (`||` short-circuits, asInt = int):
    Argo's controller evaluates it with lastRetry.status and lastRetry.exitCode ("0" when the
    node has none), operator.go."""
    expression = templates.RETRY.expression
    assert expression is not None
    python = expression.replace("||", "or").replace("asInt", "int")
    assert eval(python, {"int": int, "lastRetry": type("L", (), {"status": status, "exitCode": exit_code})}) is retried


def test_outputs_are_the_scalar_fields_of_the_result() -> None:
    names = output_names(templates.STEPS["train-tf"].step)
    assert {"phase", "succeeded", "name", "namespace", "run-id", "duration-seconds", "retries"} <= set(names)
    assert not {"tasks", "failure", "missing", "manifest"} & set(names)
    assert {"ok", "copied", "failed", "bytes-copied"} <= set(output_names(templates.STEPS["sync"].step))
    tmpl = template(load("train-tf.yaml"))
    outputs = {p["name"]: p["valueFrom"]["path"] for p in tmpl["outputs"]["parameters"]}
    assert outputs["result"] == "/tmp/vpipe/result.json"
    assert outputs["phase"] == "/tmp/vpipe/outputs/phase"


def test_output_files() -> None:
    result = TrainResult("mnist", "ml", "r1", "Failed", False, tasks={"worker": {"failed": 1}},
                         failure={"pod": "mnist-worker-0"}, duration_seconds=12.5).to_dict()
    files = output_files(result)
    assert files["phase"] == "Failed" and files["succeeded"] == "false" and files["duration-seconds"] == "12.5"
    assert files["message"] == "" and "tasks" not in files and "failure" not in files


def test_the_training_figures_and_the_post_mortem_are_outputs_of_their_own() -> None:
    result = TrainResult("mnist", "ml", "r1", "Failed", False,
                         progress={"step": 2400, "total": 6000, "loss": 0.1512, "examples_per_second": 3556.6},
                         last_checkpoint={"step": 2000, "path": "/logs/ckpt-2000"},
                         post_mortem={"json": "/x/ml/mnist.json", "summary": "## Post-mortem\n| mnist-worker-0 | 3 |\n"}
                         ).to_dict()
    files = output_files(result)
    assert (files["final-step"], files["total-steps"], files["final-loss"], files["examples-per-second"],
            files["last-checkpoint-step"]) == ("2400", "6000", "0.1512", "3556.6", "2000")
    assert files["post-mortem"] == "## Post-mortem\n| mnist-worker-0 | 3 |\n"
    # A job that reported nothing and has no record: the outputs exist, empty.
    empty = output_files(TrainResult("mnist", "ml", "r1", "Completed", True).to_dict())
    assert {name: empty[name] for name in ("final-step", "final-loss", "last-checkpoint-step", "post-mortem")} == \
        dict.fromkeys(("final-step", "final-loss", "last-checkpoint-step", "post-mortem"), "")
    assert output_files(TrainResult("m", "ml", None, "Failed", False, post_mortem={"error": "job not found"}).to_dict()
                        )["post-mortem"] == "job not found"
    # The train templates declare each of them as an output parameter.
    assert {"final-step", "total-steps", "final-loss", "examples-per-second", "last-checkpoint-step",
            "post-mortem"} <= set(output_names(train_tf))


def test_a_failed_steps_termination_message_names_the_pod_the_exit_code_and_the_last_log_lines() -> None:
    result = TrainResult("mnist", "ml", "r1", "Failed", False, message="job ml/mnist Failed: pod mnist-worker-0, exit code 3",
                         failure={"pod": "mnist-worker-0", "exit_code": 3,
                                  "log_tail": "start\nepoch 1\nloading data\ngiving up: exit 3\n\n"}).to_dict()
    assert termination_message(result) == ("job ml/mnist Failed: pod mnist-worker-0, exit code 3; "
                                           "last log lines: epoch 1 | loading data | giving up: exit 3")
    assert termination_message({"message": "x" * 5000}) == "x" * 4096  # Kubernetes keeps 4096 bytes
    assert termination_message({"ok": False}) == "" and termination_message(None) == ""


# --- the container, run for real ------------------------------------------------------------


# local_run's workflow (name test-wf, uid 0f9c2c1e-argo-test) as the train templates name it.
WORKFLOW_OWNER = "argoproj.io/v1alpha1/Workflow/test-wf/0f9c2c1e-argo-test"


def _manifest(run: local_run.ContainerRun) -> dict[str, Any]:
    assert run.returncode == 0, run.stderr
    return json.loads(run.outputs["result"])["manifest"]


def test_train_tf_container_passes_every_kind_of_parameter(tmp_path: Path) -> None:
    tricky = "--msg=$(touch pwned) `touch pwned2` \"quoted\" 'single'; *"
    given = {
        "name": "mnist", "timeout": "600", "dry-run": "true", "workers": "3", "chief": "true",
        "restart-on-failure": "false", "worker-cpu": "4", "ps-memory": "2Gi", "worker-gpus": "1",
        "env": "A=1\nworker:B=two words\n", "labels": "team=vision", "image-pull-secrets": "reg1\nreg2",
        "tolerations": "worker:gpu=yes:NoSchedule", "code-url": "http://files.example/mnist/",
        "args": f"--epochs\n5\n{tricky}",
    }
    run = local_run.run(template(load("train-tf.yaml")), given, tmp_path)
    expected = render_tf(
        "mnist", workers=3, chief=True, restart_on_failure=False, cpu={"worker": "4"}, memory={"ps": "2Gi"},
        gpus={"worker": 1}, env={"": {"A": "1"}, "worker": {"B": "two words"}}, labels={"team": "vision"},
        image_pull_secrets=["reg1", "reg2"], tolerations={"worker": ["gpu=yes:NoSchedule"]},
        code_url="http://files.example/mnist/", args=["--epochs", "5", tricky], run_id="0f9c2c1e-argo-test",
        owner=WORKFLOW_OWNER, queue="vpipe",
    )
    # What train submits is the rendered job with the stall timeout (default 600 s) in each task.
    assert _manifest(run) == with_stall_timeout(expected, 600)
    assert not list(tmp_path.rglob("pwned*")), "a parameter was run by a shell"
    assert run.outputs["phase"] == "DryRun" and run.outputs["succeeded"] == "true"
    assert run.outputs["run-id"] == "0f9c2c1e-argo-test"


def test_train_mpi_container_with_defaults(tmp_path: Path) -> None:
    given = {"name": "allreduce", "timeout": "60", "dry-run": "true", "command": "python3 allreduce.py --steps 10",
             "mpiexec-args": "-x\nOMP_NUM_THREADS=1"}
    run = local_run.run(template(load("train-mpi.yaml")), given, tmp_path)
    expected = render_mpi("allreduce", command=["python3", "allreduce.py", "--steps", "10"],
                          mpiexec_args=["-x", "OMP_NUM_THREADS=1"], run_id="0f9c2c1e-argo-test",
                          owner=WORKFLOW_OWNER, queue="vpipe")
    assert _manifest(run) == with_stall_timeout(expected, 600)


def test_a_switch_that_is_not_true_or_false_is_bad_input(tmp_path: Path) -> None:
    tmpl = template(load("train-tf.yaml"))
    # Argo refuses it at submission (enum); the script refuses it too, naming the flag.
    chief = next(p for p in tmpl["inputs"]["parameters"] if p["name"] == "chief")
    assert chief["enum"] == ["true", "false"]
    for param in tmpl["inputs"]["parameters"]:
        param.pop("enum", None)
    run = local_run.run(tmpl, {"name": "mnist", "timeout": "60", "chief": "yes"}, tmp_path)
    assert run.returncode == 2
    assert "invalid --chief=yes: true or false" in run.stderr
    assert run.outputs["phase"] == ""


def test_bad_input_exits_2_and_leaves_outputs_at_their_default(tmp_path: Path) -> None:
    run = local_run.run(template(load("train-tf.yaml")), {"name": "mnist", "timeout": "60", "workers": "-1",
                                                          "dry-run": "true"}, tmp_path)
    assert run.returncode == 2, run.stderr
    assert "--workers" in run.stderr
    assert run.outputs["phase"] == "" and run.outputs["result"] == ""


def test_sync_container_copies_into_the_mounted_volume(tmp_path: Path) -> None:
    src = tmp_path / "src"
    (src / "a").mkdir(parents=True)
    (src / "a" / "one.txt").write_text("1")
    (src / "a" / "three.txt").write_text("3")  # two shards need two files selected (issue 33, item 12)
    (src / "two.log").write_text("2")
    dst = tmp_path / "data" / "mnist"
    sync_yaml = load("sync.yaml")
    tmpl = template(sync_yaml)
    mount = tmpl["container"]["volumeMounts"][0]
    assert mount["mountPath"] == templates.DATA_MOUNT
    assert next(v for v in tmpl["volumes"] if v["name"] == mount["name"])["persistentVolumeClaim"]["claimName"] == \
        "{{inputs.parameters.data-pvc}}"
    run = local_run.run(tmpl, {"src": str(src), "dst": str(dst), "exclude": "*.log", "shards": "2"}, tmp_path)
    assert run.returncode == 0, run.stderr
    assert (dst / "a" / "one.txt").read_text() == "1" and not (dst / "two.log").exists()
    assert run.outputs["copied"] == "2" and run.outputs["ok"] == "true"
    assert len(json.loads(run.outputs["result"])["shard_manifests"]) == 2


# --- the pipeline and the schedule ----------------------------------------------------------


def _references(text: str, kind: str) -> set[str]:
    return set(re.findall(r"\{\{" + kind + r"\.parameters\.([\w-]+)\}\}", text))


def test_train_and_serve_wires_every_required_input() -> None:
    pipeline = load("train-and-serve.yaml")
    declared = {p["name"]: p for p in pipeline["spec"]["arguments"]["parameters"]}
    assert _references(json.dumps(pipeline), "workflow") <= set(declared)
    main = template(pipeline, "main")
    tasks = {t["name"]: t for t in main["dag"]["tasks"]}
    # The chain: sync -> train -> reap -> tensorboard -> serve.
    assert list(tasks) == ["sync", "train", "reap", "tensorboard", "serve"]
    assert [tasks[n].get("depends") for n in tasks] == [None, "sync", "train", "reap", "tensorboard"]
    for task in tasks.values():
        ref = task["templateRef"]
        target = template(load(f"{ref['template']}.yaml"), ref["template"])
        assert ref["name"] == f"vpipe-{ref['template']}"
        inputs = {p["name"]: p for p in target["inputs"]["parameters"]}
        given = {p["name"] for p in task["arguments"]["parameters"]}
        assert given <= set(inputs), given - set(inputs)
        assert {n for n, p in inputs.items() if "default" not in p} <= given
    sync_args = {p["name"]: p["value"] for p in tasks["sync"]["arguments"]["parameters"]}
    train_args = {p["name"]: p["value"] for p in tasks["train"]["arguments"]["parameters"]}
    # One data PVC: the sync step fills it, the training job reads it.
    assert sync_args["data-pvc"] == train_args["data-pvc"] == "{{workflow.parameters.data-pvc}}"
    # Each dataset in its own directory of the data PVC, named after the model; the training
    # pods mount only that directory.
    assert sync_args["dst"] == f"{templates.DATA_MOUNT}/{{{{workflow.parameters.name}}}}"
    assert train_args["data-subpath"] == "{{workflow.parameters.name}}" and "data-subpath" not in declared
    assert "namespace" not in train_args  # the train template's own: the workflow's
    assert declared["data-pvc"]["value"] == "vpipe-data" and declared["log-pvc"]["value"] == "vpipe-logs"
    # Required: the dataset. The training timeout has the pipelines' shared default (steps/pipelines.py).
    assert "value" not in declared["sync-src"] and declared["timeout"]["value"] == "86400"
    # The lifecycle steps act on the job train created, in the workflow's namespace, on the log PVC.
    args = {name: {p["name"]: p["value"] for p in tasks[name]["arguments"]["parameters"]}
            for name in ("reap", "tensorboard", "serve")}
    job = "{{tasks.train.outputs.parameters.name}}"
    assert args["reap"]["job"] == args["tensorboard"]["job"] == job
    assert {a["namespace"] for a in args.values()} == {"{{workflow.namespace}}"}
    assert args["tensorboard"]["log-pvc"] == args["serve"]["pvc"] == "{{workflow.parameters.log-pvc}}"
    assert args["serve"]["model-name"] == "{{workflow.parameters.name}}"
    assert args["tensorboard"]["name"] == "{{workflow.parameters.name}}-tensorboard"
    assert "selector" not in args["reap"] and "once" not in args["reap"]
    assert tasks["serve"]["when"] == "{{workflow.parameters.serve-model}} == true"
    assert declared["serve-model"]["value"] == "true" and declared["serve-model"]["enum"] == ["true", "false"]
    assert declared["reap-timeout"]["value"] == "600"


@pytest.mark.parametrize(("prefix", "step"), [("reap-", "reap"), ("tensorboard-", "tensorboard"), ("serving-", "serve")])
def test_lifecycle_workflow_parameters_carry_the_signature_defaults(prefix: str, step: str) -> None:
    """Every lifecycle step parameter the pipeline does not wire is a workflow parameter with
    the template's default (itself the signature's: the test above)."""
    declared = {p["name"]: p for p in load("train-and-serve.yaml")["spec"]["arguments"]["parameters"]}
    inputs = {p["name"]: p for p in template(load(f"{step}.yaml"))["inputs"]["parameters"]}
    wiring = WIRING[step]
    # Wired in both front ends (steps/pipelines.py) or by Argo alone (the Workflow owns TensorBoard).
    not_offered = {w.param for w in wiring.wired} | wiring.left_out | LEFT_OUT
    not_offered |= {name.replace("-", "_") for name in argo_pipelines.ARGO_WIRED.get(step, {})}
    shared = shared_defaults(step)
    for name, param in inputs.items():
        if name.replace("-", "_") in not_offered:
            assert prefix + name not in declared, name
            continue
        given = declared[prefix + name]
        expected = str(shared[name.replace("-", "_")]) if name.replace("-", "_") in shared else param.get("default")
        assert given.get("value") == expected, name
        assert given.get("description") == param.get("description"), name


def test_reap_job_is_left_out_when_empty(tmp_path: Path) -> None:
    """reap's JOB is an optional positional: an empty one is not passed (it would be a job
    named ''), a given one is. Both runs stop at input checking, before any cluster call."""
    tmpl = template(load("reap.yaml"))
    (tmp_path / "empty").mkdir()
    (tmp_path / "given").mkdir()
    empty = local_run.run(tmpl, {"timeout": "5", "job": ""}, tmp_path / "empty")
    assert empty.returncode == 2, empty.stderr
    # The word was left out (not JOB=''): neither JOB nor --selector, said in the CLI's words.
    assert "a JOB or --selector SELECTOR is needed" in empty.stderr and "JOB=''" not in empty.stderr
    given = local_run.run(tmpl, {"timeout": "5", "job": "mnist", "selector": "app=x"}, tmp_path / "given")
    assert given.returncode == 2, given.stderr
    assert "JOB='mnist'" in given.stderr


def test_exit_handler_reports_and_cleans_up_only_on_failure() -> None:
    pipeline = load("train-and-serve.yaml")
    assert pipeline["spec"]["onExit"] == "exit-handler"
    steps = [s for group in template(pipeline, "exit-handler")["steps"] for s in group]
    assert [s["name"] for s in steps] == ["report", "cleanup"]
    assert steps[1]["when"] == "{{workflow.status}} != Succeeded"
    cleanup = template(pipeline, "cleanup")["resource"]
    assert cleanup["action"] == "delete"
    assert "volcano-pipelines/run={{workflow.uid}}" in cleanup["flags"]


def test_the_mpi_pipeline_is_sync_train_mpi_tensorboard_with_the_exit_handler() -> None:
    pipeline = load("train-and-serve-mpi.yaml")
    tasks = {t["name"]: t for t in template(pipeline, "main")["dag"]["tasks"]}
    assert list(tasks) == ["sync", "train", "tensorboard"]
    assert tasks["train"]["templateRef"] == {"name": "vpipe-train-mpi", "template": "train-mpi"}
    assert tasks["train"]["depends"] == "sync" and tasks["tensorboard"]["depends"] == "train"
    assert pipeline["spec"]["onExit"] == "exit-handler"
    outputs = [p["name"] for p in template(pipeline, "main")["outputs"]["parameters"]]
    assert outputs == ["result", "phase", "succeeded", "tensorboard-url"]
    names = {p["name"] for p in pipeline["spec"]["arguments"]["parameters"]}
    assert "command" in names and "sync-src" in names and not {"serve-model", "reap-timeout", "ps"} & names


def _pod_volumes(tmpl: dict[str, Any], running: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The volumes Argo gives a container template's pod: each mount's volume from the template's
    own `volumes`, else from the running workflow's `spec.volumes` (also for a templateRef'd
    template; argo-workflows v4.0.5 workflow/controller/workflowpod.go addVolumeReferences)."""
    found: dict[str, dict[str, Any]] = {}
    for mount in tmpl["container"].get("volumeMounts") or []:
        candidates = [*(tmpl.get("volumes") or []), *(running["spec"].get("volumes") or [])]
        found[mount["mountPath"]] = next(v for v in candidates if v["name"] == mount["name"])
    return found


@pytest.mark.parametrize(("pipeline_file", "train"), [("train-and-serve.yaml", "train-tf"),
                                                      ("train-and-serve-mpi.yaml", "train-mpi")])
def test_the_train_pod_keeps_the_post_mortem_on_the_log_pvc(pipeline_file: str, train: str) -> None:
    """Issue 30: in a pipeline, the train step pod mounts the run's log PVC (the `log-pvc` its
    training pods mount) and copies its post-mortem record there; run alone, the mount is an
    emptyDir (the step's log PVC is optional there); no other step pod mounts it."""
    from volcano_pipelines.steps.pipelines import LOG_MOUNT, POST_MORTEM_VOLUME_DIR, POST_MORTEM_VOLUME_DIR_ENV

    pipeline = load(pipeline_file)
    tasks = {t["name"]: t for t in template(pipeline, "main")["dag"]["tasks"]}
    ref = tasks["train"]["templateRef"]
    alone = load(f"{ref['template']}.yaml")
    tmpl = template(alone, ref["template"])
    assert ref["template"] == train
    assert {"name": POST_MORTEM_VOLUME_DIR_ENV, "value": POST_MORTEM_VOLUME_DIR} in tmpl["container"]["env"]
    assert POST_MORTEM_VOLUME_DIR.startswith(f"{LOG_MOUNT}/")
    in_pipeline = _pod_volumes(tmpl, pipeline)[LOG_MOUNT]
    assert in_pipeline["persistentVolumeClaim"] == {"claimName": "{{workflow.parameters.log-pvc}}"}
    train_args = {p["name"]: p["value"] for p in tasks["train"]["arguments"]["parameters"]}
    assert train_args["log-pvc"] == "{{workflow.parameters.log-pvc}}"  # the training pods' PVC
    assert _pod_volumes(tmpl, alone)[LOG_MOUNT] == {"name": in_pipeline["name"], "emptyDir": {}}
    for task in tasks.values():
        other = template(load(f"{task['templateRef']['template']}.yaml"), task["templateRef"]["template"])
        if other is not tmpl and task["name"] != "train":
            assert LOG_MOUNT not in _pod_volumes(other, pipeline), task["name"]
            assert POST_MORTEM_VOLUME_DIR_ENV not in {e["name"] for e in other["container"].get("env") or []}


def test_the_pipelines_outputs_are_what_a_run_is_looked_at_for() -> None:
    outputs = {p["name"]: p["valueFrom"] for p in template(load("train-and-serve.yaml"), "main")["outputs"]["parameters"]}
    assert outputs["tensorboard-url"]["parameter"] == "{{tasks.tensorboard.outputs.parameters.url}}"
    assert "tasks.reap.outputs.parameters['ps-linger-seconds']" in outputs["ps-linger-seconds"]["expression"]
    # serve is skipped with serve-model false: the output then says "no version served".
    assert outputs["served-version"] == {"parameter": "{{tasks.serve.outputs.parameters.version}}", "default": "-1"}


def test_nightly_cron_workflow() -> None:
    cron = load("nightly-retrain.yaml")
    spec = cron["spec"]
    assert "schedule" not in spec and spec["schedules"] == ["0 2 * * *"]  # Argo v4 removed `schedule`
    assert spec["concurrencyPolicy"] == "Forbid" and spec["timezone"] and spec["startingDeadlineSeconds"] > 0
    assert spec["workflowSpec"]["workflowTemplateRef"]["name"] == "vpipe-train-and-serve"
    pipeline = load("train-and-serve.yaml")["spec"]["arguments"]["parameters"]
    required = {p["name"] for p in pipeline if "value" not in p}
    given = {p["name"] for p in spec["workflowSpec"]["arguments"]["parameters"]}
    assert required <= given <= {p["name"] for p in pipeline}


def test_every_object_runs_as_the_pipeline_service_account() -> None:
    for name in ("sync", "train-tf", "train-mpi", "reap", "tensorboard", "serve", "train-and-serve",
                 "train-and-serve-mpi"):
        assert load(f"{name}.yaml")["spec"]["serviceAccountName"] == templates.SERVICE_ACCOUNT
        for tmpl in load(f"{name}.yaml")["spec"]["templates"]:
            if "container" in tmpl:
                assert tmpl["container"]["image"] == templates.RUNTIME_IMAGE
