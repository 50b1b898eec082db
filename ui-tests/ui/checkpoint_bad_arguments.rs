// One mistake per function, so none hides behind another.
use tch::nn::VarStore;
use tch_scope::scoped;

fn missing_path(vs: &VarStore) {
    scoped!(checkpoint(vs) => {});
}

fn unknown_flag(vs: &VarStore) {
    scoped!(checkpoint(vs, "model.ot", restart) => {});
}

fn resume_not_bool(vs: &VarStore) {
    scoped!(checkpoint(vs, "model.ot", resume = "yes") => {});
}

fn not_a_varstore() {
    let model = 3;
    scoped!(checkpoint(model, "model.ot") => {});
}

fn main() {
    let vs = VarStore::new(tch::Device::Cpu);
    missing_path(&vs);
    unknown_flag(&vs);
    resume_not_bool(&vs);
    not_a_varstore();
}
