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

/// A value per use made from the method's name at its first run: the
/// name itself (memory scopes) or the `timed` site.
pub struct MethodCache<T: 'static>(OnceLock<First<T>>);

/// The name of a memory scope on a method.
pub type MethodName = MethodCache<&'static str>;

/// The `timed` site of a method.
pub type MethodSite = MethodCache<&'static Site>;

/// What a [`MethodCache`] holds, made from the name.
pub trait FromMethodName: Copy + 'static {
    fn from_name(name: &'static str) -> Self;
}

impl FromMethodName for &'static str {
    fn from_name(name: &'static str) -> Self {
        name
    }
}

impl FromMethodName for &'static Site {
    fn from_name(name: &'static str) -> Self {
        Site::named(name)
    }
}

impl<T: FromMethodName> MethodCache<T> {
    pub const fn new() -> Self {
        MethodCache(OnceLock::new())
    }

    #[inline]
    pub fn get(
        &'static self,
        module: &'static str,
        method: &'static str,
        ty: fn() -> &'static str,
    ) -> T {
        let ty = ty();
        let first = self.0.get_or_init(|| First {
            ty,
            value: T::from_name(Box::leak(method_name(module, method, ty).into_boxed_str())),
        });
        if first.ty == ty {
            first.value
        } else {
            T::from_name(other(std::ptr::from_ref(self) as usize, module, method, ty))
        }
    }
}

impl<T: FromMethodName> Default for MethodCache<T> {
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
