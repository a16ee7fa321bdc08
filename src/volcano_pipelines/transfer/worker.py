"""The copy pod's program: `python -m volcano_pipelines.transfer.worker --root DIR --run-id ID`
copies partition $VK_TASK_INDEX (Volcano's env plugin numbers a task's pods from 0) of the run
(transfer/part.py). Not a user command: the coordinator (`vpipe sync --workers N`) writes the
run and builds the pods that call this.

Exit 0 when the partition was carried out, even with files that failed (the coordinator reports
them: copying them again would fail again); 1 when the pod stopped early (destination full or
refusing, source unreachable) or could not start: the job's policy restarts it (maxRetry)."""

from __future__ import annotations

import argparse
import logging
import os
import sys

from volcano_pipelines.errors import VpipeError
from volcano_pipelines.labels import POD_NAME_ENV
from volcano_pipelines.progress import configure_logging
from volcano_pipelines.transfer.part import run_part

log = logging.getLogger("volcano_pipelines.sync.worker")
INDEX_ENV = ("VK_TASK_INDEX", "VC_TASK_INDEX")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="volcano_pipelines.transfer.worker", description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", required=True, help="the destination directory (the mounted volume)")
    parser.add_argument("--run-id", required=True, help="the run whose partition to copy")
    parser.add_argument("--part", type=int, default=None, help="partition index (default: $VK_TASK_INDEX)")
    args = parser.parse_args(argv)
    configure_logging()
    index = args.part
    if index is None:
        found = next((os.environ[name] for name in INDEX_ENV if os.environ.get(name, "").isdigit()), None)
        if found is None:
            log.error("no partition: give --part or run in a Volcano pod with the env plugin ($VK_TASK_INDEX)")
            return 2
        index = int(found)
    pod = os.environ.get(POD_NAME_ENV) or os.environ.get("HOSTNAME", "")
    try:
        result = run_part(args.root, args.run_id, index, pod=pod)
    except (VpipeError, OSError, RuntimeError) as err:
        log.error("partition %d of run %s: %s", index, args.run_id, err)
        return 1
    log.info("partition %d: copied %d (%.1f MB, %.1f MB/s), already there %d, failed %d in %.1fs", index,
             result.copied, result.bytes_copied / 1e6, result.throughput_mb_s, result.skipped, result.failed,
             result.duration_s)
    if result.fatal:
        log.error("partition %d stopped early: %s", index, result.fatal)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
