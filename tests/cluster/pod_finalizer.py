"""The last step of a pod's deletion on the fake (kwok) nodes, done the way a kubelet does it.

A pod with a deletion timestamp and no finalizers is removed for good with a zero grace
period and **its UID as a precondition**, so the call can only ever remove that pod.

Why not kwok's own delete stage: kwok v0.8.0 deletes by name with no precondition
(``pkg/kwok/controllers/pod_controller.go`` ``deleteResource``) and can play the stage twice
for one pod; the second call then removes the new pod of the same name that Volcano has
just created for the job's next run. Volcano sees that as one more eviction and restarts the
job again. CI saw it three times: a retry counted twice for one eviction, a worker pod
created three times for two runs, and a failed worker gone before the exit handler could
read its exit code. A kubelet never does this (its status manager deletes with the pod's
UID as precondition), so the stand-in must not either.

Started by tests/cluster/launcher.py next to kwok as a process of the control plane
(``pod-finalizer.log``); plain script, only the ``kubernetes`` client.
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from typing import Any

# A kubelet takes a moment to stop containers; kwok's stage waited 200 ms. Observers
# (the step's pod watch) see the terminating pod for about as long as before.
DELAY_SECONDS = 0.2


def log(message: str) -> None:
    print(f"{time.strftime('%H:%M:%S')} {message}", flush=True)


class Finalizer:
    def __init__(self, kubeconfig: str, fake_node_selector: str) -> None:
        from kubernetes import client, config

        self.client = client
        self.core = client.CoreV1Api(config.new_client_from_config(config_file=kubeconfig))
        self.selector = fake_node_selector
        self.fake_nodes: set[str] = set()
        self.other_nodes: set[str] = set()  # names listed once and not fake (the real node)
        self.done: set[str] = set()  # UIDs already removed (or found gone)
        self.lock = threading.Lock()

    def is_fake(self, node: str | None) -> bool:
        if not node:
            return False  # never bound: the API server removes such a pod itself
        if node not in self.fake_nodes and node not in self.other_nodes:
            # A node not seen before: list once. Every update of a terminating pod on the real
            # node comes here, so its name is remembered too rather than listed again each time.
            self.fake_nodes = {n.metadata.name for n in self.core.list_node(label_selector=self.selector).items}
            if node not in self.fake_nodes:
                self.other_nodes.add(node)
        return node in self.fake_nodes

    def consider(self, pod: Any) -> None:
        meta = pod.metadata
        if meta.deletion_timestamp is None or meta.finalizers or not self.is_fake(pod.spec.node_name):
            return
        with self.lock:
            if meta.uid in self.done:
                return
            self.done.add(meta.uid)
        timer = threading.Timer(DELAY_SECONDS, self.remove, args=(meta.namespace, meta.name, meta.uid))
        timer.daemon = True
        timer.start()

    def remove(self, namespace: str, name: str, uid: str) -> None:
        body = self.client.V1DeleteOptions(grace_period_seconds=0, preconditions=self.client.V1Preconditions(uid=uid))
        try:
            self.core.delete_namespaced_pod(name, namespace, body=body)
            log(f"removed pod {namespace}/{name} uid {uid}")
        except self.client.ApiException as err:
            if err.status not in (404, 409):  # gone already; or the name is a new pod's now
                with self.lock:
                    self.done.discard(uid)  # let the next event of this pod try again
                log(f"removing pod {namespace}/{name} uid {uid}: HTTP {err.status} {err.reason}")
            elif err.status == 409:
                log(f"pod {namespace}/{name}: uid {uid} is gone, the name belongs to another pod: left alone")
        except Exception as err:  # noqa: BLE001 - one failed call must not end the process
            with self.lock:
                self.done.discard(uid)
            log(f"removing pod {namespace}/{name} uid {uid}: {err}")

    def run(self) -> None:
        from kubernetes import watch

        while True:
            try:
                listed = self.core.list_pod_for_all_namespaces()
                for pod in listed.items:
                    self.consider(pod)
                stream = watch.Watch().stream(self.core.list_pod_for_all_namespaces,
                                              resource_version=listed.metadata.resource_version,
                                              timeout_seconds=300)
                for event in stream:
                    if event["type"] == "ERROR":
                        break  # e.g. 410 Gone: list again
                    if event["type"] in ("ADDED", "MODIFIED"):
                        self.consider(event["object"])
            except Exception as err:  # noqa: BLE001 - API server restarts in tests: reconnect
                log(f"watch: {type(err).__name__}: {str(err)[:200]}; listing again in 1 s")
                time.sleep(1)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument("--fake-node-selector", required=True, help="label selector of the kwok nodes")
    args = parser.parse_args(argv)
    log(f"finalizing deleted pods on nodes {args.fake_node_selector}")
    Finalizer(args.kubeconfig, args.fake_node_selector).run()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
