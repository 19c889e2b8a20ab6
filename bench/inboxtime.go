package main

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outboxrelay/outbox/inbox"
)

// phases adds up where a consumer's transactions spend their time: the
// mean per transaction of each phase (begin, each Store call, the effect
// rows, commit) is what a row's note reports, so a cost ratio can be read
// as round trips and statements.
type phases struct {
	mu    sync.Mutex
	order []string
	total map[string]time.Duration
	txs   int
}

func newPhases() *phases { return &phases{total: map[string]time.Duration{}} }

func (p *phases) add(name string, d time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, ok := p.total[name]; !ok {
		p.order = append(p.order, name)
	}
	p.total[name] += d
}

func (p *phases) tx() {
	p.mu.Lock()
	p.txs++
	p.mu.Unlock()
}

// String is "begin 0.41 ms, Record 0.52 ms, ..." per transaction.
func (p *phases) String() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.txs == 0 {
		return ""
	}
	parts := make([]string, len(p.order))
	for i, name := range p.order {
		parts[i] = fmt.Sprintf("%s %.2f", name, float64(p.total[name])/float64(p.txs)/float64(time.Millisecond))
	}
	return "ms per tx: " + strings.Join(parts, ", ")
}

// timedTx runs fn in a transaction of run (a Store's InTx, or a plain
// consumer's) and adds its begin (until fn starts) and its commit (from
// fn's return until run returns) to p.
func timedTx[Tx any](ctx context.Context, p *phases, run func(context.Context, func(context.Context, Tx) error) error, fn func(context.Context, Tx) error) error {
	t0 := time.Now()
	var t1 time.Time
	err := run(ctx, func(ctx context.Context, tx Tx) error {
		p.add("begin", time.Since(t0))
		err := fn(ctx, tx)
		t1 = time.Now()
		return err
	})
	if err == nil {
		p.add("commit", time.Since(t1))
		p.tx()
	}
	return err
}

// timed returns side with its store's transactions and calls and its
// effect rows timed into p (its plain consumer times itself). The timed
// store implements the store's optional interfaces (inbox.KeyRecorder,
// inbox.Finisher) exactly when the store does, unless split: then it
// hides them, and the Inbox makes a call per Store method.
func (side *inboxSide[Tx]) timed(p *phases, split bool) *inboxSide[Tx] {
	t := *side
	t.store = timeStore(side.store, p, split)
	t.effect = func(ctx context.Context, tx Tx, rec *kgo.Record) error {
		defer p.since("effect", time.Now())
		return side.effect(ctx, tx, rec)
	}
	return &t
}

func (p *phases) since(name string, t0 time.Time) { p.add(name, time.Since(t0)) }

// timedStore is a Store that adds the time of each of its calls to p.
// It has the methods of inbox.Store only; timeStore wraps it in the
// types that add the optional interfaces of the store it times.
type timedStore[Tx any] struct {
	inbox.Store[Tx]
	p *phases
}

// timeStore returns st timed into p, with the optional interfaces st
// implements, or none of them with split.
func timeStore[Tx any](st inbox.Store[Tx], p *phases, split bool) inbox.Store[Tx] {
	base := timedStore[Tx]{Store: st, p: p}
	kr, isKR := st.(inbox.KeyRecorder[Tx])
	fin, isFin := st.(inbox.Finisher[Tx])
	switch {
	case split:
		return base
	case isKR && isFin:
		return timedRecorderFinisher[Tx]{timedRecorder[Tx]{base, kr}, fin}
	case isKR:
		return timedRecorder[Tx]{base, kr}
	case isFin:
		return timedFinisher[Tx]{base, fin}
	}
	return base
}

// timedRecorder is a timedStore of a store that is an inbox.KeyRecorder.
type timedRecorder[Tx any] struct {
	timedStore[Tx]
	kr inbox.KeyRecorder[Tx]
}

func (s timedRecorder[Tx]) RecordWithKeySeqs(ctx context.Context, tx Tx, ids, keys []string) ([]bool, map[string]int64, error) {
	defer s.p.since("RecordWithKeySeqs", time.Now())
	return s.kr.RecordWithKeySeqs(ctx, tx, ids, keys)
}

// timedFinisher is a timedStore of a store that is an inbox.Finisher.
type timedFinisher[Tx any] struct {
	timedStore[Tx]
	fin inbox.Finisher[Tx]
}

func (s timedFinisher[Tx]) Finish(ctx context.Context, tx Tx, seqs map[string]int64, offsets []inbox.Offset) error {
	defer s.p.since("Finish", time.Now())
	return s.fin.Finish(ctx, tx, seqs, offsets)
}

// timedRecorderFinisher is a timedStore of a store that is both.
type timedRecorderFinisher[Tx any] struct {
	timedRecorder[Tx]
	fin inbox.Finisher[Tx]
}

func (s timedRecorderFinisher[Tx]) Finish(ctx context.Context, tx Tx, seqs map[string]int64, offsets []inbox.Offset) error {
	defer s.p.since("Finish", time.Now())
	return s.fin.Finish(ctx, tx, seqs, offsets)
}

var (
	_ inbox.KeyRecorder[*inbox.MemoryTx] = timedRecorderFinisher[*inbox.MemoryTx]{}
	_ inbox.Finisher[*inbox.MemoryTx]    = timedRecorderFinisher[*inbox.MemoryTx]{}
)

func (s timedStore[Tx]) InTx(ctx context.Context, fn func(ctx context.Context, tx Tx) error) error {
	return timedTx(ctx, s.p, s.Store.InTx, fn)
}

func (s timedStore[Tx]) Record(ctx context.Context, tx Tx, ids []string) ([]bool, error) {
	defer s.p.since("Record", time.Now())
	return s.Store.Record(ctx, tx, ids)
}

func (s timedStore[Tx]) KeySeqs(ctx context.Context, tx Tx, keys []string) (map[string]int64, error) {
	defer s.p.since("KeySeqs", time.Now())
	return s.Store.KeySeqs(ctx, tx, keys)
}

func (s timedStore[Tx]) SetKeySeqs(ctx context.Context, tx Tx, seqs map[string]int64) error {
	defer s.p.since("SetKeySeqs", time.Now())
	return s.Store.SetKeySeqs(ctx, tx, seqs)
}

func (s timedStore[Tx]) SaveOffsets(ctx context.Context, tx Tx, offsets []inbox.Offset) error {
	defer s.p.since("SaveOffsets", time.Now())
	return s.Store.SaveOffsets(ctx, tx, offsets)
}
