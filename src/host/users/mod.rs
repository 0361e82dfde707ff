//! Local users and groups: `user::` and `group::`, over the account files (`/etc/passwd`,
//! `/etc/group`, `/etc/shadow`, `/etc/gshadow`) that [`userdb`] reads and edits through effects.

pub mod group;
pub mod user;
pub mod userdb;

#[cfg(test)]
mod user_tests;
#[cfg(test)]
pub(crate) mod users_script_tests;
