//! cargo-fuzz target `display_decode`: the properties in `fuzz/props.rs` (`props::display_decode`).
#![no_main]

#[path = "../props.rs"]
mod props;

libfuzzer_sys::fuzz_target!(|data: &[u8]| props::display_decode(data));
