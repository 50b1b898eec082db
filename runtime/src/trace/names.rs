//! Names made at run time, interned once and bounded.

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::Mutex;

use crate::sync::lock;

/// A name as one word: the same `&'static &'static str` for equal names,
/// made once, for spans without a static name of their own (`record`,
/// `mark`, memory scopes named at run time).
///
/// Bounded like the report's rows: past
/// [`name_limit`](crate::report::name_limit) distinct names, a new name is
/// written as [`OTHER`](crate::report::OTHER) (`"other"`), so names minted
/// per request cannot grow the process without end. Each thread looks its
/// names up in a cache of its own first: the global lock is taken once per
/// name and thread, not per span.
pub(crate) fn intern(name: &str) -> &'static &'static str {
    /// Names a thread has looked up; cleared when it grows past twice the
    /// bound, so a thread minting names keeps a bounded cache.
    type Cache = RefCell<HashMap<Box<str>, &'static &'static str>>;
    thread_local! {
        static CACHE: Cache = RefCell::new(HashMap::new());
    }
    if let Ok(Some(n)) = CACHE.try_with(|c| c.borrow().get(name).copied()) {
        return n;
    }
    let n = intern_shared(name);
    let _ = CACHE.try_with(|c| {
        let mut c = c.borrow_mut();
        if c.len() >= 2 * crate::report::name_limit().max(64) {
            c.clear();
        }
        c.insert(name.into(), n);
    });
    n
}

/// The process's names, under one lock: found, made (within the bound),
/// or `other`.
fn intern_shared(name: &str) -> &'static &'static str {
    static NAMES: Mutex<Option<HashMap<&'static str, &'static &'static str>>> = Mutex::new(None);
    static OTHER: &str = crate::report::OTHER;
    let mut map = lock(&NAMES);
    let map = map.get_or_insert_with(HashMap::new);
    if let Some(n) = map.get(name) {
        return n;
    }
    if map.len() >= crate::report::name_limit() {
        return &OTHER;
    }
    let s: &'static str = Box::leak(name.to_owned().into_boxed_str());
    let n: &'static &'static str = Box::leak(Box::new(s));
    map.insert(s, n);
    n
}
