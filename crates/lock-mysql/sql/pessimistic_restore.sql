-- MySQL: after COMMIT or ROLLBACK, the session gets the server-wide timeouts back before the
-- connection returns to the pool.
SET SESSION wait_timeout = @@GLOBAL.wait_timeout, net_read_timeout = @@GLOBAL.net_read_timeout,
    net_write_timeout = @@GLOBAL.net_write_timeout
