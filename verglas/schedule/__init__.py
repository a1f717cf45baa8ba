"""The scheduler: a frozen graph becomes a Program every backend executes."""

from verglas.schedule.lower import is_metadata_step, lower
from verglas.schedule.program import Buffer, Program, Step

__all__ = ["lower", "is_metadata_step", "Buffer", "Program", "Step"]
