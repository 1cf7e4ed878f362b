//! Every integration test of the operator, in one test binary: one compilation of the
//! shared harness (`common`, `chart_support`) and one link, where a binary per file compiled
//! and linked them once per file. Each module is one concern (the old file of the same
//! name); scripts/lib/run-tests runs the modules side by side, each in a process of its own
//! (`cargo test --test integration MODULE::`), and the ones that touch cluster-wide state
//! alone. One module: `cargo test --test integration hardening::`.

mod chart_support;
mod common;

mod bounds;
mod channel_server;
mod chart_install;
mod chart_render;
mod cli;
mod corpus;
mod crd_check;
mod crds;
mod docs;
mod faults;
mod fuzz_props;
mod gitops;
mod hardening;
mod json_channel;
mod limits;
mod module_graph;
mod no_writes;
mod oci_channel;
mod operability;
mod operator;
mod pod_security;
mod release;
mod release_install;
mod release_upgrade;
mod tenancy;
