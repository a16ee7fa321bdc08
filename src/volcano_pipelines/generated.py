"""What the generated files (the KFP and Argo artifacts) share: the runtime image they name,
and writing them into a tree, all or nothing. Used by `vpipe compile` and
`python -m volcano_pipelines.argo.compile`; every front end's `artifacts(runtime_image=...)`
takes the image checked here, so one flag (`vpipe compile --runtime-image`) reaches the KFP
components, the KFP pipelines and the Argo templates alike."""

from __future__ import annotations

import contextlib
import re
from pathlib import Path, PurePosixPath

from volcano_pipelines.errors import InputError, WorkFailed
from volcano_pipelines.images import RUNTIME_IMAGE

__all__ = ["RUNTIME_IMAGE", "runtime_image", "write_all"]

# An image reference as the container runtimes parse it (distribution/reference): an optional
# registry host[:port], lower-case path components, then a tag and/or a digest. A tag or digest
# is required: an untagged image is `:latest`, which a node with the image cached never pulls
# again (IfNotPresent), so a component and the code it runs could drift apart.
_HOST = r"(?:[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?(?:\.[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?)*(?::[0-9]+)?/)"
_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_IMAGE = re.compile(rf"(?P<name>{_HOST}?{_COMPONENT}(?:/{_COMPONENT})*)"
                    r"(?P<tag>:[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?(?P<digest>@sha256:[0-9a-f]{64})?")


def runtime_image(value: str, field: str = "--runtime-image") -> str:
    """`value` if it is an image reference with a tag or digest (e.g.
    `registry.example:5000/ml/runtime:0.1.0`); bad input naming `field` otherwise."""
    found = _IMAGE.fullmatch(value)
    if found is None or len(found["name"]) > 255:
        raise InputError(field, value, "an image reference such as registry.example:5000/ml/runtime:1.0 "
                         "(registry host, lower-case path, then :tag or @sha256:digest)")
    if not found["tag"] and not found["digest"]:
        raise InputError(field, value, "an image reference with a :tag or @sha256:digest (an untagged image is "
                         ":latest, which nodes that cached it never pull again)")
    return value


def _conflicts(root: Path, paths: list[str]) -> list[str]:
    """What stands where a generated file must go: a file where a directory is needed, a
    directory (or a device) where the file is."""
    out = []
    for path in paths:
        relative = PurePosixPath(path)
        for depth in range(1, len(relative.parts)):
            above = root.joinpath(*relative.parts[:depth])
            if above.exists() and not above.is_dir():
                out.append(f"{PurePosixPath(*relative.parts[:depth])} is a file, not a directory")
        target = root / path
        if (target.exists() or target.is_symlink()) and not target.is_file():
            out.append(f"{path} exists and is not a regular file")
    return sorted(set(out))


def write_all(root: Path, artifacts: dict[str, str], paths: list[str]) -> None:
    """Write `paths` all or nothing: what stands in the way is found before anything is
    written, every file is written next to its place first, and only when all are written do
    they replace the old ones (a failure removes what was staged and leaves the tree as it was)."""
    import os
    import tempfile

    conflicts = _conflicts(root, paths)
    if conflicts:
        raise InputError("--root", str(root), "a directory the generated files can be written under; in the way: "
                         + "; ".join(conflicts[:5]) + (f" (and {len(conflicts) - 5} more)" if len(conflicts) > 5 else ""))
    made_dirs: list[Path] = []
    staged: list[tuple[str, str]] = []
    try:
        for path in paths:
            target = root / path
            missing = [d for d in reversed(target.parents) if not d.exists()]
            for directory in missing:
                directory.mkdir()
                made_dirs.append(directory)
            handle, temporary = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".vpipe-tmp", dir=target.parent)
            staged.append((temporary, str(target)))
            with os.fdopen(handle, "w", encoding="utf-8") as out:
                out.write(artifacts[path])
    except OSError as err:
        for temporary, _ in staged:
            with contextlib.suppress(OSError):
                os.unlink(temporary)
        for directory in reversed(made_dirs):
            with contextlib.suppress(OSError):
                directory.rmdir()
        where = str(err.filename or root)
        raise WorkFailed(f"cannot write the generated files under {str(root)!r}: {where}: "
                         f"{err.strerror or err}; nothing was changed") from None
    for temporary, destination in staged:
        os.chmod(temporary, 0o644)  # mkstemp makes it 0600; the files are meant to be read
        os.replace(temporary, destination)
