//! A cluster's ingress through haproxy's runtime API ([`oi_planner::haproxy::RuntimeApi`]):
//! a replica's API server taken out while it restarts and put back once ready, and a reload
//! that is over only once the new worker answers. No configuration is written and nothing
//! is reloaded to take a server out, and nothing waits a fixed time: haproxy says when the
//! server holds no connection any more.
//!
//! ```text
//! take_out:  set server apiservers/R state drain ──► show stat until R's scur is 0
//!            (at most DRAIN_WAIT: what is left, watches, ends with the restart)
//! put_back:  set server apiservers/R health up (its /readyz answered) ──► state ready
//! reload:    show info (Pid) ──► kill -USR2 1 ──► show info until another Pid answers
//! ```

use std::time::{Duration, Instant};

use oi_api::ObjectKey;
use oi_cri::HypervisorRuntime;
use oi_planner::ComponentPlan;
use oi_planner::haproxy::{RuntimeApi, ServerStat, parse_pid, parse_stat};

use crate::Executor;
use crate::error::{Step, StepError};
use crate::https::Network;

/// How long a server taken out may keep connections before its API server restarts anyway:
/// requests in flight finish well within it; what stays longer (watches) is cut by the
/// restart, and its clients connect again through another server.
const DRAIN_WAIT: Duration = Duration::from_secs(2);
/// How long a reloaded haproxy has to answer from its new worker.
const RELOAD_WAIT: Duration = Duration::from_secs(10);
/// How often haproxy is asked again while waiting.
const ASK_AGAIN: Duration = Duration::from_millis(25);

impl<R: HypervisorRuntime, N: Network> Executor<'_, R, N> {
    /// The id of ingress `c`'s running haproxy container, if it runs.
    async fn haproxy(
        &self,
        key: &ObjectKey,
        c: &ComponentPlan,
        api: &RuntimeApi,
    ) -> Step<Option<String>> {
        Ok(self
            .container_of(key, c, &api.pod, &api.container)
            .await?
            .filter(|k| k.state == oi_cri::ContainerState::Running)
            .map(|k| k.id))
    }

    /// haproxy's answer to `commands`.
    async fn ask(
        &self,
        c: &ComponentPlan,
        api: &RuntimeApi,
        id: &str,
        commands: &str,
    ) -> Step<String> {
        let rt = self.runtime(&c.hypervisor)?;
        rt.exec_output("haproxy runtime API", id, &api.command(commands))
            .await
            .map_err(|e| self.runtime_api_error(c, format!("{commands}: {e}")))
    }

    fn runtime_api_error(&self, c: &ComponentPlan, reason: String) -> StepError {
        StepError::IngressRuntimeApi {
            component: c.name().to_string(),
            hypervisor: c.hypervisor.clone(),
            reason,
        }
    }

    /// Takes API server `server` out of ingress `c`: no new connection goes to it, and once
    /// it holds none (or [`DRAIN_WAIT`] passed) this returns `true`. `false` when the
    /// ingress's haproxy does not run or does not have that server (nothing goes to it).
    pub(crate) async fn take_out(
        &self,
        key: &ObjectKey,
        c: &ComponentPlan,
        server: &str,
    ) -> Step<bool> {
        let Some(api) = &c.rendered.runtime_api else {
            return Ok(false);
        };
        let Some(id) = self.haproxy(key, c, api).await? else {
            return Ok(false);
        };
        let name = format!("{}/{server}", api.backend);
        let mut answer = self
            .ask(
                c,
                api,
                &id,
                &format!("set server {name} state drain; show stat"),
            )
            .await?;
        let since = Instant::now();
        loop {
            let stats = match parse_stat(&answer) {
                Ok(stats) => stats,
                Err(refused) if refused.starts_with("No such server") => return Ok(false),
                Err(reason) => return Err(self.runtime_api_error(c, reason)),
            };
            let Some(stat) = find(&stats, &api.backend, server) else {
                return Ok(false);
            };
            if stat.sessions == 0 {
                return Ok(true);
            }
            if since.elapsed() >= DRAIN_WAIT {
                self.emit(
                    Some(&c.hypervisor),
                    key,
                    Some(c.name()),
                    format!(
                        "{server} still holds {} connections after {DRAIN_WAIT:?}; they end with its restart",
                        stat.sessions
                    ),
                );
                return Ok(true);
            }
            tokio::time::sleep(ASK_AGAIN).await;
            answer = self.ask(c, api, &id, "show stat").await?;
        }
    }

    /// Puts API server `server` back into ingress `c`. `ready`: its `/readyz` answered, so
    /// haproxy is told it is up rather than waiting for its own checks to rise again.
    pub(crate) async fn put_back(
        &self,
        key: &ObjectKey,
        c: &ComponentPlan,
        server: &str,
        ready: bool,
    ) -> Step {
        let Some(api) = &c.rendered.runtime_api else {
            return Ok(());
        };
        let Some(id) = self.haproxy(key, c, api).await? else {
            // A haproxy that started again forgot the drain.
            return Ok(());
        };
        let name = format!("{}/{server}", api.backend);
        let health = if ready {
            format!("set server {name} health up; ")
        } else {
            String::new()
        };
        let answer = self
            .ask(
                c,
                api,
                &id,
                &format!("{health}set server {name} state ready; show stat"),
            )
            .await?;
        match parse_stat(&answer) {
            Ok(stats) => match find(&stats, &api.backend, server) {
                Some(s) if s.held_out() => Err(self.runtime_api_error(
                    c,
                    format!("{server} is still {} after `state ready`", s.status),
                )),
                _ => Ok(()),
            },
            // Gone from the running configuration: nothing to put back.
            Err(refused) if refused.starts_with("No such server") => Ok(()),
            Err(reason) => Err(self.runtime_api_error(c, reason)),
        }
    }

    /// Puts back into ingress `c` those of `servers` its haproxy holds out (drained or in
    /// maintenance): what a run stopped between [`Self::take_out`] and [`Self::put_back`]
    /// leaves, which no later run would otherwise undo (the pod it restarted already runs as
    /// planned). haproxy's own checks then decide whether each takes connections.
    pub(crate) async fn put_back_left_out(
        &self,
        key: &ObjectKey,
        c: &ComponentPlan,
        servers: &[&str],
    ) -> Step {
        let Some(api) = &c.rendered.runtime_api else {
            return Ok(());
        };
        let Some(id) = self.haproxy(key, c, api).await? else {
            return Ok(());
        };
        let stats = parse_stat(&self.ask(c, api, &id, "show stat").await?)
            .map_err(|reason| self.runtime_api_error(c, reason))?;
        for server in servers {
            if find(&stats, &api.backend, server).is_some_and(ServerStat::held_out) {
                self.put_back(key, c, server, false).await?;
                self.emit(
                    Some(&c.hypervisor),
                    key,
                    Some(c.name()),
                    format!("{server} put back into the ingress (an earlier run left it out)"),
                );
            }
        }
        Ok(())
    }

    /// Tells ingress `c`'s haproxy that `servers` are up: their `/readyz` answered, so it
    /// need not wait for its own checks to rise again after they failed while the servers
    /// started (checks go on, and take a server out again if it fails). Best effort: the
    /// ingress is observed again after.
    pub(crate) async fn vouch_for(&self, key: &ObjectKey, c: &ComponentPlan, servers: &[&str]) {
        let Some(api) = &c.rendered.runtime_api else {
            return;
        };
        let Ok(Some(id)) = self.haproxy(key, c, api).await else {
            return;
        };
        let commands: Vec<String> = servers
            .iter()
            .map(|s| format!("set server {}/{s} health up", api.backend))
            .collect();
        if self.ask(c, api, &id, &commands.join("; ")).await.is_ok() {
            self.emit(
                Some(&c.hypervisor),
                key,
                Some(c.name()),
                format!("told haproxy {} answer", servers.join(", ")),
            );
        }
    }

    /// Tells ingress `c`'s haproxy (container `id`) to reload, and waits until its new
    /// worker answers the runtime API: until then the old one may still take connections
    /// with the old configuration, and what it is told is lost with it.
    pub(crate) async fn reload_haproxy(
        &self,
        c: &ComponentPlan,
        api: &RuntimeApi,
        id: &str,
        command: &[String],
    ) -> Step {
        // A haproxy started before it had a runtime API answers nothing: any answer after the
        // reload is then the new worker's.
        let before = self
            .ask(c, api, id, "show info")
            .await
            .ok()
            .and_then(|a| parse_pid(&a));
        self.runtime(&c.hypervisor)?
            .exec("reload", id, command)
            .await?;
        let since = Instant::now();
        loop {
            let answer = self.ask(c, api, id, "show info").await;
            let now = answer.as_ref().ok().and_then(|a| parse_pid(a));
            if now.is_some() && now != before {
                return Ok(());
            }
            if since.elapsed() >= RELOAD_WAIT {
                let last = match answer {
                    Ok(_) => format!("the worker that answers is still {before:?}"),
                    Err(e) => e.to_string(),
                };
                return Err(self.runtime_api_error(
                    c,
                    format!("no new worker answered {RELOAD_WAIT:?} after a reload: {last}"),
                ));
            }
            tokio::time::sleep(ASK_AGAIN).await;
        }
    }
}

fn find<'a>(stats: &'a [ServerStat], backend: &str, server: &str) -> Option<&'a ServerStat> {
    stats
        .iter()
        .find(|s| s.backend == backend && s.server == server)
}
