//! The replicated part of etcd's authentication and authorisation: users, roles, the
//! permissions roles grant on key ranges, and whether auth is enabled, changed only by
//! [`crate::Command::Auth`] so that every member holds the same.
//!
//! The semantics (which change is refused with which error, which one moves the auth
//! revision) are etcd's `server/auth/store.go`; the permission check is its
//! `range_perm_cache.go` (see [`AuthStore::is_permitted`]). Passwords never reach this
//! module in clear: the server hashes them (bcrypt, as etcd) before proposing, so the log,
//! the snapshots and the backups only ever hold hashes. Tokens, password checks and the
//! per-request checks belong to the server; this module is deterministic state only.

mod permission;
#[cfg(test)]
mod tests;

use crate::error::KvError;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};

/// The user etcd requires before auth can be enabled, and that cannot be removed while it is.
pub const ROOT_USER: &str = "root";
/// The role that may do everything. It exists implicitly: it can be granted to a user
/// without a `RoleAdd` (etcd's rule), and grants every key whatever permissions it lists.
pub const ROOT_ROLE: &str = "root";

/// What a permission allows (etcd's `authpb.Permission_Type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum PermissionKind {
    /// Reads (Range, Watch).
    Read,
    /// Writes (Put, DeleteRange).
    Write,
    /// Both.
    ReadWrite,
}

impl PermissionKind {
    /// Whether a permission of this kind allows what `wanted` asks for (`ReadWrite` wanted
    /// asks for both).
    pub fn allows(self, wanted: PermissionKind) -> bool {
        self == PermissionKind::ReadWrite || self == wanted
    }

    /// etcd's name of the kind (`READ`, `WRITE`, `READWRITE`), as etcdctl shows it.
    pub fn etcd_name(self) -> &'static str {
        match self {
            PermissionKind::Read => "READ",
            PermissionKind::Write => "WRITE",
            PermissionKind::ReadWrite => "READWRITE",
        }
    }
}

/// One permission of a role on a key range (etcd's `authpb.Permission`), with etcd's
/// `key`/`range_end` convention: `range_end` empty is the single key `key`, `[0]` every key
/// from `key` on, otherwise the half-open interval `[key, range_end)`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Permission {
    /// What it allows.
    pub kind: PermissionKind,
    /// The first key (or the only one); never empty.
    pub key: Vec<u8>,
    /// The end of the range, see the type's documentation.
    pub range_end: Vec<u8>,
}

impl Permission {
    /// Whether etcd accepts this range in a permission (its `isValidPermissionRange`): a
    /// non-empty key, and a range end that is empty (one key), `[0]` (open-ended) or above
    /// the key. Anything else names no key, and granting it is `invalid auth management`.
    pub fn has_valid_range(&self) -> bool {
        !self.key.is_empty() && (self.range_end.is_empty() || self.range_end == [0] || self.key < self.range_end)
    }
}

/// A user (etcd's `authpb.User`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct User {
    /// The name; never empty.
    pub name: String,
    /// The password's hash, made by the server (bcrypt). `None`: the user was added with
    /// etcd's `no_password` option and can only authenticate by a TLS client certificate;
    /// `Some("")`: added without a password and without that option (etcd keeps such a user,
    /// and no password matches it).
    pub password_hash: Option<String>,
    /// The roles granted, in name order (etcd keeps them sorted too). May hold
    /// [`ROOT_ROLE`] even when that role was never added.
    pub roles: BTreeSet<String>,
}

/// A role (etcd's `authpb.Role`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Role {
    /// The name; never empty.
    pub name: String,
    /// The permissions, ordered by key then range end, at most one per (key, range end).
    pub permissions: Vec<Permission>,
}

/// One change to the auth state: one per etcd mutation of its `Auth` service.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum AuthChange {
    /// Turns auth on (etcd's `AuthEnable`); needs the [`ROOT_USER`] with the [`ROOT_ROLE`].
    /// A no-op when it is on already (the secret is then not replaced).
    Enable {
        /// The key the servers sign and check tokens with, generated at random by the server
        /// that proposes the change (every member must hold the same, so it is replicated
        /// rather than drawn on each member).
        token_secret: Vec<u8>,
    },
    /// Turns auth off (etcd's `AuthDisable`); a no-op when it is off.
    Disable,
    /// Adds a user (etcd's `UserAdd`).
    UserAdd {
        /// The name.
        name: String,
        /// The password's hash (ignored with `no_password`; `None` otherwise stores an empty
        /// hash, as etcd stores an empty password).
        password_hash: Option<String>,
        /// etcd's `UserAddOptions.no_password`.
        no_password: bool,
    },
    /// Deletes a user (etcd's `UserDelete`).
    UserDelete {
        /// The user.
        name: String,
    },
    /// Replaces a user's password hash (etcd's `UserChangePassword`); a `no_password` user
    /// stays without one, as in etcd.
    UserChangePassword {
        /// The user.
        name: String,
        /// The new hash (`None`: an empty one).
        password_hash: Option<String>,
    },
    /// Grants a role to a user (etcd's `UserGrantRole`).
    UserGrantRole {
        /// The user.
        user: String,
        /// The role; [`ROOT_ROLE`] need not have been added.
        role: String,
    },
    /// Revokes a role from a user (etcd's `UserRevokeRole`).
    UserRevokeRole {
        /// The user.
        user: String,
        /// The role.
        role: String,
    },
    /// Adds a role without permissions (etcd's `RoleAdd`).
    RoleAdd {
        /// The name.
        name: String,
    },
    /// Deletes a role and revokes it from every user (etcd's `RoleDelete`).
    RoleDelete {
        /// The role.
        name: String,
    },
    /// Grants a permission to a role, or changes the kind of the one it has on the same
    /// key and range end (etcd's `RoleGrantPermission`).
    RoleGrantPermission {
        /// The role.
        role: String,
        /// The permission.
        permission: Permission,
    },
    /// Revokes the role's permission on exactly this key and range end (etcd's
    /// `RoleRevokePermission`).
    RoleRevokePermission {
        /// The role.
        role: String,
        /// The permission's key.
        key: Vec<u8>,
        /// The permission's range end.
        range_end: Vec<u8>,
    },
}

impl AuthChange {
    /// About how many bytes the change takes in the log, for the master's batch limits.
    pub fn approximate_size(&self) -> usize {
        let text = |s: &Option<String>| s.as_ref().map_or(0, String::len);
        16 + match self {
            AuthChange::Enable { token_secret } => token_secret.len(),
            AuthChange::Disable => 0,
            AuthChange::UserAdd { name, password_hash, .. } => name.len() + text(password_hash),
            AuthChange::UserChangePassword { name, password_hash } => name.len() + text(password_hash),
            AuthChange::UserDelete { name } | AuthChange::RoleAdd { name } | AuthChange::RoleDelete { name } => {
                name.len()
            }
            AuthChange::UserGrantRole { user, role } | AuthChange::UserRevokeRole { user, role } => {
                user.len() + role.len()
            }
            AuthChange::RoleGrantPermission { role, permission } => {
                role.len() + permission.key.len() + permission.range_end.len()
            }
            AuthChange::RoleRevokePermission { role, key, range_end } => role.len() + key.len() + range_end.len(),
        }
    }
}

/// The replicated auth state (what etcd keeps in its `auth`, `authUsers` and `authRoles`
/// buckets). Changed only by [`AuthStore::apply`], so that it always satisfies
/// [`AuthStore::check`]; read through its methods.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuthStore {
    /// Whether requests must carry a user (a token or a client certificate).
    pub(crate) enabled: bool,
    /// etcd's auth revision, see [`AuthStore::revision`].
    pub(crate) revision: u64,
    /// The users by name.
    pub(crate) users: BTreeMap<String, User>,
    /// The roles by name ([`ROOT_ROLE`] only once added).
    pub(crate) roles: BTreeMap<String, Role>,
    /// The token signing key of the last enable; empty while auth is off.
    pub(crate) token_secret: Vec<u8>,
}

impl Default for AuthStore {
    /// Auth off, no users or roles, at revision 1: a new etcd commits revision 1 when it
    /// creates its auth store, and 0 is what etcd takes for "no user" in a token.
    fn default() -> Self {
        AuthStore {
            enabled: false,
            revision: 1,
            users: BTreeMap::new(),
            roles: BTreeMap::new(),
            token_secret: Vec::new(),
        }
    }
}

impl AuthStore {
    /// Applies one change with etcd's checks, in etcd's order, and its errors. A refused
    /// change leaves the store as it was. Deterministic.
    pub fn apply(&mut self, change: &AuthChange) -> Result<(), KvError> {
        match change {
            AuthChange::Enable { token_secret } => self.enable(token_secret),
            AuthChange::Disable => {
                // etcd ignores a disable while disabled, without moving the revision.
                if self.enabled {
                    self.enabled = false;
                    // Tokens signed before must not come back to life on a later enable,
                    // which brings a fresh secret anyway.
                    self.token_secret.clear();
                    self.bump();
                }
                Ok(())
            }
            AuthChange::UserAdd { name, password_hash, no_password } => {
                if name.is_empty() {
                    return Err(KvError::UserEmpty);
                }
                if self.users.contains_key(name) {
                    return Err(KvError::UserAlreadyExists);
                }
                let password_hash = match no_password {
                    true => None,
                    false => Some(password_hash.clone().unwrap_or_default()),
                };
                self.users.insert(name.clone(), User { name: name.clone(), password_hash, roles: BTreeSet::new() });
                self.bump();
                Ok(())
            }
            AuthChange::UserDelete { name } => {
                // Checked before the user's existence, as etcd does.
                if self.enabled && name == ROOT_USER {
                    return Err(KvError::InvalidAuthManagement);
                }
                self.users.remove(name).ok_or(KvError::UserNotFound)?;
                self.bump();
                Ok(())
            }
            AuthChange::UserChangePassword { name, password_hash } => {
                let user = self.users.get_mut(name).ok_or(KvError::UserNotFound)?;
                if user.password_hash.is_some() {
                    user.password_hash = Some(password_hash.clone().unwrap_or_default());
                }
                // etcd moves the revision even for a no_password user, whose password it
                // leaves empty: the change still invalidates the user's tokens.
                self.bump();
                Ok(())
            }
            AuthChange::UserGrantRole { user, role } => {
                let u = self.users.get_mut(user).ok_or(KvError::UserNotFound)?;
                if role != ROOT_ROLE && !self.roles.contains_key(role) {
                    return Err(KvError::RoleNotFound);
                }
                // Granting a role the user has is a success that changes nothing, not even
                // the revision (etcd only logs it).
                if u.roles.insert(role.clone()) {
                    self.bump();
                }
                Ok(())
            }
            AuthChange::UserRevokeRole { user, role } => {
                if self.enabled && user == ROOT_USER && role == ROOT_ROLE {
                    return Err(KvError::InvalidAuthManagement);
                }
                let u = self.users.get_mut(user).ok_or(KvError::UserNotFound)?;
                if !u.roles.remove(role) {
                    return Err(KvError::RoleNotGranted);
                }
                self.bump();
                Ok(())
            }
            AuthChange::RoleAdd { name } => {
                if name.is_empty() {
                    return Err(KvError::RoleEmpty);
                }
                if self.roles.contains_key(name) {
                    return Err(KvError::RoleAlreadyExists);
                }
                self.roles.insert(name.clone(), Role { name: name.clone(), permissions: Vec::new() });
                self.bump();
                Ok(())
            }
            AuthChange::RoleDelete { name } => {
                if self.enabled && name == ROOT_ROLE {
                    return Err(KvError::InvalidAuthManagement);
                }
                self.roles.remove(name).ok_or(KvError::RoleNotFound)?;
                for user in self.users.values_mut() {
                    user.roles.remove(name);
                }
                self.bump();
                Ok(())
            }
            AuthChange::RoleGrantPermission { role, permission } => {
                // etcd checks the range before the role's existence.
                if !permission.has_valid_range() {
                    return Err(KvError::InvalidAuthManagement);
                }
                let r = self.roles.get_mut(role).ok_or(KvError::RoleNotFound)?;
                let at = r
                    .permissions
                    .binary_search_by(|p| (&p.key, &p.range_end).cmp(&(&permission.key, &permission.range_end)));
                match at {
                    Ok(i) => r.permissions[i].kind = permission.kind,
                    Err(i) => r.permissions.insert(i, permission.clone()),
                }
                // Moved even when the kind was already the one granted, as in etcd.
                self.bump();
                Ok(())
            }
            AuthChange::RoleRevokePermission { role, key, range_end } => {
                let r = self.roles.get_mut(role).ok_or(KvError::RoleNotFound)?;
                let before = r.permissions.len();
                r.permissions.retain(|p| p.key != *key || p.range_end != *range_end);
                if r.permissions.len() == before {
                    return Err(KvError::PermissionNotGranted);
                }
                self.bump();
                Ok(())
            }
        }
    }

    /// etcd's `AuthEnable`: refused unless the root user exists with the root role; it does
    /// not move the revision (etcd only rereads it).
    fn enable(&mut self, token_secret: &[u8]) -> Result<(), KvError> {
        if self.enabled {
            return Ok(());
        }
        let root = self.users.get(ROOT_USER).ok_or(KvError::RootUserNotExist)?;
        if !root.roles.contains(ROOT_ROLE) {
            return Err(KvError::RootRoleNotExist);
        }
        self.enabled = true;
        self.token_secret = token_secret.to_vec();
        Ok(())
    }

    fn bump(&mut self) {
        self.revision = self.revision.saturating_add(1);
    }

    /// Whether auth is on: requests must then name a user, who needs the permissions.
    pub fn is_enabled(&self) -> bool {
        self.enabled
    }

    /// etcd's auth revision: moved by every change to users and roles, and by disabling
    /// auth (not by enabling it, nor by a change that was a no-op). Tokens carry the revision
    /// they were issued at and etcd refuses one older than the store, so that a change to
    /// users or roles makes clients authenticate again. `AuthStatus` reports it.
    pub fn revision(&self) -> u64 {
        self.revision
    }

    /// The key tokens are signed with (empty while auth is off).
    pub fn token_secret(&self) -> &[u8] {
        &self.token_secret
    }

    /// One user (etcd's `UserGet`).
    pub fn user(&self, name: &str) -> Option<&User> {
        self.users.get(name)
    }

    /// Every user's name, in order (etcd's `UserList`).
    pub fn users(&self) -> Vec<&str> {
        self.users.keys().map(String::as_str).collect()
    }

    /// One role (etcd's `RoleGet`). The root role is only found once added, and then with
    /// the permissions granted to it, though it allows everything whatever they are (etcd
    /// answers `RoleGet root` with one `READWRITE` permission on every key instead).
    pub fn role(&self, name: &str) -> Option<&Role> {
        self.roles.get(name)
    }

    /// Every role's name, in order (etcd's `RoleList`).
    pub fn roles(&self) -> Vec<&str> {
        self.roles.keys().map(String::as_str).collect()
    }

    /// Checks a store read from a snapshot: what [`AuthStore::apply`] can never produce is
    /// refused rather than trusted. Returns what is wrong.
    pub fn check(&self) -> Result<(), String> {
        for (name, user) in &self.users {
            if name.is_empty() || *name != user.name {
                return Err(format!("user {name:?} is empty or stored under another name ({:?})", user.name));
            }
            if let Some(role) = user.roles.iter().find(|r| *r != ROOT_ROLE && !self.roles.contains_key(*r)) {
                return Err(format!("user {name:?} has role {role:?}, which does not exist"));
            }
        }
        for (name, role) in &self.roles {
            if name.is_empty() || *name != role.name {
                return Err(format!("role {name:?} is empty or stored under another name ({:?})", role.name));
            }
            let ordered =
                role.permissions.windows(2).all(|w| (&w[0].key, &w[0].range_end) < (&w[1].key, &w[1].range_end));
            if !ordered || !role.permissions.iter().all(Permission::has_valid_range) {
                return Err(format!("role {name:?} has an invalid, repeated or unordered permission"));
            }
        }
        if self.enabled && !self.user(ROOT_USER).is_some_and(|root| root.roles.contains(ROOT_ROLE)) {
            return Err("auth is enabled without a root user holding the root role".into());
        }
        if self.revision == 0 {
            return Err("auth revision 0".into());
        }
        Ok(())
    }
}
