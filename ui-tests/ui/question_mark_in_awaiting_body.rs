use tch_scope::scoped;

async fn load() -> Result<f64, std::io::Error> {
    Ok(1.0)
}

async fn run() -> Result<f64, std::io::Error> {
    let doubled = scoped!(no_grad => {
        let x = load().await?;
        x * 2.0
    });
    Ok(doubled)
}

// `?` in a closure or an async block of the body belongs to them: no error.
async fn nested() -> Result<f64, std::io::Error> {
    let n = scoped!(no_grad => {
        let parse = |s: &str| -> Result<i32, std::num::ParseIntError> { Ok(s.parse::<i32>()? + 1) };
        let inner = async { Ok::<f64, std::io::Error>(load().await? + 1.0) }.await;
        load().await.map(|x| x + f64::from(parse("1").unwrap_or(0)) + inner.unwrap_or(0.0))
    })?;
    Ok(n)
}

fn main() {
    let _ = run();
    let _ = nested();
}
