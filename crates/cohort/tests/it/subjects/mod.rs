//! Data subjects beyond erasure itself (contract SA): what an erasure
//! leaves on disk and vacuuming it away (`physical`), change-stream markers
//! read back through a logical replication slot (`markers`).

mod markers;
mod physical;
