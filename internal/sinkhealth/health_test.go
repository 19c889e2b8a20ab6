package sinkhealth

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestHealth(t *testing.T) {
	var h Health
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	boom, bang := errors.New("boom"), errors.New("bang")
	ctx := context.Background()
	if s, err := h.Failing(); !s.IsZero() || err != nil {
		t.Fatalf("zero value failing: %v %v", s, err)
	}
	h.Record(ctx, t0, []error{boom, boom})
	h.Record(ctx, t0.Add(time.Second), []error{bang})
	if s, err := h.Failing(); !s.Equal(t0) || err != bang {
		t.Fatalf("after two failed calls: %v %v, want %v bang", s, err, t0)
	}
	h.Record(ctx, t0.Add(2*time.Second), nil) // no message: no change
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	h.Record(cancelled, t0.Add(3*time.Second), []error{context.Canceled}) // ended by ctx: no change
	if s, err := h.Failing(); !s.Equal(t0) || err != bang {
		t.Fatalf("after calls that change nothing: %v %v", s, err)
	}
	h.Record(ctx, t0.Add(4*time.Second), []error{boom, nil})
	if s, err := h.Failing(); !s.IsZero() || err != nil {
		t.Fatalf("after an acknowledged message: %v %v", s, err)
	}
}
