//! cargo-fuzz target `policy_apply`: the properties in `fuzz/props.rs` (`props::policy_apply`).
#![no_main]

#[path = "../props.rs"]
mod props;

libfuzzer_sys::fuzz_target!(|data: &[u8]| props::policy_apply(data));
