#!/usr/bin/env bash
# `make test` time at several commits, measured alike: for each REV, a clean clone of this repository at REV
# runs `bash .ci/run` (sets up its own .venv, runs the fast tests), one after the other on this machine.
# Prints each one's wall time (setup included) and pytest's summary line (the tests' own time).
# Alternate the revisions (A B A B …): this machine's load drifts by ±10 % between runs.
#   bash bench/test-time.sh f9b4601 HEAD f9b4601 HEAD
set -u
repo=$(git -C "$(dirname "$0")/.." rev-parse --show-toplevel)
work=$(mktemp -d)
lscpu | grep -m1 "Model name"; echo "cores: $(nproc)"
for rev in "$@"; do
  sha=$(git -C "$repo" rev-parse --short "$rev")
  cd "$work" && rm -rf clone && git clone -q "$repo" clone && git -C clone checkout -q "$sha" && cd clone
  start=$(date +%s)
  bash .ci/run > "$work/$sha.log" 2>&1
  rc=$?
  echo "$sha rc=$rc wall=$(( $(date +%s) - start ))s $(grep -E 'passed|failed' "$work/$sha.log" | tail -n1)"
done
cd / && rm -rf "$work"
