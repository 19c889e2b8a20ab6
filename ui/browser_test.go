package ui_test

// Browser tests of the dashboard: a headless Chromium (see
// browser_chrome_test.go) drives the page through the element IDs of the
// package documentation, and the checks compare what it shows and does with
// the store. Without Chromium they skip (they fail under
// OUTBOX_REQUIRE_SERVICES=1); ./scripts/services.sh install gets it.
//
// OUTBOX_UPDATE_SCREENSHOTS=1 writes the screenshots of docs/dashboard.md
// (docs/images/dashboard-*.png) from TestBrowserOverviewParkedRequeue.

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/outboxrelay/outbox"
	"github.com/outboxrelay/outbox/ui"
)

var (
	browserTopics = []string{"orders.created", "payments.captured", "invoices.issued", "shipments.dispatched"}
	browserErrors = []string{
		"kafka: produce orders.created: MESSAGE_TOO_LARGE: the message is 1.2 MB, over max.message.bytes 1 MB",
		"kafka: produce: UNKNOWN_TOPIC_OR_PARTITION: this server does not host this topic-partition",
		"sink: webhook https://billing.internal/hooks answered 422 Unprocessable Entity: invalid currency \"XBT\"",
		"kafka: produce: TOPIC_AUTHORIZATION_FAILED: not authorized to access topics: [invoices.issued]",
	}
)

// realisticEntries are n entries of realistic shape, with IDs prefix-0001...
func realisticEntries(prefix string, n int) []outbox.Entry {
	out := make([]outbox.Entry, n)
	for i := range out {
		out[i] = outbox.Entry{
			ID:      fmt.Sprintf("%s-%04d", prefix, i+1),
			Topic:   browserTopics[i%len(browserTopics)],
			Key:     fmt.Sprintf("order-%d", 1000+i),
			Payload: fmt.Appendf(nil, `{"order_id":%d,"customer":"c-%03d","total_cents":%d,"currency":"EUR"}`, 1000+i, i*7%100, 1999+i*250),
			Headers: map[string]string{"content-type": "application/json", "source": "checkout"},
		}
	}
	return out
}

// onlyDigits keeps the digits of s: "10,000" and "10 000" are 10000.
func onlyDigits(s string) string {
	return regexp.MustCompile(`\D`).ReplaceAllString(s, "")
}

// overviewReady is a predicate: the four overview numbers are shown and the
// parked one says parked.
func overviewReady(parked int64) string {
	return fmt.Sprintf(`%s.replace(/\D/g, "") === %s && /\d/.test(%s) && /\d/.test(%s) && /\d/.test(%s)`,
		textJS("overview-parked"), jsQuote(strconv.FormatInt(parked, 10)),
		textJS("overview-pending"), textJS("overview-due"), textJS("overview-lag"))
}

// rowsReady is a predicate: the parked table shows at least one row.
const rowsReady = `document.querySelectorAll("#entries-table [data-id]").length > 0`

// TestBrowserOverviewParkedRequeue: on the memory backend, the overview
// shows the store's counts, the parked list its entries; a row opens the
// entry, which requeue-one (confirmed) requeues: it leaves the list and the
// store's parked entries. It also measures the pages (weight, time) and
// takes the screenshots of docs/dashboard.md.
func TestBrowserOverviewParkedRequeue(t *testing.T) {
	t.Parallel()
	browser := newBrowser(t)
	s := browserMemory(t, 4)
	parked := realisticEntries("evt", 25)
	parkEntries(t, s, parked,
		func(id string) int { n, _ := strconv.Atoi(id[len(id)-2:]); return 1 + n%5 },
		func(id string) string {
			n, _ := strconv.Atoi(id[len(id)-2:])
			return browserErrors[n%len(browserErrors)]
		})
	ctx := context.Background()
	var pending []outbox.Entry
	for i := range 12 {
		e := outbox.Entry{Topic: browserTopics[i%len(browserTopics)], Key: fmt.Sprintf("order-%d", 2000+i), Payload: []byte(`{"pending":true}`)}
		if i >= 7 { // five scheduled: pending, not due
			e.NotBefore = time.Now().Add(time.Hour)
		}
		pending = append(pending, e)
	}
	if err := s.append(ctx, pending...); err != nil {
		t.Fatal(err)
	}
	want := storeStats(t, s)
	if want.Pending != 12 || want.Due != 7 || want.Parked != 25 {
		t.Fatalf("seeded stats %+v, want 12 pending, 7 due, 25 parked", want)
	}
	base := serveBrowser(t, s, ui.Options{StoreName: "memory (browser test)", Outbox: "orders"})

	// Each page in a fresh tab without cache: its weight, its time, its
	// screenshot.
	tab, l := visitPage(t, browser, base+"/#/overview", "the overview numbers", overviewReady(want.Parked))
	t.Logf("page overview: %v", l)
	got := map[string]string{}
	for _, id := range []string{"overview-pending", "overview-due", "overview-parked", "overview-lag"} {
		got[id] = strings.TrimSpace(evalIn[string](t, tab, textJS(id)))
	}
	if onlyDigits(got["overview-pending"]) != "12" || onlyDigits(got["overview-parked"]) != "25" {
		t.Errorf("overview shows pending %q, parked %q; the store has %d and %d", got["overview-pending"], got["overview-parked"], want.Pending, want.Parked)
	}
	if onlyDigits(got["overview-due"]) != "7" { // nothing relays: due does not move
		t.Errorf("overview shows due %q; the store has %d", got["overview-due"], want.Due)
	}
	if got["overview-lag"] == "" { // lag is time-dependent: shown is enough
		t.Errorf("overview shows no lag")
	}
	for _, c := range []string{"chart-pending", "chart-due", "chart-parked", "chart-lag"} {
		waitPage(t, tab, c, visibleJS(c))
	}
	savePageScreenshot(t, tab, "overview")

	tab, l = visitPage(t, browser, base+"/#/parked", "the parked rows", rowsReady)
	t.Logf("page parked: %v", l)
	rows := evalIn[[]string](t, tab, rowsJS)
	for _, id := range rows {
		if !strings.HasPrefix(id, "evt-") {
			t.Errorf("the parked list shows %q, which is not parked", id)
		}
	}
	savePageScreenshot(t, tab, "parked")

	tab, l = visitPage(t, browser, base+"/#/entry/evt-0003", "the entry", visibleJS("entry-detail")+` && `+textJS("entry-id")+` === "evt-0003"`)
	t.Logf("page entry: %v", l)
	waitPage(t, tab, "the JSON payload", visibleJS("payload-json"))
	savePageScreenshot(t, tab, "entry")

	// The flow: the list, a row, its detail, requeue, back to the list.
	tab = newTab(t, browser)
	if err := browserNavigate(tab, base+"/#/parked"); err != nil {
		t.Fatal(err)
	}
	waitPage(t, tab, "the parked rows", rowsReady)
	const pick = "evt-0007"
	clickPage(t, tab, fmt.Sprintf(`#entries-table [data-id=%s] td:nth-child(2)`, jsQuote(pick)))
	waitPage(t, tab, "the detail of "+pick, visibleJS("entry-detail")+` && `+textJS("entry-id")+`.trim() === `+jsQuote(pick))
	if st := evalIn[string](t, tab, textJS("entry-state")); !strings.Contains(strings.ToLower(st), "parked") {
		t.Errorf("entry-state %q, want parked", st)
	}
	toast := confirmAction(t, tab, "#requeue-one", "requeue")
	t.Logf("toast after requeue-one: %q", toast)
	routePage(t, tab, "#/parked")
	waitPage(t, tab, pick+" gone from the list", fmt.Sprintf(`%s && !%s.includes(%s)`, rowsReady, rowsJS, jsQuote(pick)))
	if storeParkedIDs(t, s)[pick] {
		t.Errorf("%s is still parked in the store after requeue-one", pick)
	}
	if st := storeStats(t, s); st.Parked != 24 || st.Pending != 13 {
		t.Errorf("after requeue-one the store has %+v, want 24 parked and 13 pending", st)
	}
}

// TestBrowserPayloads: on PostgreSQL and Redis, parked entries with odd
// payloads show in the right view (JSON, text, hex) with the right
// content; requeue-one requeues one; cancel-filtered, confirmed, cancels
// every entry of a topic filter and only those.
func TestBrowserPayloads(t *testing.T) {
	t.Parallel()
	browser := newBrowser(t)
	for _, kind := range []string{"postgres", "redis"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			var s browserStore
			if kind == "postgres" {
				s = browserPostgres(t, 2)
			} else {
				s = browserRedis(t, 2)
			}
			testBrowserPayloads(t, browser, s)
		})
	}
}

func testBrowserPayloads(t *testing.T, browser context.Context, s browserStore) {
	binary := make([]byte, 256)
	for i := range binary {
		binary[i] = byte(i)
	}
	large := make([]byte, 0, 1<<20)
	for i := 0; len(large) < 1<<20; i++ {
		large = fmt.Appendf(large, "line %06d of a large payload, all of it plain text\n", i)
	}
	large = large[:1<<20]
	const unicode = "héllo wörld 👋🏽 👨‍👩‍👧 🇫🇷 · مرحبا بالعالم · שלום עולם · e\u0301 a\u0308\u0323 Z\u0351\u0362 · 日本語テキスト · ∑∞≠"
	jsonPayload := `{"order":{"id":1042,"lines":[{"sku":"A-1","qty":2},{"sku":"B-7","qty":1}],"note":"naïve café ☕","paid":true,"discount":null}}`
	const topic, other = "odd.payloads", "keep.me"
	entries := []outbox.Entry{
		{ID: "odd-binary", Topic: topic, Key: "k-binary", Payload: binary},
		{ID: "odd-large", Topic: topic, Key: "k-large", Payload: large},
		{ID: "odd-unicode", Topic: topic, Key: "k-unicode", Payload: []byte(unicode)},
		{ID: "odd-json", Topic: topic, Key: "k-json", Payload: []byte(jsonPayload), Headers: map[string]string{"content-type": "application/json"}},
		{ID: "odd-json-2", Topic: topic, Key: "k-json-2", Payload: []byte(`[1,2,3]`)},
		{ID: "keep-1", Topic: other, Key: "k-keep-1", Payload: []byte("kept")},
		{ID: "keep-2", Topic: other, Key: "k-keep-2", Payload: []byte("kept too")},
	}
	parkEntries(t, s, entries, func(string) int { return 1 }, func(id string) string { return "sink: refused " + id })
	base := serveBrowser(t, s, ui.Options{StoreName: s.kind})
	tab := newTab(t, browser)
	if err := browserNavigate(tab, base+"/#/parked"); err != nil {
		t.Fatal(err)
	}
	waitPage(t, tab, "the parked rows", rowsReady)

	open := func(id string) {
		t.Helper()
		start := time.Now()
		routePage(t, tab, "#/entry/"+id)
		waitPage(t, tab, "the detail of "+id, visibleJS("entry-detail")+` && `+textJS("entry-id")+`.trim() === `+jsQuote(id))
		t.Logf("%s: entry %s shown in %v", s.kind, id, time.Since(start).Round(time.Millisecond))
	}

	open("odd-json")
	waitPage(t, tab, "the JSON view", visibleJS("payload-json"))
	var gotJSON, wantJSON any
	if err := json.Unmarshal([]byte(evalIn[string](t, tab, textJS("payload-json"))), &gotJSON); err != nil {
		t.Errorf("payload-json does not show JSON: %v", err)
	}
	_ = json.Unmarshal([]byte(jsonPayload), &wantJSON)
	if !reflect.DeepEqual(gotJSON, wantJSON) {
		t.Errorf("payload-json shows %v, want %v", gotJSON, wantJSON)
	}

	open("odd-unicode")
	waitPage(t, tab, "the text view", visibleJS("payload-text"))
	if got := evalIn[string](t, tab, textJS("payload-text")); got != unicode {
		t.Errorf("payload-text shows %q, want %q", got, unicode)
	}

	open("odd-binary")
	waitPage(t, tab, "the hex view", visibleJS("payload-hex"))
	api := getEntryAPI(t, base, "odd-binary")
	if raw, err := base64.StdEncoding.DecodeString(api.Payload.Base64); err != nil || string(raw) != string(binary) {
		t.Errorf("/api/entries/odd-binary: base64 %q does not decode to the payload (%v)", api.Payload.Base64, err)
	}
	if api.Payload.Text != nil {
		t.Errorf("/api/entries/odd-binary: text %q for a payload that is not UTF-8", *api.Payload.Text)
	}
	if got, want := strings.Join(strings.Fields(evalIn[string](t, tab, textJS("payload-hex"))), " "), strings.Join(strings.Fields(api.Payload.Hex), " "); got != want || !strings.Contains(strings.ReplaceAll(want, " ", ""), "fdfeff") {
		t.Errorf("payload-hex shows\n%s\nwant (the API's, which must show the bytes fd fe ff)\n%s", got, want)
	}
	if evalIn[bool](t, tab, visibleJS("payload-text")) {
		t.Errorf("payload-text is shown for a payload that is not UTF-8")
	}

	open("odd-large")
	waitPage(t, tab, "the text view of 1 MiB", visibleJS("payload-text"))
	if got := evalIn[string](t, tab, textJS("payload-text")+`.slice(0, 200)`); !strings.HasPrefix(string(large), got) || got == "" {
		t.Errorf("payload-text of the large payload begins %q, want %q", got, large[:200])
	}
	t.Logf("%s: the 1 MiB payload renders %d characters of text", s.kind, evalIn[int](t, tab, textJS("payload-text")+`.length`))

	// Requeue one, from its page.
	open("odd-json-2")
	confirmAction(t, tab, "#requeue-one", "requeue")
	if storeParkedIDs(t, s)["odd-json-2"] {
		t.Errorf("odd-json-2 is still parked after requeue-one")
	}

	// Cancel every parked entry of the topic, through the filter.
	routePage(t, tab, "#/parked")
	waitPage(t, tab, "the parked rows", rowsReady)
	ctx, cancel := context.WithTimeout(tab, browserWait)
	defer cancel()
	if err := browserType(ctx, "#filter-topic", topic); err != nil {
		t.Fatal(err)
	}
	clickPage(t, tab, "#filter-apply")
	odd := []string{"odd-binary", "odd-json", "odd-large", "odd-unicode"}
	waitPage(t, tab, "the rows of topic "+topic, fmt.Sprintf(`JSON.stringify(%s.sort()) === %s`, rowsJS, jsQuote(jsonString(odd))))
	toast := confirmAction(t, tab, "#cancel-filtered", "cancel")
	t.Logf("%s: toast after cancel-filtered: %q", s.kind, toast)
	waitPage(t, tab, "the filtered list to empty", `document.querySelectorAll("#entries-table [data-id]").length === 0`)
	if got := storeParkedIDs(t, s); !reflect.DeepEqual(got, map[string]bool{"keep-1": true, "keep-2": true}) {
		t.Errorf("after cancel-filtered by topic %s the store's parked entries are %v, want keep-1 and keep-2", topic, got)
	}
}

// TestBrowserReadOnly: a read-only dashboard shows no action, on the list,
// on an entry, on the overview (pause) or on the partitions (pause,
// resume).
func TestBrowserReadOnly(t *testing.T) {
	t.Parallel()
	browser := newBrowser(t)
	s := browserMemory(t, 1)
	parkEntries(t, s, realisticEntries("ro", 3), func(string) int { return 1 }, func(string) string { return browserErrors[0] })
	base := serveBrowser(t, s, ui.Options{ReadOnly: true})
	tab := newTab(t, browser)
	if err := browserNavigate(tab, base+"/#/parked"); err != nil {
		t.Fatal(err)
	}
	waitPage(t, tab, "the parked rows", rowsReady)
	for _, id := range []string{"requeue-filtered", "cancel-filtered"} {
		if evalIn[bool](t, tab, visibleJS(id)) {
			t.Errorf("read-only: %s is shown on the parked list", id)
		}
	}
	clickPage(t, tab, `#entries-table [data-id="ro-0002"] td:nth-child(2)`)
	waitPage(t, tab, "the detail of ro-0002", visibleJS("entry-detail")+` && `+textJS("entry-id")+`.trim() === "ro-0002"`)
	for _, id := range []string{"requeue-one", "cancel-one", "pause-entry-topic"} {
		if evalIn[bool](t, tab, visibleJS(id)) {
			t.Errorf("read-only: %s is shown on an entry", id)
		}
	}
	// No pause or resume either, though the store can pause.
	routePage(t, tab, "#/overview")
	waitPage(t, tab, "the paused panel", visibleJS("paused-table"))
	if evalIn[bool](t, tab, visibleJS("pause-form")) {
		t.Errorf("read-only: the pause form is shown on the overview")
	}
	routePage(t, tab, "#/partitions")
	waitPage(t, tab, "the partitions", `document.querySelectorAll("#partitions-table [data-partition]").length === 1`)
	if n := evalIn[int](t, tab, `Array.from(document.querySelectorAll("#partitions-table button")).filter((b) => b.getClientRects().length > 0).length`); n != 0 {
		t.Errorf("read-only: %d buttons are shown on the partitions", n)
	}
}

// TestBrowserTenThousandParked measures, with 10,000 parked entries on
// memory, the time from the navigation to the overview's numbers and to the
// first parked page. It logs them; it asserts only that they show.
func TestBrowserTenThousandParked(t *testing.T) {
	t.Parallel()
	browser := newBrowser(t)
	s := browserMemory(t, 1)
	parkEntries(t, s, realisticEntries("big", 10000), func(string) int { return 1 }, func(string) string { return browserErrors[1] })
	base := serveBrowser(t, s, ui.Options{})
	_, l := visitPage(t, browser, base+"/#/overview", "the overview numbers", overviewReady(10000))
	t.Logf("10,000 parked: overview %v", l)
	tab, l := visitPage(t, browser, base+"/#/parked", "the first parked page", rowsReady)
	t.Logf("10,000 parked: first parked page %v (%d rows)", l, len(evalIn[[]string](t, tab, rowsJS)))
}

// entryJSON is what /api/entries/{id} answers, as far as the tests read it.
type entryJSON struct {
	ID      string `json:"id"`
	Payload struct {
		Bytes  int     `json:"bytes"`
		Text   *string `json:"text"`
		Hex    string  `json:"hex"`
		Base64 string  `json:"base64"`
	} `json:"payload"`
}

func getEntryAPI(t *testing.T, base, id string) entryJSON {
	t.Helper()
	resp, err := http.Get(base + "/api/entries/" + id)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	var e entryJSON
	if resp.StatusCode != http.StatusOK || json.Unmarshal(body, &e) != nil {
		t.Fatalf("GET /api/entries/%s: %s %s", id, resp.Status, body)
	}
	return e
}

func jsonString(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return string(b)
}
