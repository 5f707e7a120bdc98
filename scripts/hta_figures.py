"""HTA's figures for a directory of per-rank traces, as JSON on stdout.

Runs Holistic Trace Analysis (``pip install HolisticTraceAnalysis``) the way
its users do: ``TraceAnalysis(trace_dir=...)``, then the temporal breakdown,
the communication/computation overlap and the kernel breakdown. The tests
compare ``rankscope import`` with these figures; ``bench-import.sh`` times it.
"""

import json
import logging
import sys

from hta.trace_analysis import TraceAnalysis


def main() -> None:
    trace_dir = sys.argv[1]
    logging.disable(logging.WARNING)
    analysis = TraceAnalysis(trace_dir=trace_dir)
    temporal = analysis.get_temporal_breakdown(visualize=False)
    overlap = analysis.get_comm_comp_overlap(visualize=False)
    _, kernels = analysis.get_gpu_kernel_breakdown(visualize=False, num_kernels=1_000_000,
                                                   duration_ratio=1.0)
    figures = {
        "temporal": temporal.to_dict(orient="records"),
        "overlap": overlap.to_dict(orient="records"),
        "kernels": kernels.to_dict(orient="records"),
    }
    json.dump(figures, sys.stdout, default=float)


if __name__ == "__main__":
    main()
