//! Data subjects beyond erasure itself (contract SA): change-stream markers
//! read back through a logical replication slot (`markers`).

mod markers;
