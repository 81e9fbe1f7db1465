"""The residual stream of a compiled program: one named direction per (S-op, value) for a
categorical S-op, one per numerical S-op, plus `one` (1 at every position), `bos` (1 at the
beginning-of-sequence position only) and each SelectorWidth's attention scratch, as tracr lays
it out (Lindner et al. 2023)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Direction:
    """A residual direction: the variable it stores and, for a categorical one, the value."""

    variable: str
    value: object = None
    numerical: bool = False
    bound: float = 1.0  # the largest magnitude the direction holds (gates MLPs at BOS)

    @property
    def name(self) -> str:
        return self.variable if self.numerical else f"{self.variable}:{self.value}"


class Residual:
    """Directions in the order they were added; `at(variable, value)` is a direction's index."""

    def __init__(self):
        self.directions: list[Direction] = []
        self._index: dict[tuple, int] = {}

    def __len__(self):
        return len(self.directions)

    def add(self, direction: Direction) -> int:
        key = self._key(direction.variable, direction.value, direction.numerical)
        if key not in self._index:
            self._index[key] = len(self.directions)
            self.directions.append(direction)
        return self._index[key]

    def has(self, variable: str, value=None, numerical: bool = False) -> bool:
        return self._key(variable, value, numerical) in self._index

    def at(self, variable: str, value=None, numerical: bool = False) -> int:
        return self._index[self._key(variable, value, numerical)]

    @staticmethod
    def _key(variable, value, numerical):
        return (variable, "numerical") if numerical else (variable, "value", value)
