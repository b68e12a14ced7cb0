#!/usr/bin/python3
"""Fashion-MNIST statistical-efficiency experiment (docs/fmnist_experiment.md).

Trains the example CNN (examples/train_fashion_mnist.cpp, 2 workers over Gloo on 127.0.0.1) at
total batch B0, 2*B0 and 8*B0 (AdaScale learning rate relative to --lr at B0), and once with
--adaptive-batch starting at B0. Every run writes a validation trace (progress in steps at B0,
iteration, test accuracy, |G|^2, tr(Sigma) at B0). Then:

  * for each accuracy level A in --compare: P = the progress at which the B0 run first reached A;
    `cloudtune steps --observed B0=b0.csv --observed 2B0=2b0.csv --batch 8B0 --progress P`
    predicts the steps at 8*B0 (the 8*B0 run is not shown to it); actual = the first evaluation
    of the 8*B0 run with accuracy >= A;
  * the adaptive run's first evaluation with accuracy >= --adaptive-target vs the B0 run's.

The B0 and 8*B0 runs stop at --target (evaluated every 50 and 10 steps), the adaptive run at
--adaptive-target (every 50); the 2*B0 run goes --steps-2b0 steps so that its trace covers P. The
fixed-batch runs run side by side, the adaptive one alone (its decisions use measured step
times). Runs whose directory already holds a finished log are reused (--rerun to force). Standard
library only. Prints a JSON summary and writes it to OUT/summary.json.

  scripts/fmnist_steps_experiment.py --bin build/bin/train_fashion_mnist --cli build/bin/cloudtune
"""
import argparse
import csv
import json
import os
import subprocess
import sys
import time


def first_crossing(path, target):
    """(iteration, progress) of the first row with metric >= target, or None."""
    with open(path) as f:
        for row in csv.DictReader(f):
            if float(row["metric"]) >= target:
                return int(float(row["iteration"])), float(row["progress"])
    return None


def start(name, args, flags, out):
    """Starts a run (or reuses a finished one); returns (validation csv, log, process or None)."""
    d = os.path.join(out, name)
    os.makedirs(d, exist_ok=True)
    log = os.path.join(d, "train.log")
    cmd = [os.path.abspath(args.bin), "--workers", str(args.workers), "--seed", str(args.seed),
           "--lr", str(args.lr), "--base-batch", str(args.workers * args.local),
           "--test-limit", str(args.test_limit), "--log-every", "50",
           "--validation-csv", "validation.csv"] + flags
    proc = None
    if not args.rerun and os.path.exists(log) and "summary:" in open(log).read():
        print(f"[{name}] reusing {log}", file=sys.stderr)
    else:
        print(f"[{name}] (cd {d} && {' '.join(cmd)})", file=sys.stderr)
        proc = subprocess.Popen(cmd, cwd=d, stdout=open(log, "w"), stderr=subprocess.STDOUT)
        proc.name, proc.log, proc.t0 = name, log, time.time()
    return os.path.join(d, "validation.csv"), log, proc


def wait(procs):
    for proc in procs:
        if proc is None:
            continue
        rc = proc.wait()
        if rc != 0:
            sys.exit(f"[{proc.name}] failed with status {rc}; see {proc.log}")
        print(f"[{proc.name}] done in {time.time() - proc.t0:.0f} s", file=sys.stderr)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--bin", default="build/bin/train_fashion_mnist")
    p.add_argument("--cli", default="build/bin/cloudtune")
    p.add_argument("--out", default="fmnist-experiment")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--local", type=int, default=16, help="local batch at B0 (B0 = workers*local)")
    p.add_argument("--lr", type=float, default=0.05, help="learning rate at B0")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--target", type=float, default=0.88,
                   help="test accuracy at which the B0 and 8*B0 runs stop")
    p.add_argument("--compare", default="0.8,0.82,0.84,0.85,0.86,0.87,0.88",
                   help="accuracy levels at which predicted and actual 8*B0 steps are compared")
    p.add_argument("--adaptive-target", type=float, default=0.86,
                   help="test accuracy the adaptive run stops at (compared with the B0 run)")
    p.add_argument("--test-limit", type=int, default=1000, help="test samples per worker")
    p.add_argument("--steps-b0", type=int, default=2500)
    p.add_argument("--steps-2b0", type=int, default=900)
    p.add_argument("--steps-8b0", type=int, default=600)
    p.add_argument("--rerun", action="store_true", help="run again even if a finished log exists")
    args = p.parse_args()
    b0 = args.workers * args.local
    common = ["--lr-scaling", "adascale", "--adapt-every", "50"]

    target = ["--target-accuracy", str(args.target)]
    # The fixed-batch runs do not depend on timing: run them side by side.
    v_b0, _, p0 = start("b0", args, common + target + [
        "--batch", str(args.local), "--epochs", "10", "--steps", str(args.steps_b0),
        "--eval-every", "50"], args.out)
    v_2b0, _, p1 = start("2b0", args, common + [
        "--batch", str(2 * args.local), "--epochs", "10", "--steps", str(args.steps_2b0),
        "--eval-every", "25"], args.out)
    v_8b0, _, p2 = start("8b0", args, common + target + [
        "--batch", str(8 * args.local), "--epochs", "10", "--steps", str(args.steps_8b0),
        "--eval-every", "10"], args.out)
    wait([p0, p1, p2])
    # The adaptive run measures step times to decide: run it alone.
    v_ad, log_ad, p3 = start("adaptive", args, [
        "--target-accuracy", str(args.adaptive_target), "--adaptive-batch", "--adapt-every", "50",
        "--batch", str(args.local), "--epochs", "10", "--steps", str(args.steps_b0),
        "--eval-every", "50"], args.out)
    wait([p3])

    # Predicted vs actual steps at 8*B0 for each accuracy level both fixed runs reached.
    rows = []
    for level in [float(x) for x in args.compare.split(",")]:
        c_b0, c_8b0 = first_crossing(v_b0, level), first_crossing(v_8b0, level)
        row = {"accuracy": level, "b0_steps": c_b0 and c_b0[0], "actual_8b0_steps": c_8b0 and c_8b0[0]}
        if c_b0 is None or c_8b0 is None:
            row["note"] = "not reached by the B0 run" if c_b0 is None else "not reached at 8*B0"
            rows.append(row)
            continue
        cmd = [args.cli, "steps", "--observed", f"{b0}={v_b0}", "--observed", f"{2 * b0}={v_2b0}",
               "--batch", str(8 * b0), "--progress", str(c_b0[1])]
        r = subprocess.run(cmd, capture_output=True, text=True)
        row["steps_command"] = " ".join(cmd)
        if r.returncode != 0:
            row["note"] = r.stderr.strip()
        else:
            pred = json.loads(r.stdout)
            row.update({
                "progress": c_b0[1],
                "predicted_8b0_steps": pred["iterations"],
                "predicted_low": round(pred.get("iterations_low", 0), 1),
                "predicted_high": round(pred.get("iterations_high", 0), 1),
                "plain_theory_steps": round(pred.get("iterations_plain_theory", 0), 1),
                "error": round(pred["iterations"] / c_8b0[0] - 1, 3),
                "progress_8b0_at_accuracy": c_8b0[1],
            })
        rows.append(row)
    c_b0 = first_crossing(v_b0, args.adaptive_target)
    c_ad = first_crossing(v_ad, args.adaptive_target)
    switches = [l.strip() for l in open(log_ad) if "adaptive-batch: step" in l and " switch " in l]
    summary = {
        "base_batch": b0,
        "prediction_8b0": rows,
        "adaptive": {
            "target_accuracy": args.adaptive_target,
            "fixed_b0_steps": c_b0 and c_b0[0],
            "adaptive_steps": c_ad and c_ad[0],
            "adaptive_progress": c_ad and c_ad[1],
            "switches": switches,
        },
    }
    with open(os.path.join(args.out, "summary.json"), "w") as f:
        json.dump(summary, f, indent=2)
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
