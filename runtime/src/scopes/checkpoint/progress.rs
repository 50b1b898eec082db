//! The `steps` loop's progress bar (indicatif), as tqdm draws one: the
//! step of `n` (a resumed run starts where it was), steps per second, the
//! time left, and the last value of each metric logged. Drawn only when
//! stderr is a terminal, and hidden while [`suspend_progress`] runs the
//! program's own output.

use std::cell::RefCell;
use std::fmt::Write as _;
use std::io::IsTerminal;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use super::log::Metrics;

thread_local! {
    /// The bar of this thread's innermost running `steps` loop.
    static BAR: RefCell<Vec<(u64, ProgressBar)>> = const { RefCell::new(Vec::new()) };
    static NEXT: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// Runs `f` with this thread's step-loop progress bar cleared from the
/// terminal, then draws it again: for the program's own output (a
/// `println!`, an evaluation's report) while a [`steps`](crate::steps)
/// loop shows its progress. Without a bar (no loop, or stderr is no
/// terminal) it just runs `f`.
///
/// ```no_run
/// for step in tch_scope::steps(100) {
///     if step % 10 == 0 {
///         tch_scope::suspend_progress(|| println!("step {step}"));
///     }
/// }
/// ```
pub fn suspend_progress<R>(f: impl FnOnce() -> R) -> R {
    match BAR.with_borrow(|bars| bars.last().map(|(_, bar)| bar.clone())) {
        Some(bar) => bar.suspend(f),
        None => f(),
    }
}

/// One loop's bar, or nothing when stderr is no terminal.
pub(super) struct Progress(Option<(u64, ProgressBar)>);

impl Progress {
    /// A bar at `start` of `end` steps, on a terminal.
    pub(super) fn new(start: i64, end: i64) -> Self {
        Self::drawn_if(std::io::stderr().is_terminal(), start, end)
    }

    pub(super) fn drawn_if(terminal: bool, start: i64, end: i64) -> Self {
        if !terminal {
            return Self(None);
        }
        let len = u64::try_from(end).unwrap_or(0);
        let bar = ProgressBar::with_draw_target(Some(len), ProgressDrawTarget::stderr())
            .with_position(u64::try_from(start.clamp(0, end.max(0))).unwrap_or(0));
        // Steps per second and the time left from the resumed position on,
        // not from 0.
        bar.reset_eta();
        if let Ok(style) = ProgressStyle::with_template(
            "{bar:30} {pos}/{len} [{elapsed_precise}<{eta_precise}, {per_sec}] {msg}",
        ) {
            bar.set_style(style);
        }
        let id = NEXT.replace(NEXT.get() + 1);
        BAR.with_borrow_mut(|bars| bars.push((id, bar.clone())));
        Self(Some((id, bar)))
    }

    /// Whether the bar is drawn.
    pub(super) fn drawn(&self) -> bool {
        self.0.is_some()
    }

    /// Now at `step`, with the metrics logged so far.
    pub(super) fn update(&self, step: i64, metrics: Option<&Metrics>) {
        let Some((_, bar)) = &self.0 else { return };
        bar.set_position(u64::try_from(step).unwrap_or(0));
        if let Some(m) = metrics {
            bar.set_message(message(m));
        }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        let Some((id, bar)) = self.0.take() else {
            return;
        };
        bar.abandon();
        // `try_with`: a loop dropped while the thread's locals are torn down.
        let _ = BAR.try_with(|bars| {
            let mut bars = bars.borrow_mut();
            if let Some(i) = bars.iter().rposition(|(i, _)| *i == id) {
                bars.remove(i);
            }
        });
    }
}

/// The last value of each metric: `loss 0.2310  acc 0.9100`.
pub(super) fn message(metrics: &Metrics) -> String {
    let mut out = String::new();
    for (name, values) in &metrics.0 {
        let Some(&v) = values.last() else { continue };
        if !out.is_empty() {
            out.push_str("  ");
        }
        let small = v != 0.0 && (v.abs() < 1e-3 || v.abs() >= 1e5);
        let _ = if small || !v.is_finite() {
            write!(out, "{name} {v:.3e}")
        } else {
            write!(out, "{name} {v:.4}")
        };
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_message_shows_the_last_value_of_each_metric() {
        let mut m = Metrics::default();
        m.0.insert("loss".into(), vec![0.9, 0.231]);
        m.0.insert("acc".into(), vec![0.91]);
        m.0.insert("lr".into(), vec![3e-5]);
        m.0.insert("tokens".into(), vec![1.5e6]);
        m.0.insert("empty".into(), vec![]);
        assert_eq!(
            message(&m),
            "acc 0.9100  loss 0.2310  lr 3.000e-5  tokens 1.500e6"
        );
        assert_eq!(message(&Metrics::default()), "");
    }

    #[test]
    fn no_bar_is_drawn_off_a_terminal() {
        let p = Progress::drawn_if(false, 3, 10);
        assert!(!p.drawn());
        p.update(4, None);
        assert_eq!(suspend_progress(|| 7), 7);
        // Under `cargo test` stderr is captured or a pipe in CI.
        if !std::io::stderr().is_terminal() {
            assert!(!Progress::new(0, 10).drawn());
        }
    }

    #[test]
    fn a_bar_starts_at_the_resumed_step() {
        let p = Progress::drawn_if(true, 30, 60);
        let bar = &p.0.as_ref().unwrap().1;
        assert_eq!((bar.position(), bar.length()), (30, Some(60)));
        p.update(31, None);
        assert_eq!(bar.position(), 31);
        assert_eq!(suspend_progress(|| 5), 5);
        drop(p);
        assert!(BAR.with_borrow(Vec::is_empty));
    }
}
