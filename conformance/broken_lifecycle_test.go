package conformance_test

import "context"

// lifecycleVariants break Close, contexts and the closed backend's empty
// inputs, whatever the method (through ctx and emptyOK below, which most
// methods call).
var lifecycleVariants = []variant{
	{"close-ignored", "Close does nothing, so every method keeps working", []string{"Lifecycle/EveryMethodFailsAfterClose", "Membership/FailsAfterClose", "PartitionInspector/FailsAfterClose", "Looker/FailsAfterClose"}},
	{"ignores-context", "every call runs with context.WithoutCancel", []string{"Lifecycle/CancelledContextChangesNothing", "PartitionInspector/CancelledContextReturnsItsError", "Looker/CancelledContextReturnsItsError"}},
	{"closed-empty-inputs-ok", "calls with empty inputs return nil without checking Close", []string{"Lifecycle/EmptyInputsFailAfterClose"}},
}

func (w *broken) ctx(ctx context.Context) context.Context {
	if w.variant == "ignores-context" {
		return context.WithoutCancel(ctx)
	}
	return ctx
}

// emptyOK is the closed-empty-inputs-ok variant: calls with nothing to do
// return nil before the backend sees them.
func (w *broken) emptyOK(n int) bool {
	return w.variant == "closed-empty-inputs-ok" && n == 0
}

func (w *broken) Close() error {
	if w.variant == "close-ignored" {
		return nil
	}
	return w.Backend.Close()
}
