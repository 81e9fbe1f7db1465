"""The task registry: every task is one small class, registered here by name."""

from __future__ import annotations

from ..errors import FlatformerError
from .add_mod import AddMod5
from .after_last_even import AfterLastEven
from .base import Task
from .corpus import corpus_for_run
from .copy_back import CopyThreeBack
from .first_even import FirstEven
from .induction import Induction
from .last_odd import LastOdd
from .max_so_far import MaxSoFar
from .modular_addition import ModularAddition
from .plus_last_even import PlusLastEven
from .successor import Successor
from .tiny_grammar import TinyGrammar
from ..errors import did_you_mean

TASKS: dict[str, type[Task]] = {
    cls.name: cls
    for cls in [
        PlusLastEven,
        LastOdd,
        FirstEven,
        Successor,
        AddMod5,
        MaxSoFar,
        CopyThreeBack,
        AfterLastEven,
        TinyGrammar,
        ModularAddition,
        Induction,
    ]
}


def get_task(name: str, settings: dict | None = None) -> Task:
    """The task called `name`, with its own `settings` (see Task.settings) if any; an unknown
    name or setting raises a one-line FlatformerError naming the ones that exist.

    Examples:
        >>> get_task("modular-addition", {"p": 31}).p
        31
        >>> "plus-last-even" in TASKS
        True
    """
    if name == "corpus":
        raise FlatformerError(
            "the corpus task is built from a text file: "
            "flatformer train --corpus FILE [--tokenizer word|char]"
        )
    if name not in TASKS:
        raise FlatformerError(
            f"unknown task {name!r}{did_you_mean(name, TASKS)}; choose one of "
            f"{', '.join(sorted(TASKS))} (flatformer tasks lists them)"
        )
    cls = TASKS[name]
    if settings is not None and not isinstance(settings, dict):
        raise FlatformerError(
            f"task settings must be an object of name: value, got {settings!r:.40}"
        )
    unknown = sorted(map(str, set(settings or {}) - set(cls.settings)))
    if unknown:
        raise FlatformerError(
            f"task {name} has no setting {unknown[0]!r}{did_you_mean(unknown[0], cls.settings)}"
        )
    return cls(**(settings or {}))


def task_for_run(config: dict) -> Task:
    """The task a run folder's config names (a corpus run's config holds its text)."""
    if config.get("task") == "corpus":
        return corpus_for_run(config)
    if config.get("task") == "imported":
        from .imported import imported_for_run
        from .program import program_for_run

        imported = config.get("imported")
        rasp = imported.get("rasp") if isinstance(imported, dict) else None
        if isinstance(rasp, dict):  # a compiled program: its targets are classes
            return program_for_run(config, rasp)
        return imported_for_run(config)
    return get_task(config["task"], config.get("task_settings"))
