//! Gradient averaging across ranks, as DistributedDataParallel does after
//! `backward()`: grads are flattened into buckets (one all_reduce each
//! rather than one per parameter), summed, divided by the world size and
//! copied back.

use tch::{Kind, Tensor, nn::VarStore};

use super::{DistError, Group, ReduceOp};

/// DDP's default bucket size (`bucket_cap_mb=25`).
pub const DEFAULT_BUCKET_BYTES: usize = 25 * 1024 * 1024;

impl Group {
    /// Averages the gradients of `vs`'s trainable variables across ranks in
    /// place, in buckets of at most [`DEFAULT_BUCKET_BYTES`]. Call it after
    /// `backward()` and before the optimizer step; every rank then steps
    /// with the same gradient, so the weights stay identical.
    ///
    /// Variables are taken in name order, so ranks agree on the layout;
    /// every rank must have gradients for the same variables (as after a
    /// backward pass through the same model).
    ///
    /// # Errors
    /// A [`DistError`] if a collective fails.
    ///
    /// ```no_run
    /// use tch::{Device, Kind, Tensor, nn};
    /// # let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    /// # if !tch_scope::dist::Backend::Gloo.is_available() { return; } // built without gloo
    /// # let master = format!("127.0.0.1:{port}");
    /// let vs = nn::VarStore::new(Device::Cpu);
    /// let w = vs.root().ones("w", &[3]);
    /// (&w * 2.0).sum(Kind::Float).backward();
    /// tch_scope::scoped!(distributed(rank = 0, world_size = 1, master = master) => {
    ///     tch_scope::dist::current().unwrap().average_gradients(&vs).unwrap();
    /// });
    /// assert_eq!(Vec::<f32>::try_from(&w.grad()).unwrap(), [2.0, 2.0, 2.0]);
    /// ```
    pub fn average_gradients(&self, vs: &VarStore) -> Result<(), DistError> {
        self.average_gradients_bucketed(vs, DEFAULT_BUCKET_BYTES)
    }

    /// [`average_gradients`](Self::average_gradients) with buckets of at
    /// most `bucket_bytes` (a variable larger than that gets a bucket of
    /// its own; `0` means one bucket per variable).
    ///
    /// # Errors
    /// A [`DistError`] if a collective fails.
    ///
    /// ```no_run
    /// use tch::{Device, Kind, nn};
    /// # let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    /// # if !tch_scope::dist::Backend::Gloo.is_available() { return; } // built without gloo
    /// # let master = format!("127.0.0.1:{port}");
    /// let vs = nn::VarStore::new(Device::Cpu);
    /// let (a, b) = (vs.root().ones("a", &[2]), vs.root().ones("b", &[2]));
    /// (&a + &b).sum(Kind::Float).backward();
    /// tch_scope::scoped!(distributed(rank = 0, world_size = 1, master = master) => {
    ///     tch_scope::dist::current().unwrap().average_gradients_bucketed(&vs, 8).unwrap();
    /// });
    /// assert_eq!(Vec::<f32>::try_from(&b.grad()).unwrap(), [1.0, 1.0]);
    /// ```
    pub fn average_gradients_bucketed(
        &self,
        vs: &VarStore,
        bucket_bytes: usize,
    ) -> Result<(), DistError> {
        let _no_grad = tch::no_grad_guard();
        let mut vars: Vec<(String, Tensor)> = vs
            .variables()
            .into_iter()
            .filter(|(_, v)| v.requires_grad() && v.grad().defined())
            .collect();
        // A HashMap's order differs between processes; names don't.
        vars.sort_by(|a, b| a.0.cmp(&b.0));
        let grads: Vec<Tensor> = vars.iter().map(|(_, v)| v.grad()).collect();
        for bucket in buckets(&grads, bucket_bytes) {
            self.average_bucket(bucket)?;
        }
        Ok(())
    }

    fn average_bucket(&self, grads: &[Tensor]) -> Result<(), DistError> {
        let fail = |e: tch::TchError| DistError::new("all_reduce", self.rank(), e.to_string());
        let flat: Vec<Tensor> = grads.iter().map(|g| g.reshape([-1])).collect();
        let mut buffer = Tensor::f_cat(&flat, 0).map_err(fail)?;
        self.all_reduce(&mut buffer, ReduceOp::Mean)?;
        let mut offset = 0;
        for g in grads {
            let n = g.numel() as i64;
            let part = buffer
                .f_narrow(0, offset, n)
                .map_err(fail)?
                .f_view_as(g)
                .map_err(fail)?;
            let mut g = g.shallow_clone();
            g.f_copy_(&part).map_err(fail)?;
            offset += n;
        }
        Ok(())
    }
}

/// Consecutive runs of grads of one kind and device, each at most
/// `cap` bytes (or one grad, if larger).
fn buckets(grads: &[Tensor], cap: usize) -> Vec<&[Tensor]> {
    let mut out = Vec::new();
    let (mut start, mut bytes) = (0, 0);
    let mut key: Option<(Kind, tch::Device)> = None;
    for (i, g) in grads.iter().enumerate() {
        let size = g.numel() * g.kind().elt_size_in_bytes();
        let k = (g.kind(), g.device());
        if i > start && (key != Some(k) || bytes + size > cap) {
            out.push(&grads[start..i]);
            (start, bytes) = (i, 0);
        }
        key = Some(k);
        bytes += size;
    }
    if start < grads.len() {
        out.push(&grads[start..]);
    }
    out
}

#[cfg(test)]
mod tests {
    use tch::{Device, Kind, Tensor, nn::VarStore};

    use crate::Scope;
    use crate::dist::{Backend, Distributed, current, tests::master};

    /// In a world of one, the average is the gradient itself, whatever
    /// the buckets.
    #[test]
    fn a_world_of_one_keeps_its_gradients() {
        if !Backend::Gloo.is_available() {
            return; // built without gloo
        }
        let vs = VarStore::new(Device::Cpu);
        let w = vs.root().ones("w", &[3]);
        let (a, b) = (vs.root().ones("a", &[2]), vs.root().ones("b", &[2]));
        (&w * 2.0 + (&a + &b).sum(Kind::Float))
            .sum(Kind::Float)
            .backward();
        let _group = Distributed::gloo(0, 1, master()).enter().unwrap();
        let g = current().unwrap();
        let grads = || [&w, &a, &b].map(|v| Vec::<f32>::try_from(&v.grad()).unwrap());
        let want = [vec![2.0; 3], vec![3.0; 2], vec![3.0; 2]];
        g.average_gradients(&vs).unwrap();
        assert_eq!(grads(), want);
        g.average_gradients_bucketed(&vs, 8).unwrap();
        assert_eq!(grads(), want);
    }

    #[test]
    fn buckets_split_by_size_and_kind() {
        let f = |n: i64, k: Kind| Tensor::zeros([n], (k, Device::Cpu));
        let grads = [
            f(2, Kind::Float),
            f(2, Kind::Float),
            f(3, Kind::Float),
            f(1, Kind::Double),
        ];
        let sizes: Vec<usize> = super::buckets(&grads, 16).iter().map(|b| b.len()).collect();
        assert_eq!(sizes, [2, 1, 1]);
        let sizes: Vec<usize> = super::buckets(&grads, 0).iter().map(|b| b.len()).collect();
        assert_eq!(sizes, [1, 1, 1, 1]);
        assert!(super::buckets(&[], 16).is_empty());
    }
}
