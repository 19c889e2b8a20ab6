package ui_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"

	"github.com/outboxrelay/outbox"
	"github.com/outboxrelay/outbox/backends/memory"
	"github.com/outboxrelay/outbox/ui"
)

// Serve the dashboard over an in-memory outbox and read its overview.
func Example() {
	store := memory.New(memory.Options{Partitions: 4})
	defer store.Close()
	_ = store.Append(context.Background(), outbox.Entry{Topic: "orders", Key: "order-1", Payload: []byte(`{"total":42}`)})

	dash, err := ui.New(store, ui.Options{StoreName: "memory", Kind: "memory", ReadOnly: true})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer dash.Close()
	// In a program: go dash.Run(ctx); http.ListenAndServe("127.0.0.1:8080", dash)

	w := httptest.NewRecorder()
	dash.ServeHTTP(w, httptest.NewRequest("GET", "/api/overview", nil))
	var o struct {
		Store      string
		Partitions int
		ReadOnly   bool `json:"read_only"`
		Stats      struct{ Pending int64 }
	}
	_ = json.Unmarshal(w.Body.Bytes(), &o)
	fmt.Println(w.Code, o.Store, o.Partitions, o.ReadOnly, o.Stats.Pending)
	// Output: 200 memory 4 true 1
}
