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
///
/// One pass over the bytes: each element's text is what lies between
/// commas, less JSON's whitespace. An element that is not a number (a
/// string, an array, an object: valid JSON, so its commas split it into
/// pieces that are not numbers either) is refused.
pub fn parse_f32_array(raw: &str) -> Result<Vec<f32>, String> {
    let inner = raw
        .trim()
        .strip_prefix('[')
        .and_then(|r| r.strip_suffix(']'))
        .ok_or_else(|| "`data` must be an array of numbers".to_string())?;
    let bytes = inner.as_bytes();
    let space = |b: u8| matches!(b, b' ' | b'\t' | b'\n' | b'\r');
    // A JSON number takes at least 2 bytes with its comma.
    let mut out = Vec::with_capacity(bytes.len() / 2 + 1);
    let mut i = 0;
    loop {
        while i < bytes.len() && space(bytes[i]) {
            i += 1;
        }
        if i == bytes.len() && out.is_empty() {
            return Ok(out);
        }
        let start = i;
        while i < bytes.len() && bytes[i] != b',' && !space(bytes[i]) {
            i += 1;
        }
        // Both ends sit on ASCII bytes (or the ends of `inner`): char
        // boundaries.
        let item = &inner[start..i];
        let k = out.len();
        match item.parse::<f32>() {
            Ok(v) if v.is_finite() => out.push(v),
            Ok(_) => return Err(format!("data[{k}] = {item} is out of the f32 range")),
            Err(_) => return Err(format!("data[{k}] is not a number: {}", clip(item))),
        }
        while i < bytes.len() && space(bytes[i]) {
            i += 1;
        }
        match bytes.get(i) {
            None => return Ok(out),
            Some(b',') => i += 1,
            // Valid JSON has a comma here; anything else is an element
            // that is not a number (e.g. the rest of a string).
            Some(_) => {
                return Err(format!(
                    "data[{k}] is not a number: {}",
                    clip(inner[start..].split(',').next().unwrap_or(item))
                ));
            }
        }
    }
}

fn clip(s: &str) -> String {
    if s.chars().count() > 40 {
        format!("{}…", s.chars().take(40).collect::<String>())
    } else {
        s.to_string()
    }
}
