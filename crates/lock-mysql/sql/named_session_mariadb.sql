-- Named mode, MariaDB: as named_session.sql, and the idle-transaction timeouts at the same
-- bound, for the transaction a hold's notes live in (named_note_begin.sql): a lower server-wide
-- value must not end the session earlier than the client expects. Without an open transaction
-- they do nothing. {idle} is a number of seconds filled in by the backend.
SET SESSION wait_timeout = {idle}, net_read_timeout = {idle}, net_write_timeout = {idle},
    idle_transaction_timeout = {idle}, idle_readonly_transaction_timeout = {idle},
    idle_write_transaction_timeout = {idle}
