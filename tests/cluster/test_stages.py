"""The kwok stages and tests/cluster/behaviour.py must describe the same labels (no cluster needed)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from tests.cluster import behaviour

STAGES = Path(__file__).resolve().parent / "stages"


def _stages() -> dict[str, dict[str, Any]]:
    found = {}
    for path in STAGES.glob("*.yaml"):
        for doc in yaml.safe_load_all(path.read_text()):
            found[doc["metadata"]["name"]] = doc["spec"]
    return found


def _selector(spec: dict[str, Any]) -> dict[str, tuple[str, list[str]]]:
    return {e["key"]: (e["operator"], e.get("values", [])) for e in spec["selector"]["matchExpressions"]}


def _label_key(label: str) -> str:
    return f'.metadata.labels["{label}"]'


def test_complete_stage_matches_behaviour() -> None:
    selector = _selector(_stages()["vpipe-pod-complete"])
    assert selector[_label_key(behaviour.TASK_SPEC_LABEL)] == ("In", list(behaviour.COMPLETING_TASKS))
    assert selector[_label_key(behaviour.FAIL_LABEL)][0] == "DoesNotExist"
    assert selector[_label_key(behaviour.KEEP_RUNNING_LABEL)][0] == "DoesNotExist"


def test_fail_stage_matches_behaviour() -> None:
    spec = _stages()["vpipe-pod-fail"]
    assert _selector(spec)[_label_key(behaviour.FAIL_LABEL)][0] == "Exists"
    template = spec["next"]["statusTemplate"]
    assert f'"{behaviour.FAIL_LABEL}"' in template and f"reason: {behaviour.FAIL_REASON}" in template


def test_delays_match_behaviour() -> None:
    stages = _stages()
    for name, default in (("vpipe-pod-complete", behaviour.DEFAULT_RUN_FOR_SECONDS),
                          ("vpipe-pod-fail", behaviour.DEFAULT_FAIL_AFTER_SECONDS)):
        delay = stages[name]["delay"]
        assert delay["durationMilliseconds"] == default * 1000
        assert delay["durationFrom"]["expressionFrom"] == _label_key(behaviour.RUN_FOR_LABEL)


def test_every_pod_stage_skips_deleted_pods() -> None:
    for name, spec in _stages().items():
        if spec["resourceRef"]["kind"] != "Pod":
            continue
        # A deleted pod is removed by tests/cluster/pod_finalizer.py (UID precondition), never
        # by a kwok stage (kwok deletes by name and can remove a new pod of the same name).
        operator = _selector(spec)[".metadata.deletionTimestamp"][0]
        assert operator == "DoesNotExist", name
        assert not (spec.get("next") or {}).get("delete"), name
