"""The sync step's copy-pod inputs (`workers` > 1): every bad value is refused before anything
is listed, created or written, naming the flag and what is allowed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from volcano_pipelines.cli import main
from volcano_pipelines.errors import InputError
from volcano_pipelines.steps import sync

SRC = "webhdfs://127.0.0.1:9/data"  # never reached: every case fails before


@pytest.mark.parametrize(("kwargs", "field", "allowed"), [
    ({"workers": 0}, "workers", "from 1"),
    ({"workers": 1001}, "workers", "to 1000"),
    ({"dest_pvc": "data"}, "dest_pvc", "only with workers above 1"),
    ({"spread": True}, "spread", "only with workers above 1"),
    ({"workers": 2, "hadoop_conf_dir": "/etc/hadoop"}, "hadoop_conf_dir", "Secret or ConfigMap volume of a step pod"),
    ({"workers": 2, "kerberos_ccache": "/tmp/krb5cc"}, "kerberos_ccache", "Secret or ConfigMap volume of a step pod"),
    ({"workers": 2, "dest_subpath": "a"}, "dest_subpath", "only with dest_pvc"),
    ({"workers": 2, "dest_pvc": "d", "run_id": "../x"}, "run_id", "letters, digits"),
    ({"workers": 2, "dest_pvc": "d", "cpu": "lots"}, "cpu", ""),
    ({"workers": 2, "dest_pvc": "d", "tolerations": ["nope"]}, "tolerations", "KEY[=VALUE]:EFFECT"),
    ({"workers": 2, "dest_pvc": "d", "max_retry": 0}, "max_retry", "from 1 to 100"),
    ({"workers": 2}, "dest_pvc", "PersistentVolumeClaim mounted at DST"),
    ({"workers": 2, "dest_pvc": " data"}, "dest_pvc", ""),
    ({"workers": 2, "dest_pvc": "data\n"}, "dest_pvc", ""),
    ({"workers": 2, "dest_pvc": "d", "dest_subpath": "../other"}, "dest_subpath", ""),
])
def test_bad_copy_pod_inputs_are_refused_before_anything_happens(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                 kwargs: dict[str, Any], field: str, allowed: str) -> None:
    monkeypatch.delenv("VPIPE_POD_NAME", raising=False)
    dst = tmp_path / "dst"
    with pytest.raises(InputError) as info:
        sync(SRC, str(dst), **kwargs)
    assert info.value.field == field and allowed in info.value.allowed
    assert not dst.exists()


def test_a_local_source_cannot_go_to_copy_pods(tmp_path: Path) -> None:
    (tmp_path / "src").mkdir()
    with pytest.raises(InputError) as info:
        sync(str(tmp_path / "src"), str(tmp_path / "dst"), workers=2, dest_pvc="d")
    assert info.value.field == "workers" and "local source" in info.value.allowed


def test_the_cli_names_the_flags(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv("VPIPE_POD_NAME", raising=False)
    assert main(["sync", SRC, str(tmp_path / "d"), "--workers", "3"]) == 2
    assert "--dest-pvc" in capsys.readouterr().err
    assert main(["sync", SRC, str(tmp_path / "d"), "--workers", "3", "--dest-pvc", "x", "--toleration", "bad"]) == 2
    assert "--toleration" in capsys.readouterr().err
    assert not (tmp_path / "d").exists()


def _help_sections(argv: list[str], capsys: pytest.CaptureFixture[str]) -> dict[str, list[str]]:
    """The flags under each heading of a command's --help."""
    with pytest.raises(SystemExit):
        main(argv)
    sections: dict[str, list[str]] = {}
    heading = ""
    for line in capsys.readouterr().out.splitlines():
        if line and not line.startswith(" ") and line.endswith(":"):
            heading = line[:-1]
            sections[heading] = []
        elif line.startswith("  --") and heading:
            sections[heading].append(line.split()[0])
    return sections


def test_sync_help_puts_the_copy_pod_flags_under_their_own_heading(capsys: pytest.CaptureFixture[str]) -> None:
    sections = _help_sections(["sync", "--help"], capsys)
    copy_pods = next(flags for heading, flags in sections.items() if heading.startswith("copy pods"))
    assert {"--workers", "--dest-pvc", "--queue", "--spread", "--max-retry"} <= set(copy_pods), sections
    cluster = next(flags for heading, flags in sections.items() if heading.startswith("cluster"))
    assert {"--kubeconfig", "--context"} <= set(cluster), sections
    assert "job" not in sections and "run" not in sections, list(sections)
    # The training commands keep theirs.
    assert "--queue" in _help_sections(["train", "tf", "--help"], capsys)["job"]
