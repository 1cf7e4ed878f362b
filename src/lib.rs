//! rancheros-operator: turns `ManagedOSVersionChannel`s into `ManagedOSVersion`s.
//!
//! The module map, a paragraph per module from the types at the bottom to the commands at
//! the top, is CONTRIBUTING.md's "How the house is laid out" (a test keeps it complete).

// No input may crash the operator: panicking shortcuts are refused outside tests; the few
// that remain carry an `allow` with the reason the invariant holds. Arithmetic too: an
// overflow panics in a debug build and wraps silently in a release one, so sums of
// durations, times, counts and offsets are checked or saturating.
#![cfg_attr(
    not(test),
    deny(
        clippy::string_slice,
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::panic,
        clippy::arithmetic_side_effects
    )
)]

pub mod admission;
pub mod api;
pub mod budget;
pub mod channel;
pub mod channel_server;
pub mod client;
pub mod commands;
pub mod config;
pub mod controller;
pub mod cosign;
pub mod crds;
pub mod digest;
pub mod duration;
pub mod egress;
pub mod failure;
pub mod fetch;
pub mod http_server;
pub mod leader;
pub mod metrics;
pub mod pace;
pub mod platform;
pub mod policy;
pub mod reference;
pub mod registry;
pub mod schema;
pub mod stop;
pub mod syncer;
pub mod text;
pub mod webhook;
