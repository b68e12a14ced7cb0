#!/usr/bin/env bash
# Command (1) of the README: install, build, and run the demo — Fashion-MNIST trained by 2 worker
# processes over Gloo on 127.0.0.1 with the tuner on — then show where the sidecar is and what it says.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/build.sh
out="$PWD/demo-output"
mkdir -p "$out"
rm -f "$out"/cloudtune.*
export CLOUDTUNE=1
export CLOUDTUNE_SIDECAR="$out/cloudtune.sidecar.jsonl"
export CLOUDTUNE_PROFILE="$out/cloudtune.profile.csv"
# The search prices configurations by instance type. This machine is no cloud instance, so the
# demo's measured step times are priced as if they came from a g4dn.12xlarge (4x T4); a real job
# sets the type it runs on.
export CLOUDTUNE_INSTANCE_TYPE="${CLOUDTUNE_INSTANCE_TYPE:-g4dn.12xlarge}"
export CLOUDTUNE_STATE="${CLOUDTUNE_STATE:-$out/cloudtune.state.json}"
export CLOUDTUNE_REFIT_SECONDS="${CLOUDTUNE_REFIT_SECONDS:-10}"
# Finished = the epochs the demo trains (Fashion-MNIST has 60,000 training samples).
export CLOUDTUNE_TARGET_EPOCHS="${CLOUDTUNE_TARGET_EPOCHS:-${DEMO_EPOCHS:-2}}"
export CLOUDTUNE_DATASET_SIZE="${CLOUDTUNE_DATASET_SIZE:-60000}"
build/bin/train_fashion_mnist --workers 2 --epochs "${DEMO_EPOCHS:-2}" --cache "$out/data"
echo
echo "== sidecar: $CLOUDTUNE_SIDECAR"
echo "== profile: $CLOUDTUNE_PROFILE"
# The report (plots; open it in a browser) and its five-line summary.
build/bin/cloudtune report "$CLOUDTUNE_SIDECAR" --state "$CLOUDTUNE_STATE" -o "$out/report.html"
