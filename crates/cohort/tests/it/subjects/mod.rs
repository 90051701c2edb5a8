//! Data subjects beyond erasure itself (contract SA): subject access
//! exports (`access`) and their flat memory (`access_memory`), what an erasure
//! leaves on disk and vacuuming it away (`physical`), erasures replayed
//! after a restore from a real `pg_dump` (`replay`), change-stream markers
//! read back through a logical replication slot (`markers`).

mod access;
mod access_memory;
mod markers;
mod physical;
mod replay;
