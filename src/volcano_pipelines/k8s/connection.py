"""The cluster connection as the steps take it: one parameter group (interface/params.py), light to
import (the Kubernetes client loads only when a step connects)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated

from volcano_pipelines.declaration import Doc, arg
from volcano_pipelines.k8s.kubeconfig import check_named, default_namespace

if TYPE_CHECKING:
    from volcano_pipelines.k8s.client import Cluster

__all__ = ["NAMESPACE", "Connection", "Namespace"]


@dataclass(frozen=True)
class Connection:
    """The cluster a step talks to: the one parameter group every cluster step takes
    (`connection: Connection = Connection()`). Its fields, their defaults and their help are
    written here only; the front ends show them as flat inputs (--kubeconfig, --context), as
    interface/params.py `params` spreads a group, and `grouped` gathers them back."""

    kubeconfig: str | None = arg(None, "kubeconfig file (default: in-cluster, then $KUBECONFIG / ~/.kube/config)")
    context: str | None = arg(None, "kubeconfig context")

    def connect(self) -> Cluster:
        """The client, connected (k8s/client.py `connect`; loads the Kubernetes client)."""
        from volcano_pipelines.k8s.client import connect

        return connect(self.kubeconfig, self.context)

    @property
    def in_cluster(self) -> bool:
        """Inside a pod with nothing named: the pod's own service account is used."""
        return not self.kubeconfig and not self.context and bool(os.environ.get("KUBERNETES_SERVICE_HOST"))

    def check(self) -> None:
        """A file or a context named that is not there is bad input (`check_named`)."""
        check_named(self.kubeconfig, self.context)

    def default_namespace(self) -> str:
        """Where a request naming no namespace goes, read without connecting."""
        return default_namespace(self.kubeconfig, self.context)


# A step's `namespace`, written once: what it names in each step that takes one, then where one
# not given goes (Connection.default_namespace, as kubectl: the context's, else default). A step
# annotates its parameter `namespace: Namespace = None` and writes no docstring line for it;
# `params` reads the help for the step's name (interface/params.py). The train steps' Run group
# takes the "train" wording for its field of the same name.
_NOT_GIVEN = "(default: the context's namespace, else default)"
_OF_THE_JOB = f"namespace of the job {_NOT_GIVEN}"
NAMESPACE = Doc(f"namespace {_NOT_GIVEN}", by_kind=(
    ("train", _OF_THE_JOB),
    ("status", _OF_THE_JOB),
    ("finish_run", f"namespace of the run's training job {_NOT_GIVEN}"),
    ("reap", f"namespace to look in {_NOT_GIVEN}"),
))
Namespace = Annotated[str | None, NAMESPACE]
