package ui_test

// The browser the browser tests drive (browser_test.go): finding Chromium,
// starting it headless, and the page helpers those tests share. They wait
// by polling the DOM, never by sleeping.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	"github.com/outboxrelay/outbox/internal/testenv"
)

// browserTimeout bounds one top-level browser test, subtests included:
// the browser it starts is killed when it runs out.
const browserTimeout = 3 * time.Minute

// browserWait bounds one wait for the page.
const browserWait = 10 * time.Second

// chromiumCandidates are looked up, in order, when OUTBOX_CHROMIUM is unset
// (scripts/services.sh check looks for the same).
var chromiumCandidates = []string{"/usr/bin/chromium", "chromium", "chromium-browser", "google-chrome"}

// findChromium returns the browser to drive: OUTBOX_CHROMIUM when set, else
// the first of chromiumCandidates found.
func findChromium() (string, error) {
	if p := os.Getenv("OUTBOX_CHROMIUM"); p != "" {
		st, err := os.Stat(p)
		if err != nil || st.IsDir() || st.Mode()&0o111 == 0 {
			return "", fmt.Errorf("OUTBOX_CHROMIUM=%s is not an executable", p)
		}
		return p, nil
	}
	for _, c := range chromiumCandidates {
		if p, err := exec.LookPath(c); err == nil {
			return p, nil
		}
	}
	return "", errors.New("no Chromium found (looked for " + strings.Join(chromiumCandidates, ", ") + ")")
}

// requireChromium returns the browser's path, or skips t (fails it when
// OUTBOX_REQUIRE_SERVICES=1) saying how to get one.
func requireChromium(t *testing.T) string {
	t.Helper()
	p, err := findChromium()
	if err != nil {
		msg := "ui: the browser tests need Chromium: " + err.Error() +
			"; install it with apt-get install chromium (./scripts/services.sh install does, as root)" +
			" or point OUTBOX_CHROMIUM at a Chromium or Chrome binary"
		if testenv.Required() {
			t.Fatal(msg + " [OUTBOX_REQUIRE_SERVICES=1, so this is a failure]")
		}
		t.Skip(msg)
	}
	return p
}

// newBrowser starts a headless Chromium of t's own, with a fresh profile,
// and returns the context of its first tab. The browser is killed when t
// ends or after browserTimeout, whichever comes first.
func newBrowser(t *testing.T) context.Context {
	t.Helper()
	path := requireChromium(t)
	profile := t.TempDir() // removed after the browser is gone (cleanups run last first)
	parent, cancelTimeout := context.WithTimeout(context.Background(), browserTimeout)
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.NoFirstRun,
		chromedp.UserDataDir(profile),
		chromedp.WindowSize(1280, 900),
	)
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(parent, opts...)
	ctx, cancelBrowser := chromedp.NewContext(allocCtx)
	t.Cleanup(func() {
		cancelBrowser()
		cancelAlloc() // waits for the browser to exit
		cancelTimeout()
	})
	if err := chromedp.Do(ctx); err != nil { // starts it
		t.Fatalf("starting %s: %v", path, err)
	}
	watchExceptions(t, ctx)
	return ctx
}

// newTab opens a tab of the browser of ctx, closed when t ends.
func newTab(t *testing.T, browser context.Context) context.Context {
	t.Helper()
	ctx, cancel := chromedp.NewContext(browser)
	t.Cleanup(cancel)
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("opening a tab: %v", err)
	}
	watchExceptions(t, ctx)
	return ctx
}

// watchExceptions fails t, when it ends, if the page of tab threw an
// uncaught exception: a script error is a bug of the page even when the
// test's checks pass.
func watchExceptions(t *testing.T, tab context.Context) {
	var mu sync.Mutex
	var thrown []string
	err := chromedp.Listen(tab, func(ev any) {
		if ev, ok := ev.(*runtime.EventExceptionThrown); ok && ev.ExceptionDetails != nil {
			d := ev.ExceptionDetails
			msg := d.Text
			if d.Exception != nil && d.Exception.Description != "" {
				msg += " " + d.Exception.Description
			}
			mu.Lock()
			thrown = append(thrown, fmt.Sprintf("%s:%d: %s", d.URL, d.LineNumber+1, msg))
			mu.Unlock()
		}
	})
	if err != nil {
		t.Fatalf("listening to the page: %v", err)
	}
	t.Cleanup(func() {
		mu.Lock()
		defer mu.Unlock()
		for _, e := range thrown {
			t.Errorf("the page threw: %s", e)
		}
	})
}

// jsQuote quotes s as a JavaScript string literal.
func jsQuote(s string) string {
	b, err := json.Marshal(s)
	if err != nil {
		panic(err)
	}
	return string(b)
}

// visibleJS is a JavaScript expression: whether the element with the given
// ID exists and is rendered (not display:none, not hidden, not in a closed
// dialog).
func visibleJS(id string) string {
	return fmt.Sprintf(`((e) => !!e && e.getClientRects().length > 0 && getComputedStyle(e).visibility !== "hidden")(document.getElementById(%s))`, jsQuote(id))
}

// textJS is a JavaScript expression: the textContent of the element with
// the given ID, "" when there is none.
func textJS(id string) string {
	return fmt.Sprintf(`((e) => e ? e.textContent : "")(document.getElementById(%s))`, jsQuote(id))
}

// rowsJS is a JavaScript expression: the data-id of the entries table's rows.
const rowsJS = `Array.from(document.querySelectorAll("#entries-table [data-id]")).map((r) => r.getAttribute("data-id"))`

// evalIn evaluates expr in tab and decodes its value.
func evalIn[T any](t *testing.T, tab context.Context, expr string) T {
	t.Helper()
	v, err := chromedp.Run(tab, chromedp.Evaluate[T](expr))
	if err != nil {
		t.Fatalf("evaluating %s: %v", expr, err)
	}
	return v
}

// waitPage polls the JavaScript predicate expr until it is truthy, and fails
// t, showing where the page is and what it shows, when it is not within
// browserWait.
func waitPage(t *testing.T, tab context.Context, what, expr string) {
	t.Helper()
	_, err := chromedp.Run(tab, chromedp.Poll[chromedp.Void](expr,
		chromedp.WithPollingInterval(25*time.Millisecond), chromedp.WithPollingTimeout(browserWait)))
	if err != nil {
		state, _ := chromedp.Run(tab, chromedp.Evaluate[string](
			`location.hash + "\n" + (document.body ? document.body.innerText.slice(0, 1500) : "(no body)")`))
		t.Fatalf("waiting for %s (%s): %v\nthe page at %s", what, expr, err, state)
	}
}

// clickPage clicks, with the mouse, the element that the CSS selector sel
// finds, once it is visible.
func clickPage(t *testing.T, tab context.Context, sel string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(tab, browserWait)
	defer cancel()
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS(sel))); err != nil {
		t.Fatalf("clicking %s: %v", sel, err)
	}
}

// routePage changes the page's hash route, as a link of the page would.
func routePage(t *testing.T, tab context.Context, hash string) {
	t.Helper()
	evalIn[chromedp.Void](t, tab, "location.hash = "+jsQuote(hash))
}

// confirmAction clicks the action button sel, checks the confirmation dialog
// opens, confirms, and waits for the toast to report the action (its text
// matching the regular expression toast, case-insensitively).
func confirmAction(t *testing.T, tab context.Context, sel, toast string) string {
	t.Helper()
	before := evalIn[string](t, tab, textJS("toast"))
	clickPage(t, tab, sel)
	waitPage(t, tab, "the confirmation dialog", visibleJS("confirm-dialog")+" && "+visibleJS("confirm-yes"))
	if msg := strings.TrimSpace(evalIn[string](t, tab, textJS("confirm-message"))); msg == "" {
		t.Errorf("the confirmation dialog of %s says nothing", sel)
	}
	clickPage(t, tab, "#confirm-yes")
	waitPage(t, tab, "the toast of "+sel, fmt.Sprintf(`%s && ((s) => s !== %s && new RegExp(%s, "i").test(s))(%s)`,
		visibleJS("toast"), jsQuote(before), jsQuote(toast), textJS("toast")))
	return strings.TrimSpace(evalIn[string](t, tab, textJS("toast")))
}

// pageLoad is what visitPage measured of one page load.
type pageLoad struct {
	bytes    int64         // transferred: the page, its assets and API calls until ready
	requests int           // how many responses that is
	elapsed  time.Duration // from the navigation to ready
}

func (l pageLoad) String() string {
	return fmt.Sprintf("%.1f KiB in %d responses, ready in %v", float64(l.bytes)/1024, l.requests, l.elapsed.Round(time.Millisecond))
}

// visitPage opens url in a fresh tab with the cache off, waits for the
// predicate ready, and reports what was transferred (the encoded size of
// every response, headers included, as the browser received it) and how
// long it took. The tab stays open (it is returned) for screenshots.
func visitPage(t *testing.T, browser context.Context, url, what, ready string) (context.Context, pageLoad) {
	t.Helper()
	tab := newTab(t, browser)
	var mu sync.Mutex
	var l pageLoad
	if err := chromedp.Listen(tab, func(ev any) {
		if ev, ok := ev.(*network.EventLoadingFinished); ok {
			mu.Lock()
			l.bytes += int64(ev.EncodedDataLength)
			l.requests++
			mu.Unlock()
		}
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := chromedp.Call(tab, network.SetCacheDisabled, network.SetCacheDisabledParams{CacheDisabled: true}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := chromedp.Do(tab, chromedp.Navigate(url)); err != nil {
		t.Fatalf("opening %s: %v", url, err)
	}
	waitPage(t, tab, what, ready)
	mu.Lock()
	defer mu.Unlock()
	l.elapsed = time.Since(start)
	return tab, l
}

// savePageScreenshot writes a full-page PNG of tab to docs/images/dashboard-NAME.png
// when OUTBOX_UPDATE_SCREENSHOTS=1, else to a temporary directory.
func savePageScreenshot(t *testing.T, tab context.Context, name string) {
	t.Helper()
	png, err := chromedp.Run(tab, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot %s: %v", name, err)
	}
	dir := t.TempDir()
	if os.Getenv("OUTBOX_UPDATE_SCREENSHOTS") == "1" {
		dir = "../docs/images"
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	path := dir + "/dashboard-" + name + ".png"
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot %s: %s (%d KiB)", name, path, len(png)/1024)
}

// browserNavigate opens url in tab and waits for it to load.
func browserNavigate(tab context.Context, url string) error {
	ctx, cancel := context.WithTimeout(tab, browserWait)
	defer cancel()
	return chromedp.Do(ctx, chromedp.Navigate(url))
}

// browserType types s, key by key, into the field the CSS selector sel
// finds, once it is visible.
func browserType(ctx context.Context, sel, s string) error {
	return chromedp.Do(ctx, chromedp.WaitVisible(chromedp.CSS(sel)), chromedp.SendKeys(chromedp.CSS(sel), s))
}
