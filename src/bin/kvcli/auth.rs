//! `kvcli auth`, `kvcli user` and `kvcli role`: etcd's Auth service, printed as etcdctl
//! prints it.

use anyhow::{bail, Result};
use clap::{Args, Subcommand, ValueEnum};
use leasekv::client::proto::authpb::{permission::Type, Permission};
use leasekv::client::{prefix_range_end, Client, EtcdError};

/// `kvcli auth ...`.
#[derive(Debug, Subcommand)]
pub enum AuthCommand {
    /// Turn auth on (the user `root` with the role `root` must exist; both are created
    /// as needed, as etcdctl does, except the user's password).
    Enable,
    /// Turn auth off (root only).
    Disable,
    /// Whether auth is on, and the auth store's revision.
    Status,
}

/// `kvcli user ...`.
#[derive(Debug, Subcommand)]
pub enum UserCommand {
    /// Add a user: NAME:PASSWORD, or NAME with --no-password (a client-certificate user).
    Add {
        /// NAME:PASSWORD, or NAME with --no-password.
        user: String,
        /// A user that cannot authenticate with a password.
        #[arg(long)]
        no_password: bool,
    },
    /// Delete a user.
    Delete {
        /// The user.
        name: String,
    },
    /// Show a user's roles.
    Get {
        /// The user.
        name: String,
    },
    /// List the users.
    List,
    /// Change a user's password (root only).
    Passwd {
        /// The user.
        name: String,
        /// The new password.
        #[arg(long = "new-password", env = "LEASEKV_NEW_PASSWORD")]
        password: String,
    },
    /// Grant a role to a user.
    GrantRole {
        /// The user.
        user: String,
        /// The role.
        role: String,
    },
    /// Revoke a role from a user.
    RevokeRole {
        /// The user.
        user: String,
        /// The role.
        role: String,
    },
}

/// A permission's kind, as etcdctl names it.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum Kind {
    /// Range and Watch.
    Read,
    /// Put and DeleteRange.
    Write,
    /// Both.
    Readwrite,
}

/// `kvcli role ...`.
#[derive(Debug, Subcommand)]
pub enum RoleCommand {
    /// Add a role.
    Add {
        /// The role.
        name: String,
    },
    /// Delete a role (and revoke it from every user).
    Delete {
        /// The role.
        name: String,
    },
    /// Show a role's permissions.
    Get {
        /// The role.
        name: String,
    },
    /// List the roles.
    List,
    /// Grant a permission on a key, a range [KEY, RANGE_END), a prefix or every key from KEY.
    GrantPermission {
        /// The role.
        role: String,
        /// read, write or readwrite.
        kind: Kind,
        /// What it covers.
        #[command(flatten)]
        range: KeyRange,
    },
    /// Revoke the permission on exactly this key, range or prefix.
    RevokePermission {
        /// The role.
        role: String,
        /// What it covers, as it was granted.
        #[command(flatten)]
        range: KeyRange,
    },
}

/// The keys a permission covers, as etcdctl takes them.
#[derive(Debug, Args)]
pub struct KeyRange {
    /// The key (or the range's start, or the prefix).
    key: String,
    /// The range's end (exclusive).
    range_end: Option<String>,
    /// Every key starting with KEY.
    #[arg(long, conflicts_with = "range_end")]
    prefix: bool,
    /// Every key from KEY on.
    #[arg(long, conflicts_with_all = ["range_end", "prefix"])]
    from_key: bool,
}

impl KeyRange {
    /// The permission's range end: empty for one key, `\0` from the key on.
    fn end(&self) -> Vec<u8> {
        match (&self.range_end, self.prefix, self.from_key) {
            (Some(end), _, _) => end.clone().into_bytes(),
            (None, true, _) => prefix_range_end(self.key.as_bytes()),
            (None, _, true) => vec![0],
            (None, false, false) => Vec::new(),
        }
    }
}

/// Runs one `auth` subcommand.
pub async fn auth(client: &Client, command: AuthCommand) -> Result<()> {
    match command {
        AuthCommand::Enable => {
            // etcdctl's way: create the root role and grant it when they are missing.
            if let Err(error) = client.auth_enable().await {
                if error.etcd_error() != Some(EtcdError::RootRoleNotExist) {
                    return Err(error.into());
                }
                if let Err(error) = client.role_add("root").await {
                    if error.etcd_error() != Some(EtcdError::RoleAlreadyExists) {
                        return Err(error.into());
                    }
                }
                client.user_grant_role("root", "root").await?;
                client.auth_enable().await?;
            }
            println!("Authentication Enabled");
        }
        AuthCommand::Disable => {
            client.auth_disable().await?;
            println!("Authentication Disabled");
        }
        AuthCommand::Status => {
            let status = client.auth_status().await?;
            println!("Authentication Status: {}", status.enabled);
            println!("AuthRevision: {}", status.auth_revision);
        }
    }
    Ok(())
}

/// Runs one `user` subcommand.
pub async fn user(client: &Client, command: UserCommand) -> Result<()> {
    match command {
        UserCommand::Add { user, no_password } => {
            let (name, password) = match (user.split_once(':'), no_password) {
                (Some((name, password)), false) => (name.to_string(), Some(password.to_string())),
                (None, true) => (user.clone(), None),
                (Some(_), true) => bail!("--no-password takes a NAME without a password"),
                (None, false) => bail!("give the user as NAME:PASSWORD (or NAME with --no-password)"),
            };
            client.user_add(&name, password.as_deref()).await?;
            println!("User {name} created");
        }
        UserCommand::Delete { name } => {
            client.user_delete(&name).await?;
            println!("User {name} deleted");
        }
        UserCommand::Get { name } => {
            let roles = client.user_get(&name).await?;
            println!("User: {name}");
            println!("Roles: {}", roles.join(" "));
        }
        UserCommand::List => {
            for user in client.user_list().await? {
                println!("{user}");
            }
        }
        UserCommand::Passwd { name, password } => {
            client.user_change_password(&name, &password).await?;
            println!("Password updated");
        }
        UserCommand::GrantRole { user, role } => {
            client.user_grant_role(&user, &role).await?;
            println!("Role {role} is granted to user {user}");
        }
        UserCommand::RevokeRole { user, role } => {
            client.user_revoke_role(&user, &role).await?;
            println!("Role {role} is revoked from user {user}");
        }
    }
    Ok(())
}

/// How etcdctl shows a permission's range.
fn show(p: &Permission) -> String {
    let key = String::from_utf8_lossy(&p.key);
    match p.range_end.as_slice() {
        [] => key.to_string(),
        [0] => format!("[{key}, <open ended>"),
        end if end == prefix_range_end(&p.key) => {
            format!("[{key}, {}) (prefix {key})", String::from_utf8_lossy(end))
        }
        end => format!("[{key}, {})", String::from_utf8_lossy(end)),
    }
}

/// Runs one `role` subcommand.
pub async fn role(client: &Client, command: RoleCommand) -> Result<()> {
    match command {
        RoleCommand::Add { name } => {
            client.role_add(&name).await?;
            println!("Role {name} created");
        }
        RoleCommand::Delete { name } => {
            client.role_delete(&name).await?;
            println!("Role {name} deleted");
        }
        RoleCommand::Get { name } => {
            let perms = client.role_get(&name).await?;
            println!("Role {name}");
            for (title, wanted) in [("KV Read:", Type::Read), ("KV Write:", Type::Write)] {
                println!("{title}");
                for p in perms.iter().filter(|p| p.perm_type == wanted as i32 || p.perm_type == Type::Readwrite as i32)
                {
                    println!("\t{}", show(p));
                }
            }
        }
        RoleCommand::List => {
            for role in client.role_list().await? {
                println!("{role}");
            }
        }
        RoleCommand::GrantPermission { role, kind, range } => {
            let perm_type = match kind {
                Kind::Read => Type::Read,
                Kind::Write => Type::Write,
                Kind::Readwrite => Type::Readwrite,
            } as i32;
            let permission = Permission { perm_type, key: range.key.clone().into_bytes(), range_end: range.end() };
            client.role_grant_permission(&role, permission).await?;
            println!("Role {role} updated");
        }
        RoleCommand::RevokePermission { role, range } => {
            client.role_revoke_permission(&role, range.key.as_bytes(), &range.end()).await?;
            println!("Permission of key {} is revoked from role {role}", range.key);
        }
    }
    Ok(())
}
