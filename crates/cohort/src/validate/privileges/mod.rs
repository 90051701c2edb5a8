//! Least privilege (SEC1, SEC2, SEC4): what the runtime role needs, checked
//! at build, and the `GRANT`s that give exactly that.
//!
//! One description of what the engine does ([`needs::type_needs`] for a retained
//! type, [`needs::COHORT_TABLES`] for Cohort's own tables) serves both directions:
//! [`check()`] asks the live database whether the role the handle runs as has
//! each privilege (every missing one is a validation problem, with the
//! `GRANT` that fixes it), and [`role_grants`] writes the grants for a role
//! that does not exist yet. So the generated grants are exactly what the
//! build checks, no more, no less. `docs/security.md` explains each one.
//!
//! [`check()`] also reports a retained table whose row-level security would
//! hide rows from the role (SEC4): a sweep that silently sees no rows keeps
//! data it promised to remove.
//!
//! Three files, one job each: [`needs`] says what the engine needs (per
//! retained type and on Cohort's own tables), [`check`] asks the live
//! catalog whether the runtime role has it, [`grants`] writes the `GRANT`s
//! that give exactly that.

mod check;
mod grants;
mod needs;

pub(super) use check::check;
pub use grants::{RoleGrants, RoleNames, role_grants};

/// The security guide (`docs/security.md`), compiled as doctests.
#[cfg(doctest)]
#[doc = include_str!("../../../../../docs/security.md")]
pub struct SecurityGuide;
