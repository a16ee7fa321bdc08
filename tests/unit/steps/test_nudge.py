"""The nudge for a job Volcano's controller missed (issue 42 item 8, issue 41): asked for only
when the admitted job's pods have stopped changing for stuck_admitted_seconds (a gang of
thousands is still being created while its pods appear), and a later Pending (a restart) is
a new wait, not 'still Pending' since the first one."""

from __future__ import annotations

from typing import Any

from tests.helpers.waiting import wait
from tests.unit.steps.memory_backend import FakeClock, MemoryBackend, job
from volcano_pipelines.backends.base import Scheduling


def test_no_nudge_while_the_gangs_pods_still_appear_then_one_once_they_stop() -> None:
    clock = FakeClock()
    # 2,000 workers created 100 every 5 s for 100 s (Pending throughout), then nothing changes.
    growing: list[Any] = [job("Pending", tasks={"worker": {"Pending": 100 * n}}) for n in range(1, 21)]
    still = [None] * 8  # 40 s with the same 2,000 pods
    backend = MemoryBackend(growing + still + [job("Running"), job("Completed")], clock, tick=5.0)
    backend.hint = Scheduling(admitted=True)
    result = wait(backend, clock, hint_interval_seconds=5, stuck_admitted_seconds=30)
    assert result.succeeded
    assert backend.calls.count("nudge") == 1  # only once the pods had stopped appearing for 30 s


def test_a_restart_is_a_new_wait_not_still_pending_since_the_first(caplog: Any) -> None:
    clock = FakeClock()
    script: list[Any] = [job("Pending"), None, None, None]  # 20 s admitted: not stuck yet
    script += [job("Running")] + [None] * 12  # runs 60 s
    script += [job("Restarting", retries=1), job("Pending", retries=1), None, job("Running", retries=1),
               job("Completed", retries=1)]
    backend = MemoryBackend(script, clock, tick=5.0)
    backend.hint = Scheduling(admitted=True)
    result = wait(backend, clock, hint_interval_seconds=5, stuck_admitted_seconds=30)
    assert result.succeeded
    assert "nudge" not in backend.calls
    assert "asking the controller" not in caplog.text
