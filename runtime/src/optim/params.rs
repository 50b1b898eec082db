//! What the optimizers share: their parameters by name, and the naming of
//! their state's tensors (`<optimizer>.<buffer>.<parameter>`).

use std::collections::BTreeMap;

use tch::Tensor;
use tch::nn::VarStore;

use crate::ScopeError;

/// The trainable variables of a `VarStore`, sorted by name: the order is
/// the same in every process, so states line up by name and by position.
pub(crate) struct Params {
    pub names: Vec<String>,
    pub tensors: Vec<Tensor>,
}

impl Params {
    pub fn of(vs: &VarStore, optimizer: &'static str) -> Result<Self, ScopeError> {
        let mut named: Vec<(String, Tensor)> = vs
            .variables()
            .into_iter()
            .filter(|(_, t)| t.requires_grad())
            .collect();
        if named.is_empty() {
            return Err(ScopeError::new(
                optimizer,
                Some(vs.device()),
                "the VarStore has no trainable variable to optimize",
            ));
        }
        named.sort_by(|a, b| a.0.cmp(&b.0));
        let (names, tensors) = named.into_iter().unzip();
        Ok(Self { names, tensors })
    }

    /// Zeroes each defined gradient; the first refused operator's error.
    pub fn try_zero_grad(&self, optimizer: &'static str) -> Result<(), ScopeError> {
        for (name, p) in self.names.iter().zip(&self.tensors) {
            let mut grad = p.grad();
            if grad.defined() {
                let _ = grad
                    .f_detach_()
                    .and_then(|mut g| g.f_zero_())
                    .map_err(|e| op_error(optimizer, name, p, &e))?;
            }
        }
        Ok(())
    }
}

/// A checked learning rate, momentum, … : finite and in `range`.
pub(crate) fn check(
    optimizer: &'static str,
    what: &str,
    value: f64,
    ok: bool,
    expected: &str,
) -> Result<f64, ScopeError> {
    if value.is_finite() && ok {
        Ok(value)
    } else {
        Err(ScopeError::new(
            optimizer,
            None,
            format!("{what} must be {expected}, got {value}"),
        ))
    }
}

/// A failed operator of a step, as the optimizer's error.
pub(crate) fn op_error(
    optimizer: &'static str,
    param: &str,
    p: &Tensor,
    e: &tch::TchError,
) -> ScopeError {
    ScopeError::run(
        optimizer,
        Some(p.device()),
        format!("the update of parameter `{param}` failed: {e}"),
    )
}

/// A state being built: `<optimizer>.<buffer>.<parameter>` and
/// `<optimizer>.option.<name>` entries, each a copy — into the tensors of
/// an earlier state where they line up (see `Optimizer::state_into`).
pub(crate) struct StateOut {
    prefix: &'static str,
    pub entries: Vec<(String, Tensor)>,
    /// An earlier state's entries, reused in order.
    old: std::vec::IntoIter<(String, Tensor)>,
}

impl StateOut {
    /// Builds into `old`'s tensors where names, shapes and kinds match.
    pub fn reusing(prefix: &'static str, old: Vec<(String, Tensor)>) -> Self {
        Self {
            prefix,
            entries: Vec::with_capacity(old.len()),
            old: old.into_iter(),
        }
    }

    /// `src` copied into the next old entry if it is `name`'s and fits,
    /// else a fresh copy.
    fn push(&mut self, name: String, src: &Tensor) {
        let reused = self.old.next().and_then(|(old_name, mut t)| {
            let fits = old_name == name && t.size() == src.size() && t.kind() == src.kind();
            (fits && t.f_copy_(src).is_ok()).then_some(t)
        });
        let t = reused.unwrap_or_else(|| src.copy());
        self.entries.push((name, t));
    }

    pub fn option(&mut self, name: &str, value: f64) {
        self.push(
            format!("{}.option.{name}", self.prefix),
            &Tensor::from(value),
        );
    }

    pub fn buffer(&mut self, buffer: &str, param: &str, t: &Tensor) {
        self.push(format!("{}.{buffer}.{param}", self.prefix), t);
    }

    pub fn count(&mut self, buffer: &str, param: &str, n: i64) {
        self.push(
            format!("{}.{buffer}.{param}", self.prefix),
            &Tensor::from(n),
        );
    }
}

/// A state being read back: every entry must be claimed, or the load is
/// refused.
pub(crate) struct StateIn<'a> {
    prefix: &'static str,
    options: BTreeMap<&'a str, &'a Tensor>,
    buffers: BTreeMap<(String, String), &'a Tensor>,
}

impl<'a> StateIn<'a> {
    pub fn parse(prefix: &'static str, state: &'a [(String, Tensor)]) -> Result<Self, ScopeError> {
        let mut options = BTreeMap::new();
        let mut buffers = BTreeMap::new();
        for (key, t) in state {
            let rest = key
                .strip_prefix(prefix)
                .and_then(|r| r.strip_prefix('.'))
                .ok_or_else(|| {
                    ScopeError::load(
                        prefix,
                        None,
                        format!("the state entry `{key}` is not a {prefix} state's"),
                    )
                })?;
            let (buffer, name) = rest.split_once('.').ok_or_else(|| {
                ScopeError::load(prefix, None, format!("malformed state entry `{key}`"))
            })?;
            if buffer == "option" {
                options.insert(name, t);
            } else {
                buffers.insert((buffer.to_owned(), name.to_owned()), t);
            }
        }
        Ok(Self {
            prefix,
            options,
            buffers,
        })
    }

    /// An option's value; `None` when the state lacks it.
    pub fn option(&mut self, name: &str) -> Result<f64, ScopeError> {
        let t = self.options.remove(name).ok_or_else(|| {
            ScopeError::load(
                self.prefix,
                None,
                format!("the state lacks the option `{name}`"),
            )
        })?;
        t.f_double_value(&[])
            .map_err(|e| ScopeError::load(self.prefix, None, format!("option `{name}`: {e}")))
    }

    /// A count (a step) of `param`, if the state has one.
    pub fn count(&mut self, buffer: &str, param: &str) -> Result<Option<i64>, ScopeError> {
        self.buffers
            .remove(&(buffer.to_owned(), param.to_owned()))
            .map(|t| {
                t.f_int64_value(&[]).map_err(|e| {
                    ScopeError::load(self.prefix, None, format!("`{buffer}` of `{param}`: {e}"))
                })
            })
            .transpose()
    }

    /// A buffer of `param`, if the state has one: a copy on the
    /// parameter's device, refused unless its shape and dtype are the
    /// parameter's.
    pub fn buffer(
        &mut self,
        buffer: &str,
        param: &str,
        p: &Tensor,
    ) -> Result<Option<Tensor>, ScopeError> {
        let Some(t) = self.buffers.remove(&(buffer.to_owned(), param.to_owned())) else {
            return Ok(None);
        };
        if t.size() != p.size() || t.kind() != p.kind() {
            return Err(ScopeError::load(
                self.prefix,
                Some(p.device()),
                format!(
                    "`{buffer}` of `{param}` is {:?} {:?}, the parameter {:?} {:?}",
                    t.kind(),
                    t.size(),
                    p.kind(),
                    p.size()
                ),
            ));
        }
        t.f_to_device(p.device())
            .and_then(|t| t.f_detach_copy())
            .map(Some)
            .map_err(|e| {
                ScopeError::load(
                    self.prefix,
                    Some(p.device()),
                    format!("`{buffer}` of `{param}`: {e}"),
                )
            })
    }

    /// Refuses what no parameter or option claimed.
    pub fn finish(self) -> Result<(), ScopeError> {
        let left: Vec<String> = self
            .options
            .keys()
            .map(|k| format!("option.{k}"))
            .chain(self.buffers.keys().map(|(b, p)| format!("{b}.{p}")))
            .collect();
        if left.is_empty() {
            Ok(())
        } else {
            Err(ScopeError::load(
                self.prefix,
                None,
                format!(
                    "the state has entries for no parameter of this optimizer: {}",
                    left.join(", ")
                ),
            ))
        }
    }
}

/// A tensor of zeros shaped as `p`, for a buffer's first step.
pub(crate) fn zeros_like(p: &Tensor) -> Result<Tensor, tch::TchError> {
    p.f_zeros_like()
}

/// A 0-dim f64 tensor of `x`, for the updates' scalars. tch's methods that
/// take a `Scalar` panic instead of returning their operator's error (the
/// `Scalar`'s drop meets the pending error), so the updates use tensors:
/// a refused operator (a passed `deadline`, a stop) is then an `Err`. A
/// 0-dim tensor takes part in an operator as a scalar does: same dtype
/// rules, same kernel.
pub(crate) fn scalar(x: f64) -> Result<Tensor, tch::TchError> {
    Tensor::f_from_slice(&[x])?.f_squeeze()
}
