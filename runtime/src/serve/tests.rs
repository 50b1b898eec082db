//! The server in process: a model given as any [`Batcher`] served over the
//! protocol on loopback, and the errors of a server that cannot start.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::Arc;

use tch::Tensor;

use super::oip::Datatype;
use super::{Engine, PLATFORM_TCH_SCOPE, Server, model_name};
use crate::batch::{BatchOptions, Batcher};
use crate::{Inference, WithMode};

#[derive(Debug)]
struct Double;

impl tch::nn::Module for Double {
    fn forward(&self, x: &Tensor) -> Tensor {
        x * 2
    }
}

pub(super) fn double_engine() -> Engine {
    let served = Arc::new(Inference::new(WithMode::new(Double)).unwrap());
    let batcher = Batcher::new(served, BatchOptions::new(), |m, xs| {
        Ok(vec![m.forward(&xs[0])])
    })
    .unwrap();
    Engine::new(batcher)
}

/// One request on its own connection: the status line and the body.
fn request(addr: std::net::SocketAddr, head: &str, body: &str) -> (String, String) {
    let mut s = TcpStream::connect(addr).unwrap();
    write!(
        s,
        "{head} HTTP/1.1\r\nhost: x\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).unwrap();
    let (top, body) = text.split_once("\r\n\r\n").unwrap();
    (top.lines().next().unwrap().to_owned(), body.to_owned())
}

#[test]
fn serve_a_batcher_of_any_model_over_the_protocol_and_stop() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let listening = Server::new("double", double_engine())
            .input(Datatype::Fp32, &[-1, 3])
            .bind("127.0.0.1:0".parse().unwrap())
            .await
            .unwrap();
        let addr = listening.local_addr();
        let meta = listening.metadata();
        assert_eq!(meta.platform, PLATFORM_TCH_SCOPE);
        assert_eq!(meta.outputs[0].shape, vec![-1, 3], "from the warm-up");
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let server = tokio::spawn(listening.serve_until(async {
            let _ = stopped.await;
        }));
        let client = tokio::task::spawn_blocking(move || {
            let body = r#"{"inputs":[{"name":"input__0","datatype":"FP32","shape":[1,3],"data":[1,2,3.5]}]}"#;
            let ok = request(addr, "POST /v2/models/double/infer", body);
            let other = request(addr, "GET /v2/models/single", "");
            (ok, other)
        })
        .await
        .unwrap();
        let ((status, body), (other, other_body)) = client;
        assert!(status.contains("200"), "{status} {body}");
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(v["outputs"][0]["data"], serde_json::json!([2.0, 4.0, 7.0]));
        assert!(other.contains("404") && other_body.contains("single"), "{other} {other_body}");
        stop.send(()).unwrap();
        server.await.unwrap().unwrap();
    });
}

#[test]
fn a_model_that_declares_no_inputs_needs_them_given() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let e = rt
        .block_on(Server::new("double", double_engine()).bind("127.0.0.1:0".parse().unwrap()))
        .unwrap_err();
    assert!(e.to_string().contains("declares no inputs"), "{e}");
}

#[test]
fn a_models_default_name_is_its_files_stem() {
    assert_eq!(model_name("models/mlp.pt"), "mlp");
    assert_eq!(model_name("serve_mlp.pt2"), "serve_mlp");
}

/// A `tch::nn` model trained here (`Send`, not `Sync`), served in
/// replicas through a batcher: its answer over the protocol (JSON) is its
/// direct forward's, bitwise.
#[test]
fn a_model_trained_in_rust_is_served_over_the_protocol_bitwise() {
    use tch::nn::{self, Module, OptimizerConfig};
    use tch::{Device, Kind};

    tch::manual_seed(7);
    let trained = nn::VarStore::new(Device::Cpu);
    let net = nn::linear(trained.root() / "fc", 4, 2, nn::LinearConfig::default());
    let mut opt = nn::Sgd::default().build(&trained, 0.1).unwrap();
    for _ in 0..5 {
        let x = Tensor::randn([8, 4], (Kind::Float, Device::Cpu));
        let loss = net.forward(&x).pow_tensor_scalar(2).mean(Kind::Float);
        opt.backward_step(&loss);
    }
    let served = Inference::replicated(2, |_| {
        let mut vs = nn::VarStore::new(Device::Cpu);
        let replica = nn::linear(vs.root() / "fc", 4, 2, nn::LinearConfig::default());
        vs.copy(&trained)?;
        Ok::<_, tch::TchError>(WithMode::new(replica))
    })
    .unwrap();
    let batcher = Batcher::new(Arc::new(served), BatchOptions::new().workers(2), |r, xs| {
        Ok(vec![r.get().forward(&xs[0])])
    })
    .unwrap();
    let x = Tensor::randn([3, 4], (Kind::Float, Device::Cpu));
    let want = tch::no_grad(|| net.forward(&x));
    let want: Vec<f32> = Vec::try_from(want.flatten(0, -1)).unwrap();
    let data: Vec<f32> = Vec::try_from(x.flatten(0, -1)).unwrap();

    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let listening = Server::new("trained", Engine::new(batcher))
            .input(Datatype::Fp32, &[-1, 4])
            .bind("127.0.0.1:0".parse().unwrap())
            .await
            .unwrap();
        let addr = listening.local_addr();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let server = tokio::spawn(listening.serve_until(async {
            let _ = stopped.await;
        }));
        let (status, body) = tokio::task::spawn_blocking(move || {
            let body = serde_json::json!({
                "inputs": [{"name": "input__0", "datatype": "FP32", "shape": [3, 4], "data": data}],
            });
            request(addr, "POST /v2/models/trained/infer", &body.to_string())
        })
        .await
        .unwrap();
        assert!(status.contains("200"), "{status} {body}");
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        let got: Vec<f32> = v["outputs"][0]["data"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| f.as_f64().unwrap() as f32)
            .collect();
        let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&got), bits(&want));
        stop.send(()).unwrap();
        server.await.unwrap().unwrap();
    });
}

/// A batcher's errors as a client's statuses: a deadline that passed in
/// the queue or ended the forward is 504, the model's own error on the
/// input 422 (its last line for the client), running out of memory and a
/// panic 500, a full queue and no worker 503.
#[test]
fn batch_errors_map_to_the_statuses_a_client_can_act_on() {
    use super::engine::{batch_message, batch_status};
    use crate::ScopeError;
    use crate::batch::BatchError;
    let run = |reason: &str| BatchError::Failed(ScopeError::run("CModule::forward", None, reason));
    let refused = run("Traceback …\n  raise …\nbuiltins.RuntimeError: rows must be positive\n");
    assert_eq!(batch_status(&refused), 422);
    assert_eq!(
        batch_message(&refused),
        "the model refused the input: builtins.RuntimeError: rows must be positive"
    );
    assert_eq!(
        batch_status(&run("DefaultCPUAllocator: can't allocate memory")),
        500
    );
    assert_eq!(
        batch_status(&run("CUDA out of memory. Tried to allocate")),
        500
    );
    let ended = BatchError::Failed(ScopeError::ended(
        "deadline",
        None,
        "deadline passed 3 ms ago at aten::add",
    ));
    assert_eq!(batch_status(&ended), 504);
    assert_eq!(
        batch_message(&ended),
        "deadline passed 3 ms ago at aten::add"
    );
    let waited = std::time::Duration::from_millis(5);
    assert_eq!(batch_status(&BatchError::Expired { waited }), 504);
    assert_eq!(batch_status(&BatchError::QueueFull { limit: 1 }), 503);
    assert_eq!(batch_status(&BatchError::Closed), 503);
    assert_eq!(batch_status(&BatchError::Panicked("boom".into())), 500);
    let entering = BatchError::Failed(ScopeError::new("with(ctx)", None, "no such device"));
    assert_eq!(batch_status(&entering), 500);
}
