"""The PyTorch integration: used only when the program itself imported
torch (rankscope never imports it, and never sets up CUDA on its own)."""

from __future__ import annotations

import datetime
import secrets
import sys
import threading
import time
import weakref
from typing import Any, Dict, List, Optional, Tuple

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


# Profilers of this process that shared a job token through the store: the
# k-th profiler of every rank reads the k-th token.
_tokens_shared = 0


def with_shared_token(config: Config) -> Config:
    """``config`` with a job token for the TCP gather shared through
    torch.distributed's store, where the program initialised a process
    group and configured no token: rank 0 makes a secret and the others
    read it, so that knowing torchrun's variables no longer suffices to
    forge a rank's data (the store itself is unauthenticated: a secret per
    job, ``RANKSCOPE_TOKEN``, remains the stronger choice)."""
    global _tokens_shared
    dist = sys.modules.get("torch.distributed")
    if dist is None or config.token is not None or not config.enabled:
        return config
    try:
        if not dist.is_available() or not dist.is_initialized():
            return config
        store = dist.distributed_c10d._get_default_store()
        key = f"rankscope/token/{_tokens_shared}"
        _tokens_shared += 1
        if dist.get_rank() == 0:
            token = secrets.token_hex(32)
            store.set(key, token)
        else:
            store.wait([key], datetime.timedelta(seconds=30))
            token = store.get(key).decode()
    except Exception:  # no store to share through: the derived token, and its notice
        return config
    return config.replace(token=token)


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


class _Recorder:
    """The profiler's recording calls, through a weak reference: a timer
    never keeps its profiler alive (the profiler holds the timer)."""

    def __init__(self, profiler: Any) -> None:
        self._profiler = weakref.ref(profiler)

    def gpu_time(self, name: str, ms: float) -> None:
        profiler = self._profiler()
        if profiler is not None:
            profiler.record_stage_gpu_time(name, ms)

    def event(self, name: str, payload: Any) -> None:
        profiler = self._profiler()
        if profiler is not None:
            profiler.add_event(name, payload)


class CudaEventTimer:
    """Times each stage call with a pair of CUDA events recorded on the
    current stream: the host never waits for the GPU. Pairs whose end event
    has completed are resolved now and then (``Event.query``, which does not
    wait) and the rest when the session ends, so at most ``limit`` pairs are
    held; past that, calls are counted as dropped instead. Safe on several
    threads at once (one lock, taken around each call's bookkeeping)."""

    #: Pending pairs past which the completed ones are resolved.
    RESOLVE_AT = 1024

    def __init__(self, torch: Any, profiler: Any, limit: int) -> None:
        self._cuda = torch.cuda
        self._recorder = _Recorder(profiler)
        self._limit = max(1, limit)
        self._lock = threading.Lock()
        # (stage name, start, end), each event with its device.
        self._pending: List[Tuple[str, Tuple[int, Any], Tuple[int, Any]]] = []
        # Events of resolved pairs by device, recorded again instead of made
        # anew (making one costs far more than recording it).
        self._free: Dict[int, List[Any]] = {}
        self._resolve_at = min(self.RESOLVE_AT, self._limit)
        self.dropped = 0

    def _recorded(self) -> Tuple[int, Any]:
        """An event recorded now on the current device's current stream."""
        device = self._cuda.current_device()
        with self._lock:
            free = self._free.get(device)
            event = free.pop() if free else None
        if event is None:
            event = self._cuda.Event(enable_timing=True)
        event.record()
        return (device, event)

    def begin(self) -> Any:
        # A process that has not set up CUDA yet is not made to.
        if not self._cuda.is_initialized():
            return None
        return self._recorded()

    def end(self, name: str, start: Any) -> None:
        if start is None:
            return
        end = self._recorded()
        with self._lock:
            if len(self._pending) >= self._resolve_at:
                self._resolve(wait=False)
                # Resolve again only after as many new pairs.
                self._resolve_at = min(len(self._pending) + self.RESOLVE_AT, self._limit)
            if len(self._pending) >= self._limit:
                self.dropped += 1
                self._release(start, end)
                return
            self._pending.append((name, start, end))

    def resolve(self) -> None:
        """Resolves every pair (waits for the GPU once); called at session end."""
        with self._lock:
            if self._pending:
                self._cuda.synchronize()
            self._resolve(wait=True)
            if self.dropped:
                self._recorder.event("gpu_timing_dropped", {"calls": self.dropped})

    def _resolve(self, wait: bool) -> None:
        """Records the pairs that completed (all with ``wait``); holds the lock."""
        waiting = []
        for name, start, end in self._pending:
            if not wait and not end[1].query():
                waiting.append((name, start, end))
                continue
            if start[0] == end[0]:
                self._recorder.gpu_time(name, start[1].elapsed_time(end[1]))
            else:
                # Events of two devices (the stage changed device) have no
                # elapsed time between them.
                self.dropped += 1
            self._release(start, end)
        self._pending = waiting

    def _release(self, *events: Tuple[int, Any]) -> None:
        """Keeps events for reuse on their devices; holds the lock."""
        for device, event in events:
            free = self._free.setdefault(device, [])
            if len(free) < 2 * self.RESOLVE_AT:
                free.append(event)


class SyncTimer:
    """Times each stage call on the host with the GPU synchronised at its
    begin and end: the time until the call's GPU work is done (host-only
    work in the stage counts too). It makes the host wait for the GPU."""

    def __init__(self, torch: Any, profiler: Any) -> None:
        self._cuda = torch.cuda
        self._recorder = _Recorder(profiler)

    def begin(self) -> Optional[int]:
        if not self._cuda.is_initialized():
            return None
        self._cuda.synchronize()
        return time.perf_counter_ns()

    def end(self, name: str, start: Optional[int]) -> None:
        if start is None:
            return
        self._cuda.synchronize()
        self._recorder.gpu_time(name, (time.perf_counter_ns() - start) / 1e6)

    def resolve(self) -> None:
        """Nothing is pending: each call was recorded as it ended."""
