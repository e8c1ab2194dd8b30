//! One configuration: the scripts (the shipped ones, or with a fix reverted), the clients'
//! operations, the faults and the bounds.

use super::*;

impl Protocol {
    /// `reverted`: text replacements in the scripts' sources, each of which must apply.
    pub(crate) fn new(
        name: &'static str,
        mode: Mode,
        programs: Vec<Vec<Op>>,
        faults: u8,
        reverted: &[(&str, &str)],
    ) -> Self {
        let (acquire, release, cancel) = match mode {
            Mode::Simple => (
                scripts::ACQUIRE_SIMPLE.get(false),
                scripts::RELEASE_SIMPLE.get(false),
                scripts::CANCEL_SIMPLE.get(false),
            ),
            Mode::Reentrant => (
                scripts::ACQUIRE_REENTRANT.get(false),
                scripts::RELEASE_HASH.get(false),
                scripts::CANCEL_HASH.get(false),
            ),
            Mode::Fair => (
                scripts::ACQUIRE_FAIR.get(false),
                scripts::RELEASE_HASH.get(false),
                scripts::CANCEL_HASH.get(false),
            ),
            _ => panic!("the model covers the native modes"),
        };
        let mut applied = vec![false; reverted.len()];
        let mut edit = |s: &Script| {
            let mut src = s.source().to_owned();
            for (i, (from, to)) in reverted.iter().enumerate() {
                if src.contains(from) {
                    applied[i] = true;
                    src = src.replace(from, to);
                }
            }
            Script::new(&src)
        };
        let scripts = Scripts {
            acquire: edit(acquire),
            release: edit(release),
            cancel: edit(cancel),
            read: edit(&scripts::ACQUIRE_SHARED),
            read_release: edit(scripts::RELEASE_SHARED.get(false)),
        };
        assert!(applied.iter().all(|a| *a), "{name}: a reverted fix no longer matches the scripts");
        let layout = KeyLayout::for_mode(crate::keys::DEFAULT_KEY_PREFIX.to_owned(), mode);
        let names = layout.names(KEY);
        Protocol {
            name,
            mode,
            programs,
            faults,
            scripts,
            names,
            layout,
            horizon: HORIZON,
            undo_names_waiter: false,
            resends: true,
            attempts: ATTEMPTS,
            permits: 0,
        }
    }

    /// Time stops moving `horizon` ms after the start.
    pub(crate) fn with_horizon(self, horizon: Ms) -> Self {
        Protocol { horizon, ..self }
    }

    /// An attempt's undo sends its waiter's tag, as the client did before f4b9ec5a (to revert
    /// that fix in the model).
    pub(crate) fn with_undo_naming_the_waiter(self) -> Self {
        Protocol { undo_names_waiter: true, ..self }
    }

    /// Up to `n` attempts per acquisition.
    pub(crate) fn with_attempts(self, attempts: u8) -> Self {
        Protocol { attempts, ..self }
    }

    /// `Op::Permit` asks for one of `permits` (at most 4).
    pub(crate) fn with_permits(self, permits: u8) -> Self {
        assert!(permits <= 4, "the model keeps the fences of 4 slots");
        Protocol { permits, ..self }
    }

    /// No request is sent twice: the faults are attempts given up only.
    pub(crate) fn without_resends(self) -> Self {
        Protocol { resends: false, ..self }
    }
}
