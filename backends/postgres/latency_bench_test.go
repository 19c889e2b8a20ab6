package pgoutbox_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxrelay/outbox"
	pgoutbox "github.com/outboxrelay/outbox/backends/postgres"
)

// BenchmarkCommitToPublish breaks the commit-to-publish latency of one
// relay down into where the time goes, at a few open-loop arrival rates
// (16 callers by default, one transaction per arrival, a caller behind its arrivals
// appends them together; the relay on a pool of its own, as in the
// benchmark harness's W3). Per entry: commit to the next notification the
// relay received, commit to the start of the fetch that returned it, that
// fetch's duration, and commit to the sink; per batch, the MarkSent. Each
// is reported as its p50, p99 and max in ms. Run:
//
//	go test -run '^$' -bench CommitToPublish -benchtime 1x ./backends/postgres/
//
// OUTBOX_BENCH_RATES (comma-separated arrivals/s) and OUTBOX_BENCH_CALLERS
// change the rates and the number of callers.
func BenchmarkCommitToPublish(b *testing.B) {
	rates, callers := []int{2000, 5000, 10000}, 16
	if v := os.Getenv("OUTBOX_BENCH_RATES"); v != "" {
		rates = rates[:0]
		for _, f := range strings.Split(v, ",") {
			r, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || r <= 0 {
				b.Fatalf("OUTBOX_BENCH_RATES=%q: want positive integers, comma-separated", v)
			}
			rates = append(rates, r)
		}
	}
	if v := os.Getenv("OUTBOX_BENCH_CALLERS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			b.Fatalf("OUTBOX_BENCH_CALLERS=%q: want a positive integer", v)
		}
		callers = n
	}
	for _, rate := range rates {
		b.Run(fmt.Sprintf("%d-per-s", rate), func(b *testing.B) {
			for b.Loop() {
				commitToPublish(b, rate, callers, 4*time.Second)
			}
		})
	}
}

// timedStore records when each fetch that returned an entry ran, how long
// each MarkSent took and when each notification reached the relay.
type timedStore struct {
	*pgoutbox.Backend
	mu      sync.Mutex
	fetched map[string][2]int64 // entry ID -> fetch start, end (unix ns)
	notes   []int64
	marks   []float64 // ms
}

func (z *timedStore) FetchBatch(ctx context.Context, l outbox.Lease, limit int) (outbox.Batch, error) {
	return z.timed(func() (outbox.Batch, error) { return z.Backend.FetchBatch(ctx, l, limit) })
}

// FetchNext is timed as FetchBatch is: the relay fetches ahead through it.
func (z *timedStore) FetchNext(ctx context.Context, l outbox.Lease, limit int, inFlight []outbox.Entry) (outbox.Batch, error) {
	return z.timed(func() (outbox.Batch, error) { return z.Backend.FetchNext(ctx, l, limit, inFlight) })
}

func (z *timedStore) timed(fetch func() (outbox.Batch, error)) (outbox.Batch, error) {
	t0 := time.Now().UnixNano()
	batch, err := fetch()
	t1 := time.Now().UnixNano()
	z.mu.Lock()
	for _, e := range batch.Entries {
		if _, ok := z.fetched[e.ID]; !ok {
			z.fetched[e.ID] = [2]int64{t0, t1}
		}
	}
	z.mu.Unlock()
	return batch, err
}

func (z *timedStore) MarkSent(ctx context.Context, l outbox.Lease, ids []string) error {
	t0 := time.Now()
	err := z.Backend.MarkSent(ctx, l, ids)
	z.mu.Lock()
	z.marks = append(z.marks, float64(time.Since(t0))/1e6)
	z.mu.Unlock()
	return err
}

func (z *timedStore) Notifications(ctx context.Context) (<-chan int, error) {
	in, err := z.Backend.Notifications(ctx)
	if err != nil {
		return nil, err
	}
	out := make(chan int, cap(in))
	go func() {
		defer close(out)
		for p := range in {
			z.mu.Lock()
			z.notes = append(z.notes, time.Now().UnixNano())
			z.mu.Unlock()
			select {
			case out <- p:
			default:
			}
		}
	}()
	return out, nil
}

// firstSink records when each entry first reached it.
type firstSink struct {
	mu  sync.Mutex
	got map[string]int64
}

func (s *firstSink) Publish(_ context.Context, msgs []outbox.Entry) []error {
	now := time.Now().UnixNano()
	s.mu.Lock()
	for _, m := range msgs {
		if _, ok := s.got[m.ID]; !ok {
			s.got[m.ID] = now
		}
	}
	s.mu.Unlock()
	return make([]error, len(msgs))
}

func commitToPublish(b *testing.B, rate, callers int, d time.Duration) {
	ctx := context.Background()
	be, p := newBackend(b, extended, pgoutbox.Options{})
	cfg := p.Config().Copy()
	cfg.MaxConns = 8
	rp, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		b.Fatal(err)
	}
	defer rp.Close()
	rbe, err := pgoutbox.New(ctx, rp, be.Options())
	if err != nil {
		b.Fatal(err)
	}
	defer rbe.Close()
	store := &timedStore{Backend: rbe, fetched: map[string][2]int64{}}
	sink := &firstSink{got: map[string]int64{}}
	r, err := outbox.NewRelay(store, sink, outbox.RelayOptions{})
	if err != nil {
		b.Fatal(err)
	}
	if err := r.Start(ctx); err != nil {
		b.Fatal(err)
	}
	defer func() {
		stopCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		_ = r.Stop(stopCtx)
	}()
	time.Sleep(200 * time.Millisecond) // the lease and the listener

	n := int(float64(rate) * d.Seconds())
	commit := make([]atomic.Int64, n)
	jobs := make(chan int, n)
	var wg sync.WaitGroup
	var failed atomic.Value
	for range callers {
		wg.Go(func() {
			for i := range jobs {
				batch := []int{i}
			more:
				for len(batch) < 100 {
					select {
					case j, ok := <-jobs:
						if !ok {
							break more
						}
						batch = append(batch, j)
					default:
						break more
					}
				}
				es := make([]outbox.Entry, len(batch))
				for k, j := range batch {
					es[k] = outbox.Entry{ID: "e" + strconv.Itoa(j), Topic: "t", Key: "k" + strconv.Itoa(j%1000), Payload: make([]byte, 256)}
				}
				if err := pgx.BeginFunc(ctx, p, func(tx pgx.Tx) error { return be.AppendInTx(ctx, tx, es...) }); err != nil {
					failed.CompareAndSwap(nil, err)
					continue
				}
				now := time.Now().UnixNano()
				for _, j := range batch {
					commit[j].Store(now)
				}
			}
		})
	}
	start := time.Now()
	every := time.Duration(float64(time.Second) / float64(rate))
	for i := range n {
		if w := time.Until(start.Add(time.Duration(i) * every)); w > 0 {
			time.Sleep(w)
		}
		jobs <- i
	}
	close(jobs)
	wg.Wait()
	if err, _ := failed.Load().(error); err != nil {
		b.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); ; {
		sink.mu.Lock()
		got := len(sink.got)
		sink.mu.Unlock()
		if got == n {
			break
		}
		if time.Now().After(deadline) {
			b.Fatalf("%d of %d entries published", got, n)
		}
		time.Sleep(10 * time.Millisecond)
	}

	store.mu.Lock()
	sink.mu.Lock()
	defer store.mu.Unlock()
	defer sink.mu.Unlock()
	ms := func(d int64) float64 { return float64(d) / 1e6 }
	var total, toNote, toFetch, fetch []float64
	for i := range n {
		id := "e" + strconv.Itoa(i)
		c, f := commit[i].Load(), store.fetched[id]
		total = append(total, ms(sink.got[id]-c))
		if k, _ := slices.BinarySearch(store.notes, c); k < len(store.notes) {
			toNote = append(toNote, ms(store.notes[k]-c))
		}
		toFetch = append(toFetch, ms(f[0]-c))
		fetch = append(fetch, ms(f[1]-f[0]))
	}
	for _, m := range []struct {
		name string
		v    []float64
	}{{"total", total}, {"notify", toNote}, {"to-fetch", toFetch}, {"fetch", fetch}, {"marksent", store.marks}} {
		slices.Sort(m.v)
		if len(m.v) == 0 {
			continue
		}
		b.ReportMetric(m.v[len(m.v)/2], m.name+"-p50-ms")
		b.ReportMetric(m.v[(len(m.v)-1)*99/100], m.name+"-p99-ms")
		b.ReportMetric(m.v[len(m.v)-1], m.name+"-max-ms")
	}
}
