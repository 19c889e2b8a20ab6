package conformance_test

import (
	"context"
	"time"

	"github.com/outboxrelay/outbox"
)

// notifierVariants break Notifications.
var notifierVariants = []variant{
	{"notifies-on-append", "Notifications also fire when AppendInTx is called, before (and without) a commit", []string{"Notifier/ArrivesAfterCommit", "Notifier/NoneForRollback"}},
	{"notifies-partition-zero", "Notifications sends partition 0 for every commit, whichever partitions it appended to", []string{"Notifier/CarriesThePartitionAppendedTo", "Notifier/CarriesEveryPartitionOfATransaction"}},
	{"notifies-first-partition-of-commit", "Notifications sends only the first partition of a commit that appended to several", []string{"Notifier/CarriesEveryPartitionOfATransaction"}},
	{"notifications-never-closed", "the Notifications channel is not closed when its context is done or the backend is closed", []string{"Notifier/ClosedWhenContextDone", "Lifecycle/EveryMethodFailsAfterClose"}},
}

func (w *broken) Notifications(ctx context.Context) (<-chan int, error) {
	real, err := w.Backend.Notifications(w.ctx(ctx))
	if err != nil {
		return real, err
	}
	switch w.variant {
	case "notifications-never-closed":
		out := make(chan int, 256)
		go func() {
			for p := range real {
				select {
				case out <- p:
				default:
				}
			}
		}()
		return out, nil
	case "notifies-on-append":
		return w.notifyOnAppend(real), nil
	case "notifies-partition-zero":
		out := make(chan int, 256)
		go func() {
			defer close(out)
			for range real {
				select {
				case out <- 0:
				default:
				}
			}
		}()
		return out, nil
	case "notifies-first-partition-of-commit":
		out := make(chan int, 256)
		go func() {
			defer close(out)
			for p := range real {
				select {
				case out <- p:
				default:
				}
				// The memory backend sends a commit's partitions at once:
				// drop what follows within 50ms.
				quiet := time.NewTimer(50 * time.Millisecond)
				for dropping := true; dropping; {
					select {
					case _, ok := <-real:
						if !ok {
							quiet.Stop()
							return
						}
					case <-quiet.C:
						dropping = false
					}
				}
			}
		}()
		return out, nil
	}
	return real, nil
}

// notifyOnAppend merges real with the values the notifies-on-append
// variant sends from AppendInTx.
func (w *broken) notifyOnAppend(real <-chan int) <-chan int {
	out := make(chan int, 256)
	extra := make(chan int, 1)
	w.mu.Lock()
	w.subs[extra] = struct{}{}
	w.mu.Unlock()
	go func() {
		defer close(out)
		defer func() {
			w.mu.Lock()
			delete(w.subs, extra)
			w.mu.Unlock()
		}()
		for {
			var p int
			select {
			case v, ok := <-real:
				if !ok {
					return
				}
				p = v
			case p = <-extra:
			}
			select {
			case out <- p:
			default:
			}
		}
	}()
	return out
}

// notifySubscribers is the notifies-on-append variant's AppendInTx: every
// Notifications channel gets AllPartitions at once, commit or not.
func (w *broken) notifySubscribers() {
	w.mu.Lock()
	defer w.mu.Unlock()
	for ch := range w.subs {
		select {
		case ch <- outbox.AllPartitions:
		default:
		}
	}
}
