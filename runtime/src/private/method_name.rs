//! Names of measurements on methods: `module::Type::method`.
//!
//! A `static` in a method body cannot name `Self`, and `type_name` is not
//! `const`: the expansion keeps one of these per use and hands it
//! `type_name::<Self>` at run time. The name is built once; in a trait's
//! default method (one `static`, many `Self` types) the other types find
//! theirs in a map.

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

use crate::report::Site;

/// `module::Type::method` with `Type` the last path segment of `ty`,
/// without generic arguments.
fn method_name(module: &str, method: &str, ty: &str) -> String {
    let ty = ty.split('<').next().unwrap_or(ty);
    let ty = ty.rsplit("::").next().unwrap_or(ty);
    let ty = ty
        .trim_start_matches(['&', '*'])
        .trim_start_matches("mut ")
        .trim_start_matches("dyn ");
    format!("{module}::{ty}::{method}")
}

/// The first `Self` seen, and its name.
struct First<T> {
    ty: &'static str,
    value: T,
}

/// Others (a trait's default method), keyed by the use and by `Self`.
static OTHERS: Mutex<Option<HashMap<(usize, &'static str), &'static str>>> = Mutex::new(None);

fn other(key: usize, module: &str, method: &str, ty: &'static str) -> &'static str {
    let mut map = crate::report::lock(&OTHERS);
    map.get_or_insert_with(HashMap::new)
        .entry((key, ty))
        .or_insert_with(|| Box::leak(method_name(module, method, ty).into_boxed_str()))
}

/// The name of a memory scope on a method.
pub struct MethodName(OnceLock<First<&'static str>>);

impl MethodName {
    pub const fn new() -> Self {
        MethodName(OnceLock::new())
    }

    #[inline]
    pub fn get(
        &'static self,
        module: &'static str,
        method: &'static str,
        ty: fn() -> &'static str,
    ) -> &'static str {
        let ty = ty();
        let first = self.0.get_or_init(|| First {
            ty,
            value: Box::leak(method_name(module, method, ty).into_boxed_str()),
        });
        if first.ty == ty {
            first.value
        } else {
            other(std::ptr::from_ref(self) as usize, module, method, ty)
        }
    }
}

impl Default for MethodName {
    fn default() -> Self {
        Self::new()
    }
}

/// The `timed` site of a method.
pub struct MethodSite(OnceLock<First<&'static Site>>);

impl MethodSite {
    pub const fn new() -> Self {
        MethodSite(OnceLock::new())
    }

    #[inline]
    pub fn get(
        &'static self,
        module: &'static str,
        method: &'static str,
        ty: fn() -> &'static str,
    ) -> &'static Site {
        let ty = ty();
        let first = self.0.get_or_init(|| First {
            ty,
            value: Site::named(Box::leak(method_name(module, method, ty).into_boxed_str())),
        });
        if first.ty == ty {
            first.value
        } else {
            Site::named(other(std::ptr::from_ref(self) as usize, module, method, ty))
        }
    }
}

impl Default for MethodSite {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::method_name;

    #[test]
    fn type_names_lose_their_path_and_generics() {
        assert_eq!(method_name("m", "forward", "a::b::Net"), "m::Net::forward");
        assert_eq!(
            method_name("m", "f", "a::Wrapper<alloc::vec::Vec<u8>>"),
            "m::Wrapper::f"
        );
        assert_eq!(method_name("m", "f", "Plain"), "m::Plain::f");
    }
}
