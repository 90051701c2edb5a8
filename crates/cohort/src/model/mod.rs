//! The model: what the host declares about its row types.

mod descriptor;

pub use descriptor::{
    AnonymiseMethod, AnonymisedField, Anonymiser, CustomAnonymiser, EntityDescriptor,
    FieldDescriptor, Markers, Membership, Retained,
};
