"""A Progress that records what a step showed: its notes and every training state, in order."""

from __future__ import annotations

from volcano_pipelines.progress import Progress
from volcano_pipelines.volcano.report_lines import TrainingProgress
from volcano_pipelines.volcano.status import JobStatus


class RecordingProgress(Progress):
    def __init__(self) -> None:
        self.training_states: list[TrainingProgress] = []
        self.notes: list[str] = []

    def job(self, name: str, status: JobStatus, problem: str | None) -> None:
        pass

    def note(self, line: str) -> None:
        self.notes.append(line)

    def warn(self, line: str) -> None:
        self.notes.append(line)

    def training(self, name: str, state: TrainingProgress) -> None:
        self.training_states.append(state)
