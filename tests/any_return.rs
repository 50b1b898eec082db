//! Attributes on functions of any return type: a word that cannot fail
//! adds no bound; one that can fail returns `Err(E::from(e))` where
//! `E: From<ScopeError>` and panics otherwise; a renamed dependency works
//! through `crate = "…"`.

use std::io;

use tch_scope::{ScopeError, device, inference_mode, no_grad, scope, timed};

use crate::util::{fresh, state};

#[no_grad]
fn io_result() -> io::Result<bool> {
    Ok(tch_scope::is_grad_enabled())
}

#[inference_mode]
fn string_result(fail: bool) -> Result<bool, String> {
    if fail {
        return Err("asked to".into());
    }
    Ok(tch_scope::is_inference_mode_enabled())
}

#[timed("any_return::anyhow")]
fn anyhow_result(fail: bool) -> anyhow::Result<u8> {
    if fail {
        anyhow::bail!("asked to");
    }
    Ok(1)
}

#[timed("any_return::string_err")]
fn timed_string(fail: bool) -> Result<u8, String> {
    if fail { Err("no".into()) } else { Ok(2) }
}

struct Store(Vec<u8>);

impl Store {
    #[no_grad]
    fn first(&mut self) -> Result<&u8, io::Error> {
        assert!(!tch_scope::is_grad_enabled());
        self.0.first().ok_or_else(|| io::Error::other("empty"))
    }

    #[scope(inference_mode, timed)]
    fn last(&mut self) -> Result<&mut u8, String> {
        self.0.last_mut().ok_or_else(|| "empty".to_owned())
    }
}

#[test]
fn infallible_words_fit_foreign_error_types() {
    assert!(!io_result().unwrap());
    assert!(string_result(false).unwrap());
    assert_eq!(string_result(true).unwrap_err(), "asked to");
    assert_eq!(anyhow_result(false).unwrap(), 1);
    assert!(anyhow_result(true).is_err());
    let mut store = Store(vec![3, 4]);
    assert_eq!(*store.first().unwrap(), 3);
    *store.last().unwrap() = 9;
    assert_eq!(store.0, [3, 9]);
    assert_eq!(state(), fresh());
}

#[test]
fn an_err_is_recorded_as_failed_for_any_error_type() {
    let before = |name| tch_scope::report().timing(name).map_or(0, |t| t.failed);
    let (a, s) = (
        before("any_return::anyhow"),
        before("any_return::string_err"),
    );
    assert!(anyhow_result(true).is_err());
    assert!(timed_string(true).is_err());
    assert_eq!(timed_string(false).unwrap(), 2);
    let report = tch_scope::report();
    assert_eq!(report.timing("any_return::anyhow").unwrap().failed, a + 1);
    assert_eq!(
        report.timing("any_return::string_err").unwrap().failed,
        s + 1
    );
    assert_eq!(
        report.timing("any_return::string_err").unwrap().count,
        s + 2
    );
}

#[device(0)]
fn on_gpu_string() -> Result<u8, String> {
    Ok(1)
}

#[device(0)]
fn on_gpu_scope_error() -> Result<u8, ScopeError> {
    Ok(1)
}

#[device(0)]
fn on_gpu_boxed() -> Result<u8, Box<dyn std::error::Error + Send + Sync>> {
    Ok(1)
}

/// A generic error type without a `From<ScopeError>` bound panics.
#[device(0)]
fn on_gpu_generic<E>() -> Result<u8, E> {
    Ok(1)
}

/// With the bound, it is an `Err`.
#[device(0)]
fn on_gpu_bounded<E: From<ScopeError>>() -> Result<u8, E> {
    Ok(1)
}

#[test]
fn a_failing_word_panics_unless_the_error_type_can_hold_it() {
    if tch_scope::cuda_device_count() > 0 {
        assert_eq!(on_gpu_string(), Ok(1));
        return;
    }
    let message = |r: std::thread::Result<Result<u8, String>>| {
        let e = r.expect_err("must panic");
        e.downcast_ref::<String>().cloned().unwrap_or_default()
    };
    let m = message(std::panic::catch_unwind(on_gpu_string));
    assert!(m.starts_with("cannot enter `device(0)` on cuda:0: "), "{m}");
    let m = message(std::panic::catch_unwind(on_gpu_generic::<String>));
    assert!(m.starts_with("cannot enter `device(0)` on cuda:0: "), "{m}");

    let e = on_gpu_scope_error().unwrap_err();
    assert_eq!(e.scope(), "device(0)");
    assert_eq!(e.device(), Some(tch::Device::Cuda(0)));
    let e = on_gpu_boxed().unwrap_err();
    assert!(e.to_string().starts_with("cannot enter `device(0)`"), "{e}");
    let e: ScopeError = on_gpu_bounded().unwrap_err();
    assert_eq!(e.scope(), "device(0)");
}

/// A scope of the user's own that cannot fail.
struct Quiet;

impl tch_scope::Scope for Quiet {
    type Guard = tch_scope::GradGuard;
    type Error = std::convert::Infallible;
    fn enter(&mut self) -> Result<tch_scope::GradGuard, std::convert::Infallible> {
        tch_scope::Scope::enter(&mut tch_scope::NoGrad)
    }
}

#[tch_scope::with(Quiet)]
fn with_infallible() -> io::Result<bool> {
    Ok(tch_scope::is_grad_enabled())
}

#[tch_scope::with(tch_scope::OnDevice::new(tch::Device::Cuda(0)))]
fn with_fallible() -> Result<(), ScopeError> {
    Ok(())
}

#[test]
fn with_takes_its_scope_s_error_type() {
    assert!(!with_infallible().unwrap());
    if tch_scope::cuda_device_count() == 0 {
        assert_eq!(with_fallible().unwrap_err().scope(), "device(0)");
    }
    assert_eq!(state(), fresh());
}
