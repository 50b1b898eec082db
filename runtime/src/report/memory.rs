//! [`MemoryReport`]: what a memory scope measured, the value the memory
//! scopes hand to the report.

use serde::Serialize;

use super::Outcome;

/// What a memory scope saw, in bytes. For `gpu_memory_scope`: the caching
/// allocator's allocated bytes (as `torch.cuda.memory_allocated()`); for
/// `memory_scope`: the process's resident set (VmRSS); for `tensor_memory`:
/// the bytes of tensor storage this thread allocated minus those it freed
/// inside the scope, counted from the lowest level the scope went down to
/// (so `at_entry` is 0 unless the scope freed tensors older than itself).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MemoryReport {
    /// The scope's name.
    pub name: &'static str,
    /// `cpu` for `memory_scope`, `cuda:N` for `gpu_memory_scope`; for
    /// `tensor_memory` the devices it saw, joined by `+` (`cpu+cuda:0`), or
    /// `none`.
    pub device: String,
    /// Bytes in use when the scope was entered.
    pub at_entry: u64,
    /// Bytes in use when it was left.
    pub at_exit: u64,
    /// Highest bytes in use while it was open.
    pub peak: u64,
    /// Bytes the CUDA caching allocator held from the driver at exit, before
    /// any `empty_cache` (`torch.cuda.memory_reserved()`); `None` for host
    /// memory.
    pub reserved: Option<u64>,
    /// `false` when the peak counter could not be reset (host memory where
    /// the kernel refuses `/proc/self/clear_refs`): `peak` is then the
    /// process's peak so far, an upper bound.
    pub peak_is_scoped: bool,
    /// How the body ended.
    pub outcome: Outcome,
    /// `tensor_memory` only: the bytes of every allocation inside the scope,
    /// summed (as the positive `[memory]` events of PyTorch's profiler).
    pub allocated: Option<u64>,
    /// `tensor_memory` only: the bytes of every free inside the scope, summed.
    pub freed: Option<u64>,
}

impl MemoryReport {
    /// `at_exit - at_entry`: what the scope left allocated (negative if it
    /// freed more than it allocated).
    ///
    /// ```
    /// # let r = tch_scope::MemoryReport { name: "x", device: "cpu".into(), at_entry: 10, at_exit: 4,
    /// #     peak: 30, reserved: None, peak_is_scoped: true, outcome: tch_scope::report::Outcome::Completed,
    /// #     allocated: None, freed: None };
    /// assert_eq!(r.delta(), -6);
    /// ```
    pub fn delta(&self) -> i64 {
        self.at_exit as i64 - self.at_entry as i64
    }

    /// `peak - at_entry`: the most the scope added on top of what was in
    /// use when it began.
    ///
    /// ```
    /// # let r = tch_scope::MemoryReport { name: "x", device: "cpu".into(), at_entry: 10, at_exit: 4,
    /// #     peak: 30, reserved: None, peak_is_scoped: true, outcome: tch_scope::report::Outcome::Completed,
    /// #     allocated: None, freed: None };
    /// assert_eq!(r.peak_growth(), 20);
    /// ```
    pub fn peak_growth(&self) -> u64 {
        self.peak.saturating_sub(self.at_entry)
    }
}
