package history

import (
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

func TestFilesRoundTrip(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	name := func(s string) string { return filepath.Join(dir, s+".jsonl") }

	// Two appender processes writing concurrently, a consumer, the harness.
	var wg sync.WaitGroup
	for _, app := range []string{"a", "b"} {
		wg.Go(func() {
			w, err := Create(name("appender-" + app))
			if err != nil {
				t.Error(err)
				return
			}
			p := int32(0)
			for i := range 3 {
				e := Entry{ID: app + string(rune('1'+i)), Key: app, Seq: int64(i + 1), Partition: &p, At: ms(i)}
				if i == 1 {
					err = w.Unknown(e)
				} else {
					err = w.Append(e)
				}
				if err != nil {
					t.Error(err)
				}
			}
			if err := w.Close(); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()

	c, err := Create(name("consumer"))
	if err != nil {
		t.Fatal(err)
	}
	for i, id := range []string{"a1", "b1", "a3", "b2", "b3", "b3"} {
		if err := c.Delivered(Delivery{Topic: "t", Partition: 0, Offset: int64(i), ID: id, At: ms(i)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if err := c.Append(Entry{ID: "x"}); err == nil {
		t.Error("Append after Close succeeded")
	}

	f, err := Create(name("faults"))
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Fault(ms(4), "SIGKILL relay 1"); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}

	h, err := ReadFiles(name("appender-a"), name("appender-b"), name("consumer"), name("faults"))
	if err != nil {
		t.Fatal(err)
	}
	r := h.Check()
	if !r.OK() || r.Appended != 4 || r.Unknown != 2 || r.UnknownDelivered != 1 || r.Duplicates != 1 ||
		len(r.Faults) != 1 || r.Faults[0].Duplicates != 1 || r.Faults[0].What != "SIGKILL relay 1" {
		t.Fatalf("round trip: %v (faults %+v)", r, r.Faults)
	}
}

func TestReadRejectsBadLines(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, line, want string
	}{
		{"TornLine", `{"op":"append","id":"e`, "unexpected end of JSON input"},
		{"NoOp", `{"id":"e1"}`, `without an "op"`},
		{"UnknownOp", `{"op":"commit","id":"e1"}`, `unknown op "commit"`},
		{"AppendWithoutID", `{"op":"append","key":"k"}`, "append line without an id"},
		{"NegativeSeq", `{"op":"unknown","id":"e1","seq":-1}`, "negative seq"},
		{"DeliverWithoutOffset", `{"op":"deliver","id":"e1","topic":"t","partition":0,"at":"2026-01-02T15:00:00Z"}`, "without an offset"},
		{"DeliverWithoutPartition", `{"op":"deliver","id":"e1","topic":"t","offset":0,"at":"2026-01-02T15:00:00Z"}`, "without a partition"},
		{"DeliverWithoutTime", `{"op":"deliver","id":"e1","topic":"t","partition":0,"offset":0}`, "without a time"},
		{"FaultWithoutTime", `{"op":"fault","what":"kill"}`, "fault line without a time"},
		{"BadTime", `{"op":"fault","at":"yesterday"}`, "cannot parse"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			name := filepath.Join(t.TempDir(), "h.jsonl")
			good := `{"op":"append","id":"e0","key":"k","seq":1}` + "\n\n"
			if err := os.WriteFile(name, []byte(good+tc.line+"\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			_, err := ReadFiles(name)
			if err == nil {
				t.Fatal("no error")
			}
			if prefix := "history: " + name + ":3: "; !strings.HasPrefix(err.Error(), prefix) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q, want prefix %q and %q", err, prefix, tc.want)
			}
		})
	}

	t.Run("MissingFile", func(t *testing.T) {
		t.Parallel()
		if _, err := ReadFiles(filepath.Join(t.TempDir(), "nope.jsonl")); err == nil || !strings.Contains(err.Error(), "nope.jsonl") {
			t.Errorf("error %v does not name the file", err)
		}
	})
}
