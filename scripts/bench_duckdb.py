"""DuckDB computing rankscope's per-stage statistics from the same stage rows
(scripts/bench-aggregate.sh): per stage name the count, the spread of the
per-rank totals (min, max, avg, population std) and per-call p50/p95/p99.

usage: bench_duckdb.py STAGES.csv STAGES.parquet RUNS
Prints `csv <median s> parquet <median s> rows <n>`.
"""

import statistics
import sys
import time

import duckdb

QUERY = """
WITH calls AS (SELECT rank, name, (end_ns - start_ns) / 1e9 AS s FROM {source}),
totals AS (SELECT name, rank, sum(s) AS t FROM calls GROUP BY name, rank),
spread AS (
    SELECT name, count(*) AS ranks, min(t), max(t), avg(t), stddev_pop(t)
    FROM totals GROUP BY name),
per_call AS (
    SELECT name, count(*) AS calls,
           quantile_cont(s * 1e3, [0.5, 0.95, 0.99]) AS ms
    FROM calls GROUP BY name)
SELECT * FROM spread JOIN per_call USING (name) ORDER BY name
"""


def timed(source: str) -> tuple[float, int]:
    start = time.perf_counter()
    con = duckdb.connect()
    rows = con.execute(QUERY.format(source=source)).fetchall()
    con.close()
    return time.perf_counter() - start, len(rows)


def main() -> None:
    csv_path, parquet_path, runs = sys.argv[1], sys.argv[2], int(sys.argv[3])
    csv_times, parquet_times = [], []
    names = 0
    for _ in range(runs):
        seconds, names = timed(f"read_csv('{csv_path}')")
        csv_times.append(seconds)
        seconds, names = timed(f"read_parquet('{parquet_path}')")
        parquet_times.append(seconds)
    print(
        f"csv {statistics.median(csv_times):.3f} "
        f"parquet {statistics.median(parquet_times):.3f} names {names}"
    )


if __name__ == "__main__":
    main()
