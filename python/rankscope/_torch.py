"""The PyTorch integration: used only when the program itself imported
torch (rankscope never imports it, and never sets up CUDA on its own)."""

from __future__ import annotations

import sys
import time
from typing import Any, List, Optional, Tuple

from ._rankscope import Config


def _cuda() -> Any:
    """torch, if the program imported it and CUDA is set up in this process."""
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    try:
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            return torch
    except Exception:  # a broken CUDA install must not break profiling
        return None
    return None


def with_torch_gpu(config: Config) -> Config:
    """``config`` set to sample the GPU torch uses (by its UUID), when torch
    uses CUDA and no ``gpu_devices`` was configured."""
    torch = _cuda()
    if torch is None or config.gpu_devices is not None or config.gpu_source == "simulated":
        return config
    try:
        uuid = str(torch.cuda.get_device_properties(torch.cuda.current_device()).uuid)
    except Exception:
        return config
    return config.replace(gpu_devices=uuid if uuid.startswith("GPU-") else f"GPU-{uuid}")


def allocator_reading() -> Optional[Tuple[int, int, int]]:
    """(allocated, reserved, max allocated) bytes of torch's CUDA allocator
    on the current device, when torch uses CUDA."""
    torch = _cuda()
    if torch is None:
        return None
    device = torch.cuda.current_device()
    return (
        int(torch.cuda.memory_allocated(device)),
        int(torch.cuda.memory_reserved(device)),
        int(torch.cuda.max_memory_allocated(device)),
    )


def gpu_timer(mode: str, profiler: Any, limit: int) -> Any:
    """The object that times stages on the GPU for a session, or None:
    ``mode`` is the ``gpu_timing`` setting ("events", "sync" or "off")."""
    if mode == "off":
        return None
    torch = sys.modules.get("torch")
    try:
        if torch is None or not torch.cuda.is_available():
            return None
    except Exception:
        return None
    if mode == "sync":
        return SyncTimer(torch, profiler)
    return CudaEventTimer(torch, profiler, limit)


class CudaEventTimer:
    """Times each stage call with a pair of CUDA events recorded on the
    current stream: the host never waits for the GPU. Pairs whose end event
    has completed are resolved now and then (``Event.query``, which does not
    wait) and the rest when the session ends, so at most ``limit`` pairs are
    held; past that, calls are counted as dropped instead."""

    #: Pending pairs past which the completed ones are resolved.
    RESOLVE_AT = 1024

    def __init__(self, torch: Any, profiler: Any, limit: int) -> None:
        self._cuda = torch.cuda
        self._record = profiler.record_stage_gpu_time
        self._event = profiler.add_event
        self._limit = max(1, limit)
        self._pending: List[Tuple[str, Any, Any]] = []
        # Events of resolved pairs, recorded again instead of made anew
        # (making one costs far more than recording it).
        self._free: List[Any] = []
        self._resolve_at = min(self.RESOLVE_AT, self._limit)
        self.dropped = 0

    def _recorded(self) -> Any:
        event = self._free.pop() if self._free else self._cuda.Event(enable_timing=True)
        event.record()
        return event

    def begin(self) -> Any:
        # A process that has not set up CUDA yet is not made to.
        if not self._cuda.is_initialized():
            return None
        return self._recorded()

    def end(self, name: str, start: Any) -> None:
        if start is None:
            return
        end = self._recorded()
        if len(self._pending) >= self._resolve_at:
            self._resolve(wait=False)
            # Resolve again only after as many new pairs.
            self._resolve_at = min(len(self._pending) + self.RESOLVE_AT, self._limit)
        if len(self._pending) >= self._limit:
            self.dropped += 1
            self._free += (start, end)
            return
        self._pending.append((name, start, end))

    def resolve(self) -> None:
        """Resolves every pair (waits for the GPU once); called at session end."""
        if self._pending:
            self._cuda.synchronize()
        self._resolve(wait=True)
        if self.dropped:
            self._event("gpu_timing_dropped", {"calls": self.dropped})

    def _resolve(self, wait: bool) -> None:
        waiting = []
        for name, start, end in self._pending:
            if not wait and not end.query():
                waiting.append((name, start, end))
                continue
            try:
                self._record(name, start.elapsed_time(end))
            except RuntimeError:
                # Events of two devices (the stage changed device) have no
                # elapsed time between them.
                self.dropped += 1
            if len(self._free) < 2 * self.RESOLVE_AT:
                self._free += (start, end)
        self._pending = waiting


class SyncTimer:
    """Times each stage call on the host with the GPU synchronised at its
    begin and end: the time until the call's GPU work is done (host-only
    work in the stage counts too). It makes the host wait for the GPU."""

    def __init__(self, torch: Any, profiler: Any) -> None:
        self._cuda = torch.cuda
        self._record = profiler.record_stage_gpu_time

    def begin(self) -> Optional[int]:
        if not self._cuda.is_initialized():
            return None
        self._cuda.synchronize()
        return time.perf_counter_ns()

    def end(self, name: str, start: Optional[int]) -> None:
        if start is None:
            return
        self._cuda.synchronize()
        self._record(name, (time.perf_counter_ns() - start) / 1e6)

    def resolve(self) -> None:
        """Nothing is pending: each call was recorded as it ended."""
