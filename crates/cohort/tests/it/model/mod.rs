//! The model (contract M): what `#[derive(Retained)]` emits, descriptors
//! built at run time, and the model as a run applies it.

mod conventions;
mod derive;
mod exempt;
mod runtime;
