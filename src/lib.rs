//! rancheros-operator: turns `ManagedOSVersionChannel`s into `ManagedOSVersion`s.
//!
//! Module map: `api` (the CRD types), `config` (a channel's spec, checked), `channel` (the
//! channel data rules, shared with `validate`), `syncer` (the pure decision core),
//! `controller` (the kube-rs controller that performs the decisions), `display` and
//! `validate` (the other two subcommands), `metrics` and `duration`.

pub mod api;
pub mod channel;
pub mod config;
pub mod controller;
pub mod display;
pub mod duration;
pub mod metrics;
pub mod operator;
pub mod syncer;
pub mod validate;
