//! `seed(n)` takes any primitive integer of at most 64 bits, as
//! `torch.manual_seed` takes a Python int: a negative seed is its two's
//! complement (`torch.manual_seed(-1)` gives `torch.initial_seed() ==
//! 2**64 - 1`). Each seed here is checked against the bootstrap's PyTorch,
//! run live: its `initial_seed()` and its first draws.

use tch_scope::{Scope, Seed, scoped, try_scoped};

use super::oracle::python;
use super::{rand, serial};

/// For each seed (as Python reads the decimal), PyTorch's
/// `initial_seed()` after `manual_seed(seed)` and its `rand(3)`.
fn pytorch(seeds: &[String]) -> Option<Vec<(u64, Vec<f32>)>> {
    let script = format!(
        "import torch\nfor s in [{}]:\n    torch.manual_seed(s)\n    \
         print(torch.initial_seed(), *torch.rand(3).tolist())",
        seeds.join(", ")
    );
    let out = python(&script)?;
    Some(
        out.lines()
            .map(|line| {
                let mut words = line.split(' ');
                let initial = words.next().unwrap().parse().unwrap();
                #[allow(
                    clippy::cast_possible_truncation,
                    reason = "f32 values, printed as f64"
                )]
                let draws = words.map(|w| w.parse::<f64>().unwrap() as f32).collect();
                (initial, draws)
            })
            .collect(),
    )
}

/// The seed a `seed` scope holds, as its error names it: entering with a
/// CUDA device that is not there fails, naming `seed(<u64>, devices = ..)`.
fn held_seed(scope: &str) -> u64 {
    let digits = scope
        .strip_prefix("seed(")
        .and_then(|s| s.split(',').next());
    digits.unwrap_or_else(|| panic!("{scope}")).parse().unwrap()
}

/// Seeds the generators with `n` through the macro word and returns the
/// seed held and the first draws.
macro_rules! seeded {
    ($n:expr) => {{
        let e = try_scoped!(seed($n, devices = [4096]) => ()).unwrap_err();
        (held_seed(e.scope()), scoped!(seed($n) => rand(3)))
    }};
}

#[test]
fn seed_takes_every_integer_type_as_torch_manual_seed_does() {
    let _s = serial();
    let (i8_min, i16_neg, i32_neg, i64_neg, isize_neg) = (i8::MIN, -300i16, -42i32, -1i64, -5isize);
    let (u8_max, u16_max, u32_big, u64_max, usize_step) =
        (u8::MAX, u16::MAX, 3_000_000_000u32, u64::MAX, 7usize);
    let step = &usize_step; // a reference, as an iterator gives it
    let got = [
        ("i8::MIN", seeded!(i8_min)),
        ("-300i16", seeded!(i16_neg)),
        ("-42i32", seeded!(i32_neg)),
        ("-1i64", seeded!(i64_neg)),
        ("i64::MIN", seeded!(i64::MIN)),
        ("i64::MAX", seeded!(i64::MAX)),
        ("-5isize", seeded!(isize_neg)),
        ("u8::MAX", seeded!(u8_max)),
        ("u16::MAX", seeded!(u16_max)),
        ("3e9u32", seeded!(u32_big)),
        ("u64::MAX", seeded!(u64_max)),
        ("7usize", seeded!(usize_step)),
        ("&7usize", seeded!(step)),
        // Literals as users write them: beyond i32, hexadecimal, negative.
        ("0xdeadbeef", seeded!(0xdead_beef)),
        ("-1", seeded!(-1)),
        ("42", seeded!(42)),
    ];
    let seeds: Vec<String> = [
        i128::from(i8::MIN),
        -300,
        -42,
        -1,
        i128::from(i64::MIN),
        i128::from(i64::MAX),
        -5,
        255,
        65535,
        3_000_000_000,
        i128::from(u64::MAX),
        7,
        7,
        0xdead_beef,
        -1,
        42,
    ]
    .iter()
    .map(ToString::to_string)
    .collect();
    let Some(want) = pytorch(&seeds) else {
        eprintln!("skipped: no PyTorch to compare with");
        return;
    };
    assert_eq!(want.len(), got.len());
    for ((name, got), want) in got.iter().zip(&want) {
        assert_eq!(got.0, want.0, "{name}: torch.initial_seed()");
        assert_eq!(got.1, want.1, "{name}: torch.rand(3)");
    }
}

#[test]
fn the_attribute_and_seed_new_take_any_integer_too() {
    let _s = serial();
    #[tch_scope::seed(-1)]
    fn minus_one() -> Vec<f32> {
        rand(3)
    }
    let step: i32 = -1;
    let by_scope = {
        let _g = Seed::new(step).enter().unwrap();
        rand(3)
    };
    assert_eq!(Seed::new(step).0, u64::MAX);
    assert_eq!(Seed::new(-1i64).0, Seed(u64::MAX).0);
    assert_eq!(minus_one(), by_scope);
    assert_eq!(scoped!(seed(u64::MAX) => rand(3)), by_scope);
    // A literal beyond `i32`, written in place: a `u64`.
    assert_eq!(
        scoped!(seed(18_446_744_073_709_551_615) => rand(3)),
        by_scope
    );
}
