//! The tables a rank records (DESIGN.md, "Data model"): for each one its Arrow
//! schema, a row type, the record type the agent keeps while recording, a
//! builder that collects rows column by column into a [`RecordBatch`], and a
//! typed view over a decoded batch.
//!
//! Every table is declared once, in the `tables!` invocation below; the
//! schema, row, record, builder and view all come from that one declaration,
//! and so do [`Records`] (the agent's per-thread storage, one queue per
//! table) and [`Builders`] (records of every table into batches). A new
//! table is one entry there.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

use arrow_array::RecordBatch;
use arrow_schema::{ArrowError, Field, Schema, SchemaRef};

use crate::column::{
    ColumnKind, DictStr, OptF64, OptStr, OptU32, OptU64, SessionNs, Str, F64, U32, U64,
};
use crate::names::Names;

/// The `metrics` section whose rows are GPU times of stage calls: the
/// metric's name is the stage's, its value milliseconds.
pub const STAGE_GPU_SECTION: &str = "stage_gpu_ms";

/// The window of the `collectives` rows a rank records on the host, call
/// by call, outside any torch.profiler window (which count from 1).
pub const HOST_WINDOW: u32 = 0;

/// The rows of a `collectives` batch that count: where the host recorded
/// calls one by one ([`HOST_WINDOW`]) those are every call, and the same
/// calls seen in torch.profiler windows are left out, not counted twice.
pub fn counted_collectives<'a>(view: &CollectivesView<'a>) -> impl Iterator<Item = usize> + 'a {
    let window: &'a [u32] = view.window;
    let host = window.contains(&HOST_WINDOW);
    (0..view.len).filter(move |&i| !host || window[i] == HOST_WINDOW)
}

/// The name prefix of the stages the agent records of its own actions on
/// a rank's critical path (a torch.profiler window's start, stop and trace
/// export, ...): reserved, they are the profiler's time, not the program's,
/// and the report tells them as such.
pub const PROFILER_STAGE_PREFIX: &str = "rankscope:";

/// The `metrics` section in which the agent says what profiling cost the
/// rank: the rows named by [`Overhead`].
pub const OVERHEAD_SECTION: &str = "rankscope_overhead";

/// What the agent measures of its own cost, each a `metrics` row of
/// [`OVERHEAD_SECTION`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Overhead {
    /// What one stage costs the thread that records it, nanoseconds,
    /// measured on the rank's machine once per process (at the first
    /// session's end); one row a session.
    StageNsPerCall,
    /// CPU time of the telemetry sampler's thread, milliseconds; one row.
    SamplerCpuMs,
    /// Wall time of the session's flushes (periodic and asked for), milliseconds, all
    /// together; one row.
    FlushMs,
}

impl Overhead {
    /// Every kind of row.
    pub const ALL: &'static [Overhead] = &[
        Overhead::StageNsPerCall,
        Overhead::SamplerCpuMs,
        Overhead::FlushMs,
    ];

    /// The row's metric name.
    pub fn name(self) -> &'static str {
        match self {
            Overhead::StageNsPerCall => "stage_ns_per_call",
            Overhead::SamplerCpuMs => "sampler_cpu_ms",
            Overhead::FlushMs => "flush_ms",
        }
    }
}

/// A typed view of one table's batch; lets [`crate::Payload::view`] find
/// the batch of the view's table.
pub trait TableView<'a>: Sized {
    /// The table viewed.
    const TABLE: Table;
    /// Views `batch`, checking each column's type and nulls.
    fn view(batch: &'a RecordBatch) -> Result<Self, SchemaMismatch>;
}

/// A decoded batch whose columns do not match the table's schema.
#[derive(Debug, thiserror::Error)]
#[error("table `{table}`: column `{column}` is missing or has the wrong type or nulls")]
pub struct SchemaMismatch {
    /// The table being read.
    pub table: &'static str,
    /// The first column that did not match.
    pub column: &'static str,
}

macro_rules! tables {
    ($(
        $(#[doc = $tdoc:literal])*
        $variant:ident = $id:literal, $name:ident, $row:ident, $record:ident, $builder:ident, $view:ident {
            $( $(#[doc = $fdoc:literal])* $field:ident : $kind:ident ),* $(,)?
        }
    )*) => {
        /// One of the tables of the data model.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum Table {
            $( $(#[doc = $tdoc])* $variant, )*
        }

        impl Table {
            /// Every table, in payload order.
            pub const ALL: &'static [Table] = &[$(Table::$variant),*];

            /// The table's name, as in DESIGN.md and the `raw/` file names.
            pub fn name(self) -> &'static str {
                match self { $(Table::$variant => stringify!($name),)* }
            }

            /// The table's one-byte id in the payload.
            pub fn id(self) -> u8 {
                match self { $(Table::$variant => $id,)* }
            }

            /// The table with payload id `id`, if any.
            pub fn from_id(id: u8) -> Option<Table> {
                match id { $($id => Some(Table::$variant),)* _ => None }
            }

            /// The table's Arrow schema.
            pub fn schema(self) -> SchemaRef {
                match self { $(Table::$variant => $builder::schema(),)* }
            }
        }

        /// The agent's storage of one recording thread: one queue of records
        /// per table. The times of [`SessionNs`] columns are the recorder's
        /// clock ticks until [`Records::to_session_ns`] converts them; those
        /// queues only grow between clears.
        #[derive(Debug, Default)]
        pub struct Records {
            $( #[doc = concat!("`", stringify!($name), "` records.")] pub $name: VecDeque<$record>, )*
            /// Per table, as [`Table`] numbers them: the records before it
            /// have their times converted.
            converted: [usize; Table::ALL.len()],
        }

        impl Records {
            /// Forgets every record and keeps the memory, for records that
            /// come again (a flush in a running session).
            pub fn clear(&mut self) {
                $( self.$name.clear(); )*
                self.converted = [0; Table::ALL.len()];
            }

            /// Records held for `table`.
            pub fn len(&self, table: Table) -> usize {
                match table { $(Table::$variant => self.$name.len(),)* }
            }

            /// Whether records wait for [`Records::to_session_ns`].
            pub fn unconverted(&self) -> bool {
                false $( || self.converted[Table::$variant as usize] != self.$name.len() )*
            }

            /// Makes the times recorded as clock ticks ([`SessionNs`]
            /// columns) nanoseconds since the session started by
            /// `session_ns`, in the records not converted yet.
            pub fn to_session_ns(&mut self, session_ns: &dyn Fn(u64) -> u64) {
                $(
                    let done = &mut self.converted[Table::$variant as usize];
                    debug_assert!(*done <= self.$name.len(), "a queue of ticks shrank");
                    let from = (*done).min(self.$name.len());
                    for record in self.$name.range_mut(from..) {
                        $( <$kind as ColumnKind>::to_session_ns(&mut record.$field, session_ns); )*
                    }
                    *done = self.$name.len();
                )*
            }
        }

        /// One builder per table: records of any number of threads in,
        /// one batch per non-empty table out.
        #[derive(Default)]
        pub struct Builders {
            $( $name: $builder, )*
        }

        impl Builders {
            /// Appends every record of `records`, whose names are in `names`.
            pub fn append(&mut self, records: &Records, names: &Names) {
                $( for record in &records.$name { self.$name.append_record(record, names); } )*
            }

            /// The non-empty tables as batches.
            pub fn finish(self) -> Result<BTreeMap<Table, RecordBatch>, ArrowError> {
                let mut tables = BTreeMap::new();
                $(
                    let batch = self.$name.finish()?;
                    if batch.num_rows() > 0 {
                        tables.insert(Table::$variant, batch);
                    }
                )*
                Ok(tables)
            }
        }

        $(
            $(#[doc = $tdoc])*
            #[derive(Debug, Clone, PartialEq)]
            pub struct $row {
                $( $(#[doc = $fdoc])* pub $field: <$kind as ColumnKind>::Value, )*
            }

            $(#[doc = $tdoc])*
            /// As the agent records it: repeated strings are interned ids.
            #[derive(Debug, Clone, PartialEq)]
            pub struct $record {
                $( $(#[doc = $fdoc])* pub $field: <$kind as ColumnKind>::Record, )*
            }

            #[doc = concat!("Collects `", stringify!($name), "` rows column by column.")]
            #[derive(Default)]
            pub struct $builder {
                $( $field: <$kind as ColumnKind>::Builder, )*
            }

            impl $builder {
                /// The table's Arrow schema.
                pub fn schema() -> SchemaRef {
                    Arc::new(Schema::new(vec![
                        $( Field::new(stringify!($field), <$kind as ColumnKind>::data_type(), <$kind as ColumnKind>::NULLABLE), )*
                    ]))
                }

                /// Appends one row.
                pub fn append(&mut self, row: &$row) {
                    $( <$kind as ColumnKind>::append(&mut self.$field, &row.$field); )*
                }

                /// Appends one record, looking its interned names up in `names`.
                pub fn append_record(&mut self, record: &$record, names: &Names) {
                    $( <$kind as ColumnKind>::append_record(&mut self.$field, &record.$field, names); )*
                }

                /// Finishes the rows into one batch.
                pub fn finish(mut self) -> Result<RecordBatch, ArrowError> {
                    RecordBatch::try_new(
                        Self::schema(),
                        vec![$( <$kind as ColumnKind>::finish(&mut self.$field), )*],
                    )
                }
            }

            #[doc = concat!("Typed, zero-copy columns of a decoded `", stringify!($name), "` batch.")]
            pub struct $view<'a> {
                /// Number of rows.
                pub len: usize,
                $( $(#[doc = $fdoc])* pub $field: <$kind as ColumnKind>::View<'a>, )*
            }

            impl<'a> TableView<'a> for $view<'a> {
                const TABLE: Table = Table::$variant;
                fn view(batch: &'a RecordBatch) -> Result<Self, SchemaMismatch> {
                    Self::new(batch)
                }
            }

            impl<'a> $view<'a> {
                /// Views `batch`, checking each column's type and nulls.
                pub fn new(batch: &'a RecordBatch) -> Result<Self, SchemaMismatch> {
                    Ok(Self {
                        len: batch.num_rows(),
                        $( $field: batch
                            .column_by_name(stringify!($field))
                            .and_then(|column| <$kind as ColumnKind>::view(column))
                            .ok_or(SchemaMismatch { table: stringify!($name), column: stringify!($field) })?, )*
                    })
                }
            }
        )*
    };
}

tables! {
    /// One completed stage (a timed region); stages nest per thread.
    Stages = 1, stages, StageRow, StageRecord, StagesBuilder, StagesView {
        /// Stage name.
        name: DictStr,
        /// Track: the recording thread's number within the rank.
        thread: U32,
        /// The recording thread's name.
        thread_name: DictStr,
        /// Stage id, unique within the rank.
        stage_id: U64,
        /// Id of the enclosing stage on the same thread.
        parent_id: OptU64,
        /// Nesting depth; 0 for an outermost stage.
        depth: U32,
        /// Start, nanoseconds since the session started.
        start_ns: U64,
        /// End, nanoseconds since the session started.
        end_ns: U64,
        /// How many earlier calls of this stage name the thread made.
        call_index: U32,
        /// Caller metadata as JSON text.
        metadata: OptStr,
    }
    /// One NVML reading of one GPU.
    GpuSamples = 2, gpu_samples, GpuSampleRow, GpuSampleRecord, GpuSamplesBuilder, GpuSamplesView {
        /// Time of the reading, nanoseconds since the session started.
        ts_ns: U64,
        /// Index of the GPU in the payload header's GPU list.
        gpu: U32,
        /// Device memory in use, bytes.
        memory_used_bytes: OptU64,
        /// Device memory in all, bytes.
        memory_total_bytes: OptU64,
        /// Device memory reserved by the driver, bytes.
        memory_reserved_bytes: OptU64,
        /// GPU utilisation over the driver's last sample period, percent.
        util_gpu_pct: OptF64,
        /// Memory controller utilisation, percent.
        util_mem_pct: OptF64,
        /// GPU temperature, degrees Celsius.
        temperature_c: OptF64,
        /// Power draw, watts.
        power_w: OptF64,
        /// Enforced power limit, watts.
        power_limit_w: OptF64,
        /// SM clock, MHz.
        sm_clock_mhz: OptU32,
        /// Memory clock, MHz.
        mem_clock_mhz: OptU32,
        /// Throttle (clock event) reason bits, as NVML reports them.
        throttle_reasons: OptU64,
        /// PCIe transmit throughput, KB/s (sampled on its own slower schedule).
        pcie_tx_kbps: OptU32,
        /// PCIe receive throughput, KB/s.
        pcie_rx_kbps: OptU32,
    }
    /// One reading of the host.
    HostSamples = 3, host_samples, HostSampleRow, HostSampleRecord, HostSamplesBuilder, HostSamplesView {
        /// Time of the reading, nanoseconds since the session started.
        ts_ns: U64,
        /// CPU use over all cores, percent.
        cpu_pct: OptF64,
        /// Host memory in use, bytes.
        memory_used_bytes: U64,
        /// Host memory in all, bytes.
        memory_total_bytes: U64,
        /// Load average over 1 minute.
        load_1: OptF64,
        /// Load average over 5 minutes.
        load_5: OptF64,
        /// Load average over 15 minutes.
        load_15: OptF64,
        /// Resident memory of this process, bytes.
        process_rss_bytes: OptU64,
    }
    /// One denoising step of a diffusion model.
    DiffusionSteps = 4, diffusion_steps, DiffusionStepRow, DiffusionStepRecord, DiffusionStepsBuilder, DiffusionStepsView {
        /// When the step was recorded, nanoseconds since the session started.
        ts_ns: SessionNs,
        /// Step number.
        step: U64,
        /// Scheduler timestep.
        timestep: F64,
        /// Frames (or tokens) in the block being denoised.
        block_size: U64,
        /// Time the step took, milliseconds.
        computation_ms: F64,
        /// Classifier-free guidance scale.
        guidance_scale: OptF64,
    }
    /// One block computation (a group of frames generated together).
    Blocks = 5, blocks, BlockRow, BlockRecord, BlocksBuilder, BlocksView {
        /// When the block was recorded, nanoseconds since the session started.
        ts_ns: SessionNs,
        /// Block number.
        block_index: U64,
        /// Frames in the block.
        block_size: U64,
        /// Time the block took, milliseconds.
        computation_ms: F64,
        /// Memory the block used, MB.
        memory_mb: OptF64,
    }
    /// One custom metric or throughput reading (section
    /// [`STAGE_GPU_SECTION`]: the GPU time of one stage call).
    Metrics = 6, metrics, MetricRow, MetricRecord, MetricsBuilder, MetricsView {
        /// When it was recorded, nanoseconds since the session started.
        ts_ns: SessionNs,
        /// Group: `custom`, `throughput`, ...
        section: DictStr,
        /// Metric name.
        name: DictStr,
        /// Value.
        value: F64,
    }
    /// One custom event.
    Events = 7, events, EventRow, EventRecord, EventsBuilder, EventsView {
        /// When it happened, nanoseconds since the session started.
        ts_ns: SessionNs,
        /// Event name.
        name: DictStr,
        /// Payload as JSON text.
        payload: OptStr,
    }
    /// One labelled memory snapshot.
    MemorySnapshots = 8, memory_snapshots, MemorySnapshotRow, MemorySnapshotRecord, MemorySnapshotsBuilder, MemorySnapshotsView {
        /// When it was taken, nanoseconds since the session started.
        ts_ns: SessionNs,
        /// Caller's label.
        label: Str,
        /// Where the numbers came from: `caller`, `nvml`, `torch`, `simulated`.
        source: DictStr,
        /// GPU (index in the header's GPU list) the numbers are for.
        gpu: OptU32,
        /// Allocated bytes.
        allocated_bytes: OptU64,
        /// Reserved bytes.
        reserved_bytes: OptU64,
        /// Peak allocated bytes.
        max_allocated_bytes: OptU64,
    }
    /// One named parameter count.
    ModelParameters = 9, model_parameters, ModelParameterRow, ModelParameterRecord, ModelParametersBuilder, ModelParametersView {
        /// Model or component name.
        name: Str,
        /// Number of parameters.
        count: U64,
    }
    /// GPU activities (kernels, memory copies and sets) of torch.profiler
    /// windows.
    Kernels = 10, kernels, KernelRow, KernelRecord, KernelsBuilder, KernelsView {
        /// The window of the session it ran in, from 1.
        window: U32,
        /// The kernel's name as the trace gives it.
        name: DictStr,
        /// `compute`, `communication`, `memory` or `other`.
        category: DictStr,
        /// The CUDA stream.
        stream: U64,
        /// The device index, where the trace gives one.
        device: OptU32,
        /// Start on the session clock (the trace's wall-clock time mapped to it), ns.
        start_ns: U64,
        /// Length, ns.
        dur_ns: U64,
        /// When the host launched it (its runtime call's start), on the
        /// session clock, ns; null where the trace holds no launch.
        launch_ns: OptU64,
    }
    /// Collective calls on the host in torch.profiler windows.
    Collectives = 11, collectives, CollectiveRow, CollectiveRecord, CollectivesBuilder, CollectivesView {
        /// The window of the session it ran in, from 1.
        window: U32,
        /// `all_reduce`, `all_gather`, ...
        kind: DictStr,
        /// The process group, where the trace names it.
        group: OptStr,
        /// Input bytes, where the trace gives them.
        bytes: OptU64,
        /// Start on the session clock, ns.
        start_ns: U64,
        /// Length, ns.
        dur_ns: U64,
    }
    /// CPU operators of torch.profiler windows, per window and name.
    CpuOps = 12, cpu_ops, CpuOpRow, CpuOpRecord, CpuOpsBuilder, CpuOpsView {
        /// The window of the session, from 1.
        window: U32,
        /// The operator (`aten::mm`, ...).
        name: DictStr,
        /// Calls in the window.
        calls: U64,
        /// Time in the calls, nested operators included, ns.
        total_ns: U64,
    }
    /// CPU operators of torch.profiler windows one by one, for the
    /// timeline: each call with its thread.
    CpuSpans = 13, cpu_spans, CpuSpanRow, CpuSpanRecord, CpuSpansBuilder, CpuSpansView {
        /// The window of the session, from 1.
        window: U32,
        /// The operator (`aten::mm`, ...) or `record_function` span.
        name: DictStr,
        /// The trace's thread id.
        thread: U64,
        /// Start on the session clock, ns.
        start_ns: U64,
        /// Length, ns.
        dur_ns: U64,
    }
    /// Traced Python functions (`python_tracing`), per thread (or flush) and
    /// function: every call that returned counted, kept as a
    /// `python_calls` row or not.
    PythonFunctions = 14, python_functions, PythonFunctionRow, PythonFunctionRecord, PythonFunctionsBuilder, PythonFunctionsView {
        /// The function's qualified name, its module first
        /// (`pkg.mod.Class.method`).
        name: DictStr,
        /// Its source file.
        file: DictStr,
        /// Its first line.
        line: U32,
        /// Calls that returned (a generator's resumption is a call).
        calls: U64,
        /// Time in the calls, the calls they made included (a recursive
        /// call's counted once, in its outermost call), ns.
        total_ns: U64,
        /// Time in the calls less that in the traced calls they made, ns.
        self_ns: U64,
    }
    /// Traced Python calls one by one, for the timeline: those that lasted
    /// `python_tracing_min_duration_us` or more, within the row budget.
    PythonCalls = 15, python_calls, PythonCallRow, PythonCallRecord, PythonCallsBuilder, PythonCallsView {
        /// The function's qualified name.
        name: DictStr,
        /// Track: the calling thread's number within the rank (as stages').
        thread: U32,
        /// Traced calls it was inside on its thread; 0 for an outermost call.
        depth: U32,
        /// Start, nanoseconds since the session started.
        start_ns: SessionNs,
        /// End, nanoseconds since the session started.
        end_ns: SessionNs,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_and_names_are_unique_and_round_trip() {
        let mut names = std::collections::HashSet::new();
        for &table in Table::ALL {
            assert_eq!(Table::from_id(table.id()), Some(table));
            assert!(names.insert(table.name()));
        }
        assert_eq!(Table::from_id(0), None);
        assert_eq!(Table::from_id(200), None);
    }

    #[test]
    fn view_rejects_a_batch_of_another_table() {
        let mut builder = ModelParametersBuilder::default();
        builder.append(&ModelParameterRow {
            name: "unet".into(),
            count: 3,
        });
        let batch = builder.finish().unwrap();
        let err = StagesView::new(&batch).err().unwrap();
        assert_eq!(err.table, "stages");
        assert_eq!(err.column, "name");
        let view = ModelParametersView::new(&batch).unwrap();
        assert_eq!(view.name.value(0), "unet");
        assert_eq!(view.count, &[3]);
    }

    #[test]
    fn a_dictionary_key_out_of_range_is_refused_by_the_view() {
        use arrow_array::{DictionaryArray, Int32Array, StringArray};
        // Built unchecked, as a hostile payload could deliver it.
        let keys = Int32Array::from(vec![0, 5]);
        let values = Arc::new(StringArray::from(vec!["decode"]));
        // SAFETY: the array is only viewed, never read through its key 5.
        let dict = unsafe { DictionaryArray::new_unchecked(keys, values) };
        let mut builder = MetricsBuilder::default();
        for _ in 0..2 {
            builder.append(&MetricRow {
                ts_ns: 0,
                section: "custom".into(),
                name: "x".into(),
                value: 1.0,
            });
        }
        let good = builder.finish().unwrap();
        let mut columns = good.columns().to_vec();
        columns[2] = Arc::new(dict);
        let hostile = RecordBatch::try_new(good.schema(), columns).unwrap();
        let err = MetricsView::new(&hostile).err().unwrap();
        assert_eq!((err.table, err.column), ("metrics", "name"));
    }
}
