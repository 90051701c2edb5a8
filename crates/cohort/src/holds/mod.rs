//! Legal holds and host deletions that respect them (being written).
