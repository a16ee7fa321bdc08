"""Test helpers shared across suites: an HTTP file server, file trees, running `vpipe`."""
