//! How a Rust value maps onto one Arrow column: its type, its builder and its
//! read-only view. The table definitions in [`crate::table`] are lists of
//! named columns of these kinds.
//!
//! A value has two owned forms: the *value* a row holds (strings as
//! `String`), and the *record* the agent keeps while recording (strings that
//! repeat as interned [`NameId`]s, so that recording a row allocates nothing;
//! times of [`SessionNs`] columns as the recorder's clock ticks until the
//! agent converts them in place).

use std::sync::Arc;

use arrow_array::builder::{
    ArrayBuilder, Float64Builder, StringBuilder, StringDictionaryBuilder, UInt32Builder,
    UInt64Builder,
};
use arrow_array::types::{Float64Type, Int32Type, UInt32Type, UInt64Type};
use arrow_array::{
    Array, ArrayRef, ArrowPrimitiveType, DictionaryArray, PrimitiveArray, StringArray,
};
use arrow_schema::DataType;

use crate::names::{NameId, Names};

/// One kind of column: the owned value a row holds, the builder that collects
/// it and the typed view a reader gets back.
pub trait ColumnKind {
    /// The value one row holds in this column.
    type Value;
    /// The value as the agent records it (interned strings are [`NameId`]s).
    type Record;
    /// The Arrow builder that collects the column.
    type Builder: ArrayBuilder + Default;
    /// Typed, zero-copy access to a decoded column.
    type View<'a>;
    /// Whether the column may hold nulls.
    const NULLABLE: bool;
    /// The Arrow type of the column.
    fn data_type() -> DataType;
    /// Appends one row's value.
    fn append(builder: &mut Self::Builder, value: &Self::Value);
    /// Appends one recorded value, looking interned names up in `names`.
    fn append_record(builder: &mut Self::Builder, record: &Self::Record, names: &Names);
    /// Makes a recorded time of the recorder's clock nanoseconds since the
    /// session started, by `session_ns`: what only [`SessionNs`] columns
    /// hold.
    fn to_session_ns(_record: &mut Self::Record, _session_ns: &dyn Fn(u64) -> u64) {}
    /// Finishes the builder into an array.
    fn finish(builder: &mut Self::Builder) -> ArrayRef;
    /// Views a decoded array; `None` when its type or nulls do not match.
    fn view(array: &ArrayRef) -> Option<Self::View<'_>>;
}

/// A column of optional primitive values.
#[derive(Debug)]
pub struct OptColumn<'a, T: ArrowPrimitiveType>(&'a PrimitiveArray<T>);

impl<T: ArrowPrimitiveType> Clone for OptColumn<'_, T> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T: ArrowPrimitiveType> Copy for OptColumn<'_, T> {}

impl<T: ArrowPrimitiveType> OptColumn<'_, T> {
    /// The value of row `i`, `None` where it is missing.
    pub fn get(&self, i: usize) -> Option<T::Native> {
        self.0.is_valid(i).then(|| self.0.value(i))
    }
}

/// A column of optional strings.
#[derive(Debug, Clone, Copy)]
pub struct OptStrColumn<'a>(&'a StringArray);

impl<'a> OptStrColumn<'a> {
    /// The string of row `i`, `None` where it is missing.
    pub fn get(&self, i: usize) -> Option<&'a str> {
        self.0.is_valid(i).then(|| self.0.value(i))
    }
}

/// A dictionary-encoded string column: each row is a key into a small set of
/// distinct strings (stage names, metric names).
#[derive(Debug, Clone, Copy)]
pub struct DictStrColumn<'a> {
    keys: &'a [i32],
    values: &'a StringArray,
}

impl<'a> DictStrColumn<'a> {
    /// The string of row `i`.
    pub fn get(&self, i: usize) -> &'a str {
        self.values.value(self.key(i))
    }
    /// The dictionary key of row `i`: equal keys mean equal strings.
    pub fn key(&self, i: usize) -> usize {
        // Checked against the dictionary's length when the view was made.
        self.keys[i] as usize
    }
    /// The distinct strings, indexed by key.
    pub fn dictionary(&self) -> &'a StringArray {
        self.values
    }
}

fn non_null(array: &ArrayRef) -> Option<&ArrayRef> {
    (array.null_count() == 0).then_some(array)
}

macro_rules! primitive_kind {
    ($(#[$doc:meta])* $kind:ident, $opt_kind:ident, $native:ty, $arrow:ty, $builder:ty) => {
        $(#[$doc])*
        #[derive(Debug)]
        pub struct $kind;

        impl ColumnKind for $kind {
            type Value = $native;
            type Record = $native;
            type Builder = $builder;
            type View<'a> = &'a [$native];
            const NULLABLE: bool = false;
            fn data_type() -> DataType {
                <$arrow as ArrowPrimitiveType>::DATA_TYPE
            }
            fn append(builder: &mut Self::Builder, value: &Self::Value) {
                builder.append_value(*value);
            }
            fn append_record(builder: &mut Self::Builder, record: &Self::Record, _: &Names) {
                Self::append(builder, record);
            }
            fn finish(builder: &mut Self::Builder) -> ArrayRef {
                Arc::new(builder.finish())
            }
            fn view(array: &ArrayRef) -> Option<Self::View<'_>> {
                let array = non_null(array)?.as_any().downcast_ref::<PrimitiveArray<$arrow>>()?;
                Some(array.values())
            }
        }

        $(#[$doc])*
        /// Missing values are nulls.
        #[derive(Debug)]
        pub struct $opt_kind;

        impl ColumnKind for $opt_kind {
            type Value = Option<$native>;
            type Record = Option<$native>;
            type Builder = $builder;
            type View<'a> = OptColumn<'a, $arrow>;
            const NULLABLE: bool = true;
            fn data_type() -> DataType {
                <$arrow as ArrowPrimitiveType>::DATA_TYPE
            }
            fn append(builder: &mut Self::Builder, value: &Self::Value) {
                builder.append_option(*value);
            }
            fn append_record(builder: &mut Self::Builder, record: &Self::Record, _: &Names) {
                Self::append(builder, record);
            }
            fn finish(builder: &mut Self::Builder) -> ArrayRef {
                Arc::new(builder.finish())
            }
            fn view(array: &ArrayRef) -> Option<Self::View<'_>> {
                array.as_any().downcast_ref::<PrimitiveArray<$arrow>>().map(OptColumn)
            }
        }
    };
}

primitive_kind!(
    /// Unsigned 32-bit integers.
    U32, OptU32, u32, UInt32Type, UInt32Builder
);
primitive_kind!(
    /// Unsigned 64-bit integers.
    U64, OptU64, u64, UInt64Type, UInt64Builder
);
primitive_kind!(
    /// 64-bit floats.
    F64, OptF64, f64, Float64Type, Float64Builder
);

/// A time in nanoseconds since the session started, recorded as the
/// recorder's clock ticks (a counter reading, cheaper than the monotonic
/// clock) and converted in place by [`ColumnKind::to_session_ns`] before the
/// record becomes a row.
#[derive(Debug)]
pub struct SessionNs;

impl ColumnKind for SessionNs {
    type Value = u64;
    type Record = u64;
    type Builder = UInt64Builder;
    type View<'a> = &'a [u64];
    const NULLABLE: bool = false;
    fn data_type() -> DataType {
        U64::data_type()
    }
    fn append(builder: &mut Self::Builder, value: &Self::Value) {
        U64::append(builder, value);
    }
    fn append_record(builder: &mut Self::Builder, record: &Self::Record, names: &Names) {
        U64::append_record(builder, record, names);
    }
    fn to_session_ns(ticks: &mut Self::Record, session_ns: &dyn Fn(u64) -> u64) {
        *ticks = session_ns(*ticks);
    }
    fn finish(builder: &mut Self::Builder) -> ArrayRef {
        U64::finish(builder)
    }
    fn view(array: &ArrayRef) -> Option<Self::View<'_>> {
        U64::view(array)
    }
}

/// Plain UTF-8 strings, for values that rarely repeat.
#[derive(Debug)]
pub struct Str;

impl ColumnKind for Str {
    type Value = String;
    type Record = NameId;
    type Builder = StringBuilder;
    type View<'a> = &'a StringArray;
    const NULLABLE: bool = false;
    fn data_type() -> DataType {
        DataType::Utf8
    }
    fn append(builder: &mut Self::Builder, value: &Self::Value) {
        builder.append_value(value);
    }
    fn append_record(builder: &mut Self::Builder, record: &Self::Record, names: &Names) {
        builder.append_value(names.name(*record));
    }
    fn finish(builder: &mut Self::Builder) -> ArrayRef {
        Arc::new(builder.finish())
    }
    fn view(array: &ArrayRef) -> Option<Self::View<'_>> {
        non_null(array)?.as_any().downcast_ref::<StringArray>()
    }
}

/// Optional UTF-8 strings (JSON metadata, event payloads).
#[derive(Debug)]
pub struct OptStr;

impl ColumnKind for OptStr {
    type Value = Option<String>;
    type Record = Option<String>;
    type Builder = StringBuilder;
    type View<'a> = OptStrColumn<'a>;
    const NULLABLE: bool = true;
    fn data_type() -> DataType {
        DataType::Utf8
    }
    fn append(builder: &mut Self::Builder, value: &Self::Value) {
        builder.append_option(value.as_deref());
    }
    fn append_record(builder: &mut Self::Builder, record: &Self::Record, _: &Names) {
        Self::append(builder, record);
    }
    fn finish(builder: &mut Self::Builder) -> ArrayRef {
        Arc::new(builder.finish())
    }
    fn view(array: &ArrayRef) -> Option<Self::View<'_>> {
        array
            .as_any()
            .downcast_ref::<StringArray>()
            .map(OptStrColumn)
    }
}

/// Dictionary-encoded strings, for names that repeat on many rows.
#[derive(Debug)]
pub struct DictStr;

impl ColumnKind for DictStr {
    type Value = String;
    type Record = NameId;
    type Builder = StringDictionaryBuilder<Int32Type>;
    type View<'a> = DictStrColumn<'a>;
    const NULLABLE: bool = false;
    fn data_type() -> DataType {
        DataType::Dictionary(Box::new(DataType::Int32), Box::new(DataType::Utf8))
    }
    fn append(builder: &mut Self::Builder, value: &Self::Value) {
        builder.append_value(value);
    }
    fn append_record(builder: &mut Self::Builder, record: &Self::Record, names: &Names) {
        builder.append_value(names.name(*record));
    }
    fn finish(builder: &mut Self::Builder) -> ArrayRef {
        Arc::new(builder.finish())
    }
    fn view(array: &ArrayRef) -> Option<Self::View<'_>> {
        let dict = non_null(array)?
            .as_any()
            .downcast_ref::<DictionaryArray<Int32Type>>()?;
        let values = dict.values().as_any().downcast_ref::<StringArray>()?;
        let keys = dict.keys().values();
        // Untrusted input: every key must name a string of the dictionary.
        let in_range = keys.iter().all(|&k| k >= 0 && (k as usize) < values.len());
        if values.null_count() != 0 || !in_range {
            return None;
        }
        Some(DictStrColumn { keys, values })
    }
}
