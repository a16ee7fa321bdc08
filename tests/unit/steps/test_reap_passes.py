"""The reap sweeper's passes under a storm of pod events: while an 11,000-pod gang starts its
pods change many times a second, and a pass over every unit per burst of events cost 115
CPU-seconds in 7 minutes (docs/scale.md). Passes come at most once a second
(lifecycle/sweep.py PASS_INTERVAL_SECONDS), and the last event of a storm is still decided on."""

from __future__ import annotations

import threading
import time
from datetime import timedelta

from tests.helpers.reaping import InMemorySweep, Recorder, T0, pod, trained_job
from volcano_pipelines.lifecycle import sweep as sweeper


def test_a_storm_of_pod_events_gets_a_pass_a_second_and_its_last_event_is_acted_on(actions: Recorder) -> None:
    listings = trained_job()
    still_training = pod("j-worker-1", "worker", "Running")
    listings["vpods"] = [still_training if p["metadata"]["name"] == "j-worker-1" else p for p in listings["vpods"]]
    sweep = InMemorySweep(listings, now=T0 + timedelta(seconds=21), grace=0, job="j", timeout=20)
    actions.live["sweep"] = sweep  # type: ignore[attr-defined]
    storm_seconds = 2.0

    def storm() -> None:  # the worker's pod changes every 2 ms, then it succeeds
        ends = time.monotonic() + storm_seconds
        while time.monotonic() < ends:
            sweep.events.put(("MODIFIED", "vpods", still_training))
            time.sleep(0.002)
        sweep.events.put(("MODIFIED", "vpods", pod("j-worker-1", "worker", "Succeeded", finished=20)))

    started = time.monotonic()
    feeder = threading.Thread(target=storm, daemon=True)
    feeder.start()
    result = sweep.run()
    seconds = time.monotonic() - started
    feeder.join()
    assert result.succeeded and [(r.name, r.action) for r in result.reaped] == [("j", "completed")], result
    assert actions.calls[0] == ("command", "j", "CompleteJob", sweeper.COMMAND_REASON)
    # Hundreds of events, a pass per second of them (plus the first and the one that acts).
    assert sweep.passes <= seconds / sweeper.PASS_INTERVAL_SECONDS + 2, (sweep.passes, seconds)
    assert seconds >= storm_seconds
