//! cargo-fuzz target `channel_parse`: the properties in `fuzz/props.rs` (`props::channel_parse`).
#![no_main]

#[path = "../props.rs"]
mod props;

libfuzzer_sys::fuzz_target!(|data: &[u8]| props::channel_parse(data));
