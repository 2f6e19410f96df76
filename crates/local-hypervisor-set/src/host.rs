//! Thin wrappers over the host tools this crate drives: `ip` for links, addresses and network
//! namespaces. Every mutation is one `ip` invocation; failures carry the command and its
//! stderr. Removal helpers treat "already gone" as success so that `destroy` converges.

use std::ffi::OsStr;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use ipnet::Ipv4Net;
use serde::Deserialize;

use crate::error::{Error, Result};

/// Where `ip netns` keeps namespace handles.
pub const NETNS_DIR: &str = "/run/netns";

fn describe(cmd: &Command) -> String {
    std::iter::once(cmd.get_program())
        .chain(cmd.get_args())
        .map(OsStr::to_string_lossy)
        .collect::<Vec<_>>()
        .join(" ")
}

/// Runs a command to completion; its stdout on success.
///
/// # Errors
/// [`Error::Spawn`] or [`Error::CommandFailed`] (with the trimmed stderr).
pub fn run(cmd: &mut Command) -> Result<String> {
    let output = cmd
        .stdin(Stdio::null())
        .output()
        .map_err(|source| Error::Spawn {
            program: cmd.get_program().to_string_lossy().into_owned(),
            source,
        })?;
    if output.status.success() {
        Ok(String::from_utf8_lossy(&output.stdout).into_owned())
    } else {
        Err(Error::CommandFailed {
            command: describe(cmd),
            status: output.status,
            stderr: String::from_utf8_lossy(&output.stderr).trim().to_string(),
        })
    }
}

fn ip<I, S>(args: I) -> Result<String>
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    run(Command::new("ip").args(args))
}

/// Runs an `ip` removal; "does not exist" answers count as success.
fn ip_remove(args: &[&str]) -> Result<()> {
    match ip(args) {
        Ok(_) => Ok(()),
        Err(Error::CommandFailed { stderr, .. }) if already_gone(&stderr) => Ok(()),
        Err(e) => Err(e),
    }
}

/// Whether `ip`'s complaint says that what was to be removed is gone already: a link, route
/// or namespace removed meanwhile (a veth's host end goes by itself when its peer's namespace
/// is deleted, between our check and our `ip link del`).
fn already_gone(stderr: &str) -> bool {
    [
        "Cannot find device",
        "No such device",
        "No such file or directory",
        "does not exist",
    ]
    .iter()
    .any(|m| stderr.contains(m))
}

#[derive(Deserialize)]
struct JsonLink {
    #[serde(default)]
    addr_info: Vec<JsonAddr>,
}

#[derive(Deserialize)]
struct JsonAddr {
    local: Option<Ipv4Addr>,
    prefixlen: Option<u8>,
}

#[derive(Deserialize)]
struct JsonRoute {
    dst: String,
    #[serde(default, rename = "type")]
    kind: Option<String>,
}

/// Parses `ip -j -4 addr show` output into the networks of the addresses.
fn parse_addrs(json: &str) -> Result<Vec<Ipv4Net>, serde_json::Error> {
    let links: Vec<JsonLink> = serde_json::from_str(json)?;
    Ok(links
        .iter()
        .flat_map(|l| &l.addr_info)
        .filter_map(|a| Ipv4Net::new(a.local?, a.prefixlen?).ok())
        .map(|n| n.trunc())
        .collect())
}

/// Parses `ip -j -4 route show` output into the destination networks (not the default).
fn parse_routes(json: &str) -> Result<Vec<Ipv4Net>, serde_json::Error> {
    let routes: Vec<JsonRoute> = serde_json::from_str(json)?;
    Ok(routes
        .iter()
        // An unreachable route takes no address: the sets' pool route is one.
        .filter(|r| r.kind.as_deref() != Some("unreachable"))
        .filter_map(|r| {
            r.dst
                .parse::<Ipv4Net>()
                .ok()
                .or_else(|| r.dst.parse::<Ipv4Addr>().ok().map(Ipv4Net::from))
        })
        .collect())
}

/// The destinations of `ip -j -4 route` output, whatever the routes' type.
fn parse_routes_of_any_type(json: &str) -> Result<Vec<Ipv4Net>, serde_json::Error> {
    let routes: Vec<JsonRoute> = serde_json::from_str(json)?;
    Ok(routes
        .iter()
        .filter_map(|r| {
            r.dst
                .parse::<Ipv4Net>()
                .ok()
                .or_else(|| r.dst.parse::<Ipv4Addr>().ok().map(Ipv4Net::from))
        })
        .collect())
}

/// The IPv4 networks present on the host: its addresses' networks and its routes.
///
/// # Errors
/// When `ip` fails or prints something unexpected.
pub fn host_ipv4_networks() -> Result<Vec<Ipv4Net>> {
    let parse_err = |command: &str| {
        let command = command.to_string();
        move |source| Error::ParseOutput { command, source }
    };
    let mut nets =
        parse_addrs(&ip(["-j", "-4", "addr", "show"])?).map_err(parse_err("ip -j -4 addr show"))?;
    nets.extend(
        parse_routes(&ip(["-j", "-4", "route", "show", "table", "all"])?)
            .map_err(parse_err("ip -j -4 route show table all"))?,
    );
    Ok(nets)
}

/// The host's name servers (IPv4 ones of /etc/resolv.conf) and gateways (`via` of its
/// routes).
///
/// # Errors
/// When `ip` fails or prints something unexpected.
pub fn host_reached_addresses() -> Result<Vec<Ipv4Addr>> {
    let mut out: Vec<Ipv4Addr> = std::fs::read_to_string("/etc/resolv.conf")
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.trim().strip_prefix("nameserver"))
        .filter_map(|a| a.trim().parse().ok())
        .collect();
    #[derive(serde::Deserialize)]
    struct Via {
        #[serde(default)]
        gateway: Option<String>,
    }
    let routes = ip(["-j", "-4", "route", "show", "table", "all"])?;
    let vias: Vec<Via> = serde_json::from_str(&routes).map_err(|source| Error::ParseOutput {
        command: "ip -j -4 route show table all".into(),
        source,
    })?;
    out.extend(
        vias.iter()
            .filter_map(|v| v.gateway.as_deref()?.parse::<Ipv4Addr>().ok()),
    );
    Ok(out)
}

/// Makes the `unreachable` routes inside the sets' pool exactly `routes` (see
/// [`crate::System::ensure_unreachable`]).
///
/// # Errors
/// When `ip` fails.
pub fn ensure_unreachable(routes: &[Ipv4Net]) -> Result<()> {
    let listed = ip(["-j", "-4", "route", "show", "type", "unreachable"])?;
    let present: Vec<Ipv4Net> =
        parse_routes_of_any_type(&listed).map_err(|source| Error::ParseOutput {
            command: "ip -j -4 route show type unreachable".into(),
            source,
        })?;
    for stale in present
        .iter()
        .filter(|r| crate::plan::SUBNET_POOL.contains(*r) && !routes.contains(r))
    {
        ip_remove(&["route", "del", "unreachable", &stale.to_string()])?;
    }
    for route in routes.iter().filter(|r| !present.contains(r)) {
        ip(["route", "add", "unreachable", route.to_string().as_str()])?;
    }
    Ok(())
}

/// Names of the host's network interfaces (of the current network namespace).
///
/// # Errors
/// [`Error::Io`] when /sys/class/net cannot be read.
pub fn host_links() -> Result<Vec<String>> {
    let dir = Path::new("/sys/class/net");
    let mut names = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(crate::error::io(dir))? {
        let entry = entry.map_err(crate::error::io(dir))?;
        names.push(entry.file_name().to_string_lossy().into_owned());
    }
    Ok(names)
}

pub fn link_exists(name: &str) -> bool {
    Path::new("/sys/class/net").join(name).exists()
}

pub fn netns_path(name: &str) -> PathBuf {
    Path::new(NETNS_DIR).join(name)
}

pub fn netns_exists(name: &str) -> bool {
    netns_path(name).exists()
}

/// Names of all network namespaces `ip netns` knows.
///
/// # Errors
/// [`Error::Io`] when /run/netns exists but cannot be read.
pub fn netns_names() -> Result<Vec<String>> {
    let dir = Path::new(NETNS_DIR);
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(crate::error::io(dir)(e)),
    };
    let mut names = Vec::new();
    for entry in entries {
        let entry = entry.map_err(crate::error::io(dir))?;
        names.push(entry.file_name().to_string_lossy().into_owned());
    }
    names.sort();
    Ok(names)
}

/// Creates the set's bridge holding the gateway address, and brings it up.
///
/// # Errors
/// When an `ip` command fails.
pub fn create_bridge(name: &str, gateway: Ipv4Addr, subnet: Ipv4Net) -> Result<()> {
    ip(["link", "add", name, "type", "bridge"])?;
    ip([
        "addr",
        "add",
        &format!("{gateway}/{}", subnet.prefix_len()),
        "dev",
        name,
    ])?;
    ip(["link", "set", name, "up"])?;
    Ok(())
}

/// Creates a hypervisor's network namespace with loopback up, and a veth pair from the
/// bridge to `eth0` inside it, addressed, with a default route through the gateway.
///
/// # Errors
/// When an `ip` command fails.
pub fn create_hypervisor_network(
    netns: &str,
    host_veth: &str,
    bridge: &str,
    ip_addr: Ipv4Addr,
    subnet: Ipv4Net,
    gateway: Ipv4Addr,
) -> Result<()> {
    ip(["netns", "add", netns])?;
    ip(["-n", netns, "link", "set", "lo", "up"])?;
    ip([
        "link", "add", host_veth, "type", "veth", "peer", "name", "eth0", "netns", netns,
    ])?;
    ip(["link", "set", host_veth, "master", bridge])?;
    ip(["link", "set", host_veth, "up"])?;
    ip([
        "-n",
        netns,
        "addr",
        "add",
        &format!("{ip_addr}/{}", subnet.prefix_len()),
        "dev",
        "eth0",
    ])?;
    ip(["-n", netns, "link", "set", "eth0", "up"])?;
    ip([
        "-n",
        netns,
        "route",
        "add",
        "default",
        "via",
        &gateway.to_string(),
    ])?;
    Ok(())
}

/// Runs `args` inside network namespace `netns` (`nsenter --net`, which keeps the host's
/// /sys, unlike `ip netns exec`).
fn in_netns(netns: &str, args: &[&str]) -> Result<String> {
    run(Command::new("nsenter")
        .arg(format!("--net={}", netns_path(netns).display()))
        .arg("--")
        .args(args))
}

/// The set's router: a namespace on the set's bridge (`uplink` on `subnet`) with a LAN bridge
/// (`lan_gateway` on `lan`) behind it. What leaves the LAN through it is masqueraded as its
/// uplink address; connections that would enter the LAN are dropped, as a home router's NAT
/// does. Nothing outside has a route to the LAN.
///
/// # Errors
/// When an `ip`, `iptables` or `sh` command fails.
pub fn create_nat_router(
    router: &str,
    host_veth: &str,
    bridge: &str,
    uplink: Ipv4Addr,
    subnet: Ipv4Net,
    lan: Ipv4Net,
    lan_gateway: Ipv4Addr,
) -> Result<()> {
    ip(["netns", "add", router])?;
    ip(["-n", router, "link", "set", "lo", "up"])?;
    ip([
        "link", "add", host_veth, "type", "veth", "peer", "name", "eth0", "netns", router,
    ])?;
    ip(["link", "set", host_veth, "master", bridge])?;
    ip(["link", "set", host_veth, "up"])?;
    ip([
        "-n",
        router,
        "addr",
        "add",
        &format!("{uplink}/{}", subnet.prefix_len()),
        "dev",
        "eth0",
    ])?;
    ip(["-n", router, "link", "set", "eth0", "up"])?;
    ip(["-n", router, "link", "add", "lan", "type", "bridge"])?;
    ip([
        "-n",
        router,
        "addr",
        "add",
        &format!("{lan_gateway}/{}", lan.prefix_len()),
        "dev",
        "lan",
    ])?;
    ip(["-n", router, "link", "set", "lan", "up"])?;
    in_netns(
        router,
        &["sh", "-c", "echo 1 > /proc/sys/net/ipv4/ip_forward"],
    )?;
    let lan = lan.to_string();
    in_netns(
        router,
        &[
            "iptables",
            "-t",
            "nat",
            "-A",
            "POSTROUTING",
            "-s",
            &lan,
            "-o",
            "eth0",
            "-j",
            "MASQUERADE",
        ],
    )?;
    in_netns(
        router,
        &[
            "iptables",
            "-A",
            "FORWARD",
            "-i",
            "eth0",
            "-o",
            "lan",
            "-m",
            "conntrack",
            "--ctstate",
            "ESTABLISHED,RELATED",
            "-j",
            "ACCEPT",
        ],
    )?;
    in_netns(
        router,
        &[
            "iptables", "-A", "FORWARD", "-i", "eth0", "-o", "lan", "-j", "DROP",
        ],
    )?;
    Ok(())
}

/// A worker's namespace on the router's LAN: a veth pair from the router's LAN bridge
/// (`router_port`) to `eth0` inside it, addressed, the router its default gateway.
///
/// # Errors
/// When an `ip` command fails.
pub fn create_worker_network(
    worker: &str,
    router: &str,
    router_port: &str,
    ip_addr: Ipv4Addr,
    lan: Ipv4Net,
    lan_gateway: Ipv4Addr,
) -> Result<()> {
    ip(["netns", "add", worker])?;
    ip(["-n", worker, "link", "set", "lo", "up"])?;
    // Both ends are made inside their namespaces: no name is taken on the host meanwhile.
    ip([
        "link",
        "add",
        router_port,
        "netns",
        router,
        "type",
        "veth",
        "peer",
        "name",
        "eth0",
        "netns",
        worker,
    ])?;
    ip(["-n", router, "link", "set", router_port, "master", "lan"])?;
    ip(["-n", router, "link", "set", router_port, "up"])?;
    ip([
        "-n",
        worker,
        "addr",
        "add",
        &format!("{ip_addr}/{}", lan.prefix_len()),
        "dev",
        "eth0",
    ])?;
    ip(["-n", worker, "link", "set", "eth0", "up"])?;
    ip([
        "-n",
        worker,
        "route",
        "add",
        "default",
        "via",
        &lan_gateway.to_string(),
    ])?;
    Ok(())
}

/// Deletes a link if present.
///
/// # Errors
/// When `ip` fails for another reason than the link being gone.
pub fn delete_link(name: &str) -> Result<()> {
    if !link_exists(name) {
        return Ok(());
    }
    ip_remove(&["link", "del", name])
}

/// Deletes a network namespace handle if present.
///
/// # Errors
/// When `ip` fails for another reason than the namespace being gone.
pub fn delete_netns(name: &str) -> Result<()> {
    if !netns_exists(name) {
        return Ok(());
    }
    ip_remove(&["netns", "delete", name])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_is_gone_already_is_not_a_failure_to_remove_it() {
        // What `ip` prints when a link, a namespace or a route is gone (a CI run once
        // failed on the second: a veth's end went with its peer's namespace).
        for gone in [
            "Cannot find device \"ohs1v1\"",
            "RTNETLINK answers: No such device",
            "Cannot remove namespace file \"/run/netns/x\": No such file or directory",
            "RTNETLINK answers: No such process\nroute does not exist",
        ] {
            assert!(already_gone(gone), "{gone}");
        }
        for failure in [
            "RTNETLINK answers: Operation not permitted",
            "RTNETLINK answers: Device or resource busy",
        ] {
            assert!(!already_gone(failure), "{failure}");
        }
    }

    #[test]
    fn parses_ip_json() {
        let addrs = r#"[{"ifindex":1,"ifname":"lo","addr_info":[{"family":"inet","local":"127.0.0.1","prefixlen":8}]},
            {"ifindex":4,"ifname":"eth0","addr_info":[{"family":"inet","local":"192.0.2.2","prefixlen":24}]},
            {"ifindex":5,"ifname":"x"}]"#;
        assert_eq!(
            parse_addrs(addrs).unwrap(),
            [
                "127.0.0.0/8".parse::<Ipv4Net>().unwrap(),
                "192.0.2.0/24".parse().unwrap()
            ]
        );
        let routes = r#"[{"dst":"default","gateway":"192.0.2.1"},{"dst":"192.0.2.0/24"},{"dst":"10.1.2.3"}]"#;
        assert_eq!(
            parse_routes(routes).unwrap(),
            [
                "192.0.2.0/24".parse::<Ipv4Net>().unwrap(),
                "10.1.2.3/32".parse().unwrap()
            ]
        );
        assert!(parse_addrs("nope").is_err());
    }

    #[test]
    fn failed_commands_carry_stderr() {
        let err = run(Command::new("sh").args(["-c", "echo boom >&2; exit 3"])).unwrap_err();
        match err {
            Error::CommandFailed {
                command, stderr, ..
            } => {
                assert_eq!(command, "sh -c echo boom >&2; exit 3");
                assert_eq!(stderr, "boom");
            }
            other => panic!("unexpected {other:?}"),
        }
    }
}
