//! `make demo`: a small training run that uses tch-scope's scopes the way
//! PyTorch code uses its context managers.
//!
//! Fits y = 3x - 2 (plus noise) with a one-layer `tch::nn` model: training
//! steps run with grad on, validation runs under `no_grad`, prediction under
//! `inference_mode`; a CUDA device that isn't there comes back as a
//! `ScopeError`, not a crash. Steps are `timed`, a large forward pass sits
//! in a `memory_scope`, `seed` makes a draw reproducible, `checkpoint` saves
//! on exit, a training run stopped by Ctrl-C resumes to exactly the weights
//! of one never stopped, and the report table of every measurement is
//! printed at the end.
//! The whole run is recorded as a timeline (`tch_scope::trace`) and written
//! to `target/demo-trace.json`, which Perfetto and `chrome://tracing` open.

use tch::nn::{self, Module, OptimizerConfig};
use tch::{Device, Kind, Tensor};
use tch_scope::{inference_mode, scope, scoped, try_scoped};

#[scope(no_grad, timed)]
fn validation_loss(model: &impl Module, x: &Tensor, y: &Tensor) -> f64 {
    let loss = model.forward(x).mse_loss(y, tch::Reduction::Mean);
    assert!(!loss.requires_grad(), "no graph is built under no_grad");
    loss.double_value(&[])
}

#[inference_mode]
fn predict(model: &impl Module, x: f64) -> f64 {
    model
        .forward(&Tensor::from_slice(&[x as f32]).view([1, 1]))
        .double_value(&[0, 0])
}

#[path = "demo/resume.rs"]
mod resume;

fn main() {
    // The training child of the stop-and-resume part (run by `resume::show`).
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some(resume::CHILD) {
        resume::child(std::path::Path::new(&args[2]));
        return;
    }
    // Every span of `timed`, `record` and the memory scopes from here on.
    tch_scope::trace::start();
    tch::manual_seed(0);
    let data = |n: i64| {
        let x = Tensor::randn([n, 1], (Kind::Float, Device::Cpu));
        let y = &x * 3.0 - 2.0 + Tensor::randn([n, 1], (Kind::Float, Device::Cpu)) * 0.1;
        (x, y)
    };
    let (train_x, train_y) = data(256);
    let (val_x, val_y) = data(64);

    let vs = nn::VarStore::new(Device::Cpu);
    let model = nn::linear(vs.root(), 1, 1, Default::default());
    let mut opt = nn::Sgd::default().build(&vs, 0.1).unwrap();

    println!("epoch  train_loss  val_loss  (grad mode during validation)");
    for epoch in 1..=20 {
        let loss = scoped!(timed("demo::train_step") => {
            let loss = scoped!(record("demo::forward") => model
                .forward(&train_x)
                .mse_loss(&train_y, tch::Reduction::Mean));
            scoped!(record("demo::backward_step") => opt.backward_step(&loss));
            loss
        });
        let val = validation_loss(&model, &val_x, &val_y);
        if epoch % 5 == 0 {
            let grad_inside = scoped!(no_grad => tch_scope::is_grad_enabled());
            println!(
                "{epoch:>5}  {:>10.5}  {val:>8.5}  ({})",
                loss.double_value(&[]),
                if grad_inside { "on" } else { "off" }
            );
        }
    }
    let w = scoped!(no_grad => model.ws.double_value(&[0, 0]));
    let b = scoped!(no_grad => model.bs.as_ref().unwrap().double_value(&[0]));
    println!("learned y = {w:.3}x + {b:.3}   (true: y = 3x - 2)");
    println!(
        "predict(1.5) = {:.3} under inference_mode",
        predict(&model, 1.5)
    );
    println!(
        "grad mode after all scopes: {}",
        tch_scope::is_grad_enabled()
    );

    // `memory_scope`: process memory at entry and exit and the peak between
    // (a forward pass over 4M inputs: 16 MiB in, 16 MiB out).
    let big = Tensor::randn([1 << 22, 1], (Kind::Float, Device::Cpu));
    let out = scoped!(memory_scope("demo::big_forward"), no_grad => model.forward(&big));
    let r = tch_scope::last_memory_report().unwrap();
    println!(
        "memory_scope: {:.1} MiB kept, peak +{:.1} MiB for an output of {:.1} MiB",
        r.delta() as f64 / 1048576.0,
        r.peak_growth() as f64 / 1048576.0,
        (out.numel() * 4) as f64 / 1048576.0
    );
    drop(out);

    match try_scoped!(device(0), no_grad => predict(&model, 0.0)) {
        Ok(v) => println!("on cuda:0: {v:.3}"),
        Err(e) => println!("device(0): {e}"),
    }

    // `seed(n)`: a reproducible draw that leaves the global stream as it was.
    let draw = || Tensor::rand([3], (Kind::Float, Device::Cpu));
    let (a, b) = (scoped!(seed(42) => draw()), scoped!(seed(42) => draw()));
    println!(
        "seed(42) draws {:?} every time: {}",
        Vec::<f32>::try_from(&a).unwrap(),
        a.equal(&b)
    );

    // `checkpoint(vs, path, resume)`: fine-tune in two runs; each saves the
    // weights and the logged losses on exit (crash-safely, panics included)
    // and the next resumes from them.
    let ckpt = std::env::temp_dir().join("tch-scope-demo.safetensors");
    let _ = std::fs::remove_file(&ckpt);
    for run in 1..=2 {
        scoped!(checkpoint(vs, &ckpt, resume) => {
            let done = tch_scope::metrics().unwrap().get("loss").len();
            for _ in 0..5 {
                let loss = model.forward(&train_x).mse_loss(&train_y, tch::Reduction::Mean);
                opt.backward_step(&loss);
                tch_scope::log_metric("loss", loss.double_value(&[]));
            }
            println!("checkpoint run {run}: resumed after {done} steps, saving {}", done + 5);
        });
    }

    // A run stopped by Ctrl-C and resumed: `steps`, `every = 5` and the
    // optimizer's state in the checkpoint; the end is a run never stopped.
    resume::show();

    // Every `timed` and memory measurement, per name.
    println!("\n{}", tch_scope::report());

    // The timeline: each span on its thread, nested as the scopes were.
    tch_scope::trace::stop();
    let trace = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/demo-trace.json");
    match tch_scope::trace::write_chrome(&trace) {
        Ok(()) => println!(
            "timeline: {} (open it at https://ui.perfetto.dev, or in chrome://tracing)",
            trace.canonicalize().unwrap_or(trace).display()
        ),
        Err(e) => println!("timeline: could not write {}: {e}", trace.display()),
    }
}
