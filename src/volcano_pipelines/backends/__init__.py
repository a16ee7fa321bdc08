"""Where a rendered Volcano Job runs: `cluster` (a Kubernetes API server with Volcano) or
`local` (processes on this machine with the environment Volcano would give them). Both sit
behind the protocol in `base`; the wait policy in `steps._waiting` is written once against it."""
