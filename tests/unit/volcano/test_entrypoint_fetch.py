"""The fetch script, run for real under bash against a local HTTP server: archives made the
usual way, entry points that are programs, URLs with credentials, retries. Same harness as
test_entrypoint.py (same argv, same env, no container runtime)."""

from __future__ import annotations

import io
import subprocess
import tarfile
import zipfile
from pathlib import Path

import pytest

from tests.helpers.entrypoint import RECORDER, received, run_container, tf_job
from tests.helpers.http_server import Seen, basic, serve
from volcano_pipelines.volcano.spec import CodeSource

NO_BACKOFF = {"VPIPE_FETCH_BACKOFF": "0"}


def code_tree(root: Path, entry: str = "run.sh") -> Path:
    code = root / "code"
    (code / "lib").mkdir(parents=True)
    (code / entry).write_text(RECORDER)
    (code / "lib" / "model.py").write_text("MODEL = 1\n")
    return code


def tar_bytes(members: dict[str, bytes], *, symlinks: dict[str, str] | None = None) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        for name, target in (symlinks or {}).items():
            info = tarfile.TarInfo(name)
            info.type = tarfile.SYMTYPE
            info.linkname = target
            tar.addfile(info)
    return buffer.getvalue()


# Item 18: `tar -C code -czf code.tgz .` names its members '.', './run.sh', ...


def test_tarball_of_dot_made_by_tar_is_unpacked_and_run(tmp_path: Path) -> None:
    root = tmp_path / "srv"
    code = code_tree(root)
    subprocess.run(["tar", "-C", str(code), "-czf", str(root / "code.tgz"), "."], check=True)
    names = subprocess.run(["tar", "-tzf", str(root / "code.tgz")], check=True, capture_output=True, text=True).stdout.split()
    assert "./" in names and "./run.sh" in names  # the reproducer's shape
    with serve(root) as server:
        proc = run_container(tf_job(server.base, code=CodeSource(url=f"{server.base}/code.tgz")), "worker", tmp_path)
    assert proc.returncode == 0, proc.stderr.decode()
    assert received(tmp_path)["cwd"] == str(tmp_path / "code")
    assert (tmp_path / "code" / "lib" / "model.py").read_text() == "MODEL = 1\n"


@pytest.mark.parametrize(
    ("archive", "members", "symlinks"),
    [
        ("dotdot.tgz", {"./run.sh": RECORDER.encode(), "../escaped.sh": b"x"}, None),
        ("dotted-dotdot.tgz", {"./sub/../../escaped.sh": b"x"}, None),
        ("absolute.tgz", {"/tmp/vpipe-escaped.sh": b"x"}, None),
        ("file-named-dot.tgz", {".": b"x"}, None),  # '.' is inside only as the directory itself
        ("symlink.tgz", {"./run.sh": RECORDER.encode()}, {"./out": "/etc"}),
    ],
)
def test_archives_writing_outside_the_code_dir_are_still_refused(
    tmp_path: Path, archive: str, members: dict[str, bytes], symlinks: dict[str, str] | None
) -> None:
    root = tmp_path / "srv"
    root.mkdir()
    (root / archive).write_bytes(tar_bytes(members, symlinks=symlinks))
    with serve(root) as server:
        proc = run_container(tf_job(server.base, code=CodeSource(url=f"{server.base}/{archive}")), "worker", tmp_path)
    assert proc.returncode != 0
    assert b"vpipe: refusing" in proc.stderr, proc.stderr.decode()
    assert not (tmp_path / "out.json").exists()
    assert not (tmp_path / "escaped.sh").exists() and not Path("/tmp/vpipe-escaped.sh").exists()


# Item 19: an entry point that is a program, fetched without its mode bits.


def test_program_entry_from_a_directory_listing_is_made_executable(tmp_path: Path) -> None:
    root = tmp_path / "srv"
    code_tree(root, entry="trainbin")
    assert not (root / "code" / "trainbin").stat().st_mode & 0o111  # served as a plain 0644 file
    with serve(root) as server:
        job = tf_job(server.base, code=CodeSource(url=f"{server.base}/code/", entry="trainbin"))
        proc = run_container(job, "worker", tmp_path)
    assert proc.returncode == 0, proc.stderr.decode()
    assert received(tmp_path)["argv"][0] == "--job_name=worker"


def test_program_entry_from_a_zip_is_made_executable(tmp_path: Path) -> None:
    root = tmp_path / "srv"
    root.mkdir()
    with zipfile.ZipFile(root / "code.zip", "w") as archive:
        archive.writestr("bin/trainbin", RECORDER)  # zipfile.extractall never restores modes
    with serve(root) as server:
        job = tf_job(server.base, code=CodeSource(url=f"{server.base}/code.zip", entry="bin/trainbin"))
        proc = run_container(job, "worker", tmp_path)
    assert proc.returncode == 0, proc.stderr.decode()
    assert received(tmp_path)["cwd"] == str(tmp_path / "code")


def test_modes_from_a_tarball_are_kept(tmp_path: Path) -> None:
    root = tmp_path / "srv"
    code = code_tree(root, entry="trainbin")
    (code / "tool").write_text("#!/bin/sh\n")
    (code / "tool").chmod(0o750)
    subprocess.run(["tar", "-C", str(code), "-czf", str(root / "code.tgz"), "."], check=True)
    with serve(root) as server:
        job = tf_job(server.base, code=CodeSource(url=f"{server.base}/code.tgz", entry="trainbin"))
        proc = run_container(job, "worker", tmp_path)
    assert proc.returncode == 0, proc.stderr.decode()
    assert (tmp_path / "code" / "tool").stat().st_mode & 0o777 == 0o750


# Item 20: credentials in the URL are Basic auth, for that server only; retries are injectable.


def test_credentials_in_the_url_are_sent_as_basic_auth(tmp_path: Path) -> None:
    root = tmp_path / "srv"
    code_tree(root)
    # '@' and ':' in a password arrive percent-encoded in the URL.
    with serve(root, credentials="ml user:p@ss:word") as server:
        url = server.base.replace("http://", "http://ml%20user:p%40ss%3Aword@") + "/code/"
        proc = run_container(tf_job(server.base, code=CodeSource(url=url)), "worker", tmp_path)
    assert proc.returncode == 0, proc.stderr.decode()
    assert (tmp_path / "code" / "lib" / "model.py").read_text() == "MODEL = 1\n"
    assert {"/code/", "/code/run.sh", "/code/lib/", "/code/lib/model.py"} <= set(server.paths())
    assert {seen.authorization for seen in server.requests} == {basic("ml user:p@ss:word")}
    assert b"p@ss" not in proc.stderr and b"p%40ss" not in proc.stderr and b"ml user" not in proc.stderr


def test_wrong_credentials_fail_once_without_showing_them(tmp_path: Path) -> None:
    root = tmp_path / "srv"
    code_tree(root)
    with serve(root, credentials="user:right") as server:
        url = server.base.replace("http://", "http://user:wrong@") + "/code/run.sh"
        proc = run_container(tf_job(server.base, code=CodeSource(url=url)), "worker", tmp_path, extra_env=NO_BACKOFF)
    assert proc.returncode != 0
    assert server.requests == [Seen("/code/run.sh", basic("user:wrong"))]  # 401 is not retried
    assert b"HTTP Error 401" in proc.stderr and b"wrong" not in proc.stderr


def test_credentials_follow_a_redirect_on_the_same_server_only(tmp_path: Path) -> None:
    root = tmp_path / "srv"
    code_tree(root)
    subprocess.run(["tar", "-C", str(root / "code"), "-czf", str(root / "code.tgz"), "."], check=True)
    with serve(root) as other, serve(root, credentials="u:pw") as server:
        server.redirects["/latest.tgz"] = "/code.tgz"  # same origin: keeps the credentials
        server.redirects["/mirror.tgz"] = f"{other.base}/code.tgz"  # elsewhere: must not get them
        for name, run in (("latest.tgz", tmp_path / "a"), ("mirror.tgz", tmp_path / "b")):
            run.mkdir()
            url = server.base.replace("http://", "http://u:pw@") + f"/{name}"
            proc = run_container(tf_job(server.base, code=CodeSource(url=url)), "worker", run)
            assert proc.returncode == 0, proc.stderr.decode()
    assert server.requests == [
        Seen("/latest.tgz", basic("u:pw")), Seen("/code.tgz", basic("u:pw")), Seen("/mirror.tgz", basic("u:pw")),
    ]
    assert other.requests == [Seen("/code.tgz", None)]


def test_server_errors_are_retried_with_the_injected_backoff(tmp_path: Path) -> None:
    root = tmp_path / "srv"
    code_tree(root)
    subprocess.run(["tar", "-C", str(root / "code"), "-czf", str(root / "code.tgz"), "."], check=True)
    with serve(root, failures={"/code.tgz": [503, 500]}) as server:
        job = tf_job(server.base, code=CodeSource(url=f"{server.base}/code.tgz?sig=tok3n"))
        proc = run_container(job, "worker", tmp_path, extra_env=NO_BACKOFF)
    assert proc.returncode == 0, proc.stderr.decode()
    assert server.paths() == ["/code.tgz?sig=tok3n"] * 3
    stderr = proc.stderr.decode()
    assert f"download of {server.base}/code.tgz failed (HTTP Error 503: Service Unavailable); retry 1 of 5 in 0 s" in stderr
    assert "retry 2 of 5 in 0 s" in stderr and "tok3n" not in stderr


def test_download_gives_up_after_six_attempts(tmp_path: Path) -> None:
    root = tmp_path / "srv"
    root.mkdir()
    with serve(root, failures={"/code.tgz": [500] * 10}) as server:
        proc = run_container(tf_job(server.base, code=CodeSource(url=f"{server.base}/code.tgz")), "worker", tmp_path,
                             extra_env=NO_BACKOFF)
    assert proc.returncode != 0
    assert server.paths() == ["/code.tgz"] * 6
    assert f"cannot download {server.base}/code.tgz: HTTP Error 500".encode() in proc.stderr
    assert proc.stderr.count(b"; retry ") == 5
