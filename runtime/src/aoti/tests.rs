//! The reading of a package's generated input check, on the source
//! PyTorch 2.13's AOTInductor wrote for scripts/export_pt2.py's `rows.pt2`
//! (x: float32 [n, 16], ids: int64 [n, 5], n from 1 to 4096), and the
//! checks made from it.

use tch::{Device, Kind, Tensor};

use super::inputs::{check, learned, parse};
use super::{InputDim, InputSpec};

const ROWS: &str = include_str!("tests_check_input.txt");

fn rows() -> Vec<InputSpec> {
    parse(ROWS, 2).expect("two input specs")
}

#[test]
fn the_generated_check_is_read_per_input() {
    let specs = rows();
    let batch = InputDim::Range {
        min: Some(1),
        max: Some(4096),
    };
    assert_eq!(specs[0].kind(), Some(Kind::Float));
    assert_eq!(specs[0].dtype(), "float32");
    assert_eq!(specs[0].dims(), &[batch, InputDim::Fixed(16)]);
    assert_eq!(specs[0].strides(), &[Some(16), Some(1)]);
    assert_eq!(specs[0].to_string(), "Float [1..=4096, 16]");
    assert!(!specs[0].is_learned());
    assert_eq!(specs[1].kind(), Some(Kind::Int64));
    assert_eq!(specs[1].to_string(), "Int64 [1..=4096, 5]");
    assert_eq!(specs[1].rank(), 2);
}

#[test]
fn a_count_that_is_not_the_packages_reads_nothing() {
    assert!(parse(ROWS, 1).is_none());
    assert!(parse(ROWS, 3).is_none());
    assert!(parse("", 1).is_none());
    assert_eq!(parse("", 0), Some(vec![]));
    // The same function twice.
    let twice = format!("{ROWS}\n{ROWS}");
    assert!(parse(&twice, 2).is_none());
}

#[test]
fn inputs_are_checked_as_the_package_would() {
    let specs = rows();
    let f = |shape: &[i64]| Tensor::zeros(shape, (Kind::Float, Device::Cpu));
    assert_eq!(
        check(0, &specs[0], &f(&[1, 16])).map(|v| v.is_some()),
        Ok(false)
    );
    assert_eq!(
        check(0, &specs[0], &f(&[4096, 16])).map(|v| v.is_some()),
        Ok(false)
    );

    let e = check(0, &specs[0], &f(&[])).unwrap_err();
    assert_eq!(
        e,
        "input 0 does not match the package: a Float tensor of shape [] has 0 dims, the package \
         takes 2: Float [1..=4096, 16]"
    );
    let e = check(0, &specs[0], &f(&[3, 16]).to_kind(Kind::Double)).unwrap_err();
    assert_eq!(
        e,
        "input 0 does not match the package: a Double tensor (torch.float64), the package takes \
         Float (torch.float32): Float [1..=4096, 16]"
    );
    let e = check(0, &specs[0], &f(&[3, 15])).unwrap_err();
    assert!(
        e.starts_with(
            "input 0 does not match the package: a Float tensor of shape [3, 15] has size 15 at \
             dim 1, the package takes 16 there: Float [1..=4096, 16]"
        ),
        "{e}"
    );
    let e = check(0, &specs[0], &f(&[4097, 16])).unwrap_err();
    assert!(e.contains("the package takes 1 to 4096 there"), "{e}");
    let e = check(0, &specs[0], &f(&[16, 3]).tr()).unwrap_err();
    assert_eq!(
        e,
        "input 0 does not match the package: strides [1, 3] (shape [3, 16]), the package takes \
         [16, 1], those of a contiguous tensor: pass `x.contiguous()`"
    );
}

/// A dim of size 1 whose stride differs: a view with the package's
/// strides, not a copy and not a refusal (`.contiguous()` would not
/// change it).
#[test]
fn a_size_one_dims_stride_is_set_in_a_view() {
    let specs = rows();
    let x = Tensor::arange(16, (Kind::Float, Device::Cpu))
        .view([16, 1])
        .tr();
    assert_eq!(x.stride(), [1, 1]);
    let view = check(0, &specs[0], &x).unwrap().expect("a view");
    assert_eq!(view.stride(), [16, 1]);
    assert_eq!(view.data_ptr(), x.data_ptr());
    assert!(view.equal(&x));
}

#[test]
fn a_run_teaches_rank_dtype_and_device_only() {
    let x = Tensor::zeros([2, 3], (Kind::Double, Device::Cpu));
    let specs = learned(&[&x]);
    assert!(specs[0].is_learned());
    assert_eq!(specs[0].to_string(), "Double [_, _]");
    assert!(
        check(
            0,
            &specs[0],
            &Tensor::zeros([7, 1], (Kind::Double, Device::Cpu))
        )
        .is_ok()
    );
    let e = check(
        0,
        &specs[0],
        &Tensor::zeros([7], (Kind::Double, Device::Cpu)),
    )
    .unwrap_err();
    assert!(
        e.starts_with(
            "input 0 does not match the package: a Double tensor of shape [7] has 1 dim, the \
             package takes 2"
        ),
        "{e}"
    );
}
