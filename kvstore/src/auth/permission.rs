//! etcd's permission check (`server/auth/range_perm_cache.go`): a request on a key range is
//! allowed when the union of the ranges the user's roles grant for its kind covers it.
//!
//! Keys are ordered as byte strings. Every range is a half-open interval `[begin, end)`
//! whose end is a key, "just after a key" (`key` followed by a zero byte, the smallest key
//! above it: a single key `k` is `[k, k\0)`) or past every key. With single keys written
//! that way, covering is plain interval arithmetic: sort the granted intervals by their
//! start and sweep, which is exact (etcd's interval tree answers the same question).

use super::{AuthStore, PermissionKind, ROOT_ROLE};
use std::cmp::Ordering;

/// The end of a key interval, or the start of one (always [`Bound::Key`]).
#[derive(Debug, Clone, Copy)]
enum Bound<'a> {
    /// Exactly this key.
    Key(&'a [u8]),
    /// The key followed by a zero byte: the first key after it.
    JustAfter(&'a [u8]),
    /// Past every key.
    Unbounded,
}

impl<'a> Bound<'a> {
    /// The end of a range with etcd's convention for `range_end`: empty is the single key,
    /// `[0]` is open-ended.
    fn end_of(key: &'a [u8], range_end: &'a [u8]) -> Self {
        match range_end {
            [] => Bound::JustAfter(key),
            [0] => Bound::Unbounded,
            end => Bound::Key(end),
        }
    }

    /// The bytes this bound stands for (`None` past every key).
    fn bytes(self) -> Option<impl Iterator<Item = u8> + 'a> {
        match self {
            Bound::Key(key) => Some(key.iter().copied().chain(None::<u8>)),
            Bound::JustAfter(key) => Some(key.iter().copied().chain(Some(0))),
            Bound::Unbounded => None,
        }
    }
}

impl Ord for Bound<'_> {
    fn cmp(&self, other: &Self) -> Ordering {
        match (self.bytes(), other.bytes()) {
            (Some(a), Some(b)) => a.cmp(b),
            (Some(_), None) => Ordering::Less,
            (None, Some(_)) => Ordering::Greater,
            (None, None) => Ordering::Equal,
        }
    }
}

impl PartialOrd for Bound<'_> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl PartialEq for Bound<'_> {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for Bound<'_> {}

impl AuthStore {
    /// Whether `user` has the root role: may do everything, the admin requests (auth,
    /// membership, maintenance) included. False for a user that does not exist.
    pub fn is_admin(&self, user: &str) -> bool {
        self.user(user).is_some_and(|u| u.roles.contains(ROOT_ROLE))
    }

    /// Whether `user` may do `kind` on the keys of `key`/`range_end` (etcd's convention:
    /// `range_end` empty is the single key `key`, `[0]` every key from `key` on, so `[0]`
    /// and `[0]` is the whole key space). A user with the root role may do everything; any
    /// other needs the union of the ranges its roles grant for `kind` (`ReadWrite`
    /// permissions count for both) to cover the request's range. `ReadWrite` asked for needs
    /// both reads and writes covered. A user that does not exist may do nothing, and so may
    /// a request whose range holds no key (a range end at or below its key, which etcd's
    /// check refuses too).
    ///
    /// This looks at the grants only: whether auth is enabled, and whether the token that
    /// named the user is older than the store, are the caller's to check first.
    pub fn is_permitted(&self, user: &str, key: &[u8], range_end: &[u8], kind: PermissionKind) -> bool {
        let Some(u) = self.user(user) else { return false };
        if u.roles.contains(ROOT_ROLE) {
            return true;
        }
        if kind == PermissionKind::ReadWrite {
            return self.is_permitted(user, key, range_end, PermissionKind::Read)
                && self.is_permitted(user, key, range_end, PermissionKind::Write);
        }
        let mut granted: Vec<(&[u8], Bound<'_>)> = u
            .roles
            .iter()
            // A role a user holds always exists, except the root role, handled above.
            .filter_map(|name| self.role(name))
            .flat_map(|role| &role.permissions)
            .filter(|p| p.kind.allows(kind))
            .map(|p| (p.key.as_slice(), Bound::end_of(&p.key, &p.range_end)))
            .collect();
        granted.sort_unstable_by(|a, b| a.0.cmp(b.0));
        let end = Bound::end_of(key, range_end);
        // Everything from the request's key up to `covered` is granted.
        let mut covered = Bound::Key(key);
        if covered >= end {
            return false;
        }
        for (begin, granted_end) in granted {
            if Bound::Key(begin) > covered {
                // A gap: the intervals that follow start later still.
                return false;
            }
            covered = covered.max(granted_end);
            if covered >= end {
                return true;
            }
        }
        false
    }
}
