//! tch-scope depended on as `ts` (`ts = { package = "tch-scope", .. }`):
//! attributes find it through `crate = "ts"`, `ts::scoped!` by itself.
//! `::tch_scope` does not exist in this crate, so an expansion that used it
//! would not compile.

use std::io;

/// `no_grad` on a function returning a foreign error type.
#[ts::no_grad(crate = "ts")]
pub fn renamed_word() -> io::Result<bool> {
    Ok(ts::is_grad_enabled())
}

/// A list, with a measurement.
#[ts::scope(no_grad, timed("renamed::list"), crate = "ts")]
#[must_use]
pub fn renamed_list() -> bool {
    ts::is_grad_enabled()
}

/// A word with arguments and the path after them.
#[ts::device(cpu, crate = "ts")]
pub fn renamed_device() -> Result<tch::Device, ts::ScopeError> {
    Ok(ts::current_device())
}

/// An async fn: the future re-enters `no_grad` on every poll.
#[ts::no_grad(crate = "ts")]
pub async fn renamed_async() -> bool {
    ts::is_grad_enabled()
}
