//! The training loop and the server of `src/train.rs` and
//! `src/serving.rs`, from a user's crate: a run stopped at step 3 and
//! resumed ends bitwise where a run never stopped ends; the trained model,
//! served over the protocol from a spawned task, answers as a direct
//! forward does, bitwise.

use std::io::{Read, Write};
use std::net::TcpStream;

use std::sync::Mutex;

use tch::nn::{self, Module};
use tch::{Device, Tensor};

/// The generator is the process's: the run that seeds it and the model
/// that draws its init take turns.
static GENERATOR: Mutex<()> = Mutex::new(());

#[test]
fn a_run_resumed_at_step_3_ends_bitwise_as_one_never_stopped() {
    let _turn = GENERATOR
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let dir = std::env::temp_dir();
    let whole = dir.join(format!("downstream-whole-{}.ot", std::process::id()));
    let split = dir.join(format!("downstream-split-{}.ot", std::process::id()));
    let _ = std::fs::remove_file(&whole);
    let _ = std::fs::remove_file(&split);
    let never_stopped = downstream::train::train(&whole, 6).unwrap();
    let first = downstream::train::train(&split, 3).unwrap();
    assert_eq!(ts::Checkpoint::read(&split).unwrap().step, 3);
    let resumed = downstream::train::train(&split, 6).unwrap();
    assert_ne!(first, never_stopped, "three steps are not six");
    let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
    assert_eq!(bits(&resumed), bits(&never_stopped));
    std::fs::remove_file(&whole).unwrap();
    std::fs::remove_file(&split).unwrap();
}

#[test]
fn a_model_trained_in_rust_is_served_from_a_spawned_task_bitwise() {
    // The replicas draw their init too (then copy the trained weights).
    let _turn = GENERATOR
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let trained = nn::VarStore::new(Device::Cpu);
    let net = nn::linear(trained.root() / "fc", 3, 1, nn::LinearConfig::default());
    let x = Tensor::from_slice(&[0.5f32, -1.0, 2.0, 1.5, 0.25, -3.0]).reshape([2, 3]);
    let want: Vec<f32> = Vec::try_from(tch::no_grad(|| net.forward(&x)).flatten(0, -1)).unwrap();

    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let (ready, addr) = tokio::sync::oneshot::channel();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = rt.spawn(async move {
        downstream::serving::serve_trained(&trained, ready, async {
            let _ = stopped.await;
        })
        .await
    });
    let addr = rt.block_on(addr).expect("the server says where it listens");
    let body = r#"{"inputs": [{"name": "input__0", "datatype": "FP32", "shape": [2, 3], "data": [0.5, -1.0, 2.0, 1.5, 0.25, -3.0]}]}"#;
    let mut s = TcpStream::connect(addr).unwrap();
    write!(
        s,
        "POST /v2/models/trained/infer HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).unwrap();
    let (head, body) = text.split_once("\r\n\r\n").unwrap();
    assert!(head.starts_with("HTTP/1.1 200"), "{text}");
    let v: serde_json::Value = serde_json::from_str(body).unwrap();
    #[allow(clippy::cast_possible_truncation)]
    let got: Vec<f32> = v["outputs"][0]["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f.as_f64().unwrap() as f32)
        .collect();
    let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
    assert_eq!(bits(&got), bits(&want));
    assert_eq!(v["outputs"][0]["shape"], serde_json::json!([2, 1]));
    stop.send(()).unwrap();
    rt.block_on(server).unwrap().unwrap();
}
