"""Stretto from Python: plans, simulation, builders, sweeps and search.

A thin layer over the library the ``stretto`` command uses: a plan opens and compiles exactly as
``stretto simulate PLAN`` opens it, and a result has the fields and names of
``stretto simulate --format json`` (docs/semantics.md says what each means). Bad input raises
:class:`PlanError` with the CLI's located diagnostics. Compiling and simulating release the GIL,
so threads run plans in parallel. Walk-through: docs/python.md.

    >>> import stretto
    >>> r = stretto.simulate("examples/gpt_pp4_dp2_1f1b.json")
    >>> r.step_time_ms, r["devices"][0]["peak_memory_bytes"]
"""

from __future__ import annotations

import json
import os
import warnings as _pywarnings
from collections.abc import Mapping
from typing import Any, Callable, Dict, Iterator, List, Optional, Union

from . import _stretto as _native
from .errors import Diagnostic, Note, PlanError, StrettoWarning, _diagnostic

try:  # optional: arrays for curves and op tables
    import numpy as _np
except ImportError:  # pragma: no cover - depends on the installation
    _np = None

__all__ = [
    "Diagnostic",
    "Note",
    "Plan",
    "PlanError",
    "Result",
    "StrettoWarning",
    "builders",
    "load_validation",
    "search",
    "simulate",
    "sweep",
    "sweep_results",
]

PathLike = Union[str, "os.PathLike[str]"]


def _json_default(value: Any) -> Any:
    # NumPy scalars and arrays (a builder may compute device lists with NumPy).
    if hasattr(value, "tolist"):
        return value.tolist()
    raise TypeError(f"{value!r} ({type(value).__name__}) is not a JSON value")


def _dumps(value: Any) -> str:
    return json.dumps(value, default=_json_default, allow_nan=False)


def _plan_text(doc: Mapping) -> str:
    """A plan document as JSON text with one top-level member per line and one directive per
    line, so that a diagnostic's line and caret show the directive at fault."""
    if not isinstance(doc, Mapping):
        raise TypeError(f"a plan must be a dict, got {type(doc).__name__}")
    lines = []
    for key, value in doc.items():
        if not isinstance(key, str):
            raise TypeError(f"plan keys must be strings, got {key!r}")
        if key == "schedule" and isinstance(value, (list, tuple)):
            items = ",\n".join("    " + _dumps(d) for d in value)
            lines.append(f"  {_dumps(key)}: [\n{items}\n  ]" if value else f"  {_dumps(key)}: []")
        else:
            lines.append(f"  {_dumps(key)}: {_dumps(value)}")
    return "{\n" + ",\n".join(lines) + "\n}\n"


class Plan:
    """A parsed and compiled plan (a ``sim::Session``: the plan the CLI would run).

    Build one with :meth:`load`, :meth:`from_dict`, :meth:`from_json` or
    :meth:`from_builder`; each raises :class:`PlanError` when the CLI would refuse the plan.
    """

    __slots__ = ("_native",)

    def __init__(self, native: Any):
        self._native = native

    @classmethod
    def load(cls, path: PathLike) -> "Plan":
        """Reads, parses and compiles a plan file (as ``stretto simulate PATH``)."""
        return cls(_native.open_plan(os.fspath(path)))

    @classmethod
    def from_json(cls, text: str, *, name: str = "<string>", base_dir: PathLike = ".") -> "Plan":
        """Parses and compiles plan text. ``name`` is the file name diagnostics show;
        relative paths in the plan (a profiled table) resolve from ``base_dir``."""
        return cls(_native.plan_from_text(text, name, os.fspath(base_dir)))

    @classmethod
    def from_dict(cls, doc: Mapping, *, name: str = "<dict>", base_dir: PathLike = ".") -> "Plan":
        """Compiles a plan document (the dict ``json.load`` gives for a plan file).

        Diagnostics name ``name`` and point into the document by JSON pointer; their line and
        column count in :attr:`text`, where each directive stands on its own line."""
        return cls.from_json(_plan_text(doc), name=name, base_dir=base_dir)

    @classmethod
    def from_builder(
        cls, base: Union["Plan", Mapping], builder: Callable[..., Any], *args: Any, **kwargs: Any
    ) -> "Plan":
        """A plan whose schedule a Python function writes (as Piper's builders are written).

        ``builder(*args, **kwargs)`` returns the directive list (dicts as in a plan's
        ``schedule``); it replaces the schedule of ``base`` (a Plan or a plan dict), and the
        result is validated and compiled like any plan, with the same deadlock and dataflow
        checks. Diagnostics point into the directive list (``/schedule/N``, ``directive`` N)
        of a document named after the builder."""
        directives = builder(*args, **kwargs)
        if not isinstance(directives, (list, tuple)):
            raise TypeError(
                f"builder {getattr(builder, '__name__', builder)!r} returned "
                f"{type(directives).__name__}, not a list of directives"
            )
        doc = dict(base.to_dict() if isinstance(base, Plan) else base)
        doc["schedule"] = list(directives)
        base_dir = base.base_dir if isinstance(base, Plan) else "."
        name = f"<builder {getattr(builder, '__qualname__', getattr(builder, '__name__', 'builder'))}>"
        return cls.from_dict(doc, name=name, base_dir=base_dir)

    @property
    def file(self) -> str:
        """The name diagnostics and results give the plan (its path, or the ``name`` given)."""
        return self._native.file

    @property
    def base_dir(self) -> str:
        """The directory relative paths in the plan resolve from."""
        return self._native.base_dir or "."

    @property
    def text(self) -> str:
        """The plan's JSON text, as compiled."""
        return self._native.text

    def to_dict(self) -> Dict[str, Any]:
        """The plan document, as written (a fresh dict each call)."""
        return json.loads(self._native.text)

    def resolved(self) -> Dict[str, Any]:
        """What the plan resolves to, every value with its source (plan, layout, directives,
        builder, preset, default, derived): the document ``stretto describe PLAN --format json``
        prints."""
        return json.loads(_native.resolved_json(self._native))

    def simulate(self, **options: Any) -> "Result":
        """Same as :func:`stretto.simulate` (plan, **options)."""
        return simulate(self, **options)

    def __repr__(self) -> str:
        return f"<stretto.Plan {self.file}>"


def _as_plan(plan: Union[Plan, PathLike, Mapping]) -> Plan:
    if isinstance(plan, Plan):
        return plan
    if isinstance(plan, Mapping):
        return Plan.from_dict(plan)
    return Plan.load(plan)


def _int64_column(raw: bytes) -> Any:
    if _np is not None:
        return _np.frombuffer(raw, dtype=_np.int64).copy()
    return memoryview(raw).cast("q").tolist()


class Result(Mapping):
    """One training step: the fields of ``stretto simulate --format json``.

    Read fields as items or attributes (``r["step_time_ms"]``, ``r.step_time_ms``); per-device
    rows are ``r["devices"]`` (a list of dicts). A result simulated here also has the step's
    detail: :meth:`memory_curve`, :meth:`ops`, :meth:`write_trace`. A result loaded from JSON
    (:meth:`load`, :func:`load_validation`) has the fields only; ``kind`` says where it came
    from: ``"simulate"``, ``"replay"`` (measured by ``stretto replay``) or ``"predicted"`` /
    ``"measured"`` (the two sides of ``stretto validate``).
    """

    __slots__ = ("_fields", "_native", "kind", "_warnings")

    def __init__(self, fields: Dict[str, Any], native: Any = None, kind: str = "simulate"):
        self._fields = fields
        self._native = native
        self.kind = kind
        self._warnings: List[Diagnostic] = (
            [_diagnostic(d) for d in _native.result_warnings(native)] if native is not None else []
        )

    # Mapping
    def __getitem__(self, key: str) -> Any:
        return self._fields[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._fields)

    def __len__(self) -> int:
        return len(self._fields)

    def __getattr__(self, name: str) -> Any:
        try:
            return self._fields[name]
        except KeyError:
            raise AttributeError(f"Result has no field {name!r}") from None

    def __dir__(self) -> List[str]:
        return sorted(set(super().__dir__()) | set(self._fields))

    def __repr__(self) -> str:
        step = self._fields.get("step_time_ms")
        return f"<stretto.Result {self.kind} {self._fields.get('plan', '')} step {step} ms>"

    def to_dict(self) -> Dict[str, Any]:
        """The fields as a new dict (``json.dumps`` of it is the CLI's JSON)."""
        return json.loads(json.dumps(self._fields))

    @property
    def warnings(self) -> List[Diagnostic]:
        """The warnings :func:`simulate` raised for this step (as :class:`StrettoWarning`), the
        ones ``stretto simulate`` prints on stderr; empty for a loaded result."""
        return list(self._warnings)

    @property
    def devices(self) -> List[Dict[str, Any]]:
        """Per-device rows (id, busy_ms, bubble_ms, peak_memory_bytes, memory_breakdown, ...)."""
        return self._fields["devices"]

    def _detail(self, what: str) -> Any:
        if self._native is None:
            raise ValueError(f"{what} needs a result simulated here; this one was loaded ({self.kind})")
        return self._native

    def memory_curve(self, device: int) -> Any:
        """Allocated bytes of ``device`` after each change: columns ``t_ns``, ``total`` and one
        per memory category (params, grads, optimizer, activations, comm_buffers, grad_buckets,
        gathered_params). With NumPy a structured array (``curve["t_ns"]``), else a dict of
        lists. A folded replica shows its representative's curve."""
        cols = _native.memory_curve(self._detail("memory_curve"), int(device))
        return _columns(cols)

    def representative(self, device: int) -> int:
        """The device simulated for ``device``: itself, or with ``fold_replicas=True`` the
        representative of a folded replica, whose ops (:meth:`ops`) and memory curve stand
        for it (a folded replica's ``devices`` row is its representative's metrics)."""
        reps = _native.representatives(self._detail("representative"))
        if not 0 <= int(device) < len(reps):
            raise IndexError(f"no device {device} (the plan has {len(reps)})")
        return reps[int(device)]

    def ops(self) -> Any:
        """Every op of the step, one row per (op, device taking part): ``task``, ``device``,
        ``start_ns``, ``end_ns``, ``name`` (the trace's slice name), ``stream``, ``kind``
        (compute or comm): the op slices of :meth:`write_trace`'s trace, row for row. With
        ``fold_replicas=True`` those are the simulated devices' only (a folded replica's ops
        are its :meth:`representative`'s). With NumPy a structured array, else a list of
        dicts."""
        cols = _native.ops(self._detail("ops"))
        table = _columns(cols)
        if _np is None:
            keys = list(table)
            return [dict(zip(keys, row)) for row in zip(*(table[k] for k in keys))]
        return table

    def write_trace(self, path: PathLike) -> None:
        """Writes the Chrome/Perfetto trace ``stretto simulate --trace PATH`` writes."""
        _native.write_trace(self._detail("write_trace"), os.fspath(path))

    @classmethod
    def load(cls, path: PathLike) -> "Result":
        """Reads the JSON of ``stretto simulate --format json`` or ``stretto replay --format
        json`` (a measured step: same field names, ``kind`` "replay")."""
        with open(os.fspath(path), encoding="utf-8") as f:
            fields = json.load(f)
        if not isinstance(fields, dict) or "step_time_ms" not in fields:
            raise ValueError(f"{os.fspath(path)}: not the JSON of simulate or replay")
        return cls(fields, kind="replay" if "backend" in fields else "simulate")


def _columns(cols: Dict[str, Any]) -> Any:
    """Native columns (int64 bytes or lists) as a NumPy structured array or a dict of lists."""
    out = {k: (_int64_column(v) if isinstance(v, bytes) else v) for k, v in cols.items()}
    if _np is None:
        return out
    n = len(next(iter(out.values()))) if out else 0
    dtype = []
    for k, v in out.items():
        if isinstance(v, list):
            width = max((len(s) for s in v), default=1)
            dtype.append((k, f"U{max(1, width)}"))
        else:
            dtype.append((k, _np.int64))
    arr = _np.empty(n, dtype=dtype)
    for k, v in out.items():
        arr[k] = v
    return arr


def simulate(
    plan: Union[Plan, PathLike, Mapping],
    *,
    fold_replicas: bool = False,
    memory_curves: bool = True,
    critical_path: Union[bool, str] = False,
    granularity: str = "op",
) -> Result:
    """Simulates one training step of ``plan`` (a Plan, a plan file's path or a plan dict).

    Options are the CLI's: ``fold_replicas`` (``--fold-replicas``), ``critical_path=True``
    (``--critical-path``: adds ``critical_path_summary`` and ``critical_path_breakdown_ms``) or
    ``critical_path="full"`` (``--critical-path=full``: also ``critical_path``, every op);
    ``memory_curves=False`` keeps only each device's peak, not its allocated-memory curve
    (faster on large plans; the trace then has no memory counters; :meth:`Result.memory_curve`
    still works); ``granularity="pass"`` (``--granularity pass``) runs each region pass's
    consecutive ops as one engine task (docs/semantics.md, "Granularity: op or pass"; ``"op"``,
    the default, runs every op). The GIL is released while it runs.

    Each warning ``stretto simulate`` prints on stderr for the plan is raised as a
    :class:`StrettoWarning` (``warnings.warn``; filter them with the ``warnings`` module) and
    listed in :attr:`Result.warnings`."""
    p = _as_plan(plan)
    if critical_path not in (False, True, "full"):
        raise ValueError(f"critical_path takes True, False or 'full', not {critical_path!r}")
    full = critical_path == "full"
    if granularity not in ("op", "pass"):
        raise ValueError(f"granularity takes 'op' or 'pass', not {granularity!r}")
    native = _native.simulate(p._native, bool(fold_replicas), bool(memory_curves),
                              bool(critical_path), full, granularity)
    result = Result(json.loads(_native.result_json(native)), native)
    for d in result.warnings:
        _pywarnings.warn(StrettoWarning(d), stacklevel=2)
    return result


def load_validation(path: PathLike) -> List[Dict[str, Any]]:
    """Reads ``stretto validate --format json``: one dict per plan with ``plan``, the
    comparison's own fields (step_err_pct, op_classes, ...), and ``predicted`` and ``measured``
    as :class:`Result` (step_time_ms, bubble_ratio, exposed_comm_ms and per-device rows
    under the same names as a simulated result)."""
    with open(os.fspath(path), encoding="utf-8") as f:
        doc = json.load(f)
    plans = doc.get("plans") if isinstance(doc, dict) else None
    if not isinstance(plans, list):
        raise ValueError(f"{os.fspath(path)}: not the JSON of stretto validate (no 'plans')")
    out = []
    for entry in plans:
        row = {k: v for k, v in entry.items() if k not in ("a", "b", "devices")}
        for side in ("a", "b"):
            s = entry[side]
            kind = "measured" if s.get("kind") == "replay" else "predicted"
            fields = {k: v for k, v in s.items() if k != "kind"}
            fields["plan"] = entry.get("plan", "")
            fields["devices"] = [
                dict({"id": d["id"]}, **d[side]) for d in entry.get("devices", []) if side in d
            ]
            row[kind] = Result(fields, kind=kind)
        out.append(row)
    return out


def _jobs(jobs: Optional[int]) -> int:
    return int(jobs) if jobs else max(1, os.cpu_count() or 1)


def sweep(
    spec: Union[PathLike, Mapping],
    db: Optional[PathLike] = None,
    jobs: Optional[int] = None,
    *,
    limit: int = 0,
    base_dir: PathLike = ".",
) -> Dict[str, Any]:
    """Runs a sweep (docs/sweeps.md) into the SQLite database ``db``, resuming a killed one.

    ``spec`` is a spec file's path or a spec dict (its ``base`` path resolves from
    ``base_dir``). ``db`` defaults to the spec file's name with ``.db``, as ``stretto sweep``.
    ``jobs`` worker threads (default: all cores); ``limit`` stops after that many new points.
    Returns counts (points, resumed, run, ok, over_capacity, invalid, elapsed_s); read the
    rows with :func:`sweep_results`."""
    if isinstance(spec, Mapping):
        if db is None:
            raise ValueError("a spec given as a dict needs db=PATH")
        text, spec_dir, is_file = _dumps(spec), os.fspath(base_dir), False
    else:
        path = os.fspath(spec)
        if db is None:
            db = os.path.splitext(os.path.basename(path))[0] + ".db"
        text, spec_dir, is_file = path, os.path.dirname(path) or ".", True
    return _native.run_sweep(text, is_file, spec_dir, os.fspath(db), _jobs(jobs), int(limit))


def _flat_row(row: Dict[str, Any]) -> Dict[str, Any]:
    """A stored point as one flat record: hash, the point's parameters, status, the scalar
    fields of its simulate JSON, the estimate, wall_ms, diagnostic."""
    flat: Dict[str, Any] = {"hash": row["hash"]}
    flat.update(row.get("params", {}))
    flat["status"] = row["status"]
    metrics = row.get("metrics") or {}
    for k, v in metrics.items():
        if not isinstance(v, (list, dict)):
            flat[k] = v
    est = row.get("estimate") or {}
    flat["estimate_step_ms"] = est.get("step_time_ms")
    flat["estimate_memory_bytes"] = est.get("peak_memory_bytes")
    flat["wall_ms"] = row.get("wall_ms")
    flat["diagnostic"] = row.get("diagnostic", "")
    return flat


def sweep_results(db: PathLike, *, frame: Optional[bool] = None, flat: bool = True) -> Any:
    """The points of a sweep database.

    ``flat`` (default): one record per point (hash, parameters, status, step_time_ms,
    peak_memory_bytes, mfu, ...); ``flat=False``: the nested rows of ``stretto sweep --format
    json`` (params, metrics with per-device rows, estimate). ``frame=None`` gives a pandas
    DataFrame when pandas is installed and a list of dicts otherwise; True requires pandas;
    False always gives the list."""
    rows = json.loads(_native.sweep_rows(os.fspath(db)))
    if flat:
        rows = [_flat_row(r) for r in rows]
    if frame is False:
        return rows
    try:
        import pandas as pd
    except ImportError:
        if frame:
            raise
        return rows
    return pd.DataFrame(rows)


def search(
    plan: Union[Plan, PathLike, Mapping],
    devices: int,
    *,
    memory_cap_GiB: float = 0,
    budget_s: float = 60,
    jobs: Optional[int] = None,
) -> Dict[str, Any]:
    """The fastest plan for ``plan``'s model on ``devices`` devices (docs/sweeps.md, "How
    search works"): the fields of ``stretto search --format json`` plus ``best_plan``, the
    runnable plan document of the winner (None when nothing fits)."""
    if isinstance(plan, Plan):
        text, base_dir = plan.text, plan.base_dir
    elif isinstance(plan, Mapping):
        text, base_dir = _dumps(plan), "."
    else:
        path = os.fspath(plan)
        with open(path, encoding="utf-8") as f:
            text = f.read()
        base_dir = os.path.dirname(path) or "."
    out = _native.search(text, base_dir, int(devices), float(memory_cap_GiB), float(budget_s), _jobs(jobs))
    return json.loads(out)


from . import builders  # noqa: E402  (uses Plan-free parts of this module only)
