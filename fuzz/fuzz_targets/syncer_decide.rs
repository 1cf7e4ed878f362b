//! cargo-fuzz target `syncer_decide`: the properties in `fuzz/props.rs` (`props::syncer_decide`).
#![no_main]

#[path = "../props.rs"]
mod props;

libfuzzer_sys::fuzz_target!(|data: &[u8]| props::syncer_decide(data));
