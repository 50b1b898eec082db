//! device(…): the thread-local current device, and errors (never a crash)
//! for CUDA devices that are not there.

use tch::Device;
use tch_scope::{ScopeError, current_device, scoped, try_scoped};

use crate::util::{fresh, state};

#[test]
fn device_cpu_sets_the_current_device() {
    let d = scoped!(device(cpu) => current_device());
    assert_eq!(d, Device::Cpu);
    let d = scoped!(device("cpu") => current_device());
    assert_eq!(d, Device::Cpu);
    let chosen = Device::Cpu;
    let t =
        scoped!(device(chosen) => tch::Tensor::zeros([2], (tch::Kind::Float, current_device())));
    assert_eq!(t.device(), Device::Cpu);
    assert_eq!(state(), fresh());
}

#[test]
fn missing_cuda_device_is_a_scope_error() {
    let n = tch_scope::cuda_device_count();
    let missing = n; // cuda:n never exists
    let e: ScopeError = try_scoped!(device(missing) => ()).unwrap_err();
    assert_eq!(e.device(), Some(Device::Cuda(missing)));
    assert_eq!(e.scope(), format!("device({missing})"));
    if n == 0 {
        assert!(e.reason().contains("CUDA is not available"), "{e}");
    } else {
        assert!(e.reason().contains("out of range"), "{e}");
    }
    // The failed entry changed nothing.
    assert_eq!(state(), fresh());
}

#[test]
fn literal_cuda_device_errors_name_scope_device_and_reason() {
    if tch_scope::cuda_device_count() > 3 {
        return; // the message differs on a machine with four GPUs
    }
    let e = try_scoped!(no_grad, device(3) => ()).unwrap_err();
    let msg = e.to_string();
    assert!(
        msg.starts_with("cannot enter `device(3)` on cuda:3: "),
        "{msg}"
    );
    // The scopes entered before the failing one were left again.
    assert_eq!(state(), fresh());
    let e = try_scoped!(device("cuda:3") => ()).unwrap_err();
    assert_eq!(e.device(), Some(Device::Cuda(3)));
}

#[test]
fn scoped_panics_with_the_scope_error_message() {
    if tch_scope::cuda_device_count() > 5 {
        return;
    }
    let r = std::panic::catch_unwind(|| scoped!(device(5) => ()));
    let msg = r.unwrap_err().downcast::<String>().unwrap();
    assert!(
        msg.starts_with("cannot enter `device(5)` on cuda:5: "),
        "{msg}"
    );
    assert_eq!(state(), fresh());
}

#[test]
fn runtime_strings_and_indices_are_checked_on_entry() {
    let name = String::from("gpu:0");
    let e = try_scoped!(device(&name) => ()).unwrap_err();
    assert!(e.reason().contains("not a device"), "{e}");
    let idx: i64 = -1;
    let e = try_scoped!(device(idx) => ()).unwrap_err();
    assert!(e.reason().contains("0 or more"), "{e}");
}

#[test]
fn nested_devices_restore_the_outer_one() {
    scoped!(device(cpu) => {
        if tch_scope::cuda_device_count() > 0 {
            scoped!(device(0) => assert_eq!(current_device(), Device::Cuda(0)));
        }
        assert_eq!(current_device(), Device::Cpu);
    });
}
