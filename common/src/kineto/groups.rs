//! `distributedInfo.pg_config` read as a stream: each process group's
//! description and ranks, and nothing else held. A value of another shape
//! than the reader expects (an entry that is no object, a rank that is no
//! whole number) is passed over without being read into memory.

use std::fmt;
use std::marker::PhantomData;

use serde::de::{Deserialize, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

use crate::parallel::{ProcessGroup, MAX_DESC_BYTES};

/// A value read where it has the shape `T` reads, else passed over: `None`.
pub(super) struct Lenient<T>(pub(super) Option<T>);

/// What [`Lenient`] reads of each shape of value; every other shape is
/// passed over.
pub(super) trait Shape<'de>: Sized {
    /// From a list.
    fn from_seq<A: SeqAccess<'de>>(mut seq: A) -> Result<Option<Self>, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(None)
    }

    /// From an object.
    fn from_map<A: MapAccess<'de>>(mut map: A) -> Result<Option<Self>, A::Error> {
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Ok(None)
    }

    /// From a string.
    fn from_str(_: &str) -> Option<Self> {
        None
    }

    /// From a whole number, 0 or more.
    fn from_u64(_: u64) -> Option<Self> {
        None
    }
}

impl<'de, T: Shape<'de>> Deserialize<'de> for Lenient<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(LenientVisitor(PhantomData))
    }
}

struct LenientVisitor<T>(PhantomData<T>);

impl<'de, T: Shape<'de>> Visitor<'de> for LenientVisitor<T> {
    type Value = Lenient<T>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any value")
    }
    fn visit_bool<E>(self, _: bool) -> Result<Self::Value, E> {
        Ok(Lenient(None))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Self::Value, E> {
        Ok(Lenient(u64::try_from(v).ok().and_then(T::from_u64)))
    }
    fn visit_u64<E>(self, v: u64) -> Result<Self::Value, E> {
        Ok(Lenient(T::from_u64(v)))
    }
    fn visit_f64<E>(self, _: f64) -> Result<Self::Value, E> {
        Ok(Lenient(None))
    }
    fn visit_str<E>(self, v: &str) -> Result<Self::Value, E> {
        Ok(Lenient(T::from_str(v)))
    }
    fn visit_unit<E>(self) -> Result<Self::Value, E> {
        Ok(Lenient(None))
    }
    fn visit_none<E>(self) -> Result<Self::Value, E> {
        Ok(Lenient(None))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Self::Value, A::Error> {
        T::from_seq(seq).map(Lenient)
    }
    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
        T::from_map(map).map(Lenient)
    }
}

/// The groups of a `pg_config` list, those of a usable shape.
pub(super) struct Groups(pub(super) Vec<ProcessGroup>);

impl<'de> Shape<'de> for Groups {
    fn from_seq<A: SeqAccess<'de>>(mut seq: A) -> Result<Option<Self>, A::Error> {
        let mut groups = Vec::new();
        while let Some(Lenient(group)) = seq.next_element::<Lenient<ProcessGroup>>()? {
            groups.extend(group);
        }
        Ok(Some(Groups(groups)))
    }
}

/// A group: an object with a string `pg_desc` and a list `ranks`, every
/// one a rank.
impl<'de> Shape<'de> for ProcessGroup {
    fn from_map<A: MapAccess<'de>>(mut map: A) -> Result<Option<Self>, A::Error> {
        let (mut desc, mut ranks) = (None, None);
        while let Some(key) = map.next_key::<String>()? {
            match key.as_str() {
                "pg_desc" => desc = map.next_value::<Lenient<Desc>>()?.0,
                "ranks" => ranks = map.next_value::<Lenient<Ranks>>()?.0,
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(desc.zip(ranks).map(|(desc, ranks)| ProcessGroup {
            desc: desc.0,
            ranks: ranks.0,
        }))
    }
}

/// A description, up to [`MAX_DESC_BYTES`] (a longer one names nothing:
/// it is not kept).
struct Desc(String);

impl Shape<'_> for Desc {
    fn from_str(v: &str) -> Option<Self> {
        (v.len() <= MAX_DESC_BYTES).then(|| Desc(v.to_string()))
    }
}

/// A list of ranks, each a whole number of 32 bits; `None` where one is
/// not.
struct Ranks(Vec<u32>);

impl<'de> Shape<'de> for Ranks {
    fn from_seq<A: SeqAccess<'de>>(mut seq: A) -> Result<Option<Self>, A::Error> {
        let (mut ranks, mut whole) = (Vec::new(), true);
        while let Some(Lenient(rank)) = seq.next_element::<Lenient<Rank>>()? {
            match rank {
                Some(Rank(rank)) if whole => ranks.push(rank),
                Some(_) => {}
                None => {
                    whole = false;
                    ranks = Vec::new();
                }
            }
        }
        Ok(whole.then_some(Ranks(ranks)))
    }
}

/// One rank.
struct Rank(u32);

impl Shape<'_> for Rank {
    fn from_u64(v: u64) -> Option<Self> {
        u32::try_from(v).ok().map(Rank)
    }
}
