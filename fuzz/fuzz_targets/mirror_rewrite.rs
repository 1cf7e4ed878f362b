//! cargo-fuzz target `mirror_rewrite`: the properties in `fuzz/props.rs` (`props::mirror_rewrite`).
#![no_main]

#[path = "../props.rs"]
mod props;

libfuzzer_sys::fuzz_target!(|data: &[u8]| props::mirror_rewrite(data));
