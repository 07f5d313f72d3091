"""Schedule builders as functions: the directives a plan's ``"schedule": {"builder": ...}``
expands to (the same library code, pipelines/builders.h), as a list of directive dicts.

    >>> from stretto import builders
    >>> ds = builders.dualpipev(ranks=4, microbatches=16)
    >>> plan = stretto.Plan.from_dict(dict(base_doc, schedule=ds))

``base`` is a directive list (placements, replication, ...) the schedule keeps first, as a
builder call's ``base``; ``layout`` ({"tp", "pp", "dp", "ep", "cp", "cp_comm_type", "order",
"zero", "sequence_parallel", "tp_comm_overlap"}) generates that base instead. Errors raise :class:`stretto.PlanError`
pointing into the call (``/base/3``, ``/microbatches``).

A builder of your own is any function returning such a list; :meth:`stretto.Plan.from_builder`
validates and compiles it like a plan.
"""

from __future__ import annotations

import inspect
import json
import numbers
from typing import Any, Dict, List, Mapping, Optional, Sequence

from . import _stretto as _native

Directive = Dict[str, Any]


def families() -> List[str]:
    """Canonical family names, in the order `stretto build-schedule --help` lists them."""
    return list(_native.family_names())


def build(
    family: str,
    *,
    microbatches: int,
    ranks: Optional[int] = None,
    stages_per_rank: Optional[int] = None,
    base: Optional[Sequence[Mapping[str, Any]]] = None,
    layout: Optional[Mapping[str, Any]] = None,
) -> List[Directive]:
    """Directives of builder ``family`` (any spelling a plan accepts: "1f1b",
    "ScheduleInterleaved1F1B", ...). ``ranks`` defaults to the layout's pp or to the number of
    stage placements in ``base``; ``stages_per_rank`` to the family's default."""
    call: Dict[str, Any] = {"builder": family}
    for key, value in (("ranks", ranks), ("stages_per_rank", stages_per_rank),
                       ("microbatches", microbatches)):
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, numbers.Integral):
            raise TypeError(f"{key} must be an integer, got {value!r}")
        call[key] = int(value)
    if base is not None:
        call["base"] = list(base)
    if layout is not None:
        call["layout"] = dict(layout)
    from . import _dumps  # the package's JSON writer (NumPy values allowed)

    text = _native.build_directives(_dumps(call), f"<builders.build({family!r})>")
    return json.loads(text)


def _family_function(family: str, pyname: str):
    def builder(**kwargs: Any) -> List[Directive]:
        return build(family, **kwargs)

    # help() and editors show build's keywords (the stubs, builders.pyi, spell them out).
    sig = inspect.signature(build)
    builder.__signature__ = sig.replace(parameters=list(sig.parameters.values())[1:])
    builder.__name__ = builder.__qualname__ = pyname
    builder.__doc__ = f"Directives of the {family!r} schedule (see :func:`build`)."
    return builder


# One function per family; names that are not identifiers are spelled out.
_PYNAMES = {"1f1b": "one_f_one_b", "interleaved-1f1b": "interleaved_1f1b"}
for _family in _native.family_names():
    _name = _PYNAMES.get(_family, _family.replace("-", "_"))
    globals()[_name] = _family_function(_family, _name)
del _family, _name
