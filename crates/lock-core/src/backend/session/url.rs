//! A pooled store's URL after its query: the driver's own options, taken by name and type with
//! [`UrlOptions`](crate::backend::UrlOptions) before the connect options they go to exist, and
//! TLS asked for by a store built without it.

use std::fmt;

use crate::{LockError, Result};

/// One driver setting, waiting for the connect options.
type Step<O> = Box<dyn FnOnce(O) -> O>;

/// Driver settings a URL gave, each applied to the connect options `O` by its setter once the
/// rest of the URL has made them ([`apply`](Self::apply)), in the order they were added.
pub struct DriverSettings<O> {
    steps: Vec<Step<O>>,
}

impl<O> fmt::Debug for DriverSettings<O> {
    // The settings are closures; how many there are is what can be shown.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DriverSettings").field("settings", &self.steps.len()).finish()
    }
}

impl<O> Default for DriverSettings<O> {
    fn default() -> Self {
        DriverSettings { steps: Vec::new() }
    }
}

impl<O> DriverSettings<O> {
    /// No settings yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Set `value` with `set`, if the URL gave one.
    pub fn add<T: 'static>(&mut self, value: Option<T>, set: impl FnOnce(O, T) -> O + 'static) {
        if let Some(v) = value {
            self.steps.push(Box::new(move |o| set(o, v)));
        }
    }

    /// `options` with every setting added.
    pub fn apply(self, options: O) -> O {
        self.steps.into_iter().fold(options, |o, step| step(o))
    }
}

/// Refuse a URL that asks for TLS (`asked`) of a store built without its `tls` feature
/// (`compiled` is `cfg!(feature = "tls")` in the store's crate, `krate` its name): the driver
/// would otherwise connect in the clear or fail with words that do not say why.
///
/// # Errors
/// [`LockError::InvalidConfig`] naming the feature.
pub fn refuse_tls_without_feature(asked: bool, compiled: bool, krate: &str) -> Result<()> {
    if asked && !compiled {
        return Err(LockError::InvalidConfig {
            reason: format!("the url asks for TLS; enable the `tls` feature of {krate}"),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_apply_in_order_and_tls_needs_its_feature() {
        let mut s = DriverSettings::<String>::new();
        s.add(Some('a'), |o, c| format!("{o}{c}"));
        s.add(None::<char>, |o, c| format!("{o}{c}"));
        s.add(Some(1), |o, n| format!("{o}{n}"));
        assert_eq!(s.apply("x".into()), "xa1");
        let e = refuse_tls_without_feature(true, false, "lock-x").expect_err("no feature");
        assert!(e.to_string().contains("`tls` feature of lock-x"), "{e}");
        assert!(refuse_tls_without_feature(true, true, "lock-x").is_ok());
        assert!(refuse_tls_without_feature(false, false, "lock-x").is_ok());
    }
}
