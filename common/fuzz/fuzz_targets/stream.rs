//! One table's Arrow IPC stream on arbitrary bytes, behind the payload's
//! checksum and compression (which keep `decode` from seeing most mutated
//! streams): the first byte picks the table. The reader must answer every
//! input with a batch or an error, never a panic, an abort or an unbounded
//! allocation.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rankscope_common::table::Table;

fuzz_target!(|bytes: &[u8]| {
    let Some((&pick, stream)) = bytes.split_first() else {
        return;
    };
    let table = Table::ALL[usize::from(pick) % Table::ALL.len()];
    let _ = rankscope_common::payload::read_table_stream(table, stream.to_vec());
});
