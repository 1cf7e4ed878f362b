//! The objects besides versions that a sync writes or reads on a channel's behalf: its
//! Events and their series (`events`), the objects it owns other than versions, written by
//! one writer that checks ownership by uid (`owned`), and the Orphan finalizer that lets
//! a channel go while its versions stay (`finalize`).

pub(super) mod events;
pub(super) mod finalize;
pub(super) mod owned;
