//! `cargo run -p examples --example train_eval`: a training loop that
//! switches a model between training and eval mode the way PyTorch code
//! does with `model.train()` / `model.eval()`, restored on every exit.
//!
//! A small classifier with BatchNorm and Dropout learns which of two
//! Gaussian blobs a point comes from. Training steps run inside
//! `train(model)` (dropout active, BatchNorm updates its running stats);
//! validation runs inside `no_grad, eval(model)` (dropout off, BatchNorm
//! uses the running stats, no graph). The model is a `tch::nn` module
//! wrapped in `WithMode`, which gives it a stored mode.

use tch::nn::{self, OptimizerConfig};
use tch::{Device, Kind, Tensor};
use tch_scope::{WithMode, eval, scoped};

/// Validation accuracy: the model in eval mode, autograd off.
#[tch_scope::scope(no_grad, eval(model))]
fn accuracy(model: &WithMode<nn::SequentialT>, x: &Tensor, y: &Tensor) -> f64 {
    let predicted = model.forward(x).argmax(-1, false);
    predicted
        .eq_tensor(y)
        .to_kind(Kind::Float)
        .mean(Kind::Float)
        .double_value(&[])
}

/// The same, written with the single-word attribute (grad stays on).
#[eval(model)]
fn dropout_is_off(model: &WithMode<nn::SequentialT>, x: &Tensor) -> bool {
    model.forward(x).equal(&model.forward(x))
}

fn blobs(n: i64) -> (Tensor, Tensor) {
    let opts = (Kind::Float, Device::Cpu);
    let y = Tensor::randint(2, [n], (Kind::Int64, Device::Cpu));
    let centers = y.unsqueeze(1).to_kind(Kind::Float) * 2.0 - 1.0; // -1 or +1
    let x = Tensor::randn([n, 2], opts) * 0.8 + centers * Tensor::from_slice(&[1.5f32, 1.0]);
    (x, y)
}

fn main() {
    tch::manual_seed(0);
    let (train_x, train_y) = blobs(512);
    let (val_x, val_y) = blobs(256);

    let vs = nn::VarStore::new(Device::Cpu);
    let p = vs.root();
    let model = WithMode::new(
        nn::seq_t()
            .add(nn::linear(&p / "fc1", 2, 32, Default::default()))
            .add(nn::batch_norm1d(&p / "bn", 32, Default::default()))
            .add_fn(|x| x.relu())
            .add_fn_t(|x, train| x.dropout(0.3, train))
            .add(nn::linear(&p / "fc2", 32, 2, Default::default())),
    );
    let mut opt = nn::Adam::default().build(&vs, 1e-2).unwrap();

    println!("epoch  train_loss  val_acc");
    for epoch in 1..=30 {
        for (x, y) in train_x.split(64, 0).iter().zip(train_y.split(64, 0).iter()) {
            let loss = scoped!(train(model) => model.forward(x).cross_entropy_for_logits(y));
            opt.backward_step(&loss);
        }
        if epoch % 5 == 0 {
            let loss = scoped!(no_grad, eval(model) => {
                model.forward(&train_x).cross_entropy_for_logits(&train_y).double_value(&[])
            });
            let acc = accuracy(&model, &val_x, &val_y);
            println!("{epoch:>5}  {loss:>10.4}  {acc:>7.3}");
        }
    }
    assert!(
        model.is_training(),
        "back in training mode after every scope"
    );
    assert!(dropout_is_off(&model, &val_x));
    let acc = accuracy(&model, &val_x, &val_y);
    println!(
        "final validation accuracy: {acc:.3} (model is training again: {})",
        model.is_training()
    );
    assert!(acc > 0.85, "the blobs are easy to separate");
}
