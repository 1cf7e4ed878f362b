//! cargo-fuzz target `duration_parse`: the properties in `fuzz/props.rs` (`props::duration_parse`).
#![no_main]

#[path = "../props.rs"]
mod props;

libfuzzer_sys::fuzz_target!(|data: &[u8]| props::duration_parse(data));
