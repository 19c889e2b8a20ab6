// Package ops is the operator logic the two front ends share: the `outbox`
// CLI (cmd/outbox) and the dashboard (package ui). It filters parked
// entries, parses the times and durations an operator writes, selects
// entries by ID or by filter, and requeues or cancels them in bounded
// steps, counting the results and reporting progress through a callback. It
// lists entries by state and the keys a failing entry blocks, a page at a
// time ([Entries], [Blocked]), checks and applies what an operator pauses
// or resumes ([ParsePauseTarget], [Pause], [Resume]), and joins the fleet's
// members with the partitions' leases ([JoinFleet], [LoadFleet]). It reads
// what a store tells of its upkeep: its tables or memory, its warnings and
// its archive's oldest entry ([ReadHealth]). It works through the SPI's
// optional operator interfaces ([outbox.Inspector], [outbox.Looker],
// [outbox.Canceler], [outbox.Lister], [outbox.Pauser],
// [outbox.MemberLister], [outbox.PartitionInspector],
// [outbox.HealthChecker], [outbox.ArchiveJanitor]) only, so it runs on
// every conforming backend.
//
// It is internal on purpose: it is the shared logic of our front ends, not
// an API we want to freeze. Library users who build their own tools call
// the SPI's Inspector, Looker and Canceler interfaces directly.
//
// # Errors
//
// Errors about an operator's input name the input by a neutral field name
// ([FieldError], [RangeError], [ErrNoTarget], [ErrTwoTargets]); each front end maps it to what the operator
// typed (the CLI's --since flag, the dashboard's since parameter). Errors
// of the store are returned as the store gave them, never wrapped here,
// together with the counts done before them, so each front end wraps them
// once in its own words; the one exception is [LookupError], which says
// which entry a re-check was looking up.
//
// # Front ends
//
// Where the CLI and the dashboard behave differently today, an option
// keeps each one's behaviour: the CLI cancels the entries a filter matched
// as they were when listed, the dashboard re-checks that each is still
// parked just before cancelling it ([CancelOptions.Recheck]); the CLI
// orders named entries by creation before requeueing them, the dashboard
// keeps the order it was given (the caller sorts with [ByCreation]).
package ops
