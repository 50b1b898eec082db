//! The bound on distinct measurement names. The bound and its
//! one notice are process-wide: a process of its own, one test.

use std::sync::{Arc, Mutex};

use tch_scope::report::{self, OTHER};
use tch_scope::{HostMemory, Scope, Timed, scoped};

fn leak(s: String) -> &'static str {
    Box::leak(s.into_boxed_str())
}

#[test]
fn names_past_the_bound_count_in_one_other_row_and_the_hook_hears_once() {
    let heard: Arc<Mutex<Vec<tch_scope::ExitError>>> = Arc::default();
    let h = heard.clone();
    tch_scope::set_exit_hook(move |e| h.lock().unwrap().push(e.clone()));
    report::set_name_limit(8);

    for i in 0..20 {
        drop(Timed::new(leak(format!("bound_{i}"))).enter().unwrap());
    }
    // A static site (the macros') and a memory scope, both new: `other`.
    scoped!(timed("bound_static") => ());
    drop(HostMemory::new("bound_memory").enter().unwrap());
    // Known names keep their rows.
    drop(Timed::new("bound_0").enter().unwrap());
    // On a try_scoped! success path, the notice is no error of the scope.
    assert_eq!(tch_scope::try_scoped!(timed("bound_try") => 7).unwrap(), 7);

    let r = report::report();
    let own: Vec<&str> = r
        .timings
        .iter()
        .map(|t| t.name.as_str())
        .filter(|n| n.starts_with("bound_"))
        .collect();
    assert_eq!(own.len(), 8, "the first eight names have rows: {own:?}");
    assert_eq!(r.timing("bound_0").unwrap().count, 2);
    assert_eq!(
        r.timing(OTHER).unwrap().count,
        12 + 1 + 1,
        "bound_8..bound_19, bound_static, bound_try"
    );
    assert!(r.memory("bound_memory").is_none());
    let other = r.memory(OTHER).unwrap();
    assert_eq!((other.count, other.last.name), (1, "bound_memory"));

    let heard = heard.lock().unwrap();
    assert_eq!(heard.len(), 1, "once: {heard:?}");
    assert_eq!(heard[0].scope(), "timed(\"bound_8\")");
    assert!(heard[0].reason().contains("\"other\""), "{}", heard[0]);
    assert!(heard[0].reason().contains("set_name_limit"), "{}", heard[0]);
    drop(heard);

    // Raising the limit admits new names (and re-arms the notice).
    report::set_name_limit(100);
    drop(Timed::new("bound_late").enter().unwrap());
    assert_eq!(report::report().timing("bound_late").unwrap().count, 1);
    tch_scope::reset_exit_hook();
}
