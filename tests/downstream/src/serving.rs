//! A model trained in Rust served over the Open Inference Protocol as a
//! user's crate serves it: replicas made by a factory, a batcher, the
//! serving library's `Server`, stopped by the program.

use std::net::SocketAddr;
use std::sync::Arc;

use tch::nn;
use tch::Device;
use ts::batch::{BatchOptions, Batcher};
use ts::serve::{oip::Datatype, Engine, Server};
use ts::{Inference, WithMode};

/// Serves copies of `trained` (a `Linear` of 3 features to 1 under `fc`)
/// on loopback, batched, until `stop` completes; `ready` hears the
/// address it listens on.
///
/// # Errors
/// A `ScopeError` when the replicas, the batcher or the server cannot
/// start, or the server's shutdown cut requests off.
pub async fn serve_trained(
    trained: &nn::VarStore,
    ready: tokio::sync::oneshot::Sender<SocketAddr>,
    stop: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<(), ts::ScopeError> {
    let served = Inference::replicated(2, |_| {
        let mut vs = nn::VarStore::new(Device::Cpu);
        let replica = nn::linear(vs.root() / "fc", 3, 1, nn::LinearConfig::default());
        vs.copy(trained)?;
        Ok::<_, tch::TchError>(WithMode::new(replica))
    })?;
    let batcher = Batcher::new(Arc::new(served), BatchOptions::new().workers(2), |r, xs| {
        Ok(vec![r.get().forward(&xs[0])])
    })?;
    let listening = Server::new("trained", Engine::new(batcher))
        .input(Datatype::Fp32, &[-1, 3])
        .bind(SocketAddr::from(([127, 0, 0, 1], 0)))
        .await?;
    let _ = ready.send(listening.local_addr());
    listening.serve_until(stop).await
}
