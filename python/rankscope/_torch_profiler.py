"""torch.profiler windows on every rank, driven by rankscope's settings.

The schedule is torch.profiler's own (``wait``, ``warmup``, ``active``,
``repeat``), set by the ``torch_profiler_*`` keys of the configuration (or
``RANKSCOPE_TORCH_PROFILER_*`` variables), so that a job is profiled with no
code of its own. Every rank counts the same steps, so every rank opens and
closes its windows on the same ones. When a window closes, its trace is
written to a private temporary file, read by the agent into the session's
``kernels`` and ``collectives`` tables (which travel to rank 0 with the
rest of the rank's data), and deleted — or, with ``torch_profiler_trace_dir``
set, kept there as ``rank<R>-window<k>.pt.trace.json.gz``.

Windows asked for with ``rankscope trigger --torch`` get a capture of
their own (``WindowCapture``), started and read at the rankscope window's
steps.

torch is imported only when windows are configured or asked for.

What torch.profiler does on the rank's critical path (starting and
stopping a capture, exporting and reading its trace) is recorded as the
profiler's own stages, named ``rankscope:torch.profiler ...``: the report
counts them as its overhead and as one-off events, never as the program's
time. A first capture of nothing is made when the session starts, before
the first step, so that what a capture's first start costs (Kineto's set-up;
CUPTI's, where the windows trace CUDA: seconds, more with several processes
on one GPU) does not stall a step.
"""

from __future__ import annotations

import importlib
import os
import shutil
import tempfile
import warnings
from typing import Any, Optional

from ._rankscope import Config


class TorchWindows:
    """One session's torch.profiler windows.

    Steps are ``prof.step()`` calls; a program that never calls it but
    records diffusion steps (``record_diffusion_step``) advances the
    windows with each of those instead.
    """

    def __init__(self, torch: Any, config: Config, profiler: Any) -> None:
        self._profiler = profiler
        self._windows = 0
        self._closed = False
        self._keep = config.torch_profiler_trace_dir is not None
        if self._keep:
            self._dir = str(config.torch_profiler_trace_dir)
            os.makedirs(self._dir, exist_ok=True)
        else:
            self._dir = tempfile.mkdtemp(prefix="rankscope-torch-")
        activities = _activities(torch, config)
        _prime(torch, profiler, activities)
        self._torch = torch.profiler.profile(
            activities=activities,
            schedule=torch.profiler.schedule(
                wait=config.torch_profiler_wait,
                warmup=config.torch_profiler_warmup,
                active=config.torch_profiler_active,
                repeat=config.torch_profiler_repeat,
            ),
            on_trace_ready=self._window_ready,
            record_shapes=config.torch_profiler_record_shapes,
            profile_memory=config.torch_profiler_profile_memory,
            with_stack=config.torch_profiler_with_stack,
        )
        with profiler.stage("rankscope:torch.profiler start"):
            self._torch.start()

    @property
    def windows(self) -> int:
        """Windows read so far."""
        return self._windows

    def step(self) -> None:
        """A step boundary: ``prof.step()``, or a diffusion step recorded by
        a program that does not call it (the profiler decides which)."""
        if self._closed:
            return
        # A step where the schedule moves on (a capture starts, stops, or
        # is exported and read) is the profiler's own time.
        capture = self._torch
        now = getattr(capture, "current_action", None)
        try:
            then = capture.schedule(capture.step_num + 1)
        except Exception:  # a torch whose profile keeps its schedule otherwise
            then = now
        if now is None or then != now or getattr(now, "name", "") == "RECORD_AND_SAVE":
            action = getattr(then, "name", "step").lower()
            with self._profiler.stage(f"rankscope:torch.profiler {action}"):
                capture.step()
        else:
            capture.step()

    def _window_ready(self, torch_profile: Any) -> None:
        self._windows += 1
        name = f"rank{self._profiler.rank}-window{self._windows}"
        _read_trace(self._profiler, torch_profile, self._dir, self._keep, name, self._windows)

    def close(self) -> None:
        """Ends the windows: one still recording is read as it stands.
        Steps after this (the session has ended) do nothing."""
        if self._closed:
            return
        self._closed = True
        try:
            with self._profiler.stage("rankscope:torch.profiler stop"):
                self._torch.stop()
        finally:
            if not self._keep:
                shutil.rmtree(self._dir, ignore_errors=True)


def _prime(torch: Any, profiler: Any, activities: list[Any]) -> None:
    """Sets up what a capture needs (Kineto; CUPTI where CUDA is traced)
    with a capture of nothing, before the first step: a capture's first
    start in a process can take seconds, more with several processes on one
    GPU."""
    cuda = torch.profiler.ProfilerActivity.CUDA in activities
    with profiler.stage("rankscope:torch.profiler prime"):
        try:
            with torch.profiler.profile(activities=activities):
                if cuda:
                    torch.cuda.synchronize()
        except Exception as error:  # the windows' own start will say more
            warnings.warn(f"rankscope: setting torch.profiler up early failed: {error}",
                          RuntimeWarning, stacklevel=4)


def _activities(torch: Any, config: Config) -> list[Any]:
    """The activities ``torch_profiler_activities`` asks for that this
    process has (CUDA only where a GPU is)."""
    activity = torch.profiler.ProfilerActivity
    wanted = config.torch_profiler_activities
    activities = []
    if wanted in ("cpu", "cpu,cuda"):
        activities.append(activity.CPU)
    if wanted in ("cuda", "cpu,cuda") and torch.cuda.is_available():
        activities.append(activity.CUDA)
    return activities


def _read_trace(profiler: Any, torch_profile: Any, directory: str, keep: bool, name: str,
                window: int) -> None:
    """Exports a finished capture's trace as ``name`` in ``directory``, has
    the agent read it into the session's tables as window ``window``, and
    deletes it unless ``keep``. A lost window is a warning, never an error:
    it must not stop the job."""
    path = os.path.join(directory, f"{name}.pt.trace.json" + (".gz" if keep else ""))
    try:
        torch_profile.export_chrome_trace(path)
        profiler._add_kernel_trace(path, window)
    except Exception as error:
        warnings.warn(
            f"rankscope: torch.profiler window {window} is lost: {error}",
            RuntimeWarning,
            stacklevel=3,
        )
    finally:
        if not keep and os.path.exists(path):
            os.remove(path)


class WindowCapture:
    """torch.profiler over one rankscope window asked for with
    ``rankscope trigger --torch``: started at the step where the window
    opens, read into the session's tables at the step that closes it,
    before that step ends, so that its rows fall inside the window."""

    def __init__(self, torch: Any, config: Config, profiler: Any, index: int,
                 close_step: int) -> None:
        self.index = index
        self.close_step = close_step
        self._profiler = profiler
        self._keep = config.torch_profiler_trace_dir is not None
        self._dir = (str(config.torch_profiler_trace_dir) if self._keep
                     else tempfile.mkdtemp(prefix="rankscope-torch-"))
        os.makedirs(self._dir, exist_ok=True)
        self._torch = torch.profiler.profile(
            activities=_activities(torch, config),
            record_shapes=config.torch_profiler_record_shapes,
            profile_memory=config.torch_profiler_profile_memory,
            with_stack=config.torch_profiler_with_stack,
        )
        with profiler.stage("rankscope:torch.profiler start"):
            self._torch.start()

    def finish(self) -> None:
        """Stops the capture and reads its trace."""
        try:
            with self._profiler.stage("rankscope:torch.profiler stop"):
                self._torch.stop()
                name = f"rank{self._profiler.rank}-triggered-window{self.index}"
                _read_trace(self._profiler, self._torch, self._dir, self._keep, name,
                            self.index)
        finally:
            if not self._keep:
                shutil.rmtree(self._dir, ignore_errors=True)


def capture_window(config: Config, profiler: Any, index: int,
                   close_step: int) -> Optional[WindowCapture]:
    """A torch.profiler capture of window ``index`` (asked for with
    ``--torch``), or None with a warning where there can be none: torch is
    not installed, or ``torch_profiler_*`` windows already run (torch
    profiles one thing at a time)."""
    if config.torch_profiler_active > 0:
        warnings.warn(
            f"rankscope: window {index} asked for torch.profiler, but torch_profiler_* windows "
            "already run on their schedule: the window is reported without its own capture",
            RuntimeWarning,
            stacklevel=3,
        )
        return None
    torch = _import_torch(f"window {index} asked for torch.profiler")
    if torch is None:
        return None
    return WindowCapture(torch, config, profiler, index, close_step)


def windows(config: Config, profiler: Any) -> Optional[TorchWindows]:
    """The session's windows, or None when none are configured (or torch
    is not installed: then a warning says so)."""
    if config.torch_profiler_active == 0 or not profiler.enabled:
        return None
    torch = _import_torch(f"torch_profiler_active is {config.torch_profiler_active}")
    if torch is None:
        return None
    return TorchWindows(torch, config, profiler)


def _import_torch(why: str) -> Optional[Any]:
    """torch, with torch.profiler loaded; None with a warning saying ``why``
    it was wanted where it cannot be imported."""
    try:
        torch = importlib.import_module("torch")
        importlib.import_module("torch.profiler")
    except ImportError as error:
        warnings.warn(
            f"rankscope: {why} but torch cannot be imported ({error}): no torch.profiler "
            "capture",
            RuntimeWarning,
            stacklevel=4,
        )
        return None
    return torch
