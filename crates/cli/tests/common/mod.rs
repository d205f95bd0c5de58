//! The CLI's integration tests reach the shared harness (`trantor-testkit`: the hub wrapper,
//! the HTTP client, waits, prerequisites) through this module, plus the seat drills' own
//! helpers in [`seat`]. Each test file `mod common;` includes it.
#![allow(dead_code, unused_imports)]

pub mod seat;

pub use trantor_testkit::*;
