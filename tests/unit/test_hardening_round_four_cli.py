"""Issue 42, round four of the hardening: the command line's input, exit codes and messages.
Every command runs through `vpipe`'s own entry point (`main`), as a user types it."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers.kubeconfigs import TEAM_CONTEXTS
from volcano_pipelines.cli import main


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


# ------------------------------------------------------- item 7: a kubeconfig or context not there

# Every command that reaches a cluster, with valid input otherwise.
CLUSTER_COMMANDS = [
    ["render", "tf", "--name", "j"],
    ["train", "tf", "--name", "j", "--code-url", "http://files/", "--dry-run"],
    ["train", "tf", "--name", "j", "--code-url", "http://files/"],
    ["train", "mpi", "--name", "j", "--", "hostname"],
    ["status", "j"],
    ["reap", "j"],
    ["tensorboard", "--name", "tb", "--log-pvc", "logs"],
    ["serve", "--name", "m", "--pvc", "models"],
    ["pv", "reuse", "pv1", "--for", "claim"],
    ["namespace", "prepare", "team-a", "--pull-secret-from", "infra/registry"],
]


@pytest.fixture
def no_default_kubeconfig(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "no-default"))


@pytest.mark.usefixtures("no_default_kubeconfig")
@pytest.mark.parametrize("command", CLUSTER_COMMANDS, ids=lambda c: " ".join(c[:2]))
def test_a_kubeconfig_that_does_not_exist_is_bad_input_for_every_command(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, command: list[str]) -> None:
    missing = str(tmp_path / "nowhere" / "kubeconfig")
    cut = command.index("--") if "--" in command else len(command)
    code, out, err = _run(capsys, *command[:cut], "--kubeconfig", missing, *command[cut:])
    assert code == 2 and out == "", err
    assert err == f"vpipe: error: invalid --kubeconfig={missing!r}: an existing kubeconfig file\n"


@pytest.mark.usefixtures("no_default_kubeconfig")
@pytest.mark.parametrize("command", CLUSTER_COMMANDS, ids=lambda c: " ".join(c[:2]))
def test_a_context_the_kubeconfig_lacks_is_bad_input_for_every_command(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, command: list[str]) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(TEAM_CONTEXTS)
    cut = command.index("--") if "--" in command else len(command)
    code, out, err = _run(capsys, *command[:cut], "--kubeconfig", str(kubeconfig), "--context", "nope",
                          *command[cut:])
    assert code == 2 and out == "", err
    assert err == "vpipe: error: invalid --context='nope': a context of the kubeconfig: bare, other, team\n"


@pytest.mark.usefixtures("no_default_kubeconfig")
def test_an_unreachable_cluster_stays_a_cluster_problem(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(TEAM_CONTEXTS)  # nothing listens at its server's address
    code, out, err = _run(capsys, "status", "j", "--kubeconfig", str(kubeconfig), "--context", "other")
    assert code == 3, err
    assert "cannot reach the Kubernetes API server" in err and "team-b/j" in err and "Traceback" not in err
