"""`vpipe sync webhdfs://...` pointed at something that is not a NameNode's HTTP port (issue 33,
items 1 and 10): a real local server answering another service's JSON, a web page, or a plain
web server's 404. Each is one sentence, exit 3, the --json report, and asked once (the answer
does not change on retry)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.hostile_servers import serve
from volcano_pipelines.cli import main
from volcano_pipelines.errors import EXIT_CLUSTER


@pytest.mark.parametrize(("kind", "said"), [
    ("json-other", "does not answer like a WebHDFS"),
    ("json-list", "does not answer like a WebHDFS"),
    ("html", "does not answer like a WebHDFS"),
    ("html-404", "answered HTTP 404 (text/html)"),
])
def test_a_server_that_is_not_webhdfs_is_one_sentence_and_exit_3(kind: str, said: str, tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    with serve(kind) as server:
        address = server.url.split("//", 1)[1]
        code = main(["sync", f"webhdfs://{address}/data", str(tmp_path / "d"), "--json", "-q"])
    out, err = capsys.readouterr()
    assert code == EXIT_CLUSTER, err
    report = json.loads(out)  # the report comes whatever failed
    assert report["ok"] is False and said in report["error"] and address in report["error"]
    assert err.strip() == f"vpipe: error: {report['error']}"
    assert len(server.requests) == 1, server.requests  # no retries of an answer that cannot change
    assert not (tmp_path / "d").exists() or not any((tmp_path / "d").iterdir())
