package ops_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/outboxrelay/outbox"
	"github.com/outboxrelay/outbox/internal/ops"
)

func TestParseWhen(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 5, 10, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		in   string
		want time.Time
	}{
		{"2026-01-02T15:04:05Z", time.Date(2026, 1, 2, 15, 4, 5, 0, time.UTC)},
		{"2026-01-02T15:04:05+02:00", time.Date(2026, 1, 2, 13, 4, 5, 0, time.UTC)},
		{"2026-01-02T15:04:05.5Z", time.Date(2026, 1, 2, 15, 4, 5, 5e8, time.UTC)},
		{"2026-01-02T15:04:05", time.Date(2026, 1, 2, 15, 4, 5, 0, time.UTC)},
		{"2026-01-02 15:04:05", time.Date(2026, 1, 2, 15, 4, 5, 0, time.UTC)},
		{"2026-01-02T15:04", time.Date(2026, 1, 2, 15, 4, 0, 0, time.UTC)},
		{"2026-01-02", time.Date(2026, 1, 2, 0, 0, 0, 0, time.UTC)},
		{"90m", now.Add(-90 * time.Minute)},
		{"0s", now},
		{"7d", now.Add(-7 * 24 * time.Hour)},
		{"1.5d", now.Add(-36 * time.Hour)},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			t.Parallel()
			got, err := ops.ParseWhen(tc.in, now)
			if err != nil || !got.Equal(tc.want) {
				t.Errorf("ParseWhen(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
			}
		})
	}
	for _, bad := range []string{"yesterday", "-5m", "-1d", "2026-13-01", "d", ""} {
		t.Run("Refuses"+bad, func(t *testing.T) {
			t.Parallel()
			_, err := ops.ParseWhen(bad, now)
			if err == nil || !strings.Contains(err.Error(), "is not a time: write RFC 3339") {
				t.Errorf("ParseWhen(%q): %v; want a refusal that says what to write", bad, err)
			}
		})
	}
}

func TestParseFilterErrorsNameTheField(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 5, 10, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		name  string
		spec  ops.FilterSpec
		field string // "" for a RangeError
	}{
		{"BadSince", ops.FilterSpec{Since: "soon"}, ops.FieldSince},
		{"BadUntil", ops.FilterSpec{Until: "-5m"}, ops.FieldUntil},
		{"BadBoth", ops.FilterSpec{Since: "x", Until: "y"}, ops.FieldSince},
		{"SinceAfterUntil", ops.FilterSpec{Since: "1h", Until: "2h"}, ""},
		{"SinceIsUntil", ops.FilterSpec{Since: "2026-01-02", Until: "2026-01-02"}, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := ops.ParseFilter(tc.spec, now)
			var field *ops.FieldError
			var rng *ops.RangeError
			switch {
			case tc.field != "":
				if !errors.As(err, &field) || field.Field != tc.field || !strings.HasPrefix(err.Error(), tc.field+": ") {
					t.Fatalf("ParseFilter(%+v): %v; want a *FieldError of %s", tc.spec, err, tc.field)
				}
			default:
				if !errors.As(err, &rng) || !rng.Since.Equal(mustWhen(t, tc.spec.Since, now)) || !rng.Until.Equal(mustWhen(t, tc.spec.Until, now)) {
					t.Fatalf("ParseFilter(%+v): %v; want a *RangeError with both times", tc.spec, err)
				}
			}
		})
	}
}

func mustWhen(t *testing.T, s string, now time.Time) time.Time {
	t.Helper()
	w, err := ops.ParseWhen(s, now)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

func TestFilterMatch(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 5, 10, 12, 0, 0, 0, time.UTC)
	base := outbox.Entry{Topic: "orders", Key: "k1", LastError: "read: Timeout after 5s", CreatedAt: now.Add(-30 * time.Minute)}
	with := func(change func(*outbox.Entry)) outbox.Entry {
		e := base
		change(&e)
		return e
	}
	tests := []struct {
		name string
		spec ops.FilterSpec
		e    outbox.Entry
		want bool
	}{
		{"NoFilterMatchesAll", ops.FilterSpec{}, base, true},
		{"Topic", ops.FilterSpec{Topic: "orders"}, base, true},
		{"OtherTopic", ops.FilterSpec{Topic: "payments"}, base, false},
		{"TopicIsExact", ops.FilterSpec{Topic: "order"}, base, false},
		{"Key", ops.FilterSpec{Key: "k1"}, base, true},
		{"OtherKey", ops.FilterSpec{Key: "k2"}, base, false},
		{"ErrorIgnoresCase", ops.FilterSpec{Error: "TIMEOUT"}, base, true},
		{"ErrorIsASubstring", ops.FilterSpec{Error: "after 5"}, base, true},
		{"OtherError", ops.FilterSpec{Error: "refused"}, base, false},
		{"ErrorOfNoError", ops.FilterSpec{Error: "x"}, with(func(e *outbox.Entry) { e.LastError = "" }), false},
		{"SinceIncludesItsInstant", ops.FilterSpec{Since: "30m"}, base, true},
		{"CreatedBeforeSince", ops.FilterSpec{Since: "29m"}, base, false},
		{"UntilExcludesItsInstant", ops.FilterSpec{Until: "30m"}, base, false},
		{"CreatedBeforeUntil", ops.FilterSpec{Until: "29m"}, base, true},
		{"AllMatch", ops.FilterSpec{Topic: "orders", Key: "k1", Error: "timeout", Since: "1h", Until: "1m"}, base, true},
		{"OneMisses", ops.FilterSpec{Topic: "orders", Key: "k1", Error: "timeout", Since: "1h", Until: "31m"}, base, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f, err := ops.ParseFilter(tc.spec, now)
			if err != nil {
				t.Fatal(err)
			}
			if got := f.Match(tc.e); got != tc.want {
				t.Errorf("%s (%+v) matches %+v: %v, want %v", f.Describe(), tc.spec, tc.e, got, tc.want)
			}
			if set := tc.spec != (ops.FilterSpec{}); f.Any() != set {
				t.Errorf("Any() = %v for %+v", f.Any(), tc.spec)
			}
		})
	}
}

func TestFilterDescribe(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 5, 10, 12, 0, 0, 0, time.UTC)
	f, err := ops.ParseFilter(ops.FilterSpec{Topic: "orders", Key: "k 1", Error: "TimeOut", Since: "2026-05-01", Until: "1h"}, now)
	if err != nil {
		t.Fatal(err)
	}
	want := `topic "orders", key "k 1", last error containing "timeout", created since 2026-05-01T00:00:00Z, created before 2026-05-10T11:00:00Z`
	if got := f.Describe(); got != want {
		t.Errorf("Describe() = %s\nwant         %s", got, want)
	}
	if got := (ops.Filter{}).Describe(); got != "" {
		t.Errorf("the zero Filter describes itself as %q", got)
	}
}
