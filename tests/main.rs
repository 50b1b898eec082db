//! Integration tests of every scope against real libtorch: one test binary
//! (linking libtorch once), a module per concern.

mod any_return;
mod async_hidden_await;
mod async_scopes;
mod async_services;
mod attributes;
#[allow(dead_code, reason = "each test binary uses a part of it")]
mod bundle;
mod context;
mod deadline;
mod device;
mod distributed;
mod entry_errors;
mod exits;
mod grad;
mod linkage;
mod optim;
#[path = "oracle.rs"]
mod oracle;
mod outcome;
mod request_context;
mod send_futures;
mod threads;
mod timing;
mod train_eval;
mod util;
