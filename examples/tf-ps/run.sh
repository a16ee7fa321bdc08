#!/usr/bin/env bash
# The entry point the job runs (README: "Entry point contract"): the container calls it with
# --job_name --task_index --ps_hosts --worker_hosts --data_dir --log_dir --shard_index
# --num_shards, then the job's own arguments (e.g. --api=tf1 --steps=300). TF_CONFIG is set.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"
exec python3 train.py "$@"
