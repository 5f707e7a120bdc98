//! rankscope-common: the data model every rankscope crate shares.
//!
//! - [`table`]: the tables a rank records, with their Arrow schemas, row
//!   builders and typed views;
//! - [`payload`]: the rank payload, the one format of a rank's data on the
//!   wire and on disk ([`payload::encode`], [`payload::decode`]);
//! - [`config`]: the configuration ([`Config`]) from presets, files and
//!   `RANKSCOPE_*` variables;
//! - [`env`](mod@env): which launcher started this process and where it sits in the job;
//! - [`gather`]: what rank 0 accepts into a report, whatever the transport
//!   ([`gather::accept`], [`gather::Gathered`], [`gather::Rejection`]);
//! - [`spill`]: payloads on disk, written atomically and read back safely;
//! - [`window`]: windows of a running session, and the control files that
//!   ask for and plan them;
//! - [`parallel`]: a rank's parallel coordinates (TP, DP, PP, ...) from
//!   its process groups.
//!
//! ```
//! use rankscope_common::table::{ModelParameterRow, ModelParametersBuilder, Table};
//! use rankscope_common::payload::{self, Compression};
//!
//! let mut params = ModelParametersBuilder::default();
//! params.append(&ModelParameterRow { name: "transformer".into(), count: 1_300_000_000 });
//! let header = payload::PayloadHeader::new("job-1", "t2v", 0, 1);
//! let mut payload = payload::Payload { header, tables: Default::default() };
//! payload.tables.insert(Table::ModelParameters, params.finish().unwrap());
//! let bytes = payload::encode(&payload, Compression::Zstd).unwrap();
//! assert_eq!(payload::decode(&bytes).unwrap().rows(Table::ModelParameters), 1);
//! ```
#![deny(missing_docs)]

pub mod column;
pub mod config;
pub mod env;
pub mod error;
pub mod file;
pub mod gather;
pub mod kineto;
pub mod names;
pub mod parallel;
pub mod payload;
pub mod remote;
pub mod spill;
pub mod table;
pub mod text;
pub mod window;

pub use arrow_array::RecordBatch;
pub use arrow_schema::ArrowError;
pub use config::Config;
pub use gather::{ConnectionRefusal, Gathered, NodeSent, Rejection, Skipped};
pub use payload::{Payload, PayloadError, PayloadHeader};
pub use table::Table;
