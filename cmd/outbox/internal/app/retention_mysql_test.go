package app

import (
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/outboxrelay/outbox"
	mysqloutbox "github.com/outboxrelay/outbox/backends/mysql"
)

// TestRelayArchiveMySQL: `outbox relay --archive` on a MySQL outbox moves
// the entries it sends to the archive table instead of deleting them.
func TestRelayArchiveMySQL(t *testing.T) {
	t.Parallel()
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "orders"))
	if err != nil {
		t.Fatal(err)
	}
	defer cluster.Close()
	url, _, db, appendFn := cliMySQLOutbox(t, mysqloutbox.Options{Partitions: 1})
	for i := range 4 {
		if err := appendFn(outbox.Entry{ID: fmt.Sprintf("m%d", i), Topic: "orders", Key: "k", Payload: []byte("p")}); err != nil {
			t.Fatal(err)
		}
	}
	run := startCLI(t, "relay", "--store", url, "--kafka-brokers", strings.Join(cluster.ListenAddrs(), ","),
		"--archive", "--archive-retention", "7d", "--poll-interval", "100ms", "--log-format", "json")
	run.waitFor(t, regexp.MustCompile(`(outbox relay: running)`))
	var archived, pending int
	for deadline := time.Now().Add(60 * time.Second); archived != 4 || pending != 0; time.Sleep(50 * time.Millisecond) { // watchdog
		if err := db.QueryRow("SELECT (SELECT COUNT(*) FROM `outbox_archive`), (SELECT COUNT(*) FROM `outbox`)").Scan(&archived, &pending); err != nil {
			t.Fatal(err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d archived and %d left in the outbox, want 4 and 0\n%s", archived, pending, run.errs)
		}
	}
	if code := run.finish(t); code != 0 {
		t.Fatalf("relay exited %d\n%s", code, run.errs)
	}
}
