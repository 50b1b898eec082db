//! What the optimizers share: their parameters by name, and the naming of
//! their state's tensors (`<optimizer>.<buffer>.<parameter>`).

use std::collections::BTreeMap;
use std::sync::Arc;

use tch::Tensor;
use tch::nn::VarStore;

use super::cow::{Cow, Hold};
use super::{HeldParam, HeldParams};
use crate::ScopeError;

/// The trainable variables of a `VarStore`, sorted by name: the order is
/// the same in every process, so states line up by name and by position.
pub(crate) struct Params {
    pub names: Vec<String>,
    pub tensors: Vec<Tensor>,
    /// Each parameter's storages, for boundaries that alias it.
    pub cows: Vec<Cow>,
    /// Parameters that code outside the optimizer wrote in place while a
    /// boundary aliased them: boundaries copy these instead.
    pub copied: Vec<bool>,
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
        let (names, tensors): (Vec<_>, Vec<_>) = named.into_iter().unzip();
        Ok(Self {
            cows: names.iter().map(|_| Cow::default()).collect(),
            copied: vec![false; names.len()],
            names,
            tensors,
        })
    }

    /// A step boundary's hold on the parameters: an alias of each (its
    /// version then recorded), or, for one written in place by code
    /// outside the optimizer while an earlier boundary aliased it, a mark
    /// that the checkpoint copies it.
    pub fn hold(&mut self) -> Result<(Arc<Hold>, HeldParams), tch::TchError> {
        let mut start = vec![-1; self.tensors.len()];
        let mut held = Vec::with_capacity(self.tensors.len());
        for (i, p) in self.tensors.iter().enumerate() {
            if !self.copied[i] && self.cows[i].written_while_held(i, p) {
                self.copied[i] = true;
                self.cows[i].clear();
            }
            let entry = if self.copied[i] {
                HeldParam::Copy
            } else {
                start[i] = p.f_internal_version()?;
                HeldParam::Alias {
                    index: i,
                    // A view: it shares the parameter's version counter,
                    // which tells a save whether the storage was written.
                    alias: p.f_detach()?,
                }
            };
            held.push((self.names[i].clone(), entry));
        }
        let hold = Hold::new(start);
        for (i, p) in self.tensors.iter().enumerate() {
            if !self.copied[i] {
                self.cows[i].hold(p, &hold)?;
            }
        }
        Ok((hold, held))
    }

    /// Moves parameter `i` to `out` (an update written out of place): see
    /// `Cow::move_param`. A parameter found written in place by other code
    /// while a boundary held it is copied at boundaries from now on.
    pub fn move_to(&mut self, i: usize, out: Option<&Tensor>) -> Result<(), tch::TchError> {
        let Some(out) = out else { return Ok(()) };
        if self.cows[i].move_param(i, &mut self.tensors[i], out)? {
            self.copied[i] = true;
            self.cows[i].clear();
        }
        Ok(())
    }

    /// One step over the parameters that have a gradient, each with its
    /// own optimizer state (`states[i]`, parameter `i`'s): `update` computes
    /// the parameter's update (its output, `None` when written in place,
    /// and what the state keeps of it); the parameter moves to the output
    /// first, then `commit` makes the state current, so a refused move
    /// leaves that parameter's state as it was (its update was written
    /// elsewhere). The first error, naming the optimizer and the parameter.
    pub fn step_each<S, K>(
        &mut self,
        optimizer: &'static str,
        states: &mut [S],
        mut update: impl FnMut(
            &Tensor,
            &mut Cow,
            &Tensor,
            &mut S,
        ) -> Result<(Option<Tensor>, K), tch::TchError>,
        mut commit: impl FnMut(&mut S, K),
    ) -> Result<(), ScopeError> {
        for (i, state) in states.iter_mut().enumerate().take(self.tensors.len()) {
            let grad = self.tensors[i].grad();
            if !grad.defined() {
                continue;
            }
            let failed = |params: &Self, e: &tch::TchError| {
                op_error(optimizer, &params.names[i], &params.tensors[i], e)
            };
            let (out, kept) = update(&self.tensors[i], &mut self.cows[i], &grad, state)
                .map_err(|e| failed(self, &e))?;
            self.move_to(i, out.as_ref())
                .map_err(|e| failed(self, &e))?;
            commit(state, kept);
        }
        Ok(())
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
        let t = self.reuse(&name, src).unwrap_or_else(|| src.copy());
        self.entries.push((name, t));
    }

    /// The next old entry, `src` copied into it, if it is `name`'s and
    /// fits.
    fn reuse(&mut self, name: &str, src: &Tensor) -> Option<Tensor> {
        self.old.next().and_then(|(old_name, mut t)| {
            let fits = old_name == name && t.size() == src.size() && t.kind() == src.kind();
            (fits && t.f_copy_(src).is_ok()).then_some(t)
        })
    }

    /// A value made for the state: into an old entry that fits, else
    /// itself (no copy: nothing else holds it).
    fn push_value(&mut self, name: String, value: Tensor) {
        let t = self.reuse(&name, &value).unwrap_or(value);
        self.entries.push((name, t));
    }

    pub fn option(&mut self, name: &str, value: f64) {
        self.push_value(
            format!("{}.option.{name}", self.prefix),
            Tensor::from(value),
        );
    }

    pub fn buffer(&mut self, buffer: &str, param: &str, t: &Tensor) {
        self.push(format!("{}.{buffer}.{param}", self.prefix), t);
    }

    /// `t` itself (no copy), its storage claimed for `hold` in its pool
    /// `cow`: no update writes it in place while the boundary lives.
    pub fn alias(
        &mut self,
        buffer: &str,
        param: &str,
        t: &Tensor,
        cow: &mut Cow,
        hold: &Arc<Hold>,
    ) -> Result<(), tch::TchError> {
        cow.hold(t, hold)?;
        let name = format!("{}.{buffer}.{param}", self.prefix);
        self.entries.push((name, t.shallow_clone()));
        Ok(())
    }

    pub fn count(&mut self, buffer: &str, param: &str, n: i64) {
        self.push_value(format!("{}.{buffer}.{param}", self.prefix), Tensor::from(n));
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
