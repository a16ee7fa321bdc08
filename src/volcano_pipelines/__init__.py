"""Reusable pipeline steps for distributed TensorFlow / MPI training on Kubernetes with Volcano."""

__version__ = "0.1.0"
