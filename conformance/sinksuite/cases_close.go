package sinksuite

import (
	"fmt"
	"sync"
	"testing"

	"github.com/outboxrelay/outbox"
)

func closeCases() []testCase {
	return []testCase{
		{"Close", "PublishAfterClose", closePublishAfter},
		{"Close", "Twice", closeTwice},
		{"Close", "KeepsPublished", closeKeepsPublished},
		{"Close", "WhilePublishing", closeWhilePublishing},
	}
}

// requireClose returns the sink's Close, skipping t when it has none.
func requireClose(t *testing.T, s *env) func() error {
	t.Helper()
	c := closer(s.sink)
	if c == nil {
		t.Skip("the sink has no Close() error or Close() method")
	}
	return c
}

// closePublishAfter: Publish after Close fails every entry, without
// panicking and without writing anything.
func closePublishAfter(t *testing.T, s *env) {
	closeSink := requireClose(t, s)
	before := s.distinct(2)
	s.publishOK(t, before)
	s.expectReadable(t, before, nil)
	if err := callClose(t, closeSink); err != nil {
		t.Fatalf("Close: %v", err)
	}
	after := append(s.distinct(2), s.keyed(s.prefix+"-after", 2)...)
	errs := s.publishWithin(t, s.ctx, after, waitLimit)
	for i, err := range errs {
		if err == nil {
			t.Errorf("Publish after Close reported entry %s published; it must fail every entry", after[i].ID)
		}
	}
	msgs := s.read(t, len(before)+1, absentWait)
	expectAbsent(t, msgs, ids(after), "it was published after Close")
}

// closeTwice: a second Close returns without panicking.
func closeTwice(t *testing.T, s *env) {
	closeSink := requireClose(t, s)
	entries := s.distinct(2)
	s.publishOK(t, entries)
	if err := callClose(t, closeSink); err != nil {
		t.Fatalf("Close: %v", err)
	}
	callClose(t, closeSink) // a second Close may return an error, but not panic or hang
	s.expectReadable(t, entries, nil)
}

// closeKeepsPublished: Close right after Publish returned loses nothing
// it reported published.
func closeKeepsPublished(t *testing.T, s *env) {
	closeSink := requireClose(t, s)
	var keys [][]outbox.Entry
	for k := range 10 {
		keys = append(keys, s.keyed(fmt.Sprintf("%s-k%d", s.prefix, k), 10))
	}
	entries := interleave(keys)
	s.publishOK(t, entries)
	if err := callClose(t, closeSink); err != nil {
		t.Fatalf("Close: %v", err)
	}
	msgs := s.expectReadable(t, entries, nil)
	expectOnce(t, msgs, entries)
}

// closeWhilePublishing: Close while 6 goroutines publish (run it under
// -race): no panic, every entry reported published is readable, and
// every call that starts after Close returned fails all its entries.
func closeWhilePublishing(t *testing.T, s *env) {
	closeSink := requireClose(t, s)
	const workers = 6
	var (
		mu     sync.Mutex
		all    []outbox.Entry
		errs   []error
		wg     sync.WaitGroup
		closed = make(chan struct{})
		first  sync.WaitGroup
	)
	first.Add(workers)
	for w := range workers {
		wg.Go(func() {
			for c := 0; ; c++ {
				key := fmt.Sprintf("%s-w%d", s.prefix, w)
				entries := []outbox.Entry{s.entry(key, 2*c+1), s.entry(key, 2*c+2), s.entry("", 0)}
				var afterClose bool
				select {
				case <-closed:
					afterClose = true
				default:
				}
				es, panicked := s.tryPublish(s.ctx, entries)
				if panicked != nil {
					t.Errorf("Publish panicked (Close was called concurrently): %v", panicked)
				}
				mu.Lock()
				all = append(all, entries...)
				errs = append(errs, es...)
				mu.Unlock()
				if c == 0 {
					first.Done()
				}
				if afterClose {
					for i, err := range es {
						if err == nil {
							t.Errorf("Publish that started after Close returned reported entry %s published", entries[i].ID)
						}
					}
					return
				}
			}
		})
	}
	first.Wait()
	if err := callClose(t, closeSink); err != nil {
		t.Errorf("Close: %v", err)
	}
	close(closed)
	wg.Wait()
	s.expectReadable(t, all, errs)
}
