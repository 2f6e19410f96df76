//! `oi sipcluster delete --name N [--namespace NS]`: marks a SIPCluster for deletion
//! (`metadata.deletionTimestamp`). Pure: the next `oi reconcile` takes our labels off its
//! hosts and removes it.
//!
//! `oi sipcluster inventory --name N [--namespace NS] [--node-interface ID]`: the jump host's
//! inventory of its hosts (`oi_api::JumpHostInventory`, JSON), what `oi-host` reads. The
//! hosts are those the selection holds, as `oi reconcile` selects them (on a reconciled
//! world: the ones labelled for it).

use std::io::{Read, Write};

use anyhow::Context as _;
use oi_api::ObjectKey;

use crate::args::{ClusterDeleteArgs, SipInventoryArgs};
use crate::commands::Context;
use crate::commands::cluster::delete::mark_deleted;
use crate::manifests;

/// # Errors
/// When the manifests do not load or the SIPCluster does not exist.
pub fn delete(
    args: &ClusterDeleteArgs,
    ctx: &Context,
    input: impl Read,
    output: &mut impl Write,
) -> anyhow::Result<()> {
    let mut world = manifests::load_unverified(&args.input, input)?;
    mark_deleted(&mut world.sip_clusters, args, "sipcluster", ctx.now)?;
    manifests::finish(&world, output)
}

/// Returns the note for stderr (how many hosts).
///
/// # Errors
/// When the manifests do not load, the SIPCluster does not exist or cannot get its hosts, or
/// no network is named for the addresses.
pub fn inventory(
    args: &SipInventoryArgs,
    ctx: &Context,
    input: impl Read,
    output: &mut impl Write,
) -> anyhow::Result<String> {
    let mut world = manifests::load_unverified(&args.input, input)?;
    let key = ObjectKey::new(args.namespace.clone(), args.name.clone());
    let sip = world
        .sip_clusters
        .get(&key)
        .with_context(|| format!("no sipcluster {key} in the manifests"))?;
    let interface = match &args.node_interface {
        Some(i) => i.clone(),
        None => sip
            .spec
            .services
            .jump_host
            .first()
            .map(|j| j.node_interface_id.clone())
            .with_context(|| {
                format!("sipcluster {key} has no jump host: name the network with --node-interface")
            })?,
    };
    // The selection as `oi reconcile` makes it, on a copy: the manifests are not changed.
    let report = oi_planner::sip::select_hosts(&mut world, ctx.now)
        .into_iter()
        .find(|r| r.key == key)
        .with_context(|| format!("sipcluster {key} was not processed"))?;
    anyhow::ensure!(
        report.selection.shortfalls.is_empty(),
        "sipcluster {key} cannot get its hosts: {}",
        report.message
    );
    let inventory = oi_planner::sip::jump_host_inventory(&report, &interface);
    let mut json = serde_json::to_string_pretty(&inventory)?;
    json.push('\n');
    output.write_all(json.as_bytes())?;
    let without_ip: Vec<&str> = inventory
        .hosts
        .iter()
        .filter(|h| h.ip.is_none())
        .map(|h| h.name.as_str())
        .collect();
    let mut note = format!(
        "sipcluster {key}: {} host(s), addresses on network {interface}",
        inventory.hosts.len()
    );
    if !without_ip.is_empty() {
        note.push_str(&format!(
            "\nwarning: no address on network {interface} for: {}",
            without_ip.join(", ")
        ));
    }
    Ok(note)
}

/// `oi sipcluster hash-password`: a password hashed for a users list. From a terminal it is
/// asked for twice, not echoed; otherwise it is the first line of `input`.
///
/// # Errors
/// When there is no password, the two typed differ, or the iterations are too few.
pub fn hash_password(
    args: &crate::args::HashPasswordArgs,
    mut input: impl Read,
    output: &mut impl Write,
) -> anyhow::Result<()> {
    use std::io::IsTerminal as _;
    let password = if std::io::stdin().is_terminal() {
        let first = prompt_hidden("Password: ")?;
        let again = prompt_hidden("Again: ")?;
        anyhow::ensure!(first == again, "the two passwords typed differ");
        first
    } else {
        let mut text = String::new();
        input
            .read_to_string(&mut text)
            .context("cannot read the password from stdin")?;
        text.lines().next().unwrap_or_default().to_string()
    };
    if password.is_empty() {
        anyhow::bail!(
            "no password on stdin: type it at the prompt, or pipe it in, e.g. `printf '%s\\n' \"$PASSWORD\" | oi sipcluster hash-password`"
        );
    }
    let hash = oi_oidc::password::hash(&password, args.iterations).map_err(anyhow::Error::msg)?;
    writeln!(output, "{hash}")?;
    Ok(())
}

/// A line read from the terminal on stdin with echo off (restored after, whatever happens);
/// `prompt` is shown on stderr once echo is off (what was typed before is discarded).
fn prompt_hidden(prompt: &str) -> anyhow::Result<String> {
    use rustix::termios::{LocalModes, OptionalActions, tcgetattr, tcsetattr};
    let stdin = std::io::stdin();
    let before = tcgetattr(&stdin).context("cannot read the terminal's settings")?;
    let mut quiet = before.clone();
    quiet.local_modes.remove(LocalModes::ECHO);
    quiet.local_modes.insert(LocalModes::ECHONL);
    tcsetattr(&stdin, OptionalActions::Flush, &quiet).context("cannot turn echo off")?;
    eprint!("{prompt}");
    let mut line = String::new();
    let read = stdin.read_line(&mut line);
    let restored = tcsetattr(&stdin, OptionalActions::Now, &before);
    read.context("cannot read the password")?;
    restored.context("cannot restore the terminal's settings")?;
    Ok(line.trim_end_matches(['\n', '\r']).to_string())
}
