//! Row handlers (contract RH).

mod delivery;
mod guide;
