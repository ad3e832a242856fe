//! etcd's Auth service: enabling auth, authenticating, users and roles. Every change goes
//! through the log ([`Command::Auth`]) so every member holds the same users and roles;
//! passwords are hashed (bcrypt) here, on the member that takes the request, so only
//! hashes are ever replicated or stored.

use super::Shared;
use crate::auth::{caller_of, errors, hash_password, issue_token, password_matches, Caller};
use leasekv_client::proto::authpb;
use leasekv_client::proto::etcdserverpb as pb;
use leasekv_client::EtcdError;
use leasekv_kvstore::auth::{AuthChange, Permission, PermissionKind};
use leasekv_kvstore::{Command, CommandResponse};
use std::sync::Arc;
use tonic::{Request, Response, Status};

/// Auth: AuthEnable/Disable/Status, Authenticate, User*, Role*.
pub struct AuthService(pub Arc<Shared>);

impl AuthService {
    /// Proposes an auth change; the answer carries the header at the store's revision.
    async fn change(&self, caller: &Caller, change: AuthChange) -> Result<pb::ResponseHeader, Status> {
        let reply = self.0.serve_command(caller.command(Command::Auth(change)), |response, header| match response {
            CommandResponse::Auth { .. } => Some(header),
            _ => None,
        });
        reply.await
    }

    fn header(&self) -> Option<pb::ResponseHeader> {
        Some(self.0.current_header())
    }
}

/// A password hash, computed off the async threads (bcrypt is slow by design).
async fn hashed(password: String) -> Result<String, Status> {
    tokio::task::spawn_blocking(move || hash_password(&password))
        .await
        .map_err(|e| Status::internal(format!("password hashing stopped: {e}")))?
}

fn kind_of(perm_type: i32) -> Result<PermissionKind, Status> {
    match authpb::permission::Type::try_from(perm_type) {
        Ok(authpb::permission::Type::Read) => Ok(PermissionKind::Read),
        Ok(authpb::permission::Type::Write) => Ok(PermissionKind::Write),
        Ok(authpb::permission::Type::Readwrite) => Ok(PermissionKind::ReadWrite),
        Err(_) => Err(Status::invalid_argument(format!(
            "etcdserver: permission type {perm_type} is not valid; use 0 (READ), 1 (WRITE) or 2 (READWRITE)"
        ))),
    }
}

fn perm_type(kind: PermissionKind) -> i32 {
    match kind {
        PermissionKind::Read => authpb::permission::Type::Read as i32,
        PermissionKind::Write => authpb::permission::Type::Write as i32,
        PermissionKind::ReadWrite => authpb::permission::Type::Readwrite as i32,
    }
}

#[tonic::async_trait]
impl pb::auth_server::Auth for AuthService {
    async fn auth_enable(
        &self,
        request: Request<pb::AuthEnableRequest>,
    ) -> Result<Response<pb::AuthEnableResponse>, Status> {
        let caller = caller_of(&self.0.node, &request)?;
        caller.admin()?;
        let mut secret = vec![0u8; 32];
        ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut secret)
            .map_err(|_| Status::internal("no randomness for the token secret"))?;
        let header = self.change(&caller, AuthChange::Enable { token_secret: secret }).await?;
        Ok(Response::new(pb::AuthEnableResponse { header: Some(header) }))
    }

    async fn auth_disable(
        &self,
        request: Request<pb::AuthDisableRequest>,
    ) -> Result<Response<pb::AuthDisableResponse>, Status> {
        let caller = caller_of(&self.0.node, &request)?;
        caller.admin()?;
        let header = self.change(&caller, AuthChange::Disable).await?;
        Ok(Response::new(pb::AuthDisableResponse { header: Some(header) }))
    }

    async fn auth_status(
        &self,
        request: Request<pb::AuthStatusRequest>,
    ) -> Result<Response<pb::AuthStatusResponse>, Status> {
        let caller = caller_of(&self.0.node, &request)?;
        caller.admin()?;
        Ok(Response::new(pb::AuthStatusResponse {
            header: self.header(),
            enabled: caller.store.is_enabled(),
            auth_revision: caller.store.revision(),
        }))
    }

    async fn authenticate(
        &self,
        request: Request<pb::AuthenticateRequest>,
    ) -> Result<Response<pb::AuthenticateResponse>, Status> {
        let store = self.0.node.auth();
        if !store.is_enabled() {
            return Err(errors::not_enabled());
        }
        let pb::AuthenticateRequest { name, password } = request.into_inner();
        if store.user(&name).is_some_and(|u| u.password_hash.is_none()) {
            // etcd's ErrNoPasswordUser, which its server maps to no gRPC code: UNKNOWN.
            return Err(Status::unknown("auth: authentication failed, password was given for no password user"));
        }
        let checked = store.clone();
        let user = name.clone();
        let matches = tokio::task::spawn_blocking(move || password_matches(&checked, &user, &password))
            .await
            .map_err(|e| Status::internal(format!("password check stopped: {e}")))?;
        if !matches {
            return Err(errors::auth_failed());
        }
        Ok(Response::new(pb::AuthenticateResponse { header: self.header(), token: issue_token(&store, &name) }))
    }

    async fn user_add(
        &self,
        request: Request<pb::AuthUserAddRequest>,
    ) -> Result<Response<pb::AuthUserAddResponse>, Status> {
        let caller = caller_of(&self.0.node, &request)?;
        caller.admin()?;
        let r = request.into_inner();
        let no_password = r.options.is_some_and(|o| o.no_password);
        let password_hash = if no_password { None } else { Some(hashed(r.password).await?) };
        let header = self.change(&caller, AuthChange::UserAdd { name: r.name, password_hash, no_password }).await?;
        Ok(Response::new(pb::AuthUserAddResponse { header: Some(header) }))
    }

    async fn user_get(
        &self,
        request: Request<pb::AuthUserGetRequest>,
    ) -> Result<Response<pb::AuthUserGetResponse>, Status> {
        let caller = caller_of(&self.0.node, &request)?;
        let name = request.into_inner().name;
        caller.admin_or_self(&name)?;
        let user =
            caller.store.user(&name).ok_or_else(|| super::errors::kv_error(&leasekv_kvstore::KvError::UserNotFound))?;
        Ok(Response::new(pb::AuthUserGetResponse {
            header: self.header(),
            roles: user.roles.iter().cloned().collect(),
        }))
    }

    async fn user_list(
        &self,
        request: Request<pb::AuthUserListRequest>,
    ) -> Result<Response<pb::AuthUserListResponse>, Status> {
        let caller = caller_of(&self.0.node, &request)?;
        caller.admin()?;
        let users = caller.store.users().into_iter().map(str::to_string).collect();
        Ok(Response::new(pb::AuthUserListResponse { header: self.header(), users }))
    }

    async fn user_delete(
        &self,
        request: Request<pb::AuthUserDeleteRequest>,
    ) -> Result<Response<pb::AuthUserDeleteResponse>, Status> {
        let caller = caller_of(&self.0.node, &request)?;
        caller.admin()?;
        let header = self.change(&caller, AuthChange::UserDelete { name: request.into_inner().name }).await?;
        Ok(Response::new(pb::AuthUserDeleteResponse { header: Some(header) }))
    }

    async fn user_change_password(
        &self,
        request: Request<pb::AuthUserChangePasswordRequest>,
    ) -> Result<Response<pb::AuthUserChangePasswordResponse>, Status> {
        // Admin only, as in etcd 3.4 (a user cannot change even its own password).
        let caller = caller_of(&self.0.node, &request)?;
        caller.admin()?;
        let r = request.into_inner();
        let password_hash = Some(hashed(r.password).await?);
        let header = self.change(&caller, AuthChange::UserChangePassword { name: r.name, password_hash }).await?;
        Ok(Response::new(pb::AuthUserChangePasswordResponse { header: Some(header) }))
    }

    async fn user_grant_role(
        &self,
        request: Request<pb::AuthUserGrantRoleRequest>,
    ) -> Result<Response<pb::AuthUserGrantRoleResponse>, Status> {
        let caller = caller_of(&self.0.node, &request)?;
        caller.admin()?;
        let r = request.into_inner();
        let header = self.change(&caller, AuthChange::UserGrantRole { user: r.user, role: r.role }).await?;
        Ok(Response::new(pb::AuthUserGrantRoleResponse { header: Some(header) }))
    }

    async fn user_revoke_role(
        &self,
        request: Request<pb::AuthUserRevokeRoleRequest>,
    ) -> Result<Response<pb::AuthUserRevokeRoleResponse>, Status> {
        let caller = caller_of(&self.0.node, &request)?;
        caller.admin()?;
        let r = request.into_inner();
        let header = self.change(&caller, AuthChange::UserRevokeRole { user: r.name, role: r.role }).await?;
        Ok(Response::new(pb::AuthUserRevokeRoleResponse { header: Some(header) }))
    }

    async fn role_add(
        &self,
        request: Request<pb::AuthRoleAddRequest>,
    ) -> Result<Response<pb::AuthRoleAddResponse>, Status> {
        let caller = caller_of(&self.0.node, &request)?;
        caller.admin()?;
        let header = self.change(&caller, AuthChange::RoleAdd { name: request.into_inner().name }).await?;
        Ok(Response::new(pb::AuthRoleAddResponse { header: Some(header) }))
    }

    async fn role_get(
        &self,
        request: Request<pb::AuthRoleGetRequest>,
    ) -> Result<Response<pb::AuthRoleGetResponse>, Status> {
        let caller = caller_of(&self.0.node, &request)?;
        let name = request.into_inner().role;
        caller.admin_or_holds(&name)?;
        let perm = if name == leasekv_kvstore::auth::ROOT_ROLE && caller.store.role(&name).is_none() {
            // etcd shows the implicit root role as read-write on every key.
            vec![authpb::Permission {
                perm_type: perm_type(PermissionKind::ReadWrite),
                key: vec![0],
                range_end: vec![0],
            }]
        } else {
            let role = caller
                .store
                .role(&name)
                .ok_or_else(|| super::errors::kv_error(&leasekv_kvstore::KvError::RoleNotFound))?;
            role.permissions
                .iter()
                .map(|p| authpb::Permission {
                    perm_type: perm_type(p.kind),
                    key: p.key.clone(),
                    range_end: p.range_end.clone(),
                })
                .collect()
        };
        Ok(Response::new(pb::AuthRoleGetResponse { header: self.header(), perm }))
    }

    async fn role_list(
        &self,
        request: Request<pb::AuthRoleListRequest>,
    ) -> Result<Response<pb::AuthRoleListResponse>, Status> {
        let caller = caller_of(&self.0.node, &request)?;
        caller.admin()?;
        let roles = caller.store.roles().into_iter().map(str::to_string).collect();
        Ok(Response::new(pb::AuthRoleListResponse { header: self.header(), roles }))
    }

    async fn role_delete(
        &self,
        request: Request<pb::AuthRoleDeleteRequest>,
    ) -> Result<Response<pb::AuthRoleDeleteResponse>, Status> {
        let caller = caller_of(&self.0.node, &request)?;
        caller.admin()?;
        let header = self.change(&caller, AuthChange::RoleDelete { name: request.into_inner().role }).await?;
        Ok(Response::new(pb::AuthRoleDeleteResponse { header: Some(header) }))
    }

    async fn role_grant_permission(
        &self,
        request: Request<pb::AuthRoleGrantPermissionRequest>,
    ) -> Result<Response<pb::AuthRoleGrantPermissionResponse>, Status> {
        let caller = caller_of(&self.0.node, &request)?;
        caller.admin()?;
        let r = request.into_inner();
        let perm = r.perm.ok_or_else(|| EtcdError::PermissionNotGiven.status())?;
        let permission = Permission { kind: kind_of(perm.perm_type)?, key: perm.key, range_end: perm.range_end };
        let header = self.change(&caller, AuthChange::RoleGrantPermission { role: r.name, permission }).await?;
        Ok(Response::new(pb::AuthRoleGrantPermissionResponse { header: Some(header) }))
    }

    async fn role_revoke_permission(
        &self,
        request: Request<pb::AuthRoleRevokePermissionRequest>,
    ) -> Result<Response<pb::AuthRoleRevokePermissionResponse>, Status> {
        let caller = caller_of(&self.0.node, &request)?;
        caller.admin()?;
        let r = request.into_inner();
        let change = AuthChange::RoleRevokePermission { role: r.role, key: r.key, range_end: r.range_end };
        let header = self.change(&caller, change).await?;
        Ok(Response::new(pb::AuthRoleRevokePermissionResponse { header: Some(header) }))
    }
}
