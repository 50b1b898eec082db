//! The word table: one row per scope word, most of them a few fields over
//! [`BASE`]. A row's `check` and `build` are the shared forms of
//! `forms.rs` or its word's own, in the modules beside this one.

use super::{autocast, backends, borrowed, checkpoint, deadline, device, distributed};
use super::{forms, measure, rng};
use crate::word::{Awaits, Conflict, Kind, Param, Word};

const GRAD_MODE: Conflict = Conflict::Group("grad mode");
const MODEL_MODE: Conflict = Conflict::PerModel("model mode");
const MATMUL: Conflict = Conflict::Group("float32 matmul precision");

/// What most rows share: a bare word of per-thread state that cannot fail.
const BASE: Word = Word {
    name: "",
    usage: "",
    doc: "",
    params: &[],
    check: forms::no_check,
    build: forms::call,
    conflict: Conflict::None,
    repeat: false,
    awaits: Awaits::EachPoll,
    process_wide: false,
    catches: false,
    fails: false,
    feature: None,
    examples: &[],
};

/// `devices = [0, 1]`: the CUDA generators `seed` and `fork_rng` fork.
const DEVICES: Param = Param {
    name: "devices",
    kind: Kind::Expr,
    position: None,
    required: false,
};

const NAME: Param = Param {
    name: "name",
    kind: Kind::Str,
    position: Some(0),
    required: false,
};

pub(crate) const WORDS: &[Word] = &[
    Word {
        name: "no_grad",
        usage: "no_grad",
        doc: "autograd off",
        conflict: GRAD_MODE,
        examples: &["no_grad", "no_grad if c"],
        ..BASE
    },
    Word {
        name: "enable_grad",
        usage: "enable_grad",
        doc: "autograd on",
        conflict: GRAD_MODE,
        examples: &["enable_grad"],
        ..BASE
    },
    Word {
        name: "grad",
        usage: "grad(enabled)",
        doc: "autograd on or off",
        params: &[Param::positional("enabled", 0)],
        conflict: GRAD_MODE,
        examples: &["grad(t)", "grad(false)"],
        ..BASE
    },
    Word {
        name: "inference_mode",
        usage: "inference_mode(enabled)",
        doc: "inference mode, or `false` to leave it inside",
        params: &[Param {
            name: "enabled",
            kind: Kind::Expr,
            position: Some(0),
            required: false,
        }],
        build: forms::bare_or_set,
        examples: &[
            "inference_mode",
            "inference_mode(false)",
            "inference_mode(enabled = on)",
        ],
        ..BASE
    },
    Word {
        name: "device",
        usage: "device(0)",
        doc: "current device",
        params: &[Param::positional("device", 0)],
        check: device::check,
        build: device::build,
        fails: true,
        examples: &[
            "device(0)",
            "device(cpu)",
            "device(\"cuda:1\")",
            "device(d)",
            "device(1) if gpu",
        ],
        ..BASE
    },
    Word {
        name: "eval",
        usage: "eval(model)",
        doc: "model in eval mode",
        params: &[Param::positional("model", 0)],
        build: borrowed::model,
        conflict: MODEL_MODE,
        fails: true,
        examples: &["eval(model)"],
        ..BASE
    },
    Word {
        name: "train",
        usage: "train(model)",
        doc: "model in training mode",
        params: &[Param::positional("model", 0)],
        build: borrowed::model,
        conflict: MODEL_MODE,
        fails: true,
        examples: &["train(m)"],
        ..BASE
    },
    Word {
        name: "with",
        usage: "with(scope)",
        doc: "any `Scope` value",
        params: &[Param::positional("scope", 0)],
        build: borrowed::with,
        repeat: true,
        fails: true,
        examples: &["with(s)"],
        ..BASE
    },
    Word {
        name: "timed",
        usage: "timed(\"name\", sync)",
        doc: "wall time, or CUDA time by `sync` or `events`",
        params: &[NAME, Param::flag("sync"), Param::flag("events")],
        check: measure::check_timed,
        build: measure::timed,
        awaits: Awaits::WholeFuture,
        examples: &[
            "timed",
            "timed(\"fwd\")",
            "timed(\"fwd\", sync)",
            "timed(name = \"n\", sync = flag)",
            "timed(events)",
            "timed(\"gpu\", events = on)",
        ],
        ..BASE
    },
    Word {
        name: "memory_scope",
        usage: "memory_scope(\"name\")",
        doc: "process memory",
        params: &[NAME],
        build: measure::memory_scope,
        awaits: Awaits::WholeFuture,
        examples: &["memory_scope", "memory_scope(\"m\")"],
        ..BASE
    },
    Word {
        name: "tensor_memory",
        usage: "tensor_memory(\"name\")",
        doc: "tensor bytes this thread allocates and frees",
        params: &[NAME],
        build: measure::memory_scope,
        awaits: Awaits::WholeFuture,
        fails: true,
        examples: &["tensor_memory", "tensor_memory(\"t\")"],
        ..BASE
    },
    Word {
        name: "gpu_memory_scope",
        usage: "gpu_memory_scope(device = 0, empty_cache = true, name = \"…\")",
        doc: "CUDA memory",
        params: &[
            Param {
                name: "device",
                kind: Kind::Expr,
                position: None,
                required: true,
            },
            Param::flag("empty_cache"),
            Param {
                position: None,
                ..NAME
            },
        ],
        build: measure::gpu_memory_scope,
        awaits: Awaits::WholeFuture,
        fails: true,
        examples: &[
            "gpu_memory_scope(device = 0)",
            "gpu_memory_scope(device = 0, empty_cache = true, name = \"g\")",
        ],
        ..BASE
    },
    Word {
        name: "distributed",
        usage: "distributed(from_env)",
        doc: "a torch.distributed process group",
        params: &[
            Param {
                name: "backend",
                kind: Kind::Choice(&distributed::BACKENDS),
                position: None,
                required: false,
            },
            Param::named("rank"),
            Param::named("world_size"),
            Param::named("master"),
            Param::named("timeout"),
            Param {
                name: "from_env",
                kind: Kind::Bare,
                position: None,
                required: false,
            },
        ],
        check: distributed::check,
        build: distributed::build,
        fails: true,
        feature: Some(("distributed", cfg!(feature = "distributed"))),
        examples: &[
            "distributed(from_env)",
            "distributed(from_env, timeout = Duration::from_secs(3))",
            "distributed(rank = 0, world_size = 2, master = \"127.0.0.1:29500\")",
            "distributed(backend = gloo, rank = r, world_size = n, master = m)",
        ],
        ..BASE
    },
    Word {
        name: "seed",
        process_wide: true,
        usage: "seed(n)",
        doc: "RNG seeded, restored on exit; `devices = [..]`: only those CUDA generators",
        params: &[Param::positional("n", 0), DEVICES],
        build: rng::build,
        awaits: Awaits::WholeFuture,
        fails: true,
        examples: &[
            "seed(42)",
            "seed(n, devices = [0, 1])",
            "seed(7, devices = [])",
        ],
        ..BASE
    },
    Word {
        name: "fork_rng",
        process_wide: true,
        usage: "fork_rng(devices = [..])",
        doc: "RNG state restored on exit; bare: every generator",
        params: &[DEVICES],
        build: rng::build,
        awaits: Awaits::WholeFuture,
        fails: true,
        examples: &[
            "fork_rng",
            "fork_rng(devices = [0, 1])",
            "fork_rng(devices = gpus)",
        ],
        ..BASE
    },
    Word {
        name: "threads",
        process_wide: true,
        usage: "threads(n)",
        doc: "intra-op thread count, restored on exit",
        params: &[Param::positional("n", 0)],
        awaits: Awaits::WholeFuture,
        fails: true,
        examples: &["threads(1)", "threads(n)"],
        ..BASE
    },
    Word {
        name: "autocast",
        usage: "autocast(cpu, bf16, enabled = b, cache = b)",
        doc: "mixed precision",
        params: &[
            Param {
                name: "device_type",
                kind: Kind::Choice(&autocast::DEVICE_TYPES),
                position: Some(0),
                required: true,
            },
            Param {
                name: "dtype",
                kind: Kind::Choice(&autocast::DTYPES),
                position: Some(1),
                required: false,
            },
            Param::named("enabled"),
            Param::named("cache"),
        ],
        build: autocast::build,
        repeat: true,
        fails: true,
        examples: &[
            "autocast(cpu)",
            "autocast(cpu, bf16)",
            "autocast(cuda, f16)",
            "autocast(cpu, bf16, enabled = on)",
            "autocast(cuda, bf16, cache = false)",
            "autocast(cpu, enabled = false, cache = true)",
        ],
        ..BASE
    },
    Word {
        name: "profile",
        usage: "profile(path)",
        doc: "profiler trace written on exit",
        params: &[Param::positional("path", 0)],
        awaits: Awaits::WholeFuture,
        fails: true,
        examples: &["profile(\"trace.json\")", "profile(&path)"],
        ..BASE
    },
    Word {
        name: "record",
        usage: "record(name)",
        doc: "named profiler range",
        params: &[Param::positional("name", 0)],
        repeat: true,
        examples: &["record(\"range\")"],
        ..BASE
    },
    Word {
        name: "checkpoint",
        usage: "checkpoint(vs, \"model.ot\", resume, optimizer = opt, every = 100)",
        doc: "training state saved on exit and every k steps",
        params: &[
            Param::positional("vs", 0),
            Param::positional("path", 1),
            Param::flag("resume"),
            Param::flag("save_on_failure"),
            Param::named("optimizer"),
            Param::named("every"),
            Param::named("state"),
        ],
        check: checkpoint::check,
        build: checkpoint::build,
        awaits: Awaits::WholeFuture,
        fails: true,
        examples: &[
            "checkpoint(vs, \"model.ot\")",
            "checkpoint(vs, &path, resume)",
            "checkpoint(vs, p, resume = again)",
            "checkpoint(vs, p, save_on_failure = false)",
            "checkpoint(vs, p, resume, save_on_failure = keep)",
            "checkpoint(vs, p, resume, optimizer = opt, every = 5)",
            "checkpoint(vs, p, resume, optimizer = opt, every = k, state = run)",
        ],
        ..BASE
    },
    Word {
        name: "detect_anomaly",
        process_wide: true,
        usage: "detect_anomaly(check_nan = false)",
        doc: "autograd anomaly detection",
        params: &[Param::flag("check_nan")],
        build: forms::one_flag::<true>,
        awaits: Awaits::WholeFuture,
        fails: true,
        examples: &["detect_anomaly", "detect_anomaly(check_nan = false)"],
        ..BASE
    },
    Word {
        name: "deterministic",
        process_wide: true,
        usage: "deterministic(warn_only)",
        doc: "deterministic algorithms",
        params: &[Param::flag("warn_only")],
        build: forms::one_flag::<false>,
        awaits: Awaits::WholeFuture,
        fails: true,
        examples: &[
            "deterministic",
            "deterministic(warn_only)",
            "deterministic(warn_only = w)",
        ],
        ..BASE
    },
    Word {
        name: "matmul_precision",
        process_wide: true,
        usage: "matmul_precision(\"high\")",
        doc: "float32 matmul precision, `\"highest\"`, `\"high\"` or `\"medium\"`",
        params: &[Param::positional("precision", 0)],
        check: backends::check_matmul_precision,
        conflict: MATMUL,
        awaits: Awaits::WholeFuture,
        fails: true,
        examples: &[
            "matmul_precision(\"highest\")",
            "matmul_precision(\"medium\")",
            "matmul_precision(p)",
        ],
        ..BASE
    },
    Word {
        name: "tf32",
        process_wide: true,
        usage: "tf32(flag)",
        doc: "TF32 in cuBLAS float32 matmuls",
        params: &[Param::positional("allow", 0)],
        conflict: MATMUL,
        awaits: Awaits::WholeFuture,
        fails: true,
        examples: &["tf32(true)", "tf32(allow)"],
        ..BASE
    },
    Word {
        name: "cudnn",
        process_wide: true,
        usage: "cudnn(enabled = b, benchmark = b, deterministic = b, allow_tf32 = b)",
        doc: "cuDNN's flags, each optional",
        params: &[
            Param::flag("enabled"),
            Param::flag("benchmark"),
            Param::flag("deterministic"),
            Param::flag("allow_tf32"),
        ],
        check: backends::check_cudnn,
        build: backends::cudnn,
        awaits: Awaits::WholeFuture,
        fails: true,
        examples: &[
            "cudnn(benchmark)",
            "cudnn(enabled = false)",
            "cudnn(benchmark = b, deterministic = true, allow_tf32 = false)",
        ],
        ..BASE
    },
    Word {
        name: "stream",
        usage: "stream(s)",
        doc: "a CUDA stream current, `tch_scope::cuda::Stream`",
        params: &[Param::positional("stream", 0)],
        fails: true,
        examples: &["stream(s)", "stream(&side) if overlap"],
        ..BASE
    },
    Word {
        name: "sdpa",
        process_wide: true,
        usage: "sdpa(math, flash, mem_efficient, cudnn)",
        doc: "only these attention backends",
        params: &[Param {
            name: "backends",
            kind: Kind::List(&backends::SDPA_BACKENDS),
            position: Some(0),
            required: true,
        }],
        build: backends::sdpa,
        awaits: Awaits::WholeFuture,
        fails: true,
        examples: &["sdpa(math)", "sdpa(flash, mem_efficient, cudnn)"],
        ..BASE
    },
    Word {
        name: "deadline",
        usage: "deadline(Duration::from_millis(100))",
        doc: "operators fail once the time is up, or from the instant `until = t`",
        params: &[
            Param {
                name: "duration",
                kind: Kind::Expr,
                position: Some(0),
                required: false,
            },
            Param {
                name: "until",
                kind: Kind::Expr,
                position: None,
                required: false,
            },
        ],
        check: deadline::check,
        build: deadline::build,
        catches: true,
        fails: true,
        examples: &[
            "deadline(Duration::from_millis(100))",
            "deadline(budget)",
            "deadline(d) if serving",
            "deadline(until = t)",
            "deadline(until = arrival + budget) if serving",
        ],
        ..BASE
    },
];
