//! [`Checkpoint::read`]: what a checkpoint file holds besides the weights,
//! read without opening a scope or writing anything.

use std::path::Path;

use serde::de::DeserializeOwned;
use tch::Device;

use super::log::Metrics;
use super::{Checkpoint, file, state};
use crate::ScopeError;

/// What [`Checkpoint::read`] found in a checkpoint file.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct SavedRun {
    /// The steps completed (where [`steps`](crate::steps) resumes); `0`
    /// for a file saved outside any step loop.
    pub step: i64,
    /// The metric log.
    pub metrics: Metrics,
    /// The names of the optimizer state's tensors (empty when no optimizer
    /// was saved).
    pub optimizer: Vec<String>,
    /// The run state as JSON, when one was saved.
    pub state_json: Option<String>,
}

impl SavedRun {
    /// The run state (see [`RunState`](crate::RunState)) as a `T`; `None`
    /// when the file holds none.
    ///
    /// # Errors
    /// The saved state is not a `T`.
    pub fn state<T: DeserializeOwned>(&self) -> Result<Option<T>, ScopeError> {
        self.state_json
            .as_deref()
            .map(serde_json::from_str)
            .transpose()
            .map_err(|e| {
                ScopeError::new(
                    "Checkpoint::read",
                    None,
                    format!(
                        "the saved run state is not a {}: {e}",
                        std::any::type_name::<T>()
                    ),
                )
            })
    }
}

impl Checkpoint<'_> {
    /// Reads the step, the metrics and the run state saved in `path`
    /// (onto the CPU), without opening a scope and without writing the
    /// file.
    ///
    /// ```no_run
    /// let saved = tch_scope::Checkpoint::read("run.ot").unwrap();
    /// println!("at step {}, last loss {:?}", saved.step, saved.metrics.get("loss").last());
    /// ```
    ///
    /// # Errors
    /// The file can't be read, or is no checkpoint (a tensor of the
    /// training state is malformed).
    pub fn read(path: impl AsRef<Path>) -> Result<SavedRun, ScopeError> {
        let path = path.as_ref();
        let err = |e: String| ScopeError::new(format!("checkpoint({path:?})"), None, e);
        let (mut tensors, metrics) = file::read(path, Device::Cpu).map_err(err)?;
        let extras = state::split(&mut tensors).map_err(err)?;
        Ok(SavedRun {
            step: extras.step.unwrap_or(0),
            metrics,
            optimizer: extras.optimizer.into_iter().map(|(n, _)| n).collect(),
            state_json: extras.user,
        })
    }
}
