//! cargo-fuzz target `channel_config`: the properties in `fuzz/props.rs` (`props::channel_config`).
#![no_main]

#[path = "../props.rs"]
mod props;

libfuzzer_sys::fuzz_target!(|data: &[u8]| props::channel_config(data));
