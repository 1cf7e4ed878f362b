//! cargo-fuzz target `channel_server_answer`: the properties in `fuzz/props.rs` (`props::channel_server_answer`).
#![no_main]

#[path = "../props.rs"]
mod props;

libfuzzer_sys::fuzz_target!(|data: &[u8]| props::channel_server_answer(data));
