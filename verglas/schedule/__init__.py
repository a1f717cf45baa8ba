"""The scheduler: a frozen graph becomes a Program every backend executes."""

from verglas.schedule.lower import lower
from verglas.schedule.program import Buffer, Program, Step, is_metadata_step

__all__ = ["lower", "is_metadata_step", "Buffer", "Program", "Step"]
