// Package servers starts the private PostgreSQL, Redis and MariaDB servers
// the chaos harness runs its faults against: one server (or one Redis Cluster) per
// data directory, listening on 127.0.0.1 on ports the package picks, and
// the faults themselves: a PostgreSQL crash (immediate stop, then WAL
// recovery), terminated backends, a SIGKILLed Redis with or without an
// append-only file, Redis Cluster failovers, forced or after a killed
// master, a SIGKILLed mariadbd (InnoDB crash recovery at restart), and
// MariaDB sessions ended with KILL CONNECTION by user and database.
//
// # Processes
//
// The package only ever stops, kills or signals processes it started
// itself. Redis and MariaDB servers are its children, started and killed through
// [proc]: a PID is signalled only while the child is unreaped, so a reused
// PID is never hit, and the servers die with the harness (Linux). PostgreSQL
// is started and stopped with pg_ctl on its own data directory, so pg_ctl
// signals only the postmaster of that directory; the postmaster is not a
// child and outlives a crashed harness (stop it with
// pg_ctl -D DIR/data stop). Nothing here looks processes up by name.
//
// # Directories
//
// Each server lives in the directory its caller gives, which the package
// creates if missing. Close stops the servers and removes nothing: data
// and logs stay for inspection, and the caller removes the directory
// (t.TempDir does). Logs: DIR/postgres.log, DIR/redis.log, for the
// cluster DIR/node-N/redis.log, and DIR/mariadb.log.
//
// # Root
//
// PostgreSQL's initdb refuses to run as root. When the process runs as
// root, initdb and pg_ctl run as the postgres OS user through runuser, the
// data and socket directories and the log are chowned to it, and every
// directory from / down to DIR must be traversable by it (mode o+x);
// [StartPostgres] says which one is not. mariadbd runs as root then
// (--user=root): switching to the mysql user would clear the parent-death
// signal that kills it with the harness.
//
// # Binaries
//
// PostgreSQL's binaries are found with pg_config --bindir, else in the
// newest /usr/lib/postgresql/*/bin; redis-server and redis-cli on PATH;
// mariadbd and mariadb-install-db on PATH or in /usr/sbin. A
// missing one is an error wrapping [ErrNotInstalled] that names it and the
// Debian package that provides it.
package servers
