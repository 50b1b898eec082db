//! A model that cannot be loaded or run says so — "cannot load", "cannot
//! run" — naming the model's file (or the forward), the device and the
//! reason, not "cannot enter" as a scope's entry does.

use tch::{Device, Kind, Tensor};
use tch_scope::Stage;
use tch_scope::aoti::Package;
use tch_scope::batch::cmodule_forward;

use super::{mlp, mlp_package, packages};

#[test]
fn a_package_that_cannot_be_loaded_says_cannot_load() {
    let e = Package::load("/no/such/model.pt2").unwrap_err();
    assert_eq!(
        e.to_string(),
        "cannot load `/no/such/model.pt2`: no such file"
    );
    assert_eq!(e.scope(), "/no/such/model.pt2");
    assert_eq!(e.reason(), "no such file");
    assert_eq!(e.stage(), Stage::Load);
}

#[test]
fn a_package_that_cannot_run_says_cannot_run_on_its_device() {
    let dir = need_packages!();
    let pkg = mlp_package(dir);
    let path = dir.join("mlp.pt2");
    let e = pkg.run(&[]).unwrap_err();
    assert_eq!(
        e.to_string(),
        format!(
            "cannot run `{}` on cpu: the package takes 1 input tensor, got 0",
            path.display()
        )
    );
    assert_eq!(e.scope(), path.display().to_string());
    assert_eq!(e.device(), Some(Device::Cpu));
    assert_eq!(e.reason(), "the package takes 1 input tensor, got 0");
    assert_eq!(e.stage(), Stage::Run);
    // And the package still answers.
    let want = mlp(dir);
    assert!(pkg.run(&[&want.input]).is_ok());
}

/// A TorchScript forward that fails inside the interpreter (a matmul of the
/// wrong width) is a run error, the interpreter's message its reason.
#[test]
fn a_torchscript_forward_that_fails_says_cannot_run() {
    let model =
        tch::CModule::load(concat!(env!("CARGO_MANIFEST_DIR"), "/data/serve_mlp.pt")).unwrap();
    let wrong = Tensor::zeros([2, 31], (Kind::Float, Device::Cpu));
    let e = cmodule_forward(&model, &[wrong]).unwrap_err();
    let msg = e.to_string();
    assert!(msg.starts_with("cannot run `CModule::forward`: "), "{msg}");
    assert_eq!((e.scope(), e.stage()), ("CModule::forward", Stage::Run));
    assert!(
        msg.contains("mat1 and mat2 shapes cannot be multiplied"),
        "{msg}"
    );
    assert!(!msg.contains("cannot enter"), "{msg}");
}
