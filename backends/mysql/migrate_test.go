package mysqloutbox_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/outboxrelay/outbox"
	mysqloutbox "github.com/outboxrelay/outbox/backends/mysql"
)

func TestMigrateUpDownAndConcurrent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, _ := newDB(t)
	opts := mysqloutbox.Options{Table: "orders_outbox", Partitions: 8}
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		wg.Go(func() { errs[i] = mysqloutbox.Migrate(ctx, db, opts) })
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatalf("concurrent Migrate: %v", err)
		}
	}
	got, err := mysqloutbox.MigrationStatus(ctx, db, opts)
	var want []int
	for v := 1; v <= mysqloutbox.LatestVersion(); v++ {
		want = append(want, v)
	}
	if err != nil || !slices.Equal(got, want) {
		t.Fatalf("MigrationStatus = %v, %v", got, err)
	}
	var leases int
	if err := db.QueryRowContext(ctx, "SELECT count(*) FROM `orders_outbox_lease`").Scan(&leases); err != nil || leases != 8 {
		t.Fatalf("lease rows: %d, %v; want 8", leases, err)
	}
	b, err := mysqloutbox.New(ctx, db, mysqloutbox.Options{Table: "orders_outbox"})
	if err != nil || b.Partitions() != 8 {
		t.Fatalf("New with the stored count: %v, %v", b, err)
	}
	b.Close()

	// Another count is refused, by Migrate and by New.
	var mismatch *outbox.PartitionMismatchError
	if err := mysqloutbox.Migrate(ctx, db, mysqloutbox.Options{Table: "orders_outbox", Partitions: 4}); !errors.As(err, &mismatch) {
		t.Fatalf("Migrate with another count: %v", err)
	}
	if _, err := mysqloutbox.New(ctx, db, mysqloutbox.Options{Table: "orders_outbox", Partitions: 4}); !errors.As(err, &mismatch) {
		t.Fatalf("New with another count: %v", err)
	}

	if err := mysqloutbox.MigrateTo(ctx, db, opts, 0); err != nil {
		t.Fatal(err)
	}
	var tables int
	if err := db.QueryRowContext(ctx, "SELECT count(*) FROM information_schema.tables WHERE table_schema = DATABASE()").Scan(&tables); err != nil || tables != 0 {
		t.Fatalf("tables left after MigrateTo 0: %d, %v", tables, err)
	}
	if _, err := mysqloutbox.New(ctx, db, opts); err == nil || !strings.Contains(err.Error(), "does not exist") {
		t.Fatalf("New of a removed outbox: %v", err)
	}
}

func TestMigrateNeedsPartitions(t *testing.T) {
	t.Parallel()
	db, _ := newDB(t)
	err := mysqloutbox.Migrate(context.Background(), db, mysqloutbox.Options{})
	if err == nil || !strings.Contains(err.Error(), "Options.Partitions is 0") {
		t.Fatalf("Migrate without a count: %v", err)
	}
	if _, err := mysqloutbox.MigrationSQL(mysqloutbox.Options{}); err == nil {
		t.Fatal("MigrationSQL without a count succeeded")
	}
	s, err := mysqloutbox.MigrationSQL(mysqloutbox.Options{Table: "t2", Partitions: 2})
	if err != nil || !strings.Contains(s, "VALUES (1, 2, UTC_TIMESTAMP(6))") || !strings.Contains(s, "(1, '', 0, ") || !strings.Contains(s, "`t2_lease`") || strings.Contains(s, "EXISTS `outbox") || strings.Contains(s, "INTO `outbox") {
		t.Fatalf("MigrationSQL: %v\n%s", err, s)
	}
}
