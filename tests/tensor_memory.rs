//! `tensor_memory`: the bytes of tensor storage one thread allocates and
//! frees inside the scope, checked on real allocations, nested scopes, a
//! `profile` inside it, a TorchScript forward against PyTorch's profiler
//! (tests/data/tensor_memory.json, from scripts/export_models.py) and the
//! attribute form. Its counts are per thread, so tests may run in parallel;
//! the `profile` tests take turns (one profiler session per process).

use std::sync::Mutex;

use tch::{Device, Kind, Tensor};
use tch_scope::{
    Context, MemoryReport, Profile, Scope, TensorMemory, last_memory_report, scoped, tensor_memory,
};

const MIB: i64 = 1 << 20;

/// libtorch profiles one session per process.
static ONE_PROFILE: Mutex<()> = Mutex::new(());

fn mib_tensor() -> Tensor {
    Tensor::zeros([1024, 256], (Kind::Float, Device::Cpu))
}

fn data(name: &str) -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("data")
        .join(name)
}

/// The one number of `"key": [n]` in tensor_memory.json (one key per line).
fn oracle(key: &str) -> i64 {
    let text = std::fs::read_to_string(data("tensor_memory.json")).unwrap();
    let line = text
        .lines()
        .find(|l| l.trim_start().starts_with(&format!("\"{key}\":")))
        .unwrap_or_else(|| panic!("no {key} in tensor_memory.json"));
    let list = &line[line.find('[').unwrap() + 1..line.rfind(']').unwrap()];
    list.split(',').next().unwrap().trim().parse().unwrap()
}

fn oracle_list(key: &str) -> Vec<i64> {
    let text = std::fs::read_to_string(data("tensor_memory.json")).unwrap();
    let line = text
        .lines()
        .find(|l| l.trim_start().starts_with(&format!("\"{key}\":")))
        .unwrap();
    let list = &line[line.find('[').unwrap() + 1..line.rfind(']').unwrap()];
    list.split(',').map(|v| v.trim().parse().unwrap()).collect()
}

fn last(name: &str) -> MemoryReport {
    let r = last_memory_report().expect("a memory report");
    assert_eq!(r.name, name);
    r
}

#[test]
fn a_kept_tensor_is_its_bytes_and_a_dropped_one_nets_zero() {
    let kept = scoped!(tensor_memory("tm::kept") => mib_tensor());
    let r = last("tm::kept");
    assert_eq!(r.delta(), 1_048_576, "{r:?}");
    assert_eq!(r.peak_growth(), 1_048_576, "{r:?}");
    assert_eq!((r.allocated, r.freed), (Some(1_048_576), Some(0)));
    assert_eq!(r.device, "cpu");

    scoped!(tensor_memory("tm::dropped") => drop(mib_tensor()));
    let r = last("tm::dropped");
    assert_eq!(r.delta(), 0, "{r:?}");
    assert!(r.peak_growth() >= 1_048_576, "{r:?}");
    assert_eq!((r.allocated, r.freed), (Some(1_048_576), Some(1_048_576)));

    // Freeing a tensor of an earlier scope: the level goes down.
    scoped!(tensor_memory("tm::free_older") => drop(kept));
    let r = last("tm::free_older");
    assert_eq!((r.delta(), r.peak_growth()), (-MIB, 0), "{r:?}");
}

#[test]
fn nested_scopes_keep_their_own_peaks() {
    let outer = TensorMemory::new("tm::outer").enter().unwrap();
    drop(Tensor::zeros([4 * MIB / 4], (Kind::Float, Device::Cpu))); // 4 MiB, freed
    let inner = TensorMemory::new("tm::inner").enter().unwrap();
    let one = mib_tensor();
    let inner = inner.finish().unwrap();
    let sibling = TensorMemory::new("tm::sibling").enter().unwrap();
    drop(Tensor::zeros([2 * MIB / 4], (Kind::Float, Device::Cpu)));
    let sibling = sibling.finish().unwrap();
    let outer = outer.finish().unwrap();
    assert_eq!((inner.delta(), inner.peak_growth()), (MIB, MIB as u64));
    // The sibling's peak is above its own entry level.
    assert_eq!(
        (sibling.delta(), sibling.peak_growth()),
        (0, 2 * MIB as u64)
    );
    // The inner scopes did not reset the outer's 4 MiB peak; it saw
    // everything they saw too.
    assert_eq!(outer.peak_growth(), 4 * MIB as u64, "{outer:?}");
    assert_eq!(outer.delta(), MIB, "{outer:?}");
    assert_eq!(outer.allocated, Some(7 * MIB as u64));
    drop(one);
}

#[test]
fn scopes_may_close_in_any_order() {
    let a = TensorMemory::new("tm::a").enter().unwrap();
    let x = mib_tensor();
    let b = TensorMemory::new("tm::b").enter().unwrap();
    let y = mib_tensor();
    let ra = a.finish().unwrap(); // the outer one first
    let z = mib_tensor(); // b only
    let rb = b.finish().unwrap();
    assert_eq!(ra.delta(), 2 * MIB);
    assert_eq!(rb.delta(), 2 * MIB);
    drop((x, y, z));
    // Nothing is left in the thread's reporter slot: a new scope starts
    // clean and counts again.
    scoped!(tensor_memory("tm::after") => drop(mib_tensor()));
    assert_eq!(last("tm::after").peak_growth(), MIB as u64);
}

#[test]
fn a_free_on_another_thread_is_not_seen() {
    let r = {
        let g = TensorMemory::new("tm::handed_off").enter().unwrap();
        let t = mib_tensor();
        std::thread::spawn(move || drop(t)).join().unwrap();
        g.finish().unwrap()
    };
    // Freed elsewhere: counted here as if kept.
    assert_eq!((r.delta(), r.freed), (MIB, Some(0)), "{r:?}");
}

#[test]
fn a_profile_inside_still_records_memory_and_the_scope_counts_through_it() {
    let _one = ONE_PROFILE.lock().unwrap_or_else(|e| e.into_inner());
    let path = std::env::temp_dir().join(format!("tm-inside-{}.json", std::process::id()));
    let outer = TensorMemory::new("tm::around_profile").enter().unwrap();
    let before = mib_tensor();
    let (kept, r) = {
        let profile = Profile::new(&path).enter().unwrap();
        let kept = mib_tensor();
        drop(Tensor::zeros([2 * MIB / 4], (Kind::Float, Device::Cpu)));
        drop(profile);
        // After the profile: the scope's reporter is back.
        drop(mib_tensor());
        (kept, outer.finish().unwrap())
    };
    assert_eq!(r.delta(), 2 * MIB, "{r:?}");
    assert_eq!(r.peak_growth(), 4 * MIB as u64, "{r:?}");
    assert_eq!(r.allocated, Some(5 * MIB as u64), "{r:?}");
    let trace = std::fs::read_to_string(&path).unwrap();
    let memory_rows = trace.matches("\"[memory]\"").count();
    // Allocations and frees of the 1 MiB and the 2 MiB tensors, at least.
    assert!(
        memory_rows >= 3,
        "{memory_rows} [memory] events in\n{trace}"
    );
    assert!(trace.contains("\"Bytes\": 2097152"), "{trace}");
    std::fs::remove_file(&path).unwrap();
    drop((before, kept));
}

#[test]
fn inside_a_profile_it_refuses_and_leaves_the_profile_whole() {
    let _one = ONE_PROFILE.lock().unwrap_or_else(|e| e.into_inner());
    let path = std::env::temp_dir().join(format!("tm-under-{}.json", std::process::id()));
    let profile = Profile::new(&path).memory(true).enter().unwrap();
    let e = TensorMemory::new("tm::under").enter().unwrap_err();
    assert!(e.reason().contains("profiler is recording"), "{e}");
    drop(mib_tensor());
    drop(profile);
    let trace = std::fs::read_to_string(&path).unwrap();
    assert!(trace.contains("\"Bytes\": 1048576"), "{trace}");
    std::fs::remove_file(&path).unwrap();
    // With the profile gone the thread's slot is free again.
    scoped!(tensor_memory("tm::after_profile") => drop(mib_tensor()));
    assert_eq!(last("tm::after_profile").peak_growth(), MIB as u64);
}

#[test]
fn a_torchscript_forward_matches_pytorchs_profiler() {
    let mut model = tch::CModule::load(data("tensor_memory_mlp.pt")).unwrap();
    model.set_eval();
    let x = Tensor::ones(oracle_list("input_shape"), (Kind::Float, Device::Cpu));
    let _g = tch::no_grad_guard();
    for _ in 0..oracle("warmup") {
        let _ = model.forward_ts(&[&x]).unwrap();
    }
    let y = scoped!(tensor_memory("tm::forward") => model.forward_ts(&[&x]).unwrap());
    let r = last("tm::forward");
    assert_eq!(y.size(), [32, 10]);
    assert_eq!(r.allocated, Some(oracle("allocated") as u64), "{r:?}");
    assert_eq!(r.freed, Some(oracle("freed") as u64), "{r:?}");
    assert_eq!(r.peak_growth(), oracle("peak") as u64, "{r:?}");
    assert_eq!(r.delta(), oracle("allocated") - oracle("freed"));
}

#[tensor_memory("tm::attr")]
fn make(n: i64) -> Tensor {
    Tensor::zeros([n], (Kind::Float, Device::Cpu))
}

#[tensor_memory]
fn make_and_drop() {
    drop(mib_tensor());
}

#[test]
fn the_attribute_measures_each_call() {
    let t = make(1 << 18);
    let r = last("tm::attr");
    assert_eq!((r.delta(), r.peak_growth()), (MIB, MIB as u64));
    drop(t);
    make_and_drop();
    let r = last_memory_report().unwrap();
    assert!(r.name.ends_with("make_and_drop"), "{}", r.name);
    assert_eq!((r.delta(), r.peak_growth()), (0, MIB as u64));
}

#[test]
fn it_goes_to_the_report_table_and_the_trace() {
    tch_scope::trace::start();
    for _ in 0..2 {
        scoped!(tensor_memory("tm::reported") => drop(mib_tensor()));
    }
    tch_scope::trace::stop();
    let row = tch_scope::report();
    let row = row.memory("tm::reported").expect("a memory row");
    assert_eq!((row.count, row.max_peak_growth), (2, MIB as u64));
    assert_eq!(row.last.allocated, Some(MIB as u64));
    assert!(
        tch_scope::report().to_string().contains("tm::reported"),
        "the printed table has its row"
    );

    let path = std::env::temp_dir().join(format!("tm-trace-{}.json", std::process::id()));
    tch_scope::trace::write_chrome(&path).unwrap();
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    std::fs::remove_file(&path).unwrap();
    let spans: Vec<_> = json["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["name"] == "tm::reported")
        .collect();
    assert_eq!(spans.len(), 2, "{json}");
    for s in spans {
        assert_eq!(s["cat"], "tensor_memory");
        assert_eq!(s["args"]["peak_growth"], MIB);
        assert_eq!(s["args"]["at_exit"], s["args"]["at_entry"]);
    }
}

#[test]
fn a_context_carries_the_scope_to_a_worker_and_a_scope_there_chains_to_it() {
    let origin = TensorMemory::new("tm::origin").enter().unwrap();
    let ctx = Context::capture();
    let worker = std::thread::spawn(move || {
        scoped!(with(ctx) => {
            drop(mib_tensor()); // counted by the origin's scope only
            let mine = TensorMemory::new("tm::worker").enter().unwrap();
            drop(Tensor::zeros([2 * MIB / 4], (Kind::Float, Device::Cpu)));
            mine.finish().unwrap()
        })
    })
    .join()
    .unwrap();
    let origin = origin.finish().unwrap();
    assert_eq!(worker.allocated, Some(2 * MIB as u64), "{worker:?}");
    assert_eq!(origin.allocated, Some(3 * MIB as u64), "{origin:?}");
    assert_eq!((origin.delta(), origin.peak_growth()), (0, 2 * MIB as u64));
    // The worker's slot is its own again; this thread's too.
    scoped!(tensor_memory("tm::after_worker") => drop(mib_tensor()));
    assert_eq!(last("tm::after_worker").allocated, Some(MIB as u64));
}

#[test]
fn threads_at_once_each_count_their_own_bytes_and_leave_in_any_order() {
    use std::sync::{Arc, Barrier};
    const N: usize = 4;
    let barrier = Arc::new(Barrier::new(N));
    let threads: Vec<_> = (0..N)
        .map(|i| {
            let barrier = barrier.clone();
            std::thread::spawn(move || {
                let g = TensorMemory::new("tm::threads").enter().unwrap();
                barrier.wait(); // every scope open
                let mine = Tensor::zeros([1024, 256 * (i as i64 + 1)], (Kind::Float, Device::Cpu));
                barrier.wait(); // every thread holds its tensor
                drop(mine);
                // Leave in reverse order of index, one a turn, while the
                // others are still open.
                let mut g = Some(g);
                for turn in 0..N {
                    if turn == N - 1 - i {
                        let r = g.take().unwrap().finish().unwrap();
                        assert_eq!(r.delta(), 0, "thread {i}: {r:?}");
                        assert_eq!(r.peak_growth(), (i as u64 + 1) << 20, "thread {i}: {r:?}");
                        assert_eq!(r.allocated, Some((i as u64 + 1) << 20), "thread {i}");
                    }
                    barrier.wait();
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
}
