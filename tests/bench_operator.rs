//! The unit tests of the operator benchmark's pure parts (benches/operator: its parsing of
//! metrics and logs, its objects, its report), which its own target, a `harness = false`
//! benchmark, cannot run.
#![allow(dead_code)]

#[path = "../benches/operator/audit.rs"]
mod audit;
#[path = "../benches/operator/date.rs"]
mod date;
#[path = "../benches/operator/objects.rs"]
mod objects;
#[path = "../benches/operator/oci_image.rs"]
mod oci_image;
#[path = "../benches/operator/only.rs"]
mod only;
#[path = "../benches/operator/parse.rs"]
mod parse;
#[path = "../benches/operator/push.rs"]
mod push;
#[path = "../benches/operator/report.rs"]
mod report;
#[path = "../benches/operator/results.rs"]
mod results;
#[path = "../benches/operator/value.rs"]
mod value;
