// A `deadline` body runs as a closure (so the deadline can end it with its
// error): `return`, `break` and `continue` out of it are refused.
use tch_scope::scoped;

fn early(stop: bool) -> i32 {
    scoped!(no_grad, deadline(std::time::Duration::from_secs(1)) => {
        if stop {
            return 1;
        }
        2
    })
}

fn in_loop() {
    for i in 0..3 {
        let _ = tch_scope::try_scoped!(deadline(std::time::Duration::from_secs(1)) => {
            if i == 1 {
                continue;
            }
            if i == 2 {
                break;
            }
            // A loop inside the body is fine.
            for j in 0..2 {
                if j == 1 {
                    break;
                }
            }
        });
    }
}

fn main() {
    early(true);
    in_loop();
}
