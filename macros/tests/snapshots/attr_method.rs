// Input:
//     #[grad(self.training)]
//     pub fn forward(&mut self, x: &Tensor) -> Tensor {
//         self.steps += 1;
//         self.net.forward(x)
//     }
// Expansion:

impl Model {
    pub fn forward(&mut self, x: &Tensor) -> Tensor {
        let __tch_scope_guard0 = ::tch_scope::__private::enter_or_panic(
            ::tch_scope::__private::grad(self.training),
        );
        {
            self.steps += 1;
            self.net.forward(x)
        }
    }
}
