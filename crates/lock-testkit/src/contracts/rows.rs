//! The table's rows: for each operation, each promise that applies to it and the case that
//! checks it, or the gap.

use super::{Check, Promise, Row};

/// The rows of one operation: `op`'s checks, one per promise.
macro_rules! rows {
    ($($op:literal: $($promise:ident => $how:ident($what:literal)),+ ;)*) => {
        &[$($(Row { promise: Promise::$promise, op: $op, check: Check::$how($what) }),+),*]
    };
}

/// Every row. A case named here may cover several operations; a promise with no case for an
/// operation is a `Gap` row that says so.
pub const ROWS: &[Row] = rows! {
    "Locker::try_lock":
        Exclusion => Case("round_trip"),
        FencesIncrease => Case("fencing_tokens_increase"),
        LostBeforeSuccessor => Case("lost_before_successor"),
        DeadlineBound => Case("every_operation_answers_in_time");
    "Locker::with_lock":
        Exclusion => Gap("with_lock is acquire + run: no case runs it under contention"),
        FencesIncrease => Gap("with_lock is acquire + run: covered only through LockRequest::acquire"),
        LostBeforeSuccessor => Gap("the closure's lost signal is not checked against a successor"),
        DeadlineBound => Case("every_operation_answers_in_time"),
        NotWedged => Gap("no case cancels a with_lock"),
        BookkeepingBounded => Gap("no case counts what a cancelled with_lock leaves"),
        GrantedLive => Gap("one hold through LockRequest::acquire, which has the case; none of its own");
    "LockRequest::acquire":
        Exclusion => Case("mutual_exclusion"),
        FencesIncrease => Case("fences_increase_under_contention"),
        LostBeforeSuccessor => Case("lost_before_successor"),
        DeadlineBound => Case("every_operation_answers_in_time"),
        NotWedged => Case("cancelled_acquire_leaves_nothing"),
        BookkeepingBounded => Case("a_burst_of_cancellations_and_releases_leaves_one_bounded_set"),
        GrantedLive => Case("a_waiting_acquisition_is_not_handed_a_grant_answered_past_its_lease");
    "LockRequest::try_acquire":
        Exclusion => Case("round_trip"),
        FencesIncrease => Case("fences_never_repeat_while_lock_files_are_removed"),
        LostBeforeSuccessor => Case("lost_before_successor"),
        DeadlineBound => Case("every_operation_answers_in_time");
    "LockRequest::run":
        Exclusion => Gap("run is acquire + the closure: no case runs it under contention"),
        FencesIncrease => Gap("run is acquire + the closure: covered only through LockRequest::acquire"),
        LostBeforeSuccessor => Gap("the closure's lost signal is not checked against a successor"),
        DeadlineBound => Case("every_operation_answers_in_time"),
        NotWedged => Gap("no case cancels a run"),
        BookkeepingBounded => Gap("no case counts what a cancelled run leaves"),
        GrantedLive => Gap("one hold through LockRequest::acquire, which has the case; none of its own");
    "LockGuard::release":
        DeadlineBound => Case("every_operation_answers_in_time");
    "LockGuard::renew":
        DeadlineBound => Case("every_operation_answers_in_time");
    "MultiLock::acquire":
        Exclusion => Case("keys_independent_multilock"),
        FencesIncrease => Gap("no case compares a MultiLock's fences with its parts' earlier ones"),
        LostBeforeSuccessor => Gap("no case loses one part of a MultiLock before a successor"),
        DeadlineBound => Case("every_operation_answers_in_time"),
        NotWedged => Gap("no case cancels a MultiLock part-way"),
        BookkeepingBounded => Gap("no case counts what a cancelled MultiLock leaves"),
        GrantedLive => Case("multilock_grants_only_live_parts");
    "MultiGuard::release":
        DeadlineBound => Case("every_operation_answers_in_time");
    "ReadRequest::acquire":
        FencesIncrease => Gap("no case compares a read's fence with earlier grants'"),
        Exclusion => Case("rw_writer_excludes_everyone"),
        LostBeforeSuccessor => Case("rw_reader_lost_signal_fires"),
        DeadlineBound => Case("every_operation_answers_in_time"),
        NotWedged => Case("rw_crashed_writer_frees_lock"),
        PhaseFair => Case("rw_phase_fair"),
        BookkeepingBounded => Case("a_burst_of_cancellations_and_releases_leaves_one_bounded_set"),
        GrantedLive => Gap("one hold through LockRequest::acquire, which has the case; none of its own");
    "ReadRequest::try_acquire":
        FencesIncrease => Gap("no case compares a read's fence with earlier grants'"),
        Exclusion => Case("rw_readers_share"),
        LostBeforeSuccessor => Case("rw_reader_lost_signal_fires"),
        DeadlineBound => Case("every_operation_answers_in_time"),
        PhaseFair => Case("rw_phase_fair");
    "WriteRequest::acquire":
        Exclusion => Case("rw_writer_excludes_everyone"),
        FencesIncrease => Case("rw_write_fences_increase"),
        LostBeforeSuccessor => Case("rw_writer_lost_signal_fires"),
        DeadlineBound => Case("every_operation_answers_in_time"),
        NotWedged => Case("rw_crashed_writer_frees_lock"),
        PhaseFair => Case("rw_writer_not_starved"),
        BookkeepingBounded => Gap("no case counts what a cancelled write leaves"),
        GrantedLive => Case("rw_write_grants_only_live_parts");
    "WriteRequest::try_acquire":
        Exclusion => Case("rw_writer_excludes_everyone"),
        FencesIncrease => Case("rw_write_fences_increase"),
        LostBeforeSuccessor => Case("rw_writer_lost_signal_fires"),
        DeadlineBound => Case("every_operation_answers_in_time"),
        PhaseFair => Case("rw_phase_fair");
    "ReadGuard::release":
        DeadlineBound => Case("every_operation_answers_in_time");
    "WriteGuard::release":
        DeadlineBound => Case("every_operation_answers_in_time");
    "UpgradeableRequest::acquire":
        FencesIncrease => Gap("no case compares an upgradeable read's fence with earlier grants'"),
        Exclusion => Case("rw_upgradeable_read_upgrades_before_writers"),
        LostBeforeSuccessor => Gap("no case loses an upgradeable read before a successor"),
        DeadlineBound => Case("every_operation_answers_in_time"),
        NotWedged => Gap("no case cancels an upgradeable read"),
        PhaseFair => Case("rw_phase_fair"),
        BookkeepingBounded => Gap("no case counts what a cancelled upgradeable read leaves"),
        GrantedLive => Case("rw_upgradeable_read_grants_only_live_parts");
    "UpgradeableRequest::try_acquire":
        FencesIncrease => Gap("no case compares an upgradeable read's fence with earlier grants'"),
        Exclusion => Case("rw_upgradeable_read_upgrades_before_writers"),
        LostBeforeSuccessor => Gap("no case loses an upgradeable read before a successor"),
        DeadlineBound => Case("every_operation_answers_in_time"),
        PhaseFair => Case("rw_phase_fair");
    "UpgradeableReadGuard::upgrade":
        Exclusion => Case("rw_upgradeable_read_upgrades_before_writers"),
        FencesIncrease => Gap("no case compares an upgrade's fence with earlier writes'"),
        LostBeforeSuccessor => Gap("no case loses an upgraded hold before a successor"),
        DeadlineBound => Case("every_operation_answers_in_time"),
        NotWedged => Gap("no case cancels an upgrade"),
        PhaseFair => Case("rw_upgradeable_read_upgrades_before_writers"),
        BookkeepingBounded => Gap("no case counts what a cancelled upgrade leaves"),
        GrantedLive => Gap("the guard's own read may run out during the wait; the guard then reads lost");
    "UpgradeableReadGuard::try_upgrade":
        Exclusion => Case("rw_upgradeable_read_upgrades_before_writers"),
        FencesIncrease => Gap("no case compares an upgrade's fence with earlier writes'"),
        LostBeforeSuccessor => Gap("no case loses an upgraded hold before a successor"),
        DeadlineBound => Case("every_operation_answers_in_time"),
        PhaseFair => Case("rw_upgradeable_read_upgrades_before_writers");
    "UpgradeableReadGuard::release":
        DeadlineBound => Case("every_operation_answers_in_time");
    "Semaphore::try_acquire":
        Exclusion => Case("sem_count_never_exceeded"),
        FencesIncrease => Case("sem_store_keeps_permits"),
        LostBeforeSuccessor => Case("sem_lost_signal_fires"),
        DeadlineBound => Case("every_operation_answers_in_time"),
        PermitsNeverExceeded => Case("sem_mismatched_handle_sends_no_attempt");
    "Semaphore::available":
        DeadlineBound => Case("every_operation_answers_in_time");
    "Semaphore::resize":
        DeadlineBound => Case("every_operation_answers_in_time"),
        PermitsNeverExceeded => Case("sem_shrink_keeps_holders_and_limits_new_grants");
    "Semaphore::stored_permits":
        DeadlineBound => Case("every_operation_answers_in_time");
    "PermitRequest::acquire":
        Exclusion => Case("sem_count_never_exceeded"),
        FencesIncrease => Case("sem_store_keeps_permits"),
        LostBeforeSuccessor => Case("sem_lost_signal_fires"),
        DeadlineBound => Case("every_operation_answers_in_time"),
        NotWedged => Case("sem_crashed_holder_permit_returns"),
        PermitsNeverExceeded => Case("sem_count_never_exceeded"),
        BookkeepingBounded => Gap("no case counts what a cancelled permit wait leaves"),
        GrantedLive => Gap("one hold through LockRequest::acquire, which has the case; none of its own");
    "PermitRequest::try_acquire":
        Exclusion => Case("sem_permits_shared_up_to_n"),
        FencesIncrease => Case("sem_store_keeps_permits"),
        LostBeforeSuccessor => Case("sem_lost_signal_fires"),
        DeadlineBound => Case("every_operation_answers_in_time"),
        PermitsNeverExceeded => Case("sem_permits_shared_up_to_n");
    "PermitRequest::acquire_many":
        Exclusion => Case("sem_many_all_or_none"),
        FencesIncrease => Gap("no case checks the fences of several permits taken at once"),
        LostBeforeSuccessor => Gap("no case loses one of several permits before a successor"),
        DeadlineBound => Case("every_operation_answers_in_time"),
        NotWedged => Case("sem_many_waiters_do_not_deadlock"),
        PermitsNeverExceeded => Case("sem_many_grants_only_live_permits"),
        BookkeepingBounded => Gap("no case counts what a cancelled multi-permit wait leaves"),
        GrantedLive => Case("sem_many_grants_only_live_permits");
    "PermitRequest::try_acquire_many":
        Exclusion => Case("sem_many_all_or_none"),
        FencesIncrease => Gap("no case checks the fences of several permits taken at once"),
        LostBeforeSuccessor => Gap("no case loses one of several permits before a successor"),
        DeadlineBound => Case("every_operation_answers_in_time"),
        PermitsNeverExceeded => Case("sem_mismatched_handle_sends_no_attempt");
    "Permit::release":
        DeadlineBound => Case("every_operation_answers_in_time");
    "Permits::release":
        DeadlineBound => Case("every_operation_answers_in_time");
    "CountDownLatch::set_count":
        DeadlineBound => Case("every_operation_answers_in_time");
    "CountDownLatch::count_down":
        DeadlineBound => Case("every_operation_answers_in_time");
    "CountDownLatch::count":
        DeadlineBound => Case("every_operation_answers_in_time");
    "CountDownLatch::wait":
        DeadlineBound => Case("every_operation_answers_in_time"),
        NotWedged => Case("latch_wait_times_out_typed"),
        BookkeepingBounded => Gap("no case counts the subscriptions cancelled latch waits leave");
    "CountDownLatch::delete":
        DeadlineBound => Case("every_operation_answers_in_time");
    "LeaderElection::leader":
        DeadlineBound => Case("every_operation_answers_in_time");
    "Candidate::until_leader":
        Exclusion => Case("leader_one_at_a_time_under_churn"),
        FencesIncrease => Gap("no case compares successive terms' fences"),
        LostBeforeSuccessor => Case("leader_told_before_successor"),
        DeadlineBound => Gap("no stall case campaigns"),
        NotWedged => Case("leader_resignation_hands_over"),
        BookkeepingBounded => Gap("no case counts what a cancelled campaign leaves"),
        GrantedLive => Gap("one hold through LockRequest::acquire, which has the case; none of its own");
    "Candidate::resign":
        DeadlineBound => Case("every_operation_answers_in_time");
    "LockBackend::inspect":
        DeadlineBound => Case("every_operation_answers_in_time");
    "LockBackend::list":
        DeadlineBound => Case("every_operation_answers_in_time");
    "LockBackend::evict":
        FencesIncrease => Case("evict_takes_the_lock_from_its_holder"),
        DeadlineBound => Case("every_operation_answers_in_time");
    "PgLock::lock_in_transaction":
        Exclusion => Gap("no case runs two transactions' locks on one key against each other"),
        FencesIncrease => Gap("no case checks a transaction lock's fences"),
        LostBeforeSuccessor => Gap("a transaction lock has no lost signal: it ends with the transaction"),
        DeadlineBound => Gap("no stall case takes a transaction lock"),
        NotWedged => Case("a_transaction_lock_leaves_the_callers_settings_as_they_were"),
        CallerStateUnchanged => Case("a_transaction_lock_leaves_the_callers_settings_as_they_were"),
        BookkeepingBounded => Gap("a transaction lock ends with the transaction: nothing counted"),
        GrantedLive => Gap("a transaction lock has no lease: it lasts as long as the transaction");
    "PgLock::try_lock_in_transaction":
        Exclusion => Gap("no case runs two transactions' locks on one key against each other"),
        FencesIncrease => Gap("no case checks a transaction lock's fences"),
        LostBeforeSuccessor => Gap("a transaction lock has no lost signal: it ends with the transaction"),
        DeadlineBound => Gap("no stall case tries a transaction lock"),
        CallerStateUnchanged => Gap("the settings case takes the waiting call only");
    "Fenced::write":
        StaleRefused => Case("a_refused_write_does_not_run");
    "lock_postgres::Fences::admit":
        StaleRefused => Case("a_paused_holders_late_write_is_refused"),
        DeadlineBound => Gap("runs in the caller's transaction under the caller's own statement_timeout; no deadline of its own"),
        CallerStateUnchanged => Case("an_admit_leaves_the_callers_settings_as_they_were");
    "lock_mysql::Fences::admit":
        StaleRefused => Case("a_paused_holders_late_write_is_refused"),
        DeadlineBound => Gap("runs in the caller's transaction under the caller's own timeouts; no deadline of its own"),
        CallerStateUnchanged => Case("an_admit_leaves_the_callers_settings_as_they_were");
    "lock_redis::fenced::set":
        StaleRefused => Case("a_paused_holders_late_write_is_refused"),
        DeadlineBound => Gap("runs on the caller's connection under its own response timeout; no deadline of its own");
    "lock_redis::fenced::delete":
        StaleRefused => Case("the_watermark_outlives_a_delete_and_compares_exactly"),
        DeadlineBound => Gap("runs on the caller's connection under its own response timeout; no deadline of its own");
    "dlock run":
        Exclusion => Case("permits_limit_how_many_copies_run_at_once"),
        FencesIncrease => Gap("the CLI exports the library's fence: checked only that it is one (fencing_token_is_exported_only_when_real)"),
        LostBeforeSuccessor => Case("a_lost_lock_stops_the_command_with_status_76"),
        DeadlineBound => Case("an_unresponsive_server_fails_within_the_wait_naming_it"),
        NotWedged => Case("interrupted_redis_waiters_leave_the_queue_in_every_mode"),
        BookkeepingBounded => Gap("no case counts what interrupted runs leave on the server"),
        GrantedLive => Gap("one hold through LockRequest::acquire, which has the case; none of its own");
    "dlock leader":
        Exclusion => Case("only_the_leader_runs_the_command_and_a_stopped_leader_hands_over"),
        FencesIncrease => Gap("no case checks the fences of successive terms through the CLI"),
        LostBeforeSuccessor => Case("lost_leadership_stops_the_command_and_the_next_term_starts_it_again"),
        DeadlineBound => Gap("no stall case campaigns through the CLI"),
        NotWedged => Case("interrupted_followers_leave_the_queue"),
        BookkeepingBounded => Gap("no case counts what interrupted campaigns leave"),
        GrantedLive => Gap("one hold through LockRequest::acquire, which has the case; none of its own");
    "dlock status":
        DeadlineBound => Case("operator_verbs_answer_a_silent_store_within_its_bound");
    "dlock list":
        DeadlineBound => Case("operator_verbs_answer_a_silent_store_within_its_bound");
    "dlock unlock":
        FencesIncrease => Case("unlock_evicts_a_running_holder_on_every_store"),
        DeadlineBound => Case("operator_verbs_answer_a_silent_store_within_its_bound");
};
