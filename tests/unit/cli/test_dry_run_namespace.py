"""Issue 33, item 6: a dry run (and `serve --target kserve`, which only renders) shows the
namespace the real submission would use: the kubeconfig context's, not `default`. No server is
asked: the kubeconfig names an address where nothing listens."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tests.helpers.kubeconfigs import TEAM_CONTEXTS
from volcano_pipelines.cli import main

KUBECONFIG = TEAM_CONTEXTS

COMMANDS = {
    "train": ["train", "tf", "--name", "j", "--code-url", "http://files.example/m/", "--dry-run"],
    "tensorboard": ["tensorboard", "--name", "tb", "--log-pvc", "logs", "--dry-run"],
    "serve": ["serve", "--name", "s", "--pvc", "models", "--dry-run"],
    "kserve": ["serve", "--name", "s", "--pvc", "models", "--target", "kserve"],
}


def _namespaces(out: str) -> set[str]:
    docs = [d for d in yaml.safe_load_all(out) if isinstance(d, dict)]
    found = {d["metadata"]["namespace"] for d in docs if "metadata" in d}
    found |= {m["metadata"]["namespace"] for d in docs for m in d.get("manifests", []) if "metadata" in m}
    return found


@pytest.mark.parametrize("command", sorted(COMMANDS))
@pytest.mark.parametrize(("extra", "namespace"), [([], "team-a"), (["--context", "other"], "team-b"),
                                                  (["-n", "mine"], "mine")])
def test_a_dry_run_shows_the_namespace_the_submission_would_use(
        command: str, extra: list[str], namespace: str, tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(KUBECONFIG)
    argv = [*COMMANDS[command], "--kubeconfig", str(kubeconfig), *extra]
    if command != "train":
        argv.append("--json")
    code = main(argv)
    out, err = capsys.readouterr()
    assert code == 0, err
    assert _namespaces(out) == {namespace}, out
