"""`vpipe compile [--check]`: write the generated pipeline artifacts (KFP components and
pipelines; Argo templates where that front end is installed), or check that the committed
copies are fresh. Each front end renders its own: `<front end>.compile.artifacts()` returns
{relative path: text}."""

from __future__ import annotations

import argparse
import importlib
import shlex
import sys
from pathlib import Path, PurePosixPath

from volcano_pipelines.cli import command_help
from volcano_pipelines.errors import EXIT_BAD_INPUT, EXIT_FAILED, EXIT_OK, InputError, VpipeError, WorkFailed
from volcano_pipelines import generated
from volcano_pipelines.generated import write_all
from volcano_pipelines.images import RUNTIME_IMAGE

__all__ = ["FRONT_ENDS", "all_artifacts", "register", "stale", "write_all"]

# Modules with `artifacts() -> dict[str, str]`; one that does not exist in this install is skipped.
FRONT_ENDS = ("volcano_pipelines.kfp.compile", "volcano_pipelines.argo.compile")


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser(
        "compile",
        help=command_help("compile"),
        description="Render the KFP components and pipelines (and the Argo templates, where that front end is "
        "installed) from the step signatures and write them under ROOT; --check writes nothing and fails naming "
        "every stale file.",
    )
    p.add_argument("--check", action="store_true", help="write nothing; exit 1 naming every file that is missing or differs")
    p.add_argument("--root", default=".", metavar="DIR", help="the repository root the artifact paths are relative to, "
                   "created if missing (default: the current directory)")
    p.add_argument("--runtime-image", default=RUNTIME_IMAGE, metavar="REF",
                   help="the image every KFP component, KFP pipeline step and Argo template runs in: the runtime "
                   "image pushed to your registry, with a tag or digest (default: %(default)s); --check then "
                   "compares against files rendered with it")
    p.set_defaults(handler=_compile, parser=p)


# What each front end needs beyond the base install, and the extra that installs it.
_EXTRA = {"volcano_pipelines.kfp.compile": "kfp", "volcano_pipelines.argo.compile": "hera"}


# What each front end writes, for the note when its extra is missing.
_WHAT = {"volcano_pipelines.kfp.compile": "the KFP components and pipelines",
         "volcano_pipelines.argo.compile": "the Argo templates"}


def _rendered(module: str, runtime_image: str, skipped: list[str]) -> dict[str, str] | None:
    """The front end's artifacts; None when this front end is not part of the install, or
    when its extra is not installed (added to `skipped`, with a note): `[kfp]` alone writes the
    KFP files, `[hera]` alone the Argo templates, as the README says."""
    try:
        return importlib.import_module(module).artifacts(runtime_image=runtime_image)  # type: ignore[no-any-return]
    except ModuleNotFoundError as err:
        parts = module.split(".")
        if err.name in {".".join(parts[:i]) for i in range(2, len(parts) + 1)}:
            return None  # this front end is not part of this install
        extra = _EXTRA.get(module, "kfp,hera")
        skipped.append(f"{extra}:{err.name}")
        print(f"note: {_WHAT.get(module, module)} are not compiled: {err.name!r} is not installed "
              f"(pip install 'volcano-pipelines[{extra}]')", file=sys.stderr)
        return None


class MissingExtra(VpipeError):
    """A command needs an optional dependency this install lacks: a usage problem (exit 2)."""

    exit_code = EXIT_BAD_INPUT


def all_artifacts(runtime_image: str = RUNTIME_IMAGE) -> dict[str, str]:
    """Every front end's artifacts, all naming `runtime_image` (checked here: bad input, exit 2)."""
    runtime_image = generated.runtime_image(runtime_image)
    out: dict[str, str] = {}
    skipped: list[str] = []
    for module in FRONT_ENDS:
        rendered = _rendered(module, runtime_image, skipped)
        if rendered is None:
            continue
        for path, text in rendered.items():
            relative = PurePosixPath(path)
            if relative.is_absolute() or ".." in relative.parts or path in out:
                raise WorkFailed(f"{module}.artifacts() returned the path {path!r}: a new relative path is expected")
            out[path] = text
    if not out and skipped:  # nothing at all to compile: the install lacks every front end
        extras = " or ".join(f"'volcano-pipelines[{e}]'" for e in dict.fromkeys(i.split(":")[0] for i in skipped))
        missing = ", ".join(repr(item.split(":", 1)[1]) for item in skipped)
        raise MissingExtra(f"`vpipe compile` needs the kfp extra (KFP files) or the hera extra (Argo templates); "
                           f"{missing} not installed: pip install {extras}")
    return out


def stale(root: Path, artifacts: dict[str, str]) -> list[str]:
    """'path (missing)' / 'path (differs)' for every artifact whose file is not its text."""
    out = []
    for path, text in sorted(artifacts.items()):
        target = root / path
        if not target.is_file():
            out.append(f"{path} (missing)")
            continue
        try:
            same = target.read_bytes() == text.encode("utf-8")
        except OSError:
            same = False  # unreadable: writing it says why, checking calls it stale
        if not same:
            out.append(f"{path} (differs)")
    return out


def rewrite_command(args: argparse.Namespace) -> str:
    """The command that rewrites what `--check` checked: the same root and runtime image."""
    words = ["vpipe", "compile"]
    if args.root != ".":
        words += ["--root", args.root]
    if args.runtime_image != RUNTIME_IMAGE:
        words += ["--runtime-image", args.runtime_image]
    return shlex.join(words)


def _compile(args: argparse.Namespace) -> int:
    root = Path(args.root)
    if not args.check and not root.exists() and not root.is_symlink():
        try:
            root.mkdir(parents=True)  # `vpipe compile --root ./artifacts`: where a pip user wants the files
        except OSError as err:
            raise InputError("--root", args.root, f"a directory that can be created ({err.strerror})") from None
    if not root.is_dir():
        raise InputError("--root", args.root, "an existing directory (the repository root)")
    artifacts = all_artifacts(args.runtime_image)
    outdated = stale(root, artifacts)
    if args.check:
        for line in outdated:
            print(f"stale: {line}", file=sys.stderr)
        if outdated:
            print(f"vpipe: error: {len(outdated)} of {len(artifacts)} generated files are stale; run "
                  f"`{rewrite_command(args)}`", file=sys.stderr)
            return EXIT_FAILED
        print(f"{len(artifacts)} generated files are up to date")
        return EXIT_OK
    paths = [line.rsplit(" (", 1)[0] for line in outdated]
    write_all(root, artifacts, paths)
    for path in paths:
        print(f"wrote {path}")
    print(f"{len(artifacts)} generated files, {len(outdated)} written")
    return EXIT_OK
