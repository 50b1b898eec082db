//! Integration tests of every scope against real libtorch: one test binary
//! (linking libtorch once), a module per concern.

mod async_scopes;
mod attributes;
mod device;
mod exits;
mod grad;
mod linkage;
mod threads;
mod train_eval;
mod util;
