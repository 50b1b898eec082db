// The training arguments of `checkpoint`: one mistake per function.
use tch::nn::VarStore;
use tch_scope::{RunState, scoped};

fn every_zero(vs: &VarStore) {
    scoped!(checkpoint(vs, "model.ot", every = 0) => {});
}

fn every_negative(vs: &VarStore) {
    scoped!(checkpoint(vs, "model.ot", every = -5) => {});
}

fn every_not_a_number(vs: &VarStore) {
    scoped!(checkpoint(vs, "model.ot", every = "10") => {});
}

fn optimizer_without_value(vs: &VarStore) {
    scoped!(checkpoint(vs, "model.ot", optimizer) => {});
}

// tch's own optimizer keeps its state out of reach: not accepted.
fn tch_optimizer(vs: &VarStore) {
    use tch::nn::OptimizerConfig;
    let opt = tch::nn::Adam::default().build(vs, 1e-3).unwrap();
    scoped!(checkpoint(vs, "model.ot", optimizer = opt) => {});
}

fn state_not_a_run_state(vs: &VarStore) {
    let epoch = 3;
    scoped!(checkpoint(vs, "model.ot", state = epoch) => {});
}

fn state_not_serializable(vs: &VarStore) {
    struct Opaque;
    let s = RunState::new(Opaque);
    scoped!(checkpoint(vs, "model.ot", state = s) => {});
}

fn main() {
    let vs = VarStore::new(tch::Device::Cpu);
    every_zero(&vs);
    every_negative(&vs);
    every_not_a_number(&vs);
    optimizer_without_value(&vs);
    tch_optimizer(&vs);
    state_not_a_run_state(&vs);
    state_not_serializable(&vs);
}
