"""The task registry: every task is one small class, registered here by name."""

from __future__ import annotations

from ..errors import FlatformerError
from .base import Task
from .plus_last_even import PlusLastEven

TASKS: dict[str, type[Task]] = {cls.name: cls for cls in [PlusLastEven]}


def get_task(name: str) -> Task:
    if name not in TASKS:
        raise FlatformerError(f"unknown task {name!r}; choose one of {', '.join(sorted(TASKS))} "
                              f"(flatformer tasks lists them)")
    return TASKS[name]()


def task_for_run(config: dict) -> Task:
    """The task a run folder's config names."""
    return get_task(config["task"])
