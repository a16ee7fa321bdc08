"""Fixtures the unit tests of several folders share: a local HTTP server with the stub entry
point's code (file_server) and a fake mpiexec (fake_mpiexec)."""

from __future__ import annotations

import io
import tarfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers.entrypoint import RECORDER
from tests.helpers.http_server import serve


@pytest.fixture(scope="module")
def file_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    root = tmp_path_factory.mktemp("files")
    code = root / "mnist"
    (code / "lib").mkdir(parents=True)
    (code / "run.sh").write_text(RECORDER)
    (code / "lib" / "model.py").write_text("MODEL = 1\n")
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        tar.add(code / "run.sh", arcname="run.sh")
    (root / "code.tgz").write_bytes(buffer.getvalue())
    evil = io.BytesIO()
    with tarfile.open(fileobj=evil, mode="w:gz") as tar:
        info = tarfile.TarInfo("../escaped.sh")
        data = RECORDER.encode()
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    (root / "evil.tgz").write_bytes(evil.getvalue())
    with serve(root) as server:
        yield server.base, root


@pytest.fixture()
def fake_mpiexec(tmp_path: Path) -> Path:
    """mpiexec is the one part replaced: it records its argv (no MPI runtime is launched)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "mpiexec").write_text(
        "#!/bin/bash\nexec python3 -S -c 'import json, os, sys\n"
        "json.dump({\"argv\": sys.argv[1:], \"hostfile\": open(sys.argv[sys.argv.index(\"--hostfile\") + 1]).read()},"
        " open(os.environ[\"VPIPE_TEST_OUT\"], \"w\"))' \"$@\"\n"
    )
    (bin_dir / "mpiexec").chmod(0o755)
    return bin_dir
