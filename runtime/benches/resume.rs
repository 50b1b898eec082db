//! What a checkpoint costs a training loop: an MLP trained with Adam
//! under `steps(n)`, with no checkpoint, with a checkpoint that copies the
//! state at every step boundary (no periodic save), with `every = 10`
//! (the copy, plus a background write every 10 steps), and the figure a
//! synchronous save every 10 steps would give (the loop's step time plus a
//! tenth of one save, timed on its own). Prints one JSON line.
//!
//! `RESUME_WIDTH`, `RESUME_LAYERS`, `RESUME_BATCH`, `RESUME_STEPS` size it;
//! without a size (as under `cargo test --all-targets`) a tiny model runs
//! as a smoke test. Set `MALLOC_MMAP_THRESHOLD_=67108864
//! MALLOC_TRIM_THRESHOLD_=1073741824` for figures to compare: otherwise
//! glibc may hand a step's large temporaries back to the kernel and fault
//! them in again, and the same loop runs 2–3× slower from one round to the
//! next (docs/words.md).

use std::time::Instant;

use tch::nn::{self, Module, VarStore};
use tch::{Device, Kind, Tensor};
use tch_scope::optim::{Adam, Optimizer};
use tch_scope::{scoped, steps};

fn env(name: &str, default: i64) -> i64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

struct Setup {
    vs: VarStore,
    model: nn::Sequential,
    opt: Adam,
    x: Tensor,
    y: Tensor,
}

fn setup(width: i64, layers: i64, batch: i64) -> Setup {
    tch::manual_seed(0);
    let vs = VarStore::new(Device::Cpu);
    let mut model = nn::seq();
    for i in 0..layers {
        model = model
            .add(nn::linear(vs.root() / i, width, width, Default::default()))
            .add_fn(|x| x.relu());
    }
    let opt = Adam::new(&vs, 1e-4).unwrap();
    let x = Tensor::randn([batch, width], (Kind::Float, Device::Cpu));
    let y = Tensor::randn([batch, width], (Kind::Float, Device::Cpu));
    Setup {
        vs,
        model,
        opt,
        x,
        y,
    }
}

fn step(s: &Setup) {
    let loss = (s.model.forward(&s.x) - &s.y).square().mean(Kind::Float);
    s.opt.backward_step(&loss).unwrap();
}

fn main() {
    let sized = std::env::var("RESUME_WIDTH").is_ok();
    let width = env("RESUME_WIDTH", 16);
    let layers = env("RESUME_LAYERS", 2);
    let batch = env("RESUME_BATCH", 8);
    let n = env("RESUME_STEPS", if sized { 200 } else { 20 });
    let dir = std::env::temp_dir();
    let path = dir.join(format!("tch-scope-bench-resume-{}.ot", std::process::id()));
    tch::set_num_threads(i32::try_from(env("RESUME_THREADS", 1)).unwrap_or(1));
    let s = setup(width, layers, batch);
    for _ in 0..3 {
        step(&s);
    }
    let plain_once = || {
        let t = Instant::now();
        for _ in steps(n) {
            step(&s);
        }
        t.elapsed().as_secs_f64() / n as f64
    };
    let in_scope = |every: Option<i64>| {
        let _ = std::fs::remove_file(&path);
        let secs = match every {
            None => scoped!(checkpoint(s.vs, &path, optimizer = s.opt) => {
                let t = Instant::now();
                for _ in steps(n) {
                    step(&s);
                }
                t.elapsed().as_secs_f64()
            }),
            Some(k) => scoped!(checkpoint(s.vs, &path, optimizer = s.opt, every = k) => {
                let t = Instant::now();
                for _ in steps(n) {
                    step(&s);
                }
                t.elapsed().as_secs_f64()
            }),
        };
        secs / n as f64
    };
    // One synchronous save of the same state: the exit save of a scope
    // with no loop (the live state).
    let save_once = || {
        let t = Instant::now();
        scoped!(checkpoint(s.vs, &path, optimizer = s.opt) => {});
        t.elapsed().as_secs_f64()
    };
    // The copy a boundary makes, alone: the weights into buffers made once
    // and the optimizer's state into its earlier copy.
    let copy_once = || {
        let _no_grad = tch::no_grad_guard();
        let vars: Vec<Tensor> = s.vs.trainable_variables();
        let mut bufs: Vec<Tensor> = vars.iter().map(Tensor::detach_copy).collect();
        let mut opt_bufs = s.opt.state();
        let t = Instant::now();
        for _ in 0..10 {
            for (b, v) in bufs.iter_mut().zip(&vars) {
                b.copy_(v);
            }
            s.opt.state_into(&mut opt_bufs);
        }
        t.elapsed().as_secs_f64() / 10.0
    };
    // Rounds of every variant in turn, the fastest of each kept: the
    // machine's other load shows up as noise in all of them alike.
    let rounds = env("RESUME_ROUNDS", if sized { 5 } else { 1 });
    let (mut plain, mut boundaries, mut background, mut save, mut copy) =
        (f64::MAX, f64::MAX, f64::MAX, f64::MAX, f64::MAX);
    for _ in 0..rounds {
        plain = plain.min(plain_once());
        boundaries = boundaries.min(in_scope(None));
        background = background.min(in_scope(Some(10)));
        save = save.min(save_once());
        copy = copy.min(copy_once());
    }
    let sync = plain + save / 10.0;
    let _ = std::fs::remove_file(&path);
    let params: i64 =
        s.vs.trainable_variables()
            .iter()
            .map(Tensor::numel)
            .map(|n| n as i64)
            .sum();
    println!(
        "{{\"width\":{width},\"layers\":{layers},\"batch\":{batch},\"steps\":{n},\"params\":{params},\
         \"plain_ms\":{:.3},\"copy_ms\":{:.3},\"boundaries_ms\":{:.3},\"every10_background_ms\":{:.3},\
         \"save_ms\":{:.3},\"every10_sync_ms\":{:.3},\"background_ratio\":{:.3},\"sync_ratio\":{:.3},\
         \"save_in_steps\":{:.1}}}",
        plain * 1e3,
        copy * 1e3,
        boundaries * 1e3,
        background * 1e3,
        save * 1e3,
        sync * 1e3,
        background / plain,
        sync / plain,
        save / plain
    );
}
