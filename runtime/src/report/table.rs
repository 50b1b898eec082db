//! `Display` for [`Report`]: aligned text tables with human units.

use std::fmt;
use std::time::Duration;

use super::Report;

/// `1.23 ms`, `456 ns`, …
pub(crate) fn duration(d: Duration) -> String {
    let ns = d.as_nanos() as f64;
    match ns {
        n if n < 1e3 => format!("{n:.0} ns"),
        n if n < 1e6 => format!("{:.2} µs", n / 1e3),
        n if n < 1e9 => format!("{:.2} ms", n / 1e6),
        n => format!("{:.3} s", n / 1e9),
    }
}

/// `256.0 MiB`, `-1.5 KiB`, …
pub(crate) fn bytes(b: f64) -> String {
    let a = b.abs();
    let (v, unit) = match a {
        a if a < 1024.0 => return format!("{b:.0} B"),
        a if a < 1024.0 * 1024.0 => (b / 1024.0, "KiB"),
        a if a < 1024.0 * 1024.0 * 1024.0 => (b / (1024.0 * 1024.0), "MiB"),
        _ => (b / (1024.0 * 1024.0 * 1024.0), "GiB"),
    };
    format!("{v:.1} {unit}")
}

fn write_table(f: &mut fmt::Formatter<'_>, head: &[&str], rows: &[Vec<String>]) -> fmt::Result {
    let mut width: Vec<usize> = head.iter().map(|h| h.chars().count()).collect();
    for r in rows {
        for (w, c) in width.iter_mut().zip(r) {
            *w = (*w).max(c.chars().count());
        }
    }
    let line = |f: &mut fmt::Formatter<'_>, cells: &[String]| -> fmt::Result {
        for (i, (c, w)) in cells.iter().zip(&width).enumerate() {
            // Names left-aligned, numbers right-aligned.
            if i == 0 {
                write!(f, "{c:<w$}")?
            } else {
                write!(f, "  {c:>w$}")?
            }
        }
        writeln!(f)
    };
    line(f, &head.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>())?;
    line(f, &width.iter().map(|w| "-".repeat(*w)).collect::<Vec<_>>())?;
    rows.iter().try_for_each(|r| line(f, r))
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.timings.is_empty() && self.memory.is_empty() {
            return writeln!(f, "(no measurements)");
        }
        if !self.timings.is_empty() {
            let rows: Vec<Vec<String>> = self
                .timings
                .iter()
                .map(|t| {
                    vec![
                        t.name.clone(),
                        t.count.to_string(),
                        duration(t.total),
                        duration(t.mean),
                        duration(t.min),
                        duration(t.p50),
                        duration(t.p95),
                        duration(t.max),
                        t.panicked.to_string(),
                        t.failed.to_string(),
                    ]
                })
                .collect();
            let head = [
                "timed", "count", "total", "mean", "min", "p50", "p95", "max", "panicked", "failed",
            ];
            write_table(f, &head, &rows)?;
        }
        if !self.memory.is_empty() {
            if !self.timings.is_empty() {
                writeln!(f)?;
            }
            let rows: Vec<Vec<String>> = self
                .memory
                .iter()
                .map(|m| {
                    let l = &m.last;
                    vec![
                        m.name.clone(),
                        l.device.clone(),
                        m.count.to_string(),
                        bytes(l.delta() as f64),
                        bytes(l.peak_growth() as f64),
                        bytes(m.max_peak_growth as f64),
                        l.reserved.map_or_else(|| "-".into(), |r| bytes(r as f64)),
                    ]
                })
                .collect();
            let head = [
                "memory",
                "device",
                "count",
                "last delta",
                "last peak",
                "max peak",
                "reserved",
            ];
            write_table(f, &head, &rows)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units() {
        assert_eq!(duration(Duration::from_nanos(950)), "950 ns");
        assert_eq!(duration(Duration::from_micros(1500)), "1.50 ms");
        assert_eq!(bytes(256.0 * 1024.0 * 1024.0), "256.0 MiB");
        assert_eq!(bytes(-2048.0), "-2.0 KiB");
        assert_eq!(bytes(10.0), "10 B");
    }
}
