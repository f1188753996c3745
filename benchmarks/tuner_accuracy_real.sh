#!/usr/bin/env bash
# The real-model tuner accuracy runs, both case sets one after the other, as one command (results:
# benchmarks/results/tuner-accuracy-real-{today,sampled}-LABEL.{md,json}, each with the minutes it took;
# on a busy box a 32-token case alone can take 40 minutes).
# Usage: benchmarks/tuner_accuracy_real.sh idle     # in a quiet window: nothing else running on the box
#        benchmarks/tuner_accuracy_real.sh loaded   # adds benchmarks/cpu_hog.py (half of one core) throughout
# Extra arguments go to benchmarks/tuner_accuracy_real.py (e.g. --lengths 32 for the short cases only).
set -eu
label=${1:-idle}
shift || true
cd "$(dirname "$0")/.."
extra=()
if [ "$label" = loaded ]; then extra=(--hog); fi
echo "load average before the run: $(cut -d' ' -f1-3 /proc/loadavg) ($(nproc) CPUs)" >&2
for set in today sampled; do
  .venv/bin/python benchmarks/tuner_accuracy_real.py --set "$set" --label "$label" "${extra[@]}" "$@"
done
