//! Every route and error of the Open Inference Protocol over raw HTTP,
//! bytes in and out.

use super::super::{Server, floats_of_json, http_bytes};
use super::Reference;

/// An answer: status, headers (lowercase names) and the body's bytes.
struct Answer {
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Answer {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&self.body)))
    }

    /// The `{"error": …}` message of an error answer.
    fn error(&self) -> String {
        let v = self.json();
        let m = v["error"]
            .as_str()
            .unwrap_or_else(|| panic!("no error: {v}"));
        assert!(!m.is_empty(), "an empty error");
        m.to_owned()
    }
}

/// One HTTP/1.1 request on its own connection, bytes in and out.
fn raw(addr: &str, method: &str, path: &str, headers: &[(&str, &str)], body: &[u8]) -> Answer {
    let (status, headers, body) = http_bytes(addr, method, path, headers, body);
    Answer {
        status,
        headers,
        body,
    }
}

fn le_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|f| f.to_le_bytes()).collect()
}

fn floats_of_le(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

/// Every route and error over raw HTTP; `library`: the library's own
/// server (its fallback 404 and its `/metrics` too).
pub(super) fn drive_raw(
    server: &Server,
    model: &str,
    platform: &str,
    r: &Reference,
    library: bool,
) {
    let addr = server.addr.as_str();
    let get = |path: &str| raw(addr, "GET", path, &[], b"");
    for path in ["/v2/health/live", "/v2/health/ready", "/healthz", "/readyz"] {
        assert_eq!(get(path).status, 200, "{path}");
    }
    let server_meta = get("/v2");
    assert_eq!(server_meta.status, 200);
    assert_eq!(
        server_meta.json()["extensions"],
        serde_json::json!(["binary_tensor_data"])
    );

    let meta = get(&format!("/v2/models/{model}"));
    assert_eq!(meta.status, 200);
    assert_eq!(
        meta.json(),
        serde_json::json!({
            "name": model, "versions": ["1"], "platform": platform,
            "inputs": [{"name": "input__0", "datatype": "FP32", "shape": [-1, r.features]}],
            "outputs": [{"name": "output__0", "datatype": "FP32", "shape": [-1, r.outs()]}],
        })
    );
    assert_eq!(get(&format!("/v2/models/{model}/versions/1")).status, 200);
    assert_eq!(get(&format!("/v2/models/{model}/ready")).status, 200);
    assert_eq!(
        get(&format!("/v2/models/{model}/versions/1/ready")).status,
        200
    );
    for path in [
        "/v2/models/no_such_model",
        "/v2/models/no_such_model/ready",
        &format!("/v2/models/{model}/versions/2"),
    ] {
        let a = get(path);
        assert_eq!(a.status, 404, "{path}");
        assert!(
            a.error().contains("no_such_model") || a.error().contains('2'),
            "{path}"
        );
    }
    if library {
        assert_eq!(get("/no/such/route").status, 404);
        assert!(!get("/no/such/route").error().is_empty());
    }

    let infer = format!("/v2/models/{model}/infer");
    let shape = serde_json::json!([r.rows(), r.features]);
    let json_body = |name: &str, datatype: &str, shape: &serde_json::Value, data: &[f32]| {
        serde_json::json!({"inputs": [{"name": name, "datatype": datatype, "shape": shape, "data": data}]})
            .to_string()
    };
    // JSON in and out.
    let a = raw(
        addr,
        "POST",
        &infer,
        &[],
        json_body("input__0", "FP32", &shape, &r.x).as_bytes(),
    );
    assert_eq!(a.status, 200, "{}", String::from_utf8_lossy(&a.body));
    let v = a.json();
    assert_eq!(v["model_name"], model);
    assert_eq!(v["outputs"][0]["name"], "output__0");
    assert_eq!(v["outputs"][0]["datatype"], "FP32");
    assert_eq!(
        v["outputs"][0]["shape"],
        serde_json::json!([r.rows(), r.outs()])
    );
    r.check(&floats_of_json(&v["outputs"][0]["data"]), "JSON");
    let from_json = floats_of_json(&v["outputs"][0]["data"]);

    // Binary in and out.
    let header = serde_json::json!({
        "inputs": [{"name": "input__0", "datatype": "FP32", "shape": shape,
                    "parameters": {"binary_data_size": r.x.len() * 4}}],
        "outputs": [{"name": "output__0", "parameters": {"binary_data": true}}],
    })
    .to_string();
    let mut body = header.clone().into_bytes();
    body.extend(le_bytes(&r.x));
    let length = header.len().to_string();
    let a = raw(
        addr,
        "POST",
        &infer,
        &[("inference-header-content-length", &length)],
        &body,
    );
    assert_eq!(a.status, 200, "{}", String::from_utf8_lossy(&a.body));
    let n: usize = a
        .header("inference-header-content-length")
        .expect("the binary answer's header length")
        .parse()
        .expect("a length");
    let head: serde_json::Value = serde_json::from_slice(&a.body[..n]).expect("its JSON header");
    assert_eq!(
        head["outputs"][0]["parameters"]["binary_data_size"],
        r.y.len() * 4
    );
    let from_binary = floats_of_le(&a.body[n..]);
    r.check(&from_binary, "binary");
    assert_eq!(
        le_bytes(&from_binary),
        le_bytes(&from_json),
        "binary and JSON answers differ"
    );

    // The plain JSON route answers the same.
    let predict = serde_json::json!({"shape": shape, "data": r.x}).to_string();
    let a = raw(
        addr,
        "POST",
        "/predict",
        &[("content-type", "application/json")],
        predict.as_bytes(),
    );
    assert_eq!(a.status, 200, "{}", String::from_utf8_lossy(&a.body));
    r.check(&floats_of_json(&a.json()["data"]), "/predict");

    // Errors.
    let bad = |body: String, headers: &[(&str, &str)], path: &str| {
        let a = raw(addr, "POST", path, headers, body.as_bytes());
        (a.status, a.error())
    };
    let good = json_body("input__0", "FP32", &shape, &r.x);
    let (s, m) = bad(good.clone(), &[], "/v2/models/no_such_model/infer");
    assert!(s == 404 && m.contains("no_such_model"), "{s} {m}");
    let (s, m) = bad(json_body("input__1", "FP32", &shape, &r.x), &[], &infer);
    assert!(s == 400 && m.contains("input__1"), "{s} {m}");
    let (s, m) = bad(
        json_body("input__0", "INT32", &shape, &[0.0; 0]),
        &[],
        &infer,
    );
    assert_eq!(s, 400, "{m}");
    let ints = serde_json::json!({"inputs": [{"name": "input__0", "datatype": "INT32",
        "shape": shape, "data": vec![1; r.x.len()]}]});
    let (s, m) = bad(ints.to_string(), &[], &infer);
    assert!(s == 400 && m.contains("INT32"), "{s} {m}");
    let narrow = serde_json::json!([r.rows(), r.features - 1]);
    let (s, m) = bad(
        json_body(
            "input__0",
            "FP32",
            &narrow,
            &r.x[..r.rows() * (r.features - 1)],
        ),
        &[],
        &infer,
    );
    assert!(
        s == 400 && m.contains(&(r.features - 1).to_string()),
        "{s} {m}"
    );
    let (s, m) = bad("{not json".into(), &[], &infer);
    assert_eq!(s, 400, "{m}");
    let (s, m) = bad(good.clone(), &[("x-deadline-ms", "soon")], &infer);
    assert!(s == 400 && m.contains("x-deadline-ms"), "{s} {m}");
    // Deadlines passed before the forward: never computed.
    let (s, m) = bad(good.clone(), &[("x-deadline-ms", "0")], &infer);
    assert!(s == 504 && m.contains("deadline"), "{s} {m}");
    let mut timed: serde_json::Value = serde_json::from_str(&good).unwrap();
    timed["parameters"] = serde_json::json!({"timeout": 1});
    let (s, m) = bad(timed.to_string(), &[], &infer);
    assert!(s == 504 && m.contains("deadline"), "{s} {m}");

    if !library {
        return;
    }
    let metrics = String::from_utf8(get("/metrics").body).expect("text");
    super::super::metrics::promtool_check(&metrics);
    assert!(
        metrics.contains("serve_requests_total{route=\"infer\",status=\"200\"}")
            && metrics.contains("serve_requests_total{route=\"infer\",status=\"400\"}"),
        "{metrics}"
    );
}
