package ui

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/outboxrelay/outbox"
	"github.com/outboxrelay/outbox/backends/memory"
)

// TestSamplerRingBuffer takes samples by hand under a fake clock: the ring
// keeps History/SampleInterval of them, oldest first, dropping the oldest.
func TestSamplerRingBuffer(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	b := memory.New(memory.Options{Now: clock})
	s, err := New(b, Options{SampleInterval: 10 * time.Second, History: time.Minute, Now: clock})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	for i := range 8 {
		if err := b.Append(ctx, outbox.Entry{Topic: "t"}); err != nil {
			t.Fatal(err)
		}
		s.sample(ctx)
		if i < 7 {
			now = now.Add(10 * time.Second)
		}
	}
	got := s.samples()
	if len(got) != 6 {
		t.Fatalf("%d samples, want 6 (1m of 10s)", len(got))
	}
	for i, smp := range got {
		wantT := now.Add(time.Duration(i-5) * 10 * time.Second)
		if !smp.T.Equal(wantT) || smp.Pending != int64(i+3) {
			t.Errorf("sample %d: %v pending %d, want %v pending %d", i, smp.T, smp.Pending, wantT, i+3)
		}
	}
	// The overview shows them, oldest first, with the lag at each sample's
	// time: the first entry was appended 70s before now.
	w := httptest.NewRecorder()
	s.ServeHTTP(w, httptest.NewRequest("GET", "/api/overview", nil))
	var o struct {
		Samples []struct {
			T       time.Time
			Pending int64
			Lag     float64 `json:"lag_seconds"`
		}
	}
	if err := json.Unmarshal(w.Body.Bytes(), &o); err != nil {
		t.Fatal(err)
	}
	if len(o.Samples) != 6 || o.Samples[0].Pending != 3 || o.Samples[0].Lag != 20 || o.Samples[5].Lag != 70 {
		t.Errorf("overview samples %+v", o.Samples)
	}

	// A ring shorter than one interval keeps one sample.
	s1, err := New(b, Options{SampleInterval: time.Minute, History: time.Second, Now: clock})
	if err != nil {
		t.Fatal(err)
	}
	s1.sample(ctx)
	s1.sample(ctx)
	if n := len(s1.samples()); n != 1 {
		t.Errorf("%d samples, want 1", n)
	}
	// A failed sample is skipped.
	_ = b.Close()
	s1.sample(ctx)
	if n := len(s1.samples()); n != 1 {
		t.Errorf("%d samples after a failed one, want 1", n)
	}
}
