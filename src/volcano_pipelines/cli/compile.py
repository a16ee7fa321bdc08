"""`vpipe compile [--check]`: write the generated pipeline artifacts (KFP components and
pipelines; Argo templates where that front end is installed), or check that the committed
copies are fresh. Each front end renders its own: `<front end>.compile.artifacts()` returns
{relative path: text}."""

from __future__ import annotations

import argparse
import importlib
import sys
from pathlib import Path, PurePosixPath

from volcano_pipelines.errors import EXIT_FAILED, EXIT_OK, InputError, WorkFailed

__all__ = ["FRONT_ENDS", "all_artifacts", "register", "stale"]

# Modules with `artifacts() -> dict[str, str]`; one that does not exist in this install is skipped.
FRONT_ENDS = ("volcano_pipelines.kfp.compile", "volcano_pipelines.argo.compile")


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser(
        "compile",
        help="write the generated pipeline artifacts (components/*.yaml, pipelines/*.yaml)",
        description="Render the KFP components and pipelines (and the Argo templates, where that front end is "
        "installed) from the step signatures and write them under ROOT; --check writes nothing and fails naming "
        "every stale file.",
    )
    p.add_argument("--check", action="store_true", help="write nothing; exit 1 naming every file that is missing or differs")
    p.add_argument("--root", default=".", metavar="DIR", help="the repository root the artifact paths are relative to "
                   "(default: the current directory)")
    p.set_defaults(handler=_compile, parser=p)


def _load(module: str) -> object | None:
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as err:
        # Only "this front end is not here" is skipped; a missing dependency of one that is
        # here (kfp, hera) is an error worth reading.
        parts = module.split(".")
        if err.name in {".".join(parts[:i]) for i in range(2, len(parts) + 1)}:
            return None
        raise WorkFailed(f"{module} needs {err.name!r}, which is not installed (pip install "
                         f"'volcano-pipelines[kfp,hera]')") from None


def all_artifacts() -> dict[str, str]:
    out: dict[str, str] = {}
    for module in FRONT_ENDS:
        loaded = _load(module)
        if loaded is None:
            continue
        for path, text in loaded.artifacts().items():  # type: ignore[attr-defined]
            relative = PurePosixPath(path)
            if relative.is_absolute() or ".." in relative.parts or path in out:
                raise WorkFailed(f"{module}.artifacts() returned the path {path!r}: a new relative path is expected")
            out[path] = text
    return out


def stale(root: Path, artifacts: dict[str, str]) -> list[str]:
    """'path (missing)' / 'path (differs)' for every artifact whose file is not its text."""
    out = []
    for path, text in sorted(artifacts.items()):
        target = root / path
        if not target.is_file():
            out.append(f"{path} (missing)")
        elif target.read_text(encoding="utf-8") != text:
            out.append(f"{path} (differs)")
    return out


def _compile(args: argparse.Namespace) -> int:
    root = Path(args.root)
    if not root.is_dir():
        raise InputError("--root", args.root, "an existing directory (the repository root)")
    artifacts = all_artifacts()
    outdated = stale(root, artifacts)
    if args.check:
        for line in outdated:
            print(f"stale: {line}", file=sys.stderr)
        if outdated:
            print(f"vpipe: error: {len(outdated)} of {len(artifacts)} generated files are stale; run `vpipe compile`",
                  file=sys.stderr)
            return EXIT_FAILED
        print(f"{len(artifacts)} generated files are up to date")
        return EXIT_OK
    for line in outdated:
        path = line.rsplit(" (", 1)[0]
        target = root / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(artifacts[path], encoding="utf-8")
        print(f"wrote {path}")
    print(f"{len(artifacts)} generated files, {len(outdated)} written")
    return EXIT_OK
