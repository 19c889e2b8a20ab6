package appender

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/outboxrelay/outbox"
	"github.com/outboxrelay/outbox/chaos/history"
)

// Backoff between retries of one entry.
const (
	minBackoff = 10 * time.Millisecond
	maxBackoff = 500 * time.Millisecond
)

// maxNameLen keeps -name within PostgreSQL's application_name (63 bytes)
// with room to spare.
const maxNameLen = 48

// config is what the flags say.
type config struct {
	store        string
	schema       string
	table        string
	prefix       string
	name         string
	keys         int
	topic        string
	rate         float64
	workers      int
	history      string
	payloadBytes int
	timeout      time.Duration
	keySequence  bool
	stampHeader  string
}

// Main runs the appender with the command-line arguments args (without
// the subcommand's name) until ctx ends, and then returns nil; it returns
// an error for bad flags (naming the flag), a store it cannot open, or a
// history it cannot write. -h returns flag.ErrHelp after printing the
// usage to stderr. Errors of single transactions are retried and logged
// to stderr, never returned.
func Main(ctx context.Context, args []string) error {
	_, err := run(ctx, args, os.Stderr)
	return err
}

func parseFlags(args []string, stderr io.Writer) (config, error) {
	var c config
	fs := flag.NewFlagSet("appender", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&c.store, "store", "", "the store holding the outbox: postgres://..., mysql://USER@HOST:PORT/DATABASE, redis://... or redis+cluster://host:port,host:port,...")
	fs.StringVar(&c.schema, "schema", "public", "PostgreSQL schema of the outbox")
	fs.StringVar(&c.table, "table", "outbox", "PostgreSQL or MySQL table of the outbox")
	fs.StringVar(&c.prefix, "prefix", "{outbox}", "Redis key prefix of the outbox")
	fs.StringVar(&c.name, "name", "", "appender name: part of its keys and entry IDs, and its PostgreSQL application_name (letters, digits, '.', '_', '-'; at most 48 bytes)")
	fs.IntVar(&c.keys, "keys", 0, "number of keys, NAME-k0000 .. NAME-k{N-1}")
	fs.StringVar(&c.topic, "topic", "", "topic of the entries")
	fs.Float64Var(&c.rate, "rate", 0, "transactions per second over all workers; 0 = as fast as possible")
	fs.IntVar(&c.workers, "workers", 1, "goroutines appending, each with its own keys")
	fs.StringVar(&c.history, "history", "", "history file to write (must not exist or be empty)")
	fs.IntVar(&c.payloadBytes, "payload-bytes", 64, "payload size in bytes")
	fs.DurationVar(&c.timeout, "timeout", 5*time.Second, "limit of one transaction's Begin+append, and of its commit")
	fs.StringVar(&c.stampHeader, "stamp-header", "", "put the time of each append attempt, just before the store is asked, in this header (Unix nanoseconds, decimal): what the soak run measures commit-to-publish latency from; empty: no header")
	fs.BoolVar(&c.keySequence, "key-sequence", false, "number each key's entries in the outbox (the backend's Options.KeySequence: header outbox-key-seq, 1, 2, 3, ... in commit order, the appender's own numbers)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return c, err
		}
		return c, fmt.Errorf("appender: %w", err)
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("appender: unexpected arguments %q: every setting is a flag", fs.Args())
	}
	switch {
	case c.store == "":
		return c, errors.New("appender: -store is required (postgres://..., mysql://..., redis://... or redis+cluster://...)")
	case c.name == "":
		return c, errors.New("appender: -name is required")
	case len(c.name) > maxNameLen || strings.TrimLeft(c.name, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") != "":
		return c, fmt.Errorf("appender: -name %q: use at most %d letters, digits, '.', '_' or '-' (it is the PostgreSQL application_name)", c.name, maxNameLen)
	case c.keys < 1:
		return c, fmt.Errorf("appender: -keys is %d; give 1 or more", c.keys)
	case c.topic == "":
		return c, errors.New("appender: -topic is required")
	case len(c.topic) > outbox.MaxTopicLen:
		return c, fmt.Errorf("appender: -topic is longer than %d bytes", outbox.MaxTopicLen)
	case c.rate < 0 || c.rate != c.rate:
		return c, fmt.Errorf("appender: -rate is %v; give 0 (as fast as possible) or a positive rate", c.rate)
	case c.workers < 1:
		return c, fmt.Errorf("appender: -workers is %d; give 1 or more", c.workers)
	case c.workers > c.keys:
		return c, fmt.Errorf("appender: -workers %d is more than -keys %d; each worker needs a key of its own", c.workers, c.keys)
	case c.history == "":
		return c, errors.New("appender: -history is required")
	case c.payloadBytes < 0:
		return c, fmt.Errorf("appender: -payload-bytes is %d; give 0 or more", c.payloadBytes)
	case c.timeout <= 0:
		return c, fmt.Errorf("appender: -timeout is %v; give a positive duration", c.timeout)
	case c.schema == "":
		return c, errors.New("appender: -schema is empty")
	case c.table == "":
		return c, errors.New("appender: -table is empty")
	case c.prefix == "":
		return c, errors.New("appender: -prefix is empty")
	}
	return c, nil
}

// stats are the run's counters.
type stats struct {
	appended   atomic.Int64 // entries confirmed
	unknown    atomic.Int64 // entries whose commit outcome was unknown at least once
	retries    atomic.Int64 // attempts after an entry's first
	unresolved atomic.Int64 // entries left unknown at exit
}

// appender is one run.
type appender struct {
	cfg     config
	store   store
	hist    *history.Writer
	log     *logger
	stats   stats
	payload []byte

	histMu sync.Mutex // serializes a line's write and its flush
}

// run is Main with stderr given; it returns the counters for tests.
func run(ctx context.Context, args []string, stderr io.Writer) (*stats, error) {
	cfg, err := parseFlags(args, stderr)
	if err != nil {
		return nil, err
	}
	if fi, err := os.Stat(cfg.history); err == nil && fi.Size() > 0 {
		return nil, fmt.Errorf("appender: -history %s exists and is not empty; give each appender run its own history file (and its own -name: a restarted appender reusing a name would reuse entry IDs)", cfg.history)
	}
	log := newLogger(stderr, cfg.name)
	st, err := openStore(ctx, cfg, log)
	if err != nil {
		return nil, err
	}
	defer st.close()
	hist, err := history.Create(cfg.history)
	if err != nil {
		return nil, fmt.Errorf("appender: -history: %w", err)
	}
	a := &appender{cfg: cfg, store: st, hist: hist, log: log, payload: bytes.Repeat([]byte{'x'}, cfg.payloadBytes)}
	start := time.Now()
	err = a.runWorkers(ctx)
	if cerr := hist.Close(); cerr != nil && err == nil {
		err = fmt.Errorf("appender: closing the history: %w", cerr)
	}
	log.summary(time.Since(start), &a.stats)
	return &a.stats, err
}

// runWorkers runs the workers until ctx ends or one fails.
func (a *appender) runWorkers(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		wg       sync.WaitGroup
		errOnce  sync.Once
		firstErr error
	)
	start := time.Now()
	for w := range a.cfg.workers {
		var keys []int
		for k := w; k < a.cfg.keys; k += a.cfg.workers {
			keys = append(keys, k)
		}
		wg.Go(func() {
			if err := a.worker(ctx, w, keys, start); err != nil {
				errOnce.Do(func() { firstErr = err; cancel() })
			}
		})
	}
	wg.Wait()
	return firstErr
}

// errStopped means ctx ended; the worker returns without an error.
var errStopped = errors.New("appender: stopped")

// worker appends its keys round robin, paced to its share of -rate.
func (a *appender) worker(ctx context.Context, w int, keys []int, start time.Time) error {
	seqs := make([]int64, len(keys))
	var interval time.Duration
	next := start
	if a.cfg.rate > 0 {
		interval = time.Duration(float64(a.cfg.workers) / a.cfg.rate * float64(time.Second))
		next = start.Add(interval * time.Duration(w) / time.Duration(a.cfg.workers)) // spread the workers' slots
	}
	for i := 0; ; i = (i + 1) % len(keys) {
		if interval > 0 && !pace(ctx, &next, interval) {
			return nil
		}
		if ctx.Err() != nil {
			return nil
		}
		seqs[i]++
		key := fmt.Sprintf("%s-k%04d", a.cfg.name, keys[i])
		e := outbox.Entry{
			ID:      fmt.Sprintf("%s-%d", key, seqs[i]),
			Topic:   a.cfg.topic,
			Key:     key,
			Payload: a.payload,
		}
		switch err := a.confirm(ctx, e, seqs[i]); {
		case errors.Is(err, errStopped):
			return nil
		case err != nil:
			return err
		}
	}
}

// pace waits for the next slot of a ticker-like schedule and advances it;
// slots missed by more than one interval are dropped, as a time.Ticker
// drops ticks. It returns false when ctx ends first.
func pace(ctx context.Context, next *time.Time, interval time.Duration) bool {
	now := time.Now()
	if d := next.Sub(now); d > 0 {
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return false
		case <-t.C:
		}
	} else if -d > interval {
		*next = now
	}
	*next = next.Add(interval)
	return true
}

// confirm appends e until one attempt is confirmed and records it. It
// returns errStopped when ctx ends first and another error when the
// history cannot be written.
func (a *appender) confirm(ctx context.Context, e outbox.Entry, seq int64) error {
	p := int32(outbox.PartitionOf(e.Key, a.store.partitions()))
	he := history.Entry{ID: e.ID, Key: e.Key, Seq: seq, Partition: &p}
	intentWritten, unknown := false, false
	intent := func() error {
		if intentWritten {
			return nil
		}
		intentWritten = true
		return a.record(he, false)
	}
	backoff := minBackoff
	for attempt := 0; ; attempt++ {
		if attempt > 0 {
			a.stats.retries.Add(1)
		}
		if a.cfg.stampHeader != "" {
			e.Headers = map[string]string{a.cfg.stampHeader: strconv.FormatInt(time.Now().UnixNano(), 10)}
		}
		err := a.store.appendOne(ctx, e, intent)
		if err == nil {
			he.At = time.Now()
			a.stats.appended.Add(1)
			return a.record(he, true)
		}
		var ae *attemptError
		if !errors.As(err, &ae) {
			return err // the history failed
		}
		if ae.unknown && !unknown {
			unknown = true
			a.stats.unknown.Add(1)
		}
		if ctx.Err() != nil {
			if unknown {
				a.stats.unresolved.Add(1)
			}
			return errStopped
		}
		a.log.errorf(ae.kind, "%s (entry %s, attempt %d): %v", ae.kind, e.ID, attempt+1, ae.err)
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			if unknown {
				a.stats.unresolved.Add(1)
			}
			return errStopped
		case <-t.C:
		}
		backoff = min(2*backoff, maxBackoff)
	}
}

// record writes an append (confirmed) or unknown line and flushes it.
func (a *appender) record(e history.Entry, confirmed bool) error {
	a.histMu.Lock()
	defer a.histMu.Unlock()
	var err error
	if confirmed {
		err = a.hist.Append(e)
	} else {
		err = a.hist.Unknown(e)
	}
	if err == nil {
		err = a.hist.Flush()
	}
	if err != nil {
		return fmt.Errorf("appender: writing the history: %w", err)
	}
	return nil
}

// attemptError is a failed attempt of one transaction.
type attemptError struct {
	kind    string // what failed: begin, append, commit, exec, ...
	unknown bool   // the commit's outcome is unknown
	err     error
}

func (e *attemptError) Error() string { return e.kind + ": " + e.err.Error() }
func (e *attemptError) Unwrap() error { return e.err }

// logger writes timestamped error lines, at most one per second per kind.
type logger struct {
	mu    sync.Mutex
	w     io.Writer
	name  string
	kinds map[string]*kindLog
	order []string
}

type kindLog struct {
	last       time.Time
	total      int64
	suppressed int64
}

func newLogger(w io.Writer, name string) *logger {
	return &logger{w: w, name: name, kinds: make(map[string]*kindLog)}
}

func (l *logger) errorf(kind, format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	k := l.kinds[kind]
	if k == nil {
		k = &kindLog{}
		l.kinds[kind] = k
		l.order = append(l.order, kind)
	}
	k.total++
	now := time.Now()
	if !k.last.IsZero() && now.Sub(k.last) < time.Second {
		k.suppressed++
		return
	}
	msg := fmt.Sprintf(format, args...)
	if k.suppressed > 0 {
		msg += fmt.Sprintf(" (and %d more %s errors since the last line)", k.suppressed, kind)
	}
	k.last, k.suppressed = now, 0
	fmt.Fprintf(l.w, "%s appender %s: %s\n", now.UTC().Format(time.RFC3339Nano), l.name, msg)
}

// printf writes a timestamped line without rate limit.
func (l *logger) printf(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	fmt.Fprintf(l.w, "%s appender %s: %s\n", time.Now().UTC().Format(time.RFC3339Nano), l.name, fmt.Sprintf(format, args...))
}

func (l *logger) summary(elapsed time.Duration, s *stats) {
	l.mu.Lock()
	var errs []string
	for _, kind := range l.order {
		errs = append(errs, fmt.Sprintf("%s %d", kind, l.kinds[kind].total))
	}
	l.mu.Unlock()
	e := "none"
	if len(errs) > 0 {
		e = strings.Join(errs, ", ")
	}
	l.printf("summary after %v: appended %d, unknown %d (%d still unknown at exit), retries %d; errors: %s",
		elapsed.Round(time.Millisecond), s.appended.Load(), s.unknown.Load(), s.unresolved.Load(), s.retries.Load(), e)
}
