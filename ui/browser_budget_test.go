package ui_test

// The dashboard's budget (docs/dashboard.md, "Performance"), measured
// with 100,000 pending and 10,000 parked entries on PostgreSQL: what each
// page transfers on a first load (asserted: budgetPageBytes), how long it
// takes to show its data and what each API call costs (logged, never
// asserted: this machine's load is not the code's).

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/outboxrelay/outbox"
	"github.com/outboxrelay/outbox/ui"
)

// budgetPageBytes is the most one first page load may transfer: the page,
// its assets and the API answers it shows, headers included, uncompressed.
const budgetPageBytes = 160 << 10

// seedBudget fills s with 10,000 parked entries and 100,000 pending ones:
// 500 keys whose head failed (retrying, each with 4 or 5 entries waiting
// behind it), 89,500 more due and 10,000 scheduled.
func seedBudget(t *testing.T, s browserStore) {
	t.Helper()
	ctx := context.Background()
	start := time.Now()
	parkEntries(t, s, realisticEntries("dead", 10_000), func(string) int { return 1 }, func(id string) string {
		return browserErrors[len(id)%len(browserErrors)]
	})
	heads := map[string]string{}
	var first []outbox.Entry
	for k := range 500 {
		id := fmt.Sprintf("head-%03d", k)
		heads[id] = "kafka: produce: REQUEST_TIMED_OUT after 30s (" + id + ")"
		first = append(first, outbox.Entry{ID: id, Topic: browserTopics[k%len(browserTopics)], Key: fmt.Sprintf("cust-%d", k), Payload: []byte(`{}`)})
	}
	if err := s.append(ctx, first...); err != nil {
		t.Fatal(err)
	}
	failHeads(t, s, "relay-1", heads, time.Hour)
	batch := make([]outbox.Entry, 0, 1000)
	for i := range 99_500 {
		e := outbox.Entry{ID: fmt.Sprintf("p-%06d", i), Topic: browserTopics[i%len(browserTopics)], Key: fmt.Sprintf("cust-%d", i%20_000), Payload: []byte(`{"order_id":1,"total_cents":1999}`)}
		if i >= 89_500 {
			e.NotBefore = time.Now().Add(time.Hour)
		}
		if batch = append(batch, e); len(batch) == cap(batch) {
			if err := s.append(ctx, batch...); err != nil {
				t.Fatal(err)
			}
			batch = batch[:0]
		}
	}
	if err := s.append(ctx, batch...); err != nil {
		t.Fatal(err)
	}
	st := storeStats(t, s)
	if st.Pending != 100_000 || st.Parked != 10_000 {
		t.Fatalf("seeded %+v, want 100,000 pending and 10,000 parked", st)
	}
	t.Logf("%s: seeded 100,000 pending and 10,000 parked in %v", s.kind, time.Since(start).Round(time.Millisecond))
}

// TestBrowserBudget loads every page of the dashboard in a fresh tab with
// the cache off, over 100,000 pending and 10,000 parked entries on
// PostgreSQL: each must show its data and transfer at most
// budgetPageBytes. It logs each page's weight and time, and the mean time
// of each API call.
func TestBrowserBudget(t *testing.T) {
	if testing.Short() {
		t.Skip("slow: seeds 110,000 entries")
	}
	t.Parallel()
	s := browserPostgres(t, 4)
	seedBudget(t, s)
	base := serveBrowser(t, s, ui.Options{StoreName: "postgres (budget)", SampleInterval: ui.DefaultSampleInterval})
	browser := newBrowser(t) // after the seeding: its kill-switch runs from here
	rows := func(table string) string {
		return fmt.Sprintf(`document.querySelectorAll("#%s [data-id]").length > 0`, table)
	}
	for _, p := range []struct{ name, hash, ready string }{
		{"overview", "#/overview", `/\d/.test(` + textJS("overview-pending") + `) && ` + textJS("overview-pending") + `.replace(/\D/g, "") === "100000"`},
		{"partitions", "#/partitions", `document.querySelectorAll("#partitions-table [data-partition]").length === 4`},
		{"due", "#/entries/due", rows("entries-table")},
		{"scheduled", "#/entries/scheduled", rows("entries-table")},
		{"retrying", "#/entries/retrying", rows("entries-table")},
		{"parked", "#/entries/parked", rows("entries-table")},
		{"blocked", "#/blocked", rows("blocked-table")},
		{"relays", "#/relays", `document.querySelectorAll("#relays-table tr").length > 1 && !document.querySelector("#relays-table .loading")`},
		{"entry", "#/entry/head-007", textJS("entry-id") + ` === "head-007"`},
	} {
		_, l := visitPage(t, browser, base+"/"+p.hash, "the "+p.name+" page", p.ready)
		t.Logf("budget: page %-10s %v", p.name, l)
		if l.bytes > budgetPageBytes {
			t.Errorf("the %s page transferred %.1f KiB, over the budget of %d KiB", p.name, float64(l.bytes)/1024, budgetPageBytes>>10)
		}
	}
	for _, target := range []string{
		"/api/overview", "/api/partitions", "/api/entries?state=due", "/api/entries?state=scheduled",
		"/api/entries?state=retrying", "/api/entries?state=parked", "/api/entries?state=due&topic=orders.created&after=p-050000",
		"/api/blocked", "/api/blocked?partition=2", "/api/relays", "/api/entries/head-007",
	} {
		const runs = 10
		var total, worst time.Duration
		var size int
		for range runs {
			start := time.Now()
			resp, err := http.Get(base + target)
			if err != nil {
				t.Fatal(err)
			}
			b, err := io.ReadAll(resp.Body)
			if err != nil {
				t.Fatal(err)
			}
			size += len(b)
			resp.Body.Close()
			d := time.Since(start)
			if resp.StatusCode != 200 {
				t.Fatalf("%s: %s", target, resp.Status)
			}
			total += d
			worst = max(worst, d)
		}
		t.Logf("budget: %-62s mean %7v  max %7v  %5.1f KiB", target, (total / runs).Round(100*time.Microsecond), worst.Round(100*time.Microsecond), float64(size)/runs/1024)
	}
}
