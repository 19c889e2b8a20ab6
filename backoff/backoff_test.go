package backoff_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/outboxrelay/outbox/backoff"
)

func fixed(v float64) func() float64 { return func() float64 { return v } }

func TestCeilingGrowsAndCaps(t *testing.T) {
	t.Parallel()
	p := backoff.Policy{Base: 100 * time.Millisecond, Max: time.Second, Multiplier: 2}
	for _, tc := range []struct {
		attempt int
		class   backoff.Class
		want    time.Duration
	}{
		{0, backoff.ClassTransient, 100 * time.Millisecond}, // below 1 counts as 1
		{1, backoff.ClassTransient, 100 * time.Millisecond},
		{2, backoff.ClassTransient, 200 * time.Millisecond},
		{4, backoff.ClassTransient, 800 * time.Millisecond},
		{5, backoff.ClassTransient, time.Second},
		{500, backoff.ClassTransient, time.Second}, // no overflow
		{1, backoff.ClassSemiTransient, 400 * time.Millisecond},
		{3, backoff.ClassSemiTransient, time.Second},
	} {
		if got := p.Ceiling(tc.attempt, tc.class); got != tc.want {
			t.Errorf("Ceiling(%d, %v) = %v, want %v", tc.attempt, tc.class, got, tc.want)
		}
	}
}

func TestDelayIsFullJitterAboveTheFloor(t *testing.T) {
	t.Parallel()
	p := backoff.Policy{Base: 100 * time.Millisecond, Max: time.Second, Min: 10 * time.Millisecond}
	for _, tc := range []struct {
		rand  float64
		scale float64
		want  time.Duration
	}{
		{0, 1, 10 * time.Millisecond},     // the floor, never zero
		{0.5, 1, 55 * time.Millisecond},   // halfway between floor and ceiling
		{0.999999, 1, 99999910},           // just under the ceiling
		{0.5, 4, 220 * time.Millisecond},  // backpressure scales it
		{0.5, 0.1, 55 * time.Millisecond}, // scale below 1 counts as 1
	} {
		p.Rand = fixed(tc.rand)
		if got := p.Delay(1, backoff.ClassTransient, tc.scale); got != tc.want {
			t.Errorf("Delay(rand=%v, scale=%v) = %v, want %v", tc.rand, tc.scale, got, tc.want)
		}
	}
}

func TestDelayNeverBelowFloorEvenWithHugeMin(t *testing.T) {
	t.Parallel()
	// A floor above the first ceiling is clamped to the ceiling.
	p := backoff.Policy{Base: 10 * time.Millisecond, Max: time.Second, Min: 50 * time.Millisecond, Rand: fixed(0)}
	if got := p.Delay(1, backoff.ClassTransient, 1); got != 10*time.Millisecond {
		t.Fatalf("Delay = %v, want the 10ms ceiling", got)
	}
}

func TestDefaults(t *testing.T) {
	t.Parallel()
	var p backoff.Policy
	if got := p.Ceiling(1, backoff.ClassTransient); got != 500*time.Millisecond {
		t.Errorf("default base = %v, want 500ms", got)
	}
	if got := p.Ceiling(100, backoff.ClassTransient); got != 5*time.Minute {
		t.Errorf("default cap = %v, want 5m", got)
	}
	if p.Exhausted(19) || !p.Exhausted(20) {
		t.Errorf("default MaxAttempts should be 20")
	}
	unlimited := backoff.Policy{MaxAttempts: -1}
	if unlimited.Exhausted(1 << 30) {
		t.Errorf("negative MaxAttempts should never exhaust")
	}
	for range 1000 {
		d := p.Delay(1, backoff.ClassTransient, 1)
		if d < 50*time.Millisecond || d >= 500*time.Millisecond {
			t.Fatalf("default Delay(1) = %v, want in [50ms, 500ms)", d)
		}
	}
}

func TestClassOf(t *testing.T) {
	t.Parallel()
	base := errors.New("boom")
	for _, tc := range []struct {
		name string
		err  error
		want backoff.Class
	}{
		{"nil", nil, backoff.ClassTransient},
		{"plain", base, backoff.ClassTransient},
		{"permanent", backoff.Permanent(base), backoff.ClassPermanent},
		{"wrapped permanent", fmt.Errorf("publish: %w", backoff.Permanent(base)), backoff.ClassPermanent},
		{"semi", backoff.SemiTransient(base), backoff.ClassSemiTransient},
		{"deadline", fmt.Errorf("x: %w", context.DeadlineExceeded), backoff.ClassSemiTransient},
		{"outermost wins", backoff.Transient(backoff.Permanent(base)), backoff.ClassTransient},
	} {
		if got := backoff.ClassOf(tc.err); got != tc.want {
			t.Errorf("%s: ClassOf = %v, want %v", tc.name, got, tc.want)
		}
	}
	if backoff.Permanent(nil) != nil {
		t.Error("Permanent(nil) must be nil")
	}
	if err := backoff.Permanent(base); !errors.Is(err, base) || err.Error() != "boom" {
		t.Errorf("marking must keep the chain and text, got %v", err)
	}
}

func TestDecide(t *testing.T) {
	t.Parallel()
	p := backoff.Policy{Base: 100 * time.Millisecond, MaxAttempts: 3, Rand: fixed(0.5)}
	if park, _ := p.Decide(1, backoff.Permanent(errors.New("too large")), 1); !park {
		t.Error("a permanent failure must park at once")
	}
	if park, d := p.Decide(2, errors.New("x"), 1); park || d <= 0 {
		t.Errorf("attempt 2 of 3: park=%v delay=%v, want a retry", park, d)
	}
	if park, _ := p.Decide(3, errors.New("x"), 1); !park {
		t.Error("attempt 3 of 3 must park")
	}
	semi, _ := p.Decide(1, backoff.SemiTransient(errors.New("timeout")), 1)
	_, dSemi := p.Decide(1, backoff.SemiTransient(errors.New("timeout")), 1)
	_, dTrans := p.Decide(1, errors.New("x"), 1)
	if semi || dSemi <= dTrans {
		t.Errorf("semi-transient delay %v should exceed transient %v", dSemi, dTrans)
	}
}

func TestValidate(t *testing.T) {
	t.Parallel()
	for _, p := range []backoff.Policy{
		{Base: -1},
		{Min: 2 * time.Second, Max: time.Second},
		{Multiplier: -2},
	} {
		if p.Validate() == nil {
			t.Errorf("Validate(%+v) = nil, want an error", p)
		}
	}
	if err := (backoff.Policy{}).Validate(); err != nil {
		t.Errorf("zero policy: %v", err)
	}
}

func ExamplePolicy_Delay() {
	p := backoff.Policy{Base: time.Second, Max: time.Minute, Rand: func() float64 { return 0.5 }}
	for attempt := 1; attempt <= 4; attempt++ {
		fmt.Println(attempt, p.Delay(attempt, backoff.ClassTransient, 1))
	}
	// Output:
	// 1 550ms
	// 2 1.05s
	// 3 2.05s
	// 4 4.05s
}
