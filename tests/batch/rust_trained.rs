//! A model trained in Rust with `tch::nn` (a `VarStore` and a module built
//! from its root: `Send`, not `Sync`) served through `Replicas`, one copy
//! of the trained weights per replica: from four threads through an
//! `Inference`, and from a `Batcher`. Every answer equals a direct forward
//! of the trained module bitwise.

use std::collections::BTreeSet;

use tch::nn::{self, OptimizerConfig};
use tch_scope::Replicas;

use super::*;

const IN: i64 = 16;

fn mlp(p: &nn::Path) -> nn::Sequential {
    nn::seq()
        .add(nn::linear(p / "l1", IN, 64, nn::LinearConfig::default()))
        .add_fn(Tensor::relu)
        .add(nn::linear(p / "l2", 64, 4, nn::LinearConfig::default()))
}

fn randn(rows: i64) -> Tensor {
    Tensor::randn([rows, IN], (Kind::Float, Device::Cpu))
}

/// A user's model after training: its `VarStore` and the module built
/// from its root, fitted for a few steps of SGD to a fixed regression.
fn trained() -> (nn::VarStore, nn::Sequential) {
    let vs = nn::VarStore::new(Device::Cpu);
    let net = mlp(&vs.root());
    let mut opt = nn::Sgd::default().build(&vs, 0.05).unwrap();
    let x = randn(64);
    let target = x.narrow(1, 0, 4) * 3;
    let loss = |net: &nn::Sequential| net.forward(&x).mse_loss(&target, tch::Reduction::Mean);
    let before = loss(&net).double_value(&[]);
    for _ in 0..30 {
        opt.backward_step(&loss(&net));
    }
    let after = loss(&net).double_value(&[]);
    assert!(
        after < before,
        "training did not lower the loss: {before} -> {after}"
    );
    (vs, net)
}

/// What a user writes to make a replica: the same module on a new
/// `VarStore`, with the trained weights copied in.
fn replica(trained: &nn::VarStore) -> Result<WithMode<nn::Sequential>, tch::TchError> {
    let mut vs = nn::VarStore::new(Device::Cpu);
    let net = mlp(&vs.root());
    vs.copy(trained)?;
    Ok(WithMode::new(net))
}

/// The trained module's own forward, the reference.
fn direct(net: &nn::Sequential, x: &Tensor) -> Tensor {
    scoped!(inference_mode => net.forward(x))
}

#[test]
fn a_rust_trained_model_is_served_from_four_threads_bitwise() {
    let (vs, net) = trained();
    let served = Arc::new(Inference::replicated(4, |_| replica(&vs)).unwrap());
    assert_eq!(served.get_ref().count(), 4);
    assert!(!served.get_ref().get().is_training(), "served in eval mode");

    let inputs: Vec<Tensor> = (0..100).map(|i| randn(1 + i % 4)).collect();
    let expected: Vec<Tensor> = inputs.iter().map(|x| direct(&net, x)).collect();
    let threads: Vec<_> = (0..4)
        .map(|t| {
            let served = Arc::clone(&served);
            let mine: Vec<(Tensor, Tensor)> = (t..100)
                .step_by(4)
                .map(|i| (inputs[i].shallow_clone(), expected[i].shallow_clone()))
                .collect();
            thread::spawn(move || {
                for _ in 0..3 {
                    for (x, want) in &mine {
                        let y = served.run(|r| r.get().forward(x));
                        assert!(y.is_inference());
                        assert_eq!(y.size(), want.size());
                        assert!(y.equal(want), "an answer differs from the direct forward");
                    }
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    // Given back as made: every replica in training mode again.
    let replicas = Arc::into_inner(served).unwrap().into_inner().into_vec();
    assert_eq!(replicas.len(), 4);
    assert!(replicas.iter().all(WithMode::is_training));
}

/// One forward of the batcher: the replica that ran it, its input and
/// its output.
type Forwards = Arc<Mutex<Vec<(usize, Tensor, Tensor)>>>;

#[test]
fn a_rust_trained_model_is_served_by_a_batcher_bitwise() {
    let (vs, net) = trained();
    let served = Arc::new(Inference::replicated(2, |_| replica(&vs)).unwrap());
    let gate = Arc::new(Gate::default());
    let forwards = Forwards::default();
    let (g, f) = (Arc::clone(&gate), Arc::clone(&forwards));
    let options = BatchOptions::new().workers(2).max_batch(8);
    let batcher = Batcher::new(served, options, move |r, xs| {
        let m = r.get();
        if xs[0].double_value(&[0, 0]) == -1.0 {
            g.pass();
        }
        let y = m.forward(&xs[0]);
        f.lock().unwrap().push((m.index(), xs[0].copy(), y.copy()));
        Ok(vec![y])
    })
    .unwrap();
    let batcher = Arc::new(batcher);
    let _open = OpenOnDrop(Arc::clone(&gate));

    // Both workers held at the gate, each on its own replica, while 24
    // requests from four threads (inside `inference_mode`, as a server's
    // handlers submit) queue: batches form.
    let hold = Tensor::full([1, IN], -1.0, (Kind::Float, Device::Cpu));
    let submit = |b: &Batcher<_>, x: Tensor| scoped!(inference_mode => b.submit(vec![x]));
    let held = [submit(&batcher, hold.copy()), {
        gate.wait_entered(1);
        submit(&batcher, hold.copy())
    }];
    gate.wait_entered(2);
    let inputs: Vec<Tensor> = (0..24).map(|_| randn(1)).collect();
    let threads: Vec<_> = (0..4)
        .map(|t| {
            let batcher = Arc::clone(&batcher);
            let mine: Vec<Tensor> = inputs[t * 6..t * 6 + 6]
                .iter()
                .map(Tensor::shallow_clone)
                .collect();
            thread::spawn(move || {
                let tickets: Vec<(Tensor, Ticket)> = mine
                    .into_iter()
                    .map(|x| (x.shallow_clone(), submit(&batcher, x)))
                    .collect();
                tickets
                    .into_iter()
                    .map(|(x, t)| (x, t.wait().unwrap()))
                    .collect::<Vec<_>>()
            })
        })
        .collect();
    let t = Instant::now();
    while batcher.stats().submitted < 26 {
        assert!(t.elapsed() < Duration::from_secs(30));
        thread::sleep(Duration::from_millis(1));
    }
    gate.open();
    for h in held {
        answer(h).unwrap();
    }
    let answers: Vec<(Tensor, Vec<Tensor>)> = threads
        .into_iter()
        .flat_map(|h| h.join().unwrap())
        .collect();

    let forwards = forwards.lock().unwrap();
    let replicas: BTreeSet<usize> = forwards.iter().map(|(i, _, _)| *i).collect();
    assert_eq!(
        replicas,
        BTreeSet::from([0, 1]),
        "each worker on its own replica"
    );
    for (_, x, y) in forwards.iter() {
        assert!(y.equal(&direct(&net, x)), "a replica's forward differs");
    }
    assert_eq!(answers.len(), 24);
    for (x, y) in &answers {
        assert_eq!(y.len(), 1);
        assert!(y[0].is_inference(), "computed in inference mode");
        // The forward that computed it, and its row there.
        let (batch, row) = forwards
            .iter()
            .find_map(|(_, xs, _)| {
                (0..xs.size()[0])
                    .find(|&i| xs.narrow(0, i, 1).equal(x))
                    .map(|i| (xs, i))
            })
            .expect("every request was computed");
        let want = direct(&net, batch).narrow(0, row, 1);
        assert!(
            y[0].equal(&want),
            "an answer differs from the direct forward"
        );
        // Alone, the forward differs at most by the matmul's rounding.
        assert!(max_diff(&y[0], &direct(&net, x)) <= 1e-5);
    }
    let s = batcher.stats();
    assert_eq!(s.inferences, 26);
    assert_eq!(s.largest_batch, 8, "{s:?}");
}

#[test]
fn a_replica_factory_error_is_a_load_error_naming_the_replica() {
    let (vs, _net) = trained();
    let made = Replicas::new(3, |i| {
        if i == 2 {
            // A module whose variables the trained store lacks.
            let mut other = nn::VarStore::new(Device::Cpu);
            let net = nn::seq().add(nn::linear(other.root() / "x", IN, 2, Default::default()));
            other.copy(&vs)?;
            Ok(WithMode::new(net))
        } else {
            replica(&vs)
        }
    });
    let e = made.unwrap_err();
    assert_eq!(e.stage(), tch_scope::Stage::Load);
    assert!(
        e.to_string()
            .starts_with("cannot load `Replicas`: replica 2 of 3: "),
        "{e}"
    );
    let e = Replicas::new(0, |_| replica(&vs)).unwrap_err();
    assert_eq!(e.stage(), tch_scope::Stage::Load);
    assert!(e.to_string().contains("at least one replica"), "{e}");
}

#[test]
fn a_replica_whose_forward_panicked_serves_on() {
    let (vs, net) = trained();
    let served = Inference::replicated(1, |_| replica(&vs)).unwrap();
    let x = randn(2);
    let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        served.run(|r| {
            let _m = r.get();
            panic!("a forward panics holding its replica");
        })
    }));
    assert!(panicked.is_err());
    let y = served.run(|r| r.get().forward(&x));
    assert!(y.equal(&direct(&net, &x)));
}
