"""A job's post-mortem record, in one place (issue 30): record.py builds it (pure: the dicts the
API returned and the log text read beside them in, the JSON-ready record out) and markdown.py
writes its Markdown summary (pure); reads.py makes the bounded cluster reads behind it and
save.py is where it is saved (`save_post_mortem`, the one call before anything deletes a job;
the local backend writes its own records through `write_record`).

The names of the two variables that say where records go are here, on the package, so that the
pipelines' declaration (steps/pipelines.py) reads them without loading the Kubernetes client."""

from __future__ import annotations

__all__ = ["POST_MORTEM_DIR_ENV", "POST_MORTEM_VOLUME_DIR_ENV"]

# Where a step saves its post-mortem records when set (save.py default_directory); a pipeline
# points it at an output (kfp/runtime.py: the component's post_mortem artifact).
POST_MORTEM_DIR_ENV = "VPIPE_POST_MORTEM_DIR"
# A second place for the same records, set by the pipelines on the step pods that mount the
# run's log PVC (steps/pipelines.py POST_MORTEM_VOLUME_DIR): the record is kept next to the
# run's logs too. A copy that cannot be written there is a note, never a failed step.
POST_MORTEM_VOLUME_DIR_ENV = "VPIPE_POST_MORTEM_VOLUME_DIR"
