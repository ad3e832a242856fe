//! Who a certificate speaks for: the names it carries (subject common name, DNS and IP
//! subject alternative names), and whether they name a member of the cluster.
//!
//! The rule a peer certificate must meet (docs/security.md):
//! - If it carries a member's **name** (`n2`, say) as its CN or as a DNS SAN, it speaks for
//!   the members of that name only, wherever they run. Certificates for several members on
//!   one host must be named this way, since the host cannot tell them apart.
//! - Otherwise it speaks for every member whose **peer URL host** it carries (an IP SAN, or
//!   a DNS SAN equal to the URL's host name).
//!
//! A peer connection whose certificate does not speak for the member id its messages claim
//! is refused; it cannot change the election or the log.

use leasekv_kvstore::membership::{url_address, Member, Membership};
use rustls_pki_types::CertificateDer;
use std::net::IpAddr;
use x509_parser::extensions::GeneralName;
use x509_parser::prelude::{FromDer, X509Certificate};

/// The names in a certificate.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CertNames {
    /// The subject's common names.
    pub common_names: Vec<String>,
    /// DNS subject alternative names.
    pub dns: Vec<String>,
    /// IP subject alternative names.
    pub ips: Vec<IpAddr>,
}

impl CertNames {
    /// The names in a DER certificate; `None` when it does not parse (rustls verified it
    /// already, so that would be a certificate rustls accepts and x509-parser does not).
    pub fn of(cert: &CertificateDer<'_>) -> Option<CertNames> {
        let (_, cert) = X509Certificate::from_der(cert.as_ref()).ok()?;
        let common_names =
            cert.subject().iter_common_name().filter_map(|cn| cn.as_str().ok()).map(str::to_string).collect();
        let mut names = CertNames { common_names, ..CertNames::default() };
        if let Ok(Some(san)) = cert.subject_alternative_name() {
            for name in &san.value.general_names {
                match name {
                    GeneralName::DNSName(dns) => names.dns.push(dns.to_string()),
                    GeneralName::IPAddress(bytes) => names.ips.extend(ip_of(bytes)),
                    _ => {}
                }
            }
        }
        Some(names)
    }

    /// The first common name: the user a client certificate authenticates (etcd's rule).
    pub fn common_name(&self) -> Option<&str> {
        self.common_names.first().map(String::as_str)
    }

    fn names(&self) -> impl Iterator<Item = &str> {
        self.common_names.iter().chain(&self.dns).map(String::as_str)
    }

    /// Whether these names speak for member `id` of `membership` (the rule in the module
    /// documentation).
    pub fn speak_for(&self, id: leasekv_lease::NodeId, membership: &Membership) -> bool {
        let Some(member) = membership.get(id) else { return false };
        let named: Vec<&Member> =
            membership.members().filter(|m| !m.name.is_empty() && self.names().any(|n| n == m.name)).collect();
        if !named.is_empty() {
            return named.iter().any(|m| m.id == id);
        }
        member.peer_urls.iter().filter_map(|url| url_address(url)).any(|address| self.covers_host(host_of(address)))
    }

    fn covers_host(&self, host: &str) -> bool {
        match host.parse::<IpAddr>() {
            Ok(ip) => self.ips.contains(&ip),
            Err(_) => self.dns.iter().any(|d| d.eq_ignore_ascii_case(host)),
        }
    }
}

/// The host of `host:port` (IPv6 in brackets).
fn host_of(address: &str) -> &str {
    let host = address.rsplit_once(':').map_or(address, |(host, _)| host);
    host.trim_start_matches('[').trim_end_matches(']')
}

fn ip_of(bytes: &[u8]) -> Option<IpAddr> {
    match bytes.len() {
        4 => Some(IpAddr::from(<[u8; 4]>::try_from(bytes).ok()?)),
        16 => Some(IpAddr::from(<[u8; 16]>::try_from(bytes).ok()?)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use leasekv_lease::NodeId;

    fn cluster() -> Membership {
        let member = |id: u32, name: &str, url: &str| Member {
            id: NodeId(id),
            name: name.into(),
            peer_urls: vec![url.into()],
            client_urls: vec![],
            learner: false,
        };
        Membership::seed(vec![
            member(1, "n1", "https://127.0.0.1:12380"),
            member(2, "n2", "https://127.0.0.1:22380"),
            member(3, "", "https://node3.example:2380"),
        ])
    }

    fn names(cn: &str, dns: &[&str], ips: &[&str]) -> CertNames {
        CertNames {
            common_names: vec![cn.into()],
            dns: dns.iter().map(|s| s.to_string()).collect(),
            ips: ips.iter().map(|s| s.parse().unwrap()).collect(),
        }
    }

    #[test]
    fn a_named_certificate_speaks_only_for_its_member_even_on_a_shared_host() {
        let n2 = names("n2", &["localhost"], &["127.0.0.1"]);
        assert!(n2.speak_for(NodeId(2), &cluster()));
        assert!(!n2.speak_for(NodeId(1), &cluster()), "same host, another member's id");
        assert!(!n2.speak_for(NodeId(9), &cluster()), "not a member");
    }

    #[test]
    fn an_unnamed_certificate_speaks_for_the_members_on_its_hosts() {
        let host = names("some-host", &[], &["127.0.0.1"]);
        assert!(host.speak_for(NodeId(1), &cluster()));
        assert!(!host.speak_for(NodeId(3), &cluster()));
        let n3 = names("x", &["NODE3.example"], &[]);
        assert!(n3.speak_for(NodeId(3), &cluster()));
        assert!(!names("x", &["other.example"], &["10.0.0.1"]).speak_for(NodeId(1), &cluster()));
    }

    #[test]
    fn hosts_are_split_from_ports() {
        assert_eq!(host_of("127.0.0.1:2380"), "127.0.0.1");
        assert_eq!(host_of("[::1]:2380"), "::1");
        assert_eq!(host_of("node3.example:2380"), "node3.example");
    }
}
