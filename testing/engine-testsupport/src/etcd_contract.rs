//! The contract an [`Etcd`] keeps, as the engine relies on it. [`run`] is passed by the
//! engine's gRPC client against a real etcd (`crates/engine/tests/etcd.rs`) and by the
//! simulation ([`crate::sim`], `crates/engine/tests/engine/`), so the simulation answers as etcd does:
//! the same members, the same refusals in etcd's words, health, status and snapshots.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::Duration;

use oi_engine::etcd::{Code, Etcd, EtcdError, refusals};
use oi_engine::https::Tls;

/// What the contract runs against: a running etcd cluster of one started voting member
/// answering at `url` to `tls`; two peer URLs where no member runs (`spare`); a URL where
/// nothing answers (`unreachable`).
pub struct Subject<'a, E> {
    pub etcd: &'a E,
    pub url: &'a str,
    pub tls: &'a Tls,
    pub spare: [String; 2],
    pub unreachable: &'a str,
    /// Checks a snapshot (the planner's `check_etcd_snapshot`).
    pub check_snapshot: fn(&[u8]) -> Result<(), String>,
}

/// Runs the contract; panics naming the first broken clause.
pub async fn run<E: Etcd>(s: Subject<'_, E>) {
    let (etcd, url, tls) = (s.etcd, s.url, s.tls);
    // A member that just (re)started may say it is not healthy yet.
    let mut healthy = Ok(false);
    for _ in 0..100 {
        healthy = etcd.healthy(url, tls).await;
        if matches!(healthy, Ok(true)) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(matches!(healthy, Ok(true)), "not healthy: {healthy:?}");

    // One started voting member, answering where it was asked.
    let members = etcd.members(url, tls).await.unwrap();
    assert_eq!(members.len(), 1, "{members:?}");
    let me = members[0].clone();
    assert!(me.started() && !me.is_learner, "{me:?}");
    assert_eq!(me.client_urls, [url.to_string()]);

    // It says who it is and that it leads.
    let status = etcd.status(url, tls).await.unwrap();
    assert_eq!(status.member_id, me.id, "{status:?}");
    assert_eq!(status.leader, me.id, "{status:?}");
    assert_ne!(status.cluster_id, 0, "{status:?}");
    assert!(status.revision >= 1, "{status:?}");
    assert!(status.version.starts_with("3."), "{status:?}");

    // A learner that never starts: added, not promotable (retryable, in etcd's words), one
    // learner at a time, then removed.
    let [spare, another] = s.spare;
    etcd.add_learner(url, tls, &spare).await.unwrap();
    let members = etcd.members(url, tls).await.unwrap();
    let learner = members
        .iter()
        .find(|m| m.peer_urls == [spare.clone()])
        .unwrap_or_else(|| panic!("the learner is not listed: {members:?}"))
        .clone();
    assert!(learner.is_learner && !learner.started(), "{learner:?}");
    let early = etcd.promote(url, tls, learner.id).await.unwrap_err();
    assert!(early.not_in_sync() && early.retryable(), "{early}");
    assert!(
        matches!(&early, EtcdError::Refused { code: Code::FailedPrecondition, message, .. }
            if message == refusals::LEARNER_NOT_READY),
        "{early:?}"
    );
    let second = etcd.add_learner(url, tls, &another).await.unwrap_err();
    assert!(
        matches!(&second, EtcdError::Refused { message, .. } if message == refusals::TOO_MANY_LEARNERS),
        "{second:?}"
    );
    assert!(second.retryable() && !second.not_in_sync());
    etcd.remove(url, tls, learner.id).await.unwrap();
    let members = etcd.members(url, tls).await.unwrap();
    assert_eq!(members, std::slice::from_ref(&me));
    // Removing a member that is not there is a refusal that waiting does not cure.
    let unknown = etcd.remove(url, tls, learner.id).await.unwrap_err();
    assert!(
        matches!(
            &unknown,
            EtcdError::Refused {
                code: Code::NotFound,
                ..
            }
        ),
        "{unknown:?}"
    );
    assert!(!unknown.retryable(), "{unknown}");

    // A snapshot streams into the sink, a sound database with etcd's checksum at its end.
    let (sink, mut received) = tokio::sync::mpsc::channel(4);
    let (size, bytes) = tokio::join!(
        async {
            let size = etcd.snapshot(url, tls, &sink).await;
            drop(sink);
            size
        },
        async {
            let mut bytes = Vec::new();
            while let Some(piece) = received.recv().await {
                bytes.extend_from_slice(&piece);
            }
            bytes
        }
    );
    assert_eq!(size.unwrap(), bytes.len() as u64);
    (s.check_snapshot)(&bytes).unwrap();
    // A sink that stopped taking the bytes ends the transfer, saying so.
    let (sink, received) = tokio::sync::mpsc::channel(4);
    drop(received);
    let refused = etcd.snapshot(url, tls, &sink).await.unwrap_err();
    assert!(
        refused
            .to_string()
            .contains("destination stopped taking them"),
        "{refused}"
    );

    // Leadership handed to the leader itself is accepted.
    etcd.transfer_leadership(url, tls, me.id).await.unwrap();

    // Nothing answering: unreachable, named, worth asking again; health too.
    let gone = etcd.members(s.unreachable, tls).await.unwrap_err();
    assert!(
        matches!(&gone, EtcdError::Unreachable { endpoint, .. } if endpoint == s.unreachable),
        "{gone:?}"
    );
    assert!(gone.retryable());
    assert!(etcd.healthy(s.unreachable, tls).await.is_err());
}
