package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
)

const schemaRiver = "bench_river"

// riverArgs is the job of the River workloads: the same 256-byte body and
// key as every other system.
type riverArgs struct {
	Key     string `json:"k"`
	Payload string `json:"p"`
}

func (riverArgs) Kind() string { return "bench" }

type riverWorker struct {
	river.WorkerDefaults[riverArgs]
	tr *tracker
}

func (w *riverWorker) Work(_ context.Context, job *river.Job[riverArgs]) error {
	w.tr.markPayload([]byte(job.Args.Payload))
	return nil
}

// riverFetch is one setting of River's fetch loop tried for its drain.
type riverFetch struct {
	cooldown, poll time.Duration
}

func (f riverFetch) String() string {
	return fmt.Sprintf("FetchCooldown %s, FetchPollInterval %s", f.cooldown, f.poll)
}

func (s *Suite) resetRiver(ctx context.Context) error {
	if err := s.recreateSchema(ctx, schemaRiver, ""); err != nil {
		return err
	}
	m, err := rivermigrate.New(riverpgxv5.New(s.pool), &rivermigrate.Config{Schema: schemaRiver, Logger: quietLogger()})
	if err != nil {
		return err
	}
	_, err = m.Migrate(ctx, rivermigrate.DirectionUp, nil)
	return err
}

// verbose turns the logs of our relays and backends on (flag -v).
var verbose bool

func quietLogger() *slog.Logger {
	return slog.New(slog.NewTextHandler(discard{}, &slog.HandlerOptions{Level: slog.LevelError + 10}))
}

// oursLogger is the logger of our relays and backends: silent unless -v.
func oursLogger() *slog.Logger {
	if verbose {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return quietLogger()
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }

// river measures River on the same Postgres: InsertTx (1 job/tx) and
// InsertManyFastTx (100 jobs/tx) with 8 callers, and a no-op worker
// (MaxWorkers 1000) draining the backlog at its fastest fetch settings.
func (s *Suite) river(ctx context.Context) error {
	n := s.cfg.N
	msgs := newMessages(n, 3)
	args := make([]riverArgs, n)
	for i := range n {
		args[i] = riverArgs{Key: msgs.keys[i], Payload: string(msgs.payload[i])}
	}
	fetches := []riverFetch{{2 * time.Millisecond, 20 * time.Millisecond}, {time.Millisecond, 10 * time.Millisecond}, {5 * time.Millisecond, 50 * time.Millisecond}}
	if s.cfg.Quick {
		fetches = fetches[:1]
	}
	insertClient, err := river.NewClient(riverpgxv5.New(s.pool), &river.Config{Schema: schemaRiver, Logger: quietLogger()})
	if err != nil {
		return err
	}
	n1 := s.cfg.N1
	ins1, ins100 := s.sr("river.ins1"), s.sr("river.ins100")
	drains := make([]*series, len(fetches))
	for i := range drains {
		drains[i] = s.sr(fmt.Sprintf("river.drain.%d", i))
	}
	for run := range s.thisRun() {
		if err := s.resetRiver(ctx); err != nil {
			return fmt.Errorf("river migrate: %w", err)
		}
		el, err := parallel(ctx, Callers, n1, 1, func(ctx context.Context, lo, hi int) error {
			return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
				_, err := insertClient.InsertTx(ctx, tx, args[lo], nil)
				return err
			})
		})
		if err != nil {
			return fmt.Errorf("river InsertTx: %w", err)
		}
		if err := s.checkRiverJobs(ctx, n1); err != nil {
			return fmt.Errorf("river InsertTx: %w", err)
		}
		ins1.add(rate(n1, el), nil)

		// One InsertManyFastTx backlog per fetch setting; the first fill
		// of the run is the 100/tx append figure.
		for fi, f := range fetches {
			if err := s.resetRiver(ctx); err != nil {
				return err
			}
			el, err = parallel(ctx, Callers, n, 100, func(ctx context.Context, lo, hi int) error {
				params := make([]river.InsertManyParams, hi-lo)
				for i := range params {
					params[i] = river.InsertManyParams{Args: args[lo+i]}
				}
				return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
					_, err := insertClient.InsertManyFastTx(ctx, tx, params)
					return err
				})
			})
			if err != nil {
				return fmt.Errorf("river InsertManyFastTx: %w", err)
			}
			if err := s.checkRiverJobs(ctx, n); err != nil {
				return fmt.Errorf("river InsertManyFastTx: %w", err)
			}
			if fi == 0 {
				ins100.add(rate(n, el), nil)
			}
			if err := s.analyzeSchema(ctx, schemaRiver); err != nil {
				return fmt.Errorf("river: ANALYZE: %w", err)
			}
			if err := s.riverDrain(ctx, run, n, f, drains[fi]); err != nil {
				return err
			}
		}
	}
	w1 := fmt.Sprintf("Postgres append, 1 entry/tx, %d callers", Callers)
	s.record("river.inserttx", w1, "River InsertTx", "entries/s", true, ins1, "")
	s.record("river.insertmanyfast", fmt.Sprintf("Postgres append, 100 entries/tx, %d callers", Callers), "River InsertManyFastTx", "entries/s", true, ins100, "")
	best := -1
	for i, f := range fetches {
		r := s.record(fmt.Sprintf("river.drain.%d", i), s.drainTitle("Postgres", "no-op sink"), "River no-op worker", "entries/s", true, drains[i], "MaxWorkers 1000, "+f.String())
		if r != nil && (best < 0 || r.Median > s.result(fmt.Sprintf("river.drain.%d", best)).Median) {
			best = i
		}
	}
	if best >= 0 {
		s.record("river.drain.best", s.drainTitle("Postgres", "no-op sink"), "River no-op worker, best setting", "entries/s", true, drains[best], "MaxWorkers 1000, "+fetches[best].String())
	}
	_, err = s.pool.Exec(ctx, "DROP SCHEMA IF EXISTS "+schemaRiver+" CASCADE")
	return err
}

func (s *Suite) checkRiverJobs(ctx context.Context, want int) error {
	var got int
	if err := s.pool.QueryRow(ctx, "SELECT count(*) FROM "+schemaRiver+".river_job WHERE state = 'available'").Scan(&got); err != nil {
		return err
	}
	if got != want {
		return fmt.Errorf("count wrong: %d available jobs after %d inserts", got, want)
	}
	return nil
}

// riverDrain works the n available jobs with a no-op worker and records
// the rate from the client's start to the last job's completion.
func (s *Suite) riverDrain(ctx context.Context, run, n int, f riverFetch, sr *series) error {
	tr := newTracker(n)
	workers := river.NewWorkers()
	if err := river.AddWorkerSafely(workers, &riverWorker{tr: tr}); err != nil {
		return err
	}
	client, err := river.NewClient(riverpgxv5.New(s.pool), &river.Config{
		Schema:            schemaRiver,
		Logger:            quietLogger(),
		Queues:            map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 1000}},
		Workers:           workers,
		FetchCooldown:     f.cooldown,
		FetchPollInterval: f.poll,
	})
	if err != nil {
		return fmt.Errorf("river client: %w", err)
	}
	start := time.Now()
	if err := client.Start(ctx); err != nil {
		return fmt.Errorf("river start: %w", err)
	}
	werr := tr.wait(ctx, drainTimeout(n))
	el := time.Since(start)
	stopCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := client.Stop(stopCtx); err != nil {
		s.logf("river stop: %v", err)
	}
	c := tr.counts_()
	if werr != nil {
		s.fail("river drain run %d (%s): %v", run+1, f, werr)
	} else if err := c.check(true); err != nil {
		s.fail("river drain run %d (%s): %v", run+1, f, err)
	}
	sr.add(rate(n, el), &c)
	return nil
}

// drainTimeout bounds a drain of n entries: at 200 entries/s it fails.
func drainTimeout(n int) time.Duration {
	return time.Duration(n/200+30) * time.Second
}
