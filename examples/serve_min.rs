//! A model served over the Open Inference Protocol (`/v2/…`) and plain
//! JSON (`/predict`), batched: `serve_min MODEL [ADDR] [INPUT_SHAPE]`, e.g.
//! `serve_min mlp.pt 127.0.0.1:8000 -1,64` (a `.pt2` declares its shape).
use tch_scope::batch::BatchOptions;
use tch_scope::serve::{Engine, Server, model_name, oip::Datatype};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let path = args
        .next()
        .ok_or("usage: serve_min MODEL [ADDR] [INPUT_SHAPE]")?;
    let addr = args.next().unwrap_or_else(|| "127.0.0.1:8000".into());
    let engine = Engine::load(&path, BatchOptions::new().max_batch(32))?;
    let mut server = Server::new(model_name(&path), engine);
    if let Some(shape) = args.next() {
        let dims = shape
            .split(',')
            .map(str::parse)
            .collect::<Result<Vec<i64>, _>>()?;
        server = server.input(Datatype::Fp32, &dims);
    }
    let listening = server.bind(addr.parse()?).await?;
    println!("listening on http://{}", listening.local_addr());
    listening.serve().await?;
    Ok(())
}
