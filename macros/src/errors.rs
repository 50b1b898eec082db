//! Collects errors so one expansion reports every mistake at once.

/// All errors so far, combined as `syn` does.
#[derive(Default)]
pub(crate) struct Errors(Option<syn::Error>);

impl Errors {
    pub(crate) fn push(&mut self, error: syn::Error) {
        match &mut self.0 {
            Some(all) => all.combine(error),
            None => self.0 = Some(error),
        }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.0.is_none()
    }

    pub(crate) fn finish(self) -> syn::Result<()> {
        self.0.map_or(Ok(()), Err)
    }

    /// All errors so far, or `error` if there are none.
    pub(crate) fn or(self, error: syn::Error) -> syn::Error {
        self.0.unwrap_or(error)
    }

    /// All errors so far, then `error`.
    pub(crate) fn and(self, error: syn::Error) -> syn::Error {
        match self.0 {
            Some(mut all) => {
                all.combine(error);
                all
            }
            None => error,
        }
    }
}
