package ui_test

// Browser tests of the operator views of issue 28, on PostgreSQL (and
// Redis where it implements them): the state tabs, the blocked keys
// reached from the partition with the highest lag, an entry's history and
// actions, pause and resume, the relays page, and the loading state. The
// checks compare what the page shows with what the store answers through
// the SPI.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/outboxrelay/outbox"
	"github.com/outboxrelay/outbox/backends/memory"
	"github.com/outboxrelay/outbox/ui"
)

// failHeads claims the due entries of s and fails the ones named in heads
// once, due again after delay; it releases the others unattempted.
func failHeads(t *testing.T, s browserStore, owner string, heads map[string]string, delay time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for p := range s.store.Partitions() {
		lease, err := s.store.AcquireLease(ctx, p, owner, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		batch, err := s.store.FindPendingBatch(ctx, lease, 1000)
		if err != nil {
			t.Fatal(err)
		}
		var fs []outbox.Failure
		var rest []string
		for _, e := range batch {
			if msg, ok := heads[e.ID]; ok {
				fs = append(fs, outbox.Failure{ID: e.ID, Error: msg, Delay: delay})
			} else {
				rest = append(rest, e.ID)
			}
		}
		if err := s.store.MarkFailed(ctx, lease, fs); err != nil {
			t.Fatal(err)
		}
		if err := s.store.Release(ctx, lease, rest); err != nil {
			t.Fatal(err)
		}
		if err := s.store.ReleaseLease(ctx, lease); err != nil {
			t.Fatal(err)
		}
	}
}

// storeList lists the IDs of every entry of s in state (by the SPI).
func storeList(t *testing.T, s browserStore, state outbox.EntryState) []string {
	t.Helper()
	es, err := s.store.(outbox.Lister).Entries(context.Background(), state, outbox.ListFilter{}, "", 1000)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]string, len(es))
	for i, e := range es {
		out[i] = e.ID
	}
	return out
}

// seedOperator fills s with what an operator meets in an incident: six
// parked entries; then, oldest of the pending ones, key "ship-42" whose
// head failed (retrying, with two entries waiting behind it, due: so its
// partition has the highest lag); twelve due entries; four scheduled an
// hour ahead; two relays with membership records, one holding partition 0.
func seedOperator(t *testing.T, s browserStore) {
	t.Helper()
	ctx := context.Background()
	parkEntries(t, s, realisticEntries("dead", 6), func(string) int { return 2 }, func(id string) string {
		return browserErrors[len(id)%len(browserErrors)] + " (" + id + ")"
	})
	var stuck []outbox.Entry
	for i := range 3 {
		stuck = append(stuck, outbox.Entry{ID: fmt.Sprintf("ship-42-%d", i+1), Topic: "shipments.dispatched", Key: "ship-42", Payload: []byte(`{"shipment":42}`)})
	}
	if err := s.append(ctx, stuck...); err != nil {
		t.Fatal(err)
	}
	failHeads(t, s, "relay-eu-1", map[string]string{"ship-42-1": "kafka: produce shipments.dispatched: NOT_LEADER_FOR_PARTITION: the leader moved; retrying after the metadata refresh"}, time.Hour)
	time.Sleep(20 * time.Millisecond) // the stuck key's entries are the oldest due
	var pending []outbox.Entry
	for i, e := range realisticEntries("live", 16) {
		if i >= 12 {
			e.NotBefore = time.Now().Add(time.Hour)
		}
		pending = append(pending, e)
	}
	if err := s.append(ctx, pending...); err != nil {
		t.Fatal(err)
	}
	m, ok := s.store.(outbox.Membership)
	if !ok {
		t.Fatalf("%s: no outbox.Membership", s.kind)
	}
	started := time.Now().Add(-3 * time.Hour).Truncate(time.Second)
	for _, mem := range []outbox.Member{
		{Owner: "relay-eu-1", Partitions: []int{0}, Host: "relay-eu-1.prod.internal", Version: "v1.8.2", Started: started},
		{Owner: "relay-eu-2", Host: "relay-eu-2.prod.internal", Version: "v1.8.2", Started: started.Add(time.Hour)},
	} {
		if _, err := m.Heartbeat(ctx, mem, time.Hour); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.store.AcquireLease(ctx, 0, "relay-eu-1", time.Hour); err != nil {
		t.Fatal(err)
	}
}

// idsShownJS is a JavaScript expression: the data-id of the rows of the
// table with the given ID.
func idsShownJS(table string) string {
	return fmt.Sprintf(`Array.from(document.querySelectorAll("#%s [data-id]")).map((r) => r.getAttribute("data-id"))`, table)
}

// waitRows waits until the table shows exactly the rows want (data-id),
// in order.
func waitRows(t *testing.T, tab context.Context, table string, want []string) {
	t.Helper()
	waitPage(t, tab, fmt.Sprintf("%s to show %v", table, want),
		fmt.Sprintf(`JSON.stringify(%s) === %s`, idsShownJS(table), jsQuote(jsonString(want))))
}

// TestBrowserOperator: on PostgreSQL and Redis, the state tabs list what
// the store lists in each state; the partition with the highest lag links
// to its blocked keys, whose head opens on its history with only the
// actions its state allows; pause and resume from the overview, an
// entry's page (its topic) and the partitions page change what the store
// has paused; the relays page shows the fleet
// and the partitions no relay holds.
func TestBrowserOperator(t *testing.T) {
	t.Parallel()
	browser := newBrowser(t)
	for kind, open := range map[string]func(*testing.T, int) browserStore{"postgres": browserPostgres, "mysql": browserMySQL, "redis": browserRedis} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			s := open(t, 4)
			seedOperator(t, s)
			testBrowserOperator(t, browser, s)
		})
	}
}

func testBrowserOperator(t *testing.T, browser context.Context, s browserStore) {
	base := serveBrowser(t, s, ui.Options{StoreName: s.kind + " (browser test)", Outbox: "shop"})
	t.Run("StateTabs", func(t *testing.T) { browserStateTabs(t, browser, s, base) })
	t.Run("BlockedFromHighestLag", func(t *testing.T) { browserBlockedFromHighestLag(t, browser, s, base) })
	t.Run("PauseAndResume", func(t *testing.T) { browserPauseAndResume(t, browser, s, base) })
	t.Run("Relays", func(t *testing.T) { browserRelays(t, browser, s, base) })
}

func browserStateTabs(t *testing.T, browser context.Context, s browserStore, base string) {
	tab, l := visitPage(t, browser, base+"/#/entries/due", "the due rows", `document.querySelectorAll("#entries-table [data-id]").length > 0`)
	t.Logf("page due: %v", l)
	for _, state := range outbox.EntryStates {
		clickPage(t, tab, "#tab-"+string(state))
		waitRows(t, tab, "entries-table", storeList(t, s, state))
		if state == outbox.StateDue {
			shot(t, s, tab, "due")
		}
	}
	if got := evalIn[bool](t, tab, visibleJS("requeue-filtered")); !got {
		t.Errorf("the parked tab offers no requeue by filter")
	}
	clickPage(t, tab, "#tab-retrying")
	waitRows(t, tab, "entries-table", []string{"ship-42-1"})
	if evalIn[bool](t, tab, visibleJS("requeue-filtered")) {
		t.Errorf("the retrying tab offers requeue by filter, which acts on parked entries only")
	}
	// The filter applies to the tab.
	ctx, cancel := context.WithTimeout(tab, browserWait)
	defer cancel()
	clickPage(t, tab, "#tab-due")
	if err := browserType(ctx, "#filter-key", "ship-42"); err != nil {
		t.Fatal(err)
	}
	clickPage(t, tab, "#filter-apply")
	waitRows(t, tab, "entries-table", []string{"ship-42-2", "ship-42-3"})
}

func browserBlockedFromHighestLag(t *testing.T, browser context.Context, s browserStore, base string) {
	tab, l := visitPage(t, browser, base+"/#/partitions", "the partitions", `document.querySelector("#partitions-table tr.highest a.blocked-link") !== null`)
	t.Logf("page partitions: %v", l)
	info, err := s.store.(outbox.Looker).Lookup(context.Background(), "ship-42-1")
	if err != nil {
		t.Fatal(err)
	}
	if got := evalIn[string](t, tab, `document.querySelector("#partitions-table tr.highest").dataset.partition`); got != fmt.Sprint(info.Partition) {
		t.Fatalf("the highest lag is marked on partition %s; the stuck key is on %d", got, info.Partition)
	}
	shot(t, s, tab, "partitions")
	clickPage(t, tab, "#partitions-table tr.highest a.blocked-link")
	waitRows(t, tab, "blocked-table", []string{"ship-42-1"})
	if got := evalIn[string](t, tab, `document.querySelector("#blocked-table [data-id] .waiting").textContent`); got != "2" {
		t.Errorf("the blocked key shows %q waiting, want 2", got)
	}
	if h := evalIn[string](t, tab, "location.hash"); h != fmt.Sprintf("#/blocked/%d", info.Partition) {
		t.Errorf("the link leads to %s", h)
	}
	shot(t, s, tab, "blocked")

	// Every partition's blocked keys, as the store lists them.
	routePage(t, tab, "#/blocked")
	bk, err := s.store.(outbox.Lister).BlockedKeys(context.Background(), outbox.ListFilter{}, outbox.BlockedKey{}, 100)
	if err != nil {
		t.Fatal(err)
	}
	var heads []string
	for _, k := range bk {
		heads = append(heads, k.Head.ID)
	}
	waitRows(t, tab, "blocked-table", heads)

	// The head opens on its history; the page offers cancel, not requeue.
	clickPage(t, tab, `#blocked-table [data-id="ship-42-1"] .id-cell a`)
	waitPage(t, tab, "the head's page", textJS("entry-id")+` === "ship-42-1" && document.querySelectorAll("#entry-history tbody tr").length === 1`)
	if got := evalIn[string](t, tab, textJS("entry-history")); !strings.Contains(got, "NOT_LEADER_FOR_PARTITION") || !strings.Contains(got, "relay-eu-1") {
		t.Errorf("the history shows %q; want the attempt's error and relay", got)
	}
	if st := evalIn[string](t, tab, textJS("entry-state")); !strings.HasPrefix(st, "retrying") {
		t.Errorf("entry-state %q, want retrying", st)
	}
	if evalIn[bool](t, tab, visibleJS("requeue-one")) || !evalIn[bool](t, tab, visibleJS("cancel-one")) {
		t.Errorf("a retrying entry's page: requeue shown %v, cancel shown %v; want only cancel",
			evalIn[bool](t, tab, visibleJS("requeue-one")), evalIn[bool](t, tab, visibleJS("cancel-one")))
	}
	if got := evalIn[string](t, tab, textJS("entry-back")); !strings.Contains(got, "retrying") {
		t.Errorf("the way back says %q; want the retrying entries", got)
	}
	if got := evalIn[string](t, tab, `document.querySelector("#tab-retrying").className`); !strings.Contains(got, "active") {
		t.Errorf("the retrying tab is not marked (%q)", got)
	}
	shot(t, s, tab, "entry-history")
}

func browserPauseAndResume(t *testing.T, browser context.Context, s browserStore, base string) {
	tab := newTab(t, browser)
	if err := browserNavigate(tab, base+"/#/overview"); err != nil {
		t.Fatal(err)
	}
	waitPage(t, tab, "the pause form", visibleJS("pause-topic-input"))
	ctx, cancel := context.WithTimeout(tab, browserWait)
	defer cancel()
	if err := browserType(ctx, "#pause-topic-input", "shipments.dispatched"); err != nil {
		t.Fatal(err)
	}
	confirmAction(t, tab, "#pause-topic", "paused")
	waitPage(t, tab, "the paused topic", `document.querySelector('#paused-table tr[data-topic="shipments.dispatched"]') !== null`)
	wantPaused(t, s, []string{"shipments.dispatched"}, nil)
	shot(t, s, tab, "overview-paused")
	confirmAction(t, tab, `#paused-table tr[data-topic="shipments.dispatched"] button.resume`, "resumed")
	waitPage(t, tab, "no paused topic", `document.querySelector('#paused-table tr[data-topic]') === null`)
	wantPaused(t, s, nil, nil)

	// From an entry's page: its topic.
	routePage(t, tab, "#/entry/ship-42-1")
	waitPage(t, tab, "the entry's pause button", visibleJS("pause-entry-topic")+` && `+textJS("pause-entry-topic")+` === "Pause topic shipments.dispatched"`)
	confirmAction(t, tab, "#pause-entry-topic", "paused")
	wantPaused(t, s, []string{"shipments.dispatched"}, nil)
	waitPage(t, tab, "the entry's resume button", textJS("pause-entry-topic")+` === "Resume topic shipments.dispatched"`)
	confirmAction(t, tab, "#pause-entry-topic", "resumed")
	wantPaused(t, s, nil, nil)

	routePage(t, tab, "#/partitions")
	waitPage(t, tab, "the pause button of partition 1", visibleJS("partitions-table")+` && document.querySelector('#partitions-table tr[data-partition="1"] button.pause') !== null`)
	confirmAction(t, tab, `#partitions-table tr[data-partition="1"] button.pause`, "paused")
	wantPaused(t, s, nil, []int{1})
	waitPage(t, tab, "partition 1 marked paused", `document.querySelector('#partitions-table tr[data-partition="1"] button.resume') !== null`)
	confirmAction(t, tab, `#partitions-table tr[data-partition="1"] button.resume`, "resumed")
	wantPaused(t, s, nil, nil)
}

func browserRelays(t *testing.T, browser context.Context, s browserStore, base string) {
	tab, l := visitPage(t, browser, base+"/#/relays", "the relays", `document.querySelectorAll("#relays-table [data-owner]").length === 2`)
	t.Logf("page relays: %v", l)
	got := evalIn[[]string](t, tab, `Array.from(document.querySelectorAll("#relays-table [data-owner]")).map((r) => r.innerText.replace(/\s+/g, " "))`)
	if len(got) != 2 || !strings.Contains(got[0], "relay-eu-1.prod.internal") || !strings.Contains(got[0], "v1.8.2") || !strings.Contains(got[0], " 0 ") ||
		!strings.Contains(got[1], "relay-eu-2") || !strings.Contains(got[1], "none") {
		t.Errorf("the relays show %q; want relay-eu-1 (host, version, holding 0) and relay-eu-2 (holding none)", got)
	}
	ps, err := s.store.(outbox.PartitionInspector).PartitionStats(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var unheld []string
	for _, p := range ps {
		if p.Lease.Owner == "" && p.Pending > 0 {
			unheld = append(unheld, fmt.Sprint(p.Partition))
		}
	}
	if len(unheld) == 0 {
		t.Fatal("the seed left no partition unheld with pending entries")
	}
	waitPage(t, tab, "the unheld partitions "+strings.Join(unheld, ","), fmt.Sprintf(`JSON.stringify(Array.from(document.querySelectorAll("#unheld-table tr[data-partition]")).map((r) => r.dataset.partition)) === %s && %s`,
		jsQuote(jsonString(unheld)), visibleJS("unheld-table")))
	shot(t, s, tab, "relays")
}

// shot saves a screenshot of tab for docs/dashboard.md, whose screenshots
// are PostgreSQL's.
func shot(t *testing.T, s browserStore, tab context.Context, name string) {
	t.Helper()
	if s.kind == "postgres" {
		savePageScreenshot(t, tab, name)
	}
}

func wantPaused(t *testing.T, s browserStore, topics []string, partitions []int) {
	t.Helper()
	p, err := s.store.(outbox.Pauser).Paused(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var gotT []string
	for _, pt := range p.Topics {
		gotT = append(gotT, pt.Topic)
	}
	var gotP []int
	for _, pp := range p.Partitions {
		gotP = append(gotP, pp.Partition)
	}
	if !slices.Equal(gotT, topics) || !slices.Equal(gotP, partitions) {
		t.Errorf("the store has paused topics %v and partitions %v; want %v and %v", gotT, gotP, topics, partitions)
	}
}

// gatedStore is a real memory backend whose Stats waits until open is
// closed, then fails when fail is set: the page's state before its first
// answer, and after an error.
type gatedStore struct {
	*memory.Backend
	open chan struct{}
	mu   sync.Mutex
	fail bool
}

var errStatsDown = errors.New("stats: the store did not answer (injected)")

func (g *gatedStore) Stats(ctx context.Context) (outbox.Stats, error) {
	select {
	case <-g.open:
	case <-ctx.Done():
		return outbox.Stats{}, ctx.Err()
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.fail {
		return outbox.Stats{}, errStatsDown
	}
	return g.Backend.Stats(ctx)
}

// TestBrowserLoadingAndErrors: until the first answer the overview says
// it is loading (not a dash); an error is shown, with the store's words.
func TestBrowserLoadingAndErrors(t *testing.T) {
	t.Parallel()
	browser := newBrowser(t)
	for _, fail := range []bool{false, true} {
		b := browserMemory(t, 1)
		if err := b.append(context.Background(), realisticEntries("l", 3)...); err != nil {
			t.Fatal(err)
		}
		g := &gatedStore{Backend: b.store.(*memory.Backend), open: make(chan struct{}), fail: fail}
		base := serveBrowser(t, browserStore{kind: "memory", store: g}, ui.Options{SampleInterval: time.Hour})
		tab := newTab(t, browser)
		if err := browserNavigate(tab, base+"/#/overview"); err != nil {
			t.Fatal(err)
		}
		waitPage(t, tab, "the page and its scripts", `document.readyState === "complete"`)
		if got := evalIn[string](t, tab, textJS("overview-pending")); got != "loading…" {
			t.Errorf("before the first answer overview-pending shows %q, want loading…", got)
		}
		close(g.open)
		if fail {
			waitPage(t, tab, "the error", visibleJS("status")+` && `+textJS("status")+`.includes("the store did not answer")`)
			if got := evalIn[string](t, tab, textJS("overview-pending")); got != "unavailable" {
				t.Errorf("after a failed first answer overview-pending shows %q, want unavailable", got)
			}
			continue
		}
		waitPage(t, tab, "the number", textJS("overview-pending")+` === "3"`)
	}
}

// TestBrowserWholeError: the parked list shows the ID and the start of a
// long error; its "more" button expands the cell to the whole error,
// remedy included, which the listing had cut.
func TestBrowserWholeError(t *testing.T) {
	t.Parallel()
	browser := newBrowser(t)
	s := browserMemory(t, 1)
	const remedy = "create the topic, then requeue"
	long := "kafka: produce orders.created: UNKNOWN_TOPIC_OR_PARTITION: " + strings.Repeat("the broker's metadata does not list the topic; ", 12) + remedy
	parkEntries(t, s, realisticEntries("long", 1), func(string) int { return 1 }, func(string) string { return long })
	base := serveBrowser(t, s, ui.Options{})
	tab := newTab(t, browser)
	if err := browserNavigate(tab, base+"/#/parked"); err != nil {
		t.Fatal(err)
	}
	const cell = `document.querySelector('#entries-table tr[data-id="long-0001"] .err-cell .clamp')`
	waitPage(t, tab, "the parked row", cell+` !== null`)
	if got := evalIn[string](t, tab, `document.querySelector('#entries-table tr[data-id="long-0001"] .id-cell').textContent`); got != "long-0001" {
		t.Errorf("the ID column shows %q", got)
	}
	if got := evalIn[string](t, tab, cell+`.textContent`); strings.Contains(got, remedy) || !strings.HasPrefix(long, got) {
		t.Errorf("before expanding, the cell shows %q; want the start of the error, cut before its remedy", got)
	}
	clickPage(t, tab, `#entries-table tr[data-id="long-0001"] .err-cell button.more`)
	waitPage(t, tab, "the whole error", cell+`.textContent === `+jsQuote(long))
	if h := evalIn[string](t, tab, "location.hash"); h != "#/parked" {
		t.Errorf("expanding the error left the list for %s", h)
	}
}
