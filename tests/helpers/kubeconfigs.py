"""Kubeconfig texts for CLI tests that must not reach a server: every cluster is an address
where nothing listens (port 9, discard), so only the client side (contexts, namespaces) is
exercised."""

from __future__ import annotations

# Contexts: `team` (current; namespace team-a), `other` (team-b), `bare` (no namespace).
TEAM_CONTEXTS = """apiVersion: v1
kind: Config
current-context: team
clusters: [{name: c, cluster: {server: "http://127.0.0.1:9"}}]
users: [{name: u, user: {token: t}}]
contexts:
- {name: team, context: {cluster: c, user: u, namespace: team-a}}
- {name: other, context: {cluster: c, user: u, namespace: team-b}}
- {name: bare, context: {cluster: c, user: u}}
"""
