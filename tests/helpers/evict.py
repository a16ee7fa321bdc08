"""Evicting a training pod through the Eviction API while a step waits for its job, the way a
node drain or `kubectl evict` does (with the default grace period or none)."""

from __future__ import annotations

import threading
import time
from typing import Any

__all__ = ["Evictor", "evict"]


def evict(core: Any, namespace: str, pod: str, grace: int | None) -> None:
    """One eviction of `pod` through the Eviction API now (`grace` None: the pod's own
    terminationGracePeriodSeconds, Kubernetes' default 30 s; 0: none)."""
    from kubernetes import client

    options = client.V1DeleteOptions(grace_period_seconds=grace) if grace is not None else None
    body = client.V1Eviction(metadata=client.V1ObjectMeta(name=pod, namespace=namespace), delete_options=options)
    core.create_namespaced_pod_eviction(pod, namespace, body)


class Evictor:
    """Evicts pod `pod` through the Eviction API once it has run `after` seconds, each new
    incarnation (uid) once, at most `times` times."""

    def __init__(self, cluster: Any, namespace: str, pod: str, *, grace: int | None, times: int = 1,
                 after: float = 4.0) -> None:
        from kubernetes import client

        self.core = client.CoreV1Api(cluster.api_client())
        self.namespace, self.pod, self.grace, self.times, self.after = namespace, pod, grace, times, after
        self.evicted: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        from kubernetes import client

        while not self._stop.is_set() and len(self.evicted) < self.times:
            try:
                pod = self.core.read_namespaced_pod(self.pod, self.namespace)
            except client.ApiException:
                time.sleep(0.5)
                continue
            started = pod.status.start_time
            running = pod.status.phase == "Running" and not pod.metadata.deletion_timestamp
            if running and pod.metadata.uid not in self.evicted and started is not None \
                    and time.time() - started.timestamp() >= self.after:
                try:
                    evict(self.core, self.namespace, self.pod, self.grace)
                    self.evicted.append(pod.metadata.uid)
                except client.ApiException:
                    pass
            time.sleep(0.5)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
