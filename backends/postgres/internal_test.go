package pgoutbox

import (
	"slices"
	"testing"
	"time"

	"github.com/outboxrelay/outbox"
)

func TestDelayMicrosRoundsAwayFromZero(t *testing.T) {
	t.Parallel()
	for d, want := range map[time.Duration]int64{
		0:                      0,
		time.Nanosecond:        1,
		time.Microsecond:       1,
		1500 * time.Nanosecond: 2,
		time.Hour:              3_600_000_000,
		-time.Nanosecond:       -1,
		-time.Microsecond:      -1,
		-1500:                  -2,
		-time.Hour:             -3_600_000_000,
	} {
		if got := delayMicros(d); got != want {
			t.Errorf("delayMicros(%v) = %d, want %d", d, got, want)
		}
	}
}

func TestPayloadPartitions(t *testing.T) {
	t.Parallel()
	all := []int{outbox.AllPartitions}
	for payload, want := range map[string][]int{
		"":      all,
		"3":     {3},
		"0,7":   {0, 7},
		"8":     all,
		"-1":    all,
		"1,x":   all,
		"1,,2":  all,
		" 1":    all,
		"1,2,3": {1, 2, 3},
	} {
		if got := payloadPartitions(payload, 8); !slices.Equal(got, want) {
			t.Errorf("payloadPartitions(%q, 8) = %v, want %v", payload, got, want)
		}
	}
	if got := parsePartitions("4,1"); !slices.Equal(got, []int32{4, 1}) {
		t.Errorf("parsePartitions(4,1) = %v", got)
	}
	if got := parsePartitions(""); !slices.Equal(got, []int32{-1}) {
		t.Errorf("parsePartitions of nothing = %v, want [-1] (all)", got)
	}
}
