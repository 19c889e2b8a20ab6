package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outboxrelay/outbox/chaos/internal/servers"
	"github.com/outboxrelay/outbox/chaos/internal/soak"
)

// What the soak reads every sample, the consumer that measures latency,
// and the faults.

// consume reads every record of the topic as it comes, counts it, and
// records its commit-to-publish latency: the record's timestamp (set by
// the relay's Kafka client when it produces, to the millisecond) minus
// the appender's stamp (set just before the append). Same machine, same
// clock. It returns when ctx ends.
func (r *soakRun) consume(ctx context.Context) error {
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(strings.Split(r.broker.Brokers(), ",")...),
		kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchMaxWait(200*time.Millisecond),
	)
	if err != nil {
		return fmt.Errorf("latency consumer: %w", err)
	}
	defer cl.Close()
	for ctx.Err() == nil {
		fs := cl.PollFetches(ctx)
		fs.EachRecord(func(rec *kgo.Record) {
			r.delivered.Add(1)
			for _, h := range rec.Headers {
				if h.Key != stampHeader {
					continue
				}
				ns, err := strconv.ParseInt(string(h.Value), 10, 64)
				if err != nil {
					return
				}
				d := max(rec.Timestamp.Sub(time.Unix(0, ns)), 0)
				if lat := r.latencies(); lat != nil {
					lat.Observe(rec.Timestamp, d)
				}
			}
		})
	}
	return nil
}

func (r *soakRun) latencies() *soak.Latencies {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.lat
}

// takeSample reads everything a sample holds: the relays, the backlog
// and the store at once, each with its own time limit (a loaded machine
// makes `outbox status` slow; it must not cost the store's figures).
// Values it cannot read are left out of the sample (and logged).
func (r *soakRun) takeSample(ctx context.Context, start time.Time) soak.Sample {
	now := time.Now()
	s := soak.Sample{At: now, T: now.Sub(start).Seconds()}
	if lat := r.latencies(); lat != nil {
		if st := lat.Take(); st.N > 0 {
			s.Set("latency_p50_ms", ms(st.P50))
			s.Set("latency_p99_ms", ms(st.P99))
			s.Set("latency_max_ms", ms(st.Max))
			s.Set("published", float64(st.N))
		}
	}
	limit := r.cfg.sample - time.Second
	probes := []func(ctx context.Context, s *soak.Sample){
		r.sampleRelays,
		func(ctx context.Context, s *soak.Sample) {
			// The relays' gauge is the backlog; `outbox status` is the
			// fallback for relays without one (the leak control's).
			if r.spec.control == controlLeak {
				return
			}
			if st, err := r.status(ctx); err == nil {
				s.Set(soak.SeriesBacklog, float64(st.Total.Pending))
			} else {
				r.logf("sample: %v", err)
			}
		},
		func(ctx context.Context, s *soak.Sample) {
			var err error
			if r.spec.backend == backendNamePostgres {
				err = r.samplePostgres(ctx, s)
			} else {
				err = r.sampleRedis(ctx, s)
			}
			if err != nil {
				r.logf("sample: %s: %v", r.spec.backend, err)
			}
		},
	}
	parts := make([]soak.Sample, len(probes))
	var wg sync.WaitGroup
	for i, probe := range probes {
		wg.Go(func() {
			pctx, cancel := context.WithTimeout(ctx, limit)
			defer cancel()
			probe(pctx, &parts[i])
		})
	}
	wg.Wait()
	for i, p := range parts {
		for k, v := range p.Values {
			if _, have := s.Values[k]; have && i > 0 && k == soak.SeriesBacklog {
				continue // the relays' gauge came first
			}
			if g, ok := p.Gens[k]; ok {
				s.SetGen(k, v, g)
			} else {
				s.Set(k, v)
			}
		}
	}
	return s
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// sampleRelays reads each running relay's RSS (/proc/PID/status) and,
// from its /metrics, go_goroutines and outbox_retention_removed_total.
func (r *soakRun) sampleRelays(ctx context.Context, s *soak.Sample) {
	r.mu.Lock()
	rs := append([]*soakRelay(nil), r.relays...)
	r.mu.Unlock()
	for _, rp := range rs {
		if rp == nil {
			continue
		}
		if done, _ := rp.p.Exited(); done {
			continue
		}
		if rss, err := vmRSS(rp.p.PID()); err == nil {
			s.SetGen(soak.SeriesRSS+":"+rp.name, float64(rss), rp.gen)
		}
		if rp.metrics == "" {
			continue
		}
		m, err := scrape(ctx, rp.metrics)
		if err != nil {
			r.logf("sample: %s /metrics: %v", rp.name, err)
			continue
		}
		if g, ok := m["go_goroutines"]; ok {
			s.SetGen(soak.SeriesGoroutines+":"+rp.name, g, rp.gen)
		}
		// The outbox's pending gauge, the whole outbox's (each relay
		// samples it): the backlog, the largest any relay reports.
		if p, ok := m["outbox_pending"]; ok {
			if cur, seen := s.Values[soak.SeriesBacklog]; !seen || p > cur {
				s.Set(soak.SeriesBacklog, p)
			}
		}
		if v, ok := m["outbox_retention_removed_total:archived"]; ok {
			r.mu.Lock()
			// A restarted relay's counter starts over.
			if v >= rp.removed {
				r.removed += v - rp.removed
			} else {
				r.removed += v
			}
			rp.removed = v
			r.mu.Unlock()
		}
	}
	if r.spec.backend == backendNamePostgres && r.spec.control == "" {
		r.mu.Lock()
		s.Set("retention_removed", r.removed)
		r.mu.Unlock()
	}
}

// vmRSS is the resident memory of process pid in bytes.
func vmRSS(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			f := strings.Fields(v) // "12345 kB"
			if len(f) >= 1 {
				kb, err := strconv.ParseInt(f[0], 10, 64)
				return kb << 10, err
			}
		}
	}
	return 0, fmt.Errorf("no VmRSS in /proc/%d/status", pid)
}

// scrape reads the Prometheus text of http://addr/metrics: go_goroutines,
// and the sum of outbox_retention_removed_total per kind
// ("outbox_retention_removed_total:archived").
func scrape(ctx context.Context, addr string) (map[string]float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("status %s", resp.Status)
	}
	return parseMetrics(resp.Body)
}

// parseMetrics picks what the soak reads out of a Prometheus text body.
func parseMetrics(body io.Reader) (map[string]float64, error) {
	out := map[string]float64{}
	sc := bufio.NewScanner(body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		name, val := line[:i], line[i+1:]
		v, err := strconv.ParseFloat(val, 64)
		if err != nil {
			continue
		}
		switch {
		case name == "go_goroutines":
			out[name] = v
		case name == "outbox_pending" || strings.HasPrefix(name, "outbox_pending{"):
			out["outbox_pending"] += v
		case strings.HasPrefix(name, "outbox_retention_removed_total{"):
			kind := "all"
			if _, rest, ok := strings.Cut(name, `kind="`); ok {
				kind, _, _ = strings.Cut(rest, `"`)
			}
			out["outbox_retention_removed_total:"+kind] += v
		}
	}
	return out, sc.Err()
}

// samplePostgres reads the outbox table's and the archive's size with
// indexes, dead tuples and vacuums, and the archive's row count.
func (r *soakRun) samplePostgres(ctx context.Context, s *soak.Sample) error {
	c := r.pool
	rows, err := c.Query(ctx, `
		SELECT relname, pg_total_relation_size(relid), n_dead_tup, autovacuum_count + vacuum_count
		FROM pg_stat_user_tables
		WHERE schemaname = 'public' AND relname IN ('outbox', 'outbox_archive')`)
	if err != nil {
		return err
	}
	for rows.Next() {
		var (
			name              string
			size, dead, vacua int64
		)
		if err := rows.Scan(&name, &size, &dead, &vacua); err != nil {
			return err
		}
		s.Set(soak.SeriesTableBytes+":"+name, float64(size))
		s.Set(soak.SeriesDeadTuples+":"+name, float64(dead))
		s.Set("vacuums:"+name, float64(vacua))
	}
	if err := rows.Err(); err != nil {
		return err
	}
	var n int64
	if err := c.QueryRow(ctx, "SELECT count(*) FROM public.outbox_archive").Scan(&n); err == nil {
		s.Set("archive_rows", float64(n))
	}
	return nil
}

// sampleRedis reads used_memory and mem_fragmentation_ratio.
func (r *soakRun) sampleRedis(ctx context.Context, s *soak.Sample) error {
	info, err := r.rc.Info(ctx, "memory").Result()
	if err != nil {
		return err
	}
	for line := range strings.SplitSeq(info, "\r\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		f, err := strconv.ParseFloat(v, 64)
		if err != nil {
			continue
		}
		switch k {
		case "used_memory":
			s.Set(soak.SeriesUsedMemory, f)
		case "mem_fragmentation_ratio":
			s.Set("fragmentation", f)
		}
	}
	return nil
}

// restartRelay stops a slot's relay with SIGTERM, waits for it to exit,
// and starts its next generation.
func (r *soakRun) restartRelay(slot int) error {
	r.mu.Lock()
	rp := r.relays[slot]
	r.mu.Unlock()
	r.fault("relay-restart", "%s (PID %d) SIGTERM, then started again", rp.name, rp.p.PID())
	if err := rp.p.Terminate(30 * time.Second); err != nil {
		r.logf("%s: %v", rp.name, err)
	}
	return r.startRelay(slot)
}

// killConnections ends a slot's store connections: pg_terminate_backend
// of its sessions by application_name, or CLIENT KILL of its Redis
// connections by client name. Only the run's private server is touched.
func (r *soakRun) killConnections(ctx context.Context, slot int) error {
	name := r.sessionName(slot)
	switch r.spec.backend {
	case backendNamePostgres:
		n, err := servers.TerminateBackends(ctx, r.storeURL, name)
		if err != nil {
			return err
		}
		r.fault("conn-kill", "pg_terminate_backend of %d sessions of relay-%d", n, slot)
	case backendNameRedis:
		c := redis.NewClient(&redis.Options{Addr: r.rds.Addr()})
		defer c.Close()
		list, err := c.ClientList(ctx).Result()
		if err != nil {
			return err
		}
		n := 0
		for line := range strings.SplitSeq(list, "\n") {
			var id, cname string
			for f := range strings.FieldsSeq(line) {
				if v, ok := strings.CutPrefix(f, "id="); ok {
					id = v
				}
				if v, ok := strings.CutPrefix(f, "name="); ok {
					cname = v
				}
			}
			if cname != name || id == "" {
				continue
			}
			if err := c.Do(ctx, "CLIENT", "KILL", "ID", id).Err(); err == nil {
				n++
			}
		}
		r.fault("conn-kill", "CLIENT KILL of %d connections of relay-%d", n, slot)
	}
	return nil
}

// fault records a fault in the history and the timeline.
func (r *soakRun) fault(kind, format string, args ...any) {
	what := kind + ": " + fmt.Sprintf(format, args...)
	_ = r.faults.Fault(time.Now(), what)
	_ = r.faults.Flush()
	r.event("%s", what)
}
