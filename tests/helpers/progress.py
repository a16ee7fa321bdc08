"""A Progress that records what a step showed: its notes and every training state, in order."""

from __future__ import annotations

from volcano_pipelines.progress import Progress
from volcano_pipelines.volcano.report_lines import TrainingProgress
from volcano_pipelines.volcano.status import JobStatus
from volcano_pipelines.volcano.summary import JobSummary


class RecordingProgress(Progress):
    def __init__(self) -> None:
        self.training_states: list[TrainingProgress] = []
        self.notes: list[str] = []
        self.summaries: list[JobSummary] = []

    def job(self, name: str, status: JobStatus, problem: str | None) -> None:
        pass

    def note(self, line: str) -> None:
        self.notes.append(line)

    def warn(self, line: str) -> None:
        self.note(line)  # recorded with the notes, through note() so a subclass sees warnings too

    def training(self, name: str, state: TrainingProgress) -> None:
        self.training_states.append(state)

    def summary(self, summary: JobSummary) -> None:
        self.summaries.append(summary)
