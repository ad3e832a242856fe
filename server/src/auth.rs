//! Who is calling, and whether they may: etcd's authentication and authorisation on the
//! serving side (the users, roles and permissions themselves are replicated state,
//! [`leasekv_kvstore::auth`]).
//!
//! - **Who.** With auth enabled, a request names its user by a token (the `token` metadata
//!   etcd clients send, or the gateway's `Authorization` header), or, without one, by the
//!   common name of its TLS client certificate (etcd's rule, when client certificates are
//!   verified). Without either it has no user, and etcd's "user name is empty" refuses it.
//! - **Tokens.** [`issue_token`] signs the user, the auth revision and the issue time with
//!   the cluster's secret (HMAC-SHA256; the secret is replicated at AuthEnable), so any
//!   member checks any member's token without a round trip. A token stops working after
//!   [`TOKEN_TTL`] (measured on the checking member's clock), and as soon as the auth store
//!   changes (its revision moves: a password change, a role or permission change), which
//!   etcd clients answer by authenticating again.
//! - **May.** [`Caller::check`] is etcd's range permission check; [`Caller::admin`] its
//!   root-role check for auth, membership and maintenance requests.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use leasekv_kvstore::auth::{AuthStore, PermissionKind};
use leasekv_kvstore::{Authorized, Command};
use ring::hmac;
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tonic::Status;

/// How long a token is good for after it was issued (etcd's `--auth-token-ttl` default).
pub const TOKEN_TTL: Duration = Duration::from_secs(300);

/// bcrypt's cost for new password hashes: etcd's default (`--bcrypt-cost`).
pub const BCRYPT_COST: u32 = 10;

/// The metadata key etcd clients send their token in.
pub const TOKEN_METADATA: &str = "token";

/// etcd's errors for callers (rpctypes/error.go).
pub mod errors {
    use leasekv_client::EtcdError;
    use tonic::Status;

    /// ErrGRPCUserEmpty: auth is on and the request names no user.
    pub fn user_empty() -> Status {
        EtcdError::UserEmpty.status()
    }
    /// ErrGRPCPermissionDenied.
    pub fn permission_denied() -> Status {
        EtcdError::PermissionDenied.status()
    }
    /// ErrGRPCInvalidAuthToken: a token that does not verify or expired.
    pub fn invalid_token() -> Status {
        EtcdError::InvalidAuthToken.status()
    }
    /// ErrGRPCAuthOldRevision: the token predates a change of the auth store.
    pub fn old_revision() -> Status {
        EtcdError::AuthOldRevision.status()
    }
    /// ErrGRPCAuthFailed.
    pub fn auth_failed() -> Status {
        EtcdError::AuthFailed.status()
    }
    /// ErrGRPCAuthNotEnabled.
    pub fn not_enabled() -> Status {
        EtcdError::AuthNotEnabled.status()
    }
}

/// What a token says, signed.
#[derive(Debug, Serialize, Deserialize)]
struct Claims {
    /// The user.
    u: String,
    /// The auth revision it was issued at.
    r: u64,
    /// Issued at, milliseconds since the Unix epoch (the issuing member's clock).
    t: u64,
    /// Random, so two tokens issued in the same millisecond differ.
    n: u64,
}

fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

fn key(store: &AuthStore) -> hmac::Key {
    hmac::Key::new(hmac::HMAC_SHA256, store.token_secret())
}

/// A token for `user` at the store's current revision.
pub fn issue_token(store: &AuthStore, user: &str) -> String {
    let mut nonce = [0u8; 8];
    let _ = ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut nonce);
    let claims = Claims { u: user.to_string(), r: store.revision(), t: now_ms(), n: u64::from_le_bytes(nonce) };
    // Serialising a struct of strings and integers cannot fail.
    let payload = serde_json::to_vec(&claims).unwrap_or_default();
    let tag = hmac::sign(&key(store), &payload);
    format!("{}.{}", URL_SAFE_NO_PAD.encode(&payload), URL_SAFE_NO_PAD.encode(tag.as_ref()))
}

/// The user a token names, if it verifies, has not expired and is not older than the store.
#[cfg(test)]
pub fn verify_token(store: &AuthStore, token: &str) -> Result<String, Status> {
    verify_token_at(store, token).map(|(user, _)| user)
}

/// [`verify_token`], with the auth revision the token was issued at.
fn verify_token_at(store: &AuthStore, token: &str) -> Result<(String, u64), Status> {
    let (payload, tag) = token.split_once('.').ok_or_else(errors::invalid_token)?;
    let payload = URL_SAFE_NO_PAD.decode(payload).map_err(|_| errors::invalid_token())?;
    let tag = URL_SAFE_NO_PAD.decode(tag).map_err(|_| errors::invalid_token())?;
    hmac::verify(&key(store), &payload, &tag).map_err(|_| errors::invalid_token())?;
    let claims: Claims = serde_json::from_slice(&payload).map_err(|_| errors::invalid_token())?;
    if now_ms().saturating_sub(claims.t) > TOKEN_TTL.as_millis() as u64 {
        return Err(errors::invalid_token());
    }
    if claims.r < store.revision() {
        return Err(errors::old_revision());
    }
    Ok((claims.u, claims.r))
}

/// A new password's bcrypt hash (CPU-bound: call it off the async threads).
pub fn hash_password(password: &str) -> Result<String, Status> {
    bcrypt::hash(password, BCRYPT_COST).map_err(|e| Status::internal(format!("cannot hash the password: {e}")))
}

/// Whether `password` is `user`'s (CPU-bound: call it off the async threads).
pub fn password_matches(store: &AuthStore, user: &str, password: &str) -> bool {
    let Some(hash) = store.user(user).and_then(|u| u.password_hash.as_deref()).filter(|h| !h.is_empty()) else {
        return false;
    };
    bcrypt::verify(password, hash).unwrap_or(false)
}

/// The caller of one request and the auth store it is judged by.
#[derive(Debug, Clone)]
pub struct Caller {
    /// The auth store as this member applied it.
    pub store: Arc<AuthStore>,
    /// The user, when auth is enabled and the request named one.
    pub user: Option<String>,
    /// The auth revision the user was authenticated at: the token's, or the store's when
    /// the request came with a client certificate (as etcd's).
    pub auth_revision: u64,
}

impl Caller {
    /// Who sent a request with this metadata and these connection extensions.
    pub fn of(
        store: Arc<AuthStore>,
        metadata: &tonic::metadata::MetadataMap,
        extensions: &tonic::Extensions,
    ) -> Result<Caller, Status> {
        if !store.is_enabled() {
            return Ok(Caller { store, user: None, auth_revision: 0 });
        }
        let token = metadata
            .get(TOKEN_METADATA)
            .or_else(|| metadata.get("authorization"))
            .and_then(|v| v.to_str().ok())
            .map(|t| t.trim_start_matches("Bearer ").trim())
            .filter(|t| !t.is_empty());
        let (user, auth_revision) = match token {
            Some(token) => verify_token_at(&store, token).map(|(user, revision)| (Some(user), revision))?,
            None => (client_cert_user(extensions), store.revision()),
        };
        Ok(Caller { store, user, auth_revision })
    }

    /// `command` as this caller sends it, wrapped with the user and auth revision
    /// ([`Command::Authorized`]) so that the state machine checks the user's permissions
    /// where it applies it, against the auth store at that point of the log. Also without
    /// auth (no user, revision 0): a write sent while auth was off but applied after it was
    /// enabled is then refused with "user name is empty", as etcd refuses it.
    pub fn command(&self, command: Command) -> Command {
        Command::Authorized(Authorized {
            user: self.user.clone().unwrap_or_default(),
            auth_revision: self.auth_revision,
            command: Box::new(command),
        })
    }

    /// Whether auth is enabled (otherwise every check passes).
    pub fn enforced(&self) -> bool {
        self.store.is_enabled()
    }

    fn named(&self) -> Result<&str, Status> {
        self.user.as_deref().ok_or_else(errors::user_empty)
    }

    /// etcd's range permission check: `kind` on `key`/`range_end`.
    pub fn check(&self, key: &[u8], range_end: &[u8], kind: PermissionKind) -> Result<(), Status> {
        if !self.enforced() {
            return Ok(());
        }
        let user = self.named()?;
        if self.store.is_permitted(user, key, range_end, kind) {
            Ok(())
        } else {
            Err(errors::permission_denied())
        }
    }

    /// The root role, for admin requests.
    pub fn admin(&self) -> Result<(), Status> {
        if !self.enforced() {
            return Ok(());
        }
        let user = self.named()?;
        if self.store.is_admin(user) {
            Ok(())
        } else {
            Err(errors::permission_denied())
        }
    }

    /// Admin, or the request is about the caller's own user (etcd's UserGet and
    /// UserChangePassword rule).
    pub fn admin_or_self(&self, user: &str) -> Result<(), Status> {
        if self.enforced() && self.user.as_deref() == Some(user) {
            return Ok(());
        }
        self.admin()
    }

    /// Admin, or the caller holds `role` (etcd's RoleGet rule).
    pub fn admin_or_holds(&self, role: &str) -> Result<(), Status> {
        if !self.enforced() {
            return Ok(());
        }
        let holds = self.user.as_deref().and_then(|u| self.store.user(u)).is_some_and(|u| u.roles.contains(role));
        if holds {
            return Ok(());
        }
        self.admin()
    }

    /// Whether a request may be served at all: with auth on, it must name a user.
    pub fn authenticated(&self) -> Result<(), Status> {
        if self.enforced() {
            self.named()?;
        }
        Ok(())
    }
}

/// The common name of the verified TLS client certificate, if any.
fn client_cert_user(extensions: &tonic::Extensions) -> Option<String> {
    use tonic::transport::server::{TcpConnectInfo, TlsConnectInfo};
    let info = extensions.get::<TlsConnectInfo<TcpConnectInfo>>()?;
    let certs = info.peer_certs()?;
    let names = crate::tls::identity::CertNames::of(certs.first()?)?;
    names.common_name().map(str::to_string)
}

/// The caller of a tonic request on this node.
pub fn caller_of<T>(node: &crate::node::NodeHandle, request: &tonic::Request<T>) -> Result<Caller, Status> {
    Caller::of(node.auth(), request.metadata(), request.extensions())
}

#[cfg(test)]
mod tests {
    use super::*;
    use leasekv_kvstore::auth::AuthChange;

    fn enabled() -> AuthStore {
        let mut store = AuthStore::default();
        let add = AuthChange::UserAdd { name: "root".into(), password_hash: None, no_password: false };
        store.apply(&add).unwrap();
        store.apply(&AuthChange::UserGrantRole { user: "root".into(), role: "root".into() }).unwrap();
        store.apply(&AuthChange::Enable { token_secret: vec![7; 32] }).unwrap();
        store
    }

    #[test]
    fn a_token_verifies_until_the_store_changes() {
        let mut store = enabled();
        let token = issue_token(&store, "root");
        assert_eq!(verify_token(&store, &token).unwrap(), "root");
        store.apply(&AuthChange::RoleAdd { name: "r".into() }).unwrap();
        assert_eq!(verify_token(&store, &token).unwrap_err().message(), "etcdserver: revision of auth store is old");
    }

    #[test]
    fn a_forged_or_damaged_token_is_invalid() {
        let store = enabled();
        let token = issue_token(&store, "root");
        let (payload, tag) = token.split_once('.').unwrap();
        let forged = URL_SAFE_NO_PAD.encode(br#"{"u":"root","r":99,"t":0,"n":0}"#);
        for bad in [format!("{forged}.{tag}"), format!("{payload}.AAAA"), "garbage".into(), String::new()] {
            assert_eq!(verify_token(&store, &bad).unwrap_err().code(), tonic::Code::Unauthenticated, "{bad}");
        }
        let mut other = enabled();
        other.apply(&AuthChange::Disable).unwrap();
        other.apply(&AuthChange::Enable { token_secret: vec![8; 32] }).unwrap();
        assert!(verify_token(&other, &token).is_err(), "another secret");
    }

    #[test]
    fn passwords_are_checked_against_their_hash() {
        let mut store = AuthStore::default();
        let hash = hash_password("s3cret").unwrap();
        assert!(!hash.contains("s3cret"));
        store.apply(&AuthChange::UserAdd { name: "u".into(), password_hash: Some(hash), no_password: false }).unwrap();
        assert!(password_matches(&store, "u", "s3cret"));
        assert!(!password_matches(&store, "u", "wrong"));
        assert!(!password_matches(&store, "nobody", "s3cret"));
    }
}
