//! What long commands show while they work. On a terminal (stderr one, not `--quiet`, `TERM`
//! not `dumb`), a live line under the run's lines: the step (`upgrade default/c1 1.36.4 ->
//! 1.37.1`), clusters done of those in the run, the elapsed time, and where the run is (the
//! cluster, the replica and what it did last). Off a terminal, the plain lines only, exactly
//! those every run has printed; with `--quiet`, nothing.
//!
//! ```text
//! [demo-private-2] demo/demo-control-plane-1: replaced pod demo-control-plane-1
//! ⠙ upgrade default/demo 1.36.4 -> 1.37.1  1/2 clusters  [00:00:07]  demo/demo-control-plane-2: kube-apiserver ready
//! ```

use std::io::IsTerminal as _;
use std::sync::Mutex;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use oi_engine::{Ended, Event};

/// How a command shows its progress.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// A live line on a terminal, the run's lines above it.
    Live,
    /// The run's lines, one by one.
    Lines,
    /// Nothing.
    Quiet,
}

impl Mode {
    /// Live on a terminal that can draw, lines elsewhere, nothing when quiet.
    pub fn detect(quiet: bool) -> Mode {
        let dumb = std::env::var("TERM").is_ok_and(|t| t == "dumb");
        if quiet {
            Mode::Quiet
        } else if std::io::stderr().is_terminal() && !dumb {
            Mode::Live
        } else {
            Mode::Lines
        }
    }
}

/// A command's progress: its mode and the step it is at.
#[derive(Debug)]
pub struct Progress {
    mode: Mode,
    step: Mutex<String>,
}

impl Progress {
    pub fn new(mode: Mode) -> Progress {
        Progress {
            mode,
            step: Mutex::new("reconcile".to_string()),
        }
    }

    /// Names the step the next runs belong to (`drain h1: run 2`).
    pub fn set_step(&self, step: impl Into<String>) {
        if let Ok(mut s) = self.step.lock() {
            *s = step.into();
        }
    }

    fn step(&self) -> String {
        self.step.lock().map(|s| s.clone()).unwrap_or_default()
    }

    /// The display of one run over `clusters` clusters; cleared when dropped.
    pub fn run(&self, clusters: usize) -> Run {
        let bar = (self.mode == Mode::Live).then(|| {
            let bar = ProgressBar::with_draw_target(
                Some(u64::try_from(clusters).unwrap_or(u64::MAX)),
                ProgressDrawTarget::stderr(),
            );
            bar.set_style(style(
                "{spinner} {prefix}  {pos}/{len} clusters  [{elapsed_precise}]  {wide_msg}",
            ));
            bar.set_prefix(self.step());
            bar.enable_steady_tick(Duration::from_millis(100));
            bar
        });
        Run {
            bar,
            mode: self.mode,
        }
    }

    /// The display of a transfer of bytes (a snapshot); cleared when dropped.
    pub fn transfer(&self, what: &str) -> Transfer {
        let bar = (self.mode == Mode::Live).then(|| {
            let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr());
            bar.set_style(style("{spinner} {prefix}  {bytes} ({binary_bytes_per_sec})  [{elapsed_precise}]  {wide_msg}"));
            bar.set_prefix(what.to_string());
            bar.enable_steady_tick(Duration::from_millis(100));
            bar
        });
        Transfer { bar }
    }
}

fn style(template: &str) -> ProgressStyle {
    ProgressStyle::with_template(template).unwrap_or_else(|_| ProgressStyle::default_spinner())
}

/// One run's display.
#[derive(Debug)]
pub struct Run {
    bar: Option<ProgressBar>,
    mode: Mode,
}

impl Run {
    /// What the engine said: a line (above the live one), where the run is, a cluster done.
    pub fn event(&self, e: &Event) {
        match (&self.bar, self.mode) {
            (Some(bar), _) => {
                if e.shown_as_line() {
                    bar.println(e.to_string());
                }
                if e.ended.is_some() {
                    bar.inc(1);
                }
                bar.set_message(whereabouts(e));
            }
            (None, Mode::Quiet) => {}
            (None, _) => {
                if e.shown_as_line() {
                    eprintln!("{e}");
                }
            }
        }
    }
}

/// Where an event happened and what it said, for the live line.
fn whereabouts(e: &Event) -> String {
    let mut at = e.cluster.name.clone();
    if let Some(c) = &e.component {
        at.push('/');
        at.push_str(c);
    }
    match e.ended {
        Some(Ended::Failed) => format!("{at}: not ready"),
        _ => format!("{at}: {}", e.message),
    }
}

impl Drop for Run {
    fn drop(&mut self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}

/// A transfer's display.
#[derive(Debug)]
pub struct Transfer {
    bar: Option<ProgressBar>,
}

impl Transfer {
    /// `bytes` more went through.
    pub fn add(&self, bytes: u64) {
        if let Some(bar) = &self.bar {
            bar.inc(bytes);
        }
    }

    /// Says what the transfer is doing now.
    pub fn say(&self, what: &str) {
        if let Some(bar) = &self.bar {
            bar.set_message(what.to_string());
        }
    }
}

impl Drop for Transfer {
    fn drop(&mut self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use oi_api::ObjectKey;

    fn event(message: &str, ended: Option<Ended>) -> Event {
        Event {
            hypervisor: Some("h1".into()),
            cluster: ObjectKey::new("default", "c1"),
            component: Some("c1-control-plane-0".into()),
            message: message.into(),
            ended,
        }
    }

    #[test]
    fn quiet_wins_and_off_a_terminal_there_are_lines() {
        assert_eq!(Mode::detect(true), Mode::Quiet);
        // The test's stderr is captured, never a terminal.
        assert_eq!(Mode::detect(false), Mode::Lines);
    }

    #[test]
    fn the_live_line_says_where_the_run_is() {
        assert_eq!(
            whereabouts(&event("replaced pod c1-control-plane-0", None)),
            "c1/c1-control-plane-0: replaced pod c1-control-plane-0"
        );
        assert_eq!(
            whereabouts(&event(
                "not ready: etcd did not answer",
                Some(Ended::Failed)
            )),
            "c1/c1-control-plane-0: not ready"
        );
    }
}
