//! `make test-newest-pytorch` runs this: models exported by the newest
//! PyTorch on PyPI (`scripts/export_newest.py`), loaded and run by
//! tch-scope built against the project's libtorch (2.13), and checked
//! against what that PyTorch answered.
//!
//! ```text
//! cargo run -p examples --example newest_pytorch -- DIR
//! ```
//!
//! DIR holds `<model>.pt2`, `<model>.pt` and `cases.json`. Each model is
//! served as a server serves it (`Inference`: eval mode, inference mode):
//! the `.pt2` through `aoti::Package`, the TorchScript file through
//! `tch::CModule`. Every answer must equal, bit for bit, that of the same
//! file run by the exporting PyTorch (its AOTI runner, `torch.jit.load`);
//! the distance to the eager module is printed beside it. Exits 1 on any
//! difference, naming it.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use serde_json::Value;
use tch::{CModule, Device, Kind, Tensor};
use tch_scope::Inference;
use tch_scope::aoti::Package;

fn main() -> ExitCode {
    let Some(dir) = std::env::args_os().nth(1).map(PathBuf::from) else {
        eprintln!("usage: newest_pytorch DIR (written by scripts/export_newest.py)");
        return ExitCode::from(2);
    };
    match check(&dir) {
        Ok(0) => ExitCode::SUCCESS,
        Ok(n) => {
            eprintln!("{n} answer(s) differ from the exporting PyTorch's");
            ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Checks every case; the number that differ.
fn check(dir: &Path) -> Result<usize, String> {
    let path = dir.join("cases.json");
    let text = std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    let data: Value =
        serde_json::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))?;
    let exporter = data["torch"].as_str().unwrap_or("?");
    println!("exported by PyTorch {exporter}, run by tch-scope");
    let mut wrong = 0;
    for model in data["models"].as_array().ok_or("cases.json: no models")? {
        let name = model["name"].as_str().ok_or("a model without a name")?;
        let pt2 = dir.join(format!("{name}.pt2"));
        let package = Inference::new(Package::load(&pt2).map_err(|e| e.to_string())?)
            .map_err(|e| e.to_string())?;
        // The package's own input check, as tch-scope reads it at load
        // from the package's generated C++ (a lone row must pass it).
        match package.get_ref().input_specs() {
            Some(specs) => {
                let specs: Vec<String> = specs.iter().map(ToString::to_string).collect();
                println!("{name}.pt2 takes {}", specs.join(", "));
            }
            None => println!("{name}.pt2: no input check read at load (learned at its first run)"),
        }
        let ts = dir.join(format!("{name}.pt"));
        let module = CModule::load(&ts).map_err(|e| format!("{}: {e}", ts.display()))?;
        let module = Inference::new(module).map_err(|e| e.to_string())?;
        for case in model["cases"].as_array().ok_or("a model without cases")? {
            let inputs = case["inputs"]
                .as_array()
                .ok_or("a case without inputs")?
                .iter()
                .map(tensor)
                .collect::<Result<Vec<_>, _>>()?;
            let shape = ints(&case["output_shape"])?;
            let eager = from_bits(&bits(&case["eager_bits"])?, &shape);
            let batch = case["batch"].as_i64().unwrap_or(-1);

            let refs: Vec<&Tensor> = inputs.iter().collect();
            let got = package.run(|p| p.run(&refs)).map_err(|e| e.to_string())?;
            let want = bits(&case["runner_bits"])?;
            if batch == 1 {
                // An empty batch: refused by tch-scope's check, an error, not an abort.
                let empty: Vec<Tensor> = inputs.iter().map(|t| t.narrow(0, 0, 0)).collect();
                let empty: Vec<&Tensor> = empty.iter().collect();
                match package.run(|p| p.run(&empty)) {
                    Ok(_) => {
                        println!("{name}.pt2 batch 0: ran, but the package takes 1 row or more");
                        wrong += 1;
                    }
                    Err(e) => println!("{name}.pt2 batch 0: refused: {e}"),
                }
            }
            wrong += report(
                &format!("{name}.pt2 batch {batch}"),
                "AOTI runner",
                &got[0],
                &want,
                &eager,
            );

            let ivalues: Vec<tch::IValue> = inputs
                .iter()
                .map(|t| tch::IValue::Tensor(t.shallow_clone()))
                .collect();
            let got = module
                .run(|m| m.forward_is(&ivalues))
                .map_err(|e| format!("{}: {e}", ts.display()))?;
            let tch::IValue::Tensor(got) = got else {
                return Err(format!(
                    "{}: the output is not a tensor: {got:?}",
                    ts.display()
                ));
            };
            let want = bits(&case["torchscript_bits"])?;
            wrong += report(
                &format!("{name}.pt  batch {batch}"),
                "torch.jit.load",
                &got,
                &want,
                &eager,
            );
        }
    }
    Ok(wrong)
}

/// Prints one comparison; 1 if `got` is not bitwise `want`.
fn report(what: &str, theirs: &str, got: &Tensor, want: &[i32], eager: &Tensor) -> usize {
    let got_bits = bits_of(got);
    let eager_diff = (got - eager).abs().max().double_value(&[]);
    if got_bits == want && got.size() == eager.size() {
        println!("{what}: bitwise PyTorch's {theirs}; max |diff| to eager {eager_diff:e}");
        0
    } else {
        let differ = got_bits.iter().zip(want).filter(|(a, b)| a != b).count();
        println!(
            "{what}: DIFFERS from PyTorch's {theirs}: {differ} of {} values (shape {:?}); max |diff| to eager {eager_diff:e}",
            want.len(),
            got.size()
        );
        1
    }
}

fn tensor(v: &Value) -> Result<Tensor, String> {
    let shape = ints(&v["shape"])?;
    match v["dtype"].as_str() {
        Some("float32") => Ok(from_bits(&bits(&v["bits"])?, &shape)),
        Some("int64") => Ok(Tensor::from_slice(&ints(&v["ints"])?).reshape(&shape)),
        other => Err(format!("an input of dtype {other:?}")),
    }
}

fn ints(v: &Value) -> Result<Vec<i64>, String> {
    v.as_array()
        .ok_or_else(|| format!("not a list: {v}"))?
        .iter()
        .map(|x| x.as_i64().ok_or_else(|| format!("not an integer: {x}")))
        .collect()
}

fn bits(v: &Value) -> Result<Vec<i32>, String> {
    ints(v)?
        .into_iter()
        .map(|x| i32::try_from(x).map_err(|_| format!("not a float32's bits: {x}")))
        .collect()
}

fn from_bits(bits: &[i32], shape: &[i64]) -> Tensor {
    let floats: Vec<f32> = bits.iter().map(|&b| f32::from_bits(b as u32)).collect();
    Tensor::from_slice(&floats).reshape(shape)
}

fn bits_of(t: &Tensor) -> Vec<i32> {
    let t = t
        .to_kind(Kind::Float)
        .to_device(Device::Cpu)
        .contiguous()
        .view([-1]);
    let v = Vec::<f32>::try_from(&t).unwrap_or_default();
    v.into_iter().map(|f| f.to_bits() as i32).collect()
}
