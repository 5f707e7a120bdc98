"""Type stubs of the native module (python/src/*.rs)."""

__all__ = ["Config", "ConfigError", "Outcome", "Profiler", "Session", "SessionError", "Stage"]

from os import PathLike
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Tuple, Type, TypeVar, Union, final

from typing_extensions import disjoint_base

_Path = Union[str, "PathLike[str]"]
_P = TypeVar("_P", bound="Profiler")

class ConfigError(ValueError):
    """A configuration key, file or variable is invalid; the message names it."""

class SessionError(RuntimeError):
    """A session could not start or finish."""

@final
class Config:
    """Every setting of the agent (DESIGN.md's keys, also `RANKSCOPE_<KEY>`).

    ``Config(output_dir="out", gather_timeout_s=30)`` starts from the
    defaults of ``preset`` ("development", "production" or "debugging"); an
    unknown key, a value of the wrong type or out of its range raises
    :class:`ConfigError` naming it. Settings read as attributes
    (``config.gather_timeout_s``).
    """

    def __new__(cls, **keys: Any) -> "Config": ...
    @staticmethod
    def from_env() -> "Config":
        """The file ``RANKSCOPE_CONFIG`` names (if set), then ``RANKSCOPE_*`` variables."""
    @staticmethod
    def from_yaml(path: _Path) -> "Config":
        """A YAML (or, by a ``.toml`` name, TOML) file, with ``RANKSCOPE_*`` variables over it."""
    @staticmethod
    def keys() -> List[str]:
        """The names of every setting."""
    def to_dict(self) -> Dict[str, Any]:
        """Every setting and its value."""
    def replace(self, **keys: Any) -> "Config":
        """A copy with the given keys changed (checked as the constructor checks them)."""
    def __getattr__(self, name: str) -> Any: ...

@final
class Stage:
    """A stage: entering it begins a call, leaving it ends the call (also
    when an exception leaves it). Can be entered again and again, on any
    thread; calls nest per thread."""

    @property
    def name(self) -> str:
        """The stage's name."""
    def __enter__(self) -> "Stage": ...
    def __exit__(self, kind: Any, value: Any, traceback: Any) -> bool: ...
    def _begin(self) -> Optional[int]:
        """Begins a call that ``_end`` ends by its id (None when not recording)."""
    def _end(self, id: int) -> None:
        """Ends a call ``_begin`` began."""

@final
class Outcome:
    """What finishing a session produced; report paths on rank 0."""

    session_dir: Optional[Path]
    """The session directory (None when disabled)."""
    spill_file: Optional[Path]
    """This rank's spill file (None when disabled)."""
    payload_bytes: int
    """Size of this rank's payload, bytes."""
    files: List[Path]
    """On rank 0: every report file written (empty elsewhere)."""
    summary: Optional[str]
    """On rank 0: the summary table."""
    ranks_reporting: Optional[List[int]]
    """On rank 0: ranks whose data arrived."""
    ranks_missing: Optional[List[int]]
    """On rank 0: ranks that sent nothing usable before the deadline."""
    @property
    def report_html(self) -> Optional[Path]:
        """``report.html``, on rank 0."""
    @property
    def report_json(self) -> Optional[Path]:
        """``report.json``, on rank 0."""

@final
class Session:
    """A running session; leaving it as a context manager (or ``finish()``)
    spills this rank's data, gathers on rank 0 and writes the report there."""

    @property
    def dir(self) -> Optional[Path]:
        """The session directory (None when disabled or finished, or in a forked child)."""
    @property
    def outcome(self) -> Optional[Outcome]:
        """What finishing produced (None until then)."""
    def flush(self) -> bool:
        """Writes what this rank recorded since the last flush to a part file
        now, as the periodic flushes do; the session goes on. False when
        there was nothing new (or the session is finished). A forked
        child's call raises SessionError."""
    def finish(self) -> Outcome:
        """Ends the session (the interpreter's lock released meanwhile); the
        same outcome again on a second call."""
    def __enter__(self) -> "Session": ...
    def __exit__(self, kind: Any, value: Any, traceback: Any) -> bool: ...

@disjoint_base
class Profiler:
    """The agent of one rank (the ``rankscope.Profiler`` subclass adds the
    decorators and the PyTorch integration)."""

    def __new__(cls: Type[_P], config: Optional[Config] = None) -> _P: ...
    @classmethod
    def from_env(cls: Type[_P]) -> _P:
        """A profiler configured by ``RANKSCOPE_CONFIG`` and ``RANKSCOPE_*``."""
    @classmethod
    def from_yaml(cls: Type[_P], path: _Path) -> _P:
        """A profiler configured by a YAML (or ``.toml``) file, variables over it."""
    @property
    def enabled(self) -> bool:
        """Whether the profiler records."""
    @property
    def rank(self) -> int:
        """This process's rank (0 when disabled)."""
    @property
    def world_size(self) -> int:
        """Ranks in the job (1 when disabled)."""
    @property
    def config(self) -> Optional[Config]:
        """The configuration (None when disabled)."""
    def session(self, name: str, tags: Optional[Mapping[str, Any]] = None) -> Session:
        """Starts the job's session; every rank calls this with the same name."""
    def stage(self, name: str, metadata: Optional[Mapping[str, Any]] = None) -> Stage:
        """A stage, to enter with ``with``; keep it to enter it again."""
    def start(self, name: str) -> None:
        """Begins a stage; ``stop(name)`` ends it on the same thread."""
    def stop(self, name: str) -> bool:
        """Ends the innermost open stage called ``name``; False if none."""
    def step(self) -> None:
        """Ends a step: rankscope's windows open and close at step boundaries."""
    def step_count(self) -> int:
        """Steps ended (``step()``) since the running session started."""
    def planned_window(self) -> Optional[Tuple[int, int, int, bool, bool]]:
        """The window planned or open now: ``(index, first_step, steps, torch, python)``."""
    def record_diffusion_step(
        self,
        step: int,
        timestep: float = 0.0,
        block_size: int = 0,
        computation_time_ms: float = 0.0,
        guidance_scale: Optional[float] = None,
    ) -> None:
        """Records one denoising step."""
    def record_block_computation(
        self,
        block_index: int,
        block_size: int,
        computation_time_ms: float,
        memory_usage_mb: Optional[float] = None,
    ) -> None:
        """Records one block computation (a group of frames made together)."""
    def record_model_parameters(self, name: str, count: int) -> None:
        """Records the parameter count of a model or component."""
    def record_metric(self, name: str, value: float) -> None:
        """Records a custom metric."""
    def record_throughput(self, items: float, seconds: Optional[float] = None) -> None:
        """Records items processed in ``seconds`` (default: since the session started)."""
    def add_event(self, name: str, payload: Any = None) -> None:
        """Records an event; the payload is kept as JSON (other values as their text)."""
    def memory_snapshot(
        self,
        label: str,
        allocated: Optional[int] = None,
        reserved: Optional[int] = None,
        max_allocated: Optional[int] = None,
        gpu: Optional[int] = None,
        source: Optional[str] = None,
    ) -> None:
        """Records a labelled memory snapshot (bytes) and where the numbers come
        from (default ``caller``); with none given, NVML's reading."""
    def record_stage_gpu_time(self, name: str, ms: float) -> None:
        """Records the GPU time of one call of stage ``name``, milliseconds."""
    def get_current_metrics(self) -> Dict[str, Any]:
        """The session, seconds since it started, open stages, rows held and dropped."""
    def get_summary(self) -> Optional[str]:
        """The summary table of the last report this process wrote (rank 0)."""
    def _set_gpu_timer(self, timer: Any) -> None: ...
    def _add_kernel_trace(self, path: _Path, window: int) -> Dict[str, int]:
        """Reads a torch.profiler window's trace into the session's tables."""
    def _set_session_closer(self, closer: Any) -> None: ...
    def _start_python_tracing(self) -> Optional[int]: ...
    @staticmethod
    def _stop_python_tracing(token: Optional[int] = None) -> None: ...
    def _collective_begin(self) -> Optional[int]: ...
    def _record_collective(
        self, kind: str, group: Optional[str], bytes: Optional[int], start_ns: int
    ) -> None: ...
    def _gpu_timer(self) -> Any: ...

def _config_from_dict(keys: Dict[str, Any]) -> Config: ...
