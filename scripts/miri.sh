#!/usr/bin/env bash
# The agent's unsafe and lock-free code under Miri (nightly), with Stacked
# Borrows and with Tree Borrows: the MPI send path's buffer
# (transport::send_buffer), a thread's event log (recorder::events) and a
# payload's round trip through the codec, the IPC streams and the checks
# made before Arrow reads a buffer (with LZ4: zstd is C code, which Miri
# cannot execute). Installs nightly's Miri where it is missing.
set -euo pipefail
cd "$(dirname "$0")/.."
rustup toolchain install nightly --profile minimal --component miri,rust-src >/dev/null
tests=(transport::send_buffer recorder::tests::event_log_)
echo "== Miri, Stacked Borrows: ${tests[*]}"
cargo +nightly miri test -p rankscope --lib --locked -- "${tests[@]}"
echo "== Miri, Tree Borrows: ${tests[*]}"
MIRIFLAGS=-Zmiri-tree-borrows cargo +nightly miri test -p rankscope --lib --locked -- "${tests[@]}"
# The payload's round trip (the fewest tables that hold every column type)
# takes minutes under each model, Tree Borrows about twice Stacked's: built
# once, then the two run side by side, as Miri interprets on one core.
payload=payload::tests::every_column_type_round_trips_with_lz4
cargo +nightly miri test -p rankscope-common --lib --locked --no-run
echo "== Miri, Stacked and Tree Borrows side by side: $payload"
logs=target/miri-payload
mkdir -p "$logs"
cargo +nightly miri test -p rankscope-common --lib --locked -- --exact "$payload" \
    >"$logs/stacked.log" 2>&1 &
stacked=$!
MIRIFLAGS=-Zmiri-tree-borrows cargo +nightly miri test -p rankscope-common --lib --locked \
    -- --exact "$payload" >"$logs/tree.log" 2>&1 &
tree=$!
status=0
wait "$stacked" || status=1
wait "$tree" || status=1
echo "== Miri, Stacked Borrows: $payload"
cat "$logs/stacked.log"
echo "== Miri, Tree Borrows: $payload"
cat "$logs/tree.log"
exit "$status"
