"""Running a rendered Volcano Job on this machine: each task replica is a process group with
the environment Volcano's `env` and `svc` plugins and the kubelet would give it. `plan` turns
the Job dict into per-replica processes (pure), `processes` starts and stops them, `runner`
applies the job's policies; `volcano_pipelines.backends.local` puts it behind the backend
protocol."""
