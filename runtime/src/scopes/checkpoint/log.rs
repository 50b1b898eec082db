//! A checkpoint's metric log ([`Metrics`]), saved in its file beside the
//! weights.

use std::collections::BTreeMap;

/// A checkpoint's metric log: every value appended under each name, in
/// order.
///
/// ```
/// use tch_scope::{log_metric, metrics, scoped};
/// let vs = tch::nn::VarStore::new(tch::Device::Cpu);
/// let path = std::env::temp_dir().join(format!("doc-metrics-{}.ot", std::process::id()));
/// let log = scoped!(checkpoint(vs, &path) => {
///     log_metric("loss", 0.5);
///     log_metric("loss", 0.25);
///     metrics().unwrap()
/// });
/// assert_eq!(log.get("loss"), [0.5, 0.25]);
/// assert_eq!(log.names().collect::<Vec<_>>(), ["loss"]);
/// # std::fs::remove_file(&path).unwrap();
/// ```
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Metrics(pub(super) BTreeMap<String, Vec<f64>>);

impl Metrics {
    /// The values logged under `name` (empty if none).
    ///
    /// ```no_run
    /// assert!(tch_scope::Metrics::default().get("loss").is_empty());
    /// ```
    pub fn get(&self, name: &str) -> &[f64] {
        self.0.get(name).map_or(&[], Vec::as_slice)
    }

    /// The names logged, sorted.
    ///
    /// ```no_run
    /// assert_eq!(tch_scope::Metrics::default().names().count(), 0);
    /// ```
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.0.keys().map(String::as_str)
    }

    /// How many values each name has: a step boundary's mark.
    pub(super) fn lengths(&self) -> Vec<(String, usize)> {
        self.0.iter().map(|(n, v)| (n.clone(), v.len())).collect()
    }

    /// The log as it was at `lengths` (values are only ever appended).
    pub(super) fn truncated(&self, lengths: &[(String, usize)]) -> Metrics {
        Metrics(
            lengths
                .iter()
                .map(|(n, len)| (n.clone(), self.get(n)[..*len].to_vec()))
                .collect(),
        )
    }
}
