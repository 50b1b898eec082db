//! Exact `f32` arrays in JSON, shared by `serve` and `load`.
//!
//! serde_json reads an `f32` as an `f64` and then rounds it again, which
//! can land one ulp off the `f32` the text denotes; the server's outputs
//! are compared bit for bit, so both sides read each number straight into
//! an `f32` (Rust's parser rounds once, correctly) from the array's raw
//! JSON text.

/// The numbers of a JSON array (`raw` is the array's JSON text, already
/// checked to be valid JSON by serde_json): `Err` names the first element
/// that is not a finite number representable as an `f32`.
pub fn parse_f32_array(raw: &str) -> Result<Vec<f32>, String> {
    let inner = raw
        .trim()
        .strip_prefix('[')
        .and_then(|r| r.strip_suffix(']'))
        .ok_or_else(|| "`data` must be an array of numbers".to_string())?;
    if inner.trim().is_empty() {
        return Ok(Vec::new());
    }
    // Valid JSON: an element with a comma inside (a string, an array, an
    // object) splits into pieces that are not numbers, and is refused.
    inner
        .split(',')
        .enumerate()
        .map(|(i, item)| {
            let item = item.trim();
            match item.parse::<f32>() {
                Ok(v) if v.is_finite() => Ok(v),
                Ok(_) => Err(format!("data[{i}] = {item} is out of the f32 range")),
                Err(_) => Err(format!("data[{i}] is not a number: {}", clip(item))),
            }
        })
        .collect()
}

fn clip(s: &str) -> String {
    if s.chars().count() > 40 {
        format!("{}…", s.chars().take(40).collect::<String>())
    } else {
        s.to_string()
    }
}
