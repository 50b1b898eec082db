//! The error of a collective.

/// A collective that failed: which one, on which rank, and why (a peer
/// that died, a timeout, mismatched tensors). Never a hang: every
/// collective is bounded by the scope's timeout.
///
/// ```no_run
/// let e = tch_scope::dist::DistError::new("all_reduce", 1, "Connection reset by peer");
/// assert_eq!(e.to_string(), "distributed all_reduce failed on rank 1: Connection reset by peer");
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("distributed {op} failed{on}: {reason}", on = OnRank(*rank))]
pub struct DistError {
    op: &'static str,
    rank: Option<usize>,
    reason: String,
}

impl DistError {
    /// A new error for collective `op` on `rank`.
    ///
    /// ```no_run
    /// let e = tch_scope::dist::DistError::new("barrier", 0, "timed out");
    /// assert_eq!(e.op(), "barrier");
    /// ```
    pub fn new(op: &'static str, rank: usize, reason: impl Into<String>) -> Self {
        Self {
            op,
            rank: Some(rank),
            reason: reason.into(),
        }
    }

    /// `op` called with no `distributed` scope active on this thread.
    pub(crate) fn no_group(op: &'static str) -> Self {
        Self {
            op,
            rank: None,
            reason: "no `distributed` scope is active on this thread (enter one with \
                     `scoped!(distributed(..) => ..)` or `#[distributed(..)]`)"
                .to_owned(),
        }
    }

    /// The collective: `"all_reduce"`, `"broadcast"`, `"all_gather"`, `"barrier"`.
    ///
    /// ```no_run
    /// assert_eq!(tch_scope::dist::DistError::new("broadcast", 0, "x").op(), "broadcast");
    /// ```
    pub fn op(&self) -> &str {
        self.op
    }

    /// The rank that saw the failure (`None` when there was no group).
    ///
    /// ```no_run
    /// assert_eq!(tch_scope::dist::DistError::new("broadcast", 3, "x").rank(), Some(3));
    /// ```
    pub fn rank(&self) -> Option<usize> {
        self.rank
    }

    /// Why it failed, as libtorch / gloo put it.
    ///
    /// ```no_run
    /// assert_eq!(tch_scope::dist::DistError::new("barrier", 0, "why").reason(), "why");
    /// ```
    pub fn reason(&self) -> &str {
        &self.reason
    }
}

/// ` on rank 3`, or nothing.
struct OnRank(Option<usize>);

impl std::fmt::Display for OnRank {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            Some(r) => write!(f, " on rank {r}"),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::DistError;

    #[test]
    fn message_and_parts() {
        let e = DistError::new("all_reduce", 1, "Connection reset by peer");
        assert_eq!(
            e.to_string(),
            "distributed all_reduce failed on rank 1: Connection reset by peer"
        );
        assert_eq!(
            (e.op(), e.rank(), e.reason()),
            ("all_reduce", Some(1), "Connection reset by peer")
        );
        let e = DistError::no_group("barrier");
        assert_eq!(e.rank(), None);
        assert!(
            e.to_string()
                .starts_with("distributed barrier failed: no `distributed` scope is active"),
            "{e}"
        );
    }
}
