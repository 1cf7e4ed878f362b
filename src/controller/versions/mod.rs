//! The versions of a channel, as the operator keeps and writes them: the metadata-only
//! watch cache and what is decoded of it (`meta`), the index over it by channel and name
//! (`index`), the one writer every version request goes through, paced per namespace and
//! budgeted (`writer`), one write typed by what it does and how it is taken back
//! (`write`), and a sync's writes, all or nothing (`all_or_nothing`).

pub(super) mod all_or_nothing;
pub mod index;
pub mod meta;
pub(super) mod write;
pub(super) mod writer;
