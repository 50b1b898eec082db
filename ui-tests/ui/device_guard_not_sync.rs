use tch_scope::{OnDevice, Scope};

fn require_send<T: Send>(_: T) {}

fn main() {
    let guard = OnDevice::new("cpu").enter().unwrap();
    require_send(guard);
}
