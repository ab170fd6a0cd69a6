#!/usr/bin/env bash
# The Engage critic's table (issue 15, item 1): each row's evaluation runs, then one table.
#
#   bench/engage_critic_runs.sh [OUT_DIR] [SHIPPED_TRIALS] [HELDOUT_TRIALS]
#
# Rows: SmolLM2 alone (--critic none), SmolLM2 + the skill's critic, a random proposer + the
# critic, and the random proposer alone; each on the four shipped scenarios and on the nine
# held-out ones (skills/scenarios/heldout). The SmolLM2 runs are recorded (--record) so the
# table counts requests and late replies. About 50 minutes on 2 cores (SmolLM2 + critic is
# most of it: every veto is a re-ask); outside CI. Defaults: build/engage-critic, 10, 4.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-build/engage-critic}
shipped_trials=${2:-10}
heldout_trials=${3:-4}
onboard=.venv/bin/onboard
mkdir -p "$out"
git rev-parse HEAD >"$out/commit"

shipped=(--scenario person-robot --scenario person-object --scenario person-environment
  --scenario person-person)
heldout=()
for file in skills/scenarios/heldout/*.toml; do heldout+=(--scenario "$(basename "$file" .toml)"); done

run() { # NAME GROUP ARGS...: one evaluation into $out/NAME-GROUP.json
  local name=$1 group=$2
  shift 2
  local scenarios=("${shipped[@]}") trials=$shipped_trials
  if [ "$group" = held ]; then scenarios=("${heldout[@]}") trials=$heldout_trials; fi
  echo "$(date -u +%H:%M:%S) $name $group: $trials trials a scenario" >&2
  "$onboard" eval engage --trials "$trials" "${scenarios[@]}" "$@" --json \
    >"$out/$name-$group.json" # failed trials are what the table counts: exit 0
}

for group in shipped held; do
  run smollm2 "$group" --llm local --critic none --record "$out/rec-smollm2-$group"
  run smollm2-critic "$group" --llm local --record "$out/rec-smollm2-critic-$group"
  run random-critic "$group" --llm random
  run random "$group" --llm random --critic none
done

table=()
for name in smollm2 smollm2-critic random-critic random; do
  for group in shipped held; do
    rec=""
    if [ -d "$out/rec-$name-$group" ]; then rec=":$out/rec-$name-$group"; fi
    table+=("$name=$out/$name-$group.json$rec")
  done
done
.venv/bin/python bench/engage_critic_table.py "${table[@]}"
