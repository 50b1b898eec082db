//! PyTorch's eval rows for the default model (`serve_mlp.json`, written
//! with the `.pt2` packages by scripts/export_pt2.py), and answers held
//! to them.

use super::pt2::packages;

/// Floats from their bit patterns (JSON int32s: exact).
pub(crate) fn floats_of_bits(v: &serde_json::Value) -> Vec<f32> {
    v.as_array()
        .expect("an array of bit patterns")
        .iter()
        .map(|b| f32::from_bits(b.as_i64().expect("an int32") as i32 as u32))
        .collect()
}

/// A JSON array of numbers as `f32`s (as the servers' `data` carries
/// them).
pub(crate) fn floats_of_json(v: &serde_json::Value) -> Vec<f32> {
    v.as_array()
        .unwrap_or_else(|| panic!("not an array: {v}"))
        .iter()
        .map(|f| f.as_f64().expect("a number") as f32)
        .collect()
}

/// Rows of floats.
pub(crate) type Rows = Vec<Vec<f32>>;

/// PyTorch's eval rows for the default model (`serve_mlp.json`, written
/// by scripts/export_pt2.py with the bootstrap's PyTorch): the input rows
/// and their outputs, or `None` (and a note) without it.
pub(crate) fn eager_rows() -> Option<(Rows, Rows)> {
    let dir = packages()?;
    let j: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(dir.join("serve_mlp.json")).expect("serve_mlp.json"),
    )
    .expect("JSON");
    assert_eq!(j["input_shape"], serde_json::json!([3, 32]), "{j}");
    assert_eq!(j["output_shape"], serde_json::json!([3, 8]), "{j}");
    let x = floats_of_bits(&j["input_bits"]);
    let y = floats_of_bits(&j["eager_bits"]);
    Some((
        x.chunks(32).map(<[f32]>::to_vec).collect(),
        y.chunks(8).map(<[f32]>::to_vec).collect(),
    ))
}

pub(crate) fn body_of(rows: &[Vec<f32>]) -> String {
    let data: Vec<f32> = rows.concat();
    serde_json::json!({ "shape": [rows.len(), 32], "data": data }).to_string()
}

pub(crate) fn assert_rows_close(v: &serde_json::Value, want: &[Vec<f32>], what: &str) {
    assert_eq!(
        v["shape"],
        serde_json::json!([want.len(), 8]),
        "{what}: {v}"
    );
    let got = floats_of_json(&v["data"]);
    let want = want.concat();
    assert_eq!(got.len(), want.len(), "{what}: {v}");
    for (i, (g, e)) in got.iter().zip(&want).enumerate() {
        assert!(
            (g - e).abs() <= 1e-5,
            "{what}: data[{i}] = {g}, PyTorch's eval row says {e}"
        );
    }
}
