package outbox_test

import (
	"context"
	"testing"
	"time"

	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/outboxrelay/outbox"
	"github.com/outboxrelay/outbox/backends/memory"
)

// The appending span's context travels in the entry and the relay's publish
// span links back to it.
func TestRelayPublishSpanLinksToTheAppendingSpan(t *testing.T) {
	t.Parallel()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	defer tp.Shutdown(context.Background())

	ctx, appendSpan := tp.Tracer("service").Start(context.Background(), "place order")
	b := memory.New(memory.Options{})
	if err := b.Append(ctx, outbox.Entry{ID: "e1", Topic: "orders", Key: "o1"}); err != nil {
		t.Fatal(err)
	}
	appendSpan.End()

	got := make(chan outbox.Entry, 1)
	r, err := outbox.NewRelay(b, outbox.ChannelSink(got), outbox.RelayOptions{TracerProvider: tp, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	e := <-got
	if err := r.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	if e.Headers[outbox.HeaderTraceparent] == "" {
		t.Fatalf("published entry has no %s header: %v", outbox.HeaderTraceparent, e.Headers)
	}
	var publish sdktrace.ReadOnlySpan
	deadline := time.Now().Add(5 * time.Second)
	for publish == nil && time.Now().Before(deadline) {
		for _, s := range rec.Ended() {
			if s.Name() == outbox.SpanPublish {
				publish = s
			}
		}
	}
	if publish == nil {
		t.Fatal("no publish span was recorded")
	}
	links := publish.Links()
	if len(links) != 1 || links[0].SpanContext.TraceID() != appendSpan.SpanContext().TraceID() ||
		links[0].SpanContext.SpanID() != appendSpan.SpanContext().SpanID() {
		t.Fatalf("publish span links = %+v, want one link to the appending span %v", links, appendSpan.SpanContext())
	}
	if publish.Status().Code == codes.Error {
		t.Fatalf("a successful round has status %v", publish.Status())
	}
}
