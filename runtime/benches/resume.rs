//! What a checkpoint costs a training loop: a model trained with Adam under
//! `steps(n)`, with no checkpoint, with a checkpoint that holds the state
//! at every step boundary (no periodic save), with `every = 10` (the
//! boundaries, plus a background write every 10 steps), and the figure a
//! synchronous save every 10 steps would give (the loop's step time plus a
//! tenth of one save, timed on its own). Prints one JSON line.
//!
//! Two models. `RESUME_MODEL=mlp` (the default): `RESUME_LAYERS` linear
//! layers of `RESUME_WIDTH`, all trained, batch `RESUME_BATCH`. `head`: a
//! classifier fine-tuned over a frozen embedding table (`RESUME_VOCAB`
//! rows of `RESUME_WIDTH`, mean-pooled over `RESUME_TOKENS` tokens), a
//! head of `RESUME_LAYERS` layers of `RESUME_HIDDEN` trained on batches of
//! `RESUME_BATCH`: the state a save writes is mostly the table, the step
//! mostly the head, so one save takes many steps. `RESUME_STEPS` steps;
//! without a size (as under `cargo test --all-targets`) a tiny MLP runs as
//! a smoke test.
//!
//! `copy_ms` is what a boundary copied before it aliased the optimizer's
//! tensors (every variable and the optimizer's state, into buffers made
//! once), timed on its own, for comparison.
//!
//! The first boundary of a loop copies the variables no optimizer owns
//! (the frozen table) once; later boundaries share that copy. Each loop is
//! timed from its second step on, the plain one too, and that one-time
//! copy is reported on its own (`first_boundary_ms`).
//!
//! `RESUME_EXT` picks the file's format by its extension (`ot`, the
//! default, or `safetensors`); `RESUME_ONLY=plain|boundaries|background`
//! runs that loop alone (for a profiler) and prints its steps' times by
//! their place between two saves.
//!
//! Set `MALLOC_MMAP_THRESHOLD_=67108864 MALLOC_TRIM_THRESHOLD_=1073741824`
//! for figures to compare: otherwise glibc may hand a step's large
//! temporaries back to the kernel and fault them in again, and the same
//! loop runs 2–3× slower from one round to the next (docs/words.md).

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
    /// The frozen table of the `head` model.
    table: Option<nn::Embedding>,
    model: nn::Sequential,
    opt: Adam,
    x: Tensor,
    y: Tensor,
}

fn mlp(width: i64, layers: i64, batch: i64) -> Setup {
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
        table: None,
        model,
        opt,
        x,
        y,
    }
}

fn head(width: i64, layers: i64, batch: i64) -> Setup {
    tch::manual_seed(0);
    let (vocab, tokens, hidden) = (
        env("RESUME_VOCAB", 100_000),
        env("RESUME_TOKENS", 32),
        env("RESUME_HIDDEN", 512),
    );
    let vs = VarStore::new(Device::Cpu);
    let table = nn::embedding(vs.root() / "table", vocab, width, Default::default());
    let _ = table.ws.set_requires_grad(false);
    let mut model = nn::seq();
    let mut inputs = width;
    for i in 0..layers {
        model = model
            .add(nn::linear(
                vs.root() / "head" / i,
                inputs,
                hidden,
                Default::default(),
            ))
            .add_fn(|x| x.relu());
        inputs = hidden;
    }
    model = model.add(nn::linear(
        vs.root() / "head" / "out",
        inputs,
        10,
        Default::default(),
    ));
    let opt = Adam::new(&vs, 1e-4).unwrap();
    let x = Tensor::randint(vocab, [batch, tokens], (Kind::Int64, Device::Cpu));
    let y = Tensor::randint(10, [batch], (Kind::Int64, Device::Cpu));
    Setup {
        vs,
        table: Some(table),
        model,
        opt,
        x,
        y,
    }
}

fn step(s: &Setup) {
    let loss = match &s.table {
        None => (s.model.forward(&s.x) - &s.y).square().mean(Kind::Float),
        Some(table) => {
            let pooled = table
                .forward(&s.x)
                .mean_dim(&[1i64][..], false, Kind::Float);
            s.model.forward(&pooled).cross_entropy_for_logits(&s.y)
        }
    };
    s.opt.backward_step(&loss).unwrap();
}

/// `n` steps under `steps(n)`, each timed from one boundary to the next
/// (the boundary's own work included), grouped by `i % 10`: a JSON list of
/// `[median, mean, longest]` in ms per place.
fn by_place(n: i64, s: &Setup) -> String {
    let mut places = vec![Vec::new(); 10];
    let mut last = Instant::now();
    for i in steps(n) {
        let now = Instant::now();
        // The step before boundary `i`: the boundary that begins a save
        // (`i % 10 == 0`) ends the step at place 9.
        if i >= 2 {
            places[usize::try_from((i - 1) % 10).unwrap_or(0)]
                .push((now - last).as_secs_f64() * 1e3);
        }
        last = now;
        step(s);
    }
    let cells: Vec<String> = places
        .iter_mut()
        .map(|v| {
            v.sort_by(f64::total_cmp);
            let mean = v.iter().sum::<f64>() / v.len().max(1) as f64;
            let (median, longest) = (v.get(v.len() / 2), v.last());
            format!(
                "[{:.2},{mean:.2},{:.2}]",
                median.copied().unwrap_or(0.0),
                longest.copied().unwrap_or(0.0)
            )
        })
        .collect();
    format!("[{}]", cells.join(","))
}

fn main() {
    let sized = std::env::var("RESUME_WIDTH").is_ok();
    let model = std::env::var("RESUME_MODEL").unwrap_or_else(|_| "mlp".into());
    let width = env("RESUME_WIDTH", 16);
    let layers = env("RESUME_LAYERS", 2);
    let batch = env("RESUME_BATCH", 8);
    let n = env("RESUME_STEPS", if sized { 200 } else { 20 });
    let dir = std::env::temp_dir();
    let ext = std::env::var("RESUME_EXT").unwrap_or_else(|_| "ot".into());
    let path = dir.join(format!(
        "tch-scope-bench-resume-{}.{ext}",
        std::process::id()
    ));
    tch::set_num_threads(i32::try_from(env("RESUME_THREADS", 1)).unwrap_or(1));
    let s = if model == "head" {
        head(width, layers, batch)
    } else {
        mlp(width, layers, batch)
    };
    for _ in 0..3 {
        step(&s);
    }
    // The loop's time per step from its second step on (the first
    // boundary's one-time copy apart), and that first boundary's time.
    let run = || {
        let mut start = Instant::now();
        let mut first = 0.0;
        for i in steps(n) {
            if i == 0 {
                first = start.elapsed().as_secs_f64();
                start = Instant::now();
            }
            step(&s);
            if i == 0 {
                start = Instant::now();
            }
        }
        (start.elapsed().as_secs_f64() / (n - 1) as f64, first)
    };
    let in_scope = |every: Option<i64>| {
        let _ = std::fs::remove_file(&path);
        match every {
            None => scoped!(checkpoint(s.vs, &path, optimizer = s.opt) => run()),
            Some(k) => scoped!(checkpoint(s.vs, &path, optimizer = s.opt, every = k) => run()),
        }
    };
    // One synchronous save of the same state: the exit save of a scope
    // with no loop (the live state).
    let save_once = || {
        let t = Instant::now();
        scoped!(checkpoint(s.vs, &path, optimizer = s.opt) => {});
        t.elapsed().as_secs_f64()
    };
    // What a boundary copied before it aliased (for comparison): every
    // variable `copy_`-ed into buffers made once and the optimizer's
    // `state_into` its earlier copy.
    let copy_once = || {
        let _no_grad = tch::no_grad_guard();
        let vars: Vec<Tensor> = s.vs.variables().into_values().collect();
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
    let (mut plain, mut boundaries, mut background, mut save, mut first, mut copy) =
        (f64::MAX, f64::MAX, f64::MAX, f64::MAX, f64::MAX, f64::MAX);
    // `RESUME_ONLY=plain|boundaries|background`: that loop alone, for a
    // profiler, and its steps by their place between two saves (`i % 10`):
    // the median, mean and longest, in ms.
    if let Ok(only) = std::env::var("RESUME_ONLY") {
        let every = match only.as_str() {
            "plain" => None,
            "boundaries" => Some(None),
            _ => Some(Some(10)),
        };
        let _ = std::fs::remove_file(&path);
        let by_place = match every {
            None => by_place(n, &s),
            Some(None) => scoped!(checkpoint(s.vs, &path, optimizer = s.opt) => by_place(n, &s)),
            Some(Some(k)) => {
                scoped!(checkpoint(s.vs, &path, optimizer = s.opt, every = k) => by_place(n, &s))
            }
        };
        let _ = std::fs::remove_file(&path);
        println!("{{\"{only}\":{by_place}}}");
        return;
    }
    for _ in 0..rounds {
        plain = plain.min(run().0);
        let (b, f) = in_scope(None);
        boundaries = boundaries.min(b);
        first = first.min(f);
        background = background.min(in_scope(Some(10)).0);
        save = save.min(save_once());
        copy = copy.min(copy_once());
    }
    let sync = plain + save / 10.0;
    let _ = std::fs::remove_file(&path);
    let count = |trainable: bool| -> i64 {
        s.vs.variables()
            .values()
            .filter(|t| t.requires_grad() == trainable)
            .map(|t| t.numel() as i64)
            .sum()
    };
    println!(
        "{{\"model\":\"{model}\",\"width\":{width},\"layers\":{layers},\"batch\":{batch},\"steps\":{n},\
         \"params\":{},\"frozen\":{},\
         \"plain_ms\":{:.3},\"first_boundary_ms\":{:.3},\"boundaries_ms\":{:.3},\"boundary_ms\":{:.3},\"copy_ms\":{:.3},\
         \"every10_background_ms\":{:.3},\"save_ms\":{:.3},\"every10_sync_ms\":{:.3},\
         \"background_ratio\":{:.3},\"sync_ratio\":{:.3},\"save_in_steps\":{:.1}}}",
        count(true),
        count(false),
        plain * 1e3,
        first * 1e3,
        boundaries * 1e3,
        (boundaries - plain) * 1e3,
        copy * 1e3,
        background * 1e3,
        save * 1e3,
        sync * 1e3,
        background / plain,
        sync / plain,
        save / plain
    );
}
