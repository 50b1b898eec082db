//! Requests submitted with grad mode on: what a request can do with its
//! answer (here, `backward`) never depends on what else was queued.

use super::*;

/// The parameters' gradients, copied (zeros where none), then cleared.
fn take_grads(m: &CModule) -> Vec<Tensor> {
    m.named_parameters()
        .unwrap()
        .into_iter()
        .map(|(_, p)| {
            let mut g = p.grad();
            if g.defined() {
                let copy = g.copy();
                let _ = g.zero_();
                copy
            } else {
                p.zeros_like()
            }
        })
        .collect()
}

#[test]
fn grad_mode_requests_run_alone_and_each_answer_has_its_own_graph() {
    let served = Arc::new(Inference::new(CModule::load(data("serve_mlp.pt")).unwrap()).unwrap());
    let gate = Arc::new(Gate::default());
    let sizes = Arc::new(Mutex::new(Vec::new()));
    let (g, s) = (Arc::clone(&gate), Arc::clone(&sizes));
    let options = BatchOptions::new().workers(1).max_delay(Duration::ZERO);
    let batcher = Batcher::new(Arc::clone(&served), options, move |m, xs| {
        if xs[0].double_value(&[0, 0]) == -1.0 {
            g.pass();
        }
        s.lock().unwrap().push((xs[0].size()[0], is_grad_enabled()));
        cmodule_forward(m, xs)
    })
    .unwrap();
    let _open = OpenOnDrop(Arc::clone(&gate));
    let held = scoped!(inference_mode => batcher.submit(vec![Tensor::full(
        [1, 32],
        -1.0,
        (Kind::Float, Device::Cpu)
    )]));
    gate.wait_entered(1);

    // Four requests of one state and shape with grad mode on, queued
    // together behind the held one: once, they would have shared a batch.
    tch::manual_seed(11);
    let xs: Vec<Tensor> = (0..4)
        .map(|_| Tensor::randn([2, 32], (Kind::Float, Device::Cpu)).set_requires_grad(true))
        .collect();
    assert!(is_grad_enabled() && !is_inference_mode_enabled());
    let tickets: Vec<Ticket> = xs
        .iter()
        .map(|x| batcher.submit(vec![x.shallow_clone()]))
        .collect();
    gate.open();
    answer(held).unwrap();
    let model = served.get_ref();
    let _ = take_grads(model);
    for (k, t) in tickets.into_iter().enumerate() {
        let y = answer(t).unwrap();
        assert!(y[0].requires_grad(), "request {k}: no graph");
        y[0].sum(Kind::Float)
            .f_backward()
            .unwrap_or_else(|e| panic!("request {k}: backward failed: {e}"));
    }
    let batched = take_grads(model);

    // The reference: each request computed directly, with grad mode on.
    for (k, x) in xs.iter().enumerate() {
        let direct = x.detach().set_requires_grad(true);
        let y = model.forward_ts(&[&direct]).unwrap();
        y.sum(Kind::Float).backward();
        let d = max_diff(&x.grad(), &direct.grad());
        assert!(d <= 1e-6, "request {k}: input gradient differs by {d}");
    }
    let direct = take_grads(model);
    assert_eq!(batched.len(), direct.len());
    for (a, b) in batched.iter().zip(&direct) {
        assert!(a.abs().sum(Kind::Float).double_value(&[]) > 0.0);
        let d = max_diff(a, b);
        assert!(d <= 1e-5, "parameter gradients differ by {d}");
    }
    assert_eq!(
        *sizes.lock().unwrap(),
        [(1, false), (2, true), (2, true), (2, true), (2, true)],
        "the held one, then each grad-mode request alone"
    );
    assert_eq!(batcher.stats().largest_batch, 1);
}

#[test]
fn a_request_from_a_plain_thread_is_computed_in_inference_mode() {
    let served = Arc::new(Inference::new(CModule::load(data("serve_mlp.pt")).unwrap()).unwrap());
    let gate = Arc::new(Gate::default());
    let seen = Arc::new(Mutex::new(Vec::new()));
    let (g, s) = (Arc::clone(&gate), Arc::clone(&seen));
    let options = BatchOptions::new().workers(1).max_delay(Duration::ZERO);
    let batcher = Batcher::new(Arc::clone(&served), options, move |m, xs| {
        if xs[0].double_value(&[0, 0]) == -1.0 {
            g.pass();
        }
        s.lock().unwrap().push((
            xs[0].size()[0],
            is_grad_enabled(),
            is_inference_mode_enabled(),
        ));
        cmodule_forward(m, xs)
    })
    .unwrap();
    let _open = OpenOnDrop(Arc::clone(&gate));

    // A plain thread: grad mode on, no scope open, inputs that need no
    // gradient. The parameters do, so a forward with grad mode would
    // build a graph through them.
    assert!(is_grad_enabled() && !is_inference_mode_enabled());
    let held = batcher.submit(vec![Tensor::full(
        [1, 32],
        -1.0,
        (Kind::Float, Device::Cpu),
    )]);
    gate.wait_entered(1);
    tch::manual_seed(12);
    let xs: Vec<Tensor> = (0..4)
        .map(|_| Tensor::randn([2, 32], (Kind::Float, Device::Cpu)))
        .collect();
    let tickets: Vec<Ticket> = xs
        .iter()
        .map(|x| batcher.submit(vec![x.shallow_clone()]))
        .collect();
    // An input that requires grad asks for a graph: computed with grad
    // mode, alone.
    let wants_grad = Tensor::randn([2, 32], (Kind::Float, Device::Cpu)).set_requires_grad(true);
    let with_grad = batcher.submit(vec![wants_grad.shallow_clone()]);
    gate.open();

    let y = answer(held).unwrap();
    assert!(y[0].is_inference(), "a lone request too");
    let batched: Vec<Tensor> = tickets
        .into_iter()
        .map(|t| answer(t).unwrap().remove(0))
        .collect();
    let all = served.run(|m| m.forward_ts(&[Tensor::cat(&xs, 0)]).unwrap());
    for (k, y) in batched.iter().enumerate() {
        assert!(y.is_inference(), "request {k}: not an inference tensor");
        assert!(!y.requires_grad(), "request {k}: a graph was built");
        let k = i64::try_from(k).unwrap();
        assert!(y.equal(&all.narrow(0, 2 * k, 2)), "request {k} differs");
    }
    let g = answer(with_grad).unwrap().remove(0);
    assert!(!g.is_inference() && g.requires_grad(), "no graph");
    g.sum(Kind::Float).backward();
    assert!(wants_grad.grad().defined());
    let _ = take_grads(served.get_ref());

    assert_eq!(
        *seen.lock().unwrap(),
        [(1, false, true), (8, false, true), (2, true, false)],
        "the held one, the plain requests in one batch in inference mode, the grad one alone"
    );
}
