use tch_scope::scoped;

async fn step() {}

async fn run() -> i32 {
    scoped!(no_grad => {
        step().await;
        if true {
            return 1;
        }
        2
    })
}

fn main() {
    let _ = run();
}
