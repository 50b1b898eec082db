//! Helpers shared by the integration tests.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

use tch::{Device, Kind, Tensor};

/// Everything a scope may change on this thread.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ThreadState {
    pub grad: bool,
    pub inference: bool,
    pub device: Device,
    pub cuda_device: Option<usize>,
}

pub fn state() -> ThreadState {
    ThreadState {
        grad: tch_scope::is_grad_enabled(),
        inference: tch_scope::is_inference_mode_enabled(),
        device: tch_scope::current_device(),
        cuda_device: tch_scope::current_cuda_device(),
    }
}

/// The state of a fresh thread.
pub fn fresh() -> ThreadState {
    ThreadState {
        grad: true,
        inference: false,
        device: Device::Cpu,
        cuda_device: state().cuda_device,
    }
}

/// A leaf that requires grad, so results show whether autograd recorded.
pub fn leaf() -> Tensor {
    Tensor::ones([2, 2], (Kind::Float, Device::Cpu)).set_requires_grad(true)
}

/// Pending once, then ready: a hand-made suspension point.
#[derive(Default)]
pub struct YieldOnce(bool);

impl Future for YieldOnce {
    type Output = ();
    fn poll(mut self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<()> {
        if self.0 {
            Poll::Ready(())
        } else {
            self.0 = true;
            Poll::Pending
        }
    }
}

/// Polls `f` once with a no-op waker.
pub fn poll_once<F: Future + ?Sized>(f: Pin<&mut F>) -> Poll<F::Output> {
    f.poll(&mut Context::from_waker(Waker::noop()))
}

/// Polls `f` to completion on this thread.
pub fn block_on<F: Future>(f: F) -> F::Output {
    let mut f = std::pin::pin!(f);
    loop {
        if let Poll::Ready(v) = poll_once(f.as_mut()) {
            return v;
        }
    }
}
