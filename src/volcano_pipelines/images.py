"""The project's container images (built from images/ in the repository), tagged with the
package version so that an image and the code that names it never disagree."""

from __future__ import annotations

from volcano_pipelines import __version__

__all__ = ["IMAGES", "MPI_TRAINER_IMAGE", "REPOSITORY_PREFIX", "RUNTIME_IMAGE", "TENSORBOARD_IMAGE", "TF_TRAINER_IMAGE"]

REPOSITORY_PREFIX = "volcano-pipelines"
# The package with its sync and kfp extras: every KFP component and Argo template runs in it.
RUNTIME_IMAGE = f"{REPOSITORY_PREFIX}/runtime:{__version__}"
# Trainers implementing the entry-point contract (bash + python3, and TensorFlow or Open MPI
# with sshd); `--image` takes them or any image that has what the contract needs.
TF_TRAINER_IMAGE = f"{REPOSITORY_PREFIX}/trainer-tf:{__version__}"
MPI_TRAINER_IMAGE = f"{REPOSITORY_PREFIX}/trainer-mpi:{__version__}"
TENSORBOARD_IMAGE = f"{REPOSITORY_PREFIX}/tensorboard:{__version__}"

# images/<name>/Dockerfile -> tag
IMAGES: dict[str, str] = {
    "runtime": RUNTIME_IMAGE,
    "trainer-tf": TF_TRAINER_IMAGE,
    "trainer-mpi": MPI_TRAINER_IMAGE,
    "tensorboard": TENSORBOARD_IMAGE,
}
