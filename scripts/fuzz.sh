#!/usr/bin/env bash
# Runs every native Go fuzz target in the module for FUZZTIME each (default
# 10s), one at a time, and reports executions per target. A crash makes the
# script fail and leaves the reproducer under the package's testdata/fuzz.
# Usage: scripts/fuzz.sh [FUZZTIME] [PACKAGE-PATTERN]
set -euo pipefail
cd "$(dirname "$0")/.."
fuzztime="${1:-10s}"
pattern="${2:-./...}"
report="${FUZZ_REPORT:-}"
status=0
for pkg in $(go list "$pattern"); do
	targets=$(go test -list '^Fuzz' "$pkg" 2>/dev/null | grep '^Fuzz' || true)
	for t in $targets; do
		out=$(go test -run '^$' -fuzz "^${t}\$" -fuzztime "$fuzztime" -parallel 1 "$pkg" 2>&1) || { status=1; echo "$out" | tail -30; }
		execs=$(echo "$out" | grep -o 'execs: [0-9]*' | tail -1 | awk '{print $2}')
		line="$(printf '%-55s %-28s %12s execs' "$pkg" "$t" "${execs:-?}")"
		echo "$line"
		[ -n "$report" ] && echo "$line" >>"$report"
	done
done
exit $status
