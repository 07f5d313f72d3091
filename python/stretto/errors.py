"""Errors raised by stretto (a plan, spec or builder output that cannot be used) and the
warnings a simulation raises."""

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
    ``text`` is the CLI's rendering (location, message, source line with a caret, hint, notes);
    ``code`` names the kind of a warning (``"unused-devices"``, ...; empty for errors).
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
    code: str = ""

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


class StrettoWarning(UserWarning):
    """A warning about a simulated step, the one ``stretto simulate`` prints on stderr
    (devices the plan never uses, compute imbalance above 10 %, a large plan simulated without
    folding replicas, a profiled table covering under 90 % of the plan).

    ``str(w)`` is the CLI's message and hint; ``w.code`` its kind (``"unused-devices"``,
    ``"compute-imbalance"``, ``"fold-replicas-hint"``, ``"low-table-coverage"``);
    ``w.diagnostic`` the whole :class:`Diagnostic` (location in the plan, message, hint).
    """

    def __init__(self, diagnostic: Diagnostic):
        text = diagnostic.message
        if diagnostic.hint:
            text += f"\n  hint: {diagnostic.hint}"
        super().__init__(text)
        self.diagnostic = diagnostic
        self.code = diagnostic.code


def _diagnostic(d: dict) -> Diagnostic:
    d = dict(d)
    notes = [Note(**n) for n in d.pop("notes")]
    return Diagnostic(notes=notes, **d)


def _from_native(text: str, diags: list) -> PlanError:
    """Builds the PlanError the native module raises (it passes plain dicts)."""
    return PlanError(text, [_diagnostic(d) for d in diags])
