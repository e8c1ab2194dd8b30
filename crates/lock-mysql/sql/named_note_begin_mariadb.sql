-- Named mode, MariaDB: the first note of a hold opens the transaction the note lives in (see
-- notes_session_insert.sql), with the idle-transaction timeouts at the holds' idle bound, as
-- pessimistic_begin_mariadb.sql sets them: a lower server-wide value must not end the session
-- earlier than the client expects. The release rolls back, releases and restores them.
-- {idle} is a number of seconds filled in by the backend.
SET SESSION idle_transaction_timeout = {idle}, idle_readonly_transaction_timeout = {idle},
    idle_write_transaction_timeout = {idle};
BEGIN
