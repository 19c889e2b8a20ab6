package app

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/outboxrelay/outbox"
	"github.com/outboxrelay/outbox/move"
)

// buildOutboxBinary builds the outbox command into t's temporary
// directory, with -race when this test binary has it.
func buildOutboxBinary(t *testing.T) string {
	t.Helper()
	goTool, err := exec.LookPath("go")
	if err != nil {
		goTool = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	bin := filepath.Join(t.TempDir(), "outbox")
	args := []string{"build", "-o", bin}
	if relayRaceBuild {
		args = append(args, "-race")
	}
	if out, err := exec.Command(goTool, append(args, "github.com/outboxrelay/outbox/cmd/outbox")...).CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// TestMoveSurvivesSIGKILL kills a real `outbox move` process twice in the
// middle of moving a backlog of 20,000 entries (Postgres, 4 partitions, to
// Postgres, 8 partitions): once right after the source's count first
// dropped, once when half of it is moved. The third run finishes: the
// source is sealed and empty, the destination released and holding every
// entry exactly once, each key's entries in order.
func TestMoveSurvivesSIGKILL(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the outbox binary and moves 20,000 entries")
	}
	t.Parallel()
	moveSurvivesSIGKILL(t, pgEnd(t, 4), pgEnd(t, 8))
}

// TestMoveMySQLSurvivesSIGKILL is TestMoveSurvivesSIGKILL from a MySQL
// outbox of 4 partitions to one of 8.
func TestMoveMySQLSurvivesSIGKILL(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the outbox binary and moves 20,000 entries")
	}
	t.Parallel()
	moveSurvivesSIGKILL(t, mysqlEnd(t, 4), mysqlEnd(t, 8))
}

// moveSurvivesSIGKILL runs TestMoveSurvivesSIGKILL's kills and checks
// from one outbox to another.
func moveSurvivesSIGKILL(t *testing.T, from, to moveEnd) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	requireMovable(t, from, to)
	bin := buildOutboxBinary(t)

	const entries, keys = 20000, 200
	want := make([]string, 0, entries)
	for lo := 0; lo < entries; lo += 1000 {
		batch := make([]outbox.Entry, 0, 1000)
		for i := lo; i < lo+1000; i++ {
			// The ID names the key and the entry's place in it.
			k, seq := i%keys, i/keys
			id := fmt.Sprintf("kill-k%03d-%05d", k, seq)
			batch = append(batch, outbox.Entry{ID: id, Topic: "orders", Key: fmt.Sprintf("k%03d", k), Payload: []byte(id)})
			want = append(want, id)
		}
		if err := from.append(batch...); err != nil {
			t.Fatal(err)
		}
	}
	count := func(s outbox.Store) move.Counts {
		t.Helper()
		c, err := move.Count(ctx, s)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	if c := count(from.store); c.Total() != entries {
		t.Fatalf("the source holds %s, want %d", c, entries)
	}

	args := append(append([]string{"move"}, from.flags("from")...), to.flags("to")...)
	outboxRun := func(extra ...string) *exec.Cmd {
		cmd := exec.Command(bin, append(slices.Clone(args), extra...)...)
		cmd.Env = relayEnv()
		cmd.SysProcAttr = relayProcAttr()
		return cmd
	}
	if out, err := outboxRun("--prepare").CombinedOutput(); err != nil {
		t.Fatalf("outbox move --prepare: %v\n%s", err, out)
	}

	// Two runs killed mid-move: the first once the source's count
	// dropped, the second once it is below half.
	for i, below := range []int64{entries, entries / 2} {
		cmd := outboxRun("--yes", "--batch", "100")
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		exited := make(chan error, 1)
		go func() { exited <- cmd.Wait() }()
		var at move.Counts
	poll:
		for {
			select {
			case err := <-exited:
				t.Fatalf("kill %d: outbox move exited (%v) before the source held fewer than %d entries:\n%s", i+1, err, below, out.String())
			case <-ctx.Done():
				_ = cmd.Process.Kill()
				t.Fatalf("kill %d: the source never held fewer than %d entries; last %s", i+1, below, at)
			case <-time.After(5 * time.Millisecond):
			}
			if at = count(from.store); at.Total() < below {
				break poll
			}
		}
		if err := cmd.Process.Kill(); err != nil { // SIGKILL
			t.Fatal(err)
		}
		err := <-exited
		left := count(from.store)
		t.Logf("kill %d: SIGKILLed outbox move when the source held %d entries (%v); it then held %d, the destination %d", i+1, at.Total(), err, left.Total(), count(to.store).Total())
		if left.Total() == 0 {
			t.Fatalf("kill %d: the move finished before the kill landed (the source is empty): the test did not kill it mid-move", i+1)
		}
		if !strings.Contains(err.Error(), "killed") {
			t.Fatalf("kill %d: outbox move exited with %v, want killed:\n%s", i+1, err, out.String())
		}
	}

	// The third run finishes the move.
	out, err := outboxRun("--yes", "--batch", "100").CombinedOutput()
	if err != nil {
		t.Fatalf("outbox move after two kills: %v\n%s", err, out)
	}
	t.Logf("outbox move after two kills:\n%s", out)

	if c := count(from.store); c.Total() != 0 {
		t.Errorf("the source still holds %s", c)
	}
	if sealed, err := from.store.(outbox.Sealer).Sealed(ctx); err != nil || !sealed {
		t.Errorf("the source: sealed %v (%v), want sealed", sealed, err)
	}
	if hs, err := to.store.(outbox.Holder).HoldState(ctx); err != nil || hs.Held {
		t.Errorf("the destination: hold %+v (%v), want released", hs, err)
	}

	// Every entry exactly once in the destination, IDs compared in full,
	// each key's entries in order.
	got := map[string]int{}
	lastSeq := map[string]int{}
	for p := range to.store.Partitions() {
		l, err := to.store.AcquireLease(ctx, p, "move-kill-test", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		es, err := to.store.(outbox.Exporter).ExportBatch(ctx, l, 2*entries)
		if err != nil {
			t.Fatal(err)
		}
		if err := to.store.ReleaseLease(ctx, l); err != nil {
			t.Fatal(err)
		}
		for _, e := range es {
			got[e.ID]++
			seq, _ := strconv.Atoi(e.ID[strings.LastIndexByte(e.ID, '-')+1:])
			if last, ok := lastSeq[e.Key]; ok && seq <= last {
				t.Errorf("destination partition %d: entry %s of key %s comes after entry %d of its key", p, e.ID, e.Key, last)
			}
			lastSeq[e.Key] = seq
		}
	}
	var missing, twice []string
	for _, id := range want {
		switch got[id] {
		case 0:
			missing = append(missing, id)
		case 1:
		default:
			twice = append(twice, id)
		}
		delete(got, id)
	}
	if len(missing) > 0 || len(twice) > 0 || len(got) > 0 {
		t.Fatalf("the destination: %d entries missing (first %v), %d more than once (first %v), %d never appended",
			len(missing), missing[:min(5, len(missing))], len(twice), twice[:min(5, len(twice))], len(got))
	}
	t.Logf("the destination holds each of the %d entries exactly once, each key's entries in order", entries)
}
