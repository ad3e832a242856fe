use super::*;
use proptest::prelude::*;

fn user_add(name: &str) -> AuthChange {
    AuthChange::UserAdd { name: name.into(), password_hash: Some(format!("hash-of-{name}")), no_password: false }
}

fn grant_role(user: &str, role: &str) -> AuthChange {
    AuthChange::UserGrantRole { user: user.into(), role: role.into() }
}

fn revoke_role(user: &str, role: &str) -> AuthChange {
    AuthChange::UserRevokeRole { user: user.into(), role: role.into() }
}

fn role_add(name: &str) -> AuthChange {
    AuthChange::RoleAdd { name: name.into() }
}

fn perm(kind: PermissionKind, key: &[u8], range_end: &[u8]) -> Permission {
    Permission { kind, key: key.to_vec(), range_end: range_end.to_vec() }
}

fn grant_perm(role: &str, kind: PermissionKind, key: &[u8], range_end: &[u8]) -> AuthChange {
    AuthChange::RoleGrantPermission { role: role.into(), permission: perm(kind, key, range_end) }
}

fn enable() -> AuthChange {
    AuthChange::Enable { token_secret: b"secret".to_vec() }
}

/// Applies `change`, which must succeed, and returns how much it moved the revision.
fn ok(store: &mut AuthStore, change: &AuthChange) -> u64 {
    let before = store.revision();
    store.apply(change).unwrap_or_else(|e| panic!("{change:?} refused: {e}"));
    store.check().unwrap();
    store.revision() - before
}

/// Applies `change`, which must be refused without changing anything, and returns the
/// error's message.
fn refused(store: &mut AuthStore, change: &AuthChange) -> String {
    let before = store.clone();
    let error = store.apply(change).expect_err("refused");
    assert_eq!(*store, before, "a refused {change:?} changed the store");
    error.to_string()
}

/// A store with the root user holding the root role (never added as a role), and auth on.
fn enabled() -> AuthStore {
    let mut store = AuthStore::default();
    ok(&mut store, &user_add("root"));
    ok(&mut store, &grant_role("root", "root"));
    ok(&mut store, &enable());
    store
}

#[test]
fn a_new_store_is_disabled_and_empty_at_revision_one() {
    let store = AuthStore::default();
    assert!(!store.is_enabled());
    assert_eq!(store.revision(), 1);
    assert!(store.users().is_empty() && store.roles().is_empty() && store.token_secret().is_empty());
}

#[test]
fn enable_needs_the_root_user_with_the_root_role_and_does_not_move_the_revision() {
    let mut store = AuthStore::default();
    assert_eq!(refused(&mut store, &enable()), "etcdserver: root user does not exist");
    ok(&mut store, &user_add("root"));
    assert_eq!(refused(&mut store, &enable()), "etcdserver: root user does not have root role");
    // The root role is implicit: granted without RoleAdd.
    assert_eq!(ok(&mut store, &grant_role("root", "root")), 1);
    assert!(store.role("root").is_none());
    assert_eq!(ok(&mut store, &enable()), 0);
    assert!(store.is_enabled());
    assert_eq!(store.token_secret(), b"secret");
    // Already on: a success that changes nothing, the secret included.
    assert_eq!(ok(&mut store, &AuthChange::Enable { token_secret: b"other".to_vec() }), 0);
    assert_eq!(store.token_secret(), b"secret");
}

#[test]
fn disable_moves_the_revision_only_when_auth_was_on() {
    let mut store = AuthStore::default();
    assert_eq!(ok(&mut store, &AuthChange::Disable), 0);
    let mut store = enabled();
    assert_eq!(ok(&mut store, &AuthChange::Disable), 1);
    assert!(!store.is_enabled());
    assert!(store.token_secret().is_empty(), "the old secret is dropped");
    assert_eq!(ok(&mut store, &AuthChange::Disable), 0);
    // Re-enabling brings the new secret.
    ok(&mut store, &AuthChange::Enable { token_secret: b"fresh".to_vec() });
    assert_eq!(store.token_secret(), b"fresh");
}

#[test]
fn user_add_refusals_and_no_password() {
    let mut store = AuthStore::default();
    assert_eq!(refused(&mut store, &user_add("")), "etcdserver: user name is empty");
    assert_eq!(ok(&mut store, &user_add("alice")), 1);
    assert_eq!(refused(&mut store, &user_add("alice")), "etcdserver: user name already exists");
    let alice = store.user("alice").unwrap();
    assert_eq!(alice.password_hash.as_deref(), Some("hash-of-alice"));
    assert!(alice.roles.is_empty());
    // no_password wins over a hash given with it.
    let change = AuthChange::UserAdd { name: "svc".into(), password_hash: Some("h".into()), no_password: true };
    ok(&mut store, &change);
    assert_eq!(store.user("svc").unwrap().password_hash, None);
    // Neither a hash nor no_password: an empty hash, which no password matches (etcd).
    let change = AuthChange::UserAdd { name: "bob".into(), password_hash: None, no_password: false };
    ok(&mut store, &change);
    assert_eq!(store.user("bob").unwrap().password_hash.as_deref(), Some(""));
    assert_eq!(store.users(), vec!["alice", "bob", "svc"]);
}

#[test]
fn user_delete_refusals() {
    let mut store = AuthStore::default();
    let delete = |name: &str| AuthChange::UserDelete { name: name.into() };
    assert_eq!(refused(&mut store, &delete("alice")), "etcdserver: user name not found");
    assert_eq!(refused(&mut store, &delete("")), "etcdserver: user name not found");
    ok(&mut store, &user_add("alice"));
    assert_eq!(ok(&mut store, &delete("alice")), 1);
    assert!(store.user("alice").is_none());

    let mut store = enabled();
    assert_eq!(refused(&mut store, &delete("root")), "etcdserver: invalid auth management");
    ok(&mut store, &AuthChange::Disable);
    assert_eq!(ok(&mut store, &delete("root")), 1, "allowed while auth is off");
    // etcd checks the root rule before the user's existence.
    let mut store = enabled();
    store.users.remove("root");
    assert_eq!(store.apply(&delete("root")).unwrap_err().to_string(), "etcdserver: invalid auth management");
}

#[test]
fn change_password_replaces_the_hash_but_not_no_password() {
    let mut store = AuthStore::default();
    let change = |name: &str, hash: Option<&str>| AuthChange::UserChangePassword {
        name: name.into(),
        password_hash: hash.map(str::to_string),
    };
    assert_eq!(refused(&mut store, &change("alice", Some("h"))), "etcdserver: user name not found");
    ok(&mut store, &user_add("alice"));
    ok(&mut store, &grant_role("alice", "root"));
    assert_eq!(ok(&mut store, &change("alice", Some("new"))), 1);
    let alice = store.user("alice").unwrap();
    assert_eq!(alice.password_hash.as_deref(), Some("new"));
    assert!(alice.roles.contains("root"), "roles are kept");
    ok(&mut store, &AuthChange::UserAdd { name: "svc".into(), password_hash: None, no_password: true });
    assert_eq!(ok(&mut store, &change("svc", Some("h"))), 1, "etcd moves the revision anyway");
    assert_eq!(store.user("svc").unwrap().password_hash, None);
}

#[test]
fn grant_and_revoke_roles() {
    let mut store = AuthStore::default();
    assert_eq!(refused(&mut store, &grant_role("alice", "reader")), "etcdserver: user name not found");
    ok(&mut store, &user_add("alice"));
    assert_eq!(refused(&mut store, &grant_role("alice", "reader")), "etcdserver: role name not found");
    ok(&mut store, &role_add("reader"));
    ok(&mut store, &role_add("writer"));
    assert_eq!(ok(&mut store, &grant_role("alice", "writer")), 1);
    assert_eq!(ok(&mut store, &grant_role("alice", "reader")), 1);
    assert_eq!(ok(&mut store, &grant_role("alice", "reader")), 0, "granted already: success, no revision");
    let roles: Vec<&str> = store.user("alice").unwrap().roles.iter().map(String::as_str).collect();
    assert_eq!(roles, vec!["reader", "writer"], "sorted");

    assert_eq!(refused(&mut store, &revoke_role("bob", "reader")), "etcdserver: user name not found");
    assert_eq!(ok(&mut store, &revoke_role("alice", "reader")), 1);
    assert_eq!(refused(&mut store, &revoke_role("alice", "reader")), "etcdserver: role is not granted to the user");
    // Revoking does not look the role up: a role that never existed is simply not granted.
    assert_eq!(refused(&mut store, &revoke_role("alice", "ghost")), "etcdserver: role is not granted to the user");
}

#[test]
fn the_root_user_keeps_the_root_role_while_auth_is_on() {
    let mut store = enabled();
    assert_eq!(refused(&mut store, &revoke_role("root", "root")), "etcdserver: invalid auth management");
    // Another user may lose it.
    ok(&mut store, &user_add("admin"));
    ok(&mut store, &grant_role("admin", "root"));
    assert_eq!(ok(&mut store, &revoke_role("admin", "root")), 1);
    ok(&mut store, &AuthChange::Disable);
    assert_eq!(ok(&mut store, &revoke_role("root", "root")), 1);
    assert_eq!(refused(&mut store, &enable()), "etcdserver: root user does not have root role");
}

#[test]
fn role_add_and_delete() {
    let mut store = AuthStore::default();
    let delete = |name: &str| AuthChange::RoleDelete { name: name.into() };
    assert_eq!(refused(&mut store, &role_add("")), "etcdserver: role name is empty");
    assert_eq!(ok(&mut store, &role_add("reader")), 1);
    assert_eq!(refused(&mut store, &role_add("reader")), "etcdserver: role name already exists");
    assert_eq!(store.role("reader").unwrap().permissions, Vec::new());
    assert_eq!(refused(&mut store, &delete("writer")), "etcdserver: role name not found");
    // Deleting a role revokes it from every user.
    ok(&mut store, &role_add("writer"));
    for user in ["alice", "bob"] {
        ok(&mut store, &user_add(user));
        ok(&mut store, &grant_role(user, "reader"));
        ok(&mut store, &grant_role(user, "writer"));
    }
    assert_eq!(ok(&mut store, &delete("reader")), 1, "one revision for the role and its users");
    assert_eq!(store.roles(), vec!["writer"]);
    for user in ["alice", "bob"] {
        assert_eq!(store.user(user).unwrap().roles.iter().collect::<Vec<_>>(), vec!["writer"]);
    }
}

#[test]
fn the_root_role_cannot_be_deleted_while_auth_is_on() {
    let mut store = enabled();
    let delete = AuthChange::RoleDelete { name: "root".into() };
    // Refused before the role is looked up: it was never added here.
    assert_eq!(refused(&mut store, &delete), "etcdserver: invalid auth management");
    ok(&mut store, &AuthChange::Disable);
    assert_eq!(refused(&mut store, &delete), "etcdserver: role name not found");
    // Once added it has to exist to take permissions, and can be deleted while auth is off,
    // which revokes it from root too.
    ok(&mut store, &role_add("root"));
    assert_eq!(ok(&mut store, &grant_perm("root", PermissionKind::Read, b"a", b"")), 1);
    assert_eq!(ok(&mut store, &delete), 1);
    assert!(!store.is_admin("root"));
}

#[test]
fn granting_a_permission_twice_updates_its_kind() {
    let mut store = AuthStore::default();
    let g = |kind, key: &[u8], end: &[u8]| grant_perm("r", kind, key, end);
    assert_eq!(refused(&mut store, &g(PermissionKind::Read, b"a", b"")), "etcdserver: role name not found");
    ok(&mut store, &role_add("r"));
    assert_eq!(ok(&mut store, &g(PermissionKind::Read, b"k", b"")), 1);
    assert_eq!(ok(&mut store, &g(PermissionKind::Write, b"b", b"d")), 1);
    assert_eq!(ok(&mut store, &g(PermissionKind::Read, b"b", b"")), 1);
    assert_eq!(ok(&mut store, &g(PermissionKind::ReadWrite, b"b", b"d")), 1, "an update moves the revision");
    assert_eq!(ok(&mut store, &g(PermissionKind::ReadWrite, b"b", b"d")), 1, "even to the same kind");
    assert_eq!(
        store.role("r").unwrap().permissions,
        vec![
            perm(PermissionKind::Read, b"b", b""),
            perm(PermissionKind::ReadWrite, b"b", b"d"),
            perm(PermissionKind::Read, b"k", b""),
        ],
        "one per (key, range end), in key order"
    );
}

#[test]
fn permissions_on_ranges_that_hold_no_key_are_refused() {
    let mut store = AuthStore::default();
    ok(&mut store, &role_add("r"));
    for (key, end) in [(&b""[..], &b""[..]), (b"", b"\0"), (b"b", b"a"), (b"b", b"b")] {
        assert_eq!(
            refused(&mut store, &grant_perm("r", PermissionKind::Read, key, end)),
            "etcdserver: invalid auth management"
        );
    }
    // Checked before the role, as in etcd.
    assert_eq!(
        refused(&mut store, &grant_perm("ghost", PermissionKind::Read, b"", b"")),
        "etcdserver: invalid auth management"
    );
    // Open-ended, the whole key space, and a prefix are fine.
    for (key, end) in [(&b"b"[..], &b"\0"[..]), (b"\0", b"\0"), (b"p/", b"p0")] {
        ok(&mut store, &grant_perm("r", PermissionKind::Read, key, end));
    }
}

#[test]
fn revoking_a_permission_needs_the_exact_range() {
    let mut store = AuthStore::default();
    let revoke = |role: &str, key: &[u8], end: &[u8]| AuthChange::RoleRevokePermission {
        role: role.into(),
        key: key.to_vec(),
        range_end: end.to_vec(),
    };
    assert_eq!(refused(&mut store, &revoke("r", b"a", b"")), "etcdserver: role name not found");
    ok(&mut store, &role_add("r"));
    ok(&mut store, &grant_perm("r", PermissionKind::Read, b"a", b"c"));
    assert_eq!(refused(&mut store, &revoke("r", b"a", b"")), "etcdserver: permission is not granted to the role");
    assert_eq!(refused(&mut store, &revoke("r", b"a", b"b")), "etcdserver: permission is not granted to the role");
    assert_eq!(ok(&mut store, &revoke("r", b"a", b"c")), 1);
    assert!(store.role("r").unwrap().permissions.is_empty());
}

#[test]
fn permission_checks_follow_etcd() {
    use PermissionKind::{Read, ReadWrite, Write};
    let mut store = enabled();
    ok(&mut store, &user_add("alice"));
    ok(&mut store, &role_add("a"));
    ok(&mut store, &role_add("b"));
    ok(&mut store, &grant_role("alice", "a"));
    ok(&mut store, &grant_role("alice", "b"));
    ok(&mut store, &grant_perm("a", Read, b"foo", b""));
    ok(&mut store, &grant_perm("a", ReadWrite, b"k1", b"k5"));
    ok(&mut store, &grant_perm("b", Read, b"k5", b"k9"));
    ok(&mut store, &grant_perm("b", Write, b"z", b"\0"));

    assert!(store.is_permitted("alice", b"foo", b"", Read));
    assert!(!store.is_permitted("alice", b"foo", b"", Write));
    assert!(!store.is_permitted("alice", b"foo0", b"", Read), "a single key grants no other");
    assert!(!store.is_permitted("alice", b"foo", b"fop", Read), "nor its prefix");
    // Two roles' intervals join into one.
    assert!(store.is_permitted("alice", b"k1", b"k9", Read));
    assert!(store.is_permitted("alice", b"k3", b"k7", Read));
    assert!(!store.is_permitted("alice", b"k3", b"k7", Write));
    assert!(!store.is_permitted("alice", b"k0", b"k2", Read));
    assert!(!store.is_permitted("alice", b"k8", b"k90", Read));
    assert!(store.is_permitted("alice", b"k1", b"k5", ReadWrite));
    assert!(!store.is_permitted("alice", b"k1", b"k6", ReadWrite));
    // Open-ended.
    assert!(store.is_permitted("alice", b"z", b"\0", Write));
    assert!(store.is_permitted("alice", b"zzz", b"", Write));
    assert!(!store.is_permitted("alice", b"y", b"\0", Write));
    assert!(!store.is_permitted("alice", b"\0", b"\0", Write), "the whole key space");
    // A range with no key in it.
    assert!(!store.is_permitted("alice", b"k3", b"k3", Read));
    assert!(!store.is_permitted("alice", b"k3", b"k2", Read));

    // Root may do everything; unknown users nothing.
    assert!(store.is_admin("root") && !store.is_admin("alice") && !store.is_admin("nobody"));
    assert!(store.is_permitted("root", b"\0", b"\0", ReadWrite));
    assert!(!store.is_permitted("nobody", b"foo", b"", Read));

    // The whole key space, granted.
    ok(&mut store, &grant_perm("b", Read, b"\0", b"\0"));
    assert!(store.is_permitted("alice", b"\0", b"\0", Read));
    assert!(store.is_permitted("alice", b"anything", b"", Read));
    // A deleted role takes its grants along.
    ok(&mut store, &AuthChange::RoleDelete { name: "b".into() });
    assert!(!store.is_permitted("alice", b"k5", b"", Read));
    assert!(store.is_permitted("alice", b"k1", b"", Read));
}

#[test]
fn inconsistent_stores_are_caught_by_check() {
    let mut store = enabled();
    assert!(store.check().is_ok());
    store.users.get_mut("root").unwrap().roles.clear();
    assert!(store.check().is_err());
    let mut store = AuthStore::default();
    ok(&mut store, &user_add("alice"));
    store.users.get_mut("alice").unwrap().roles.insert("ghost".into());
    assert!(store.check().is_err());
    let mut store = AuthStore::default();
    ok(&mut store, &role_add("r"));
    store.roles.get_mut("r").unwrap().permissions.push(perm(PermissionKind::Read, b"b", b"a"));
    assert!(store.check().is_err());
}

/// The keys the model enumerates: every string of up to 3 bytes over {0, 1, 2}, the empty
/// one included. The test's ranges have keys and ends of at most 2 such bytes, so every
/// boundary of every interval (a single key `k` ends at `k\0`, 3 bytes) is in here, and a
/// key between two consecutive boundaries is granted exactly when the lower one is: checking
/// these keys decides coverage of every key.
fn universe() -> Vec<Vec<u8>> {
    let mut keys = vec![Vec::new()];
    let mut last = vec![Vec::new()];
    for _ in 0..3 {
        last = last.iter().flat_map(|k: &Vec<u8>| (0..3u8).map(move |b| [k.as_slice(), &[b]].concat())).collect();
        keys.extend(last.iter().cloned());
    }
    keys
}

/// Whether `candidate` lies in a range, by etcd's convention, written out naively.
fn model_contains(key: &[u8], range_end: &[u8], candidate: &[u8]) -> bool {
    match range_end {
        [] => candidate == key,
        [0] => candidate >= key,
        end => candidate >= key && candidate < end,
    }
}

/// The naive model of `is_permitted`: root may do everything; otherwise the range must hold
/// a key, and each of its keys must lie in a range some role of the user grants for `kind`.
fn model_permitted(store: &AuthStore, user: &str, key: &[u8], range_end: &[u8], kind: PermissionKind) -> bool {
    let Some(u) = store.users.get(user) else { return false };
    if u.roles.contains(ROOT_ROLE) {
        return true;
    }
    let grants = |wanted: PermissionKind, candidate: &[u8]| {
        u.roles.iter().filter_map(|r| store.roles.get(r)).flat_map(|r| &r.permissions).any(|p| {
            (p.kind == wanted || p.kind == PermissionKind::ReadWrite) && model_contains(&p.key, &p.range_end, candidate)
        })
    };
    let wanted: &[PermissionKind] = match kind {
        PermissionKind::ReadWrite => &[PermissionKind::Read, PermissionKind::Write],
        PermissionKind::Read => &[PermissionKind::Read],
        PermissionKind::Write => &[PermissionKind::Write],
    };
    let inside: Vec<Vec<u8>> = universe().into_iter().filter(|c| model_contains(key, range_end, c)).collect();
    !inside.is_empty() && inside.iter().all(|c| wanted.iter().all(|w| grants(*w, c)))
}

fn short_key() -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(0u8..3, 0..3)
}

/// A key and a range end: mostly a real range, sometimes one key or open-ended, and
/// sometimes anything (empty keys, ends below keys).
fn range() -> impl Strategy<Value = (Vec<u8>, Vec<u8>)> {
    let key = prop::collection::vec(0u8..3, 1..3);
    prop_oneof![
        3 => (key.clone(), key.clone()).prop_map(|(a, b)| if a <= b { (a, b) } else { (b, a) }),
        1 => key.clone().prop_map(|k| (k, Vec::new())),
        1 => key.prop_map(|k| (k, vec![0])),
        1 => (short_key(), short_key()),
    ]
}

/// Users `u1` (role `r1`) and `u2` (roles `r1` and `r2`), both roles existing, so that
/// random grants and revocations that follow change what non-root users may do.
fn seeded() -> AuthStore {
    let mut store = AuthStore::default();
    for change in
        [user_add("u1"), user_add("u2"), role_add("r1"), role_add("r2"), grant_role("u1", "r1"), grant_role("u2", "r1")]
    {
        ok(&mut store, &change);
    }
    ok(&mut store, &grant_role("u2", "r2"));
    store
}

fn kind() -> impl Strategy<Value = PermissionKind> {
    prop::sample::select(vec![PermissionKind::Read, PermissionKind::Write, PermissionKind::ReadWrite])
}

/// Random auth changes over three users and three roles, so that they collide often.
fn arb_change() -> impl Strategy<Value = AuthChange> {
    let name = prop::sample::select(vec!["root", "u1", "u2"]).prop_map(str::to_string);
    let role = prop::sample::select(vec!["root", "r1", "r2"]).prop_map(str::to_string);
    prop_oneof![
        1 => Just(AuthChange::Enable { token_secret: vec![7; 4] }),
        1 => Just(AuthChange::Disable),
        2 => (name.clone(), any::<bool>()).prop_map(|(name, no_password)| AuthChange::UserAdd {
            name, password_hash: Some("h".into()), no_password,
        }),
        1 => name.clone().prop_map(|name| AuthChange::UserDelete { name }),
        1 => name.clone().prop_map(|name| AuthChange::UserChangePassword { name, password_hash: Some("h2".into()) }),
        4 => (name.clone(), role.clone()).prop_map(|(user, role)| AuthChange::UserGrantRole { user, role }),
        1 => (name, role.clone()).prop_map(|(user, role)| AuthChange::UserRevokeRole { user, role }),
        2 => role.clone().prop_map(|name| AuthChange::RoleAdd { name }),
        1 => role.clone().prop_map(|name| AuthChange::RoleDelete { name }),
        12 => (role.clone(), kind(), range()).prop_map(|(role, kind, (key, range_end))| {
            AuthChange::RoleGrantPermission { role, permission: Permission { kind, key, range_end } }
        }),
        2 => (role, range())
            .prop_map(|(role, (key, range_end))| AuthChange::RoleRevokePermission { role, key, range_end }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// After random changes, `is_permitted` answers like the naive model for random users,
    /// ranges and kinds; and every store the changes leave passes `check`.
    #[test]
    fn is_permitted_matches_a_naive_model(
        changes in prop::collection::vec(arb_change(), 0..40),
        queries in prop::collection::vec(
            (prop::sample::select(vec!["root", "u1", "u2", "ghost"]), range(), kind()),
            1..40,
        ),
    ) {
        let mut store = seeded();
        for change in &changes {
            let before = store.clone();
            match store.apply(change) {
                Ok(()) => prop_assert!(store.revision() >= before.revision()),
                Err(_) => prop_assert_eq!(&store, &before),
            }
            prop_assert_eq!(store.check(), Ok(()));
        }
        for (user, (key, range_end), kind) in queries {
            prop_assert_eq!(
                store.is_permitted(user, &key, &range_end, kind),
                model_permitted(&store, user, &key, &range_end, kind),
                "user {} key {:?} range_end {:?} kind {:?} store {:?}", user, key, range_end, kind, store
            );
        }
    }
}
