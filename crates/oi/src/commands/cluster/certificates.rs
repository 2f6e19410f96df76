//! `oi cluster certificates [--cluster N]`: every certificate of a cluster with its expiry,
//! soonest first (`oi_planner::expiry`).
//!
//! ```text
//! OBJECT                             CERTIFICATE                          SUBJECT  NOT AFTER  EXPIRES IN  RENEWAL
//! Component default/demo-ingress     status.serverCertificates.vpn-proxy  ...      ...        364d        automatic
//! Cluster default/demo               spec.apiServer.ca                    ...      ...        3649d       rotate-ca
//! ```

use std::io::{Read, Write};

use oi_planner::expiry::{Expiry, certificates};
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

use crate::args::ClusterSelectArgs;
use crate::commands::Context;
use crate::manifests;

/// How long until `not_after`, for a person: `364d`, `5h`, `expired 2d ago`.
pub fn left(now: OffsetDateTime, not_after: OffsetDateTime) -> String {
    let d = not_after - now;
    let words = |d: time::Duration| {
        if d.whole_days() >= 1 {
            format!("{}d", d.whole_days())
        } else if d.whole_hours() >= 1 {
            format!("{}h", d.whole_hours())
        } else {
            format!("{}m", d.whole_minutes().max(0))
        }
    };
    if d.is_negative() {
        format!("expired {} ago", words(-d))
    } else {
        words(d)
    }
}

/// The table.
pub fn table(rows: &[Expiry], now: OffsetDateTime) -> String {
    let mut cells = vec![[
        "OBJECT".to_string(),
        "CERTIFICATE".to_string(),
        "SUBJECT".to_string(),
        "NOT AFTER".to_string(),
        "EXPIRES IN".to_string(),
        "RENEWAL".to_string(),
    ]];
    for e in rows {
        cells.push([
            e.object.clone(),
            e.field.clone(),
            e.subject.clone(),
            e.not_after
                .format(&Rfc3339)
                .unwrap_or_else(|_| e.not_after.to_string()),
            left(now, e.not_after),
            e.renewal.as_str().to_string(),
        ]);
    }
    let rows: Vec<Vec<String>> = cells.into_iter().map(Vec::from).collect();
    crate::commands::get::columns(&rows)
}

/// # Errors
/// When the manifests do not load or the cluster is not found.
pub fn run(
    args: &ClusterSelectArgs,
    ctx: &Context,
    input: impl Read,
    output: &mut impl Write,
) -> anyhow::Result<()> {
    let world = manifests::load(&args.input, input, ctx.now)?;
    let (key, _) = manifests::select_cluster(&world, args.cluster.as_deref())?;
    let rows = certificates(&world, key);
    if rows.is_empty() {
        anyhow::bail!(
            "cluster {key} has no certificates yet (was it injected with `oi cluster inject`?)"
        );
    }
    output.write_all(table(&rows, ctx.now).as_bytes())?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use time::macros::datetime;

    use super::*;

    #[test]
    fn time_left_reads_as_a_person_says_it() {
        let now = datetime!(2026-11-22 03:00:00 UTC);
        assert_eq!(left(now, now + time::Duration::days(364)), "364d");
        assert_eq!(left(now, now + time::Duration::hours(5)), "5h");
        assert_eq!(left(now, now + time::Duration::minutes(5)), "5m");
        assert_eq!(left(now, now - time::Duration::days(2)), "expired 2d ago");
    }
}
