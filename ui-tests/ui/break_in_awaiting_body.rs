use tch_scope::scoped;

async fn step() {}

async fn run() {
    loop {
        scoped!(no_grad => {
            step().await;
            break;
        })
    }
}

fn main() {
    let _ = run();
}
