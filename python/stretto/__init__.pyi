import os
from collections.abc import Mapping
from typing import Any, Callable, Dict, Iterator, List, Optional, Union

from . import builders as builders
from .errors import (
    Diagnostic as Diagnostic,
    Note as Note,
    PlanError as PlanError,
    StrettoWarning as StrettoWarning,
)

PathLike = Union[str, os.PathLike[str]]

class Plan:
    @classmethod
    def load(cls, path: PathLike) -> Plan: ...
    @classmethod
    def from_json(cls, text: str, *, name: str = ..., base_dir: PathLike = ...) -> Plan: ...
    @classmethod
    def from_dict(cls, doc: Mapping[str, Any], *, name: str = ..., base_dir: PathLike = ...) -> Plan: ...
    @classmethod
    def from_builder(
        cls, base: Union[Plan, Mapping[str, Any]], builder: Callable[..., Any], *args: Any, **kwargs: Any
    ) -> Plan: ...
    @property
    def file(self) -> str: ...
    @property
    def base_dir(self) -> str: ...
    @property
    def text(self) -> str: ...
    def resolved(self) -> Dict[str, Any]: ...
    def to_dict(self) -> Dict[str, Any]: ...
    def simulate(
        self,
        *,
        fold_replicas: bool = ...,
        memory_curves: bool = ...,
        critical_path: Union[bool, str] = ...,
        granularity: str = ...,
    ) -> Result: ...

class Result(Mapping[str, Any]):
    kind: str
    # The fields of `stretto simulate --format json` (docs/semantics.md).
    plan: str
    step_time_ms: float
    bubble_ratio: float
    pipeline_bubble_ratio: float
    exposed_comm_ms: float
    exposed_comm_ms_per_device: float
    mfu: float
    tokens_per_s: float
    model_flops: float
    events: int
    sim_wall_ms: float
    folded_replicas: bool
    not_modelled: List[str]
    costmodel: str
    peak_memory_bytes: int
    peak_memory_time_ms: float
    peak_reserved_bytes: int
    peak_device_bytes: int
    over_capacity: bool
    def __getitem__(self, key: str) -> Any: ...
    def __iter__(self) -> Iterator[str]: ...
    def __len__(self) -> int: ...
    def to_dict(self) -> Dict[str, Any]: ...
    @property
    def warnings(self) -> List[Diagnostic]: ...
    @property
    def devices(self) -> List[Dict[str, Any]]: ...
    def memory_curve(self, device: int) -> Any: ...
    def representative(self, device: int) -> int: ...
    def ops(self) -> Any: ...
    def write_trace(self, path: PathLike) -> None: ...
    @classmethod
    def load(cls, path: PathLike) -> Result: ...

def simulate(
    plan: Union[Plan, PathLike, Mapping[str, Any]],
    *,
    fold_replicas: bool = ...,
    memory_curves: bool = ...,
    critical_path: Union[bool, str] = ...,
    granularity: str = ...,
) -> Result: ...
def load_validation(path: PathLike) -> List[Dict[str, Any]]: ...
def sweep(
    spec: Union[PathLike, Mapping[str, Any]],
    db: Optional[PathLike] = ...,
    jobs: Optional[int] = ...,
    *,
    limit: int = ...,
    base_dir: PathLike = ...,
) -> Dict[str, Any]: ...
def sweep_results(db: PathLike, *, frame: Optional[bool] = ..., flat: bool = ...) -> Any: ...
def search(
    plan: Union[Plan, PathLike, Mapping[str, Any]],
    devices: int,
    *,
    memory_cap_GiB: float = ...,
    budget_s: float = ...,
    jobs: Optional[int] = ...,
) -> Dict[str, Any]: ...
