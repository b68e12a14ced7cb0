"""Trace rows grouped by configuration key, as shared/eval/fit_accuracy.py reads them.

A key is (num_nodes, num_replicas, local_bsz); both trace formats are read (a `placement` column
such as "13" = 2 nodes, 4 replicas, or num_nodes/num_replicas columns), and only the rows that
fit_accuracy.py keeps (0 <= sync_time < step_time). Standard library only; used by
fit_uncertainty_coverage.py and trace_key_scatter.py.
"""
import csv
import statistics


def rows_by_key(paths):
    """{key: [(step_time, sync_time), ...]} over the rows of all `paths`."""
    acc = {}
    for path in paths:
        with open(path, newline="") as f:
            for r in csv.DictReader(f):
                if r.get("placement"):
                    p = r["placement"].strip()
                    n, rep = len(p), sum(int(c) for c in p)
                else:
                    n, rep = int(float(r["num_nodes"])), int(float(r["num_replicas"]))
                st, sy = float(r["step_time"]), float(r["sync_time"])
                if st > 0 and sy >= 0 and st > sy:
                    acc.setdefault((n, rep, int(float(r["local_bsz"]))), []).append((st, sy))
    return acc


def mean_by_key(paths):
    """{key: (mean step_time, mean sync_time)}: the averaged rows fit_accuracy.py scores against."""
    return {k: (statistics.fmean(v[0] for v in vs), statistics.fmean(v[1] for v in vs))
            for k, vs in rows_by_key(paths).items()}
