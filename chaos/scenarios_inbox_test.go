package main

import (
	"errors"
	"strings"
	"testing"

	"github.com/outboxrelay/outbox/chaos/history"
	"github.com/outboxrelay/outbox/chaos/internal/exactlyonce"
	"github.com/outboxrelay/outbox/chaos/internal/inboxconsumer"
)

// The inbox/ scenarios pass on the effects' check: exactly once for the
// inbox, duplicates found for the control; an effect check that did not
// run, or a broker check that failed, fails both.
func TestInboxVerdicts(t *testing.T) {
	t.Parallel()
	once := exactlyonce.Report{Entries: 3, Applied: 3, Effects: 3}
	twice := exactlyonce.Report{Entries: 3, Applied: 3, Effects: 4, Duplicates: 1, DuplicateIDs: 1}
	missing := exactlyonce.Report{Entries: 3, Applied: 2, Effects: 2, Missing: []exactlyonce.Entry{{ID: "e3"}}}
	ok := &history.Report{Appended: 3, Delivered: 3}
	lost := &history.Report{Appended: 3, Delivered: 2, Lost: []history.Entry{{ID: "e3"}}}
	withInbox := &scenario{name: "inbox/x", inbox: &inboxSpec{mode: inboxconsumer.ModeInbox, consumers: 3}}
	control := &scenario{name: "inbox/control", inbox: &inboxSpec{mode: inboxconsumer.ModePlain, consumers: 3}}
	for _, tc := range []struct {
		name    string
		sc      *scenario
		report  *history.Report
		effects *exactlyonce.Report
		err     error
		verdict string
	}{
		{"InboxExactlyOnce", withInbox, ok, &once, nil, "ok"},
		{"InboxDuplicateFails", withInbox, ok, &twice, nil, "FAIL"},
		{"InboxMissingFails", withInbox, ok, &missing, nil, "FAIL"},
		{"InboxWithoutEffectsFails", withInbox, ok, nil, nil, "FAIL"},
		{"InboxBrokerLossFails", withInbox, lost, &once, nil, "FAIL"},
		{"InboxUnnumberedFails", withInbox, ok, &exactlyonce.Report{Entries: 3, Applied: 3, Effects: 3, Unnumbered: 3}, nil, "FAIL"},
		{"InboxErrorIsAnError", withInbox, nil, nil, errors.New("boom"), "ERROR"},
		{"ControlWithDuplicatesIsCaught", control, ok, &twice, nil, "caught"},
		{"ControlExactlyOnceIsNotCaught", control, ok, &once, nil, "NOT CAUGHT"},
		{"ControlMissingOnlyIsNotCaught", control, ok, &missing, nil, "NOT CAUGHT"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := &result{sc: tc.sc, report: tc.report, effects: tc.effects, err: tc.err}
			if got := r.verdict(); got != tc.verdict {
				t.Fatalf("verdict %q, want %q", got, tc.verdict)
			}
			if want := tc.verdict == "ok" || tc.verdict == "caught"; r.passed() != want {
				t.Fatalf("passed() = %v, want %v", r.passed(), want)
			}
		})
	}
}

func TestEffectsTable(t *testing.T) {
	t.Parallel()
	twice := exactlyonce.Report{Entries: 3, Applied: 3, Effects: 5, Duplicates: 2, DuplicateIDs: 1}
	rs := []*result{
		{sc: &scenario{name: "relay-kill/postgres"}, report: &history.Report{}},
		{sc: &scenario{name: "inbox/control", inbox: &inboxSpec{mode: inboxconsumer.ModePlain, consumers: 3}},
			report: &history.Report{Appended: 3}, effects: &twice, consumerKills: 4},
	}
	got := effectsTable(rs)
	want := "| inbox/control | 3, plain, postgres | 3 (0, 0) | 5 | 0 | 2 (1) | 0 | 0 | 4 | caught |"
	if !strings.Contains(got, want) || strings.Contains(got, "relay-kill") {
		t.Fatalf("effectsTable:\n%s\nwant the row\n%s\nand no row of the other scenarios", got, want)
	}
	if effectsTable(rs[:1]) != "" {
		t.Fatal("a run without inbox/ scenarios has no effects table")
	}
}

func TestInboxScenariosAreListed(t *testing.T) {
	t.Parallel()
	var names []string
	for _, sc := range scenarios() {
		if sc.inbox != nil {
			names = append(names, sc.name)
			if sc.inbox.consumers < 2 || sc.relays != 3 || sc.heal == nil {
				t.Errorf("%s: %d consumers, %d relays, heal %v", sc.name, sc.inbox.consumers, sc.relays, sc.heal != nil)
			}
		}
	}
	if got := strings.Join(names, " "); got != "inbox/postgres inbox/control-no-inbox inbox/mysql inbox/redis" {
		t.Fatalf("inbox scenarios %q", got)
	}
}
