"""Issue 33, what round three left open: the flag a user typed in an alias's error (item 13),
`vpipe render` and the dry runs showing the namespace the submission uses (item 6), and sync
selections that cannot be what the user meant (item 12): includes that select no source file,
more shards than files."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.helpers.kubeconfigs import TEAM_CONTEXTS
from volcano_pipelines.cli import main


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


# ---------------------------------------------------------------------------- item 13: the alias typed


@pytest.mark.parametrize("kind", ["tf", "mpi"])
@pytest.mark.parametrize(("alias", "canonical", "value"), [
    ("--cpu-per-worker", "cpu", "1e400"),
    ("--memory-per-worker", "memory", "abc"),
    ("--gpus-per-worker", "gpus", "-1"),
])
def test_an_error_names_the_alias_the_user_typed(capsys: pytest.CaptureFixture[str], kind: str, alias: str,
                                                 canonical: str, value: str) -> None:
    task = "worker" if kind == "tf" else "mpiworker"
    base = ["render", kind, "--name", "j"] + (["--", "true"] if kind == "mpi" else [])
    argv = [*base[:4], alias, value, *base[4:]]
    code, out, err = _run(capsys, *argv)
    assert code == 2 and out == "", err
    assert err.startswith(f"vpipe: error: invalid {alias}="), err
    assert f"--{task}-{canonical}" not in err
    # The canonical spelling is still named when it is the one typed.
    code, _, err = _run(capsys, *base[:4], f"--{task}-{canonical}", value, *base[4:])
    assert code == 2 and err.startswith(f"vpipe: error: invalid --{task}-{canonical}="), err


def test_a_dry_run_train_names_the_alias_too(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = _run(capsys, "train", "tf", "--name", "j", "--code-url", "http://files/", "--dry-run",
                        "--cpu-per-worker", "-3")
    assert code == 2 and err.startswith("vpipe: error: invalid --cpu-per-worker='-3'"), err


def test_the_alias_sets_the_value_the_canonical_flag_sets(capsys: pytest.CaptureFixture[str]) -> None:
    code, by_alias, err = _run(capsys, "render", "tf", "--name", "j", "--cpu-per-worker", "3")
    assert code == 0, err
    code, by_flag, err = _run(capsys, "render", "tf", "--name", "j", "--worker-cpu", "3")
    assert code == 0 and by_alias == by_flag, err
    job = yaml.safe_load(by_alias)
    worker = next(t for t in job["spec"]["tasks"] if t["name"] == "worker")
    assert worker["template"]["spec"]["containers"][0]["resources"]["requests"]["cpu"] == "3"


def test_an_error_naming_two_one_word_arguments_names_both_flags(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = _run(capsys, "tensorboard", "--name", "tb", "--log-pvc", "logs", "--job", "j", "--ttl", "10",
                        "--dry-run")
    assert code == 2, err
    assert err.startswith("vpipe: error: invalid --ttl=10: either --job (TensorBoard lives as long as the job) or "
                          "--ttl, not both"), err


def test_a_quoted_word_that_is_no_argument_stays_as_written() -> None:
    from volcano_pipelines.cli.flags import in_flags
    from volcano_pipelines.steps import tensorboard

    assert in_flags(tensorboard, "`ttl` and `nothing` and job", ()) == "--ttl and `nothing` and job"


# ---------------------------------------------------------------------------- item 6: render's namespace

KUBECONFIG = TEAM_CONTEXTS


@pytest.fixture
def kubeconfig(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    path = tmp_path / "kubeconfig"
    path.write_text(KUBECONFIG)
    return path


def _namespace(out: str) -> str:
    return str(yaml.safe_load(out)["metadata"]["namespace"])


@pytest.mark.parametrize("kind", ["tf", "mpi"])
@pytest.mark.parametrize(("extra", "namespace"), [
    ([], "team-a"), (["--context", "other"], "team-b"), (["--context", "bare"], "default"), (["-n", "mine"], "mine"),
])
def test_render_shows_the_namespace_train_submits_to(capsys: pytest.CaptureFixture[str], kubeconfig: Path, kind: str,
                                                     extra: list[str], namespace: str) -> None:
    tail = ["--", "true"] if kind == "mpi" else []
    code, out, err = _run(capsys, "render", kind, "--name", "j", "--kubeconfig", str(kubeconfig), *extra, *tail)
    assert code == 0, err
    assert _namespace(out) == namespace
    # The dry run of the submission says the same.
    code, dry, err = _run(capsys, "train", kind, "--name", "j", "--code-url", "http://files/", "--dry-run",
                          "--kubeconfig", str(kubeconfig), *extra, *tail)
    assert code == 0, err
    assert _namespace(dry) == namespace


def test_render_reads_kubeconfig_from_the_environment(capsys: pytest.CaptureFixture[str], kubeconfig: Path,
                                                      tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Merged as the Kubernetes client merges $KUBECONFIG: a later file's current-context wins.
    later = tmp_path / "later"
    later.write_text("apiVersion: v1\nkind: Config\ncurrent-context: other\n")
    monkeypatch.setenv("KUBECONFIG", f"{kubeconfig}:{tmp_path / 'missing'}:{later}")
    code, out, err = _run(capsys, "render", "tf", "--name", "j")
    assert code == 0 and _namespace(out) == "team-b", err


def test_render_without_any_kubeconfig_says_default(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "none"))
    code, out, err = _run(capsys, "render", "tf", "--name", "j")
    assert code == 0 and _namespace(out) == "default", err


@pytest.mark.parametrize(("extra", "flag"), [(["--kubeconfig", "/nonexistent/kubeconfig"], "--kubeconfig"),
                                             (["--context", "nope"], "--context")])
@pytest.mark.parametrize("command", ["render", "train"])
def test_a_kubeconfig_or_context_that_is_not_there_is_refused(capsys: pytest.CaptureFixture[str], kubeconfig: Path,
                                                              extra: list[str], flag: str, command: str) -> None:
    argv = [command, "tf", "--name", "j"]
    if command == "train":
        argv += ["--code-url", "http://files/", "--dry-run"]
    if flag == "--context":
        argv += ["--kubeconfig", str(kubeconfig)]
    code, out, err = _run(capsys, *argv, *extra)
    assert code == 2 and out == "", err
    assert err.startswith(f"vpipe: error: invalid {flag}="), err
    if flag == "--context":
        assert "bare, other, team" in err


@pytest.mark.parametrize("context", [None, "other", "bare", "missing"])
def test_the_light_reader_agrees_with_the_kubernetes_client(tmp_path: Path, context: str | None) -> None:
    """Render and the dry runs read the namespace without the Kubernetes client; `connect` and
    `kubectl`-like tools read it with it. Both answers, from the same files."""
    from kubernetes import config

    from volcano_pipelines.k8s.kubeconfig import context_namespace

    first, second = tmp_path / "a", tmp_path / "b"
    first.write_text(KUBECONFIG)
    second.write_text("apiVersion: v1\nkind: Config\ncurrent-context: other\ncontexts:\n"
                      "- {name: team, context: {cluster: c, user: u, namespace: shadowed}}\n"
                      "- {name: extra, context: {cluster: c, user: u, namespace: x}}\n")
    paths = f"{first}:{second}"
    contexts, active = config.list_kube_config_contexts(config_file=paths)
    chosen = next((c for c in contexts if c["name"] == context), None) if context else active
    expected = ((chosen or {}).get("context") or {}).get("namespace")
    assert context_namespace(paths, context) == expected
    assert expected != "shadowed"


def test_render_still_does_not_load_the_kubernetes_client(kubeconfig: Path) -> None:
    code = ("import sys, io, contextlib\nfrom volcano_pipelines.cli import main\n"
            "with contextlib.redirect_stdout(io.StringIO()) as out:\n"
            f"    main(['render', 'tf', '--name', 'j', '--kubeconfig', {str(kubeconfig)!r}])\n"
            "print('team-a' in out.getvalue(), sorted(m for m in ('kubernetes', 'urllib3') if m in sys.modules))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert proc.stdout.strip() == "True []", proc.stderr


# ---------------------------------------------------------------------------- item 12: selections


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    src = tmp_path / "src"
    (src / "sub").mkdir(parents=True)
    for i in range(5):
        (src / f"part{i}.txt").write_text(f"data {i}\n")
    (src / "sub" / "table.csv").write_text("a,b\n")
    return src


@pytest.mark.parametrize("includes", [["*.parquet"], ["*.parquet", "part9*"], ["table.csv/"]])
def test_includes_that_select_no_source_file_are_refused(capsys: pytest.CaptureFixture[str], tree: Path,
                                                         includes: list[str]) -> None:
    dst = tree.parent / "dst"
    argv = ["sync", str(tree), str(dst)]
    for pattern in includes:
        argv += ["--include", pattern]
    code, out, err = _run(capsys, *argv)
    assert code == 2 and out == "", err
    shown = repr(includes[0]) if len(includes) == 1 else repr(includes)
    assert f"vpipe: error: invalid --include={shown}: globs that select at least one of the 6 source files" in err, err
    assert not dst.exists()  # nothing copied, nothing created


def test_a_refused_include_is_in_the_json_report(capsys: pytest.CaptureFixture[str], tree: Path) -> None:
    code, out, _ = _run(capsys, "sync", str(tree), str(tree.parent / "dst"), "--include", "*.parquet", "--json")
    report = json.loads(out)
    assert code == 2 and report["copied"] == 0 and "invalid --include='*.parquet'" in report["error"]


def test_a_dry_run_refuses_such_includes_too(capsys: pytest.CaptureFixture[str], tree: Path) -> None:
    code, _, err = _run(capsys, "sync", str(tree), str(tree.parent / "dst"), "--include", "*.parquet", "--dry-run")
    assert code == 2 and "invalid --include='*.parquet'" in err, err


def test_one_include_of_several_that_selects_nothing_is_a_warning(capsys: pytest.CaptureFixture[str],
                                                                  caplog: pytest.LogCaptureFixture, tree: Path) -> None:
    dst = tree.parent / "dst"
    code, _, err = _run(capsys, "sync", str(tree), str(dst), "-q", "--include", "*.parquet", "--include", "*.csv")
    assert code == 0, err
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert warnings == ["include glob '*.parquet' selects none of the 6 source files listed"]
    assert (dst / "sub" / "table.csv").read_text() == "a,b\n" and not (dst / "part0.txt").exists()


def test_an_include_over_an_empty_source_is_no_error(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """An empty dataset is not a typo: nothing to select, nothing copied, exit 0."""
    (tmp_path / "empty").mkdir()
    code, _, err = _run(capsys, "sync", str(tmp_path / "empty"), str(tmp_path / "dst"), "-q", "--include", "*.csv")
    assert code == 0, err


def test_more_shards_than_files_selected_are_refused_before_copying(capsys: pytest.CaptureFixture[str],
                                                                    tree: Path) -> None:
    dst = tree.parent / "dst"
    code, out, err = _run(capsys, "sync", str(tree), str(dst), "-q", "--shards", "7")
    assert code == 2 and out == "", err
    assert err.startswith("vpipe: error: invalid --shards=7: 0 (no manifests) or at most the number of files "
                          "selected (6)"), err
    assert not dst.exists()
    # Counted after the filters: 5 files selected.
    code, _, err = _run(capsys, "sync", str(tree), str(dst), "-q", "--shards", "6", "--include", "part*")
    assert code == 2 and "at most the number of files selected (5)" in err, err
    assert not dst.exists()


def test_as_many_shards_as_files_give_each_shard_one_file(capsys: pytest.CaptureFixture[str], tree: Path) -> None:
    dst = tree.parent / "dst"
    code, _, err = _run(capsys, "sync", str(tree), str(dst), "-q", "--shards", "6")
    assert code == 0, err
    manifests = sorted((dst / ".vpipe" / "shards").glob("shard-*"))
    assert len(manifests) == 6
    listed = [m.read_text().split() for m in manifests]
    assert all(len(paths) == 1 for paths in listed)
    assert sorted(p for paths in listed for p in paths) == sorted(
        str(p.relative_to(tree)) for p in tree.rglob("*") if p.is_file())
