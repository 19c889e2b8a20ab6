package mysqloutbox

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/outboxrelay/outbox"
)

// The optional interfaces of the core half. (The whole
// outbox.Backend[*sql.Tx] assertion needs the relay half too.)
var (
	_ outbox.Notifier     = (*Backend)(nil)
	_ outbox.Membership   = (*Backend)(nil)
	_ outbox.MemberLister = (*Backend)(nil)
	_ outbox.PollAdvisor  = (*Backend)(nil)
)

//go:embed queries/*.sql
var queryFS embed.FS

// loadQuery returns the embedded query queries/<name>.sql, table tokens
// not yet rendered. A missing file is a defect of the build: it panics.
func loadQuery(name string) string {
	b, err := queryFS.ReadFile("queries/" + name + ".sql")
	if err != nil {
		panic("mysqloutbox: missing embedded query " + name + ": " + err.Error())
	}
	return string(b)
}

// coreState is the state of the appends, leases, membership and
// notifications.
type coreState struct {
	stmts   coreStmts
	appends stmtCache // multi-row append statements by row count
	hub     hub       // in-process notifications
	txs     txParts   // partitions appended to in InTx transactions
}

// coreStmts are the statements of the core half, prepared once per
// Backend: database/sql prepares each on a pool connection the first time
// it runs there and reuses it after, so each later execution is one round
// trip (without interpolateParams, the driver prepares, executes and
// closes an unprepared statement with arguments: three round trips).
type coreStmts struct {
	leaseRead, leaseLockSkip, leaseLock, leaseWrite, leaseInsert *sql.Stmt
	now, releaseLease                                            *sql.Stmt
	sealLock, keyseqOne                                          *sql.Stmt
	heartbeat, members, membersExpire, leave                     *sql.Stmt
}

// initCore prepares the statements of the core half.
func (b *Backend) initCore(ctx context.Context) error {
	s := &b.core.stmts
	for _, p := range []struct {
		dst  **sql.Stmt
		name string
	}{
		{&s.leaseRead, "lease_read"}, {&s.leaseLockSkip, "lease_lock_skip"}, {&s.leaseLock, "lease_lock"},
		{&s.leaseWrite, "lease_write"}, {&s.leaseInsert, "lease_insert"}, {&s.now, "now"},
		{&s.releaseLease, "release_lease"},
		{&s.sealLock, "seal_lock"},
		{&s.keyseqOne, "keyseq_one"},
		{&s.heartbeat, "heartbeat"}, {&s.members, "members"}, {&s.membersExpire, "members_expire"},
		{&s.leave, "leave"},
	} {
		st, err := b.db.PrepareContext(ctx, b.names.render(loadQuery(p.name)))
		if err != nil {
			b.closeCore()
			return b.interpretError("New: preparing "+p.name, err)
		}
		*p.dst = st
	}
	b.core.appends.init(b.db, appendCacheSize, b.shapeSQL)
	for _, k := range []appendKey{{insertSkipDup, 1}, {insertStrict, 1}, {selectIDs, 1}} {
		if err := b.core.appends.prepare(ctx, k); err != nil {
			b.closeCore()
			return b.interpretError("New: preparing the append", err)
		}
	}
	b.core.hub.init()
	return nil
}

// closeCore closes the prepared statements and the Notifications
// channels.
func (b *Backend) closeCore() {
	s := &b.core.stmts
	for _, st := range []*sql.Stmt{s.leaseRead, s.leaseLockSkip, s.leaseLock, s.leaseWrite, s.leaseInsert,
		s.now, s.releaseLease, s.sealLock, s.keyseqOne,
		s.heartbeat, s.members, s.membersExpire, s.leave} {
		if st != nil {
			st.Close()
		}
	}
	b.core.appends.close()
	b.core.hub.close()
}

// txStmt runs st inside tx: tx.StmtContext reuses the statement prepared
// on the transaction's connection (or prepares it there once). A
// transaction of another *sql.DB than the Backend's cannot use it
// (database/sql refuses before any I/O): then the query runs unprepared.
func txStmt(ctx context.Context, tx *sql.Tx, st *sql.Stmt, query string, args ...any) (sql.Result, error) {
	res, err := tx.StmtContext(ctx, st).ExecContext(ctx, args...)
	if err != nil && isForeignStmt(err) {
		return tx.ExecContext(ctx, query, args...)
	}
	return res, err
}

// txQuery is txStmt for a query.
func txQuery(ctx context.Context, tx *sql.Tx, st *sql.Stmt, query string, args ...any) (*sql.Rows, error) {
	rows, err := tx.StmtContext(ctx, st).QueryContext(ctx, args...)
	if err != nil && isForeignStmt(err) {
		return tx.QueryContext(ctx, query, args...)
	}
	return rows, err
}

// isForeignStmt reports whether err is database/sql refusing a statement
// prepared on another *sql.DB than the transaction's.
func isForeignStmt(err error) bool {
	return err != nil && strings.HasPrefix(err.Error(), "sql: Tx.Stmt: statement from different database")
}

// maxOwnerLen is the longest owner token, in characters: the owner
// columns are VARBINARY(1020), 255 characters of up to 4 bytes.
const maxOwnerLen = 255

// checkOwner rejects an owner the lease and member tables cannot store.
func checkOwner(owner string) error {
	if !utf8.ValidString(owner) || utf8.RuneCountInString(owner) > maxOwnerLen {
		return fmt.Errorf("owner must be valid UTF-8 of at most %d characters (the owner columns hold 255 characters of up to 4 bytes): %w", maxOwnerLen, outbox.ErrInvalidArgument)
	}
	return nil
}

// micros converts a positive duration to whole microseconds, rounding up.
func micros(d time.Duration) int64 {
	return int64((d + time.Microsecond - 1) / time.Microsecond)
}

// cutText makes s storable as utf8mb4 text (invalid UTF-8 replaced by
// U+FFFD) and cuts it to at most n bytes, at a character boundary.
func cutText(s string, n int) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	return outbox.TruncateUTF8(s, n)
}

// rollback ends tx after a failure; its own error adds nothing to the
// failure's.
func rollback(tx *sql.Tx) { _ = tx.Rollback() }

var errNoRow = errors.New("mysqloutbox: no row")

// appendKey names one shape of the append statements whose text
// depends on the number of rows or values: which statement, and how many.
type appendKey struct {
	kind appendKind
	rows int
}

// appendKind is one of the append statements of appendKey.
type appendKind uint8

const (
	// insertSkipDup inserts rows with ON DUPLICATE KEY UPDATE id = id,
	// through a join to the meta row WHERE sealed = 0 LOCK IN SHARE MODE
	// (the seal fence inside the INSERT).
	insertSkipDup appendKind = iota
	// insertStrict inserts rows; a duplicate ID fails (KeySequence).
	insertStrict
	// selectIDs reads which of the IDs exist (KeySequence).
	selectIDs
	// upsertKeys adds to the counters of keys (KeySequence).
	upsertKeys
	// selectKeys reads the counters of key hashes (KeySequence).
	selectKeys
)

// appendCacheSize bounds the append statements kept prepared. Each is
// prepared on every pool connection that runs it, and the server caps
// prepared statements (max_prepared_stmt_count, 16,382 by default, for
// all its clients), so shapes beyond the most recent few are evicted.
const appendCacheSize = 16

// stmtCache keeps the append statements of the most recently used shapes
// prepared, evicting the oldest. A shape it does not hold yet is prepared
// in the background on a pool connection while the append that asked
// runs its statement unprepared: preparing on the pool inside the
// caller's transaction would wait for a free connection, forever when the
// caller's transactions hold them all.
type stmtCache struct {
	db      *sql.DB
	size    int
	render  func(appendKey) string
	ctx     context.Context // ends at close
	stop    context.CancelFunc
	mu      sync.Mutex
	m       map[appendKey]*sql.Stmt
	pending map[appendKey]bool
	order   []appendKey
	closed  bool
}

func (c *stmtCache) init(db *sql.DB, size int, render func(appendKey) string) {
	c.db, c.size, c.render = db, size, render
	c.m, c.pending = map[appendKey]*sql.Stmt{}, map[appendKey]bool{}
	c.ctx, c.stop = context.WithCancel(context.Background())
}

// prepare prepares the statement of k now (New uses it for the common
// shapes).
func (c *stmtCache) prepare(ctx context.Context, k appendKey) error {
	st, err := c.db.PrepareContext(ctx, c.render(k))
	if err != nil {
		return err
	}
	c.put(k, st)
	return nil
}

// get returns the prepared statement of k and its text, or a nil
// statement (run the text unprepared) while it is being prepared.
func (c *stmtCache) get(k appendKey) (*sql.Stmt, string) {
	query := c.render(k)
	c.mu.Lock()
	defer c.mu.Unlock()
	if st, ok := c.m[k]; ok || c.closed || c.pending[k] {
		return st, query
	}
	c.pending[k] = true
	go func() {
		ctx, cancel := context.WithTimeout(c.ctx, time.Minute)
		defer cancel()
		st, err := c.db.PrepareContext(ctx, query)
		if err == nil {
			c.put(k, st)
		}
		c.mu.Lock()
		delete(c.pending, k) // after a failure, a later get tries again
		c.mu.Unlock()
	}()
	return nil, query
}

// put adds st as the statement of k, evicting the oldest shape when full.
func (c *stmtCache) put(k appendKey, st *sql.Stmt) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.m[k]; ok || c.closed {
		st.Close()
		return
	}
	if len(c.order) >= c.size {
		evict := c.order[0]
		c.order = c.order[1:]
		c.m[evict].Close() // a transaction still using it prepares its own
		delete(c.m, evict)
	}
	c.m[k] = st
	c.order = append(c.order, k)
}

func (c *stmtCache) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stop == nil {
		return
	}
	c.stop()
	c.closed = true
	for k, st := range c.m {
		st.Close()
		delete(c.m, k)
	}
	c.order = nil
}
