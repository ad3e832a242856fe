//! etcd's Auth service: enabling auth, users, roles and their permissions.

use super::*;

impl Client {
    /// Turns auth on (the `root` user with the `root` role must exist).
    pub async fn auth_enable(&self) -> Result<(), ClientError> {
        self.call("AuthEnable", unary!(AuthClient, auth_enable, AuthEnableRequest {})).await.map(drop)
    }

    /// Turns auth off (root only).
    pub async fn auth_disable(&self) -> Result<(), ClientError> {
        self.call("AuthDisable", unary!(AuthClient, auth_disable, AuthDisableRequest {})).await.map(drop)
    }

    /// Whether auth is on, and the auth store's revision.
    pub async fn auth_status(&self) -> Result<AuthStatusResponse, ClientError> {
        self.call("AuthStatus", unary!(AuthClient, auth_status, AuthStatusRequest {})).await
    }

    /// Adds a user; `password` `None` adds one that cannot authenticate with a password
    /// (etcd's `--no-password`: for client-certificate users).
    pub async fn user_add(&self, name: &str, password: Option<&str>) -> Result<(), ClientError> {
        let request = AuthUserAddRequest {
            name: name.to_string(),
            password: password.unwrap_or_default().to_string(),
            options: Some(crate::proto::authpb::UserAddOptions { no_password: password.is_none() }),
            hashed_password: String::new(),
        };
        self.call("UserAdd", unary!(AuthClient, user_add, request.clone())).await.map(drop)
    }

    /// Deletes a user.
    pub async fn user_delete(&self, name: &str) -> Result<(), ClientError> {
        let request = AuthUserDeleteRequest { name: name.to_string() };
        self.call("UserDelete", unary!(AuthClient, user_delete, request.clone())).await.map(drop)
    }

    /// A user's roles.
    pub async fn user_get(&self, name: &str) -> Result<Vec<String>, ClientError> {
        let request = AuthUserGetRequest { name: name.to_string() };
        Ok(self.call("UserGet", unary!(AuthClient, user_get, request.clone())).await?.roles)
    }

    /// Every user's name, sorted.
    pub async fn user_list(&self) -> Result<Vec<String>, ClientError> {
        Ok(self.call("UserList", unary!(AuthClient, user_list, AuthUserListRequest {})).await?.users)
    }

    /// Changes a user's password (root only).
    pub async fn user_change_password(&self, name: &str, password: &str) -> Result<(), ClientError> {
        let request = AuthUserChangePasswordRequest {
            name: name.to_string(),
            password: password.to_string(),
            hashed_password: String::new(),
        };
        self.call("UserChangePassword", unary!(AuthClient, user_change_password, request.clone())).await.map(drop)
    }

    /// Grants `role` to `user`.
    pub async fn user_grant_role(&self, user: &str, role: &str) -> Result<(), ClientError> {
        let request = AuthUserGrantRoleRequest { user: user.to_string(), role: role.to_string() };
        self.call("UserGrantRole", unary!(AuthClient, user_grant_role, request.clone())).await.map(drop)
    }

    /// Revokes `role` from `user`.
    pub async fn user_revoke_role(&self, user: &str, role: &str) -> Result<(), ClientError> {
        let request = AuthUserRevokeRoleRequest { name: user.to_string(), role: role.to_string() };
        self.call("UserRevokeRole", unary!(AuthClient, user_revoke_role, request.clone())).await.map(drop)
    }

    /// Adds a role without permissions.
    pub async fn role_add(&self, name: &str) -> Result<(), ClientError> {
        let request = AuthRoleAddRequest { name: name.to_string() };
        self.call("RoleAdd", unary!(AuthClient, role_add, request.clone())).await.map(drop)
    }

    /// Deletes a role (and revokes it from every user).
    pub async fn role_delete(&self, name: &str) -> Result<(), ClientError> {
        let request = AuthRoleDeleteRequest { role: name.to_string() };
        self.call("RoleDelete", unary!(AuthClient, role_delete, request.clone())).await.map(drop)
    }

    /// A role's permissions.
    pub async fn role_get(&self, name: &str) -> Result<Vec<crate::proto::authpb::Permission>, ClientError> {
        let request = AuthRoleGetRequest { role: name.to_string() };
        Ok(self.call("RoleGet", unary!(AuthClient, role_get, request.clone())).await?.perm)
    }

    /// Every role's name, sorted.
    pub async fn role_list(&self) -> Result<Vec<String>, ClientError> {
        Ok(self.call("RoleList", unary!(AuthClient, role_list, AuthRoleListRequest {})).await?.roles)
    }

    /// Grants `role` a permission on a key (`range_end` empty), a range, or every key from
    /// `key` on (`range_end` `\0`).
    pub async fn role_grant_permission(
        &self,
        role: &str,
        permission: crate::proto::authpb::Permission,
    ) -> Result<(), ClientError> {
        let request = AuthRoleGrantPermissionRequest { name: role.to_string(), perm: Some(permission) };
        self.call("RoleGrantPermission", unary!(AuthClient, role_grant_permission, request.clone())).await.map(drop)
    }

    /// Revokes `role`'s permission on exactly this key and range end.
    pub async fn role_revoke_permission(&self, role: &str, key: &[u8], range_end: &[u8]) -> Result<(), ClientError> {
        let request = AuthRoleRevokePermissionRequest {
            role: role.to_string(),
            key: key.to_vec(),
            range_end: range_end.to_vec(),
        };
        self.call("RoleRevokePermission", unary!(AuthClient, role_revoke_permission, request.clone())).await.map(drop)
    }
}
