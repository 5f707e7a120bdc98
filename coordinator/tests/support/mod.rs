//! Test support shared by the coordinator's tests.

pub mod synthetic;
