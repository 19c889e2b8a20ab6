package outbox_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/outboxrelay/outbox"
	"github.com/outboxrelay/outbox/backends/memory"
	"github.com/outboxrelay/outbox/backoff"
)

// landingSink is a sink that declares a landing bound and publishes nothing.
type landingSink struct{ recorder }

func (s *landingSink) LandingBound() time.Duration { return 4 * time.Second }

// Each rule of the options, through Validate: the options it names and its
// text, which NewRelay returns the same.
func TestRelayOptionsValidateNamesTheOptionsOfEachRule(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		o       outbox.RelayOptions
		sink    outbox.Sink
		options []string
		text    string
	}{
		{"BatchSizeNegative", outbox.RelayOptions{BatchSize: -1}, nil, []string{"BatchSize"},
			"outbox: RelayOptions.BatchSize is -1; use a positive size or 0 for the default"},
		{"MaxInFlightNegative", outbox.RelayOptions{MaxInFlight: -2}, nil, []string{"MaxInFlight"},
			"outbox: RelayOptions.MaxInFlight is -2; use a positive bound or 0 for the default"},
		{"DurationNegative", outbox.RelayOptions{PollInterval: -time.Second}, nil, []string{"PollInterval"},
			"outbox: RelayOptions.PollInterval is -1s; durations must not be negative"},
		{"RenewMarginNotBelowLeaseTTL", outbox.RelayOptions{LeaseTTL: time.Second, RenewMargin: 2 * time.Second}, nil, []string{"RenewMargin", "LeaseTTL"},
			"outbox: RelayOptions.RenewMargin (2s) must be below LeaseTTL (1s)"},
		{"LeaseTTLNotAboveMarginPlusLandingBound", outbox.RelayOptions{LeaseTTL: 6 * time.Second}, &landingSink{}, []string{"LeaseTTL", outbox.OptionLandingBound, "RenewMargin"},
			"outbox: RelayOptions.LeaseTTL (6s) is too short for the sink's landing bound (4s): the relay stops trusting a lease RenewMargin (2s) plus that bound before it ends; raise LeaseTTL to 7s or more, or lower the sink's timeouts"},
		{"MaxPartitionsNegative", outbox.RelayOptions{MaxPartitions: -1}, nil, []string{"MaxPartitions"},
			"outbox: RelayOptions.MaxPartitions is -1; use a positive limit or 0 for no limit"},
		{"BackoffInvalid", outbox.RelayOptions{Backoff: backoff.Policy{Base: -1}}, nil, []string{"Backoff"},
			"outbox: RelayOptions.Backoff: "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := tc.o.Validate(tc.sink)
			var oe *outbox.OptionsError
			if !errors.As(err, &oe) || len(oe.Problems) != 1 {
				t.Fatalf("Validate: err = %v, want an *OptionsError with one problem", err)
			}
			if got := oe.Problems[0].Options; fmt.Sprint(got) != fmt.Sprint(tc.options) {
				t.Errorf("Options = %q, want %q", got, tc.options)
			}
			if !strings.HasPrefix(err.Error(), tc.text) {
				t.Errorf("Error() = %q, want %q", err, tc.text)
			}
			sink := tc.sink
			if sink == nil {
				sink = &recorder{}
			}
			_, nerr := outbox.NewRelay(memory.New(memory.Options{}), sink, tc.o)
			if nerr == nil || nerr.Error() != err.Error() {
				t.Errorf("NewRelay: err = %v, want Validate's %v", nerr, err)
			}
		})
	}
}

func TestRelayOptionsValidateAcceptsTheDefaults(t *testing.T) {
	t.Parallel()
	if err := (outbox.RelayOptions{}).Validate(&landingSink{}); err != nil {
		t.Fatalf("the zero options with a 4s landing bound: %v", err)
	}
	// Without the sink the landing bound is not known, so not checked.
	if err := (outbox.RelayOptions{LeaseTTL: 6 * time.Second}).Validate(nil); err != nil {
		t.Fatalf("LeaseTTL 6s without a sink: %v", err)
	}
}

// Every problem is reported at once, one line each, and errors.As finds
// the OptionsError through NewRelay's error, with the backoff error still
// reachable.
func TestNewRelayReportsEveryOptionProblemAsAnOptionsError(t *testing.T) {
	t.Parallel()
	b := memory.New(memory.Options{Partitions: 2})
	_, err := outbox.NewRelay(b, &recorder{}, outbox.RelayOptions{
		BatchSize: -1, LeaseTTL: time.Second, RenewMargin: 2 * time.Second,
		Partitions: []int{0, 0}, Backoff: backoff.Policy{Base: -1},
	})
	var oe *outbox.OptionsError
	if !errors.As(err, &oe) {
		t.Fatalf("err = %v (%T), want an *OptionsError", err, err)
	}
	var names []string
	for _, p := range oe.Problems {
		names = append(names, p.Options[0])
	}
	if want := "[BatchSize RenewMargin Backoff Partitions]"; fmt.Sprint(names) != want {
		t.Errorf("problems about %v, want %s", names, want)
	}
	if lines := strings.Split(err.Error(), "\n"); len(lines) != len(oe.Problems) {
		t.Errorf("Error() has %d lines for %d problems: %q", len(lines), len(oe.Problems), err)
	}
	if !strings.Contains(err.Error(), "outbox: RelayOptions.Partitions has 0, which is out of range [0, 2) or repeated") {
		t.Errorf("Error() = %q, want the repeated partition named", err)
	}
	if errors.Unwrap(err) != nil || len(oe.Unwrap()) != 1 {
		t.Errorf("Unwrap() = %v, want the backoff error alone", oe.Unwrap())
	}
}

// Describe renders the problems with a front end's names for the options;
// an option the caller does not name keeps its own.
func TestOptionsErrorDescribeUsesTheCallersNames(t *testing.T) {
	t.Parallel()
	err := outbox.RelayOptions{LeaseTTL: 6 * time.Second, BatchSize: -1}.Validate(&landingSink{})
	var oe *outbox.OptionsError
	if !errors.As(err, &oe) {
		t.Fatalf("err = %v, want an *OptionsError", err)
	}
	flags := map[string]string{
		"LeaseTTL":                "--lease-ttl",
		"BatchSize":               "--batch-size",
		outbox.OptionLandingBound: "the landing bound of --kafka-publish-timeout",
	}
	got := oe.Describe(func(o string) string { return flags[o] })
	want := "--batch-size is -1; use a positive size or 0 for the default\n" +
		"--lease-ttl (6s) is too short for the landing bound of --kafka-publish-timeout (4s): the relay stops trusting a lease RenewMargin (2s) plus that bound before it ends; raise --lease-ttl to 7s or more, or lower the sink's timeouts"
	if got != want {
		t.Errorf("Describe:\n got %q\nwant %q", got, want)
	}
}
