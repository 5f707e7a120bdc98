//! The payload decoder on arbitrary bytes: it must answer every input with a
//! payload or an error, never a panic, an abort or an unbounded allocation.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|bytes: &[u8]| {
    let _ = rankscope_common::payload::decode(bytes);
});
