#!/usr/bin/env bash
# The whole test suite three times in a row at one commit on a loaded box (results:
# benchmarks/results/test-suite.md). Usage: benchmarks/loaded_suite.sh CHECKOUT OUTDIR
# CHECKOUT is a clean checkout of the commit under test (its own .venv is made by scripts/test.sh);
# OUTDIR gets runs.log (start, end, exit status, the end of pytest's output), runN.log (-v: each test
# as it ends) and loadavg.log.
# The load, on a 2-core box:
#  - two pytest-xdist workers (-n 2 --dist loadfile), one per core, each starting its own private
#    systemd and real llama-servers; and
#  - benchmarks/cpu_hog.py: one more process busy half of one core for the whole time.
# /proc/loadavg is sampled every 30 s.
set -u
checkout=$(realpath "$1")
out=$(realpath "$2")
hog=$(realpath "$(dirname "$0")/cpu_hog.py")
mkdir -p "$out"
cd "$checkout"
python3 "$hog" & hog_pid=$!
( while true; do echo "$(date -u +%FT%TZ) $(cat /proc/loadavg)"; sleep 30; done ) > "$out/loadavg.log" & sampler_pid=$!
for i in 1 2 3; do
  echo "run $i start $(date -u +%FT%TZ) commit $(git rev-parse HEAD)" >> "$out/runs.log"
  started=$(date +%s)
  CI=true ./scripts/test.sh -v -ra --durations=15 -n 2 --dist loadfile > "$out/run$i.log" 2>&1
  rc=$?
  echo "run $i end $(date -u +%FT%TZ) rc $rc wall_s $(( $(date +%s) - started ))" >> "$out/runs.log"
  tail -3 "$out/run$i.log" >> "$out/runs.log"
done
kill "$hog_pid" "$sampler_pid"
