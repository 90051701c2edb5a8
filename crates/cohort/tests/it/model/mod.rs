//! The model (contract M): what `#[derive(Retained)]` emits, and the model as
//! a run applies it.

mod conventions;
mod derive;
mod exempt;
