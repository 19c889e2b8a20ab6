package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Limits on what one call may arm, so a typo cannot wedge a broker for a
// day.
const (
	maxCount = 1_000_000
	maxDelay = 10 * time.Minute
)

// errDropped is what the control function returns to make kfake close the
// connection without answering.
var errDropped = errors.New("kfakebroker: connection dropped by the -control-file fault injector")

// armedError is a run of produce requests to answer with one error.
type armedError struct {
	left int
	err  *kerr.Error
}

// armedDelay is a run of produce requests to hold for one duration.
type armedDelay struct {
	left int
	d    time.Duration
}

// Applied counts the faults applied since the broker started (Reset does
// not clear it).
type Applied struct {
	ProduceErrors      int64 `json:"produce_errors"`
	ProduceDelays      int64 `json:"produce_delays"`
	DroppedConnections int64 `json:"dropped_connections"`
}

// Armed counts the faults still to apply.
type Armed struct {
	ProduceErrors   int `json:"produce_errors"`
	ProduceDelays   int `json:"produce_delays"`
	DropConnections int `json:"drop_connections"`
}

// Stats is the body of GET /stats.
type Stats struct {
	Applied Applied `json:"applied"`
	Armed   Armed   `json:"armed"`
}

// injector holds the armed faults and applies them from a kfake control
// function on every Produce request. Its methods are safe for concurrent
// use: the HTTP handlers arm it while kfake's control goroutines consume.
type injector struct {
	c *kfake.Cluster

	mu      sync.Mutex
	errs    []armedError // FIFO: earlier arms apply first
	delays  []armedDelay // FIFO
	drops   int
	applied Applied
	wake    chan struct{} // closed by reset and close: cuts held requests short
	closed  bool
}

// newInjector installs the injector's control function on c. One control
// function, kept forever, serves every Produce request; with nothing armed
// it declines the request and kfake handles it as usual.
func newInjector(c *kfake.Cluster) *injector {
	in := &injector{c: c, wake: make(chan struct{})}
	c.ControlKey(int16(kmsg.Produce), in.control)
	return in
}

type faultKind int

const (
	noFault faultKind = iota
	dropFault
	errorFault
	delayFault
)

// take consumes the next armed fault for one Produce request. A request
// gets at most one fault; a drop goes before an error, an error before a
// delay.
func (in *injector) take() (kind faultKind, err *kerr.Error, d time.Duration, wake <-chan struct{}) {
	in.mu.Lock()
	defer in.mu.Unlock()
	switch {
	case in.drops > 0:
		in.drops--
		in.applied.DroppedConnections++
		return dropFault, nil, 0, nil
	case len(in.errs) > 0:
		e := &in.errs[0]
		err = e.err
		if e.left--; e.left == 0 {
			in.errs = in.errs[1:]
		}
		in.applied.ProduceErrors++
		return errorFault, err, 0, nil
	case len(in.delays) > 0:
		e := &in.delays[0]
		d = e.d
		if e.left--; e.left == 0 {
			in.delays = in.delays[1:]
		}
		in.applied.ProduceDelays++
		return delayFault, nil, d, in.wake
	}
	return noFault, nil, 0, nil
}

// control is the kfake control function for Produce requests. It runs on
// a goroutine of its own while kfake's cluster loop waits for it, so it
// must not block except through SleepControl.
func (in *injector) control(req kmsg.Request) (kmsg.Response, error, bool) {
	in.c.KeepControl() // serve every request, not just the first
	kind, kerrv, d, wake := in.take()
	switch kind {
	case dropFault:
		// kfake closes the connection instead of answering.
		return nil, errDropped, true
	case errorFault:
		return produceError(req.(*kmsg.ProduceRequest), kerrv), nil, true
	case delayFault:
		// SleepControl parks this request (and the requests queued
		// behind it on the same connection) and lets the cluster serve
		// every other connection meanwhile; declining afterwards makes
		// kfake handle the request as usual.
		in.c.SleepControl(func() {
			t := time.NewTimer(d)
			defer t.Stop()
			select {
			case <-t.C:
			case <-wake:
			}
		})
	}
	return nil, nil, false
}

// produceError answers every partition of req with err and writes
// nothing.
func produceError(req *kmsg.ProduceRequest, err *kerr.Error) *kmsg.ProduceResponse {
	resp := req.ResponseKind().(*kmsg.ProduceResponse)
	for _, rt := range req.Topics {
		t := kmsg.NewProduceResponseTopic()
		t.Topic, t.TopicID = rt.Topic, rt.TopicID
		for _, rp := range rt.Partitions {
			p := kmsg.NewProduceResponseTopicPartition()
			p.Partition = rp.Partition
			p.ErrorCode = err.Code
			p.BaseOffset = -1
			t.Partitions = append(t.Partitions, p)
		}
		resp.Topics = append(resp.Topics, t)
	}
	return resp
}

func (in *injector) armErrors(n int, err *kerr.Error) {
	in.mu.Lock()
	defer in.mu.Unlock()
	in.errs = append(in.errs, armedError{left: n, err: err})
}

func (in *injector) armDelays(n int, d time.Duration) {
	in.mu.Lock()
	defer in.mu.Unlock()
	in.delays = append(in.delays, armedDelay{left: n, d: d})
}

func (in *injector) armDrops(n int) {
	in.mu.Lock()
	defer in.mu.Unlock()
	in.drops += n
}

// reset disarms everything and releases the requests being held, which
// kfake then handles as usual. It returns what was still armed.
func (in *injector) reset() Armed {
	in.mu.Lock()
	defer in.mu.Unlock()
	was := in.armedLocked()
	in.errs, in.delays, in.drops = nil, nil, 0
	if !in.closed {
		close(in.wake)
		in.wake = make(chan struct{})
	}
	return was
}

// close releases held requests for good; later delays do not hold.
func (in *injector) close() {
	in.mu.Lock()
	defer in.mu.Unlock()
	if !in.closed {
		in.closed = true
		close(in.wake)
	}
}

func (in *injector) stats() Stats {
	in.mu.Lock()
	defer in.mu.Unlock()
	return Stats{Applied: in.applied, Armed: in.armedLocked()}
}

func (in *injector) armedLocked() Armed {
	a := Armed{DropConnections: in.drops}
	for _, e := range in.errs {
		a.ProduceErrors += e.left
	}
	for _, e := range in.delays {
		a.ProduceDelays += e.left
	}
	return a
}

// kerrByName maps every error name kerr knows ("NOT_ENOUGH_REPLICAS") to
// its error.
var kerrByName = func() map[string]*kerr.Error {
	m := map[string]*kerr.Error{}
	for code := -1; code < 1000; code++ {
		if e := kerr.TypedErrorForCode(int16(code)); e != nil && e.Code == int16(code) {
			m[e.Message] = e
		}
	}
	return m
}()

// armedReply is the body of a 200 answer to an arming call.
type armedReply struct {
	Fault string `json:"fault"`
	Count int    `json:"count,omitempty"`
	Code  string `json:"code,omitempty"`
	Delay string `json:"delay,omitempty"`
	// Disarmed is what /reset disarmed.
	Disarmed *Armed `json:"disarmed,omitempty"`
	// Armed is everything armed after the call.
	Armed Armed `json:"armed"`
}

// handler serves the control API; see the package doc.
func (in *injector) handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/produce-errors", func(w http.ResponseWriter, r *http.Request) {
		q, ok := query(w, r, http.MethodPost, "count", "code")
		if !ok {
			return
		}
		n, err := count(q)
		if err != nil {
			badRequest(w, err)
			return
		}
		name := strings.ToUpper(strings.TrimSpace(q.Get("code")))
		e, known := kerrByName[name]
		switch {
		case name == "":
			badRequest(w, errors.New("code is required: a Kafka error name such as NOT_ENOUGH_REPLICAS, NOT_LEADER_FOR_PARTITION or REQUEST_TIMED_OUT"))
			return
		case !known:
			badRequest(w, fmt.Errorf("code %q is not a Kafka error name; use one such as NOT_ENOUGH_REPLICAS, NOT_LEADER_FOR_PARTITION or REQUEST_TIMED_OUT", q.Get("code")))
			return
		}
		in.armErrors(n, e)
		reply(w, armedReply{Fault: "produce-errors", Count: n, Code: e.Message, Armed: in.stats().Armed})
	})
	mux.HandleFunc("/produce-delay", func(w http.ResponseWriter, r *http.Request) {
		q, ok := query(w, r, http.MethodPost, "count", "delay")
		if !ok {
			return
		}
		n, err := count(q)
		if err != nil {
			badRequest(w, err)
			return
		}
		d, err := time.ParseDuration(q.Get("delay"))
		if err != nil || d <= 0 || d > maxDelay {
			badRequest(w, fmt.Errorf("delay %q: want a Go duration above 0 and at most %v, such as 500ms or 2s", q.Get("delay"), maxDelay))
			return
		}
		in.armDelays(n, d)
		reply(w, armedReply{Fault: "produce-delay", Count: n, Delay: d.String(), Armed: in.stats().Armed})
	})
	mux.HandleFunc("/drop-connections", func(w http.ResponseWriter, r *http.Request) {
		q, ok := query(w, r, http.MethodPost, "count")
		if !ok {
			return
		}
		n, err := count(q)
		if err != nil {
			badRequest(w, err)
			return
		}
		in.armDrops(n)
		reply(w, armedReply{Fault: "drop-connections", Count: n, Armed: in.stats().Armed})
	})
	mux.HandleFunc("/reset", func(w http.ResponseWriter, r *http.Request) {
		if _, ok := query(w, r, http.MethodPost); !ok {
			return
		}
		was := in.reset()
		reply(w, armedReply{Fault: "reset", Disarmed: &was, Armed: in.stats().Armed})
	})
	mux.HandleFunc("/stats", func(w http.ResponseWriter, r *http.Request) {
		if _, ok := query(w, r, http.MethodGet); !ok {
			return
		}
		reply(w, in.stats())
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, fmt.Sprintf("kfakebroker: no endpoint %s; use POST /produce-errors, /produce-delay, /drop-connections, /reset or GET /stats", r.URL.Path), http.StatusNotFound)
	})
	return mux
}

// query checks the method and that the query string has only the
// parameters allowed (a misspelt one is an error, not a default); it
// answers the request itself when they are wrong.
func query(w http.ResponseWriter, r *http.Request, method string, allowed ...string) (url.Values, bool) {
	if r.Method != method {
		w.Header().Set("Allow", method)
		http.Error(w, fmt.Sprintf("kfakebroker: %s takes %s, not %s", r.URL.Path, method, r.Method), http.StatusMethodNotAllowed)
		return nil, false
	}
	q, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		badRequest(w, fmt.Errorf("query string: %v", err))
		return nil, false
	}
	for k, v := range q {
		if !contains(allowed, k) {
			badRequest(w, fmt.Errorf("unknown parameter %q; %s takes %s", k, r.URL.Path, paramList(allowed)))
			return nil, false
		}
		if len(v) > 1 {
			badRequest(w, fmt.Errorf("parameter %q given %d times", k, len(v)))
			return nil, false
		}
	}
	return q, true
}

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

func paramList(allowed []string) string {
	if len(allowed) == 0 {
		return "no parameters"
	}
	return strings.Join(allowed, " and ")
}

func count(q url.Values) (int, error) {
	s := q.Get("count")
	if s == "" {
		return 0, errors.New("count is required: how many requests to fault (1 or more)")
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || n > maxCount {
		return 0, fmt.Errorf("count %q: want an integer from 1 to %d", s, maxCount)
	}
	return n, nil
}

func badRequest(w http.ResponseWriter, err error) {
	http.Error(w, "kfakebroker: "+err.Error(), http.StatusBadRequest)
}

func reply(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

// controlServer serves in's API on 127.0.0.1 at a port it picks and
// returns its address; stop shuts it down.
func controlServer(in *injector) (addr string, stop func(), err error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, fmt.Errorf("control endpoint: %w", err)
	}
	srv := &http.Server{
		Handler:           in.handler(),
		ReadHeaderTimeout: 5 * time.Second,
		ErrorLog:          log.New(io.Discard, "", 0),
	}
	go func() { _ = srv.Serve(ln) }()
	stop = func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	}
	return ln.Addr().String(), stop, nil
}

// writeFileAtomic writes content to path through a temporary name and a
// rename, so a reader never sees part of it.
func writeFileAtomic(path, content string) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return err
	}
	_, err = tmp.WriteString(content)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		_ = os.Remove(tmp.Name())
	}
	return err
}
