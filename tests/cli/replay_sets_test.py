#!/usr/bin/env python3
"""Tests of scripts/replay_sets.py's table: the figures it reads from a replay's JSON, the targets
it marks as missed, and its refusal of an unknown set. Runs without a build (no replay)."""
import math
import os
import subprocess
import sys
import unittest

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
sys.path.insert(0, os.path.join(ROOT, "scripts"))
import replay_sets  # noqa: E402


def run(oracle, fixed_spot, spot_finished=True, oracle_finished=True):
    return {"policies": [
        {"policy": "oracle", "cost_usd": oracle, "finished": oracle_finished},
        {"policy": "fixed-spot", "cost_usd": fixed_spot, "finished": spot_finished}]}


def report(summary, runs):
    return {"summary": summary, "runs": runs}


GOOD = {"cloudtune_cost_vs_oracle_median": 1.05, "cloudtune_cost_vs_oracle_p90": 1.2,
        "cloudtune_missed_where_oracle_met": 0, "cloudtune_saving_vs_fixed_median": 0.8,
        "cloudtune_saving_vs_fixed_spot_median": 0.4,
        "cloudtune_cost_vs_uniform_progress_median": None,
        "cloudtune_makespan_vs_oracle_time_goal_median": 1.5}


class Table(unittest.TestCase):
    def cells(self, summary, runs=(), seconds=12.0, seeds=None):
        line = replay_sets.row("set", report(summary, list(runs)), seconds, seeds)
        return [c.strip() for c in line.strip("|").split("|")]

    def test_targets_met_are_plain(self):
        c = self.cells(GOOD, [run(1, 2)])
        self.assertEqual(c[0], "set (1)")
        self.assertEqual(c[1], "1.050 / 1.200")
        self.assertEqual(c[2], "0")
        self.assertEqual(c[3], "80.0 / 40.0 %")
        self.assertEqual(c[4], "50.0 %")  # the oracle: 1 - 1/2
        self.assertEqual(c[5], "—")  # no Uniform Progress figure
        self.assertEqual(c[7], "12 s")

    def test_each_missed_target_is_bold(self):
        bad = dict(GOOD, cloudtune_cost_vs_oracle_median=1.2, cloudtune_cost_vs_oracle_p90=1.3,
                   cloudtune_missed_where_oracle_met=2, cloudtune_saving_vs_fixed_median=0.5,
                   cloudtune_saving_vs_fixed_spot_median=0.1)
        c = self.cells(bad)
        self.assertEqual(c[1], "**1.200** / **1.300**")
        self.assertEqual(c[2], "**2**")
        self.assertEqual(c[3], "**50.0** / **10.0** %")

    def test_oracle_saving_counts_only_runs_fixed_spot_finished(self):
        runs = [run(1, 2), run(3, 4), run(1, 100, spot_finished=False)]
        self.assertAlmostEqual(replay_sets.oracle_saving_vs_fixed_spot(report(GOOD, runs)),
                               (0.5 + 0.25) / 2)
        # An oracle that did not finish saves nothing: -inf, the lowest.
        runs = [run(1, 2, oracle_finished=False)]
        self.assertEqual(replay_sets.oracle_saving_vs_fixed_spot(report(GOOD, runs)), -math.inf)

    def test_seeds_and_a_reused_replay_are_labelled(self):
        c = self.cells(GOOD, [run(1, 2)] * 3, seconds=math.nan, seeds=[21, 22, 40])
        self.assertEqual(c[0], "set (3; seeds 21–40)")
        self.assertEqual(c[7], "—")

    def test_an_unknown_set_is_refused_by_name(self):
        r = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "replay_sets.py"),
                            os.devnull, "--sets", "shipped,bogus"], capture_output=True, text=True)
        self.assertEqual(r.returncode, 1)
        self.assertIn("unknown set bogus", r.stderr)
        self.assertEqual(r.stdout, "")


if __name__ == "__main__":
    unittest.main()
