//! The serving library (`tch_scope::serve`) as a user runs it:
//! examples/serve_min.rs (its 30 lines) as a process on loopback, serving
//! a TorchScript file and a `.pt2` package over the Open Inference
//! Protocol, driven by the protocol's own client (`tritonclient[http]`,
//! tests/serve/oip_client.py, JSON and binary both ways) and by raw HTTP on
//! every route and error; answers compared with PyTorch's eval output
//! (bitwise for the TorchScript file: the same file run by the same
//! libtorch). Where the tritonclient venv or PyTorch's python cannot be
//! had, the parts that need them print why and are skipped.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

use super::{Server, floats_of_bits, pt2::packages, spawn, workspace};

#[path = "oip_raw.rs"]
mod raw;
use raw::drive_raw;

/// examples/serve_min beside the test's binary (see `bins`).
fn serve_min() -> PathBuf {
    let exe = std::env::current_exe().expect("the test's path");
    let path = exe
        .parent()
        .and_then(Path::parent)
        .expect("target/<profile>")
        .join("examples")
        .join("serve_min");
    assert!(
        path.is_file(),
        "no {} — build it first: cargo build -p examples --example serve_min",
        path.display()
    );
    path
}

/// `serve_min MODEL 127.0.0.1:0 [SHAPE]`, once it says where it listens.
fn start_min(model: &Path, shape: Option<&str>) -> Server {
    let mut cmd = Command::new(serve_min());
    cmd.arg(model).arg("127.0.0.1:0").args(shape);
    spawn(cmd, "serve_min")
}

/// The reference: an input and the model's eval output for it.
struct Reference {
    x: Vec<f32>,
    y: Vec<f32>,
    features: usize,
    /// The server must answer `y` bitwise (else within 1e-5).
    exact: bool,
}

impl Reference {
    fn rows(&self) -> usize {
        self.x.len() / self.features
    }

    fn outs(&self) -> usize {
        self.y.len() / self.rows()
    }

    fn check(&self, got: &[f32], what: &str) {
        assert_eq!(got.len(), self.y.len(), "{what}");
        for (g, w) in got.iter().zip(&self.y) {
            if self.exact {
                assert_eq!(g.to_bits(), w.to_bits(), "{what}: {got:?} != {:?}", self.y);
            } else {
                assert!((g - w).abs() <= 1e-5, "{what}: {got:?} vs {:?}", self.y);
            }
        }
    }

    fn write(&self, path: &Path) {
        let bits = |v: &[f32]| v.iter().map(|f| f.to_bits() as i32).collect::<Vec<_>>();
        let j = serde_json::json!({
            "x": bits(&self.x), "y": bits(&self.y),
            "x_shape": [self.rows(), self.features], "y_shape": [self.rows(), self.outs()],
            "exact": self.exact, "tolerance": 1e-5,
        });
        std::fs::write(path, j.to_string()).expect("write the reference");
    }
}

/// PyTorch's python (`TCH_SCOPE_PYTHON`, or the bootstrap venv's).
fn torch_python() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("TCH_SCOPE_PYTHON") {
        return Some(p.into());
    }
    let torch = std::fs::canonicalize(workspace().join(".libtorch")).ok()?;
    let py = torch.join("../../../../bin/python");
    py.exists().then_some(py)
}

/// tests/data/serve_mlp.pt run by PyTorch in eval mode on 3 rows of
/// `torch.randn` (seed 0); `None` without PyTorch's python.
fn torchscript_reference(model: &Path) -> Option<Reference> {
    let Some(py) = torch_python() else {
        println!("skipped: no PyTorch python for the reference");
        return None;
    };
    let script = "import json, sys, torch\n\
        m = torch.jit.load(sys.argv[1]); m.eval()\n\
        x = torch.randn(3, 32, generator=torch.Generator().manual_seed(0))\n\
        with torch.inference_mode():\n    y = m(x)\n\
        bits = lambda t: t.contiguous().view(torch.int32).flatten().tolist()\n\
        print(json.dumps({'x': bits(x), 'y': bits(y)}))";
    let out = Command::new(&py)
        .args(["-c", script])
        .arg(model)
        .output()
        .expect("python runs");
    assert!(
        out.status.success(),
        "{py:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let j: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    Some(Reference {
        x: floats_of_bits(&j["x"]),
        y: floats_of_bits(&j["y"]),
        features: 32,
        exact: true,
    })
}

/// The tritonclient venv's python (scripts/bootstrap-tritonclient.sh), or
/// why there is none.
fn tritonclient() -> Result<&'static Path, &'static str> {
    static PY: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    PY.get_or_init(|| {
        let script = workspace().join("scripts/bootstrap-tritonclient.sh");
        let out = Command::new("bash")
            .arg(&script)
            .output()
            .map_err(|e| format!("cannot run {}: {e}", script.display()))?;
        if !out.status.success() {
            return Err(String::from_utf8_lossy(&out.stderr).trim().to_owned());
        }
        Ok(PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()))
    })
    .as_ref()
    .map(PathBuf::as_path)
    .map_err(String::as_str)
}

/// tests/serve/oip_client.py against the server.
fn drive_with_tritonclient(test: &str, server: &Server, model: &str, reference: &Reference) {
    let py = match tritonclient() {
        Ok(py) => py,
        Err(why) => {
            println!("{test}: the tritonclient part skipped: {why}");
            return;
        }
    };
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join("serve_oip")
        .join(test);
    std::fs::create_dir_all(&dir).expect("scratch directory");
    let ref_path = dir.join("reference.json");
    reference.write(&ref_path);
    let script = workspace().join("tests/serve/oip_client.py");
    let out = Command::new(py)
        .arg(&script)
        .arg(&server.addr)
        .arg(model)
        .arg(&ref_path)
        .output()
        .expect("python starts");
    assert!(
        out.status.success() && String::from_utf8_lossy(&out.stdout).trim() == "ok",
        "oip_client.py failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// SIGTERM: the server stops and exits 0.
fn stops_on_sigterm(mut server: Server) {
    server.sigterm();
    let status = server
        .exit_within(Duration::from_secs(30))
        .expect("serve_min exits within 30 s of SIGTERM");
    assert!(status.success(), "{status}: {}", server.stderr_text());
}

/// A user's 30-line program (examples/serve_min.rs) serves
/// tests/data/serve_mlp.pt, its input shape given on the command line:
/// every route and error over raw HTTP and through tritonclient, JSON and
/// binary, each answer bitwise PyTorch's eval output; SIGTERM ends it.
#[test]
fn serve_min_serves_a_torchscript_model_over_the_open_inference_protocol() {
    let model = workspace().join("tests/data/serve_mlp.pt");
    let Some(reference) = torchscript_reference(&model) else {
        return;
    };
    let server = start_min(&model, Some("-1,32"));
    drive_raw(&server, "serve_mlp", "pytorch_libtorch", &reference, true);
    drive_with_tritonclient("torchscript", &server, "serve_mlp", &reference);
    stops_on_sigterm(server);
}

/// The same program serves the `.pt2` export of that model with no shape
/// given (the package declares its own): metadata, routes and errors as
/// for TorchScript; answers within 1e-5 of eager PyTorch (another
/// compiler's kernels), JSON and binary equal bitwise.
#[test]
fn serve_min_serves_a_pt2_package_over_the_open_inference_protocol() {
    let Some(dir) = packages() else { return };
    let j: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(dir.join("serve_mlp.json")).expect("serve_mlp.json"),
    )
    .expect("JSON");
    let reference = Reference {
        x: floats_of_bits(&j["input_bits"]),
        y: floats_of_bits(&j["eager_bits"]),
        features: 32,
        exact: false,
    };
    let server = start_min(&dir.join("serve_mlp.pt2"), None);
    drive_raw(&server, "serve_mlp", "pytorch_aoti", &reference, true);
    drive_with_tritonclient("pt2", &server, "serve_mlp", &reference);
    stops_on_sigterm(server);
}

/// examples/serve.rs (batched) with `--input-shape` and `--name`: the
/// library's `/v2` routes over its own batcher, beside its `/predict`;
/// every route and error over raw HTTP and through tritonclient, each
/// answer bitwise PyTorch's eval output.
#[test]
fn the_example_server_speaks_the_open_inference_protocol_beside_its_json() {
    let model = workspace().join("tests/data/serve_mlp.pt");
    let Some(reference) = torchscript_reference(&model) else {
        return;
    };
    let server = super::start_as(false, false, &["--input-shape=-1,32", "--name", "mlp"]);
    drive_raw(&server, "mlp", "pytorch_libtorch", &reference, false);
    drive_with_tritonclient("example", &server, "mlp", &reference);
}
