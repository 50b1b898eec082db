//! Precision and kernel choice: `matmul_precision`, `tf32`, `cudnn`,
//! `sdpa`. Process-wide flags, so a process of their own and one test at a
//! time (`serial()`). Expected values come from PyTorch (the bootstrap's
//! python beside `.libtorch`) where it can say them.

use std::panic::catch_unwind;
use std::sync::{Mutex, MutexGuard};

use tch::{Device, Kind, Tensor};

#[path = "oracle.rs"]
mod oracle;
use oracle::python;
use tch_scope::{
    CudnnFlags, MatmulPrecision, Scope, ScopeError, SdpaBackend, allow_tf32, cudnn, cudnn_flags,
    matmul_precision, scoped, sdpa, sdpa_backends, tf32, try_scoped,
};

fn serial() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

/// Every flag these words touch, as one comparable value.
#[derive(Debug, PartialEq)]
struct Flags {
    precision: &'static str,
    tf32: bool,
    cudnn: CudnnFlags,
    sdpa: Vec<SdpaBackend>,
}

fn flags() -> Flags {
    Flags {
        precision: matmul_precision(),
        tf32: allow_tf32(),
        cudnn: cudnn_flags(),
        sdpa: sdpa_backends(),
    }
}

/// libtorch's defaults, as PyTorch 2.13 reports them on a fresh process.
fn defaults() -> Flags {
    Flags {
        precision: "highest",
        tf32: false,
        cudnn: CudnnFlags {
            enabled: true,
            benchmark: false,
            deterministic: false,
            allow_tf32: true,
        },
        sdpa: SdpaBackend::ALL.to_vec(),
    }
}

// ---- matmul_precision / tf32 ---------------------------------------------------

/// What PyTorch reports, `get_float32_matmul_precision()` and
/// `backends.cuda.matmul.allow_tf32`, after each setting.
const MATMUL_ORACLE: &str = "import torch
out = []
for p in ['high', 'medium', 'highest']:
    torch.set_float32_matmul_precision(p)
    out.append(f'{torch.get_float32_matmul_precision()}:{int(torch.backends.cuda.matmul.allow_tf32)}')
for a in [True, False]:
    torch.backends.cuda.matmul.allow_tf32 = a
    out.append(f'{torch.get_float32_matmul_precision()}:{int(torch.backends.cuda.matmul.allow_tf32)}')
print(' '.join(out))";

fn matmul_state() -> String {
    format!("{}:{}", matmul_precision(), u8::from(allow_tf32()))
}

#[test]
fn matmul_precision_and_tf32_read_as_pytorch_reads_them() {
    let _s = serial();
    let got = [
        scoped!(matmul_precision("high") => matmul_state()),
        scoped!(matmul_precision("medium") => matmul_state()),
        scoped!(matmul_precision("highest") => matmul_state()),
        scoped!(tf32(true) => matmul_state()),
        scoped!(tf32(false) => matmul_state()),
    ]
    .join(" ");
    if let Some(want) = python(MATMUL_ORACLE) {
        assert_eq!(got, want, "tch-scope vs PyTorch");
    } else {
        println!("skipped the PyTorch comparison: no python");
    }
    assert_eq!(got, "high:1 medium:1 highest:0 high:1 highest:0");
    assert_eq!(flags(), defaults());
}

#[matmul_precision("medium")]
fn medium_then(exit: u8) -> Result<&'static str, String> {
    let inside = matmul_precision();
    if exit == 2 {
        return Ok("returned");
    }
    match exit {
        0 => Ok(inside),
        1 => Err("early".to_owned())?,
        _ => panic!("boom"),
    }
}

#[tf32(true)]
fn with_tf32() -> bool {
    allow_tf32()
}

#[test]
fn matmul_precision_is_restored_on_every_exit() {
    let _s = serial();
    assert_eq!(medium_then(0), Ok("medium"));
    assert_eq!(medium_then(1), Err("early".to_owned()));
    assert_eq!(medium_then(2), Ok("returned"));
    assert!(catch_unwind(|| medium_then(3)).is_err());
    assert_eq!(flags(), defaults());
    for i in 0..3 {
        scoped!(matmul_precision("high") => {
            if i == 1 {
                continue;
            }
            if i == 2 {
                break;
            }
        });
    }
    assert_eq!(flags(), defaults());
    // Nested in either order, each level sees its own and gets it back.
    scoped!(matmul_precision("medium") => {
        assert!(with_tf32());
        assert_eq!(matmul_precision(), "medium");
        scoped!(tf32(false) => assert_eq!(matmul_precision(), "highest"));
        assert_eq!(matmul_precision(), "medium");
    });
    scoped!(tf32(true) => {
        scoped!(matmul_precision("highest") => assert!(!allow_tf32()));
        assert_eq!(matmul_precision(), "high");
    });
    assert_eq!(flags(), defaults());
}

#[test]
fn a_bad_precision_name_is_a_scope_error() {
    let _s = serial();
    let name = String::from("fast");
    let e: ScopeError = try_scoped!(matmul_precision(&name) => ()).unwrap_err();
    assert_eq!(e.scope(), "matmul_precision(\"fast\")");
    assert_eq!(
        e.to_string(),
        "cannot enter `matmul_precision(\"fast\")`: the precision must be \"highest\", \"high\" or \"medium\""
    );
    assert!(MatmulPrecision::new("High").enter().is_err());
    assert_eq!(flags(), defaults());
}

// ---- cudnn ----------------------------------------------------------------------

/// `torch.backends.cudnn.flags(...)` with every flag written, as PyTorch
/// reports them inside, then after.
const CUDNN_ORACLE: &str = "import torch
c = torch.backends.cudnn
def st(): return ''.join(str(int(b)) for b in (c.enabled, c.benchmark, c.deterministic, c.allow_tf32))
out = []
with c.flags(enabled=False, benchmark=True, deterministic=True, allow_tf32=False):
    out.append(st())
out.append(st())
print(' '.join(out))";

fn cudnn_state() -> String {
    let f = cudnn_flags();
    [f.enabled, f.benchmark, f.deterministic, f.allow_tf32]
        .iter()
        .map(|&b| if b { '1' } else { '0' })
        .collect()
}

#[cudnn(benchmark, deterministic = true)]
fn tuned(fail: bool) -> Result<CudnnFlags, ScopeError> {
    if fail {
        return Err(ScopeError::new("body", None, "failed"));
    }
    Ok(cudnn_flags())
}

#[test]
fn cudnn_sets_the_flags_written_and_restores_them() {
    let _s = serial();
    let inside = scoped!(cudnn(enabled = false, benchmark, deterministic = true, allow_tf32 = false) => cudnn_state());
    let got = format!("{inside} {}", cudnn_state());
    if let Some(want) = python(CUDNN_ORACLE) {
        assert_eq!(got, want, "tch-scope vs PyTorch");
    }
    assert_eq!(got, "0110 1001");
    // Only what is written changes.
    let f = tuned(false).unwrap();
    assert!(f.benchmark && f.deterministic && f.enabled && f.allow_tf32);
    assert!(tuned(true).is_err());
    assert!(catch_unwind(|| scoped!(cudnn(enabled = false) => panic!("inside"))).is_err());
    assert_eq!(flags(), defaults());
    // Nested: the inner scope puts back what the outer one set.
    scoped!(cudnn(benchmark = true) => {
        scoped!(cudnn(benchmark = false, enabled = false) => assert_eq!(cudnn_state(), "0001"));
        assert_eq!(cudnn_state(), "1101");
    });
    assert_eq!(flags(), defaults());
}

// ---- sdpa -----------------------------------------------------------------------

/// PyTorch's attention output under `sdpa_kernel([SDPBackend.MATH])` and
/// the backends it reports inside `sdpa_kernel([FLASH, MATH])`, for the
/// inputs `torch.manual_seed(0)` gives.
const SDPA_ORACLE: &str = "import torch
from torch.nn.attention import sdpa_kernel, SDPBackend
from torch.nn.functional import scaled_dot_product_attention as sdpa
torch.manual_seed(0)
q, k, v = (torch.rand(2, 3, 5, 8) for _ in range(3))
with sdpa_kernel([SDPBackend.MATH]):
    out = sdpa(q, k, v, is_causal=True)
with sdpa_kernel([SDPBackend.FLASH_ATTENTION, SDPBackend.MATH]):
    inside = sorted(b.name for b in torch.nn.attention._cur_sdpa_kernel_backends() if b.name != 'OVERRIDEABLE')
print(' '.join(repr(x) for x in out.flatten().tolist()))
print(' '.join(inside))";

fn inputs() -> (Tensor, Tensor, Tensor) {
    tch::manual_seed(0);
    let r = || Tensor::rand([2, 3, 5, 8], (Kind::Float, Device::Cpu));
    (r(), r(), r())
}

fn attention(q: &Tensor, k: &Tensor, v: &Tensor) -> Result<Tensor, tch::TchError> {
    Tensor::f_scaled_dot_product_attention(q, k, v, None::<&Tensor>, 0.0, true, None, false)
}

fn max_diff(a: &Tensor, b: &Tensor) -> f64 {
    (a - b).abs().max().double_value(&[])
}

#[sdpa(math)]
fn math_attention(q: &Tensor, k: &Tensor, v: &Tensor) -> Tensor {
    assert_eq!(sdpa_backends(), [SdpaBackend::Math]);
    attention(q, k, v).unwrap()
}

#[test]
fn sdpa_math_gives_the_default_attention_output() {
    let _s = serial();
    let (q, k, v) = inputs();
    let default = attention(&q, &k, &v).unwrap();
    let math = math_attention(&q, &k, &v);
    assert!(
        max_diff(&math, &default) < 1e-6,
        "{}",
        max_diff(&math, &default)
    );
    let flash = scoped!(sdpa(flash) => attention(&q, &k, &v).unwrap());
    assert!(max_diff(&flash, &default) < 1e-6);
    if let Some(out) = python(SDPA_ORACLE) {
        let mut lines = out.lines();
        let want: Vec<f32> = lines
            .next()
            .unwrap()
            .split(' ')
            .map(|x| x.parse().unwrap())
            .collect();
        let want = Tensor::from_slice(&want).view([2, 3, 5, 8]);
        assert!(
            max_diff(&math, &want) < 1e-6,
            "vs PyTorch: {}",
            max_diff(&math, &want)
        );
        let inside = scoped!(sdpa(flash, math) => {
            let mut names: Vec<String> = sdpa_backends()
                .iter()
                .map(|b| match b {
                    SdpaBackend::Flash => "FLASH_ATTENTION",
                    SdpaBackend::MemEfficient => "EFFICIENT_ATTENTION",
                    SdpaBackend::Math => "MATH",
                    SdpaBackend::Cudnn => "CUDNN_ATTENTION",
                }.to_owned())
                .collect();
            names.sort();
            names.join(" ")
        });
        assert_eq!(Some(inside.as_str()), lines.next());
    }
    assert_eq!(flags(), defaults());
}

#[test]
fn sdpa_chooses_the_kernel_and_restores_on_every_exit() {
    let _s = serial();
    let (q, k, v) = inputs();
    // The CPU has no memory-efficient kernel: with only it enabled,
    // libtorch finds no backend.
    let e = scoped!(sdpa(mem_efficient) => attention(&q, &k, &v)).unwrap_err();
    assert!(
        e.to_string()
            .contains("No viable backend for scaled_dot_product_attention"),
        "{e}"
    );
    assert!(attention(&q, &k, &v).is_ok());
    let r: Result<(), String> = (|| {
        scoped!(sdpa(cudnn, flash) => {
            assert_eq!(sdpa_backends(), [SdpaBackend::Flash, SdpaBackend::Cudnn]);
            Err("early".to_owned())?;
        });
        Ok(())
    })();
    assert!(r.is_err());
    assert!(catch_unwind(|| scoped!(sdpa(math) => panic!("inside"))).is_err());
    assert_eq!(flags(), defaults());
}
