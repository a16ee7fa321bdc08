"""Writing generated files (the KFP and Argo artifacts) into a tree, all or nothing: shared by
`vpipe compile` and `python -m volcano_pipelines.argo.compile`."""

from __future__ import annotations

import contextlib
from pathlib import Path, PurePosixPath

from volcano_pipelines.errors import InputError, WorkFailed

__all__ = ["write_all"]


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
