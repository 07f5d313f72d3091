"""Errors raised by stretto: a plan (or spec, or builder output) that cannot be used."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import List


@dataclass(frozen=True)
class Note:
    """A place a diagnostic also points at (e.g. another directive of a deadlock cycle)."""

    file: str
    line: int
    column: int
    json_pointer: str
    message: str


@dataclass(frozen=True)
class Diagnostic:
    """One located problem, as the CLI prints it.

    ``line``/``column`` are 1-based (0: unknown); ``json_pointer`` is RFC 6901 ("" = the whole
    document); ``directive`` is the index into the schedule (-1: not about a directive);
    ``text`` is the CLI's rendering (location, message, source line with a caret, hint, notes).
    """

    severity: str
    message: str
    file: str
    line: int
    column: int
    json_pointer: str
    directive: int
    hint: str
    source_line: str
    text: str
    notes: List[Note] = field(default_factory=list)

    @property
    def location(self) -> str:
        """"file:line:col (/pointer)" as the CLI writes it."""
        where = self.file
        if self.line:
            where += f":{self.line}:{self.column}"
        if self.json_pointer:
            where += f" ({self.json_pointer})"
        return where


class PlanError(ValueError):
    """A plan, sweep spec or directive list that Stretto refuses.

    ``str(err)`` is the text ``stretto`` prints on stderr for the same input (exit code 2);
    ``err.diagnostics`` holds each problem with its location and hint.
    """

    def __init__(self, text: str, diagnostics: List[Diagnostic]):
        super().__init__(text.rstrip("\n"))
        self.text = text
        self.diagnostics = diagnostics


def _from_native(text: str, diags: list) -> PlanError:
    """Builds the PlanError the native module raises (it passes plain dicts)."""
    out = []
    for d in diags:
        notes = [Note(**n) for n in d.pop("notes")]
        out.append(Diagnostic(notes=notes, **d))
    return PlanError(text, out)
