"""torch.distributed collectives recorded call by call on the host.

Where the program has imported torch.distributed (rankscope never imports
it), each collective called through the module (``dist.all_reduce(...)``)
during a session becomes a row of the session's ``collectives`` table:
its kind, process group, input bytes, and start and end on the host. Rank
0 matches the k-th call of each kind and group across ranks and splits its
time into waiting for the last rank to arrive and the rest, with or
without a torch.profiler window. A call through a name bound before the
session (``from torch.distributed import all_reduce``) is not seen.
Set ``record_collectives=False`` to leave torch.distributed alone.
"""

from __future__ import annotations

import functools
import sys
from typing import Any, Callable, Dict, Optional

from ._rankscope import Config

#: torch.distributed's functions and the collective each performs.
KINDS: Dict[str, str] = {
    "all_reduce": "all_reduce",
    "all_gather": "all_gather",
    "all_gather_into_tensor": "all_gather",
    "all_gather_object": "all_gather",
    "reduce_scatter": "reduce_scatter",
    "reduce_scatter_tensor": "reduce_scatter",
    "broadcast": "broadcast",
    "broadcast_object_list": "broadcast",
    "reduce": "reduce",
    "all_to_all": "all_to_all",
    "all_to_all_single": "all_to_all",
    "barrier": "barrier",
    "gather": "gather",
    "scatter": "scatter",
}


def _bytes(value: Any) -> Optional[int]:
    """Bytes of a tensor, or of a list of tensors; None for anything else."""
    if isinstance(value, (list, tuple)):
        sizes = [_bytes(v) for v in value]
        return None if not sizes or None in sizes else sum(s for s in sizes if s is not None)
    try:
        return int(value.numel()) * int(value.element_size())
    except AttributeError:
        return None


def _group_name(dist: Any, group: Any) -> Optional[str]:
    """The process group's name (the default group's where none is given)."""
    try:
        group = group if group is not None else dist.group.WORLD
        name = getattr(group, "group_name", None)
        return None if name is None else str(name)
    except Exception:  # a group torch cannot name is left unnamed
        return None


class CollectiveCalls:
    """The session's recording: torch.distributed's collectives wrapped
    until ``close()`` puts the originals back."""

    def __init__(self, dist: Any, profiler: Any) -> None:
        self._dist = dist
        self._originals: Dict[str, Callable[..., Any]] = {}
        self._wrapped: Dict[str, Callable[..., Any]] = {}
        for function, kind in KINDS.items():
            original = getattr(dist, function, None)
            if original is None:
                continue
            wrapped = _recorded(original, kind, dist, profiler)
            self._originals[function] = original
            self._wrapped[function] = wrapped
            setattr(dist, function, wrapped)

    def close(self) -> None:
        """Puts back each original that is still wrapped by this recording."""
        for function, original in self._originals.items():
            if getattr(self._dist, function, None) is self._wrapped[function]:
                setattr(self._dist, function, original)
        self._originals.clear()


def _recorded(original: Callable[..., Any], kind: str, dist: Any, profiler: Any) -> Callable[..., Any]:
    @functools.wraps(original)
    def recorded(*args: Any, **kwargs: Any) -> Any:
        start = profiler._collective_begin()
        if start is None:
            return original(*args, **kwargs)
        try:
            return original(*args, **kwargs)
        finally:
            group = _group_name(dist, kwargs.get("group"))
            profiler._record_collective(kind, group, _bytes(args[0]) if args else None, start)

    return recorded


def calls(config: Config, profiler: Any) -> Optional[CollectiveCalls]:
    """The session's recording, where torch.distributed is imported and
    usable and ``record_collectives`` is on; else None."""
    dist = sys.modules.get("torch.distributed")
    if dist is None or not config.record_collectives or not profiler.enabled:
        return None
    try:
        if not dist.is_available():
            return None
    except Exception:
        return None
    return CollectiveCalls(dist, profiler)
