//! What the protocol models of this crate share (tests only): the holder's drifting clock and
//! the exhaustive run that says how large it was.

use stateright::{Checker, HasDiscoveries, Model};

use crate::DRIFT_MARGIN_RATE;

/// The holder clock rates a model explores, in parts per million: as fast as the drift margin
/// allows, exact, as slow.
pub(crate) fn drifts() -> [i64; 3] {
    let ppm = (DRIFT_MARGIN_RATE * 1e6) as i64;
    [-ppm, 0, ppm]
}

/// The reading at server time `now` (ms) of a clock running `ppm` parts per million fast.
pub(crate) fn local(now: u64, ppm: i64) -> u64 {
    (now as i64 + now as i64 * ppm / 1_000_000) as u64
}

/// Checks `model` breadth-first until `until`, and prints its size and time under `name`.
pub(crate) fn check<M>(name: &str, model: M, until: HasDiscoveries) -> impl Checker<M>
where
    M: Model + Send + Sync + 'static,
    M::State: Send + Sync + std::hash::Hash + std::fmt::Debug + Clone + PartialEq,
    M::Action: std::fmt::Debug + Clone + PartialEq,
{
    let started = std::time::Instant::now();
    let c = model.checker().finish_when(until).spawn_bfs().join();
    println!(
        "{name}: {} states ({} unique), depth {}, in {:.2?}",
        c.state_count(),
        c.unique_state_count(),
        c.max_depth(),
        started.elapsed()
    );
    c
}
