package app

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/outboxrelay/outbox"
	mysqloutbox "github.com/outboxrelay/outbox/backends/mysql"
)

// newMySQLE2E creates an outbox with 4 partitions in a database of its
// own, with `outbox migrate up`; the relay reaches it as a user with a
// password and polls at the store's default interval.
func newMySQLE2E(t *testing.T, bins relayBins) *e2eStore {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	url, db := cliMySQL(t)
	runOutbox(t, bins, "migrate", "up", "--store", url, "--table", "relay_outbox", "--partitions", "4")
	b, err := mysqloutbox.New(ctx, db, mysqloutbox.Options{Table: "relay_outbox"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return &e2eStore{
		name:      "mysql",
		settings:  [][2]string{{"store", url}, {"table", "relay_outbox"}},
		storePoll: mysqloutbox.DefaultPollInterval.String(),
		store:     b,
		appendTx: func(ctx context.Context, commit bool, entries []outbox.Entry) error {
			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				return err
			}
			defer func() { _ = tx.Rollback() }()
			if err := b.AppendInTx(ctx, tx, entries...); err != nil {
				return err
			}
			if !commit {
				return tx.Rollback()
			}
			return tx.Commit()
		},
	}
}

// TestRelayPollIntervalFlag: --poll-interval 0 (the default) takes the
// store's interval; a negative one is a usage error naming the default.
func TestRelayPollIntervalFlag(t *testing.T) {
	t.Parallel()
	cliFails(t, 2, []string{"--poll-interval must be positive, or 0 for the store's default (it is -1s)"},
		"relay", "--kafka-brokers", "127.0.0.1:1", "--store", "redis://127.0.0.1:1", "--poll-interval=-1s")
	help := strings.Join(strings.Fields(cliOK(t, "relay", "--help")), " ")
	if want := "Default (0): the store's, " + outbox.DefaultPollInterval.String() + " for Postgres and Redis"; !strings.Contains(help, want) || !strings.Contains(help, mysqloutbox.DefaultPollInterval.String()+" for MySQL") {
		t.Fatalf("relay --help does not give the poll interval's defaults (%q):\n%s", want, help)
	}
}
