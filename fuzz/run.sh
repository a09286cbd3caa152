#!/usr/bin/env bash
# Runs every fuzz target for a bounded time (a benchmark, not a CI step: it needs nightly and
# cargo-fuzz). Usage: fuzz/run.sh [SECONDS_PER_TARGET] [TARGET...]   (default: 300 s, all)
# Crashes land in fuzz/artifacts/<target>/; each one found becomes a unit test next to its parser.
set -euo pipefail
cd "$(dirname "$0")"
secs="${1:-300}"
shift || true
if ! rustup toolchain list | grep -q '^nightly'; then
    echo "fuzz: no nightly toolchain (rustup toolchain install nightly); skipped" >&2
    exit 0
fi
if ! cargo +nightly fuzz --version >/dev/null 2>&1; then
    echo "fuzz: cargo-fuzz is missing (cargo install cargo-fuzz --locked); skipped" >&2
    exit 0
fi
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
    mapfile -t targets < <(cargo +nightly fuzz list)
fi
# `cargo fuzz build` takes one target at a time.
for t in "${targets[@]}"; do
    cargo +nightly fuzz build "$t" 2>&1 | tail -n 1
done
status=0
for t in "${targets[@]}"; do
    mkdir -p "corpus/$t"
    start=$(date +%s)
    if cargo +nightly fuzz run "$t" "corpus/$t" -- -max_total_time="$secs" -rss_limit_mb=2048 \
        >"fuzz-$t.log" 2>&1; then
        outcome="no crash"
    else
        outcome="CRASH (see fuzz/fuzz-$t.log and fuzz/artifacts/$t/)"
        status=1
    fi
    # libFuzzer's last line says how many inputs it ran (its dictionary lines may hold "#N").
    runs=$(grep -oE '^Done [0-9]+ runs' "fuzz-$t.log" | grep -oE '[0-9]+' | tail -n 1 || true)
    echo "fuzz: $t ran $(( $(date +%s) - start )) s, ${runs:-?} executions: $outcome"
done
exit "$status"
