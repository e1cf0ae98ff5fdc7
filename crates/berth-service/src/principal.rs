//! Who is calling, and what that principal may touch (R-S1).

use berth_core::{Error, ProjectId, Result, Scope, TenantId, UserId};
use serde::{Deserialize, Serialize};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// Acts on its own sessions only (narrowed to its project when it has one).
    User,
    /// Acts for any user of its tenant (an agent platform's backend).
    Service,
    /// A tenant administrator: may also reopen, read the audit log, set retention.
    Admin,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::User => "user",
            Role::Service => "service",
            Role::Admin => "admin",
        }
    }

    pub fn parse(text: &str) -> Result<Role> {
        match text {
            "user" => Ok(Role::User),
            "service" => Ok(Role::Service),
            "admin" => Ok(Role::Admin),
            _ => Err(Error::invalid("role", format!("{text:?} is not user, service or admin"))),
        }
    }
}

/// The caller. The tenant always comes from authentication, never from a request body.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Principal {
    pub tenant: TenantId,
    pub user: UserId,
    pub project: Option<ProjectId>,
    pub role: Role,
}

impl Principal {
    pub fn user(tenant: TenantId, user: UserId, project: Option<ProjectId>) -> Principal {
        Principal { tenant, user, project, role: Role::User }
    }

    /// `user:<id>`, `service:<id>` or `admin:<id>` for audit records.
    pub fn actor(&self) -> String {
        format!("{}:{}", self.role.as_str(), self.user)
    }

    pub fn is_privileged(&self) -> bool {
        matches!(self.role, Role::Service | Role::Admin)
    }

    /// May this principal see a session of `scope`? Tenant always; user and project for
    /// the `user` role (a principal without a project sees all its own projects).
    pub fn can_access(&self, scope: &Scope) -> bool {
        if self.tenant != scope.tenant {
            return false;
        }
        match self.role {
            Role::Service | Role::Admin => true,
            Role::User => {
                self.user == scope.user
                    && self.project.as_ref().is_none_or(|project| scope.project.as_ref() == Some(project))
            }
        }
    }

    pub fn require_admin(&self, action: &str) -> Result<()> {
        if self.role != Role::Admin {
            return Err(Error::Forbidden { reason: format!("{action} requires the admin role") });
        }
        Ok(())
    }
}
