//! Chrome trace-event JSON (the "JSON Object Format" of the Trace Event
//! Format document), written by hand: a handful of fixed-shape records.

use std::fmt::Write as _;
use std::io::Write as _;
use std::path::Path;
use std::sync::Arc;

use super::buffer::{Buffer, Kind, SpanRecord};
use crate::clock;

/// Writes every buffer's spans to `path`: per thread, ordered by start
/// (and the longer first on a tie, so a parent precedes its child), with
/// the dropped spans of these buffers and `dropped_elsewhere` (buffers no
/// longer held) in `otherData.dropped_spans`.
pub(super) fn write(
    path: &Path,
    buffers: &[Arc<Buffer>],
    epoch: u64,
    dropped_elsewhere: u64,
) -> std::io::Result<()> {
    let pid = std::process::id();
    // Streamed: records are formatted into `out` and handed to the file
    // whenever it holds 64 KiB, so a large trace never sits in memory whole.
    let mut file = std::io::BufWriter::new(std::fs::File::create(path)?);
    let mut out = String::with_capacity(FLUSH_AT + 4096);
    out.push_str("{\"traceEvents\":[\n");
    let process = std::env::current_exe()
        .ok()
        .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
        .unwrap_or_else(|| "process".into());
    let _ = write!(
        out,
        r#"{{"name":"process_name","ph":"M","pid":{pid},"tid":0,"args":{{"name":"#
    );
    string(&mut out, &process);
    out.push_str("}}");
    let mut dropped = dropped_elsewhere;
    for b in buffers {
        dropped += b.dropped();
        let _ = write!(
            out,
            ",\n{{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":{pid},\"tid\":{},\"args\":{{\"name\":",
            b.tid
        );
        string(&mut out, &b.thread_name);
        out.push_str("}}");
        let mut spans = b.spans();
        spans.sort_by_key(|s| (s.start, std::cmp::Reverse(s.end)));
        for s in spans {
            match s.kind {
                Kind::Mark => mark(&mut out, &s, epoch, pid, b.tid),
                Kind::Flow if s.start >= epoch => flow(&mut out, &s, epoch, pid, b.tid),
                Kind::Flow => {} // captured before this recording began
                _ => complete(&mut out, &s, epoch, pid, b.tid),
            }
            if out.len() >= FLUSH_AT {
                file.write_all(out.as_bytes())?;
                out.clear();
            }
        }
    }
    let _ = write!(
        out,
        "\n],\"displayTimeUnit\":\"ns\",\"otherData\":{{\"producer\":\"tch-scope\",\"dropped_spans\":{dropped}}}}}\n"
    );
    file.write_all(out.as_bytes())?;
    // Every write and the flush are checked: a full disk is an error here,
    // not a torn file renamed over a good one.
    file.into_inner()
        .map_err(std::io::IntoInnerError::into_error)?
        .sync_all()
}

/// How much formatted text is gathered before it is written.
const FLUSH_AT: usize = 1 << 16;

/// A span: a `"ph": "X"` complete event; a memory span's bytes in its
/// args, and two samples of its counter track (at entry and at exit).
fn complete(out: &mut String, s: &SpanRecord, epoch: u64, pid: u32, tid: u64) {
    let ts = clock::nanos(epoch, s.start);
    let dur = clock::nanos(s.start, s.end);
    out.push_str(",\n{\"name\":");
    string(out, s.name);
    let _ = write!(
        out,
        ",\"cat\":\"{}\",\"ph\":\"X\",\"ts\":{},\"dur\":{},\"pid\":{pid},\"tid\":{tid},\"args\":{{\"outcome\":\"{}\"",
        s.kind.category(),
        Micros(ts),
        Micros(dur),
        s.outcome.as_str()
    );
    if !s.kind.has_bytes() {
        out.push_str("}}");
        return;
    }
    let [entry, exit, peak, level] = s.bytes;
    let _ = write!(
        out,
        ",\"at_entry\":{entry},\"at_exit\":{exit},\"peak\":{peak},\"peak_growth\":{}}}}}",
        peak.saturating_sub(entry)
    );
    // The counter: resident or CUDA bytes of the process as measured; for
    // tensor_memory the thread's level (one track per thread: "id").
    let level = level.cast_signed();
    let at_exit = level.saturating_add(exit.cast_signed().wrapping_sub(entry.cast_signed()));
    let track = if s.kind == Kind::TensorMemory {
        format!(",\"id\":\"{tid}\"")
    } else {
        String::new()
    };
    for (at, bytes) in [(ts, level), (ts + dur, at_exit)] {
        let _ = write!(
            out,
            ",\n{{\"name\":\"{} bytes\",\"cat\":\"{}\",\"ph\":\"C\",\"ts\":{},\"pid\":{pid},\"tid\":{tid}{track},\"args\":{{\"bytes\":{bytes}}}}}",
            s.kind.category(),
            s.kind.category(),
            Micros(at),
        );
    }
}

/// A marker: a `"ph": "i"` instant event on the thread's track.
fn mark(out: &mut String, s: &SpanRecord, epoch: u64, pid: u32, tid: u64) {
    out.push_str(",\n{\"name\":");
    string(out, s.name);
    let _ = write!(
        out,
        ",\"cat\":\"mark\",\"ph\":\"i\",\"s\":\"t\",\"ts\":{},\"pid\":{pid},\"tid\":{tid}}}",
        Micros(clock::nanos(epoch, s.start))
    );
}

/// A context captured on one thread and entered on this one: a flow from
/// the span open at the capture (`"ph": "s"`) to the next span that
/// starts here (`"ph": "f"`).
fn flow(out: &mut String, s: &SpanRecord, epoch: u64, pid: u32, tid: u64) {
    let [from, id, ..] = s.bytes;
    for (ph, ts, tid) in [("s", s.start, from), ("f", s.end, tid)] {
        out.push_str(",\n{\"name\":");
        string(out, s.name);
        let _ = write!(
            out,
            ",\"cat\":\"context\",\"ph\":\"{ph}\",\"id\":{id},\"ts\":{},\"pid\":{pid},\"tid\":{tid}}}",
            Micros(clock::nanos(epoch, ts))
        );
    }
}

/// Nanoseconds shown as microseconds with three decimals.
struct Micros(u64);

impl std::fmt::Display for Micros {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{:03}", self.0 / 1000, self.0 % 1000)
    }
}

/// A JSON string literal.
fn string(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if u32::from(c) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strings_are_escaped() {
        let mut s = String::new();
        string(&mut s, "a\"b\\c\nd\u{1}é");
        assert_eq!(s, r#""a\"b\\c\nd\u0001é""#);
        assert_eq!(Micros(1_234_005).to_string(), "1234.005");
    }
}
