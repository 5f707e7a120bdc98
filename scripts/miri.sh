#!/usr/bin/env bash
# The agent's unsafe and lock-free code under Miri (nightly), with Stacked
# Borrows and with Tree Borrows: the MPI send path's buffer
# (transport::send_buffer) and a thread's event log (recorder::events). Installs
# nightly's Miri where it is missing. The payload codec is not run here:
# it calls zstd, C code that Miri cannot execute.
set -euo pipefail
cd "$(dirname "$0")/.."
rustup toolchain install nightly --profile minimal --component miri,rust-src >/dev/null
tests=(transport::send_buffer recorder::tests::event_log_)
echo "== Miri, Stacked Borrows: ${tests[*]}"
cargo +nightly miri test -p rankscope --lib --locked -- "${tests[@]}"
echo "== Miri, Tree Borrows: ${tests[*]}"
MIRIFLAGS=-Zmiri-tree-borrows cargo +nightly miri test -p rankscope --lib --locked -- "${tests[@]}"
