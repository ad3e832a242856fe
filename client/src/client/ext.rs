//! leasekv's extension service: named leases, election status, step-down.

use super::*;

impl Client {
    /// Grants a lease under a unique `name`.
    pub async fn grant_named(&self, name: &str, ttl: i64) -> Result<GrantNamedResponse, ClientError> {
        let request = GrantNamedRequest { name: name.to_string(), ttl };
        self.call("GrantNamed", unary!(LeaseKvClient, grant_named, request.clone())).await
    }

    /// The id of the live lease called `name`; [`ClientError::is_not_found`] when there is none.
    pub async fn resolve_name(&self, name: &str) -> Result<i64, ClientError> {
        let request = ResolveNameRequest { name: name.to_string() };
        let response = self.call("ResolveName", unary!(LeaseKvClient, resolve_name, request.clone())).await?;
        Ok(response.id)
    }

    /// Every live lease with its name, granted TTL and remaining time.
    pub async fn list_leases(&self) -> Result<Vec<LeaseInfo>, ClientError> {
        let response = self.call("ListLeases", unary!(LeaseKvClient, list_leases, ListLeasesRequest {})).await?;
        Ok(response.leases)
    }

    /// The answering node's view of the master election.
    pub async fn election_status(&self) -> Result<ElectionStatusResponse, ClientError> {
        self.call("ElectionStatus", unary!(LeaseKvClient, election_status, ElectionStatusRequest {})).await
    }

    /// Asks the answering node to give up mastership.
    pub async fn step_down(&self) -> Result<(), ClientError> {
        self.call("StepDown", unary!(LeaseKvClient, step_down, StepDownRequest {})).await?;
        Ok(())
    }
}
