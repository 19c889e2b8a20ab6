package brokentest

import (
	"slices"
	"testing"
)

func TestPattern(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		names []string
		want  string
	}{
		{[]string{"Append/Visible", "Fetch/Order", "Append/Once"}, "^TestBrokenChild$/^(Append|Fetch)$/^(Visible|Order|Once)$"},
		{[]string{"KeyOrder/FailureMidKey/Oversize"}, "^TestBrokenChild$/^(KeyOrder)$/^(FailureMidKey)$"},
		{[]string{"Corrupt"}, "^TestBrokenChild$/^(Corrupt)$"},
	} {
		if got := Pattern("TestBrokenChild", tc.names); got != tc.want {
			t.Errorf("Pattern(%q) = %q, want %q", tc.names, got, tc.want)
		}
	}
}

func TestFailing(t *testing.T) {
	t.Parallel()
	out := []byte(`=== RUN   TestBrokenChild
    --- FAIL: TestBrokenChild/Fetch/Order (0.01s)
    --- PASS: TestBrokenChild/Fetch/Limit (0.01s)
        --- FAIL: TestBrokenChild/KeyOrder/FailureMidKey/Oversize (0.20s)
    --- FAIL: TestBrokenChild/KeyOrder/FailureMidKey (0.20s)
    --- FAIL: TestBrokenChild/Append/Once (0.01s)
    --- FAIL: TestBrokenChild/Append/Once (0.01s)
--- FAIL: TestBrokenChild/Fetch (0.02s)
--- FAIL: TestOther/Append/Visible (0.01s)
`)
	want := []string{"Append/Once", "Fetch/Order", "KeyOrder/FailureMidKey", "KeyOrder/FailureMidKey/Oversize"}
	if got := Failing("TestBrokenChild", out); !slices.Equal(got, want) {
		t.Errorf("Failing = %q, want %q", got, want)
	}
}

func TestTail(t *testing.T) {
	t.Parallel()
	if got := Tail("a\nb\nc\n", 2); got != "b\nc" {
		t.Errorf("Tail = %q", got)
	}
	if got := Tail("a", 5); got != "a" {
		t.Errorf("Tail = %q", got)
	}
}
