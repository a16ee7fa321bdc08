"""The scale benchmark's Volcano patch still applies to the pinned release and does what its
description says: the three pod handlers leave the pod out of a request unless a policy of the
job needs it (tests/cluster/volcano_patch.py). No build: the benchmark builds the binary."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

from tests import needs
from tests.cluster import build, volcano_patch

HANDLER = "pkg/controllers/job/job_controller_handler.go"


def _handler_source() -> Path:
    if not build.go_available():
        needs.unavailable("the Go toolchain is not installed (tests/cluster/ci_prepare.sh)")
    return build.module_dir(volcano_patch.MODULE, build.VOLCANO_VERSION) / HANDLER


def _pod_handlers(text: str) -> dict[str, str]:
    """Each pod handler's body, by name."""
    bodies = {}
    for name in ("addPod", "updatePod", "deletePod"):
        start = text.index(f"func (cc *jobcontroller) {name}(")
        end = text.index("\nfunc ", start + 1)
        bodies[name] = text[start:end]
    return bodies


def test_the_patch_applies_to_the_pinned_volcano_and_leaves_the_pod_to_podIdentity(tmp_path: Path) -> None:
    source = _handler_source()
    work = tmp_path / "volcano"
    (work / HANDLER).parent.mkdir(parents=True)
    shutil.copyfile(source, work / HANDLER)
    (work / HANDLER).chmod(0o644)
    before = _pod_handlers(source.read_text())
    # Released: every pod handler names the pod in its request.
    assert all("PodName:" in body and "PodUID:" in body for body in before.values())

    done = subprocess.run(["patch", "--forward", "--batch", "-p1", "-d", str(work), "-i", str(volcano_patch.PATCH)],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    after_text = (work / HANDLER).read_text()
    after = _pod_handlers(after_text)
    for name, body in after.items():
        assert "PodName:" not in body and "PodUID:" not in body, name
        assert re.search(r"req\.PodName, req\.PodUID = cc\.podIdentity\((pod|newPod)\)\n\tkey := ", body), name
    # The pod stays where a policy acts on one pod or delays its action.
    identity = after_text[after_text.index("func policiesNeedPod("):]
    for needed in ("policy.Timeout != nil", "bus.RestartPodAction", "bus.RestartPartitionAction"):
        assert needed in identity
