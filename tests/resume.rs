//! Training that survives being stopped: a run killed (SIGKILL), panicked
//! or failed at any step and resumed from its checkpoint ends with exactly
//! the weights of a run never stopped — the optimizer's state, the step,
//! the generators' states and the run state all come back bitwise.
//!
//! The generators are process-wide, so every run whose random numbers
//! matter is a child process of its own: this binary run again with
//! `TCH_SCOPE_RESUME_CHILD` set, running only the ignored `child` test.

mod resume {
    pub mod boundaries;
    pub mod child;
    pub mod kills;
    pub mod scope;
}
