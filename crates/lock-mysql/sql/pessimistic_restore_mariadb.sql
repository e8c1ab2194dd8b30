-- MariaDB: after COMMIT or ROLLBACK, the session gets the server-wide timeouts back before the
-- connection returns to the pool.
SET SESSION wait_timeout = @@GLOBAL.wait_timeout, net_read_timeout = @@GLOBAL.net_read_timeout,
    net_write_timeout = @@GLOBAL.net_write_timeout,
    idle_transaction_timeout = @@GLOBAL.idle_transaction_timeout,
    idle_readonly_transaction_timeout = @@GLOBAL.idle_readonly_transaction_timeout,
    idle_write_transaction_timeout = @@GLOBAL.idle_write_transaction_timeout
