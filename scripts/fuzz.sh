#!/usr/bin/env bash
# Runs every native Go fuzz target in the module for FUZZTIME each (default
# 10s), one at a time, and reports executions per target. A crash makes the
# script fail and leaves the reproducer under the package's testdata/fuzz.
# Usage: scripts/fuzz.sh [FUZZTIME] [PACKAGE-PATTERN]
#
# The fuzzing runs under Go 1.27.3 (FUZZ_GOTOOLCHAIN; the go command fetches
# it from the module proxy, ~76 MB once per machine): Go 1.26's fuzz
# coordinator can fail a target with a bare "context deadline exceeded" at the
# -fuzztime boundary when the deadline fires before its workers' context is
# cancelled (go.dev/issue/75804, fixed in 1.27). The rest of the build stays on
# the machine's Go 1.26.
#
# A failure that wrote no reproducer and says only "context deadline
# exceeded" is run once more and reported as such, so a harness hiccup on a
# loaded machine does not read as a finding; any other failure, and any
# failure that wrote a reproducer, fails the script at once.
set -euo pipefail
cd "$(dirname "$0")/.."
fuzztime="${1:-10s}"
pattern="${2:-./...}"
report="${FUZZ_REPORT:-}"
export GOTOOLCHAIN="${FUZZ_GOTOOLCHAIN:-go1.27.3}"
go version
status=0

# run_target PKG TARGET: one fuzzing run; sets out and rc.
run_target() {
	rc=0
	out=$(go test -run '^$' -fuzz "^${2}\$" -fuzztime "$fuzztime" -parallel 1 "$1" 2>&1) || rc=$?
}

for pkg in $(go list "$pattern"); do
	targets=$(go test -list '^Fuzz' "$pkg" 2>/dev/null | grep '^Fuzz' || true)
	for t in $targets; do
		run_target "$pkg" "$t"
		if [ $rc -ne 0 ] && ! grep -q 'Failing input written' <<<"$out" &&
			[ "$(grep -c -- '--- FAIL' <<<"$out")" -eq 1 ] &&
			grep -q '^    context deadline exceeded$' <<<"$out"; then
			echo "$pkg $t: bare 'context deadline exceeded' at the fuzztime boundary, no reproducer written; running it again"
			run_target "$pkg" "$t"
		fi
		if [ $rc -ne 0 ]; then
			status=1
			echo "$out" | tail -30
		fi
		# A budget spent entirely on replaying the corpus prints no execs line.
		execs=$(grep -o 'execs: [0-9]*' <<<"$out" | tail -1 | awk '{print $2}' || true)
		line="$(printf '%-55s %-28s %12s execs' "$pkg" "$t" "${execs:-0}")"
		echo "$line"
		if [ -n "$report" ]; then echo "$line" >>"$report"; fi
	done
done
exit $status
