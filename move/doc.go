// Package move carries a live outbox to another one: to another backend
// (Postgres to Redis and back), or to the same backend under another name
// with another partition count (resharding). It works on any pair of
// stores that implement the optional interfaces of the root package: the
// source [outbox.Exporter], [outbox.Sealer] and [outbox.Inspector]; the
// destination [outbox.Importer], [outbox.Holder], [outbox.Looker] and
// [outbox.Inspector]. A store that lacks one is refused with an error
// naming it. `outbox move` is its command line.
//
// # Protocol
//
// A move keeps every entry (whatever its state: due, scheduled, waiting
// for a retry, parked, with its attempts, last error and due time) and
// each key's order, while services go on appending:
//
//  1. Prepare ([Prepare], `outbox move --prepare`) holds the destination
//     ([outbox.Holder.Hold]) with a reason that names the move: its ID and
//     the source ([Options.SourceName], a name without a password). It
//     refuses a destination that is not empty unless it is already held
//     by a move from this source (running Prepare again is a no-op), and
//     a destination held for another reason. Then deploy the
//     destination's relays: they fetch nothing while it is held.
//  2. Roll the services over, one by one, to append to the destination.
//     The source's relays keep delivering the source meanwhile; what the
//     services append to the destination waits there.
//  3. Once every service appends to the destination, [Run] (`outbox
//     move`) seals the source ([outbox.Sealer.Seal]): a straggler, a
//     service instance still configured for the source, fails its append
//     with [outbox.ErrSealed] instead of writing where nobody looks. Stop
//     the source's relays after the seal (SIGTERM releases their leases at
//     once). Run takes each source partition's lease as [Options.Owner],
//     waiting while another owner holds it (it reports who and until when
//     through [Options.Progress] and [Options.Logger]), and moves the
//     partition batch by batch: [outbox.Exporter.ExportBatch], then
//     [outbox.Importer.Import] into the destination, then
//     [outbox.Exporter.RemoveExported], until the partition is empty,
//     renewing the lease as it goes. When every partition is empty and the
//     source is still sealed (Run checks), it releases the destination
//     ([outbox.Holder.Unhold]): its relays deliver each key's moved
//     entries before the entries appended to it (Import puts imported
//     entries ahead of appended ones).
//
// [Inspect] (`outbox move --verify`, `--dry-run`) reports both sides:
// counts by state, whether the source is sealed, whether the destination
// is held and by which move. [Release] (`--release`) unholds the
// destination to roll a move back before the seal; [Unseal] (`--unseal`)
// rolls the seal back.
//
// # Resuming
//
// Run keeps no state of its own: the seal, the hold and the entries are in
// the two stores. Killed at any point and run again, it finishes the move;
// nothing is lost and nothing is imported twice. An entry leaves the source
// only after Import returned for it, and Import is idempotent by ID, so a
// crash between Import and RemoveExported exports the batch again and
// imports it as skips ([Result.Skipped]). The default owner is the fixed
// [DefaultOwner], so a resumed run retakes at once the leases its killed
// predecessor still held (a store extends a lease its owner asks for
// again); with another owner it waits for them to expire.
//
// # Conflicts
//
// When Import adds fewer entries than it was given, the destination
// already held some of their IDs. Run looks each entry of the batch up
// there ([outbox.Looker]): the same topic, key, payload and headers is a
// resumed import, fine; anything else is a conflict, and Run stops with a
// [*ConflictError] naming the ID, leaving that batch in the source. The
// batch's other entries may already be in the destination too (a resumed
// run skips them), except the later entries of the conflicting entry's
// key: Run cancels those in the destination (when it is an
// [outbox.Canceler]; they are still in the source), so they are not ahead
// of the entry the conflict kept out. Resolve the conflict (cancel one of
// the two entries with `outbox cancel ID`) and run again: the key's
// entries are imported in their order, whichever copy was cancelled.
//
// # Ordering
//
// Within a source partition, ExportBatch returns entries in append order,
// and Run imports each batch before it exports the next, so the entries
// of a key reach the destination in their order, whatever the two
// partition counts. Partitions are moved [Options.Workers] at a time; the
// entries of one key are all in one source partition.
package move
