//! The model: what the host declares about its row types.

mod conventions;
pub(crate) mod descriptor;
pub(crate) mod resolved;

pub use conventions::Conventions;
pub use descriptor::{
    AnonymiseMethod, AnonymisedField, Anonymiser, AnonymiserFn, CustomAnonymiser, EntityDescriptor,
    FieldDescriptor, Markers, Membership, Retained,
};
