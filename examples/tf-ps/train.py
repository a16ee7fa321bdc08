"""Entry of the TensorFlow parameter-server example: `--api=tf2` (default) runs
ParameterServerStrategy with a ClusterCoordinator on the chief (tf2_ps.py), `--api=tf1` runs
TF1-style between-graph asynchronous training (tf1_ps.py). See README.md."""

from __future__ import annotations

import os
import sys

import common


def main() -> int:
    args = common.parse_args()
    os.makedirs(args.log_dir, exist_ok=True)
    common.log(f"{args.job_name} {args.task_index}: api={args.api} data_dir={args.data_dir} log_dir={args.log_dir}")
    common.start_heartbeat(args)
    if args.api == "tf1":
        import tf1_ps

        return tf1_ps.run(args)
    import tf2_ps

    return tf2_ps.run(args)


if __name__ == "__main__":
    sys.exit(main())
