//! The harness's private network: one namespace per node and one for the harness itself
//! (its clients), joined by a bridge in the harness's namespace; partitions are nftables
//! rules inside the node namespaces.
//!
//! Addresses exist only inside these namespaces, so runs never touch the host's network
//! and two runs never see each other. Names carry the outer process's pid, so a run that
//! died without cleaning up is recognised and removed by the next one.

use anyhow::{bail, Context, Result};
use std::io::Write;
use std::net::Ipv4Addr;
use std::process::{Command, Stdio};

/// Every harness namespace's name starts with this.
const PREFIX: &str = "lkvchaos";

/// The harness's address on the bridge.
pub const CLIENT_IP: Ipv4Addr = Ipv4Addr::new(10, 231, 0, 1);

/// Node `i`'s address (0-based).
pub fn node_ip(i: usize) -> Ipv4Addr {
    Ipv4Addr::new(10, 231, 0, 11 + i as u8)
}

/// Where the peer-link proxy listens for traffic to node `i` ([`crate::proxy`]).
pub fn proxy_in(i: usize) -> Ipv4Addr {
    Ipv4Addr::new(10, 231, 0, 101 + i as u8)
}

/// Where the peer-link proxy's traffic from node `i` comes from.
pub fn proxy_out(i: usize) -> Ipv4Addr {
    Ipv4Addr::new(10, 231, 0, 151 + i as u8)
}

/// The nodes one node is cut from: (outgoing, incoming).
type NodeCuts = (Vec<usize>, Vec<usize>);

/// The namespaces of one run, named after the pid of the process that made them.
#[derive(Debug, Clone)]
pub struct Net {
    tag: String,
    nodes: usize,
    /// Per node, the nodes it is cut from: (outgoing, incoming). Cuts accumulate until healed.
    cuts: std::sync::Arc<std::sync::Mutex<Vec<NodeCuts>>>,
    /// Delay, jitter and loss on the peer links (leasekv's peers talk through the proxy).
    pub links: crate::proxy::Links,
}

impl Net {
    /// The namespaces a run with this tag uses (made by [`Net::create`]).
    pub fn existing(tag: &str, nodes: usize) -> Net {
        Net {
            tag: tag.to_string(),
            nodes,
            cuts: std::sync::Arc::new(std::sync::Mutex::new(vec![Default::default(); nodes])),
            links: Default::default(),
        }
    }

    /// The tag of this process's run.
    pub fn own_tag() -> String {
        format!("{PREFIX}{}", std::process::id())
    }

    /// The run's tag, for `--inner`.
    pub fn tag(&self) -> &str {
        &self.tag
    }

    /// The harness's namespace.
    pub fn client_ns(&self) -> String {
        format!("{}-c", self.tag)
    }

    /// Node `i`'s namespace.
    pub fn node_ns(&self, i: usize) -> String {
        format!("{}-n{i}", self.tag)
    }

    /// Makes the namespaces, the bridge and a veth pair per node.
    pub fn create(nodes: usize) -> Result<Net> {
        let net = Net::existing(&Net::own_tag(), nodes);
        let c = net.client_ns();
        ip(&["netns", "add", &c])?;
        let result = (|| {
            ip(&["-n", &c, "link", "set", "lo", "up"])?;
            ip(&["-n", &c, "link", "add", "br0", "type", "bridge"])?;
            ip(&["-n", &c, "addr", "add", &format!("{CLIENT_IP}/24"), "dev", "br0"])?;
            for i in 0..nodes {
                ip(&["-n", &c, "addr", "add", &format!("{}/24", proxy_in(i)), "dev", "br0"])?;
                ip(&["-n", &c, "addr", "add", &format!("{}/24", proxy_out(i)), "dev", "br0"])?;
            }
            ip(&["-n", &c, "link", "set", "br0", "up"])?;
            for i in 0..nodes {
                let n = net.node_ns(i);
                ip(&["netns", "add", &n])?;
                ip(&["-n", &n, "link", "set", "lo", "up"])?;
                let veth = format!("v{i}");
                ip(&["-n", &c, "link", "add", &veth, "type", "veth", "peer", "name", "eth0", "netns", &n])?;
                ip(&["-n", &c, "link", "set", &veth, "master", "br0", "up"])?;
                ip(&["-n", &n, "addr", "add", &format!("{}/24", node_ip(i)), "dev", "eth0"])?;
                ip(&["-n", &n, "link", "set", "eth0", "up"])?;
            }
            Ok(())
        })();
        if let Err(error) = result {
            net.teardown();
            return Err(error);
        }
        Ok(net)
    }

    /// Makes the namespaces for `nodes` nodes, runs this program again inside the clients'
    /// one with its own arguments and `--inner TAG`, and removes them once it ends.
    pub fn run_self_inside(nodes: usize) -> Result<std::process::ExitStatus> {
        Net::remove_stale();
        let net = Net::create(nodes)
            .context("creating network namespaces (needs root, iproute2 and a kernel with veth and bridge)")?;
        let exe = std::env::current_exe().context("this program's path");
        let status = exe.and_then(|exe| {
            Command::new("ip")
                .args(["netns", "exec", &net.client_ns()])
                .arg(exe)
                .args(std::env::args_os().skip(1))
                .arg("--inner")
                .arg(net.tag())
                .status()
                .context("running inside the namespaces")
        });
        net.teardown();
        status
    }

    /// Kills what still runs inside the namespaces (only processes this run started live
    /// there) and removes them.
    pub fn teardown(&self) {
        for ns in (0..self.nodes).map(|i| self.node_ns(i)).chain([self.client_ns()]) {
            remove_namespace(&ns);
        }
    }

    /// Removes namespaces of earlier runs whose process is gone.
    pub fn remove_stale() {
        let Ok(out) = Command::new("ip").args(["netns", "list"]).output() else { return };
        for line in String::from_utf8_lossy(&out.stdout).lines() {
            let name = line.split_whitespace().next().unwrap_or("");
            let Some(rest) = name.strip_prefix(PREFIX) else { continue };
            let pid: String = rest.chars().take_while(char::is_ascii_digit).collect();
            if !pid.is_empty() && !std::path::Path::new(&format!("/proc/{pid}")).exists() {
                remove_namespace(name);
            }
        }
    }

    /// Drops node `node`'s traffic to and from `others` (`one_way`: only what it sends),
    /// direct or through the peer-link proxy, on top of the cuts already in force.
    pub fn cut(&self, node: usize, others: &[usize], one_way: bool) -> Result<()> {
        let (outgoing, incoming) = {
            let mut cuts = self.cuts.lock().unwrap_or_else(|e| e.into_inner());
            let (outgoing, incoming) = &mut cuts[node];
            outgoing.extend_from_slice(others);
            if !one_way {
                incoming.extend_from_slice(others);
            }
            (outgoing.clone(), incoming.clone())
        };
        let addresses = |nodes: &[usize]| {
            nodes
                .iter()
                .flat_map(|&o| [node_ip(o), proxy_in(o), proxy_out(o)])
                .map(|a| a.to_string())
                .collect::<Vec<_>>()
        };
        let mut rules = String::from("table inet chaos {\n");
        if !outgoing.is_empty() {
            rules.push_str(&format!(
                " chain output {{ type filter hook output priority 0; ip daddr {{ {} }} drop; }}\n",
                addresses(&outgoing).join(", ")
            ));
        }
        if !incoming.is_empty() {
            rules.push_str(&format!(
                " chain input {{ type filter hook input priority 0; ip saddr {{ {} }} drop; }}\n",
                addresses(&incoming).join(", ")
            ));
        }
        rules.push_str("}\n");
        nft(&self.node_ns(node), &rules)
    }

    /// Removes every cut and link fault.
    pub fn heal(&self) {
        self.links.heal();
        for cut in self.cuts.lock().unwrap_or_else(|e| e.into_inner()).iter_mut() {
            *cut = Default::default();
        }
        for i in 0..self.nodes {
            let _ = Command::new("ip")
                .args(["netns", "exec", &self.node_ns(i), "nft", "delete", "table", "inet", "chaos"])
                .stderr(Stdio::null())
                .status();
        }
    }
}

fn remove_namespace(ns: &str) {
    if let Ok(out) = Command::new("ip").args(["netns", "pids", ns]).output() {
        for pid in String::from_utf8_lossy(&out.stdout).split_whitespace() {
            let _ = Command::new("kill").args(["-KILL", pid]).status();
        }
    }
    let _ = Command::new("ip").args(["netns", "del", ns]).stderr(Stdio::null()).status();
}

fn ip(args: &[&str]) -> Result<()> {
    let out = Command::new("ip").args(args).output().context("running `ip` (Debian package iproute2)")?;
    if !out.status.success() {
        bail!("ip {}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr).trim());
    }
    Ok(())
}

fn nft(ns: &str, rules: &str) -> Result<()> {
    // Replace, not add: one table per node holds the node's current cuts.
    let _ = Command::new("ip")
        .args(["netns", "exec", ns, "nft", "delete", "table", "inet", "chaos"])
        .stderr(Stdio::null())
        .status();
    let mut child = Command::new("ip")
        .args(["netns", "exec", ns, "nft", "-f", "-"])
        .stdin(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .context("running `nft` (Debian package nftables)")?;
    child.stdin.take().context("nft's stdin")?.write_all(rules.as_bytes())?;
    let out = child.wait_with_output()?;
    if !out.status.success() {
        bail!("nft in {ns}: {}", String::from_utf8_lossy(&out.stderr).trim());
    }
    Ok(())
}
