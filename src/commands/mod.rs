//! The commands floor: one module per subcommand of the binary, over the library
//! (`src/main.rs` parses the command line and hands each subcommand to its module here).
//! Nothing in the library imports from this floor.
//!
//! - `operator`: the operator itself: its flags, start-up, servers and controllers;
//! - `display`: the syncer pod's `display` container (prints the runner's file, framed);
//! - `validate`: checks channel data, files or images, with the operator's own rules;
//! - `mirror`: copies a channel and its images into another registry or a directory;
//! - `probe`: the image's health probe (an HTTP GET with a timeout);
//! - the commands run against a cluster: `sync`, `status`, `suspend` (and `resume`),
//!   `check`, `changelog`, with what they share in `cluster` (errors, the client) and
//!   `output` (the one `-o`/`--format` type of every command).

pub mod changelog;
pub mod check;
pub mod cluster;
pub mod display;
pub mod mirror;
pub mod operator;
pub mod output;
pub mod probe;
pub mod status;
pub mod suspend;
pub mod sync;
pub mod validate;
