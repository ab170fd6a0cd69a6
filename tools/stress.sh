#!/usr/bin/env bash
# `make stress`: run a command RUNS times while a busy loop hogs one core, as on a loaded
# CI machine; stop at the first failure. With pytest-randomly installed, each run of the
# suite takes a new random order, its seed printed (pass it back with --randomly-seed=N).
#   tools/stress.sh RUNS command args...
set -uo pipefail
runs=$1
shift
python3 -c 'while True: pass' &
hog=$!
trap 'kill "$hog" 2>/dev/null' EXIT
for ((i = 1; i <= runs; i++)); do
  seed=$((RANDOM * 32768 + RANDOM))
  echo "stress: run $i of $runs, one core busy, random order --randomly-seed=$seed: $*"
  start=$SECONDS
  "$@" -p randomly --randomly-seed="$seed"
  code=$?
  echo "stress: run $i ended with exit $code after $((SECONDS - start)) s"
  ((code == 0)) || exit "$code"
done
