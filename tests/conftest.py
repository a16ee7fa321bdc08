"""Shared fixtures: each harness lives in its own module and is loaded as a plugin."""

import importlib.util

import pytest

# The helpers the test modules share (tests/helpers/) assert as the tests do: their asserts are
# rewritten too, so that a failing one shows its values.
pytest.register_assert_rewrite("tests.helpers")

pytest_plugins = [
    name
    for name in ("tests.cluster.fixtures", "tests.node.fixtures", "tests.storage.fixtures", "tests.images.fixtures",
                 "tests.kfp_docker.fixtures", "tests.argo.fixtures", "tests.helpers.timing")
    if importlib.util.find_spec(name) is not None
]
