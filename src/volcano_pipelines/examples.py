"""The examples (`examples/` of the repository: the quickstart and the training code it runs)
wherever this install keeps them: in a wheel they are the data-only package
`volcano_pipelines._examples` (setup.py maps examples/ there), in a checkout the examples/
directory itself. `vpipe quickstart` runs them from there; `vpipe examples --out DIR` copies
them out to read, change and serve to a cluster's pods."""

from __future__ import annotations

import importlib.util
import os
import shutil
from pathlib import Path

from volcano_pipelines.errors import InputError, VpipeError

__all__ = ["copy_examples", "examples_dir"]


class ExamplesMissing(VpipeError):
    """This install has no examples (a broken or stripped install)."""


def examples_dir() -> Path:
    """The directory holding quickstart.py, tf-ps/, mpi/ and data/."""
    spec = importlib.util.find_spec("volcano_pipelines._examples")
    for place in (spec.submodule_search_locations or []) if spec is not None else []:
        if (Path(place) / "quickstart.py").is_file():
            return Path(place)
    checkout = Path(__file__).resolve().parents[2] / "examples"
    if (checkout / "quickstart.py").is_file():
        return checkout
    raise ExamplesMissing("this install has no examples (volcano_pipelines/_examples is missing): reinstall "
                          "volcano-pipelines, or use a checkout of the repository")


def _files(root: Path) -> list[Path]:
    return sorted(p.relative_to(root) for p in root.rglob("*")
                  if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc")


def copy_examples(out: str | os.PathLike[str]) -> list[Path]:
    """Copy every example file into `out` (created if missing), keeping the layout; refuses
    to overwrite a file that exists. Returns the paths written. Shell scripts are made
    executable (a wheel does not keep file modes)."""
    dest = Path(out)
    if dest.exists() and not dest.is_dir():
        raise InputError("out", str(out), "a directory (this is a file)")
    root = examples_dir()
    files = _files(root)
    clashes = [str(dest / f) for f in files if (dest / f).exists() or (dest / f).is_symlink()]
    if clashes:
        raise InputError("out", str(out), f"a directory without the example files ({len(clashes)} exist already, "
                         f"e.g. {clashes[0]}); nothing was written")
    written: list[Path] = []
    for rel in files:
        target = dest / rel
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(root / rel, target)
        except OSError as err:
            raise InputError("out", str(out), f"a writable directory ({err.strerror or err})") from None
        if target.suffix == ".sh":
            target.chmod(0o755)
        written.append(target)
    return written
