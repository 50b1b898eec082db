//! The Open Inference Protocol's routes (`/v2/…`), from the serving
//! library (`tch_scope::serve`), over the batched server's own batcher:
//! a request through `/v2/models/{name}/infer` and one through `/predict`
//! share its queue, its workers and its batches.

use std::sync::Arc;

use axum::Router;
use tch_scope::aoti::Package;
use tch_scope::serve::oip::Datatype;
use tch_scope::serve::{Engine, PLATFORM_AOTI, PLATFORM_TORCHSCRIPT, Server, model_name};

use crate::batched::{BatchEngine, Batched};
use crate::flags::Args;

/// The `/v2` routes over `batched`'s batcher, named `--name` (default: the
/// model file's stem), its input `--input-shape` and `--input-dtype`, or
/// for a `.pt2` without them the package's own; `None` for a TorchScript
/// file without `--input-shape` (it declares no shapes).
pub(crate) async fn routes(
    args: &Args,
    batched: &Batched,
) -> Result<Option<(String, Router)>, String> {
    let (engine, declared) = match &*batched.engine {
        BatchEngine::Module(b) => (Engine::shared(Arc::clone(b), PLATFORM_TORCHSCRIPT), None),
        BatchEngine::Package(b) => {
            let specs = b.served().run(|p: &Package| {
                p.input_specs().and_then(|specs| {
                    specs
                        .iter()
                        .map(|s| {
                            let dt = Datatype::from_kind(s.kind()?).ok()?;
                            let dims = s.dims().iter().map(|d| match d {
                                tch_scope::aoti::InputDim::Fixed(n) => *n,
                                tch_scope::aoti::InputDim::Range { .. } => -1,
                            });
                            Some((dt, dims.collect::<Vec<i64>>()))
                        })
                        .collect::<Option<Vec<_>>>()
                })
            });
            (Engine::shared(Arc::clone(b), PLATFORM_AOTI), specs)
        }
    };
    let inputs = match (&args.input_shape, declared) {
        (Some(shape), _) => vec![(args.input_dtype, shape.0.clone())],
        (None, Some(declared)) => declared,
        (None, None) => return Ok(None),
    };
    let name = args.name.clone().unwrap_or_else(|| model_name(&args.model));
    let mut server = Server::new(name.clone(), engine)
        .body_limit(args.body_limit)
        .body_timeout(args.body_timeout)
        .default_deadline(args.default_deadline);
    for (dt, shape) in &inputs {
        server = server.input(*dt, shape);
    }
    let router = server.oip_routes().await.map_err(|e| e.to_string())?;
    Ok(Some((name, router)))
}
