"""Test helpers shared across suites: an HTTP file server, file trees, running `vpipe`, and what
test modules share (no test module imports another: tests/unit/test_tests_stand_alone.py)."""
