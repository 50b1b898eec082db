//! A run of two Gloo ranks under `torchrun --max-restarts`: one rank
//! SIGKILLed mid-step, the other failing its collective, torchrun starting
//! the group again, and every rank resuming from the newest step that all
//! ranks completed — ending with the weights of a two-rank run never
//! stopped, bitwise, on both ranks.
//!
//! Both runs are torchrun's worker groups of this binary (its ignored
//! `worker` test, told what to do by `TCH_SCOPE_RANKS_WORKER`).

mod resume_ranks {
    pub mod torchrun;
    pub mod worker;
}
