"""Shared fixtures: each harness lives in its own module and is loaded as a plugin."""

import importlib.util

pytest_plugins = [
    name
    for name in ("tests.cluster.fixtures", "tests.node.fixtures", "tests.storage.fixtures", "tests.images.fixtures",
                 "tests.kfp_docker.fixtures", "tests.argo.fixtures", "tests.helpers.timing")
    if importlib.util.find_spec(name) is not None
]
