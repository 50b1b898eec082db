//! What the trace records beside spans: markers, and flows between the
//! threads a [`Context`](crate::Context) is captured and entered on.

use std::sync::atomic::{AtomicU64, Ordering};

use super::buffer::{Kind, SpanRecord};
use super::{intern, push, recording, this_tid};

/// Writes an instant event named `name` on this thread's track (a
/// `"ph": "i"` marker: an epoch, a step, a checkpoint), if a recording is
/// running; otherwise does nothing. Names are kept for the life of the
/// process (one copy each), up to [`name_limit`](crate::report::name_limit)
/// of them; later new names are written as `other`. Prefer a bounded set
/// of names, such as `"epoch"`, to `format!("epoch {i}")` per step.
///
/// ```
/// tch_scope::trace::start();
/// tch_scope::trace::mark("epoch");
/// tch_scope::trace::stop();
/// let path = std::env::temp_dir().join(format!("doc-mark-{}.json", std::process::id()));
/// tch_scope::trace::write_chrome(&path).unwrap();
/// let json = std::fs::read_to_string(&path).unwrap();
/// assert!(json.contains(r#""name":"epoch","cat":"mark","ph":"i""#));
/// # std::fs::remove_file(&path).unwrap();
/// ```
pub fn mark(name: &str) {
    if !recording() {
        return;
    }
    let now = crate::clock::now();
    push(&SpanRecord {
        kind: Kind::Mark,
        name: intern(name),
        start: now,
        end: now,
        outcome: crate::report::Outcome::Completed,
        bytes: [0; 4],
    });
}

/// Where and when a [`Context`](crate::Context) was captured while the
/// trace recorded: the start of a flow to the threads that enter it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct FlowStart {
    at: u64,
    tid: u64,
}

/// The start of a flow from this thread, now, if a recording is running.
pub(crate) fn flow_start() -> Option<FlowStart> {
    recording().then(|| FlowStart {
        at: crate::clock::now(),
        tid: this_tid(),
    })
}

/// Records a flow from `from` to this thread, now (a captured context
/// entered here).
pub(crate) fn flow_end(from: FlowStart) {
    static NEXT_ID: AtomicU64 = AtomicU64::new(1);
    static NAME: &str = "with(context)";
    if !recording() {
        return;
    }
    let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
    push(&SpanRecord {
        kind: Kind::Flow,
        name: &NAME,
        start: from.at,
        end: crate::clock::now(),
        outcome: crate::report::Outcome::Completed,
        bytes: [from.tid, id, 0, 0],
    });
}
