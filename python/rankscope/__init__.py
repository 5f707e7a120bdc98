"""rankscope: the profiler of multi-rank GPU inference jobs, for Python ranks.

Every rank of a job makes a :class:`Profiler` and records through it; when
the session ends, rank 0 gathers every rank's data (over TCP under torchrun,
MPI under mpirun when built with the ``mpi`` feature, a shared directory
otherwise) and writes one report: ``report.html``, ``report.json``,
``summary.txt``, ``trace.json.gz`` and ``raw/``.

>>> prof = rankscope.Profiler(rankscope.Config(output_dir="profiling_reports"))
>>> with prof.session("t2v", tags={"mode": "tp4"}):
...     with prof.stage("text_encoding"):
...         ...

When the program uses torch with CUDA (torch is never imported by
rankscope itself), stages are also timed on the GPU with CUDA events,
memory snapshots read torch's allocator, and the profiler samples the GPU
torch uses.
"""

from __future__ import annotations

import functools
import inspect
import os
import warnings
from typing import Any, Callable, Dict, Mapping, Optional, Tuple, TypeVar, overload

from . import _collectives, _rankscope, _torch, _torch_profiler
from ._rankscope import Config, ConfigError, Outcome, Session, SessionError, Stage

# A forked child (a DataLoader worker) records nothing its parent reads:
# Python function tracing stops there.
os.register_at_fork(after_in_child=_rankscope.Profiler._stop_python_tracing)

__all__ = [
    "Config",
    "ConfigError",
    "Outcome",
    "Profiler",
    "Session",
    "SessionError",
    "Stage",
]

F = TypeVar("F", bound=Callable[..., Any])


class Profiler(_rankscope.Profiler):
    """The agent of one rank.

    ``Profiler(config)`` uses ``config`` as given; ``Profiler()`` reads the
    file ``RANKSCOPE_CONFIG`` names and the ``RANKSCOPE_*`` variables. The
    launcher's variables (torchrun's, mpirun's, srun's) say which rank this
    is. When torch has already set up CUDA and no ``gpu_devices`` is
    configured, the profiler samples the GPU torch uses (matched by UUID).
    When the program initialised torch.distributed first and configured no
    ``token``, the ranks share a secret job token through its store (every
    rank makes its profilers in the same order).
    """

    # A window's Python function tracing while it runs: its token, and the
    # window's number.
    _window_tracing: Optional[Tuple[int, int]]

    def __new__(cls, config: Optional[Config] = None) -> "Profiler":
        if config is None:
            config = Config.from_env()
        return super().__new__(cls, _torch.with_shared_token(_torch.with_torch_gpu(config)))

    def session(self, name: str, tags: Optional[Mapping[str, Any]] = None) -> Session:
        """Starts the job's session; every rank calls this with the same name.

        Use it as a context manager (``with prof.session("t2v"):``) or call
        ``finish()`` on what it returns; either gives an :class:`Outcome`,
        with the report's paths on rank 0.
        """
        session = super().session(name, dict(tags) if tags is not None else None)
        config = self.config
        if config is not None:
            self._set_gpu_timer(_torch.gpu_timer(config.gpu_timing, self, config.max_data_points))
            self._torch_windows = _torch_profiler.windows(config, self)
            # Windows are numbered afresh in each session.
            self._window_captured = 0
            self._window_traced = 0
            closer = _SessionCloser(self, self._torch_windows, _collectives.calls(config, self),
                                    self._python_tracing(config))
            self._set_session_closer(closer)
        return session

    def _python_tracing(self, config: Config) -> Optional[int]:
        """Starts Python function tracing for the whole session where
        ``python_tracing`` asks for it: ``session``, or ``windows`` with
        rolling windows, which cover every step. Its token, or None."""
        if not self.enabled or not _traces_session(config):
            return None
        return self._start_tracing_or_warn("this session")

    def _start_tracing_or_warn(self, span: str) -> Optional[int]:
        """Starts Python function tracing; its token, or None. A failure
        (sys.monitoring's tool ids all taken) costs the tracing of ``span``,
        never the session."""
        try:
            return self._start_python_tracing()
        except Exception as e:  # noqa: BLE001 - said, and the session goes on
            warnings.warn(f"rankscope: python_tracing is off for {span}: {e}",
                          RuntimeWarning, stacklevel=4)
            return None

    def step(self) -> None:
        """A step boundary (a denoising step, a decode step, a batch):
        rankscope's windows (``window_every_steps``, ``rankscope trigger``)
        and the torch.profiler windows (``torch_profiler_*`` settings)
        advance here. Without a call to it, each ``record_diffusion_step``
        advances them."""
        first = not getattr(self, "_explicit_steps", False)
        self._explicit_steps = True
        if first and getattr(self, "_implied_steps", False):
            # This step's diffusion step, recorded before the call, has
            # advanced the windows already; from here on only calls do.
            return
        self._advance_windows()

    def record_diffusion_step(
        self,
        step: int,
        timestep: float = 0.0,
        block_size: int = 0,
        computation_time_ms: float = 0.0,
        guidance_scale: Optional[float] = None,
    ) -> None:
        """Records one denoising step (and, in a program that does not call
        ``step()``, advances rankscope's and the torch.profiler windows)."""
        super().record_diffusion_step(step, timestep, block_size, computation_time_ms, guidance_scale)
        if not getattr(self, "_explicit_steps", False):
            self._implied_steps = True
            self._advance_windows()

    def _advance_windows(self) -> None:
        closing = self.step_count() + 1
        capture = getattr(self, "_window_capture", None)
        if capture is not None and closing >= capture.close_step:
            # Read before the step that closes the window ends: its rows
            # fall inside the window.
            self._end_window_capture()
        tracing = getattr(self, "_window_tracing", None)
        if tracing is not None:
            # Stopped before the step that closes the window ends (as the
            # plan stands now: a cancel moves it earlier), so that the
            # functions' totals go into the window's last flush.
            now = self.planned_window()
            if now is None or now[0] != tracing[1] or closing >= now[1] + now[2]:
                self._end_window_tracing()
        super().step()
        windows = getattr(self, "_torch_windows", None)
        if windows is not None:
            windows.step()
        planned = self.planned_window()
        config = self.config
        if planned is None or config is None:
            return
        index, first_step, steps, torch, python = planned
        close_step = first_step + steps
        if not first_step <= self.step_count() < close_step:
            return
        if torch and getattr(self, "_window_capture", None) is None and \
                getattr(self, "_window_captured", 0) < index:
            self._window_captured = index
            self._window_capture = _torch_profiler.capture_window(
                config, self, index, close_step)
        traced = python or config.python_tracing == "windows"
        if traced and not _traces_session(config) and \
                getattr(self, "_window_tracing", None) is None and \
                getattr(self, "_window_traced", 0) < index:
            self._window_traced = index
            token = self._start_tracing_or_warn(f"window {index}")
            if token is not None:
                self._window_tracing = (token, index)

    def _end_window_tracing(self) -> None:
        """Stops a window's Python function tracing, if one runs."""
        tracing = getattr(self, "_window_tracing", None)
        self._window_tracing = None
        if tracing is not None:
            Profiler._stop_python_tracing(tracing[0])

    def _end_window_capture(self) -> None:
        """Reads a ``--torch`` window's capture, if one runs."""
        capture = getattr(self, "_window_capture", None)
        self._window_capture = None
        if capture is not None:
            capture.finish()

    def memory_snapshot(
        self,
        label: str,
        allocated: Optional[int] = None,
        reserved: Optional[int] = None,
        max_allocated: Optional[int] = None,
        gpu: Optional[int] = None,
        source: Optional[str] = None,
    ) -> None:
        """Records a labelled memory snapshot.

        With no numbers given, they come from torch's CUDA allocator
        (allocated, reserved, max allocated on torch's current device, the
        one the profiler samples) when torch uses CUDA, else from NVML (this
        process's memory on the rank's first GPU). ``gpu`` labels the
        numbers given with an index in the rank's GPU list.
        """
        if allocated is None and reserved is None and max_allocated is None:
            reading = _torch.allocator_reading()
            if reading is not None:
                allocated, reserved, max_allocated = reading
                source = "torch"
        super().memory_snapshot(label, allocated, reserved, max_allocated, gpu, source)

    @overload
    def profile_function(self, name: F) -> F: ...

    @overload
    def profile_function(
        self, name: Optional[str] = None, metadata: Optional[Mapping[str, Any]] = None
    ) -> Callable[[F], F]: ...

    def profile_function(self, name: Any = None, metadata: Any = None) -> Any:
        """Decorator: each call of the function is a stage.

        ``@prof.profile_function("vae_decode")``, or bare
        ``@prof.profile_function`` to name the stage after the function.
        A coroutine function's calls are timed from the call to the end of
        its ``await``, each on its own, however tasks interleave.
        """
        if callable(name):
            return self.profile_function()(name)

        def decorate(function: F) -> F:
            stage = self.stage(name or function.__qualname__, metadata)
            return _timed(function, lambda _: stage)

        return decorate

    @overload
    def profile_method(self, name: F) -> F: ...

    @overload
    def profile_method(self, name: Optional[str] = None) -> Callable[[F], F]: ...

    def profile_method(self, name: Any = None) -> Any:
        """Decorator for methods: each call is a stage named
        ``ClassName.method`` after the class of the instance called (so a
        subclass's calls are told apart), or ``name`` if given.
        """
        if callable(name):
            return self.profile_method()(name)

        def decorate(method: F) -> F:
            stages: Dict[type, Stage] = {}

            def stage_of(args: Tuple[Any, ...]) -> Stage:
                kind = type(args[0])
                stage = stages.get(kind)
                if stage is None:
                    stage = stages.setdefault(
                        kind, self.stage(name or f"{kind.__name__}.{method.__name__}")
                    )
                return stage

            return _timed(method, stage_of)

        return decorate

    def profile_session(
        self, name: str, tags: Optional[Mapping[str, Any]] = None
    ) -> Callable[[F], F]:
        """Decorator: each call of the function runs in a session called
        ``name`` (``@prof.profile_session("t2v")`` on ``main``)."""

        def decorate(function: F) -> F:
            @functools.wraps(function)
            def in_session(*args: Any, **kwargs: Any) -> Any:
                with self.session(name, tags):
                    return function(*args, **kwargs)

            return in_session  # type: ignore[return-value]

        return decorate


def _traces_session(config: Config) -> bool:
    """Whether Python functions are traced throughout each session."""
    tracing: str = config.python_tracing
    rolling: int = config.window_every_steps
    return tracing == "session" or (tracing == "windows" and rolling > 0)


class _SessionCloser:
    """What a session set up in Python, undone when it finishes: Python
    function tracing stopped, the last torch.profiler window (scheduled, or
    asked for with ``--torch``) read, the collectives' recording
    stopped."""

    def __init__(self, profiler: Profiler, windows: Optional[_torch_profiler.TorchWindows],
                 collectives: Optional[_collectives.CollectiveCalls],
                 tracing: Optional[int]) -> None:
        self._profiler = profiler
        self._windows = windows
        self._collectives = collectives
        self._tracing = tracing

    def close(self) -> None:
        try:
            try:
                # First: tracing never outlives the session.
                self._profiler._end_window_tracing()
            finally:
                # A ``--torch`` window still open is read as it stands.
                self._profiler._end_window_capture()
                if self._windows is not None:
                    self._windows.close()
        finally:
            try:
                if self._collectives is not None:
                    self._collectives.close()
            finally:
                if self._tracing is not None:
                    Profiler._stop_python_tracing(self._tracing)


def _timed(function: F, stage_of: Callable[[Tuple[Any, ...]], Stage]) -> F:
    """`function` with each call timed as the stage `stage_of(args)`."""
    if inspect.isgeneratorfunction(function) or inspect.isasyncgenfunction(function):
        raise TypeError(
            f"{function.__qualname__} is a generator function: a decorator would time only "
            "the making of the generator; time the loop that consumes it with a stage instead"
        )
    if inspect.iscoroutinefunction(function):

        @functools.wraps(function)
        async def timed_coroutine(*args: Any, **kwargs: Any) -> Any:
            # Ended by its id: other tasks' stages begin and end on this
            # thread while this one awaits.
            stage = stage_of(args)
            call = stage._begin()
            try:
                return await function(*args, **kwargs)
            finally:
                if call is not None:
                    stage._end(call)

        return timed_coroutine  # type: ignore[return-value]

    @functools.wraps(function)
    def timed(*args: Any, **kwargs: Any) -> Any:
        with stage_of(args):
            return function(*args, **kwargs)

    return timed  # type: ignore[return-value]
