"""What a pip user gets: the wheel built from this checkout, installed into fresh virtual
environments (no checkout on the path, the working directory elsewhere), base install and
`[kfp]` without `[hera]`. A command that needs a missing extra says which one (exit 2, no
traceback); with `[kfp]`, `vpipe compile --root DIR` writes the components and pipelines the
docs load, and skips Argo with a note. Needs pip and the package index (or a warm pip cache)."""

from __future__ import annotations

import os
import subprocess
import sys
import venv
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests import needs

REPO = Path(__file__).resolve().parents[2]


def _run(args: list[str], cwd: Path, timeout: float = 900) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    return subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=timeout, env=env)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    built = _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--disable-pip-version-check", "-q", "-w", str(out),
                  str(REPO)], out)
    if built.returncode != 0:
        needs.unavailable(f"cannot build the wheel (pip wheel): {built.stderr.strip()[-300:]}")
    return next(out.glob("volcano_pipelines-*.whl"))


def _venv(root: Path, wheel: Path, extras: str) -> Path:
    venv.create(root, with_pip=True)
    python = root / "bin" / "python"
    target = f"volcano-pipelines{extras} @ {wheel.as_uri()}"
    done = _run([str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", target], root)
    if done.returncode != 0:
        needs.unavailable(f"cannot install {target} (package index unreachable?): {done.stderr.strip()[-300:]}")
    return root / "bin" / "vpipe"


@pytest.fixture(scope="module")
def base(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    yield _venv(tmp_path_factory.mktemp("base-venv"), wheel, "")


@pytest.fixture(scope="module")
def with_kfp(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    yield _venv(tmp_path_factory.mktemp("kfp-venv"), wheel, "[kfp]")


def test_base_install_runs_the_cluster_commands_and_names_the_missing_extras(base: Path, tmp_path: Path) -> None:
    rendered = _run([str(base), "render", "tf", "--name", "m", "--code-url", "http://files.example/m/"], tmp_path)
    assert rendered.returncode == 0 and "kind: Job" in rendered.stdout, rendered.stderr
    for argv, extra in ((["compile", "--root", str(tmp_path / "out")], "kfp"),
                        (["schedule", "kfp", "--host", "http://kfp.invalid", "--pipeline-file",
                          str(REPO / "pipelines" / "train-and-serve.yaml"), "--cron", "0 2 * * *", "--dry-run"], "kfp"),
                        (["sync", "hdfs://nn:8020/d", str(tmp_path / "dst"), "--dry-run"], "sync")):
        done = _run([str(base), *argv], tmp_path)
        assert done.returncode == 2, (argv, done.stderr)
        assert f"pip install 'volcano-pipelines[{extra}]'" in done.stderr and "Traceback" not in done.stderr, done.stderr
    for argv in (["--help"], ["sync", "--help"], ["compile", "--help"], ["schedule", "kfp", "--help"]):
        done = _run([str(base), *argv], tmp_path)
        assert done.returncode == 0 and "Traceback" not in done.stderr, (argv, done.stderr)


def test_kfp_without_hera_compiles_the_kfp_files_a_user_loads(with_kfp: Path, tmp_path: Path) -> None:
    out = tmp_path / "vpipe-artifacts"
    done = _run([str(with_kfp), "compile", "--root", str(out)], tmp_path)
    assert done.returncode == 0, done.stderr
    assert "Argo templates are not compiled" in done.stderr and "hera" in done.stderr and "Traceback" not in done.stderr
    components = sorted(p.name for p in (out / "components").iterdir())
    assert "train_tf.yaml" in components and "sync.yaml" in components
    assert (out / "pipelines" / "train-and-serve.yaml").is_file() and not (out / "pipelines" / "argo").exists()
    # What the docs do with them: load a component with kfp.
    python = with_kfp.parent / "python"
    loaded = _run([str(python), "-c", "from kfp import components; c = components.load_component_from_file("
                   f"{str(out / 'components' / 'train_tf.yaml')!r}); print(c.name)"], tmp_path)
    assert loaded.returncode == 0 and loaded.stdout.strip() == "train-tf", loaded.stderr
    # The same files as the committed ones (the wheel renders what the checkout does).
    for path in ("components/train_tf.yaml", "pipelines/train-and-serve.yaml"):
        assert (out / path).read_text() == (REPO / path).read_text(), path


def test_base_install_ships_the_examples_and_runs_the_quickstart_without_a_checkout(base: Path, tmp_path: Path) -> None:
    """The quickstart and the training code it serves come from the wheel: `vpipe quickstart
    --render` renders the job, training without `[train]` names that extra, and `vpipe examples
    --out DIR` writes the repository's examples, byte for byte, which run from there."""
    python = base.parent / "python"
    where = _run([str(python), "-c", "from volcano_pipelines.examples import examples_dir; print(examples_dir())"], tmp_path)
    assert where.returncode == 0 and "site-packages" in where.stdout and str(REPO) not in where.stdout, where
    rendered = _run([str(base), "quickstart", "--render", "--code-url", "http://code.example/tf-ps/"], tmp_path)
    assert rendered.returncode == 0 and "kind: Job" in rendered.stdout and "http://code.example/tf-ps/" in rendered.stdout, \
        rendered.stderr
    local = _run([str(base), "quickstart", "--workdir", str(tmp_path / "w")], tmp_path)
    assert local.returncode == 2 and "pip install 'volcano-pipelines[train]'" in local.stderr, local.stderr
    assert "Traceback" not in local.stderr and not (tmp_path / "w").exists()
    out = tmp_path / "examples"
    copied = _run([str(base), "examples", "--out", str(out)], tmp_path)
    assert copied.returncode == 0, copied.stderr
    tracked = subprocess.run(["git", "-C", str(REPO), "ls-files", "examples"], capture_output=True, text=True,
                             check=True).stdout.split()
    assert sorted(str(p.relative_to(tmp_path)) for p in out.rglob("*") if p.is_file()) == sorted(tracked)
    for name in tracked:
        assert (tmp_path / name).read_bytes() == (REPO / name).read_bytes(), name
    assert os.access(out / "tf-ps" / "run.sh", os.X_OK)
    again = _run([str(base), "examples", "--out", str(out)], tmp_path)
    assert again.returncode == 2 and "nothing was written" in again.stderr
    own = _run([str(python), str(out / "quickstart.py"), "--render"], tmp_path)
    assert own.returncode == 0 and "kind: Job" in own.stdout, own.stderr
