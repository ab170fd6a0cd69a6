#!/usr/bin/env bash
# One set-up step of `make run` / `make test`, announced with what it does and roughly how long
# it takes; a step still running after 30 s says so every 30 s (ONBOARD_STEP_HEARTBEAT seconds),
# so a long build is never silent.
# Its output goes to a log (.venv/setup.log) and is shown only when the step fails.
#   tools/step.sh LOG "what it does" "about how long" command args...
set -uo pipefail
log=$1 what=$2 eta=$3
shift 3
mkdir -p "$(dirname "$log")"
start=$SECONDS
echo "onboard setup: $what (${eta})"
echo "==> $what: $*" >>"$log"
"$@" >>"$log" 2>&1 &
pid=$!
trap 'kill "$pid" 2>/dev/null; exit 130' INT TERM
while kill -0 "$pid" 2>/dev/null; do
  for _ in $(seq $((5 * ${ONBOARD_STEP_HEARTBEAT:-30}))); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.2
  done
  kill -0 "$pid" 2>/dev/null && echo "  ... still $what: $((SECONDS - start)) s so far"
done
wait "$pid"
code=$?
if ((code != 0)); then
  echo "onboard setup: $what failed (exit $code); the last lines of $log:" >&2
  tail -n 25 "$log" >&2
  exit "$code"
fi
echo "  done in $((SECONDS - start)) s"
