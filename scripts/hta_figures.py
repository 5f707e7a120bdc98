"""HTA's figures for a directory of per-rank traces, as JSON on stdout.

Runs Holistic Trace Analysis (``pip install HolisticTraceAnalysis``) the way
its users do: ``TraceAnalysis(trace_dir=...)``, then the temporal breakdown,
the communication/computation overlap and the kernel breakdown. The tests
compare ``rankscope import`` with these figures; ``bench-import.sh`` times it.
"""

import json
import logging
import math
import sys
from typing import Any, Dict, List

from hta.trace_analysis import TraceAnalysis


def records(frame: Any) -> List[Dict[str, Any]]:
    """A frame's rows, HTA's NaN (a figure it could not compute, such as
    the overlap of a rank with no communication kernel) as null."""
    return [{key: None if isinstance(value, float) and math.isnan(value) else value
             for key, value in row.items()}
            for row in frame.to_dict(orient="records")]


def main() -> None:
    trace_dir = sys.argv[1]
    logging.disable(logging.WARNING)
    analysis = TraceAnalysis(trace_dir=trace_dir)
    temporal = analysis.get_temporal_breakdown(visualize=False)
    overlap = analysis.get_comm_comp_overlap(visualize=False)
    _, kernels = analysis.get_gpu_kernel_breakdown(visualize=False, num_kernels=1_000_000,
                                                   duration_ratio=1.0)
    figures = {
        "temporal": records(temporal),
        "overlap": records(overlap),
        "kernels": records(kernels),
    }
    json.dump(figures, sys.stdout, default=float, allow_nan=False)


if __name__ == "__main__":
    main()
