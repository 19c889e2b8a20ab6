package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/outboxrelay/outbox"
	pgoutbox "github.com/outboxrelay/outbox/backends/postgres"
	redisoutbox "github.com/outboxrelay/outbox/backends/redis"
)

// target is the outbox an admin command works on. The commands use only
// the SPI's optional interfaces (Inspector, Canceler), so they work the
// same on every backend that implements them.
type target struct {
	postgres, schema, table string
	redisURL, redisCluster  string
	prefix                  string
	partitions              int
}

func (t *target) flags(fs *flag.FlagSet) {
	fs.StringVar(&t.postgres, "postgres", "", "PostgreSQL URL of the outbox (e.g. postgres://user@host/db)")
	fs.StringVar(&t.schema, "schema", "", "Postgres schema of the outbox table (default: the backend's)")
	fs.StringVar(&t.table, "table", "", "Postgres outbox table (default: the backend's)")
	fs.StringVar(&t.redisURL, "redis", "", "Redis URL of the outbox (e.g. redis://host:6379/0)")
	fs.StringVar(&t.redisCluster, "redis-cluster", "", "comma-separated Redis Cluster addresses of the outbox")
	fs.StringVar(&t.prefix, "prefix", "", "Redis key prefix with its {hash tag} (default: the backend's)")
	fs.IntVar(&t.partitions, "partitions", 1, "partition count of the outbox (as configured in the service)")
}

// open connects to the outbox named by the flags.
func (t *target) open(ctx context.Context) (outbox.Store, func(), error) {
	set := 0
	for _, s := range []string{t.postgres, t.redisURL, t.redisCluster} {
		if s != "" {
			set++
		}
	}
	if set != 1 {
		return nil, nil, errors.New("name exactly one outbox: -postgres URL, -redis URL or -redis-cluster ADDRS")
	}
	switch {
	case t.postgres != "":
		pool, err := pgxpool.New(ctx, t.postgres)
		if err != nil {
			return nil, nil, fmt.Errorf("connecting to PostgreSQL: %w", redact(err, t.postgres))
		}
		b, err := pgoutbox.New(pool, pgoutbox.Options{Schema: t.schema, Table: t.table, Partitions: t.partitions})
		if err != nil {
			pool.Close()
			return nil, nil, err
		}
		return b, func() { b.Close(); pool.Close() }, nil
	default:
		var client redis.UniversalClient
		if t.redisURL != "" {
			opts, err := redis.ParseURL(t.redisURL)
			if err != nil {
				return nil, nil, fmt.Errorf("parsing -redis: %w", redact(err, t.redisURL))
			}
			client = redis.NewClient(opts)
		} else {
			client = redis.NewClusterClient(&redis.ClusterOptions{Addrs: strings.Split(t.redisCluster, ",")})
		}
		b, err := redisoutbox.New(ctx, client, redisoutbox.Options{Prefix: t.prefix, Partitions: t.partitions, NoNotify: true})
		if err != nil {
			client.Close()
			return nil, nil, err
		}
		return b, func() { b.Close(); client.Close() }, nil
	}
}

// redact removes a URL (which may hold a password) from an error's text.
func redact(err error, url string) error {
	if url == "" || !strings.Contains(err.Error(), url) {
		return err
	}
	return errors.New(strings.ReplaceAll(err.Error(), url, "<url>"))
}

func runAdmin(cmd string, args []string, out io.Writer) error {
	var t target
	fs := flag.NewFlagSet(cmd, flag.ContinueOnError)
	fs.SetOutput(out)
	t.flags(fs)
	after := fs.String("after", "", "parked: list entries after this ID (the last ID of the previous page)")
	limit := fs.Int("limit", 50, "parked: entries per page; requeue -all: entries per round")
	all := fs.Bool("all", false, "requeue: requeue every parked entry")
	timeout := fs.Duration("timeout", 30*time.Second, "give up after this long")
	if err := fs.Parse(args); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	store, closeStore, err := t.open(ctx)
	if err != nil {
		return err
	}
	defer closeStore()
	ids := fs.Args()

	switch cmd {
	case "status":
		in, err := inspector(store)
		if err != nil {
			return err
		}
		s, err := in.Stats(ctx)
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "pending  %d\ndue      %d\nparked   %d\n", s.Pending, s.Due, s.Parked)
		if !s.OldestDue.IsZero() {
			fmt.Fprintf(out, "lag      %v (oldest due entry since %s)\n", time.Since(s.OldestDue).Round(time.Millisecond), s.OldestDue.UTC().Format(time.RFC3339Nano))
		}
		return nil
	case "parked":
		in, err := inspector(store)
		if err != nil {
			return err
		}
		if *limit < 1 {
			return errors.New("-limit must be positive")
		}
		entries, err := in.Parked(ctx, *after, *limit)
		if err != nil {
			return err
		}
		w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
		fmt.Fprintln(w, "ID\tTOPIC\tKEY\tATTEMPTS\tCREATED\tLAST ERROR")
		for _, e := range entries {
			fmt.Fprintf(w, "%s\t%s\t%s\t%d\t%s\t%s\n", e.ID, e.Topic, e.Key, e.Attempts, e.CreatedAt.UTC().Format(time.RFC3339), oneLine(e.LastError, 120))
		}
		if err := w.Flush(); err != nil {
			return err
		}
		if len(entries) == *limit {
			fmt.Fprintf(out, "(more: -after %s)\n", entries[len(entries)-1].ID)
		}
		return nil
	case "requeue":
		in, err := inspector(store)
		if err != nil {
			return err
		}
		if *all == (len(ids) > 0) {
			return errors.New("requeue: give entry IDs or -all, not both or neither")
		}
		n := 0
		if *all {
			// Walk the parked entries once by ID, so entries a running
			// relay parks again meanwhile are not requeued in a loop.
			for cursor := ""; ; {
				page, err := in.Parked(ctx, cursor, max(*limit, 1))
				if err != nil {
					return err
				}
				if len(page) == 0 {
					break
				}
				k, err := in.Requeue(ctx, idsOf(page)...)
				if err != nil {
					return err
				}
				n += k
				cursor = page[len(page)-1].ID
			}
		} else if n, err = in.Requeue(ctx, ids...); err != nil {
			return err
		}
		fmt.Fprintf(out, "requeued %d entries\n", n)
		return nil
	case "cancel":
		c, ok := store.(outbox.Canceler)
		if !ok {
			return fmt.Errorf("this backend (%T) does not implement outbox.Canceler", store)
		}
		if len(ids) == 0 {
			return errors.New("cancel: give the IDs of the entries to cancel")
		}
		for _, id := range ids {
			switch err := c.Cancel(ctx, id); {
			case errors.Is(err, outbox.ErrNotFound):
				fmt.Fprintf(out, "%s: not found (already sent, cancelled, or never appended)\n", id)
			case err != nil:
				return err
			default:
				fmt.Fprintf(out, "%s: cancelled\n", id)
			}
		}
		return nil
	}
	return fmt.Errorf("unknown admin command %q", cmd)
}

func inspector(s outbox.Store) (outbox.Inspector, error) {
	in, ok := s.(outbox.Inspector)
	if !ok {
		return nil, fmt.Errorf("this backend (%T) does not implement outbox.Inspector", s)
	}
	return in, nil
}

func idsOf(entries []outbox.Entry) []string {
	ids := make([]string, len(entries))
	for i, e := range entries {
		ids[i] = e.ID
	}
	return ids
}

func oneLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}
