//! The binary half: proves the rpath build.rs (it runs with no
//! `LD_LIBRARY_PATH`) and prints the report.

use tch::{Device, Kind, Tensor};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let w = Tensor::ones([3, 2], (Kind::Float, Device::Cpu)).set_requires_grad(true);
    let x = Tensor::ones([4, 3], (Kind::Float, Device::Cpu));
    let y = downstream::predict(&w, &x)?;
    assert!(!y.requires_grad());
    assert!(ts::is_grad_enabled());
    let sum = downstream::checked_sum(&[1.0, 2.5])?;
    assert!((sum - 3.5).abs() < f64::EPSILON);
    let z = ts::scoped!(inference_mode => downstream::timed_step(&y));
    assert!(z.is_inference());
    let report = ts::report();
    assert_eq!(
        report.timing("downstream::timed_step").map(|t| t.count),
        Some(1)
    );
    println!("{report}");
    Ok(())
}
