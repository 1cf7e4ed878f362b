//! cargo-fuzz target `layer_walk`: the properties in `fuzz/props.rs` (`props::layer_walk`).
#![no_main]

#[path = "../props.rs"]
mod props;

libfuzzer_sys::fuzz_target!(|data: &[u8]| props::layer_walk(data));
