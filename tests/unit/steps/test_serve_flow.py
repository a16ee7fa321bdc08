"""serve() end to end without a cluster: the Kubernetes side is an in-memory apps API (get /
apply / patch / rollout wait, answered as the Deployment controller would, every call
recorded), TF Serving's REST API is the stand-in HTTP server. What only a cluster run showed
before: a failed rollout or smoke test rolls back to the previous pod template, and "the old
version AVAILABLE, the new one still LOADING" is not served yet."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.helpers.serving import DONE, FAILED, OLD_TEMPLATE, previous_deployment
from tests.unit.objects.tfserving_standin import standin, status_body
from volcano_pipelines.steps._serve import serve


SERVED = status_body((1, "AVAILABLE"), (2, "AVAILABLE"))


def _serve(url: str, export: Path | None = None, **kw: Any):  # type: ignore[no-untyped-def]
    return serve("model", pvc="logs", rest_url=url, model_dir_local=str(export) if export else None, timeout=1, **kw)


def test_a_good_rollout_serves_the_new_version_and_smoke_tests_it(fake, export: Path) -> None:  # type: ignore[no-untyped-def]
    api = fake(None, [DONE])
    with standin("model", [(200, SERVED)]) as tfs:
        result = _serve(tfs.url, export, smoke_payload='{"instances": [[1.0]]}')
    assert result.succeeded and not result.rolled_back and result.created, result.message
    assert result.version == 2 and result.served_versions == [1, 2]
    assert result.smoke_test == {"status": 200, "ok": True, "detail": "predictions returned"}
    assert ("POST", "/v1/models/model:predict", {"instances": [[1.0]]}) in tfs.requests
    assert [c[0] for c in api.calls].count("patch") == 0


def test_a_failed_smoke_test_rolls_back_to_the_previous_template(fake, export: Path) -> None:  # type: ignore[no-untyped-def]
    api = fake(previous_deployment(), [DONE, DONE])
    with standin("model", [(200, SERVED)], predict=(400, {"error": "bad input"})) as tfs:
        result = _serve(tfs.url, export, smoke_payload='{"instances": [[1.0]]}')
    assert not result.succeeded and result.rolled_back
    assert "smoke test failed (HTTP 400): bad input" in (result.message or "")
    assert "rolled back to the previous revision" in (result.message or "")
    assert ("patch", "Deployment", "model") in api.calls and api.calls[-1] == ("wait", "old-hash")
    assert api.template() == OLD_TEMPLATE


def test_a_failed_rollout_rolls_back_without_asking_tf_serving(fake, export: Path) -> None:  # type: ignore[no-untyped-def]
    api = fake(previous_deployment(), [FAILED, DONE])
    with standin("model", [(200, SERVED)]) as tfs:
        result = _serve(tfs.url, export)
    assert not result.succeeded and result.rolled_back and tfs.requests == []
    assert (result.message or "").startswith("rollout failed: pod model-abc: ImagePullBackOff; rolled back")
    assert api.template() == OLD_TEMPLATE and api.calls[-1] == ("wait", "old-hash")


def test_without_a_previous_revision_nothing_is_rolled_back(fake, export: Path) -> None:  # type: ignore[no-untyped-def]
    api = fake(None, [FAILED])
    with standin("model", [(200, SERVED)]) as tfs:
        result = _serve(tfs.url, export)
    assert not result.succeeded and not result.rolled_back
    assert "no previous revision to roll back to" in (result.message or "")
    assert not any(c[0] == "patch" for c in api.calls)


def test_the_old_version_available_and_the_new_one_loading_is_not_served(fake, export: Path) -> None:  # type: ignore[no-untyped-def]
    """TF Serving keeps serving version 1 while version 2 loads: the new model is not there
    yet, and it never gets there within the timeout: the step fails and rolls back."""
    api = fake(previous_deployment(), [DONE, DONE])
    loading = status_body((1, "AVAILABLE"), (2, "LOADING"))
    with standin("model", [(200, loading)]) as tfs:
        result = _serve(tfs.url, export)
    assert not result.succeeded and result.rolled_back, result.message
    assert "model model is not served" in (result.message or "") and "waiting for version(s) 2" in (result.message or "")
    assert result.served_versions == [1]
    assert api.template() == OLD_TEMPLATE


def test_the_new_version_coming_up_after_a_while_is_served(fake, export: Path) -> None:  # type: ignore[no-untyped-def]
    fake(None, [DONE])
    loading = status_body((1, "AVAILABLE"), (2, "LOADING"))
    with standin("model", [(200, loading), (200, SERVED)]) as tfs:
        result = _serve(tfs.url, export)
    assert result.succeeded and result.version == 2, result.message


def test_without_the_model_directory_any_available_version_counts(fake) -> None:  # type: ignore[no-untyped-def]
    """The step cannot know the newest version without seeing the directory: "latest" is
    whatever TF Serving reports AVAILABLE."""
    fake(None, [DONE])
    with standin("model", [(200, status_body((7, "AVAILABLE")))]) as tfs:
        result = _serve(tfs.url)
    assert result.succeeded and result.version == 7
